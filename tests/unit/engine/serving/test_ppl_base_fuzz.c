/* The base file of `numla perplexity --save-logits` (engine/serving/perplexity.h): numla's writer
 * gives byte for byte the file scripts/make_ppl_golden.py writes from the documented layout
 * (tests/fuzz/corpus/ppl_base/small.kld), and seeded mutations of it go through the fuzz
 * target's checks (tests/fuzz/fuzz_ppl_base.c): every input opens and reads back in range, or
 * is refused with a message naming the file. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/perplexity.h"

int numla_fuzz_ppl_base_run(const uint8_t *data, size_t size);

static void test_writer_matches_layout(void)
{
    size_t n = 0;
    uint8_t *seed = (uint8_t *)numla_test_read_file(
        numla_test_source_path("tests/fuzz/corpus/ppl_base/small.kld"), &n);
    CU_ASSERT_FATAL(seed && n == 224);
    int32_t toks[17];
    for (int i = 0; i < 17; i++)
        toks[i] = i;
    const numla_ppl_base_header h = {.vocab_size = 8, .ctx = 8, .first = 4, .num_tokens = 17,
                                     .num_chunks = 2,
                                     .tokens_hash = numla_ppl_tokens_hash(toks, 17)};
    char path[1200];
    snprintf(path, sizeof path, "%s/small.kld", numla_test_tmpdir());
    numla_ppl_base_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_ppl_base_writer_create(path, &h, &w), NUMLA_STATUS_OK);
    /* chunk 1 first: rows of different chunks may come in any order, each chunk's in order */
    for (int c = 1; c >= 0; c--)
        for (int r = 0; r < 3; r++) {
            uint16_t codes[8];
            for (int v = 0; v < 8; v++)
                codes[v] = (uint16_t)((v * 7919 + c * 131 + r * 31) % 65536);
            CU_ASSERT_EQUAL(numla_ppl_base_writer_put(w, c, r, (float)(1 + c) / 65535.f,
                                                      -(2.0f + (float)r), codes),
                            NUMLA_STATUS_OK);
        }
    CU_ASSERT_NOT_EQUAL(numla_ppl_base_writer_put(w, 0, 0, 0, 0, (uint16_t[8]){0}),
                        NUMLA_STATUS_OK); /* a row twice */
    CU_ASSERT_EQUAL_FATAL(numla_ppl_base_writer_finish(&w), NUMLA_STATUS_OK);
    size_t m = 0;
    uint8_t *mine = (uint8_t *)numla_test_read_file(path, &m);
    CU_ASSERT_FATAL(mine != NULL);
    NUMLA_ASSERT_MSG(m == n && !memcmp(mine, seed, n), "the writer's %zu bytes differ from the "
                     "layout's %zu", m, n);
    CU_ASSERT_EQUAL(numla_fuzz_ppl_base_run(seed, n), 1);
    free(mine);
    free(seed);
}

static void test_ppl_base_mutations(void)
{
    size_t n = 0;
    uint8_t *seed = (uint8_t *)numla_test_read_file(
        numla_test_source_path("tests/fuzz/corpus/ppl_base/small.kld"), &n);
    CU_ASSERT_FATAL(seed && n > 64);
    uint8_t *buf = malloc(n + 64);
    numla_test_rng rng = {4242};
    int accepted = 0, rejected = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, seed, n);
        size_t len = n;
        int edits = 1 + (int)(numla_test_rng_u64(&rng) % 3);
        for (int e = 0; e < edits && len > 1; e++) {
            size_t at = (size_t)(numla_test_rng_u64(&rng) % len);
            switch (numla_test_rng_u64(&rng) % 4) {
            case 0: /* a random byte */
                buf[at] = (uint8_t)numla_test_rng_u64(&rng);
                break;
            case 1: /* a bit */
                buf[at] ^= (uint8_t)(1u << (numla_test_rng_u64(&rng) % 8));
                break;
            case 2: /* delete a byte */
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            default: /* cut the file */
                len = at + 1;
                break;
            }
        }
        const int same = len == n && !memcmp(buf, seed, n); /* the edits undid themselves */
        if (numla_fuzz_ppl_base_run(buf, len))
            accepted += !same;
        else
            rejected++;
    }
    free(buf);
    free(seed);
    /* every edit of the header or a row is caught (checksums); none is accepted */
    NUMLA_ASSERT_MSG(accepted == 0 && rejected > 2900, "accepted %d, rejected %d", accepted,
                     rejected);
}

NUMLA_TEST_SUITE(ppl_base_fuzz, NULL, NULL, NUMLA_TEST(test_writer_matches_layout),
                 NUMLA_TEST(test_ppl_base_mutations))
