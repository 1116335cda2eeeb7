/* kernels/mha_prefill_internal.h — private to the mha_prefill family: the variant signature, the
 * per-thread scratch layout (the query/key blocking, one for every variant: kernels/blocking.h). */
#ifndef NUMLA_KERNELS_MHA_PREFILL_INTERNAL_H
#define NUMLA_KERNELS_MHA_PREFILL_INTERNAL_H

#include "kernels/mha_prefill.h"
#include "kernels/blocking.h"

/* Per-thread scratch floats: scores (QB × KB), output accumulator (QB × Dv), running max and
 * sum (2 × QB), then the AMX variant's split-bf16 query tiles (QB × Dqk × 2 bf16) and P tiles
 * (QB × KB × 2 bf16). */
static inline size_t numla_mha_prefill_thread_floats(const numla_mha_prefill_args *a)
{
    const size_t qb = NUMLA_MHA_PREFILL_QB, kb = NUMLA_MHA_PREFILL_KB;
    /* (+ 16 twice: alignment slack of the fp32 part and of the bf16 tiles) */
    return qb * kb + qb * (size_t)a->v_dim + 2 * qb + 16 + qb * (size_t)a->qk_dim + qb * kb + 16;
}

/* One key block of the dispatcher's packing: Kt (Dqk, KB) then V (KB, Dv). The amx variant's
 * packing (numla_mha_prefill_pack_block_amx) holds split-bf16 AMX B tiles there instead (same
 * footprints). */
static inline size_t numla_mha_prefill_kv_block_floats(const numla_mha_prefill_args *a)
{
    return (size_t)NUMLA_MHA_PREFILL_KB * ((size_t)a->qk_dim + (size_t)a->v_dim);
}

/* Queries [i0, i1) of sequence b, head h (i1 - i0 <= QB). scratch: thread_floats() floats,
 * 64-byte aligned. kt: this (sequence, head)'s keys and values packed once by the dispatcher,
 * blocks of KB keys of kv_block_floats() each: Kt (Dqk, KB) zero-padded past the last key
 * (key j, dim d at d · KB + j % KB), then V (KB, Dv) rows (rows past the last key undefined).
 * No OpenMP inside. */
typedef void (*numla_mha_prefill_fn)(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                     int32_t i0, int32_t i1, float *scratch, const float *kt);

void numla_mha_prefill_ref(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                           int32_t i1, float *scratch, const float *kt);
void numla_mha_prefill_avx2(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                            int32_t i1, float *scratch, const float *kt);
/* Whether the avx2 variant takes these args: v_dim a multiple of 8; when not, the reference
 * runs them. */
int numla_mha_prefill_avx2_applies(const numla_mha_prefill_args *a);
void numla_mha_prefill_avx512(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                              int32_t i1, float *scratch, const float *kt);
/* The avx512 variant with Q·Kᵀ and P·V on AMX tiles, over the tile packing; the dispatcher
 * picks it at the amx level when numla_mha_prefill_amx_applies. */
void numla_mha_prefill_avx512_amx(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                  int32_t i0, int32_t i1, float *scratch, const float *kt);

/* Keys and values of (sequence b, head h), key block kb, packed into kt (that (sequence,
 * head)'s region; the block at kb · kv_block_floats()) in the layout the variant reads. Runs
 * once per block before any task, on the dispatcher's threads. */
typedef void (*numla_mha_prefill_pack_fn)(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                          int64_t kb, float *kt);
/* The amx variant's packing: split-bf16 B tiles (kernels/x86/mha_prefill_amx.c). */
void numla_mha_prefill_pack_block_amx(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                      int64_t kb, float *kt);
/* Whether the amx variant takes these args: qk_dim and v_dim multiples of 32 (the tiles
 * themselves are the entry's needs, NUMLA_CPU_AMX_BF16); when not, the level below runs them. */
int numla_mha_prefill_amx_applies(const numla_mha_prefill_args *a);

/* A variant of the family's dispatch table (kernels/mha_prefill.c): the head (kernels/isa.h:
 * name, CPU needs, and applies(), asked about the args) and its functions. */
typedef struct numla_mha_prefill_impl {
    numla_variant v;
    numla_mha_prefill_fn attend;
    numla_mha_prefill_pack_fn pack;  /* NULL: the variant reads k and v in place */
} numla_mha_prefill_impl;

#endif
