/* kernels/qblock.h — linear layers on ggml block-quantized weights (the encodings of GGUF files):
 * y[M][N] = x[M][K] · Wᵀ (+ y when accumulate), W (N, K) stored as rows of blocks, fp32
 * activations in, fp32 out. A sibling of kernels/qlinear.h with the same dispatch style (a
 * reference table, per-ISA overrides, one pick): qlinear's weights are 1-byte codes with a
 * separate scale grid, these carry their scales inside each block, so a row is a byte stream of
 * whole blocks and a shard may only cut K at a block boundary.
 *
 * Encodings (the ggml block layouts, byte for byte; fp16 = IEEE half; a "block" covers `block`
 * consecutive elements of one row and takes `bytes` bytes):
 *   Q8_0    32 / 34   fp16 d; int8 q[32]                      w = d·q
 *   Q4_0    32 / 18   fp16 d; u8 qs[16]                       w[j] = d·((qs[j] & 15) - 8),
 *                                                             w[j+16] = d·((qs[j] >> 4) - 8)
 *   Q4_K   256 / 144  fp16 d, dmin; u8 scales[12]; u8 qs[128]
 *                     8 sub-blocks of 32 with 6-bit scale sc and min m packed in scales[12]
 *                     (j < 4: sc = s[j] & 63, m = s[j+4] & 63; else sc = (s[j+4] & 15) |
 *                     (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4);
 *                     64-element chunk c uses qs[32c..32c+32): low nibbles are sub-block 2c,
 *                     high nibbles 2c+1;  w = (d·sc)·q - (dmin·m)
 *   Q5_K   256 / 176  fp16 d, dmin; scales[12] as Q4_K; u8 qh[32]; u8 qs[128]
 *                     as Q4_K plus a fifth bit: element e's is bit e/32 of qh[e % 32]
 *   Q6_K   256 / 210  u8 ql[128]; u8 qh[64]; int8 scales[16]; fp16 d
 *                     half h (128 elements), l < 32: e = 128h + l takes ql[64h+l] & 15 and
 *                     qh[32h+l] bits 0-1; +32: ql[64h+32+l] & 15, bits 2-3; +64: ql[64h+l] >> 4,
 *                     bits 4-5; +96: ql[64h+32+l] >> 4, bits 6-7;  q = those 6 bits - 32;
 *                     w = (d·scales[e/16])·q
 *   IQ4_XS 256 / 136  fp16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
 *                     sub-block b (32): ls = ((scales_l[b/2] >> 4(b%2)) & 15) |
 *                     ((scales_h >> 2b) & 3) << 4; w = (d·(ls - 32))·kvalues[nibble] with
 *                     kvalues = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,53,69,89,113};
 *                     qs[16b..16b+16): low nibbles elements 0-15, high 16-31
 *   Q2_K   256 / 84   u8 scales[16]; u8 qs[64]; fp16 d, dmin
 *                     e = 128h + 32s + l (h < 2, s < 4, l < 32): q = (qs[32h+l] >> 2s) & 3;
 *                     group g = e/16: w = (d·(scales[g] & 15))·q - dmin·(scales[g] >> 4)
 *   Q3_K   256 / 110  u8 hmask[32]; u8 qs[64]; u8 scales[12]; fp16 d
 *                     e = 128h + 32s + l: q = ((qs[32h+l] >> 2s) & 3) - (bit e/32 of
 *                     hmask[l] ? 0 : 4); group g = e/16, 6-bit scale
 *                     sc = ((scales[g%8] >> 4(g/8)) & 15) | ((scales[8+g%4] >> 2(g/4)) & 3) << 4;
 *                     w = (d·(sc - 32))·q
 *   Q5_0    32 / 22   fp16 d; u32 qh; u8 qs[16]               w[j] = d·(((qs[j] & 15) | (bit j of
 *                                                             qh) << 4) - 16), w[j+16] = d·(((qs[j]
 *                                                             >> 4) | (bit j+16 of qh) << 4) - 16)
 *                     (llama-quantize's fallback for Q4_K where K is not a multiple of 256)
 *   IQ4_NL  32 / 18   fp16 d; u8 qs[16]                       w[j] = d·kvalues[qs[j] & 15],
 *                                                             w[j+16] = d·kvalues[qs[j] >> 4]
 *                     (IQ4_XS's fallback; kvalues as IQ4_XS)
 *   Q5_1    32 / 24   fp16 d, m; u32 qh; u8 qs[16]           q = Q5_0's 5 bits, w = d·q + m
 *                     (Q5_K's fallback where K is not a multiple of 256: attn_k_b, some downs)
 *   Q4_1    32 / 20   fp16 d, m; u8 qs[16]                    q = Q4_0's nibbles (no offset),
 *                                                             w = d·q + m (F32 mode at avx2)
 *   MXFP4   32 / 17   u8 e (E8M0); u8 qs[16]                  w[j] = d·kv[qs[j] & 15],
 *                                                             w[j+16] = d·kv[qs[j] >> 4],
 *                     d = 2^(e - 128) (ggml's e8m0 "half": e < 2 gives the subnormals 2^-128,
 *                     2^-127), kv = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
 *                     (twice the e2m1 values, so d·kv = e2m1 · 2^(e - 127), the OCP MX scale);
 *                     GGUF deepseek4 experts, and DeepSeek-V4's published FP4 experts repacked
 *                     (kernels/qblock_quant.h numla_qblock_mxfp4_from_e2m1). F32 mode at the
 *                     avx2 and avx512 levels and on AMX-BF16 tiles at the amx level (below), Q8 mode at
 *                     the avx2 level and the vnni level (IQ4_NL's GEMM: the x codes + 128 times
 *                     the code book's signed bytes); no PANEL16 layout yet
 * What each type has beyond its layout (its Q8 group, sub-block width, PANEL16 piece, and which
 * kernels run it at each level) is its row in kernels/qblock_types.c (kernels/qblock_types.h);
 * a type without kernels at a level runs the level below's (Q4_1: the avx2 level's F32 mode; the
 * reference in Q8 mode).
 * The reference dequantization (numla_qblock_dequant_ref) rounds exactly as the products above
 * are written, in fp32 (d·sc first, then ·q, then - the min), which is what the gguf PyPI
 * package's numpy dequantization does: tests/unit/kernels/test_qblock.c checks it bit for bit
 * against that package's output (tests/golden/gguf/blocks.gguf).
 *
 * Numerics of the linear, two activation modes (chosen at pack time, numla_qblock_act):
 *   NUMLA_QBLOCK_ACT_F32  activations stay fp32: y[m][n] = Σ_k w[n][k] x[m][k], w dequantized.
 *   NUMLA_QBLOCK_ACT_Q8   each x row is quantized per group of 256 columns (group b), like
 *                         llama.cpp's Q8_K, then the fp32 linear runs on x̃ = dx_b · q:
 *                           amax = max |x| over the group          (fp32)
 *                           amax == 0: dx = 0, q = 0; else dx = amax / 127, inv = 127 / amax,
 *                           q = round_half_even(x · inv)           (fp32 product, |q| <= 127)
 *                         K must be a multiple of 256, except for the 32-element types
 *                         (llama-quantize's fallbacks where K is not): a multiple of 32, the row's last group
 *                         then being its last K mod 256 columns (numla_qblock_q8_takes).
 *                         The AVX2 level (every type but Q4_1, any K the mode takes; also an
 *                         AVX-512 CPU's without VNNI) sums each block's q · (the weight's integer
 *                         codes) exactly in int32 with vpmaddubsw + vpmaddwd (unsigned codes, or
 *                         the sign trick |w| against x with w's sign, so no int16 pair sum can
 *                         saturate: kernels/x86/qblock_avx2.c), the integer sub-block scales
 *                         applied in vpmaddwd, offsets and mins through the per-16 sums of x, and
 *                         converts once per block: one fp32 fma with d · dx per 256 columns (per 32
 *                         for the 32-element types; a second with dmin · dx for the mins) into 8
 *                         lanes, summed in a fixed order at the row's end.
 *                         The vnni level (AVX512-VNNI, every type) sums q · (the weight's
 *                         integer codes, made unsigned by an offset where signed; Q5_0 and
 *                         IQ4_NL: q + 128 times the signed codes, less 128 · Σ codes) in
 *                         int32 (vpdpbusd, or vpmaddubsw + vpdpwssd with the sub-block
 *                         scales) and applies the block scales and mins once per sub-block
 *                         sum (per 32-element block: Q8_0, Q4_0, Q5_0, IQ4_NL), as llama.cpp's
 *                         CPU kernels do; the reference multiplies x̃ by the dequantized
 *                         weights.
 * The reference sums each block's products in fp32 in k order and adds the block sums in
 * order; the vector levels multiply the dequantized weights (fp32, computed with a fused
 * multiply-add, so w itself may differ from the reference's by 1 ulp) by x in 16 lanes and
 * reduce them at the end (the avx2 level: each block decoded once per tile of up to
 * NUMLA_QBLOCK_AVX2_MR x rows by an AVX2 decoder, into 4
 * accumulators of 8 lanes per x row). Against the dequantized weights in double:
 *   |y - y_ref| <= (K + 2) u Σ_k |w x| (+ the same for the accumulated y), u = 2^-24;
 * in Q8 mode against W x̃ in double: (K + 8) u Σ_k (|w_s| + |w_m|) |x̃| where w = w_s - w_m
 * splits each weight into its scaled code and its min (the integer path sums them apart).
 * Whatever the thread count, a row's output has the same bits; the vector levels give the
 * same bits for every M (the avx2 level's tiles of up to NUMLA_QBLOCK_AVX2_MR x rows, and in both
 * modes the avx512 levels' many-row paths, which unpack each weight block
 * once for several x rows, run the same per-lane operations as one row alone), with two
 * exceptions (the second, F32 mode on AMX-BF16 tiles, below): in the ROWS layout, every type but Q6_K in Q8 mode from 16 x rows
 * run a panel GEMM at the vnni level (kernels/x86/qblock_panel_avx512vnni.c: 16 weight rows in
 * the lanes, each sub-block's exact integer sum (32 columns; 16 for Q2_K and Q3_K) scaled into
 * fp32 on its own, but for Q4_K, Q5_K, Q2_K, IQ4_XS and Q3_K, whose integer scales and mins join
 * a 256-column piece's sub-block sums exactly (in int32; Q3_K's in fp32, exact there) before one
 * fp32 step per piece (the piece form,
 * kernels/x86/qblock_p16_avx512.h); at the amx
 * level the same GEMM on AMX-INT8 tiles, kernels/x86/qblock_panel_amx.c, with the same bits), whose
 * rows have the same bits as in any other call of 16 or more rows but may differ from the
 * fewer-row result in the last bits (within the bound above; the engine promises batch
 * invariance up to rounding only). In the PANEL16 layout (below) every M runs that arithmetic,
 * so its rows have the same bits at every M, and from 16 rows the ROWS layout's bits; Q6_K's
 * panels (no panel GEMM) run one kernel at every M, each block's sub-blocks summed exactly in
 * int32 and scaled into fp32 once, so they too have the same bits at every M, which may differ
 * from the ROWS layout's in the last bits (within the bound above).
 * F32 mode on AMX-BF16 tiles (kernels/x86/qblock_f32_amx.c): at the amx level, a type whose row
 * names a bf16 tile decoder (MXFP4: its values are exact in bf16) from NUMLA_QBLOCK_AMX_F32_MIN_M
 * x rows and N >= 16 runs TDPBF16PS on the weights decoded to bf16 and x split into hi = bf16(x)
 * and lo = bf16(x - hi) (|x - hi - lo| <= 2^-17 |x|, as kernels/linear.h's AMX GEMM), every
 * product exact in fp32; against the dequantized weights in double
 *   |y - y_ref| <= (2^-17 + (K/16 + 18) u) Σ_k |w x| (+ u |y| for the accumulated y),
 * with products and sums below 2^-126 flushed by the tiles (weights of an E8M0 scale below 2).
 * Its rows have the same bits at every M from NUMLA_QBLOCK_AMX_F32_MIN_M and every thread count,
 * and may differ from fewer rows' (the avx512 level's) within both bounds.
 *
 * Packing (once, at load time; dst caller-owned, 64-byte aligned; a size need not be a multiple
 * of 64):
 *   layout = numla_qblock_layout_for(isa, type, act, k);
 *   bytes = numla_qblock_layout_size(type, layout, n, k); numla_qblock_pack(&src, dst, &w)
 * reads rows [0, n) of a block-row source (src->data: the first block of the slice's first row,
 * rows src->ld bytes apart; a head or expert shard starts at any row, a K slice at a block
 * boundary: the caller offsets data by col0 / block · bytes) into one of two layouts:
 *   NUMLA_QBLOCK_LAYOUT_ROWS     the file's blocks, a row every ld = the row's bytes rounded up
 *                                to 64 (zero padding, never read); numla_qblock_packed_size.
 *   NUMLA_QBLOCK_LAYOUT_PANEL16  every encoding in Q8 mode (the K-quants and IQ4_XS with K a
 *                                multiple of 256, the 32-element types of 64): panels of 16 rows
 *                                (the last one padded with zero rows), ld = a panel's bytes, each
 *                                panel a run of pieces in column order (256 columns of a K-quant,
 *                                64 of the others; offsets in kernels/qblock_internal.h). A piece
 *                                holds the codes in 64-byte units whose byte 4c + j is byte 4u + j
 *                                of row c's code bytes (Q4_K and Q5_K chunk h: qs[32h + 4u + j],
 *                                its low nibble column 64h + 4u + j, the high one + 32; IQ4_XS,
 *                                IQ4_NL, Q4_0, Q5_0: the sub-block's qs[4u + j], low nibble column
 *                                4u + j, high + 16; Q8_0: q[4u + j]; Q2_K and Q3_K: qs[32n + 4u +
 *                                j], its bit pair j' column 128n + 32j' + 4u + j; Q6_K its ql and
 *                                qh bytes), i.e. the codes as the file has them, four bytes of each
 *                                row side by side, so one vpdpbusd multiplies them for 16 rows
 *                                against a broadcast x quad; and the 16 rows' scales: Q4_K and Q5_K
 *                                fp16 d, dmin and the 6-bit scales and mins as bytes (Q5_K also its
 *                                qh bytes as units); IQ4_XS d and ls - 32 as signed bytes; Q5_0 its
 *                                fifth bits as two 64-bit masks per unit, then d; Q6_K its 16
 *                                scale bytes per row, then d; Q2_K d, dmin and its scale bytes;
 *                                Q3_K d, its hmask bytes as units and its 6-bit scales as s - 32
 *                                in signed bytes; Q5_1 as Q5_0, then its m; IQ4_NL, Q4_0 and Q8_0 d. Q2_K, Q3_K, Q5_K and
 *                                Q6_K order a piece as their kernels read it (one forward stream).
 *                                The values are the file's, bit for bit (numla_qblock_row_blocks
 *                                gives a row's blocks back); per 16 weights Q4_K's panels take 9.25
 *                                bytes where its rows take 9, Q5_K's 11.25 for 11, Q3_K's 7.25 for
 *                                6.875, IQ4_XS's 8.75 (padding) for 8.5, the others the file's
 *                                bytes (Q6_K's 256-column pieces are therefore not 64-byte aligned).
 * numla_qblock_layout_for picks PANEL16 where the level that runs (type, act) at isa has a
 * panel kernel (AVX512-VNNI, or AMX-INT8, whose level runs the vnni kernels below 16 rows); any
 * level runs either layout (the reference reads a panel's rows
 * back into blocks). Packing runs on the calling OpenMP team (first touch, in the forward's
 * split).
 *
 * Inputs are trusted: fp16 scales that are inf or NaN make the outputs so (a loader checks
 * tensors it cannot trust); x must be finite.
 *
 * Forward: numla_qblock_forward(isa, w, m, x, ldx, y, ldy, accumulate, ws, ws_bytes) runs level
 * `isa` (the caller's, from the engine's settings; nothing here reads the environment); a level
 * without a native variant for the type inherits the level below. Scratch:
 * numla_qblock_workspace_size bytes, any alignment (Q8 mode: the quantized rows; F32 mode from
 * 4 x rows: decoded weight rows, and for the AMX-BF16 tiles' types from 8 the packed x and the
 * tiles). Threading: own OpenMP region, split over N. x and y must not alias. Not collective.
 */
