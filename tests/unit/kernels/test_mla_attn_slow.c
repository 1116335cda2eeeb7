/* Long tests for kernels/mla_attn (label slow): long contexts in every cache dtype, long
 * causal prefill over a long prefix, many mixed sequences, large blocks. Same reference and
 * tolerances as the mla_attn suite (mla_attn_check.h). */
#include "mla_attn_check.h"

static const numla_dtype all_dt[3] = {NUMLA_DTYPE_BF16, NUMLA_DTYPE_F16, NUMLA_DTYPE_F32};

static void test_long_contexts(void)
{
    static const int32_t lens64k[1] = {64000};
    static const int32_t lens54k[1] = {54321};
    for (int ki = 0; ki < 3; ki++) {
        mla_case c = {.B = 1, .H = 16, .Dc = 512, .Dr = 64, .bs = 64, .lens = lens64k,
                      .qt = all_dt[ki], .kvt = all_dt[ki], .seed = 900 + ki};
        mla_check_case(&c, all_dt, 3, "64000 keys");
    }
    mla_case c = {.B = 1, .H = 16, .Dc = 512, .Dr = 64, .bs = 256, .lens = lens54k,
                  .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 910};
    mla_check_case(&c, all_dt, 3, "54321 keys, block 256");
    /* past 128k at the real dims, next to a sequence of exactly 2^17 keys */
    static const int32_t lens128k[2] = {140001, 131072};
    mla_case d = {.B = 2, .H = 16, .Dc = 512, .Dr = 64, .bs = 16, .lens = lens128k,
                  .qt = NUMLA_DTYPE_F32, .kvt = NUMLA_DTYPE_BF16, .seed = 911};
    mla_check_case(&d, all_dt, 2, "140001 and 131072 keys");
}

static void test_long_prefill(void)
{
    static const int32_t lens[2] = {5000, 700};
    static const int32_t nq[2] = {300, 700};
    for (int causal = 0; causal < 2; causal++) {
        mla_case c = {.B = 2, .H = 16, .Dc = 512, .Dr = 64, .bs = 32, .lens = lens, .nq = nq,
                      .causal = causal, .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16,
                      .seed = 920 + causal};
        mla_check_case(&c, all_dt, 1, causal ? "long causal prefill" : "long non-causal");
    }
}

static void test_many_sequences(void)
{
    enum { B = 200 };
    int32_t lens[B];
    numla_test_rng rng = {77};
    for (int b = 0; b < B; b++)
        lens[b] = (int32_t)(numla_test_rng_u64(&rng) % 3000);
    lens[5] = 0;
    lens[6] = 1;
    mla_case c = {.B = B, .H = 22, .Dc = 512, .Dr = 64, .bs = 16, .lens = lens,
                  .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 930};
    mla_check_case(&c, all_dt, 1, "200 mixed sequences");
}

NUMLA_TEST_SUITE(mla_attn_slow, NULL, NULL, NUMLA_TEST(test_long_contexts),
                 NUMLA_TEST(test_long_prefill), NUMLA_TEST(test_many_sequences))
