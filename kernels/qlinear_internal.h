/* kernels/qlinear_internal.h — private to the 8-bit linear kernels (kernels/qlinear.c,
 * kernels/ref/qlinear_ref.c, kernels/x86/qlinear_*.c): the packed layout, the W8A8 workspace
 * layout, and the per-ISA entry points of the dispatch table.
 *
 * Packed buffer (one layout for every ISA):
 *   [0, n·kp)              q: row r holds W[row0 + r][col0 .. col0 + k), zero-padded to kp
 *                          (a multiple of 64, so every row starts on a cache line and the
 *                          vector loops read whole lines without masks; a zero weight adds
 *                          nothing whatever x holds there, since x is masked, or, for W8A8,
 *                          quantized rows are padded too)
 *   then, 64-aligned       scales (scale_rows, scale_cols) fp32
 *   then, 64-aligned       int8 only: row_sums (n) int32
 *
 * W8A8 workspace (numla_qlinear_workspace_size, any alignment; the kernel aligns to 64):
 *   xq: room for m rounded up to 16 rows of kp bytes. The ref and VNNI levels store (m, kp) u8
 *   = q + 128 (padding: 128, i.e. q = 0); the avx2 level (m, kp) s8 q (padding 0); the amx
 *   level stores q as s8 in TDPBSSD B tiles
 *   (kernels/x86/qlinear_amx.c), zero rows past m. Then, 64-aligned, sx (m) fp32.
 * int8-row planes workspace (the avx512bf16 and amx levels where
 * numla_qlinear_int8row_planes_apply; kernels/x86/qlinear_quant_avx512.h): xq holds every x
 * row's three planes, row i plane p at (3 i + p) kp, u8 = q + 128; then, 64-aligned, sx (m)
 * fp32 (numla_qlinear_ws_planes_bytes; the amx level's tiles use a chunk of rows instead,
 * numla_qlinear_amx_wide_ws_bytes).
 * Many-row workspace (fp8-block, W8A8, int8-row's planes, numla_qlinear_gemm_applies; any
 * alignment, the kernel aligns to 64): one numla_qlinear_gemm_thread_bytes block per thread;
 * for W8A8 and int8-row those follow xq and sx (numla_qlinear_ws_w8a8_bytes,
 * numla_qlinear_ws_planes_bytes from the aligned start).
 */
#ifndef NUMLA_KERNELS_QLINEAR_INTERNAL_H
#define NUMLA_KERNELS_QLINEAR_INTERNAL_H

#include "kernels/qlinear.h"
#include "kernels/blocking.h"

static inline int64_t numla_qlinear_kp(int64_t k) { return (k + 63) & ~(int64_t)63; }
static inline size_t numla_qlinear_align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Grid row of packed row r (fp8). */
static inline int64_t numla_qlinear_grid_row(const numla_qlinear_weight *w, int64_t r)
{
    return (w->row0 + r) / NUMLA_QLINEAR_BLOCK - w->row0 / NUMLA_QLINEAR_BLOCK;
}

