/* kernels/x86/qlinear_avx512vnni.c — int8 linear layers with vpdpbusd (AVX512-VNNI): W8A8,
 * and int8-row as three int8 planes of x (the avx512bf16 level's variant, and the amx level's
 * few rows).
 *
 * W8A8's activations are quantized per row (the rule of kernels/qlinear.h, bit for bit the
 * reference) into the workspace as u8 = q + 128, because vpdpbusd multiplies u8 by s8; the
 * offset adds 128 · Σ_k w[r][k], which the row sums computed at pack time take back out. The
 * padding of both operands is harmless: weights are zero there. int8-row's planes
 * (kernels/x86/qlinear_quant_avx512.h) are three such u8 rows per x row, their exact sums
 * combined by the planes' output rule. */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

#include "kernels/x86/qlinear_quant_avx512.h"
#include "kernels/x86/transpose16_avx512.h"

/* numla_qlinear_quantize_row_ref, vectorised (kernels/x86/qlinear_quant_avx512.h); q + 128 is
 * q with its sign bit flipped. */
static float numla_qlinear_quantize_row_vnni_(const float *x, int64_t k, int64_t kp, uint8_t *xq)
{
    float inv;
    const float sx = numla_qlinear_row_scale_avx512(x, k, &inv);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m128i off = _mm_set1_epi8((char)0x80);
    for (int64_t c = 0; c < kp; c += 16) {
        const __m128i q = numla_qlinear_quant16_avx512(x + c, numla_qlinear_mask16(k, c), vinv);
        _mm_storeu_si128((__m128i *)(void *)(xq + c), _mm_xor_si128(q, off));
    }
    return sx;
}

/* out[j][i] = Σ_k q[i][k] w[r + j][k] for j < nw, i < mr (compile-time constants after
 * inlining): per 64 bytes, nw weight loads and mr x loads feed nw x mr vpdpbusd, one chain
 * each (M = 1 still has nw = 4 independent chains). */
static inline __attribute__((always_inline)) void
numla_qlinear_vnni_tile_(const numla_qlinear_weight *w, int64_t r, const uint8_t *xq, int64_t kp,
                         const int nw, const int mr, int32_t out[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR])
{
    __m512i a[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR];
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < mr; i++)
            a[j][i] = _mm512_setzero_si512();
    /* Per 64 bytes, one prefetch per row of the next tile's line at the same column: a tile's
     * rows are one contiguous nw · kp span, and rows of 2 KiB are too short for the hardware
     * prefetcher to ramp up on each (as in kernels/x86/qlinear_avx512.c). */
    const int8_t *wr = w->q + r * kp;
    const int8_t *pf = r + 3 * nw <= w->n ? wr + 2 * nw * kp : wr;
    for (int64_t c = 0; c < kp; c += 64) {
        for (int j = 0; j < nw; j++)
            _mm_prefetch((const char *)(pf + j * kp + c), _MM_HINT_T0);
        __m512i xv[NUMLA_QLINEAR_VNNI_MR];
        for (int i = 0; i < mr; i++)
            xv[i] = _mm512_load_si512((const void *)(xq + i * kp + c));
        for (int j = 0; j < nw; j++) {
            __m512i wv = _mm512_load_si512((const void *)(wr + j * kp + c));
            for (int i = 0; i < mr; i++)
                a[j][i] = _mm512_dpbusd_epi32(a[j][i], xv[i], wv);
        }
    }
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < mr; i++)
            out[j][i] = _mm512_reduce_add_epi32(a[j][i]) - 128 * w->row_sums[r + j];
}

/* Σ_k q[k] w[r][k] for one row (M = 1): the rows are read one after another, so each thread's
 * weights are one sequential stream, with four accumulator chains and a prefetch a fixed
 * distance ahead in that stream. */
