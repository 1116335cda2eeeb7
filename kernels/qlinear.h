/* kernels/qlinear.h — linear layers on 8-bit weights: y[M][N] = x[M][K] · Wᵀ (+ y when
 * accumulate), W (N, K) as the checkpoint stores it, fp32 activations in, fp32 out.
 *
 * Formats (docs/design.md §3):
 *   NUMLA_QLINEAR_FP8_BLOCK   W: OCP fp8 e4m3fn bytes (bias 7, no inf, max 448); one fp32
 *                             scale per 128 x 128 block (DeepSeek's `weight_scale_inv`, grid
 *                             (ceil(N/128), ceil(K/128))). The real weight is fp8 value x its
 *                             block's scale. The scale is applied in fp32 to each 128-wide K
 *                             block's dot product, never folded into the weights:
 *                               y[m][n] = Σ_b s[n/128][b] · (Σ_{k in block b} w[n][k] x[m][k])
 *                             except on the amx level's tiles when every scale is a power of
 *                             two (numla_qlinear_weight.scale_pow2), where s · w is exact in
 *                             bf16 and y[m][n] = Σ_k (s w)[n][k] x[m][k]
 *   NUMLA_QLINEAR_INT8_ROW    W: int8; one fp32 scale per output row. Activations stay fp32:
 *                               y[m][n] = s[n] · Σ_k w[n][k] x[m][k]
 *   NUMLA_QLINEAR_INT8_W8A8   the same weights; each activation row is quantized at run time,
 *                             dynamic and symmetric, exactly as every ISA here does it:
 *                               amax = max(max_k |x[m][k]|, 1e-7)        (fp32)
 *                               sx   = amax / 127,  inv = 127 / amax     (fp32, two divisions)
 *                               q[k] = round_half_even(x[m][k] · inv)    (fp32 product)
 *                               acc  = Σ_k q[k] w[n][k]                  (int32, exact)
 *                               y    = (float)acc · sx · s[n]            (fp32, left to right)
 *                             This is SGLang's CPU per-token quantization (sgl-kernel
 *                             quantize_row_int8: eps 1e-7, multiply by 127/amax; its AVX-512
 *                             path rounds half to even). Every level gives bit-identical y.
 *
 * Packing (once, at load time; dst caller-owned, 64-byte aligned):
 *   bytes = numla_qlinear_packed_size(fmt, n, k)
 *   numla_qlinear_pack(&src, dst, &w)
 * packs rows [row0, row0 + n) and columns [col0, col0 + k) of a checkpoint tensor (a head or
 * expert shard may start anywhere: row0 = 192·h is fine). src->data points at element
 * (row0, col0), rows ld bytes apart; src->scales is the tensor's FULL scale grid (fp8:
 * (scale_rows, scale_cols) = (ceil(N_total/128), ceil(K_total/128)); int8: (N_total, 1)), so
 * the shard's scales are taken from it by global row. fp8 needs col0 % 128 == 0 (a K slice
 * must not cut a scale block); int8 needs k <= 65536 (the int32 dot product of W8A8). The packed form keeps 1 byte per weight (rows zero-padded to
 * a multiple of 64 bytes) plus the shard's scales (fp8: the grid rows it touches; int8: one
 * scale and one int32 row sum per row). Its layout is the same for every ISA, so any level
 * can run any packed weight. Packing runs on the calling OpenMP team (first touch).
 *
 * Inputs are trusted to be finite: e4m3 NaN encodings (S.1111.111) and NaN, inf or zero
 * scales are rejected by the loader, which names the tensor; the kernels do not look (the
 * vector levels read a NaN encoding as 480).
 *
 * Forward: numla_qlinear_forward(isa, w, m, x, ldx, y, ldy, accumulate, ws, ws_bytes) runs
 * level `isa` (the caller's choice, from numla_isa_select at the top; nothing here reads the
 * environment). A level without a native variant for the format inherits the level below.
 * Scratch: numla_qlinear_workspace_size (W8A8 needs the quantized rows; fp8 from 2 to 12 rows
 * x packed as bf16 hi and lo for the avx512bf16 rows, M x K x 4 bytes; fp8 from M = 13, a
 * chunk of x packed as bf16 tiles for the amx level, and int8-row at every M, x's int8 planes
 * there (both from N = 16), at most about max(1 MiB, 32 rows x K x 4 bytes); int8-row's planes at
 * the avx512bf16 level, M x K x 3 bytes and from 4 rows a repacked chunk of weights per thread
 * (at most 256 KiB); fp8 with K past
 * 4096 there: x of up to M rows (at most 32 MiB of them) x K x 4 bytes and up to 8 MiB of
 * widened weights; asked for at every
 * level so the size does not depend on where it runs); any
 * alignment. Threading: own OpenMP region, split over N. x and y must not alias; x must be
 * finite. Not collective.
 *
 * Numerics: fp8 and int8-row are exact products summed in fp32 (any order), so against the
 * dequantized weights in double: |y - y_ref| <= (K + 2·K/128 + 2) u Σ|w x| (+ the same for the
 * accumulated y), u = 2^-24; fp8 on the amx level's tiles (split-bf16 x,
 * kernels/x86/qlinear_fp8_amx.c): (2^-17 + (2·min(K, 128) + K/128 + 2) u) Σ|s w x|, and where
 * every scale is a power of two (scale_pow2 below: DeepSeek-V4's E8M0 scales), which the tiles
 * fold into the exact bf16 weights and sum over all of K, (2^-17 + (K/16 + 18) u) Σ|s w x|; int8-row
 * at the avx512bf16 level with AVX512-VNNI and at the amx level, from N = 16 and
 * NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS weights (x as three int8 planes of its row maximum, exact
 * integer sums, kernels/x86/qlinear_quant_avx512.h; the same bits at both levels):
 * (2^-17/127 + 2^-23) max|x| Σ|s w| + 2u |y|; fp8 M = 1-12 on the
 * avx512bf16 level with AVX512_VBMI (kernels/x86/qlinear_fp8_avx512bf16.c: weights widened
 * exactly to bf16, x split into bf16 hi + lo, |x - hi - lo| <= 2^-16 |x|, 2K exact products
 * summed in fp32, the block scales in fp32): (2^-16 + (2K + 2·K/128 + 4) u) Σ|s w x|. W8A8 is exact up to
 * the final fp32 scaling. Whatever the thread count, a row's output has the same bits; int8-row
 * and W8A8 also whatever M is, at every level (the engine relies on it for W8A8 models, see
 * kernels/x86/qlinear_avx512.c; int8-row's planes are exact integer sums on the tiles and on
 * VNNI alike, and give other bits than avx512's); fp8 up to 12 rows at every level (its
 * many-row panel GEMM, from NUMLA_QLINEAR_PANEL_MIN_M = 13 rows, and the amx level's tiles,
 * from NUMLA_QLINEAR_AMX_WIDE_MIN_M = 13, sum in other orders; at the avx512bf16 level 2-12 rows run the one-row split-bf16
 * GEMV's arithmetic row by row, each weight group widened once for all rows). So up to 12 rows
 * every format gives a row the bits of its one-row call (a speculative verify step's rows,
 * docs/speculative.md).
 *
 * Levels per format: ref everywhere; avx2 (kernels/x86/qlinear_avx2.c) all three: fp8 and
 * int8-row exact products in 8-lane fp32 FMA chains (fp8: one chain per 128-wide block, scaled
 * into a total block by block; int8-row: one chain over K), so the first bound above, and the
 * same arithmetic per output at every M up to 12 (fp8) or every M (int8-row); fp8 from 13 rows
 * a panel GEMM of fp32-dequantized weights (its own order, the same bound); W8A8 exact int32
 * sums on vpmaddubsw/vpmaddwd, the same bits as every level; avx512 fp8 and int8-row
 * (kernels/x86/qlinear_avx512.c), W8A8 with AVX512-VNNI (else avx2's); avx512bf16 fp8 M = 1-12
 * with AVX512_VBMI, int8-row's planes with AVX512-VNNI (kernels/x86/qlinear_avx512vnni.c: a
 * few-row kernel below NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M rows, the W8A8 panel GEMM over the
 * planes from there); amx the tiles above. A level's bits differ from another level's for fp8
 * and int8-row (each inside its bound; int8-row's planes give avx512bf16 and amx the same bits),
 * never for W8A8.
 */