/* Split [0, total) into nth near-equal ranges; range of thread ith. */
static inline void numla_qlinear_split(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t q = total / nth, r = total % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

/* W8A8 workspace: bytes of xq, and the views from the caller's (unaligned) pointer. */
static inline size_t numla_qlinear_ws_xq_bytes(const numla_qlinear_weight *w, int64_t m)
{
    return numla_qlinear_align64((size_t)((m + 15) & ~(int64_t)15) * (size_t)w->kp);
}

/* Whether int8-row runs as three int8 planes of x (kernels/x86/qlinear_quant_avx512.h) where a
 * level has them (avx512bf16 with AVX512-VNNI, amx): N >= 16 and from
 * NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS weights; smaller weights run the avx512 variant. */
static inline int numla_qlinear_int8row_planes_apply(const numla_qlinear_weight *w)
{
    return w->fmt == NUMLA_QLINEAR_INT8_ROW && w->n >= 16 && w->n * w->k >= NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS;
}

/* Many-row paths (design in kernels/x86/qlinear_avx512.c and qlinear_avx512vnni.c): fp8's panel
 * GEMM, W8A8's VNNI GEMM and int8-row's planes on the same GEMM go through
 * numla_qlinear_gemm_applies and per-thread scratch (numla_qlinear_gemm_thread_bytes); at the
 * avx512 level int8-row's x-blocked 4 x 4 tiles need none and are chosen inside its variant. */
/* Whether M rows of x take a many-row path with per-thread scratch: fp8 (the panel GEMM) from 8
 * rows; W8A8 (the VNNI packed-panel GEMM, kernels/x86/qlinear_avx512vnni.c) from 32; int8-row's
 * planes (the same GEMM, three plane rows per x row) from NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M
 * (levels without the GEMM run their forward). */
static inline int numla_qlinear_gemm_applies(const numla_qlinear_weight *w, int64_t m)
{
    if (w->fmt == NUMLA_QLINEAR_FP8_BLOCK)
        return m >= NUMLA_QLINEAR_PANEL_MIN_M;
    if (w->fmt == NUMLA_QLINEAR_INT8_ROW)
        return m >= NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M && numla_qlinear_int8row_planes_apply(w);
    return w->fmt == NUMLA_QLINEAR_INT8_W8A8 && m >= NUMLA_QLINEAR_VNNI_GEMM_MIN_M;
}

/* fp8's many-row path is a k-major panel GEMM (kernels/x86/qlinear_avx512.c): per thread a
 * KC x NC fp32 panel of dequantized weights and an MR x KC micro-panel of x. */
/* fp8 panel GEMM: the N block for a weight of n rows (no wider than n rounded up to a panel). */
static inline int64_t numla_qlinear_panel_nc(const numla_qlinear_weight *w)
{
    const int64_t np = (w->n + NUMLA_QLINEAR_PANEL_NR - 1) / NUMLA_QLINEAR_PANEL_NR * NUMLA_QLINEAR_PANEL_NR;
    return np < NUMLA_QLINEAR_PANEL_NC ? np : NUMLA_QLINEAR_PANEL_NC;
}

/* fp8 panel GEMM: bytes of one thread's weight panel (the x micro-panel follows it). */
static inline size_t numla_qlinear_panel_bytes(const numla_qlinear_weight *w)
{
    return numla_qlinear_align64((size_t)NUMLA_QLINEAR_PANEL_KC * (size_t)numla_qlinear_panel_nc(w) * sizeof(float));
}

/* W8A8 GEMM: weight columns per packed chunk, a multiple of 64 (at least 64) whose
 * NUMLA_QLINEAR_VNNI_PANEL_BYTES hold them, no more than N rounded up to 16. */
static inline int64_t numla_qlinear_vnni_chunk(const numla_qlinear_weight *w)
{
    int64_t c = NUMLA_QLINEAR_VNNI_PANEL_BYTES / w->kp / 64 * 64;
    const int64_t n16 = (w->n + 15) / 16 * 16;
    if (c < 64)
        c = 64;
    return c < n16 ? c : n16;
}

/* Scratch bytes per thread of the many-row path (numla_qlinear_gemm_applies): W8A8's and int8-row's packed
 * chunk of weight columns; fp8's panel and x micro-panel. */
static inline size_t numla_qlinear_gemm_thread_bytes(const numla_qlinear_weight *w)
{
    if (w->fmt != NUMLA_QLINEAR_FP8_BLOCK)
        return numla_qlinear_align64((size_t)numla_qlinear_vnni_chunk(w) * (size_t)w->kp);
    return numla_qlinear_panel_bytes(w) +
           numla_qlinear_align64((size_t)NUMLA_QLINEAR_PANEL_KC * NUMLA_QLINEAR_PANEL_MR * sizeof(float));
}

/* W8A8 workspace views, from the caller's (unaligned) pointer. */
static inline uint8_t *numla_qlinear_ws_xq(void *ws)
{
    return (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
}
static inline float *numla_qlinear_ws_sx(void *ws, const numla_qlinear_weight *w, int64_t m)
{
    return (float *)(void *)(numla_qlinear_ws_xq(ws) + numla_qlinear_ws_xq_bytes(w, m));
}
/* int8-row's planes: bytes of xq and sx together (the many-row scratch follows them), and sx. */
static inline size_t numla_qlinear_ws_planes_bytes(const numla_qlinear_weight *w, int64_t m)
{
    return numla_qlinear_align64((size_t)m * 3 * (size_t)w->kp) + numla_qlinear_align64((size_t)m * sizeof(float));
}
static inline float *numla_qlinear_ws_planes_sx(void *ws, const numla_qlinear_weight *w, int64_t m)
{
    return (float *)(void *)(numla_qlinear_ws_xq(ws) + numla_qlinear_align64((size_t)m * 3 * (size_t)w->kp));
}
/* W8A8: bytes of xq and sx together (the many-row scratch follows them). */
static inline size_t numla_qlinear_ws_w8a8_bytes(const numla_qlinear_weight *w, int64_t m)
{
    return numla_qlinear_ws_xq_bytes(w, m) + numla_qlinear_align64((size_t)m * sizeof(float));
}

/* The W8A8 quantization rule of kernels/qlinear.h for one row: writes kp bytes of q + 128
 * (128 past k) and returns sx. Scalar; shared by every level's quantization step (the vector
 * ones reproduce it bit for bit). */
float numla_qlinear_quantize_row_ref(const float *x, int64_t k, int64_t kp, uint8_t *xq);

/* The W8A8 output of kernels/qlinear.h: v = (float)acc · sx · s, rounded, then added to y0
 * when accumulating. The empty asm makes the compiler round v before the add (no fused
 * multiply-add contraction in files built with FMA), so every level agrees bit for bit. */
static inline float numla_qlinear_w8a8_out(int32_t acc, float sx, float s, float y0, int accumulate)
{
    float v = (float)acc * sx * s;
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(v));
#else
    __asm__("" : "+m"(v));
#endif
    return accumulate ? y0 + v : v;
}

/* One entry point per (level, format). Arguments are validated by kernels/qlinear.c; each
 * opens its own OpenMP region. */
typedef void (*numla_qlinear_forward_fn)(const numla_qlinear_weight *w, int64_t m, const float *x,
                                         int64_t ldx, float *y, int64_t ldy, int accumulate,
                                         void *workspace);

void numla_qlinear_forward_ref(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace);
/* All three formats on AVX2 + FMA + F16C (kernels/x86/qlinear_avx2.c): fp8 and int8-row widened
 * in registers with fp32 FMA, W8A8 with vpmaddubsw on |w| and sign-applied s8 q (its workspace's
 * xq holds s8 q, 0 past k, instead of u8 q + 128); fp8 from NUMLA_QLINEAR_PANEL_MIN_M rows the
 * panel GEMM numla_qlinear_gemm_avx2 (its per-thread scratch: numla_qlinear_gemm_thread_bytes). */
void numla_qlinear_forward_avx2(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                float *y, int64_t ldy, int accumulate, void *workspace);
/* fp8 and int8-row: widen in registers, fp32 FMA. */
void numla_qlinear_forward_avx512(const numla_qlinear_weight *w, int64_t m, const float *x,
                                  int64_t ldx, float *y, int64_t ldy, int accumulate,
                                  void *workspace);
/* W8A8 with vpdpbusd (kernels/x86/qlinear_avx512vnni.c; AVX512-VNNI is not an ISA level, so
 * the table uses it at the avx512 level when the CPU has it: NUMLA_CPU_VNNI). */
void numla_qlinear_forward_avx512vnni(const numla_qlinear_weight *w, int64_t m, const float *x,
                                      int64_t ldx, float *y, int64_t ldy, int accumulate,
                                      void *workspace);
/* The packed x rows: hi (kp words), NUMLA_QL16_X_PAD words, lo (kp words), NUMLA_QL16_X_PAD
 * words; the pads keep the rows' hi and lo streams out of one another's cache sets. */
static inline int64_t numla_ql16_lo_off(int64_t kp) { return kp + NUMLA_QL16_X_PAD; }
static inline int64_t numla_ql16_x_ld(int64_t kp) { return 2 * (kp + NUMLA_QL16_X_PAD); }
/* 128-wide blocks per K-block of the 2..NUMLA_QL16_MAX_M-row path: m rows' packed x of a K-block
 * (4 bytes a column) within NUMLA_QL16_ROWS_X_BYTES. */
static inline int64_t numla_ql16_rows_kblocks(int64_t m)
{
    const int64_t kb = NUMLA_QL16_ROWS_X_BYTES / (m * 4 * NUMLA_QLINEAR_BLOCK);
    return kb > 1 ? kb : 1;
}
/* fp8 GEMV (M = 1 to NUMLA_QL16_MAX_M) on vdpbf16ps, e4m3 widened to bf16 with vpermi2b
 * (kernels/x86/qlinear_fp8_avx512bf16.c); other M run numla_qlinear_forward_avx512. The
 * avx512bf16 level uses it when the CPU has AVX512_VBMI (NUMLA_CPU_VBMI: not implied by the
 * level). From 2 rows it packs x once into the workspace: numla_qlinear_fp8_rows_ws_bytes. */
static inline size_t numla_qlinear_fp8_rows_ws_bytes(const numla_qlinear_weight *w, int64_t m)
{
    return w->fmt == NUMLA_QLINEAR_FP8_BLOCK && m >= 2 && m <= NUMLA_QL16_MAX_M &&
                   w->kp <= NUMLA_QL16_MAX_K
               ? 64 + (size_t)m * (size_t)numla_ql16_x_ld(w->kp) * sizeof(uint16_t)
               : 0;
}
void numla_qlinear_forward_fp8_avx512bf16(const numla_qlinear_weight *w, int64_t m, const float *x,
                                          int64_t ldx, float *y, int64_t ldy, int accumulate,
                                          void *workspace);

/* Whether the amx variant runs the tiles for this weight and M (else it runs the VNNI one). */
static inline int numla_qlinear_amx_applies(const numla_qlinear_weight *w, int64_t m)
{
    return w->fmt == NUMLA_QLINEAR_INT8_W8A8 && m >= NUMLA_QLINEAR_AMX_MIN_M && w->n >= 16;
}
/* W8A8 with AMX-INT8 TDPBSSD (kernels/x86/qlinear_amx.c): the amx level when
 * the CPU has AMX-INT8 and VNNI (its fallback): its entry's needs. */
void numla_qlinear_forward_amx(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace);

/* Whether the amx level's tile paths for fp8 and int8-row run for this weight and M (else the
 * avx512 variant). int8-row takes them at every M where its planes apply (few rows: the same
 * integer sums on VNNI), so that a row's bits do not depend on M at that level either
 * (kernels/qlinear.h); N < 16 never. */
static inline int numla_qlinear_amx_wide_applies(const numla_qlinear_weight *w, int64_t m)
{
    if (w->n < 16 || m < 1)
        return 0;
    return numla_qlinear_int8row_planes_apply(w) ||
           (w->fmt == NUMLA_QLINEAR_FP8_BLOCK && m >= NUMLA_QLINEAR_AMX_WIDE_MIN_M);
}
/* fp8 on AMX: x rows per packed chunk of split-bf16 B tiles (hi, lo: 128 bytes per 32 k per
 * row) — as many as fit NUMLA_QLINEAR_AMX_X_BYTES, a multiple of 32 in [32, MAX_CHUNK]. */
static inline int64_t numla_qlinear_amx_wide_chunk(const numla_qlinear_weight *w)
{
    const int64_t ks = (w->k + 31) / 32;
    int64_t c = NUMLA_QLINEAR_AMX_X_BYTES / (128 * ks) / 32 * 32;
    return c < 32 ? 32 : c > NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK ? NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK : c;
}
/* fp8 on AMX with K past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K (where a chunk of all of K would hold
 * too few rows): the weights are widened a slab of NUMLA_QLINEAR_AMX_FP8_KS columns at a time,
 * once per call, into the workspace (NUMLA_QLINEAR_AMX_FP8_NB rows at once, shared by the team,
 * each thread its own), x packed whole (up to NUMLA_QLINEAR_AMX_FP8_X_ALL), in L2 chunks of one
 * slab's columns, and each slab's partial sums go into y. */
static inline int numla_qlinear_amx_fp8_slabs(const numla_qlinear_weight *w)
{
    return w->k > NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K;
}
static inline int64_t numla_qlinear_amx_fp8_slab_chunk(void)
{
    const int64_t c = NUMLA_QLINEAR_AMX_X_BYTES / (128 * (NUMLA_QLINEAR_AMX_FP8_KS / 32)) / 32 * 32;
    return c < 32 ? 32 : c > NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK ? NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK : c;
}
static inline int64_t numla_qlinear_amx_fp8_rows(const numla_qlinear_weight *w, int64_t m)
{
    const int64_t c = numla_qlinear_amx_fp8_slab_chunk(), m16 = (m + 15) / 16 * 16;
    int64_t r = (int64_t)(NUMLA_QLINEAR_AMX_FP8_X_ALL / (size_t)(128 * ((w->k + 31) / 32))) / c * c;
    if (r < c)
        r = c;
    return m16 < r ? m16 : r;
}
static inline int64_t numla_qlinear_amx_fp8_nb(const numla_qlinear_weight *w)
{
    const int64_t n16 = (w->n + 15) / 16 * 16;
    return n16 < NUMLA_QLINEAR_AMX_FP8_NB ? n16 : NUMLA_QLINEAR_AMX_FP8_NB;
}
/* int8-row on AMX (kernels/x86/qlinear_int8row_amx.c): x rows per packed chunk of the three
 * int8 planes' B tiles (3 · kp bytes a row), as many as fit NUMLA_QLINEAR_AMX_X_BYTES, a
 * multiple of 32, at least 32. */
static inline int64_t numla_qlinear_int8row_amx_chunk(const numla_qlinear_weight *w)
{
    const int64_t c = NUMLA_QLINEAR_AMX_X_BYTES / (3 * w->kp) / 32 * 32;
    return c < 32 ? 32 : c;
}
/* Their workspace (M where the tiles apply), 64-aligned by the kernel: fp8, one chunk of packed
 * x (past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K: the packed rows of numla_qlinear_amx_fp8_rows, then
 * numla_qlinear_amx_fp8_nb widened rows of one slab, bf16); int8-row, one chunk of planes (fewer than NUMLA_QLINEAR_AMX_ROW_TILE_MIN_M rows: the rows'
 * planes) and every row's scale. */
static inline size_t numla_qlinear_amx_wide_ws_bytes(const numla_qlinear_weight *w, int64_t m)
{
    const int64_t m16 = (m + 15) / 16 * 16;
    if (w->fmt == NUMLA_QLINEAR_INT8_ROW) {
        const int64_t c = numla_qlinear_int8row_amx_chunk(w);
        if (m < NUMLA_QLINEAR_AMX_ROW_TILE_MIN_M) /* the VNNI rows */
            return numla_qlinear_ws_planes_bytes(w, m);
        return numla_qlinear_align64((size_t)((m16 < c ? m16 : c) * 3 * w->kp)) +
               numla_qlinear_align64((size_t)m * sizeof(float));
    }
    if (numla_qlinear_amx_fp8_slabs(w))
        return numla_qlinear_align64((size_t)numla_qlinear_amx_fp8_rows(w, m) * (size_t)((w->k + 31) / 32) * 128) +
               (size_t)numla_qlinear_amx_fp8_nb(w) * NUMLA_QLINEAR_AMX_FP8_KS * 2;
    const int64_t c = numla_qlinear_amx_wide_chunk(w);
    return (size_t)(m16 < c ? m16 : c) * (size_t)((w->k + 31) / 32) * 128;
}
/* int8-row at the amx level: x as three int8 planes, exact int32 sums on AMX-INT8 TDPBSSD (or
 * AVX512-VNNI for a few rows), one scaling step in double; called by
 * numla_qlinear_forward_amx_wide. */
void numla_qlinear_int8row_amx(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace);
/* int8-row's planes on AVX512-VNNI (kernels/x86/qlinear_avx512vnni.c): the rows function runs
 * weight rows [r0, r1) for m < NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M x rows whose planes are at xq
 * (the planes workspace layout) and scales at sx; the amx level calls it for its few rows. The
 * forward (few rows) and the GEMM (many rows) are the avx512bf16 level's variant when the CPU
 * has AVX512-VNNI; both run numla_qlinear_forward_avx512 where
 * numla_qlinear_int8row_planes_apply does not hold. */
void numla_qlinear_int8row_rows_vnni(const numla_qlinear_weight *w, int64_t m, const uint8_t *xq, const float *sx,
                                     int64_t r0, int64_t r1, float *y, int64_t ldy, int accumulate);
void numla_qlinear_forward_int8row_vnni(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                        float *y, int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_gemm_int8row_vnni(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int accumulate, void *workspace, int max_threads);
/* fp8 at the amx level: AMX-BF16 TDPBF16PS, the weights widened to bf16 per tile (power-of-two
 * scales folded in), kernels/x86/qlinear_fp8_amx.c; called by numla_qlinear_forward_amx_wide
 * where the tiles apply. */
void numla_qlinear_fp8_amx(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                           int64_t ldy, int accumulate, void *workspace);
/* The amx level's entry for fp8 (numla_qlinear_fp8_amx) and int8-row
 * (numla_qlinear_int8row_amx), kernels/x86/qlinear_wide_amx.c; other shapes run
 * numla_qlinear_forward_avx512. */
void numla_qlinear_forward_amx_wide(const numla_qlinear_weight *w, int64_t m, const float *x,
                                   int64_t ldx, float *y, int64_t ldy, int accumulate,
                                   void *workspace);

/* Many-row entry points (fp8-block, W8A8, int8-row's planes: numla_qlinear_gemm_applies), one per
 * level that has one; workspace (any alignment) holds max_threads threads' scratch, and the
 * call runs on at most that many threads. */
typedef void (*numla_qlinear_gemm_fn)(const numla_qlinear_weight *w, int64_t m, const float *x,
                                      int64_t ldx, float *y, int64_t ldy, int accumulate,
                                      void *workspace, int max_threads);
void numla_qlinear_gemm_avx2(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                             float *y, int64_t ldy, int accumulate, void *workspace, int max_threads);
void numla_qlinear_gemm_avx512(const numla_qlinear_weight *w, int64_t m, const float *x,
                               int64_t ldx, float *y, int64_t ldy, int accumulate,
                               void *workspace, int max_threads);
/* W8A8 many rows on vpdpbusd: weights repacked per call into k-quad-interleaved panels
 * (kernels/x86/qlinear_avx512vnni.c). */
void numla_qlinear_gemm_avx512vnni(const numla_qlinear_weight *w, int64_t m, const float *x,
                                   int64_t ldx, float *y, int64_t ldy, int accumulate,
                                   void *workspace, int max_threads);

#endif
