/* Tests for common/strbuf: appends against a plain reference built with snprintf/memcpy into a
 * fixed array, growth across many sizes, NUL bytes, printf longer than the room, take/clear/free,
 * and the sticky failure on an impossible size. */
#include "test_util.h"

#include "common/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An empty buffer reads as "" and hands over NULL, also after a reserve. */
static void test_empty(void)
{
    numla_strbuf b = {0};
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "");
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_PTR_NULL(numla_strbuf_take(&b));
    numla_strbuf_free(&b);
    CU_ASSERT_PTR_NULL(b.p);
    /* room made before any append: still the empty string, room for the bytes and the NUL */
    CU_ASSERT_EQUAL(numla_strbuf_reserve(&b, 10), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
    CU_ASSERT(b.cap >= 11);
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_EQUAL(b.p[0], '\0');
    numla_strbuf_free(&b);
}

/* Pieces of every length 0..600 (crossing several doublings) give the concatenation, each
 * time NUL-terminated and with cap > len. */
static void test_append_matches_concatenation(void)
{
    enum { MAXP = 600 };
    size_t total = (size_t)MAXP * (MAXP + 1) / 2;
    char *ref = malloc(total + 1), piece[MAXP];
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    numla_strbuf b = {0};
    size_t off = 0;
    int bad = 0;
    for (int n = 0; n <= MAXP; n++) {
        for (int k = 0; k < n; k++)
            piece[k] = (char)('a' + (n * 7 + k) % 26);
        memcpy(ref + off, piece, (size_t)n);
        off += (size_t)n;
        CU_ASSERT_EQUAL(numla_strbuf_append(&b, piece, (size_t)n), NUMLA_STATUS_OK);
        bad += b.len != off || b.cap <= b.len || b.p[b.len] != '\0' ||
               memcmp(b.p, ref, off) != 0;
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d appends did not match the concatenation", bad);
    CU_ASSERT_EQUAL(b.len, total);
    CU_ASSERT_FALSE(b.oom);
    numla_strbuf_free(&b);
    free(ref);
}

/* Bytes are bytes: NULs inside the text are kept and counted. */
static void test_binary_bytes(void)
{
    numla_strbuf b = {0};
    const char bin[5] = {'x', 0, 'y', 0, 'z'};
    CU_ASSERT_EQUAL(numla_strbuf_append(&b, bin, sizeof bin), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "!"), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(b.len, 6);
    CU_ASSERT_EQUAL(memcmp(b.p, "x\0y\0z!", 7), 0);
    numla_strbuf_free(&b);
}

/* printf appends what snprintf renders, also when one rendering is longer than the room left
 * (the buffer grows and prints again) and when it is the first append. */
static void test_printf_matches_snprintf(void)
{
    numla_strbuf b = {0};
    char ref[8192], one[2048];
    size_t off = 0;
    for (int i = 0; i < 40; i++) {
        char pad[1024];
        int w = (i * 37) % 1000;
        memset(pad, 'p', (size_t)w);
        pad[w] = '\0';
        int n = snprintf(one, sizeof one, "[%d %s %.3f]", i, pad, i / 7.0);
        if (off + (size_t)n >= sizeof ref)
            break;
        memcpy(ref + off, one, (size_t)n + 1);
        off += (size_t)n;
        CU_ASSERT_EQUAL(numla_strbuf_printf(&b, "[%d %s %.3f]", i, pad, i / 7.0),
                        NUMLA_STATUS_OK);
    }
    CU_ASSERT_EQUAL(b.len, off);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), ref);
    numla_strbuf_free(&b);
    CU_ASSERT_EQUAL(numla_strbuf_printf(&b, "%s", ""), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(b.p);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "");
    numla_strbuf_free(&b);
}

/* clear keeps the memory and empties the text; take hands the text over and empties b. */
static void test_clear_take(void)
{
    numla_strbuf b = {0};
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "hello, world"), NUMLA_STATUS_OK);
    char *before = b.p;
    size_t cap = b.cap;
    numla_strbuf_clear(&b);
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "");
    CU_ASSERT_PTR_EQUAL(b.p, before);
    CU_ASSERT_EQUAL(b.cap, cap);
    CU_ASSERT_EQUAL(numla_strbuf_printf(&b, "%d-%s", 42, "x"), NUMLA_STATUS_OK);
    char *s = numla_strbuf_take(&b);
    CU_ASSERT_STRING_EQUAL(s, "42-x");
    CU_ASSERT_PTR_NULL(b.p);
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_EQUAL(b.cap, 0);
    free(s);
}

/* truncate keeps a prefix and the terminator; a length at or past the end changes nothing. */
static void test_truncate(void)
{
    numla_strbuf b = {0};
    numla_strbuf_truncate(&b, 0); /* empty: nothing to cut */
    CU_ASSERT_PTR_NULL(b.p);
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "hello<stop>tail"), NUMLA_STATUS_OK);
    numla_strbuf_truncate(&b, 99);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "hello<stop>tail");
    numla_strbuf_truncate(&b, 5);
    CU_ASSERT_EQUAL(b.len, 5);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "hello");
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "!"), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "hello!");
    numla_strbuf_free(&b);
}

/* A size that cannot be allocated fails with NO_MEMORY and a message naming the buffer, keeps
 * the text, and makes later appends fail too until clear. */
static void test_failure_is_sticky(void)
{
    numla_strbuf b = {0};
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "kept"), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_strbuf_reserve(&b, SIZE_MAX - 2), NUMLA_STATUS_NO_MEMORY);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "string buffer") != NULL, "message: %s",
                     numla_error_message());
    CU_ASSERT_TRUE(b.oom);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "kept");
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "more"), NUMLA_STATUS_NO_MEMORY);
    CU_ASSERT_EQUAL(numla_strbuf_printf(&b, "%d", 1), NUMLA_STATUS_NO_MEMORY);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "kept");
    numla_strbuf_clear(&b);
    CU_ASSERT_FALSE(b.oom);
    CU_ASSERT_EQUAL(numla_strbuf_puts(&b, "again"), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_strbuf_str(&b), "again");
    numla_strbuf_free(&b);
    numla_error_clear();
}

NUMLA_TEST_SUITE(strbuf, NULL, NULL, NUMLA_TEST(test_empty),
                 NUMLA_TEST(test_append_matches_concatenation), NUMLA_TEST(test_binary_bytes),
                 NUMLA_TEST(test_printf_matches_snprintf), NUMLA_TEST(test_clear_take),
                 NUMLA_TEST(test_truncate), NUMLA_TEST(test_failure_is_sticky))
