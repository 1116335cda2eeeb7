/* kernels/x86/mla_attn_amx.c — AMX-BF16 Q·K for the MLA attention chunk kernel: per 16 keys,
 * C (16 keys x 16 rows, fp32) += A (16 cache rows x 32 bf16, loaded straight from the paged
 * cache with the row stride) · B (16 pairs x 16 rows of q, the VNNI layout the avx512bf16
 * kernel already packs). Up to four 16-key groups run as independent accumulator chains so the
 * TDPBF16PS latency is hidden. The tile permission and
 * configuration are shared with the linear GEMM (kernels/x86/amx.h). */
/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own names, so it links next to this file's real build (suite
 * amx_hardware compares the two). */
#ifdef NUMLA_AMX_EMULATE
#define numla_mla_amx_begin numla_mla_amx_begin_emulated
#define numla_mla_amx_end numla_mla_amx_end_emulated
#define numla_mla_qk_amx numla_mla_qk_amx_emulated
#define numla_mla_pv_amx numla_mla_pv_amx_emulated
#define numla_mla_pv_amx_unpermute numla_mla_pv_amx_unpermute_emulated
#endif

#include "kernels/x86/mla_attn_amx.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x86/amx.h"
#include "kernels/x86/bf16_pack_avx512.h"

void numla_mla_amx_begin(void) { numla_amx_tiles_begin(); }

void numla_mla_amx_end(void) { numla_amx_tiles_end(); }

/* NG groups of 16 keys: tiles 0..NG-1 accumulate, 4 holds B (q hi), 7 q lo when LO, 5 and 6
 * alternate A. */
static inline __attribute__((always_inline)) void
numla_mla_qk_amx_ng(const uint32_t *qv, const uint32_t *qlo, int64_t w, const char *const *base,
                    const size_t *stride, float *S, const int NG, const int LO)
{
    _tile_zero(0);
    if (NG > 1)
        _tile_zero(1);
    if (NG > 2)
        _tile_zero(2);
    if (NG > 3)
        _tile_zero(3);
    for (int64_t s = 0; s < w / 32; s++) {
        _tile_loadd(4, qv + s * 256, 64);
        if (LO)
            _tile_loadd(7, qlo + s * 256, 64);
        _tile_loadd(5, base[0] + s * 64, stride[0]);
        _tile_dpbf16ps(0, 5, 4);
        if (LO)
            _tile_dpbf16ps(0, 5, 7);
        if (NG > 1) {
            _tile_loadd(6, base[1] + s * 64, stride[1]);
            _tile_dpbf16ps(1, 6, 4);
            if (LO)
                _tile_dpbf16ps(1, 6, 7);
        }
        if (NG > 2) {
            _tile_loadd(5, base[2] + s * 64, stride[2]);
            _tile_dpbf16ps(2, 5, 4);
            if (LO)
                _tile_dpbf16ps(2, 5, 7);
        }
        if (NG > 3) {
            _tile_loadd(6, base[3] + s * 64, stride[3]);
            _tile_dpbf16ps(3, 6, 4);
            if (LO)
                _tile_dpbf16ps(3, 6, 7);
        }
    }
    _tile_stored(0, S, 64);
    if (NG > 1)
        _tile_stored(1, S + 256, 64);
    if (NG > 2)
        _tile_stored(2, S + 512, 64);
    if (NG > 3)
        _tile_stored(3, S + 768, 64);
}