static inline int32_t numla_qlinear_vnni_row_(const int8_t *wr, const int8_t *end,
                                              const uint8_t *xq, int64_t kp)
{
    enum { AHEAD = 8192 };
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c + 256 <= kp; c += 256) {
        for (int l = 0; l < 256; l += 64)
            if (wr + c + l + AHEAD < end)
                _mm_prefetch((const char *)(wr + c + l + AHEAD), _MM_HINT_T0);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512((const void *)(xq + c)),
                                 _mm512_load_si512((const void *)(wr + c)));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_load_si512((const void *)(xq + c + 64)),
                                 _mm512_load_si512((const void *)(wr + c + 64)));
        a2 = _mm512_dpbusd_epi32(a2, _mm512_load_si512((const void *)(xq + c + 128)),
                                 _mm512_load_si512((const void *)(wr + c + 128)));
        a3 = _mm512_dpbusd_epi32(a3, _mm512_load_si512((const void *)(xq + c + 192)),
                                 _mm512_load_si512((const void *)(wr + c + 192)));
    }
    for (; c < kp; c += 64) {
        if (wr + c + AHEAD < end)
            _mm_prefetch((const char *)(wr + c + AHEAD), _MM_HINT_T0);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512((const void *)(xq + c)),
                                 _mm512_load_si512((const void *)(wr + c)));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
}

void numla_qlinear_forward_avx512vnni(const numla_qlinear_weight *w, int64_t m, const float *x,
                                      int64_t ldx, float *y, int64_t ldy, int accumulate,
                                      void *workspace)
{
    uint8_t *xq = numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_sx(workspace, w, m);
    const int64_t kp = w->kp;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++)
            sx[i] = numla_qlinear_quantize_row_vnni_(x + i * ldx, w->k, kp, xq + i * kp);
        int64_t r0, r1;
        numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        int32_t out[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR];
        if (m == 1) { /* a GEMV: one weight stream per thread */
            const int8_t *end = w->q + r1 * kp;
            for (int64_t r = r0; r < r1; r++) {
                const int32_t acc = numla_qlinear_vnni_row_(w->q + r * kp, end, xq, kp) -
                                    128 * w->row_sums[r];
                y[r] = numla_qlinear_w8a8_out(acc, sx[0], w->scales[r], y[r], accumulate);
            }
            r0 = r1;
        }
        for (int64_t r = r0; r < r1;) {
            const int nw = r1 - r >= NUMLA_QLINEAR_VNNI_NW ? NUMLA_QLINEAR_VNNI_NW : 1;
            for (int64_t i0 = 0, mr; i0 < m; i0 += mr) {
                const uint8_t *xi = xq + i0 * kp;
                mr = m - i0 >= NUMLA_QLINEAR_VNNI_MR ? NUMLA_QLINEAR_VNNI_MR : 1;
                if (nw == NUMLA_QLINEAR_VNNI_NW && mr == NUMLA_QLINEAR_VNNI_MR)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, NUMLA_QLINEAR_VNNI_NW, NUMLA_QLINEAR_VNNI_MR, out);
                else if (nw == NUMLA_QLINEAR_VNNI_NW)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, NUMLA_QLINEAR_VNNI_NW, 1, out);
                else if (mr == NUMLA_QLINEAR_VNNI_MR)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, 1, NUMLA_QLINEAR_VNNI_MR, out);
                else
                    numla_qlinear_vnni_tile_(w, r, xi, kp, 1, 1, out);
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < mr; i++) {
                        float *yo = y + (i0 + i) * ldy + r + j;
                        *yo = numla_qlinear_w8a8_out(out[j][i], sx[i0 + i], w->scales[r + j], *yo, accumulate);
                    }
            }
            r += nw;
        }
    }
}