#ifndef NUMLA_KERNELS_QBLOCK_H
#define NUMLA_KERNELS_QBLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"

typedef enum numla_qblock_type {
    NUMLA_QBLOCK_Q8_0 = 0,
    NUMLA_QBLOCK_Q4_0,
    NUMLA_QBLOCK_Q4_K,
    NUMLA_QBLOCK_Q5_K,
    NUMLA_QBLOCK_Q6_K,
    NUMLA_QBLOCK_IQ4_XS,
    NUMLA_QBLOCK_Q2_K,
    NUMLA_QBLOCK_Q3_K,
    NUMLA_QBLOCK_Q5_0,
    NUMLA_QBLOCK_IQ4_NL,
    NUMLA_QBLOCK_Q5_1,
    NUMLA_QBLOCK_Q4_1,
    NUMLA_QBLOCK_MXFP4,
    NUMLA_QBLOCK_TYPE_COUNT,
} numla_qblock_type;

typedef struct numla_qblock_info {
    const char *name;   /* "Q4_K", as ggml and GGUF files name it */
    int32_t block;      /* elements per block */
    int32_t bytes;      /* bytes per block */
    uint32_t ggml_type; /* the type's code in GGUF tensor infos */
} numla_qblock_info;

typedef enum numla_qblock_act {
    NUMLA_QBLOCK_ACT_F32 = 0, /* activations stay fp32 */
    NUMLA_QBLOCK_ACT_Q8,      /* activations quantized to int8 per 256 columns (see above) */
    NUMLA_QBLOCK_ACT_COUNT,
} numla_qblock_act;

