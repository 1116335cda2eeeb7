/* kernels/mla_attn_internal.h — private interface between the MLA attention frame
 * (kernels/mla_attn.c: validation, work split, LSE merge, output conversion) and the per-ISA
 * chunk kernels (kernels/ref/mla_attn_ref.c, kernels/x86/mla_attn_<isa>.c). Not a contract for
 * other modules.
 *
 * Rows: a "row" is one (query, head) pair. Query rows are laid out (T_q, H, Dc + Dr), so the
 * rows of sequence b are the contiguous global rows qsl[b]·H .. qsl[b+1]·H - 1, in q, out and
 * lse alike. A chunk is up to NUMLA_MLA_ATTN_ROWS consecutive rows of one sequence (one
 * "head block": up to sixteen heads of one query; in a non-causal multi-token call the
 * sequence's rows cut into sixteens, which may span queries) and one key chunk [k0, k1) of the
 * frame's fixed chunking (kernels/mla_attn.c), whose tiles start at k0. All rows of a chunk see
 * the same keys, except where a kernel is called directly (kernels/dsa.c).
 * The chunk kernel walks the keys of [k0, k1) once, loads/converts each cache row once and uses
 * it for every row of the item (MLA is MQA-shaped), and returns the unnormalised online-softmax
 * state: acc[r] = Σ_t e^(s_rt - m_r) · v_t, l[r] = Σ_t e^(s_rt - m_r), m[r] = max_t s_rt
 * (s already scaled), with m = -inf, l = 0, acc = 0 for a row that sees no key in the range.
 * Row r only sees keys t < lim[r] (lim[r] in [k0, k1]); lim is non-decreasing in r except
 * across query boundaries of few-head blocks, so kernels must not assume monotone limits.
 */
#ifndef NUMLA_KERNELS_MLA_ATTN_INTERNAL_H
#define NUMLA_KERNELS_MLA_ATTN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/mla_attn.h"
#include "kernels/blocking.h"

enum { NUMLA_MLA_ATTN_ROWS = 16 }; /* rows per chunk: one zmm of fp32 scores per key */

typedef struct numla_mla_attn_chunk {
    const numla_mla_attn_args *a;
    int32_t seq;                     /* b */
    int32_t nrows;                   /* 1 ..= NUMLA_MLA_ATTN_ROWS */
    int64_t row0;                    /* first global (query, head) row */
    int64_t k0, k1;                  /* key range of this split */
    int64_t lim[NUMLA_MLA_ATTN_ROWS]; /* (nrows) per-row key end, in [k0, k1] */
    /* V packed once for the head blocks of a group (NULL: none). The frame passes it only when
     * every row of every block sees all of [k0, k1), so the blocks cut [k0, k1) into the same
     * key tiles. vshare_fill = 1: this call may pack V of [k0, k1) into it (the first block);
     * 0: an earlier call with the same range did, so use it. A variant that packs no V ignores
     * it: then no call fills it and none reads it. At most NUMLA_MLA_ATTN_VSHARE_KEYS keys. */
    uint16_t *vshare;                /* (keys / 64, Dc / 64, 2, 4, 16, 32) bf16, 64-byte aligned */
    int32_t vshare_fill;
    /* NULL: key i of [k0, k1) is token i of the sequence. Else token keys[i] (DSA's sparse
     * attention, kernels/dsa.c: an index list; then vshare is NULL). Only the avx2 and
     * avx512bf16 chunks read it; kernels/dsa.c calls no other. */
    const int32_t *keys;
    /* 1: the previous chunk call on this thread had the same rows (row0, nrows) and packed
     * their q into the scratch, which nothing touched since: a variant may use that packing
     * instead of packing q again. A variant that ignores it packs every call. */
    int32_t q_ready;
} numla_mla_attn_chunk;

/* acc: (NUMLA_MLA_ATTN_ROWS, Dc) fp32, 64-byte aligned; m, l: (NUMLA_MLA_ATTN_ROWS).
 * scratch: the kernel's own per-thread scratch (scratch_bytes), 64-byte aligned. */
typedef void (*numla_mla_attn_chunk_fn)(const numla_mla_attn_chunk *c, float *acc, float *m,
                                        float *l, void *scratch);

/* A variant of the table in kernels/mla_attn.c: the head (kernels/isa.h: name, CPU needs, and
 * applies(), asked about the numla_mla_attn_args: whether it handles these dims and dtypes,
 * else the level below runs them) and its functions. */
typedef struct numla_mla_attn_kernel {
    numla_variant v;
    numla_mla_attn_chunk_fn chunk;
    /* Per-thread scratch bytes the chunk function needs for these args. */
    size_t (*scratch_bytes)(const numla_mla_attn_args *a);
} numla_mla_attn_kernel;

/* The work plan numla_mla_attn would build for these args on nt threads (args validated by
 * the caller): how many items, and the most head blocks one item runs. For tests of the
 * plan's parallelism; allocates, so not for the hot path. */
void numla_mla_attn_plan_stats(const numla_mla_attn_args *a, int nt, int64_t *items,
                               int32_t *max_units);

extern const numla_mla_attn_kernel numla_mla_attn_kernel_ref;
extern const numla_mla_attn_kernel numla_mla_attn_kernel_avx2;
extern const numla_mla_attn_kernel numla_mla_attn_kernel_avx512;
extern const numla_mla_attn_kernel numla_mla_attn_kernel_avx512bf16;
extern const numla_mla_attn_kernel numla_mla_attn_kernel_amx;

/* Cache row of token t of sequence b (t < seq_lens[b], already validated). */
static inline const char *numla_mla_attn_kv_row(const numla_mla_attn_args *a, int32_t b, int64_t t)
{
    int64_t width = (int64_t)a->kv_lora_rank + a->rope_dim;
    int64_t blk = a->block_tables[(int64_t)b * a->max_blocks_per_seq + t / a->block_size];
    int64_t slot = blk * a->block_size + t % a->block_size;
    return (const char *)a->kv_cache + slot * width * (int64_t)numla_dtype_size(a->kv_dtype);
}

#endif
