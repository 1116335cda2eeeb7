/* kernels/kv_write.c — concat_and_cache_mla dispatcher (kernels/kv_write.h): validates the
 * arguments and every slot before the first write, picks the variant for the ISA and splits
 * the tokens over one OpenMP region. The variants live in ref/ and x86/. */
#include "kernels/kv_write_internal.h"

#include <omp.h>

/* A variant: the head (kernels/isa.h) and its function. */
typedef struct numla_kv_write_variant {
    numla_variant v;
    numla_kv_write_fn write;
} numla_kv_write_variant;

static const numla_kv_write_variant numla_kv_write_ref_ = {{"ref", 0, NULL}, numla_kv_write_ref};
static const numla_kv_write_variant numla_kv_write_avx2_ = {{"avx2", 0, NULL}, numla_kv_write_avx2};
static const numla_kv_write_variant numla_kv_write_avx512_ = {{"avx512", 0, NULL}, numla_kv_write_avx512};

/* Native variants per level (one kind); an empty entry inherits the level below (no bf16 dot
 * products here: avx512bf16 and amx run avx512's). */
static const numla_variant *const numla_kv_write_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_kv_write_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_kv_write_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_kv_write_avx512_.v},
};

static numla_status numla_kv_write_validate(const numla_kv_write_args *a)
{
    if (!a)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: args is NULL");
    if (a->num_tokens < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: num_tokens %lld < 0",
                   (long long)a->num_tokens);
    if (a->kv_lora_rank < 1 || a->rope_dim < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "concat_and_cache_mla: kv_lora_rank %d must be >= 1 and rope_dim %d >= 0",
                   a->kv_lora_rank, a->rope_dim);
    if (a->kv_c_stride < a->kv_lora_rank)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: kv_c_stride %lld < kv_lora_rank %d",
                   (long long)a->kv_c_stride, a->kv_lora_rank);
    if (a->rope_dim > 0 && a->k_pe_stride < a->rope_dim)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: k_pe_stride %lld < rope_dim %d",
                   (long long)a->k_pe_stride, a->rope_dim);
    if ((unsigned)a->src_dtype >= NUMLA_DTYPE_COUNT || (unsigned)a->kv_dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: unknown dtype (src %d, kv %d)",
                   (int)a->src_dtype, (int)a->kv_dtype);
    if (a->block_size < 1 || a->num_blocks < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "concat_and_cache_mla: block_size %d must be >= 1 and num_blocks %lld >= 0",
                   a->block_size, (long long)a->num_blocks);
    if (a->num_blocks > INT64_MAX / a->block_size)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "concat_and_cache_mla: num_blocks %lld x block_size %d overflows 64 bits",
                   (long long)a->num_blocks, a->block_size);
    if (a->num_tokens == 0)
        return NUMLA_STATUS_OK;
    if (!a->slot_mapping || !a->kv_c || (a->rope_dim > 0 && !a->k_pe))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "concat_and_cache_mla: NULL input (slot_mapping %p, kv_c %p, k_pe %p)",
                   (const void *)a->slot_mapping, a->kv_c, a->k_pe);
    const int64_t capacity = a->num_blocks * a->block_size;
    int64_t bad = -1;
    for (int64_t t = 0; t < a->num_tokens; t++)
        if (a->slot_mapping[t] >= capacity) {
            bad = t;
            break;
        }
    if (bad >= 0)
        NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                   "concat_and_cache_mla: slot_mapping[%lld] = %lld is outside the cache "
                   "(%lld blocks x %d = %lld slots); nothing written",
                   (long long)bad, (long long)a->slot_mapping[bad], (long long)a->num_blocks,
                   a->block_size, (long long)capacity);
    if (capacity > 0 && !a->kv_cache)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: kv_cache is NULL");
    return NUMLA_STATUS_OK;
}

numla_status numla_concat_and_cache_mla(numla_isa isa, const numla_kv_write_args *args)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "concat_and_cache_mla: unknown ISA %d", (int)isa);
    NUMLA_CHECK(numla_kv_write_validate(args));
    const int64_t n = args->num_tokens;
    if (n == 0)
        return NUMLA_STATUS_OK;
    const numla_isa level = numla_isa_pick(isa, &numla_kv_write_table_[0][0], 1, 0, NULL);
    const numla_kv_write_fn fn = ((const numla_kv_write_variant *)numla_kv_write_table_[level][0])->write;
    const int64_t bytes = n * ((int64_t)args->kv_lora_rank + args->rope_dim) *
                          (int64_t)numla_dtype_size(args->kv_dtype);
#pragma omp parallel if (bytes >= NUMLA_KV_WRITE_PARALLEL_BYTES)
    {
        /* Contiguous token ranges per thread: each thread writes whole rows. */
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t t0 = n * id / nt, t1 = n * (id + 1) / nt;
        if (t0 < t1)
            fn(args, t0, t1);
    }
    return NUMLA_STATUS_OK;
}