/* ---- W8A8 many rows (numla_qlinear_gemm_applies): the packed-panel GEMM ----
 *
 * The tiles above reduce every output across 16 lanes and read x and W both as 64-byte
 * vectors, 8 loads per 16 vpdpbusd. Here each thread repacks a chunk of its weight columns
 * (numla_qlinear_vnni_chunk, in L2) per call into 16-column panels, k-quad-interleaved: panel
 * byte 64 q + 4 c + b is weight W[col c][4 q + b], so one 64-byte load holds four k of 16
 * columns, and one broadcast 4-byte quad of a quantized x row (u8) feeds a vpdpbusd per panel.
 * A 6-row x 4-panel micro-tile keeps 24 accumulators (one per x row and 16 columns, no lane
 * reduction) and per k-quad makes 4 panel loads and 6 broadcasts for 24 vpdpbusd; x's six rows
 * stay in L1 while the chunk's panels stream from L2. The integer sums are exact in any order,
 * so y is the same bits as the tiles' and the reference's (the output rule of kernels/qlinear.h,
 * vectorised, each product rounded before the next). Columns past N in the last panel are
 * zero weights; their outputs are not stored. */
/* Packs weight columns [c0, c0 + 16 np) (rows of the packed W; past N: zeros) into np panels
 * of 16 kp bytes at dst. */
static void numla_qlinear_vg_pack_(const numla_qlinear_weight *w, int64_t c0, int64_t np, int8_t *dst)
{
    const int64_t kp = w->kp;
    for (int64_t p = 0; p < np; p++) {
        const int64_t r0 = c0 + 16 * p;
        int8_t *d = dst + p * 16 * kp;
        for (int64_t c = 0; c < kp; c += 64) {
            __m512i r[16];
            for (int j = 0; j < 16; j++)
                r[j] = r0 + j < w->n ? _mm512_load_si512((const void *)(w->q + (r0 + j) * kp + c))
                                     : _mm512_setzero_si512();
            numla_x86_transpose16(r); /* r[q]: dword q of each row, in row order */
            for (int q = 0; q < 16; q++)
                _mm512_store_si512((void *)(d + c * 16 + q * 64), r[q]);
        }
    }
}

/* acc + vpdpbusd(u8 a, s8 b), in place: GCC copies the accumulator to another register and
 * back around every _mm512_dpbusd_epi32 in a loop this wide, two moves per multiply. */
static inline __attribute__((always_inline)) __m512i numla_qlinear_vg_dp_(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
    return acc;
}

/* acc[i][j] = Σ_k u8 xq[i][k] · w[col 16 j + lane][k] over the panels at pan (16 kp bytes apart),
 * for i < mr, j < nr (compile-time constants after inlining). */
static inline __attribute__((always_inline)) void
numla_qlinear_vg_tile_(const int8_t *pan, const uint8_t *xq, int64_t kp, const int mr, const int nr,
                       __m512i acc[NUMLA_QLINEAR_VG_MR][NUMLA_QLINEAR_VG_NR])
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_si512();
    const int64_t ps = 16 * kp;
    for (int64_t q = 0; q < kp; q += 4) {
        __m512i wv[NUMLA_QLINEAR_VG_NR];
        for (int j = 0; j < nr; j++)
            wv[j] = _mm512_load_si512((const void *)(pan + j * ps + q * 16));
        for (int i = 0; i < mr; i++) {
            int32_t quad;
            __builtin_memcpy(&quad, xq + i * kp + q, sizeof quad);
            const __m512i xb = _mm512_set1_epi32(quad);
            for (int j = 0; j < nr; j++)
                acc[i][j] = numla_qlinear_vg_dp_(acc[i][j], xb, wv[j]);
        }
    }
}

/* y rows i0 .. i0 + mr, columns c0 .. c0 + 16 nr (stopping at N) from the tile's sums: W8A8, the
 * output rule of kernels/qlinear.h per lane; int8-row's planes (mr plane rows, three per x row,
 * so x rows i0 .. i0 + mr / 3), the planes' rule (kernels/x86/qlinear_quant_avx512.h). */
