/* tests/unit/engine/http/test_http_emitter.c — the streamed text emitter (engine/http/emitter.h):
 * stop strings across pieces, characters split across pieces, overlapping stop prefixes, and a
 * randomised check against the whole-text answer (the text before the stop that strstr finds
 * completing first). */
#include <stdlib.h>
#include <string.h>

#include "engine/http/emitter.h"
#include "engine/text/tokenizer.h"
#include "test_util.h"

typedef struct run {
    char out[4096];             /* everything emitted, in order */
    size_t len;
    int stopped;
    int pieces_out;             /* non-empty outputs */
} run;

/* Feed pieces (NULL-terminated list of byte strings) and finish; every output must be valid
 * UTF-8. */
static void feed(const char *const *stops, int nstops, const char *const *pieces, run *r)
{
    numla_http_emitter *e = NULL;
    memset(r, 0, sizeof *r);
    CU_ASSERT_EQUAL_FATAL(numla_http_emitter_create(stops, nstops, &e), NUMLA_STATUS_OK);
    for (int i = 0; pieces[i]; i++) {
        const char *t;
        size_t n;
        int st = 0;
        CU_ASSERT_EQUAL(numla_http_emitter_push(e, pieces[i], strlen(pieces[i]), &t, &n, &st),
                        NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(numla_utf8_invalid_offset(t, n) < 0, "piece %d output not UTF-8", i);
        memcpy(r->out + r->len, t, n);
        r->len += n;
        r->pieces_out += n > 0;
        r->stopped |= st;
    }
    const char *t;
    size_t n;
    CU_ASSERT_EQUAL(numla_http_emitter_finish(e, &t, &n), NUMLA_STATUS_OK);
    NUMLA_ASSERT_MSG(numla_utf8_invalid_offset(t, n) < 0, "finish output not UTF-8");
    memcpy(r->out + r->len, t, n);
    r->len += n;
    r->out[r->len] = 0;
    numla_http_emitter_destroy(&e);
    CU_ASSERT_PTR_NULL(e);
}

static void test_no_stops(void)
{
    run r;
    feed(NULL, 0, (const char *[]){"Hello", ", ", "world", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "Hello, world");
    CU_ASSERT_EQUAL(r.pieces_out, 3); /* nothing held back without stops */
    CU_ASSERT(!r.stopped);
}

static void test_stop_spanning_pieces(void)
{
    const char *stops[] = {"END"};
    run r;
    feed(stops, 1, (const char *[]){"abc E", "N", "D tail", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "abc ");
    CU_ASSERT(r.stopped);
    /* a false start is released once it cannot be the stop any more */
    feed(stops, 1, (const char *[]){"x E", "Nx", " more", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "x ENx more");
    CU_ASSERT(!r.stopped);
    /* a prefix left at the end is emitted by finish */
    feed(stops, 1, (const char *[]){"done EN", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "done EN");
    /* stop in the very first bytes */
    feed(stops, 1, (const char *[]){"END", "x", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "");
    CU_ASSERT(r.stopped);
}

static void test_overlapping_prefixes(void)
{
    const char *stops[] = {"aab"};
    run r;
    feed(stops, 1, (const char *[]){"a", "a", "a", "b", "c", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "a");
    CU_ASSERT(r.stopped);
    const char *two[] = {"bcd", "abcx"};
    /* "abc" could become either; "abcd" completes bcd */
    feed(two, 2, (const char *[]){"ab", "c", "d", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "a");
    /* the stop that completes first wins, even inside a longer one that starts earlier, and
     * whether or not the pieces show it completing on its own */
    const char *three[] = {"cd", "abcde"};
    feed(three, 2, (const char *[]){"xabcde", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "xab");
    feed(three, 2, (const char *[]){"xa", "bc", "de", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "xab");
    /* same end: the longer (earlier) one */
    const char *four[] = {"cd", "bcd"};
    feed(four, 2, (const char *[]){"abcd", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "a");
}

static void test_utf8_split(void)
{
    run r;
    /* é = C3 A9, € = E2 82 AC, 😀 = F0 9F 98 80, split at every byte */
    feed(NULL, 0, (const char *[]){"a\xc3", "\xa9", "\xe2", "\x82", "\xac", "\xf0\x9f", "\x98",
                                   "\x80z", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z");
    /* a stop made of a multi-byte character, split */
    const char *stops[] = {"\xe2\x82\xac"};
    feed(stops, 1, (const char *[]){"5\xe2\x82", "\xac more", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "5");
    /* invalid bytes become U+FFFD; a character cut off at the end too */
    feed(NULL, 0, (const char *[]){"a\xff", "b\xe2\x82", NULL}, &r);
    CU_ASSERT_STRING_EQUAL(r.out, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
}

/* Random texts over a small alphabet (with multi-byte characters), random stops, random cuts:
 * the output is always a prefix of the text before the first stop to complete, and ends equal
 * to it. */
static void test_random_against_strstr(void)
{
    static const char *const alpha[] = {"a", "b", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    numla_test_rng rng = {77};
    for (int it = 0; it < 2000; it++) {
        char text[256] = "";
        int nch = 1 + (int)(numla_test_rng_u64(&rng) % 30);
        for (int i = 0; i < nch; i++)
            strcat(text, alpha[numla_test_rng_u64(&rng) % 5]);
        char stopbuf[3][32];
        const char *stops[3];
        int ns = (int)(numla_test_rng_u64(&rng) % 4);
        for (int s = 0; s < ns; s++) {
            stopbuf[s][0] = 0;
            int k = 1 + (int)(numla_test_rng_u64(&rng) % 3);
            for (int i = 0; i < k; i++)
                strcat(stopbuf[s], alpha[numla_test_rng_u64(&rng) % 5]);
            stops[s] = stopbuf[s];
        }
        /* the first stop to complete (strstr finds each stop's earliest end), longest on a tie */
        size_t want = strlen(text), want_end = SIZE_MAX;
        for (int s = 0; s < ns; s++) {
            const char *p = strstr(text, stops[s]);
            size_t at = p ? (size_t)(p - text) : 0, end = at + strlen(stops[s]);
            if (p && (end < want_end || (end == want_end && at < want))) {
                want = at;
                want_end = end;
            }
        }
        /* cut the bytes anywhere, characters included */
        numla_http_emitter *e = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_http_emitter_create(stops, ns, &e), NUMLA_STATUS_OK);
        char out[512];
        size_t olen = 0, pos = 0, len = strlen(text);
        int ok = 1;
        while (pos < len) {
            size_t k = 1 + numla_test_rng_u64(&rng) % 5;
            if (k > len - pos)
                k = len - pos;
            const char *t;
            size_t n;
            CU_ASSERT_EQUAL(numla_http_emitter_push(e, text + pos, k, &t, &n, NULL), NUMLA_STATUS_OK);
            pos += k;
            ok &= numla_utf8_invalid_offset(t, n) < 0;
            memcpy(out + olen, t, n);
            olen += n;
            ok &= olen <= want && !memcmp(out, text, olen); /* never past the stop */
        }
        const char *t;
        size_t n;
        CU_ASSERT_EQUAL(numla_http_emitter_finish(e, &t, &n), NUMLA_STATUS_OK);
        memcpy(out + olen, t, n);
        olen += n;
        ok &= olen == want && !memcmp(out, text, want);
        NUMLA_ASSERT_MSG(ok, "text \"%s\" with stops \"%s\" \"%s\" \"%s\" (%d): got %zu bytes, want %zu",
                         text, ns > 0 ? stops[0] : "", ns > 1 ? stops[1] : "", ns > 2 ? stops[2] : "",
                         ns, olen, want);
        numla_http_emitter_destroy(&e);
        if (!ok)
            break;
    }
}

static void test_bad_stops(void)
{
    numla_http_emitter *e = NULL;
    const char *stops[] = {"x", ""};
    CU_ASSERT_EQUAL(numla_http_emitter_create(stops, 2, &e), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(e);
}

NUMLA_TEST_SUITE(http_emitter, NULL, NULL, NUMLA_TEST(test_no_stops),
                 NUMLA_TEST(test_stop_spanning_pieces), NUMLA_TEST(test_overlapping_prefixes),
                 NUMLA_TEST(test_utf8_split), NUMLA_TEST(test_random_against_strstr),
                 NUMLA_TEST(test_bad_stops))