/* The encoding's block shape; NULL for a type out of range. */
const numla_qblock_info *numla_qblock_info_get(numla_qblock_type type);
/* The encoding of a GGUF tensor type code; NUMLA_STATUS_UNSUPPORTED naming it when none. */
numla_status numla_qblock_from_ggml(uint32_t ggml_type, numla_qblock_type *out);

/* Scalar reference dequantization of n elements (a multiple of the block) from src. */
numla_status numla_qblock_dequant_ref(numla_qblock_type type, const void *src, int64_t n, float *dst);

/* A checkpoint tensor's slice to pack. */
typedef enum numla_qblock_layout {
    NUMLA_QBLOCK_LAYOUT_ROWS = 0, /* rows of the file's blocks */
    NUMLA_QBLOCK_LAYOUT_PANEL16,  /* 16-row panels (above) */
    NUMLA_QBLOCK_LAYOUT_COUNT,
} numla_qblock_layout;

typedef struct numla_qblock_source {
    numla_qblock_type type;
    int64_t n, k;        /* rows (outputs) and columns (inputs, a multiple of the block) */
    const void *data;    /* the slice's first block of its first row */
    int64_t ld;          /* bytes between source rows, >= k / block · bytes */
    numla_qblock_act act; /* how the packed weight runs (Q8: k a multiple of 256) */
    numla_qblock_layout layout; /* how it is stored (ROWS unless numla_qblock_layout_for says) */
} numla_qblock_source;