void numla_mla_qk_amx(const uint32_t *qv, const uint32_t *qlo, int64_t w, const char *const *rows,
                      int64_t nt, float *S, uint16_t *stage)
{
    const size_t rowbytes = (size_t)w * 2;
    const char *base[4];
    size_t stride[4];
    int ng = (int)((nt + 15) / 16);
    for (int g = 0; g < ng; g++) {
        const char *const *r = rows + 16 * g;
        int64_t n = nt - 16 * g < 16 ? nt - 16 * g : 16;
        int contig = n == 16;
        for (int64_t i = 1; contig && i < 16; i++)
            contig = r[i] == r[0] + (size_t)i * rowbytes;
        if (contig) {
            base[g] = r[0];
            stride[g] = rowbytes;
            continue;
        }
        /* Small or partial blocks: copy the group's rows (keys past nt get zeros, never NaN
         * from rows past the sequence end). */
        char *st = (char *)(stage + (size_t)g * 16 * (size_t)w);
        for (int64_t i = 0; i < 16; i++) {
            if (i < n)
                memcpy(st + (size_t)i * rowbytes, r[i], rowbytes);
            else
                memset(st + (size_t)i * rowbytes, 0, rowbytes);
        }
        base[g] = st;
        stride[g] = rowbytes;
    }
    /* NG and LO are compile-time constants of each inlined copy: one case per pair */
#define NUMLA_MLA_QK_CASE(NG, LO)                                                              \
    case 2 * (NG) + (LO):                                                                      \
        numla_mla_qk_amx_ng(qv, qlo, w, base, stride, S, NG, LO);                              \
        break
    switch (2 * ng + (qlo != NULL)) {
        NUMLA_MLA_QK_CASE(1, 0);
        NUMLA_MLA_QK_CASE(1, 1);
        NUMLA_MLA_QK_CASE(2, 0);
        NUMLA_MLA_QK_CASE(2, 1);
        NUMLA_MLA_QK_CASE(3, 0);
        NUMLA_MLA_QK_CASE(3, 1);
        NUMLA_MLA_QK_CASE(4, 0);
        NUMLA_MLA_QK_CASE(4, 1);
    default:
        break; /* nt in 1..64: ng in 1..4 */
    }
#undef NUMLA_MLA_QK_CASE
}

/* ---- P·V ---- */

/* Split-bf16 P as A tiles: for each 32-key group g, tile hi then lo, row h = head row h,
 * element 2kk+e = P of key 32g + 2kk + e (zero past nt). S: (nt, 16) fp32, 64-byte aligned. */
static void numla_mla_pv_pack_p(const float *S, int64_t nt, int ng, uint16_t *pst)
{
    /* bf16 element e of a split (p0[0..15], then p1[0..15]) -> word r = (p0[r], p1[r]) */
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                           24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                           16, 0);
    for (int g = 0; g < ng; g++) {
        __m512i vh[16], vl[16]; /* word r of vh[kk]: (key 32g + 2kk, key 32g + 2kk + 1) of row r */
        for (int kk = 0; kk < 16; kk++) {
            const int64_t t = 32 * g + 2 * kk;
            const __m512 p0 = t < nt ? _mm512_load_ps(S + 16 * t) : _mm512_setzero_ps();
            const __m512 p1 = t + 1 < nt ? _mm512_load_ps(S + 16 * (t + 1)) : _mm512_setzero_ps();
            __m512i h, l;
            numla_x86_split_bf16(p0, p1, &h, &l);
            vh[kk] = _mm512_permutexvar_epi16(pairs, h);
            vl[kk] = _mm512_permutexvar_epi16(pairs, l);
        }
        numla_x86_transpose16(vh);
        numla_x86_transpose16(vl);
        uint32_t *dh = (uint32_t *)(void *)(pst + (size_t)(2 * g) * 512), *dl = dh + 256;
        for (int r = 0; r < 16; r++) {
            _mm512_store_si512((void *)(dh + 16 * r), vh[r]);
            _mm512_store_si512((void *)(dl + 16 * r), vl[r]);
        }
    }
}