#ifndef NUMLA_KERNELS_QLINEAR_H
#define NUMLA_KERNELS_QLINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"

typedef enum numla_qlinear_format {
    NUMLA_QLINEAR_FP8_BLOCK = 0, /* e4m3fn, fp32 scale per 128 x 128 block */
    NUMLA_QLINEAR_INT8_ROW,      /* int8, fp32 scale per row, fp32 activations */
    NUMLA_QLINEAR_INT8_W8A8,     /* int8, fp32 scale per row, int8 activations per token */
    NUMLA_QLINEAR_FORMAT_COUNT,
} numla_qlinear_format;

enum { NUMLA_QLINEAR_BLOCK = 128 }; /* fp8 scale block edge (DeepSeek's weight_block_size) */

const char *numla_qlinear_format_name(numla_qlinear_format fmt);

/* A checkpoint tensor's slice to pack. */
typedef struct numla_qlinear_source {
    numla_qlinear_format fmt;
    int64_t n, k;            /* the slice: rows (outputs) and columns (inputs) */
    int64_t row0, col0;      /* its first element's global row and column */
    const void *data;        /* 1-byte elements, element (row0, col0) */
    int64_t ld;              /* bytes between rows, >= k */
    const float *scales;     /* the full scale grid, row-major (scale_rows, scale_cols) */
    int64_t scale_rows, scale_cols;
} numla_qlinear_source;