typedef struct numla_qblock_weight {
    numla_qblock_type type;
    int64_t n, k;        /* output and input features */
    int64_t ld;          /* ROWS: bytes per row, k / block · bytes rounded up to 64;
                          * PANEL16: bytes per panel of 16 rows */
    const uint8_t *q;    /* ROWS: (n, ld) rows of blocks; PANEL16: (ceil(n / 16), ld) panels */
    numla_qblock_act act;
    numla_qblock_layout layout;
} numla_qblock_weight;

/* Bytes for a packed slice in the ROWS layout; 0 for a bad type or shape (k not a multiple of
 * the block). */
size_t numla_qblock_packed_size(numla_qblock_type type, int64_t n, int64_t k);
/* The same for a layout; 0 also where the layout does not take the type and k. */
size_t numla_qblock_layout_size(numla_qblock_type type, numla_qblock_layout layout, int64_t n, int64_t k);
/* The layout the forward at level isa runs best on: PANEL16 where the layout takes (type, act,
 * k) (above) and that level's kernel is AVX512-VNNI or AMX-INT8, ROWS otherwise. */
numla_qblock_layout numla_qblock_layout_for(numla_isa isa, numla_qblock_type type, numla_qblock_act act, int64_t k);
numla_status numla_qblock_pack(const numla_qblock_source *src, void *dst, numla_qblock_weight *out);
/* Row r's k / block blocks, byte for byte as the source had them, into dst (either layout). */
numla_status numla_qblock_row_blocks(const numla_qblock_weight *w, int64_t r, void *dst);
/* Rows [r0, r1) of a ROWS-layout weight as a weight of their own (out refers to w's bytes; no
 * copy): its forward gives rows r0 .. r1 - 1 of w's output with the same bits, since a row's
 * output depends on nothing but its own blocks and x (above). Lets a caller split several
 * weights' rows over one OpenMP team itself (e.g. a decode token's routed experts in one parallel
 * region, each thread's share called on slices: the forward's own region then has one thread).
 * INVALID_ARG for 0 <= r0 < r1 <= n not holding, UNSUPPORTED for the PANEL16 layout. */