void numla_mla_pv_amx(float *O, int64_t dc, const float *S, const float *corr, int fresh,
                      int rescale, const char *const *vrows, int64_t nt, uint16_t *stage,
                      uint16_t *vpre, int vfill)
{
    const int ng = (int)((nt + 31) / 32);
    uint16_t *pst = stage;              /* (ng, 2, 16, 32): A tiles */
    uint16_t *vst = stage + 2 * 2 * 512; /* (2 groups, 4 d-blocks, 16, 32): B tiles */
    if (!fresh && rescale)
        for (int h = 0; h < 16; h++) {
            const __m512 cv = _mm512_set1_ps(corr[h]);
            for (int64_t d = 0; d < dc; d += 16)
                _mm512_store_ps(O + h * dc + d, _mm512_mul_ps(_mm512_load_ps(O + h * dc + d), cv));
        }
    numla_mla_pv_pack_p(S, nt, ng, pst);
    const size_t ostride = (size_t)dc * sizeof(float);
    for (int64_t dg = 0; dg < dc; dg += 64) {
        /* V of the 64 dims [dg, dg + 64) for every key pair, as B tiles: packed here into the
         * stage, or into / from vpre when head blocks share it */
        if (vpre)
            vst = vpre + (size_t)(dg / 64) * 2 * 4 * 512;
        for (int kp = 0; kp < 16 * ng && (!vpre || vfill); kp++) {
            const int64_t ta = 2 * kp, tb = ta + 1;
            const uint16_t *a = ta < nt ? (const uint16_t *)(const void *)vrows[ta] + dg : NULL;
            const uint16_t *b = tb < nt ? (const uint16_t *)(const void *)vrows[tb] + dg : NULL;
            uint16_t *dst = vst + (size_t)(kp / 16) * 4 * 512 + (size_t)(kp % 16) * 32;
            for (int c = 0; c < 2; c++) {
                const __m512i za = a ? _mm512_loadu_si512((const void *)(a + 32 * c)) : _mm512_setzero_si512();
                const __m512i zb = b ? _mm512_loadu_si512((const void *)(b + 32 * c)) : _mm512_setzero_si512();
                /* (a_d, b_d) words, d in {0-3, 8-11, 16-19, 24-27} then the other 16: the
                 * accumulator's permuted column order (numla_mla_pv_amx_unpermute) */
                _mm512_store_si512((void *)(dst + (size_t)(2 * c) * 512), _mm512_unpacklo_epi16(za, zb));
                _mm512_store_si512((void *)(dst + (size_t)(2 * c + 1) * 512), _mm512_unpackhi_epi16(za, zb));
            }
        }
        float *o = O + dg;
        if (fresh) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        } else {
            _tile_loadd(0, o, ostride);
            _tile_loadd(1, o + 16, ostride);
            _tile_loadd(2, o + 32, ostride);
            _tile_loadd(3, o + 48, ostride);
        }
        for (int g = 0; g < ng; g++) {
            const uint16_t *pa = pst + (size_t)g * 2 * 512, *vb = vst + (size_t)g * 4 * 512;
            _tile_loadd(4, pa, 64);
            _tile_loadd(5, pa + 512, 64);
            _tile_loadd(6, vb, 64);
            _tile_loadd(7, vb + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(0, 5, 6);
            _tile_dpbf16ps(1, 5, 7);
            _tile_loadd(6, vb + 1024, 64);
            _tile_loadd(7, vb + 1536, 64);
            _tile_dpbf16ps(2, 4, 6);
            _tile_dpbf16ps(3, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, o, ostride);
        _tile_stored(1, o + 16, ostride);
        _tile_stored(2, o + 32, ostride);
        _tile_stored(3, o + 48, ostride);
    }
}

void numla_mla_pv_amx_unpermute(float *O, int64_t rows, int64_t dc)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < dc; d += 32) {
            float *o = O + r * dc + d;
            const __m512 lo = _mm512_load_ps(o), hi = _mm512_load_ps(o + 16);
            /* lo = dims (0-3, 8-11, 16-19, 24-27), hi = (4-7, 12-15, 20-23, 28-31) */
            const __m512 a = _mm512_shuffle_f32x4(lo, hi, 0x44); /* lo.L0 lo.L1 hi.L0 hi.L1 */
            const __m512 b = _mm512_shuffle_f32x4(lo, hi, 0xee); /* lo.L2 lo.L3 hi.L2 hi.L3 */
            _mm512_store_ps(o, _mm512_shuffle_f32x4(a, a, 0xd8));      /* dims 0-15 */
            _mm512_store_ps(o + 16, _mm512_shuffle_f32x4(b, b, 0xd8)); /* dims 16-31 */
        }
}
