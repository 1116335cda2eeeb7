/* Tests for common/status: every code's name, the message NUMLA_FAIL records, the traceback
 * NUMLA_CHECK / NUMLA_CHECK_GOTO build frame by frame (checked against the __LINE__s of the
 * calls below), truncation of over-long messages and traces, clear, and that each thread has
 * its own error. */
#include "test_util.h"

#include "common/status.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The names as documented in status.h's comments, written out independently. */
static void test_status_names(void)
{
    static const struct {
        numla_status s;
        const char *name;
    } want[] = {
        {NUMLA_STATUS_OK, "ok"},
        {NUMLA_STATUS_INVALID_ARG, "invalid argument"},
        {NUMLA_STATUS_OUT_OF_RANGE, "out of range"},
        {NUMLA_STATUS_NO_MEMORY, "out of memory"},
        {NUMLA_STATUS_KV_FULL, "KV cache full"},
        {NUMLA_STATUS_IO, "I/O error"},
        {NUMLA_STATUS_FORMAT, "format error"},
        {NUMLA_STATUS_UNSUPPORTED, "unsupported"},
        {NUMLA_STATUS_MPI, "MPI error"},
        {NUMLA_STATUS_INTERRUPTED, "interrupted"},
        {NUMLA_STATUS_INTERNAL, "internal error"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        NUMLA_ASSERT_MSG(!strcmp(numla_status_name(want[i].s), want[i].name),
                         "status %d is named '%s', not '%s'", (int)want[i].s,
                         numla_status_name(want[i].s), want[i].name);
    NUMLA_ASSERT_MSG(!strcmp(numla_status_name((numla_status)999), "unknown status"),
                     "an unknown code is named '%s'", numla_status_name((numla_status)999));
}

/* A three-deep failure: leaf fails, mid propagates with NUMLA_CHECK, top with
 * NUMLA_CHECK_GOTO; the lines are recorded where each macro is used. */
static int leaf_line, mid_line, top_line, top_cleanup_ran;

static numla_status leaf(int bad)
{
    leaf_line = __LINE__ + 2;
    if (bad)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "file %s: field '%s' is %d", "cfg.json", "n_heads", bad);
    return NUMLA_STATUS_OK;
}

static numla_status mid(int bad)
{
    mid_line = __LINE__ + 1;
    NUMLA_CHECK(leaf(bad));
    return NUMLA_STATUS_OK;
}

static numla_status top(int bad)
{
    numla_status s = NUMLA_STATUS_OK;
    top_line = __LINE__ + 1;
    NUMLA_CHECK_GOTO(mid(bad), s, done);
done:
    top_cleanup_ran = 1;
    return s;
}

static void test_fail_check_traceback(void)
{
    numla_error_clear();
    top_cleanup_ran = 0;
    CU_ASSERT_EQUAL(top(7), NUMLA_STATUS_FORMAT);
    CU_ASSERT_TRUE(top_cleanup_ran);
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "file cfg.json: field 'n_heads' is 7");
    char want[1024];
    snprintf(want, sizeof want, "  at leaf (%s:%d)\n  at mid (%s:%d)\n  at top (%s:%d)\n",
             __FILE__, leaf_line, __FILE__, mid_line, __FILE__, top_line);
    NUMLA_ASSERT_MSG(!strcmp(numla_error_trace(), want), "trace:\n%swanted:\n%s",
                     numla_error_trace(), want);

    /* success records nothing and leaves the last error alone */
    CU_ASSERT_EQUAL(top(0), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "file cfg.json: field 'n_heads' is 7");

    /* a new failure replaces message and trace */
    CU_ASSERT_EQUAL(leaf(3), NUMLA_STATUS_FORMAT);
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "file cfg.json: field 'n_heads' is 3");
    snprintf(want, sizeof want, "  at leaf (%s:%d)\n", __FILE__, leaf_line);
    CU_ASSERT_STRING_EQUAL(numla_error_trace(), want);

    numla_error_clear();
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "");
    CU_ASSERT_STRING_EQUAL(numla_error_trace(), "");
}

/* numla_error_set returns the code it was given. */
static void test_set_returns_code(void)
{
    for (int c = NUMLA_STATUS_INVALID_ARG; c <= NUMLA_STATUS_INTERNAL; c++)
        CU_ASSERT_EQUAL((int)numla_error_set((numla_status)c, "f.c", 1, "fn", "code %d", c), c);
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "code 10");
    CU_ASSERT_STRING_EQUAL(numla_error_trace(), "  at fn (f.c:1)\n");
    numla_error_clear();
}

/* An over-long message is cut to fit (a prefix of what was asked, NUL-terminated), and a
 * trace that fills up drops the later frames instead of overflowing. */
static void test_truncation(void)
{
    static char longmsg[5000];
    memset(longmsg, 'm', sizeof longmsg - 1);
    numla_error_set(NUMLA_STATUS_IO, "a.c", 2, "f", "%s", longmsg);
    size_t n = strlen(numla_error_message());
    NUMLA_ASSERT_MSG(n > 500 && n < sizeof longmsg - 1, "message kept %zu bytes", n);
    CU_ASSERT_EQUAL(strncmp(numla_error_message(), longmsg, n), 0);

    for (int i = 0; i < 1000; i++)
        numla_error_frame("some/rather/long/path/to/a/source_file.c", 1000 + i,
                          "numla_some_function_name");
    const char *t = numla_error_trace();
    size_t tn = strlen(t);
    NUMLA_ASSERT_MSG(tn > 1000 && tn < 4096, "trace holds %zu bytes", tn);
    const char *head = "  at f (a.c:2)\n  at numla_some_function_name (";
    CU_ASSERT_EQUAL(strncmp(t, head, strlen(head)), 0);
    /* the first frames are whole and in order */
    char want[160];
    snprintf(want, sizeof want, "  at numla_some_function_name "
                                "(some/rather/long/path/to/a/source_file.c:%d)\n", 1001);
    const char *second = strstr(t, "source_file.c:1000)\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(second);
    CU_ASSERT_EQUAL(strncmp(second + strlen("source_file.c:1000)\n"), want, strlen(want)), 0);
    numla_error_clear();
}

/* The message and trace are per thread: a failure on another thread is not seen here. */
static void *other_thread(void *arg)
{
    numla_error_set(NUMLA_STATUS_MPI, "t.c", 9, "worker", "rank %d died", 3);
    snprintf(arg, 64, "%s", numla_error_message());
    return NULL;
}

static void test_thread_local(void)
{
    numla_error_clear();
    numla_error_set(NUMLA_STATUS_IO, "m.c", 1, "main", "here");
    char seen[64] = "";
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, other_thread, seen), 0);
    pthread_join(th, NULL);
    CU_ASSERT_STRING_EQUAL(seen, "rank 3 died");
    CU_ASSERT_STRING_EQUAL(numla_error_message(), "here");
    CU_ASSERT_STRING_EQUAL(numla_error_trace(), "  at main (m.c:1)\n");
    numla_error_clear();
}

NUMLA_TEST_SUITE(status, NULL, NULL, NUMLA_TEST(test_status_names),
                 NUMLA_TEST(test_fail_check_traceback), NUMLA_TEST(test_set_returns_code),
                 NUMLA_TEST(test_truncation), NUMLA_TEST(test_thread_local))
