/* kernels/x86/mha_prefill_amx.c — AMX-BF16 Q·Kᵀ scores for mha_prefill (see
 * kernels/x86/mha_prefill_amx.h for the layouts and the split-bf16 precision argument).
 *
 * Scores, per 16 query rows: C tiles 0-3 hold the scores against the block's 4 groups of 16 keys; per
 * 32-dim block, A = q hi (tile 4) and q lo (tile 5); per pair of key groups B = their k hi
 * (tiles 6, 7, each used with both A tiles), then their k lo (with q hi): 12 TDPBF16PS per dim
 * block, two accumulation chains interleaved.
 * P·V, per 16 query rows and 64 value dims: C tiles 0-3 are loaded from and stored back to the
 * fp32 accumulator O (the online softmax rescales it in between); per 32-key group A = P hi / lo
 * (tiles 4, 5), B = V hi / lo per 16-dim block, the same three products. */
/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own names, so it links next to this file's real build (suite
 * amx_hardware compares the two). */
#ifdef NUMLA_AMX_EMULATE
#define numla_mha_prefill_amx_applies numla_mha_prefill_amx_applies_emulated
#define numla_mha_prefill_pack_block_amx numla_mha_prefill_pack_block_amx_emulated
#define numla_mha_prefill_pack_k_amx numla_mha_prefill_pack_k_amx_emulated
#define numla_mha_prefill_pack_q_amx numla_mha_prefill_pack_q_amx_emulated
#define numla_mha_prefill_pack_v_amx numla_mha_prefill_pack_v_amx_emulated
#define numla_mha_prefill_pv_amx numla_mha_prefill_pv_amx_emulated
#define numla_mha_prefill_scores_amx numla_mha_prefill_scores_amx_emulated
#endif

#include "kernels/x86/mha_prefill_amx.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/mha_prefill_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/bf16_pack_avx512.h"

enum { KB = NUMLA_MHA_PREFILL_KB, TILE = 512 /* bf16 per tile */ };
_Static_assert(NUMLA_MHA_PREFILL_KB == 64, "scores_amx unrolls 4 key groups of 16");
_Static_assert(NUMLA_MHA_PREFILL_QB % 16 == 0, "query tasks are whole row tiles");

int numla_mha_prefill_amx_applies(const numla_mha_prefill_args *a)
{
    return a->qk_dim % 32 == 0 && a->v_dim % 32 == 0;
}

void numla_mha_prefill_pack_block_amx(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                      int64_t kb, float *kt)
{
    const int32_t D = a->qk_dim, Dv = a->v_dim;
    const int64_t nkeys = (int64_t)a->prefix[b] + a->q_len[b], j0 = kb * KB;
    float *dst = kt + (size_t)kb * numla_mha_prefill_kv_block_floats(a);
    const float *src = a->k + ((int64_t)a->k_start[b] + j0) * a->k_stride + (int64_t)h * D;
    const float *vs = a->v + ((int64_t)a->k_start[b] + j0) * a->v_stride + (int64_t)h * Dv;
    const int32_t n = nkeys - j0 < KB ? (int32_t)(nkeys - j0) : KB;
    /* the same footprints as the fp32 Kt and V parts */
    numla_mha_prefill_pack_k_amx(src, a->k_stride, n, D, (uint16_t *)(void *)dst);
    numla_mha_prefill_pack_v_amx(vs, a->v_stride, n, Dv,
                                 (uint16_t *)(void *)(dst + (size_t)D * KB));
}

/* 32 floats -> hi (bf16(x)) and lo (bf16(x - hi)), each 32 bf16 in element order. */
static inline void split32(const float *x, __m512i *hi, __m512i *lo)
{
    numla_x86_split_bf16(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), hi, lo);
}

void numla_mha_prefill_pack_k_amx(const float *k, int64_t ks, int32_t n, int32_t D, uint16_t *kp)
{
    const int32_t ndb = D / 32;
    /* per (dim block, key group): the 16 keys' split rows (word p = dims 2p, 2p + 1) transposed
     * so that tile row p holds word p of each key */
    for (int32_t c = 0; c < ndb; c++)
        for (int32_t g = 0; g < KB / 16; g++) {
            __m512i hi[16], lo[16];
            for (int32_t jj = 0; jj < 16; jj++) {
                const int32_t j = 16 * g + jj;
                if (j < n) {
                    split32(k + (int64_t)j * ks + 32 * c, &hi[jj], &lo[jj]);
                } else {
                    hi[jj] = _mm512_setzero_si512();
                    lo[jj] = hi[jj];
                }
            }
            numla_x86_transpose16(hi);
            numla_x86_transpose16(lo);
            uint16_t *th = kp + (size_t)((c * (KB / 16) + g) * 2) * TILE;
            for (int p = 0; p < 16; p++) {
                _mm512_storeu_si512((void *)(th + 32 * p), hi[p]);
                _mm512_storeu_si512((void *)(th + TILE + 32 * p), lo[p]);
            }
        }
}