static inline __attribute__((always_inline)) void
numla_qlinear_vg_store_(const numla_qlinear_weight *w, int64_t c0, const float *sx, float *y,
                        int64_t ldy, int accumulate, const int mr, const int nr,
                        __m512i acc[NUMLA_QLINEAR_VG_MR][NUMLA_QLINEAR_VG_NR], const int planes)
{
    enum { P = NUMLA_INT8ROW_PLANES };
    for (int j = 0; j < nr; j++) {
        const int64_t c = c0 + 16 * j;
        if (c >= w->n)
            break;
        const __mmask16 msk = w->n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (w->n - c)) - 1);
        const __m512i off = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(msk, w->row_sums + c), 7);
        const __m512 s = _mm512_maskz_loadu_ps(msk, w->scales + c);
        for (int i = 0; i < (planes ? mr / P : mr); i++) {
            __m512 v;
            if (planes) {
                __m512i cs[P];
                for (int p = 0; p < P; p++)
                    cs[p] = _mm512_sub_epi32(acc[P * i + p][j], off);
                v = numla_int8row_out16(cs, sx[i], s);
            } else {
                v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][j], off)), _mm512_set1_ps(sx[i]));
                v = _mm512_mul_ps(v, s);
                __asm__("" : "+v"(v)); /* rounded before the add, as numla_qlinear_w8a8_out */
            }
            float *yo = y + i * ldy + c;
            if (accumulate)
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(msk, yo), v);
            _mm512_mask_storeu_ps(yo, msk, v);
        }
    }
}

/* The micro-tile of MR x rows (W8A8) or MR plane rows (int8-row, i0 counting plane rows) by NR
 * panels, then its outputs. */
#define NUMLA_QLINEAR_VG_RUN(MR, NR)                                                               \
    do {                                                                                           \
        const int64_t x0 = planes ? i0 / NUMLA_INT8ROW_PLANES : i0; /* the tile's first x row */   \
        numla_qlinear_vg_tile_(pan, xq + i0 * kp, kp, MR, NR, acc);                                \
        numla_qlinear_vg_store_(w, c0, sx + x0, y + x0 * ldy, ldy, accumulate, MR, NR, acc, planes); \
    } while (0)

/* One thread's panels [p0, p1) of 16 columns: chunk by chunk, packed, then every x row over it.
 * W8A8: xq holds m quantized rows; int8-row (planes): m x rows' planes, 3 m rows of kp bytes,
 * run in tiles of whole x rows (6 or 3 plane rows). */
static void numla_qlinear_vg_rows_(const numla_qlinear_weight *w, int64_t m, const uint8_t *xq,
                                   const float *sx, float *y, int64_t ldy, int accumulate,
                                   int64_t p0, int64_t p1, int8_t *chunk, const int planes)
{
    const int64_t kp = w->kp, cp = numla_qlinear_vnni_chunk(w) / 16;
    const int64_t rows = planes ? NUMLA_INT8ROW_PLANES * m : m;
    __m512i acc[NUMLA_QLINEAR_VG_MR][NUMLA_QLINEAR_VG_NR];
    for (int64_t a = p0; a < p1; a += cp) {
        const int64_t np = p1 - a < cp ? p1 - a : cp;
        numla_qlinear_vg_pack_(w, 16 * a, np, chunk);
        for (int64_t i0 = 0; i0 < rows; i0 += NUMLA_QLINEAR_VG_MR) {
            const int64_t mr = rows - i0 < NUMLA_QLINEAR_VG_MR ? rows - i0 : NUMLA_QLINEAR_VG_MR;
            for (int64_t j0 = 0; j0 < np; j0 += NUMLA_QLINEAR_VG_NR) {
                const int64_t nr = np - j0 < NUMLA_QLINEAR_VG_NR ? np - j0 : NUMLA_QLINEAR_VG_NR;
                const int8_t *pan = chunk + j0 * 16 * kp;
                const int64_t c0 = 16 * (a + j0);
                switch (mr * 8 + nr) {
#define NUMLA_QLINEAR_VG_CASE(MRC)                                                                 \
    case MRC * 8 + 1: NUMLA_QLINEAR_VG_RUN(MRC, 1); break;                                         \
    case MRC * 8 + 2: NUMLA_QLINEAR_VG_RUN(MRC, 2); break;                                         \
    case MRC * 8 + 3: NUMLA_QLINEAR_VG_RUN(MRC, 3); break;                                         \
    case MRC * 8 + 4: NUMLA_QLINEAR_VG_RUN(MRC, 4); break;
                    NUMLA_QLINEAR_VG_CASE(1)
                    NUMLA_QLINEAR_VG_CASE(2)
                    NUMLA_QLINEAR_VG_CASE(3)
                    NUMLA_QLINEAR_VG_CASE(4)
                    NUMLA_QLINEAR_VG_CASE(5)
                    NUMLA_QLINEAR_VG_CASE(6)
#undef NUMLA_QLINEAR_VG_CASE
                default:
                    break;
                }
            }
        }
    }
}
#undef NUMLA_QLINEAR_VG_RUN

