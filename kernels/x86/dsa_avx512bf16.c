/* kernels/x86/dsa_avx512bf16.c — the DSA indexer scoring with vdpbf16ps (kernels/dsa_internal.h),
 * for a bf16 query over a bf16 index-key cache (the engine's bf16 models): each lane holds one
 * head's (q[d], q[d+1]) pair, each key's (k[d], k[d+1]) pair is broadcast straight from the
 * cache row as one 32-bit word (no widening), and one instruction does two dimensions of 16
 * heads. The products of bf16 values are exact and the sums fp32, as the avx512 variant's; only
 * the summation grouping differs. Other dtypes or odd Di run the avx512 variant.
 * The query is packed into pairs (from the frame's fp32 copy, exact for a bf16 q) once per
 * query and work item (prepare), and the four keys of a group are summed across lanes together
 * (dsa_hsum_avx512.h).
 */
#include "kernels/dsa_internal.h"
#include "kernels/mla_attn_internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/x86/dsa_hsum_avx512.h"

static int numla_dsa_index_avx512bf16_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->num_heads % 16 == 0 && a->head_dim % 2 == 0 && a->q_dtype == NUMLA_DTYPE_BF16 &&
           a->k_dtype == NUMLA_DTYPE_BF16;
}

static size_t numla_dsa_index_avx512bf16_scratch(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * 2 + 64; /* one zero key row */
}

static size_t numla_dsa_index_avx512bf16_packed(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim / 2 * (size_t)a->num_heads * 4; /* (Di/2, Hi) pair words */
}

static void numla_dsa_index_avx512bf16_prepare(const numla_dsa_index_args *a, const float *qt,
                                               float *ws, void *packed)
{
    (void)ws;
    const int32_t H = a->num_heads, D2 = a->head_dim / 2;
    uint32_t *qp = packed;
    for (int32_t d = 0; d < D2; d++)
        for (int32_t h = 0; h < H; h++)
            qp[(size_t)d * H + h] = (uint32_t)numla_f32_to_bf16(qt[(size_t)(2 * d) * H + h]) |
                                    (uint32_t)numla_f32_to_bf16(qt[(size_t)(2 * d + 1) * H + h]) << 16;
}

static inline __attribute__((always_inline)) void
numla_dsa_bf_group(const uint32_t *qp, const uint32_t *const kr[NUMLA_DSA_BF_KEYS], int32_t D2,
                   int32_t H, int32_t v0, int nv, const float *ws, __m512 tot[NUMLA_DSA_BF_KEYS])
{
    __m512 acc[NUMLA_DSA_BF_KEYS][4];
    for (int j = 0; j < NUMLA_DSA_BF_KEYS; j++)
        for (int v = 0; v < nv; v++)
            acc[j][v] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D2; d++) {
        const uint32_t *qd = qp + (size_t)d * H + (size_t)v0 * 16;
        __m512i qv[4];
        for (int v = 0; v < nv; v++)
            qv[v] = _mm512_loadu_si512((const void *)(qd + 16 * v));
        for (int j = 0; j < NUMLA_DSA_BF_KEYS; j++) {
            const __m512i kb = _mm512_set1_epi32((int)kr[j][d]);
            for (int v = 0; v < nv; v++)
                acc[j][v] = _mm512_dpbf16_ps(acc[j][v], (__m512bh)qv[v], (__m512bh)kb);
        }
    }
    for (int v = 0; v < nv; v++) {
        const __m512 wv = _mm512_loadu_ps(ws + (size_t)(v0 + v) * 16);
        for (int j = 0; j < NUMLA_DSA_BF_KEYS; j++)
            tot[j] = _mm512_fmadd_ps(_mm512_max_ps(acc[j][v], _mm512_setzero_ps()), wv, tot[j]);
    }
}

