/* Tests for kernels/kv_write (concat_and_cache_mla): every ISA the CPU supports, every
 * source/cache dtype pair, strided sources, shuffled slots, padding slots and rejected slots.
 * Expected cache contents are computed here element by element from common/dtype.h. */
#include "test_util.h"

#include "common/dtype.h"
#include "kernels/kv_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SENTINEL = 0xa5 };

/* A source value that exercises rounding: random magnitudes from subnormal to beyond the fp16
 * range, exact bf16/fp16 ties, signed zeros, infinities and (rarely) NaN. */
static float src_value_f32(numla_test_rng *r)
{
    uint64_t k = numla_test_rng_u64(r) % 64;
    float f;
    uint32_t u;
    switch (k) {
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: return -0.0f;
    case 3: return NAN;
    case 4: u = ((uint32_t)numla_test_rng_u64(r) & 0xffff0000u) | 0x8000u; break; /* bf16 tie */
    case 5: u = ((uint32_t)numla_test_rng_u64(r) & 0xffffe000u) | 0x1000u; break; /* fp16 tie */
    case 6: return (float)numla_test_rng_uniform(r, -1, 1) * 1e-6f;  /* fp16 subnormal */
    case 7: return (float)numla_test_rng_uniform(r, -1, 1) * 1e-39f; /* f32 subnormal */
    case 8: return (float)numla_test_rng_uniform(r, 60000, 70000);   /* around fp16 overflow */
    default:
        return (float)(numla_test_rng_normal(r) * ldexp(1.0, (int)(numla_test_rng_u64(r) % 40) - 25));
    }
    memcpy(&f, &u, 4);
    return isnan(f) ? 1.0f : f;
}

static void fill_src(void *p, numla_dtype t, size_t n, numla_test_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        if (t == NUMLA_DTYPE_F32)
            ((float *)p)[i] = src_value_f32(r);
        else /* any 16-bit pattern is a valid bf16/fp16 value, subnormals and NaNs included */
            ((uint16_t *)p)[i] = (uint16_t)numla_test_rng_u64(r);
    }
}

/* Element i of the cache row must be src element j converted by the scalar conversions;
 * the same dtype must be a bit-exact copy. NaN only has to stay NaN: hardware widening may
 * quiet a signalling NaN. */
static int elem_ok(const void *cache, numla_dtype kt, size_t i, const void *src, numla_dtype st,
                   size_t j)
{
    size_t ks = numla_dtype_size(kt);
    if (kt == st)
        return !memcmp((const char *)cache + i * ks, (const char *)src + j * ks, ks);
    float want_f = numla_load_f32(src, st, j);
    unsigned char want[4];
    numla_store_f32(want, kt, 0, want_f);
    if (isnan(numla_load_f32(want, kt, 0)))
        return isnan(numla_load_f32(cache, kt, i));
    return !memcmp((const char *)cache + i * ks, want, ks);
}

typedef struct kvw_case {
    int64_t tokens;
    int32_t dc, dr;
    int64_t num_blocks;
    int32_t block_size;
    int64_t c_pad, pe_pad; /* extra source stride */
} kvw_case;