_Static_assert(NUMLA_QLINEAR_VG_MR <= 7 && NUMLA_QLINEAR_VG_NR <= 7, "the tile switch packs mr, nr in 3 bits");
_Static_assert(NUMLA_QLINEAR_VG_MR % NUMLA_INT8ROW_PLANES == 0, "a planes tile holds whole x rows");

void numla_qlinear_gemm_avx512vnni(const numla_qlinear_weight *w, int64_t m, const float *x,
                                   int64_t ldx, float *y, int64_t ldy, int accumulate,
                                   void *workspace, int max_threads)
{
    uint8_t *xq = numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_sx(workspace, w, m);
    int8_t *chunks = (int8_t *)(xq + numla_qlinear_ws_w8a8_bytes(w, m));
    const size_t per = numla_qlinear_gemm_thread_bytes(w);
    const int64_t kp = w->kp, panels = (w->n + 15) / 16;
    int nt = omp_get_max_threads();
    if (nt > max_threads)
        nt = max_threads;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++)
            sx[i] = numla_qlinear_quantize_row_vnni_(x + i * ldx, w->k, kp, xq + i * kp);
        const int ith = omp_get_thread_num();
        int64_t p0, p1;
        numla_qlinear_split(panels, ith, omp_get_num_threads(), &p0, &p1);
        if (p0 < p1)
            numla_qlinear_vg_rows_(w, m, xq, sx, y, ldy, accumulate, p0, p1, chunks + (size_t)ith * per, 0);
    }
}

/* ---- int8-row as three int8 planes (kernels/x86/qlinear_quant_avx512.h) ----
 *
 * Few rows (below NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M; also the amx level's): one weight row at
 * a time, so a thread's weights are one sequential stream (as W8A8's GEMV), each 64 bytes
 * loaded once and multiplied by the same 64 k of every x row's three planes (u8, q + 128) with
 * vpdpbusd, three chains per x row (two weight rows sharing the x loads, or the planes of each
 * 64 k stored together, read no faster: docs/linear.md); then each chain is reduced, corrected
 * by 128 Σ_k w
 * (the packed row sums) and combined by the planes' rule. More rows: the panel GEMM above with
 * each x row's three planes as three rows, their sums combined in the store. The integer sums
 * are exact in any order, so both paths, and the amx level's tiles, give the same bits. */
/* One output from its three planes' chains (u8 x s8 sums, the weight row's sum rs): Σ (q + 128)
 * w = Σ q w + 128 Σ w, then the rule of numla_int8row_out16 in scalar double (the same steps,
 * so the same bits). */
static inline float numla_qlinear_int8row_out1_(const __m512i acc[NUMLA_INT8ROW_PLANES], int32_t rs, float sx, float s)
{
    const int32_t corr = 128 * rs;
    const double b2 = NUMLA_INT8ROW_BASE * NUMLA_INT8ROW_BASE;
    const double c1 = (double)(_mm512_reduce_add_epi32(acc[0]) - corr);
    const double c2 = (double)(_mm512_reduce_add_epi32(acc[1]) - corr);
    const double c3 = (double)(_mm512_reduce_add_epi32(acc[2]) - corr);
    double v = c1 * b2 + c2 * NUMLA_INT8ROW_BASE + c3; /* exact: an integer below 2^53 */
    v = v * (double)sx;
    v = v * (double)s;
    return (float)(v / b2);
}