static void numla_dsa_index_avx512bf16_scores(const numla_dsa_index_args *a, const void *packed,
                                              const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                              float *out, void *scratch)
{
    const int32_t H = a->num_heads, D2 = a->head_dim / 2, NV = H / 16;
    const uint32_t *qp = packed;                  /* (D2, H) */
    uint32_t *zero = scratch;                     /* (D2) */
    memset(zero, 0, (size_t)D2 * 4);
    for (int64_t t0 = k0; t0 < k1; t0 += NUMLA_DSA_BF_KEYS) {
        const int64_t nk = k1 - t0 < NUMLA_DSA_BF_KEYS ? k1 - t0 : NUMLA_DSA_BF_KEYS;
        numla_dsa_k_prefetch(a, seq, t0 + NUMLA_DSA_PREFETCH_KEYS, NUMLA_DSA_BF_KEYS);
        const char *rows[NUMLA_DSA_BF_KEYS];
        numla_dsa_k_rows(a, seq, t0, (int32_t)nk, rows);
        const uint32_t *kr[NUMLA_DSA_BF_KEYS];
        for (int64_t j = 0; j < NUMLA_DSA_BF_KEYS; j++)
            kr[j] = j < nk ? (const uint32_t *)(const void *)rows[j] : zero;
        __m512 tot[NUMLA_DSA_BF_KEYS];
        for (int j = 0; j < NUMLA_DSA_BF_KEYS; j++)
            tot[j] = _mm512_setzero_ps();
        int32_t v0 = 0;
        for (; v0 + 4 <= NV; v0 += 4)
            numla_dsa_bf_group(qp, kr, D2, H, v0, 4, ws, tot);
        switch (NV - v0) {
        case 3: numla_dsa_bf_group(qp, kr, D2, H, v0, 3, ws, tot); break;
        case 2: numla_dsa_bf_group(qp, kr, D2, H, v0, 2, ws, tot); break;
        case 1: numla_dsa_bf_group(qp, kr, D2, H, v0, 1, ws, tot); break;
        default: break;
        }
        float s4[4];
        _mm_storeu_ps(s4, numla_dsa_hsum4(tot[0], tot[1], tot[2], tot[3]));
        for (int64_t j = 0; j < nk; j++)
            out[t0 + j - k0] = s4[j];
    }
}

const numla_dsa_index_kernel numla_dsa_index_kernel_avx512bf16 = {
    .v = {"avx512bf16", 0, numla_dsa_index_avx512bf16_supports},
    .prepare = numla_dsa_index_avx512bf16_prepare,
    .packed_bytes = numla_dsa_index_avx512bf16_packed,
    .scores = numla_dsa_index_avx512bf16_scores,
    .scratch_bytes = numla_dsa_index_avx512bf16_scratch,
};

/* ---- sparse attention --------------------------------------------------------------------- */

/* The avx512bf16 level's sparse attention is the dense MLA kernel's chunk
 * (kernels/x86/mla_attn_avx512bf16.c: both products on vdpbf16ps, heads in lanes for Q·K, no
 * horizontal sums) walking the query's index list instead of a key range (the chunk's `keys`):
 * same numerics as numla_mla_attn at this level. Needs a bf16 latent cache, Dc % 32 == 0 and
 * Dr % 16 == 0 (the chunk's own applies()); other caches run the avx512 variant. */
static numla_mla_attn_args numla_dsa_attn_as_mla(const numla_dsa_attn_args *a)
{
    return (numla_mla_attn_args){
        .num_seqs = a->num_seqs, .num_heads = a->num_heads, .kv_lora_rank = a->kv_lora_rank,
        .rope_dim = a->rope_dim, .block_size = a->block_size, .num_blocks = a->num_blocks,
        .max_blocks_per_seq = a->block_table_stride /* the MLA args' row stride */, .q = a->q, .q_dtype = a->q_dtype,
        .kv_cache = a->kv_cache, .kv_dtype = a->kv_dtype, .block_tables = a->block_tables,
        .seq_lens = a->seq_lens, .query_start_loc = a->query_start_loc, .causal = 0,
        .scale = a->scale, .out = a->out, .out_dtype = a->out_dtype, .lse = a->lse};
}

static int numla_dsa_attn_bf16_supports(const void *args)
{
    const numla_dsa_attn_args *a = args;
    const numla_mla_attn_args m = numla_dsa_attn_as_mla(a);
    return numla_mla_attn_kernel_avx512bf16.v.applies(&m);
}

static size_t numla_dsa_attn_bf16_scratch(const numla_dsa_attn_args *a)
{
    const numla_mla_attn_args m = numla_dsa_attn_as_mla(a);
    return numla_mla_attn_kernel_avx512bf16.scratch_bytes(&m) + 64;
}

static void numla_dsa_attn_bf16_chunk(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                      int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                      float *m, float *l, void *scratch)
{
    const numla_mla_attn_args ma = numla_dsa_attn_as_mla(a);
    numla_mla_attn_chunk c = {.a = &ma, .seq = seq, .nrows = nrows, .row0 = row0, .k0 = 0,
                              .k1 = n, .keys = idx};
    for (int32_t r = 0; r < nrows; r++)
        c.lim[r] = n; /* every row of the unit sees the whole list */
    numla_mla_attn_kernel_avx512bf16.chunk(&c, acc, m, l, scratch);
}

const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx512bf16 = {
    .v = {"avx512bf16", 0, numla_dsa_attn_bf16_supports},
    .chunk = numla_dsa_attn_bf16_chunk,
    .scratch_bytes = numla_dsa_attn_bf16_scratch,
};