static void run_case(numla_isa isa, numla_dtype st, numla_dtype kt, const kvw_case *c, uint64_t seed)
{
    numla_test_rng r = {seed};
    const int64_t T = c->tokens, cap = c->num_blocks * c->block_size, row = c->dc + c->dr;
    const int64_t cs = c->dc + c->c_pad, ps = c->dr + c->pe_pad;
    const size_t ssz = numla_dtype_size(st), ksz = numla_dtype_size(kt);
    CU_ASSERT_FATAL(T <= cap); /* distinct slots */
    void *kv_c = malloc((size_t)(T * cs) * ssz), *k_pe = malloc((size_t)(T * ps + 1) * ssz);
    fill_src(kv_c, st, (size_t)(T * cs), &r);
    fill_src(k_pe, st, (size_t)(T * ps), &r);
    /* Shuffled distinct slots; every seventh token is padding, with various negative values. */
    int64_t *perm = malloc((size_t)cap * sizeof *perm), *slots = malloc((size_t)T * sizeof *slots);
    for (int64_t i = 0; i < cap; i++)
        perm[i] = i;
    for (int64_t i = cap - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    const int64_t negs[3] = {-1, -(int64_t)c->block_size - 1, INT64_MIN};
    for (int64_t t = 0; t < T; t++)
        slots[t] = t % 7 == 3 ? negs[t % 3] : perm[t];
    size_t cache_bytes = (size_t)(cap * row) * ksz;
    unsigned char *cache = malloc(cache_bytes);
    memset(cache, SENTINEL, cache_bytes);

    numla_kv_write_args a = {.num_tokens = T, .kv_lora_rank = c->dc, .rope_dim = c->dr,
                             .kv_c = kv_c, .kv_c_stride = cs, .k_pe = k_pe, .k_pe_stride = ps,
                             .src_dtype = st, .slot_mapping = slots, .kv_cache = cache,
                             .kv_dtype = kt, .num_blocks = c->num_blocks, .block_size = c->block_size};
    numla_status s = numla_concat_and_cache_mla(isa, &a);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s: status %d (%s)", numla_isa_name(isa), s, numla_error_message());

    /* Owner token of every slot, found independently of the kernel's arithmetic. */
    int64_t *owner = malloc((size_t)cap * sizeof *owner);
    for (int64_t i = 0; i < cap; i++)
        owner[i] = -1;
    for (int64_t t = 0; t < T; t++)
        if (slots[t] >= 0)
            owner[slots[t]] = t;
    int bad = 0;
    for (int64_t b = 0; b < c->num_blocks; b++)
        for (int64_t o = 0; o < c->block_size; o++) {
            int64_t slot = b * c->block_size + o, t = owner[slot];
            const unsigned char *crow = cache + (size_t)slot * (size_t)row * ksz;
            for (int64_t i = 0; i < row && bad < 5; i++) {
                int ok;
                if (t < 0) {
                    ok = 1;
                    for (size_t k = 0; k < ksz; k++)
                        ok &= crow[(size_t)i * ksz + k] == SENTINEL;
                } else if (i < c->dc) {
                    ok = elem_ok(crow, kt, (size_t)i, kv_c, st, (size_t)(t * cs + i));
                } else {
                    ok = elem_ok(crow, kt, (size_t)i, k_pe, st, (size_t)(t * ps + i - c->dc));
                }
                if (!ok) {
                    bad++;
                    NUMLA_ASSERT_MSG(0, "%s %s->%s dc=%d dr=%d: block %lld offset %lld elem %lld (token %lld) wrong",
                                     numla_isa_name(isa), numla_dtype_name(st), numla_dtype_name(kt),
                                     c->dc, c->dr, (long long)b, (long long)o, (long long)i, (long long)t);
                }
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(owner);
    free(cache);
    free(slots);
    free(perm);
    free(k_pe);
    free(kv_c);
}

static void test_roundtrip_all_dtypes(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    const kvw_case cases[] = {
        {50, 512, 64, 9, 16, 0, 0},  /* DeepSeek row, dense source */
        {40, 512, 64, 5, 16, 5, 3},  /* strided sources */
        {33, 37, 5, 7, 5, 2, 1},     /* odd widths: vector tails */
        {20, 19, 0, 3, 8, 0, 0},     /* no rope part */
        {9, 3, 2, 4, 3, 1, 0},       /* shorter than one vector */
    };
    for (int i = 0; i < n; i++)
        for (int st = 0; st < NUMLA_DTYPE_COUNT; st++)
            for (int kt = 0; kt < NUMLA_DTYPE_COUNT; kt++)
                for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                    run_case(isas[i], (numla_dtype)st, (numla_dtype)kt, &cases[c],
                             1000 + 17 * (uint64_t)c + 5 * (uint64_t)st + (uint64_t)kt);
}

/* Enough rows that the dispatcher opens its parallel region. */
static void test_many_tokens_threaded(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    const kvw_case c = {700, 512, 64, 50, 16, 4, 0};
    for (int i = 0; i < n; i++) {
        run_case(isas[i], NUMLA_DTYPE_F32, NUMLA_DTYPE_F32, &c, 7);
        run_case(isas[i], NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16, &c, 8);
        run_case(isas[i], NUMLA_DTYPE_BF16, NUMLA_DTYPE_F16, &c, 9);
    }
}

static void check_rejected(numla_isa isa, int64_t bad_slot, int64_t num_blocks)
{
    enum { T = 12, DC = 64, DR = 16, BS = 4 };
    float kv_c[T * DC], k_pe[T * DR];
    for (int i = 0; i < T * DC; i++)
        kv_c[i] = (float)i;
    for (int i = 0; i < T * DR; i++)
        k_pe[i] = -(float)i;
    int64_t slots[T];
    for (int t = 0; t < T; t++)
        slots[t] = num_blocks > 0 ? (t * 5) % (num_blocks * BS) : -1;
    slots[T - 1] = bad_slot; /* last, so a kernel that writes before checking is caught */
    size_t bytes = (size_t)(num_blocks > 0 ? num_blocks : 1) * BS * (DC + DR) * 2;
    unsigned char *cache = malloc(bytes), *copy = malloc(bytes);
    memset(cache, SENTINEL, bytes);
    memcpy(copy, cache, bytes);
    numla_kv_write_args a = {.num_tokens = T, .kv_lora_rank = DC, .rope_dim = DR, .kv_c = kv_c,
                             .kv_c_stride = DC, .k_pe = k_pe, .k_pe_stride = DR,
                             .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = slots, .kv_cache = cache,
                             .kv_dtype = NUMLA_DTYPE_BF16, .num_blocks = num_blocks, .block_size = BS};
    numla_status s = numla_concat_and_cache_mla(isa, &a);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OUT_OF_RANGE, "%s: slot %lld of %lld blocks: status %d",
                     numla_isa_name(isa), (long long)bad_slot, (long long)num_blocks, s);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "slot_mapping[11]"));
    CU_ASSERT_EQUAL(memcmp(cache, copy, bytes), 0);
    free(copy);
    free(cache);
}