void numla_mha_prefill_pack_q_amx(const float *const *qrow, int32_t nq, int32_t D, uint16_t *qp)
{
    const int32_t ndb = D / 32, nrt = (nq + 15) / 16;
    for (int32_t i = 0; i < nrt * 16; i++) {
        const int32_t rt = i / 16, r = i % 16;
        for (int32_t c = 0; c < ndb; c++) {
            uint16_t *th = qp + (size_t)((rt * ndb + c) * 2) * TILE + (size_t)r * 32;
            if (i >= nq) {
                _mm512_storeu_si512((void *)th, _mm512_setzero_si512());
                _mm512_storeu_si512((void *)(th + TILE), _mm512_setzero_si512());
                continue;
            }
            __m512i hi, lo;
            split32(qrow[i] + 32 * c, &hi, &lo);
            _mm512_storeu_si512((void *)th, hi);
            _mm512_storeu_si512((void *)(th + TILE), lo);
        }
    }
}

/* The tile step both products share: C tiles c and c1 = c + 1 (literal constants: they name
 * tile registers) += A hi / lo (tiles 4, 5) times the two B tile pairs (hi, lo) at tile
 * indices 2c, 2c + 1 and 2c + 2, 2c + 3 of base: hi·hi, lo·hi, hi·lo for each, the two
 * accumulation chains alternating so no TDPBF16PS waits on the one before it. Scores: B = key
 * groups c, c + 1 of a dim block; P·V: B = value blocks c, c + 1 of a key group. */
#define NUMLA_MHA_AMX_PAIR(c, c1, base)                                                           \
    do {                                                                                           \
        _tile_loadd(6, (base) + (size_t)(2 * (c)) * TILE, 64);                                     \
        _tile_loadd(7, (base) + (size_t)(2 * (c) + 2) * TILE, 64);                                 \
        _tile_dpbf16ps(c, 4, 6);                                                                   \
        _tile_dpbf16ps(c1, 4, 7);                                                                  \
        _tile_dpbf16ps(c, 5, 6);                                                                   \
        _tile_dpbf16ps(c1, 5, 7);                                                                  \
        _tile_loadd(6, (base) + (size_t)(2 * (c) + 1) * TILE, 64);                                 \
        _tile_loadd(7, (base) + (size_t)(2 * (c) + 3) * TILE, 64);                                 \
        _tile_dpbf16ps(c, 4, 6);                                                                   \
        _tile_dpbf16ps(c1, 4, 7);                                                                  \
    } while (0)

void numla_mha_prefill_scores_amx(const uint16_t *qp, int32_t nq, int32_t D, const uint16_t *kp,
                                  float *S)
{
    const int32_t ndb = D / 32, nrt = (nq + 15) / 16;
    for (int32_t rt = 0; rt < nrt; rt++) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int32_t c = 0; c < ndb; c++) {
            const uint16_t *qc = qp + (size_t)((rt * ndb + c) * 2) * TILE;
            const uint16_t *kc = kp + (size_t)(c * (KB / 16) * 2) * TILE;
            _tile_loadd(4, qc, 64);
            _tile_loadd(5, qc + TILE, 64);
            NUMLA_MHA_AMX_PAIR(0, 1, kc);
            NUMLA_MHA_AMX_PAIR(2, 3, kc);
        }
        float *s = S + (size_t)rt * 16 * KB;
        _tile_stored(0, s, KB * sizeof(float));
        _tile_stored(1, s + 16, KB * sizeof(float));
        _tile_stored(2, s + 32, KB * sizeof(float));
        _tile_stored(3, s + 48, KB * sizeof(float));
    }
}