static inline __attribute__((always_inline)) void
numla_qlinear_int8row_row_(const numla_qlinear_weight *w, int64_t r, const int8_t *end, const uint8_t *xq,
                           const float *sx, float *y, int64_t ldy, int accumulate, const int mr)
{
    enum { P = NUMLA_INT8ROW_PLANES, MR = NUMLA_QLINEAR_ROW_PLANES_MR };
    const int64_t kp = w->kp;
    const int8_t *wr = w->q + r * kp;
    __m512i acc[MR][P];
    for (int i = 0; i < mr; i++)
        for (int p = 0; p < P; p++)
            acc[i][p] = _mm512_setzero_si512();
    for (int64_t c = 0; c < kp; c += 64) {
        if (wr + c + NUMLA_QLINEAR_ROW_PLANES_AHEAD < end)
            _mm_prefetch((const char *)(wr + c + NUMLA_QLINEAR_ROW_PLANES_AHEAD), _MM_HINT_T0);
        const __m512i wv = _mm512_load_si512((const void *)(wr + c));
        for (int i = 0; i < mr; i++)
            for (int p = 0; p < P; p++)
                acc[i][p] = numla_qlinear_vg_dp_(
                    acc[i][p], _mm512_load_si512((const void *)(xq + ((size_t)i * P + (size_t)p) * (size_t)kp + c)), wv);
    }
    for (int i = 0; i < mr; i++) {
        const float o = numla_qlinear_int8row_out1_(acc[i], w->row_sums[r], sx[i], w->scales[r]);
        float *yo = y + i * ldy + r;
        *yo = accumulate ? *yo + o : o;
    }
}

/* One x row against weight rows [r, r + NUMLA_QLINEAR_ROW_PLANES_G) where K is long (kp past
 * NUMLA_QLINEAR_ROW_PLANES_LONG_K): x's three planes (3 kp bytes) no longer share L1 with the
 * weight stream, and reading them from L2 for every row held the rate to about 10 GB/s a core
 * at K = 10944 (16 with x in L1). Here K runs in blocks of NUMLA_QLINEAR_ROW_PLANES_KB columns:
 * each block's planes stay in L1 while the group's pieces of that block stream past, the
 * group's 3 G sums in registers across the blocks (the same exact sums: the same bits as
 * numla_qlinear_int8row_row_). Each piece prefetches the same row's next block (or the next
 * group's, at a row's end). */
static void numla_qlinear_int8row_long_(const numla_qlinear_weight *w, int64_t r, const int8_t *end, const uint8_t *xq,
                                        float sx, float *y, int accumulate)
{
    enum { P = NUMLA_INT8ROW_PLANES, G = NUMLA_QLINEAR_ROW_PLANES_G, KB = NUMLA_QLINEAR_ROW_PLANES_KB };
    const int64_t kp = w->kp;
    const int8_t *wr = w->q + r * kp;
    __m512i acc[G][P];
    for (int j = 0; j < G; j++)
        for (int p = 0; p < P; p++)
            acc[j][p] = _mm512_setzero_si512();
    for (int64_t k0 = 0; k0 < kp; k0 += KB) {
        const int64_t k1 = k0 + KB < kp ? k0 + KB : kp;
        for (int j = 0; j < G; j++) {
            const int8_t *wj = wr + j * kp;
            for (int64_t c = k0; c < k1; c += 64) {
                const int8_t *pf = c + KB < kp ? wj + c + KB : wj + G * kp + (c + KB - kp);
                if (pf < end)
                    _mm_prefetch((const char *)pf, _MM_HINT_T0);
                const __m512i wv = _mm512_load_si512((const void *)(wj + c));
                for (int p = 0; p < P; p++)
                    acc[j][p] = numla_qlinear_vg_dp_(acc[j][p], _mm512_load_si512((const void *)(xq + p * kp + c)), wv);
            }
        }
    }
    for (int j = 0; j < G; j++) {
        const float o = numla_qlinear_int8row_out1_(acc[j], w->row_sums[r + j], sx, w->scales[r + j]);
        y[r + j] = accumulate ? y[r + j] + o : o;
    }
}