static void test_out_of_range_rejected(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        check_rejected(isas[i], 6 * 4, 6);    /* one past the end */
        check_rejected(isas[i], 6 * 4 + 100, 6);
        check_rejected(isas[i], INT64_MAX, 6);
        check_rejected(isas[i], (int64_t)1 << 33, 6); /* would wrap in 32 bits */
        check_rejected(isas[i], 0, 0);        /* an empty cache holds nothing */
    }
}

static void test_padding_only_and_empty(void)
{
    /* All-padding batches and zero tokens touch nothing, even with no cache at all. */
    int64_t slots[3] = {-1, -2, -1};
    float src[3 * 8] = {0};
    numla_kv_write_args a = {.num_tokens = 3, .kv_lora_rank = 6, .rope_dim = 2, .kv_c = src,
                             .kv_c_stride = 8, .k_pe = src, .k_pe_stride = 8,
                             .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = slots, .kv_cache = NULL,
                             .kv_dtype = NUMLA_DTYPE_BF16, .num_blocks = 0, .block_size = 16};
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(numla_concat_and_cache_mla(isas[i], &a), NUMLA_STATUS_OK);
        numla_kv_write_args e = a;
        e.num_tokens = 0;
        e.slot_mapping = NULL;
        CU_ASSERT_EQUAL(numla_concat_and_cache_mla(isas[i], &e), NUMLA_STATUS_OK);
    }
}

static void test_invalid_args(void)
{
    int64_t slots[1] = {0};
    float src[8] = {0};
    uint16_t cache[16 * 8];
    const numla_kv_write_args good = {.num_tokens = 1, .kv_lora_rank = 6, .rope_dim = 2,
                                      .kv_c = src, .kv_c_stride = 6, .k_pe = src, .k_pe_stride = 2,
                                      .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = slots,
                                      .kv_cache = cache, .kv_dtype = NUMLA_DTYPE_BF16,
                                      .num_blocks = 1, .block_size = 16};
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &good), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, NULL), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_COUNT, &good), NUMLA_STATUS_INVALID_ARG);
    numla_kv_write_args a = good;
    a.kv_c_stride = 5;
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &a), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "kv_c_stride"));
    a = good;
    a.block_size = 0;
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &a), NUMLA_STATUS_INVALID_ARG);
    a = good;
    a.k_pe = NULL;
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &a), NUMLA_STATUS_INVALID_ARG);
    a = good;
    a.kv_dtype = NUMLA_DTYPE_COUNT;
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &a), NUMLA_STATUS_INVALID_ARG);
    a = good;
    a.num_blocks = INT64_MAX / 2;
    CU_ASSERT_EQUAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &a), NUMLA_STATUS_INVALID_ARG);
}

NUMLA_TEST_SUITE(kv_write, NULL, NULL, NUMLA_TEST(test_roundtrip_all_dtypes),
                 NUMLA_TEST(test_many_tokens_threaded), NUMLA_TEST(test_out_of_range_rejected),
                 NUMLA_TEST(test_padding_only_and_empty), NUMLA_TEST(test_invalid_args))