void numla_mha_prefill_pack_v_amx(const float *v, int64_t vs, int32_t n, int32_t Dv, uint16_t *vp)
{
    const int32_t nvb = Dv / 16;
    memset(vp, 0, (size_t)KB * Dv * 2 * sizeof *vp);
    /* keys 2r, 2r + 1 of group g, dims 16·d .. 16·d + 15: row r of tile (g, d, part), as
     * (a_0, b_0, a_1, b_1, ...): one permute of the two keys' 32 bf16 per 16 dims */
    const __m512i ilo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                         8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i ihi = _mm512_add_epi16(ilo, _mm512_set1_epi16(16));
    for (int32_t j = 0; j < n; j += 2) {
        const int32_t g = j / 32, r = (j % 32) / 2;
        for (int32_t c = 0; c < Dv; c += 32) {
            __m512i ha, la, hb = _mm512_setzero_si512(), lb = hb;
            split32(v + (int64_t)j * vs + c, &ha, &la);
            if (j + 1 < n)
                split32(v + (int64_t)(j + 1) * vs + c, &hb, &lb);
            uint16_t *t0 = vp + (size_t)((g * nvb + c / 16) * 2) * TILE + (size_t)r * 32;
            uint16_t *t1 = t0 + 2 * TILE; /* value block c/16 + 1 */
            _mm512_storeu_si512((void *)t0, _mm512_permutex2var_epi16(ha, ilo, hb));
            _mm512_storeu_si512((void *)(t0 + TILE), _mm512_permutex2var_epi16(la, ilo, lb));
            _mm512_storeu_si512((void *)t1, _mm512_permutex2var_epi16(ha, ihi, hb));
            _mm512_storeu_si512((void *)(t1 + TILE), _mm512_permutex2var_epi16(la, ihi, lb));
        }
    }
}

void numla_mha_prefill_pv_amx(const float *S, int32_t nq, const uint16_t *vp, int32_t Dv,
                              uint16_t *pp, float *O)
{
    const int32_t nrt = (nq + 15) / 16, nvb = Dv / 16;
    /* P as A tiles: (row tile, key group, hi/lo, 16 rows, 32 keys) */
    for (int32_t i = 0; i < nrt * 16; i++)
        for (int32_t g = 0; g < KB / 32; g++) {
            uint16_t *th = pp + (size_t)(((i / 16) * (KB / 32) + g) * 2) * TILE + (size_t)(i % 16) * 32;
            __m512i hi = _mm512_setzero_si512(), lo = hi;
            if (i < nq)
                split32(S + (size_t)i * KB + 32 * g, &hi, &lo);
            _mm512_storeu_si512((void *)th, hi);
            _mm512_storeu_si512((void *)(th + TILE), lo);
        }
    const size_t os = (size_t)Dv * sizeof(float);
    for (int32_t rt = 0; rt < nrt; rt++)
        for (int32_t d0 = 0; d0 < nvb; d0 += 4) { /* 64 dims: C tiles 0-3 */
            float *o = O + (size_t)rt * 16 * Dv + (size_t)d0 * 16;
            const int nd = nvb - d0 < 4 ? nvb - d0 : 4;
            if (nd < 4) { /* fewer than 64 dims left: one 16-dim block at a time */
                for (int32_t d = d0; d < nvb; d++) {
                    float *od = O + (size_t)rt * 16 * Dv + (size_t)d * 16;
                    _tile_loadd(0, od, os);
                    for (int32_t g = 0; g < KB / 32; g++) {
                        const uint16_t *pa = pp + (size_t)((rt * (KB / 32) + g) * 2) * TILE;
                        const uint16_t *vb = vp + (size_t)((g * nvb + d) * 2) * TILE;
                        _tile_loadd(4, pa, 64);
                        _tile_loadd(5, pa + TILE, 64);
                        _tile_loadd(6, vb, 64);
                        _tile_loadd(7, vb + TILE, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(0, 5, 6);
                        _tile_dpbf16ps(0, 4, 7);
                    }
                    _tile_stored(0, od, os);
                }
                break;
            }
            _tile_loadd(0, o, os);
            _tile_loadd(1, o + 16, os);
            _tile_loadd(2, o + 32, os);
            _tile_loadd(3, o + 48, os);
            for (int32_t g = 0; g < KB / 32; g++) {
                const uint16_t *pa = pp + (size_t)((rt * (KB / 32) + g) * 2) * TILE;
                const uint16_t *vg = vp + (size_t)((g * nvb + d0) * 2) * TILE;
                _tile_loadd(4, pa, 64);
                _tile_loadd(5, pa + TILE, 64);
                NUMLA_MHA_AMX_PAIR(0, 1, vg);
                NUMLA_MHA_AMX_PAIR(2, 3, vg);
            }
            _tile_stored(0, o, os);
            _tile_stored(1, o + 16, os);
            _tile_stored(2, o + 32, os);
            _tile_stored(3, o + 48, os);
        }
}