numla_status numla_qblock_rows(const numla_qblock_weight *w, int64_t r0, int64_t r1, numla_qblock_weight *out);

/* Scratch bytes for numla_qblock_forward with m rows on a team of up to num_threads threads
 * (< 1 counts as 1): Q8 mode's quantized rows; F32 mode from 4 rows, the many-row path's
 * decoded weight rows and sums (64 KiB and 1 KiB per x row up to 64 rows, per thread), or where
 * the type has AMX-BF16 tiles and m is
 * at least NUMLA_QBLOCK_AMX_F32_MIN_M the tiles' packed x (up to 256 rows x K x 4 bytes) and
 * 96 KiB per thread, whichever is larger; otherwise 0. A workspace for fewer threads
 * than the calling team (but at least one) is accepted: the call then runs on as many threads
 * as it holds. */
size_t numla_qblock_workspace_size(const numla_qblock_weight *w, int64_t m, int num_threads);
/* y (M, ldy) = x (M, ldx) · Wᵀ; accumulate != 0 adds into y. */
numla_status numla_qblock_forward(numla_isa isa, const numla_qblock_weight *w, int64_t m, const float *x,
                                  int64_t ldx, float *y, int64_t ldy, int accumulate, void *workspace,
                                  size_t workspace_bytes);

