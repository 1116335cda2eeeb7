/* Tests for bench/bench_opts.c: the benchmarks' shared options go through the engine's parser
 * (values land in numla_cli_engine_opts, a bad number is refused with the engine's message),
 * options outside the caller's list are left alone, and the benchmarks' own whole numbers are
 * checked. Expectations are written out here, not taken from the parser. */
#define _GNU_SOURCE
#include "test_util.h"

#include "bench/bench_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const shared[] = {"--model", "--threads", "--weights", "--keep-lm-head", NULL};

/* Redirects stderr into a temporary file between begin and end; end returns what was written
 * (static buffer). */
static int cap_fd = -1, cap_saved = -1;
static char cap_path[64];
static void cap_begin(void)
{
    snprintf(cap_path, sizeof cap_path, "/tmp/numla_test_bench_opts_XXXXXX");
    cap_fd = mkstemp(cap_path);
    CU_ASSERT_FATAL(cap_fd >= 0);
    fflush(stderr);
    cap_saved = dup(2);
    dup2(cap_fd, 2);
}
static const char *cap_end(void)
{
    static char buf[1024];
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    ssize_t got = pread(cap_fd, buf, sizeof buf - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    close(cap_fd);
    unlink(cap_path);
    return buf;
}

/* One option at argv[1] of {"bench", a, v}: the parser's verdict, *i after it, and stderr. */
static int parse_one(numla_cli_engine_opts *e, const char *a, const char *v, int *i,
                     const char **err)
{
    char *argv[] = {"bench", (char *)a, (char *)v, NULL};
    *i = 1;
    cap_begin();
    int r = numla_bench_engine_opt("numla bench test", e, shared, v ? 3 : 2, argv, i);
    *err = cap_end();
    return r;
}

static void test_engine_options_taken(void)
{
    numla_cli_engine_opts e;
    numla_cli_engine_opts_default(&e);
    const char *err;
    int i;
    CU_ASSERT_EQUAL(parse_one(&e, "--threads", "7", &i, &err), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_EQUAL(e.threads, 7);
    CU_ASSERT_EQUAL(i, 2);
    CU_ASSERT_EQUAL(parse_one(&e, "--model", "/m/dir", &i, &err), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e.model);
    CU_ASSERT_STRING_EQUAL(e.model, "/m/dir");
    CU_ASSERT_EQUAL(parse_one(&e, "--weights", "fp8", &i, &err), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_EQUAL(e.weights.format, NUMLA_WEIGHT_FORMAT_FP8);
    CU_ASSERT_EQUAL(parse_one(&e, "--keep-lm-head", NULL, &i, &err), NUMLA_CLI_OPT_FLAG);
    CU_ASSERT_EQUAL(e.weights.keep_lm_head, 1);
    CU_ASSERT_EQUAL(i, 1); /* a flag takes no value */
    CU_ASSERT_STRING_EQUAL(err, "");
}

/* A bad number is refused as `numla run` refuses it, naming the command, option and value. */
static void test_bad_values_refused(void)
{
    numla_cli_engine_opts e;
    numla_cli_engine_opts_default(&e);
    const char *err;
    int i;
    CU_ASSERT_EQUAL(parse_one(&e, "--threads", "x", &i, &err), NUMLA_CLI_OPT_BAD);
    NUMLA_ASSERT_MSG(NULL != strstr(err, "numla bench test: option --threads: 'x' is not a number"),
                     "stderr: %s", err);
    CU_ASSERT_EQUAL(parse_one(&e, "--threads", "4x", &i, &err), NUMLA_CLI_OPT_BAD);
    NUMLA_ASSERT_MSG(NULL != strstr(err, "'4x' is not a number"), "stderr: %s", err);
    CU_ASSERT_EQUAL(parse_one(&e, "--weights", "q4", &i, &err), NUMLA_CLI_OPT_BAD);
    NUMLA_ASSERT_MSG(NULL != strstr(err, "--weights q4 is not bf16, fp8, int8, q8_0, q4_0 or q4_k"), "stderr: %s",
                     err);
    CU_ASSERT_EQUAL(parse_one(&e, "--model", NULL, &i, &err), NUMLA_CLI_OPT_BAD);
    NUMLA_ASSERT_MSG(NULL != strstr(err, "option --model needs a value"), "stderr: %s", err);
}

/* An engine option the caller did not list (bench model has no --max-seqs) is not taken. */
static void test_unlisted_left_alone(void)
{
    numla_cli_engine_opts e;
    numla_cli_engine_opts_default(&e);
    const char *err;
    int i;
    CU_ASSERT_EQUAL(parse_one(&e, "--max-seqs", "3", &i, &err), NUMLA_CLI_OPT_NONE);
    CU_ASSERT_EQUAL(e.max_seqs, 64);
    CU_ASSERT_EQUAL(i, 1);
    CU_ASSERT_EQUAL(parse_one(&e, "--json", NULL, &i, &err), NUMLA_CLI_OPT_NONE);
    CU_ASSERT_STRING_EQUAL(err, "");
}

static int int_one(const char *a, const char *v, int *out, int *i, const char **err)
{
    char *argv[] = {"bench", (char *)a, (char *)v, NULL};
    *i = 1;
    cap_begin();
    int ok = numla_bench_int_opt("numla bench test", v ? 3 : 2, argv, i, out);
    *err = cap_end();
    return ok;
}

static void test_int_option(void)
{
    const char *err;
    int i, x = -5;
    CU_ASSERT_TRUE(int_one("--reps", "12", &x, &i, &err));
    CU_ASSERT_EQUAL(x, 12);
    CU_ASSERT_EQUAL(i, 2);
    CU_ASSERT_TRUE(int_one("--reps", "-3", &x, &i, &err));
    CU_ASSERT_EQUAL(x, -3);
    static const char *const bad[] = {"", "12x", "x", "1.5", "99999999999", " "};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        x = 77;
        CU_ASSERT_FALSE(int_one("--reps", bad[k], &x, &i, &err));
        CU_ASSERT_EQUAL(x, 77);
        CU_ASSERT_EQUAL(i, 1);
        char want[96];
        snprintf(want, sizeof want, "numla bench test: option --reps: '%s' is not a number",
                 bad[k]);
        NUMLA_ASSERT_MSG(NULL != strstr(err, want), "'%s': stderr: %s", bad[k], err);
    }
    CU_ASSERT_FALSE(int_one("--reps", NULL, &x, &i, &err));
    NUMLA_ASSERT_MSG(NULL != strstr(err, "option --reps needs a value"), "stderr: %s", err);
}

NUMLA_TEST_SUITE(bench_opts, NULL, NULL, NUMLA_TEST(test_engine_options_taken),
                 NUMLA_TEST(test_bad_values_refused), NUMLA_TEST(test_unlisted_left_alone),
                 NUMLA_TEST(test_int_option))