typedef struct numla_qlinear_weight {
    numla_qlinear_format fmt;
    int64_t n, k;            /* output and input features of the packed slice */
    int64_t kp;              /* bytes per packed row: k rounded up to 64, zero-padded */
    int64_t row0;            /* global first row (fp8: where the rows sit in the 128-row blocks) */
    int64_t scale_rows;      /* fp8: grid rows held (the blocks rows [row0, row0+n) touch);
                                int8: n */
    int64_t scale_cols;      /* fp8: ceil(k / 128); int8: 1 */
    const int8_t *q;         /* (n, kp) weights */
    const float *scales;     /* (scale_rows, scale_cols); fp8 row r uses grid row
                                (row0 + r) / 128 - row0 / 128 */
    const int32_t *row_sums; /* int8: (n) Σ_k w[r][k], for the u8 x s8 dot product; else NULL */
    int scale_pow2;          /* fp8: every held scale is 2^e, -117 <= e <= 119, so s · w is a
                                normal bf16 for every e4m3 w != 0 (DeepSeek-V4's E8M0 scales,
                                V3.1's ue8m0); set by numla_qlinear_pack */
} numla_qlinear_weight;

/* Bytes for a packed slice; 0 for a bad format or shape. */
size_t numla_qlinear_packed_size(numla_qlinear_format fmt, int64_t n, int64_t k);
numla_status numla_qlinear_pack(const numla_qlinear_source *src, void *dst, numla_qlinear_weight *out);

/* Scratch bytes for numla_qlinear_forward with m rows on a team of up to num_threads threads
 * (< 1 counts as 1): W8A8's quantized rows, and from 32 rows one chunk of repacked weight
 * columns per thread (at most 256 KiB, or 64 columns); fp8-block from 13 rows, one panel of dequantized
 * weights per thread; int8-row, x's three planes where they apply, and from 4 rows one chunk
 * of repacked weight columns per thread (or the amx level's packed planes, whichever is more);
 * fp8 the amx level's packed x where its tiles take the shape (numla_qlinear_amx_wide_applies);
 * otherwise 0.
 * A workspace for fewer threads than the calling team (but at least one) is accepted: the call
 * then runs on as many threads as it holds. */
size_t numla_qlinear_workspace_size(const numla_qlinear_weight *w, int64_t m, int num_threads);
/* y (M, ldy) = x (M, ldx) · Wᵀ; accumulate != 0 adds into y. */
numla_status numla_qlinear_forward(numla_isa isa, const numla_qlinear_weight *w, int64_t m,
                                   const float *x, int64_t ldx, float *y, int64_t ldy,
                                   int accumulate, void *workspace, size_t workspace_bytes);

/* e4m3fn byte -> float (a NaN encoding gives NaN): the format's definition, for loaders and
 * tests. */
float numla_qlinear_fp8_to_f32(uint8_t b);
/* Which level's variant numla_qlinear_forward runs for fmt at level isa (for tests and bench
 * labels): isa itself, or the level it inherits from. */
numla_isa numla_qlinear_level(numla_isa isa, numla_qlinear_format fmt);
/* Whether numla_qlinear_forward of w on m rows at level isa runs on the AMX tiles: the level
 * it runs at is amx and the AMX variant takes this weight and M (for bench labels). */
int numla_qlinear_uses_amx(numla_isa isa, const numla_qlinear_weight *w, int64_t m);

#endif
