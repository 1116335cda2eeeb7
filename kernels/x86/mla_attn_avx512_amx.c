/* kernels/x86/mla_attn_avx512_amx.c — the amx level's MLA attention variant: the AVX-512 chunk
 * kernel (kernels/x86/mla_attn_avx512.c, the one body) run with the tile steps below. With a
 * bf16 cache and rows of whole 32-element slices, Q·K runs on AMX tiles
 * (kernels/x86/mla_attn_amx.c; an fp32 q split into bf16 hi + lo), and P·V too when
 * Dc % 64 == 0. Other arguments run the avx512 variant (numla_mla_amx_supports); a CPU or
 * process without the tiles, too (the entry needs NUMLA_CPU_AMX_BF16). Built with the AMX
 * flags (name ends in _amx). */
#include "kernels/x86/mla_attn_avx512_internal.h"

#include <immintrin.h>

#include "kernels/x86/bf16_pack_avx512.h"
#include "kernels/x86/mla_attn_amx.h"

/* Pack the item's q rows as [pair][16] bf16 pairs for the tiles; rows past nrows are zero. An
 * fp32 or fp16 q is split into hi = bf16(q) at qbuf and lo = bf16(q - hi) right after it
 * (w / 2 · 16 pairs further): the AMX Q·K sums both products, so the scores keep fp32-class
 * error (|q - hi - lo| <= 2^-17 |q|; bf16 cache values times bf16 are exact in fp32). The
 * softmax scale is applied to the scores. */
static void numla_mla_pack_q_pairs(const numla_mla_attn_chunk *c, void *qbuf)
{
    const numla_mla_attn_args *a = c->a;
    int64_t w = (int64_t)a->kv_lora_rank + a->rope_dim;
    const int split = a->q_dtype != NUMLA_DTYPE_BF16;
    uint32_t *hi = qbuf, *lo = hi + (size_t)w / 2 * 16;
    for (int64_t jb = 0; jb < w / 32; jb++) { /* 32 elements = 16 pairs per row at a time */
        __m512i rh[16], rl[16];
        for (int32_t r = 0; r < 16; r++) {
            if (!split) {
                rh[r] = r < c->nrows ? _mm512_loadu_si512((const void *)((const uint16_t *)a->q +
                                       (size_t)(c->row0 + r) * (size_t)w + (size_t)jb * 32))
                                     : _mm512_setzero_si512();
                continue;
            }
            __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
            if (r < c->nrows) {
                const size_t base = (size_t)(c->row0 + r) * (size_t)w + (size_t)jb * 32;
                if (a->q_dtype == NUMLA_DTYPE_F32) {
                    x0 = _mm512_loadu_ps((const float *)a->q + base);
                    x1 = _mm512_loadu_ps((const float *)a->q + base + 16);
                } else {
                    const uint16_t *h = (const uint16_t *)a->q + base;
                    x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
                    x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + 16)));
                }
            }
            numla_x86_split_bf16(x0, x1, &rh[r], &rl[r]); /* word j = elements 2j, 2j + 1 */
        }
        numla_x86_transpose16(rh);
        for (int i = 0; i < 16; i++)
            _mm512_storeu_si512((void *)(hi + (size_t)(jb * 16 + i) * 16), rh[i]);
        if (split) {
            numla_x86_transpose16(rl);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_si512((void *)(lo + (size_t)(jb * 16 + i) * 16), rl[i]);
        }
    }
}

/* Q·K on the tiles needs a bf16 cache and rows of whole 32-element slices; otherwise the
 * avx512 variant runs. (Whether the tiles are there is the entry's needs.) */
static int numla_mla_amx_supports(const void *args)
{
    const numla_mla_attn_args *a = args;
    return numla_mla_avx512_supports(a) && a->kv_dtype == NUMLA_DTYPE_BF16 &&
           (a->kv_lora_rank + a->rope_dim) % 32 == 0;
}

static const numla_mla_tile_steps numla_mla_tiles_ = {
    .pack_q = numla_mla_pack_q_pairs,
    .begin = numla_mla_amx_begin,
    .end = numla_mla_amx_end,
    .qk = numla_mla_qk_amx,
    .pv = numla_mla_pv_amx,
    .unpermute = numla_mla_pv_amx_unpermute,
};

static void numla_mla_chunk_amx_(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                                 void *scratch)
{
    numla_mla_avx512_chunk(&numla_mla_tiles_, c, acc, m, l, scratch);
}

static size_t numla_mla_scratch_amx_(const numla_mla_attn_args *a)
{
    return numla_mla_avx512_scratch_bytes(&numla_mla_tiles_, a);
}

const numla_mla_attn_kernel numla_mla_attn_kernel_amx = {
    .v = {"amx", NUMLA_CPU_AMX_BF16, numla_mla_amx_supports},
    .chunk = numla_mla_chunk_amx_,
    .scratch_bytes = numla_mla_scratch_amx_,
};
