/* Seeded mutations of chat-template inputs (tests/fuzz/corpus/chat_template/) through the
 * fuzz target's checks (tests/fuzz/fuzz_chat_template.c): each seed renders, and every
 * mutation (bytes changed, fields split or cut, NULLs, Unicode whitespace and think tags put in,
 * another template picked) renders or is refused with a message; the target aborts otherwise. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int numla_fuzz_chat_template_run(const uint8_t *data, size_t size);

static size_t read_seed(const char *name, uint8_t *buf, size_t cap)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fuzz/corpus/chat_template/%s", name);
    FILE *f = fopen(numla_test_source_path(rel), "rb");
    NUMLA_ASSERT_MSG(f != NULL, "%s missing", rel);
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void test_chat_template_mutations(void)
{
    static const char *const seeds[] = {"glm5_tools.bin", "dsv32_chat.bin",
                                        "kimi_thinking.bin", "v31_plain.bin",
                                        "dsv4_tools.bin"};
    /* pieces put into the inputs: separators, NULL, whitespace Python strips, think tags */
    static const char *const pieces[] = {"\x1f", "\x01", "\xe3\x80\x80", "\xc2\xa0", "\n\n",
                                         " ", "</think>", "<think>", "{\"a\": 1}", "[1, 2]",
                                         "\xe2\x80\xa8", "\xc3", "u", "t", "a", "d", "{}"};
    static uint8_t seed[4096], buf[4200];
    numla_test_rng rng = {4242};
    int rendered = 0, refused = 0;
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        size_t n = read_seed(seeds[s], seed, sizeof seed);
        CU_ASSERT_FATAL(n > 10);
        CU_ASSERT_EQUAL(numla_fuzz_chat_template_run(seed, n), 1);
        for (int it = 0; it < 1500; it++) {
            memcpy(buf, seed, n);
            size_t len = n;
            int edits = 1 + (int)(numla_test_rng_u64(&rng) % 3);
            for (int e = 0; e < edits; e++) {
                size_t at = 2 + (size_t)(numla_test_rng_u64(&rng) % (len - 2));
                switch (numla_test_rng_u64(&rng) % 5) {
                case 0: /* a random byte */
                    buf[at] = (uint8_t)numla_test_rng_u64(&rng);
                    break;
                case 1: { /* insert a piece */
                    const char *p = pieces[numla_test_rng_u64(&rng) % (sizeof pieces /
                                                                       sizeof pieces[0])];
                    size_t k = strlen(p);
                    if (len + k <= sizeof buf) {
                        memmove(buf + at + k, buf + at, len - at);
                        memcpy(buf + at, p, k);
                        len += k;
                    }
                    break;
                }
                case 2: /* delete a byte */
                    if (len > 3) {
                        memmove(buf + at, buf + at + 1, len - at - 1);
                        len--;
                    }
                    break;
                case 3: /* another template, other options */
                    buf[0] = (uint8_t)numla_test_rng_u64(&rng);
                    buf[1] = (uint8_t)numla_test_rng_u64(&rng);
                    break;
                default: /* cut */
                    len = at + 1;
                    break;
                }
            }
            int r = numla_fuzz_chat_template_run(buf, len);
            CU_ASSERT(r >= 0);
            rendered += r == 1;
            refused += r == 0;
        }
    }
    NUMLA_ASSERT_MSG(rendered >= 1000 && refused >= 300, "rendered %d, refused %d", rendered,
                     refused);
}

NUMLA_TEST_SUITE(chat_template_fuzz, NULL, NULL, NUMLA_TEST(test_chat_template_mutations))
