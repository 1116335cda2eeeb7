/* Seeded mutations of a tiktoken.model (tests/fuzz/corpus/tiktoken/small.model) through the
 * fuzz target's checks (tests/fuzz/fuzz_tiktoken.c): every input loads or fails with a message,
 * a refused line is named, and a loaded tokenizer round-trips text. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int numla_fuzz_tiktoken_run(const uint8_t *data, size_t size);

static void test_tiktoken_mutations(void)
{
    FILE *f = fopen(numla_test_source_path("tests/fuzz/corpus/tiktoken/small.model"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static uint8_t seed[1 << 16];
    size_t n = fread(seed, 1, sizeof seed, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 1000);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_tiktoken_run(seed, n), 1);
    uint8_t *buf = malloc(n + 64);
    numla_test_rng rng = {2727};
    int accepted = 0, rejected = 0, named = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(buf, seed, n);
        size_t len = n;
        int edits = 1 + (int)(numla_test_rng_u64(&rng) % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(numla_test_rng_u64(&rng) % len);
            switch (numla_test_rng_u64(&rng) % 4) {
            case 0: /* a random byte */
                buf[at] = (uint8_t)numla_test_rng_u64(&rng);
                break;
            case 1: /* a byte from the alphabets the file uses */
                buf[at] = (uint8_t)"AZaz09+/= \n\t-\r7"[numla_test_rng_u64(&rng) % 16];
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
        if (numla_fuzz_tiktoken_run(buf, len)) {
            accepted++;
        } else {
            rejected++;
            named += strstr(numla_error_message(), "tiktoken.model") != NULL;
        }
    }
    free(buf);
    NUMLA_ASSERT_MSG(accepted >= 10 && rejected >= 500, "accepted %d, rejected %d", accepted,
                     rejected);
    NUMLA_ASSERT_MSG(named == rejected, "%d of %d refusals name the file", named, rejected);
}

NUMLA_TEST_SUITE(tiktoken_fuzz, NULL, NULL, NUMLA_TEST(test_tiktoken_mutations))