void numla_qlinear_int8row_rows_vnni(const numla_qlinear_weight *w, int64_t m, const uint8_t *xq, const float *sx,
                                     int64_t r0, int64_t r1, float *y, int64_t ldy, int accumulate)
{
    enum { MR = NUMLA_QLINEAR_ROW_PLANES_MR };
    const int8_t *end = w->q + r1 * w->kp;
    const size_t xs = (size_t)NUMLA_INT8ROW_PLANES * (size_t)w->kp; /* one x row's planes */
    int64_t r = r0;
    if (m == 1 && w->kp > NUMLA_QLINEAR_ROW_PLANES_LONG_K)
        for (; r + NUMLA_QLINEAR_ROW_PLANES_G <= r1; r += NUMLA_QLINEAR_ROW_PLANES_G)
            numla_qlinear_int8row_long_(w, r, end, xq, sx[0], y, accumulate);
    for (; r < r1; r++)
        for (int64_t i0 = 0; i0 < m; i0 += MR) /* the weight row stays in L1 across x tiles */
            switch (m - i0 < MR ? m - i0 : MR) {
            case 1: numla_qlinear_int8row_row_(w, r, end, xq + i0 * xs, sx + i0, y + i0 * ldy, ldy, accumulate, 1); break;
            case 2: numla_qlinear_int8row_row_(w, r, end, xq + i0 * xs, sx + i0, y + i0 * ldy, ldy, accumulate, 2); break;
            default: numla_qlinear_int8row_row_(w, r, end, xq + i0 * xs, sx + i0, y + i0 * ldy, ldy, accumulate, 3); break;
            }
}
_Static_assert(NUMLA_QLINEAR_ROW_PLANES_MR == 3, "the x-tile switch covers 1 .. 3 rows");

/* Every x row's planes into the workspace (row i, plane p at xq + (3 i + p) kp), its scale into
 * sx; on the calling team. */
static void numla_qlinear_int8row_planes_(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                          uint8_t *xq, float *sx)
{
    const int64_t kp = w->kp;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; i++)
        sx[i] = numla_int8row_planes_row(x + i * ldx, w->k, kp, xq + (size_t)i * NUMLA_INT8ROW_PLANES * (size_t)kp, kp);
}

void numla_qlinear_forward_int8row_vnni(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                        float *y, int64_t ldy, int accumulate, void *workspace)
{
    if (!numla_qlinear_int8row_planes_apply(w)) {
        numla_qlinear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    uint8_t *xq = numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_planes_sx(workspace, w, m);
#pragma omp parallel
    {
        numla_qlinear_int8row_planes_(w, m, x, ldx, xq, sx);
        int64_t lo, hi;
        numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        numla_qlinear_int8row_rows_vnni(w, m, xq, sx, lo, hi, y, ldy, accumulate);
    }
}

void numla_qlinear_gemm_int8row_vnni(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int accumulate, void *workspace, int max_threads)
{
    if (!numla_qlinear_int8row_planes_apply(w)) {
        numla_qlinear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    uint8_t *xq = numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_planes_sx(workspace, w, m);
    int8_t *chunks = (int8_t *)(xq + numla_qlinear_ws_planes_bytes(w, m));
    const size_t per = numla_qlinear_gemm_thread_bytes(w);
    const int64_t panels = (w->n + 15) / 16;
    int nt = omp_get_max_threads();
    if (nt > max_threads)
        nt = max_threads;
#pragma omp parallel num_threads(nt)
    {
        numla_qlinear_int8row_planes_(w, m, x, ldx, xq, sx);
        const int ith = omp_get_thread_num();
        int64_t p0, p1;
        numla_qlinear_split(panels, ith, omp_get_num_threads(), &p0, &p1);
        if (p0 < p1)
            numla_qlinear_vg_rows_(w, m, xq, sx, y, ldy, accumulate, p0, p1, chunks + (size_t)ith * per, 1);
    }
}