/* The most x rows (1 to NUMLA_LINEAR_ROW_INVARIANT_M, kernels/linear.h) one call of w at level
 * isa may have for each of its rows to keep the bits of its one-row call: where F32 mode runs on
 * the AMX-BF16 tiles from NUMLA_QBLOCK_AMX_F32_MIN_M rows (MXFP4), one fewer than that; every
 * other weight keeps them up to NUMLA_LINEAR_ROW_INVARIANT_M. A caller that needs one-row bits
 * for more rows (a speculative verify step, engine/model/model_v4.c) splits them into calls of at
 * most this many, which costs nothing in bits. */
int64_t numla_qblock_row_invariant_m(numla_isa isa, const numla_qblock_weight *w);

/* Whether Q8 activation mode takes a K-column slice of type: K a multiple of the type's Q8
 * group (its row in kernels/qblock_types.c): 256, or 32 for the 32-element types
 * (llama-quantize's fallbacks where K is not a multiple of 256). */
int numla_qblock_q8_takes(numla_qblock_type type, int64_t k);
/* The activation mode a linear of type with k columns runs in at level isa: Q8 (llama.cpp's
 * function) where numla_qblock_q8_takes and the level has a native Q8 kernel for the type (avx2
 * and above: every type but Q4_1; the ref level runs Q8 by itself); F32 otherwise (the AVX-512
 * F32 kernels where the type's row names them, else the avx2 level's, at ref the reference). */
numla_qblock_act numla_qblock_act_for(numla_isa isa, numla_qblock_type type, int64_t k);

/* Which level's variant numla_qblock_forward runs for type in mode act at level isa (tests,
 * bench labels). */
numla_isa numla_qblock_level(numla_isa isa, numla_qblock_type type, numla_qblock_act act);

#endif
