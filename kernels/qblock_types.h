/* kernels/qblock_types.h — one row per block type of kernels/qblock.h: everything the
 * block-quantized linear knows of a type, in one place, so that no file asks `type == A ||
 * type == B` — it reads a column of the type's row instead. Private to the qblock family
 * (kernels/qblock*.c, kernels/ref/qblock*.c, kernels/x86/qblock_*.c) and its tests.
 *
 * A row holds:
 *   info         the ggml row (name, block, bytes, ggml code: common/ggml_types.h's, copied
 *                at compile time by NUMLA_GGML_ROW)
 *   q8_group     Q8 activation mode takes K a multiple of this (256, or 32 for the 32-element
 *                types, llama-quantize's fallbacks; numla_qblock_q8_takes); 0: F32 mode only
 *   sub          columns per sub-block scale, the span the integer sums of Q8 mode run over
 *                before they are scaled (32; 16 for Q2_K and Q3_K)
 *   p16_cols     the PANEL16 layout's piece (kernels/qblock.h): columns (256 for a K-quant, 64
 *                for a 32-element type); 0: the type has no PANEL16 layout
 *   p16_bytes    a piece's bytes (kernels/qblock_internal.h says what a piece holds)
 *   p16_scales   where in a piece its fp16 d (32-element types) or its scale bytes (Q4_K,
 *                IQ4_XS) start
 *   p16_put,     block b of a panel's row c from the file's bytes into the panel, and back
 *   p16_get      (kernels/qblock_panel16.c; NULL where p16_cols is 0)
 *   p16_vnni     Q8 mode on the stored panels at the vnni level, every M below the panel GEMM's
 *                (and Q6_K's at every M): kernels/x86/qblock_p16_avx512vnni.c
 *   x_offset     the vnni level's row kernels read the quantized x as q + 128 (the weight's
 *                codes are signed: Q5_0, IQ4_NL, IQ4_XS)
 *   f16_count,   the block's fp16 scale fields (d, and dmin or m): how many, at which bytes (the
 *   f16_at       tests make random blocks with finite scales from them)
 *   e8m0         the block's scale is an E8M0 byte at its start instead (MXFP4)
 *   panel_gemm   the panel GEMM from NUMLA_QBLOCK_PANEL_MIN_M x rows (vnni and amx levels:
 *                kernels/x86/qblock_panel_*.c) runs it (every type with a PANEL16 layout but
 *                Q6_K, whose stored panels run their own kernel at every M)
 *   int_scales   its sub-block scales and mins are small integers under a per-piece d and dmin:
 *                the panel GEMM and the stored panels' kernels join a piece's sub-block sums
 *                with them exactly and go to fp32 once per piece, the amx level's tiles take the
 *                scales into the weights (byte planes) and a piece's whole sum at once; which
 *                form (numla_qblock_form below; the kernels: kernels/x86/qblock_p16_avx512.h),
 *                NUMLA_QBLOCK_FORM_NONE for the others
 * and the functions of each path, NULL where the level below runs the type:
 *   dequant      the reference dequantization of one block (kernels/ref/qblock_ref.c; never NULL)
 *   quantize     the reference quantization of one block's floats (kernels/ref/qblock_quant_ref.c,
 *                kernels/qblock_quant.h); NULL: numla does not make the type
 *   f32_rows,    F32 mode at the avx512 level (kernels/x86/qblock_avx512.c): rows [r0, r1) for
 *   f32_decode   all x rows, and a column range of one weight row decoded to fp32 (its many-row
 *                path, and the fp32 panel GEMM of kernels/x86/qblock_f32_panel_avx512.c)
 *   q8_dot       Q8 mode at the vnni level, ROWS layout, one x row at a time
 *                (kernels/x86/qblock_avx512vnni.c), for the types without a GEMM below
 *   q8_gemm      Q8 mode at the vnni level, ROWS layout: the many-row GEMM's tiles
 *                (kernels/x86/qblock_gemm_avx512vnni.c; full: NUMLA_QBLOCK_GEMM_MR x rows,
 *                part: fewer); q8_gemm_short the same where K is not a multiple of 256 (Q8_0)
 *   q8_avx2      Q8 mode at the avx2 level, every M and either layout: one weight row's blocks
 *                against a tile of x rows (kernels/x86/qblock_avx2.c)
 *   f32_avx2,    F32 mode at the avx2 level (kernels/x86/qblock_f32_avx2.c): one weight row
 *   f32_avx2_    against a tile of x rows, its blocks decoded once per tile by an AVX2 decoder,
 *   decode       and a column range of one row decoded by it (the level's many-row path)
 * A type has Q8 kernels at the vnni and amx levels where it has q8_dot or q8_gemm
 * (numla_qblock_type_row_q8_vnni); the PANEL16 layout and the panel GEMM then run it where its
 * p16 and panel_gemm columns say (the amx level's tiles take what the panel GEMM takes).
 * A new type is a row here, its value of numla_qblock_type, its reference dequantization, and
 * the kernels its row names. */
#ifndef NUMLA_KERNELS_QBLOCK_TYPES_H
#define NUMLA_KERNELS_QBLOCK_TYPES_H

#include "kernels/qblock.h"

#include <stdint.h>

/* F32 mode, avx512 level: rows [r0, r1) of y for all m x rows. */
typedef void (*numla_qblock_f32_rows_fn)(const numla_qblock_weight *w, int64_t r0, int64_t r1, int64_t m,
                                         const float *x, int64_t ldx, float *y, int64_t ldy, int accumulate);
/* F32 mode, avx512 level: columns [k0, k1) of one packed row (ROWS layout) -> k1 - k0 floats
 * (k0 a multiple of 256; k1 a multiple of 256, or K). */
typedef void (*numla_qblock_f32_decode_fn)(const numla_qblock_weight *w, const uint8_t *row, int64_t k0,
                                           int64_t k1, float *dst);

/* Q8 mode, vnni level, one quantized x row: Σ over the row's nb groups (xq its int8 codes, dx
 * the group scales, bs the per-16 sums). */
typedef float (*numla_qblock_q8_dot_fn)(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                        const int32_t *bs);
/* Q8 mode, vnni level: one weight row against NUMLA_QBLOCK_GEMM_MR x rows (k apart), or mr fewer. */
typedef void (*numla_qblock_q8_gemm_full_fn)(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k,
                                             const float *dx, const int32_t *bs, float *out);
typedef void (*numla_qblock_q8_gemm_part_fn)(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k,
                                             const float *dx, const int32_t *bs, float *out, int mr);

/* F32 mode, avx2 level (kernels/x86/qblock_f32_avx2.c): one weight row's nb blocks against mr
 * (1 .. NUMLA_QBLOCK_AVX2_MR) x rows (ldx apart), out[i] the row's value for x row i. */
typedef void (*numla_qblock_f32_avx2_fn)(const uint8_t *row, int64_t nb, int mr, const float *x, int64_t ldx,
                                         float *out);

/* Q8 mode, avx2 level (kernels/x86/qblock_avx2.c): one weight row's units (256-column blocks; a
 * 32-element type's blocks) [b0, b0 + nu), their bytes at blk, against mr (1 ..
 * NUMLA_QBLOCK_AVX2_MR) quantized x rows (xq, dx, bs at the first one's; rows k, the groups and
 * k / 16 apart), adding into acc (mr x 8 fp32 lanes, summed by the caller in a fixed order). */
typedef void (*numla_qblock_q8_avx2_fn)(const uint8_t *blk, int64_t b0, int64_t nu, int mr, const int8_t *xq,
                                        int64_t k, const float *dx, const int32_t *bs, float *acc);

/* Q8 mode, PANEL16 layout, vnni level: panels [plo, phi) against all m quantized x rows. */
typedef void (*numla_qblock_p16_vnni_fn)(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m,
                                         const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                         int accumulate);

/* F32 mode, amx level: 16 rows' blocks of one 32-column block column (the first at blocks, rows ld
 * bytes apart) -> one bf16 A tile (16 x 32, row-major, 64-byte aligned), the reference's values
 * exactly: only for a type with 32-element blocks whose values bf16 holds exactly. */
typedef void (*numla_qblock_bf16_tile_fn)(const uint8_t *blocks, int64_t ld, uint16_t *tile);

/* The piece forms of the types with integer sub-block scales (a type row's int_scales). */
typedef enum numla_qblock_form {
    NUMLA_QBLOCK_FORM_NONE = 0, /* real sub-block scales: one fp32 step per sub-block */
    NUMLA_QBLOCK_FORM_K4,       /* Q4_K, Q5_K: S, Z in int32; tiles q · (sc & 7), q · (sc >> 3) */
    NUMLA_QBLOCK_FORM_Q2,       /* Q2_K: the codes times sc in one byte, S straight from them */
    NUMLA_QBLOCK_FORM_IQ4,      /* IQ4_XS: S, Z with the signed ls - 32, dmin 128 d; tiles (v - 128) · s */
    NUMLA_QBLOCK_FORM_Q3,       /* Q3_K: U exact in fp32; tiles (c - 4) · s */
} numla_qblock_form;

typedef struct numla_qblock_type_row {
    numla_qblock_info info;
    int32_t q8_group;
    int32_t sub;
    int32_t p16_cols;
    int32_t p16_bytes;
    int32_t p16_scales;
    uint8_t x_offset;
    uint8_t panel_gemm;
    uint8_t int_scales; /* its numla_qblock_form */
    uint8_t f16_count;   /* how many fp16 scale fields a block has (d; d and dmin / m) */
    int16_t f16_at[2];   /* their byte offsets in the block */
    uint8_t e8m0;        /* the block starts with an E8M0 scale byte (MXFP4; the tests keep its
                          * exponent moderate, as they keep the fp16 scales finite) */
    void (*dequant)(const uint8_t *block, float *out);
    void (*quantize)(const float *x, uint8_t *block);
    void (*p16_put)(const uint8_t *block, int c, int64_t b, uint8_t *panel);
    void (*p16_get)(const uint8_t *panel, int c, int64_t b, uint8_t *block);
    numla_qblock_p16_vnni_fn p16_vnni;
    numla_qblock_f32_rows_fn f32_rows;
    numla_qblock_f32_decode_fn f32_decode;
    numla_qblock_bf16_tile_fn bf16_tile; /* F32 mode on AMX-BF16 tiles (kernels/x86/qblock_f32_amx.c) */
    numla_qblock_q8_dot_fn q8_dot;
    numla_qblock_q8_avx2_fn q8_avx2; /* Q8 mode at the avx2 level (every M, either layout) */
    numla_qblock_f32_avx2_fn f32_avx2; /* F32 mode at the avx2 level: a row against a tile of x rows */
    numla_qblock_f32_decode_fn f32_avx2_decode; /* ... and a column range of a row, for many rows */
    struct {
        numla_qblock_q8_gemm_full_fn full;
        numla_qblock_q8_gemm_part_fn part;
    } q8_gemm, q8_gemm_short;
} numla_qblock_type_row;

extern const numla_qblock_type_row numla_qblock_type_rows[NUMLA_QBLOCK_TYPE_COUNT];

/* The row of a type (validated by the caller: kernels/qblock.c checks every weight). */
static inline const numla_qblock_type_row *numla_qblock_type_row_get(numla_qblock_type type)
{
    return &numla_qblock_type_rows[type];
}

/* Whether the type has Q8 kernels at the vnni (and so amx) level. */
static inline int numla_qblock_type_row_q8_vnni(const numla_qblock_type_row *row)
{
    return row->q8_dot || row->q8_gemm.full;
}

/* The reference dequantizations (kernels/ref/qblock_ref.c): one block -> its floats. */
void numla_qblock_dequant_q8_0_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q4_0_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q4_k_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q5_k_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q6_k_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_iq4_xs_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q2_k_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q3_k_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q5_0_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_iq4_nl_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q5_1_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_q4_1_ref(const uint8_t *b, float *y);
void numla_qblock_dequant_mxfp4_ref(const uint8_t *b, float *y);

/* The reference quantizations (kernels/ref/qblock_quant_ref.c): one block's floats -> its bytes. */
void numla_qblock_quantize_q8_0_ref(const float *x, uint8_t *b);
void numla_qblock_quantize_q4_0_ref(const float *x, uint8_t *b);
void numla_qblock_quantize_q4_k_ref(const float *x, uint8_t *b);
void numla_qblock_quantize_q6_k_ref(const float *x, uint8_t *b);

/* The PANEL16 layout's per-type packing (kernels/qblock_panel16.c). */
#define NUMLA_QBLOCK_P16_DECLARE_(NAME)                                                                   \
    void numla_qblock_p16_put_##NAME##_(const uint8_t *blk, int c, int64_t b, uint8_t *panel);          \
    void numla_qblock_p16_get_##NAME##_(const uint8_t *panel, int c, int64_t b, uint8_t *blk);          \
    void numla_qblock_p16_rows_##NAME##_avx512vnni(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m, \
                                                   const int8_t *xq, const float *dx, const int32_t *bs, float *y, \
                                                   int64_t ldy, int accumulate);
NUMLA_QBLOCK_P16_DECLARE_(q8_0)
NUMLA_QBLOCK_P16_DECLARE_(q4_0)
NUMLA_QBLOCK_P16_DECLARE_(q5_0)
NUMLA_QBLOCK_P16_DECLARE_(iq4_nl)
NUMLA_QBLOCK_P16_DECLARE_(q5_1)
NUMLA_QBLOCK_P16_DECLARE_(q4_k)
NUMLA_QBLOCK_P16_DECLARE_(iq4_xs)
NUMLA_QBLOCK_P16_DECLARE_(q6_k)
NUMLA_QBLOCK_P16_DECLARE_(q2_k)
NUMLA_QBLOCK_P16_DECLARE_(q3_k)
NUMLA_QBLOCK_P16_DECLARE_(q5_k)
#undef NUMLA_QBLOCK_P16_DECLARE_

/* The avx512 level's F32-mode kernels (kernels/x86/qblock_avx512.c), per type. */
#define NUMLA_QBLOCK_F32_AVX512_DECLARE_(NAME)                                                                  \
    void numla_qblock_f32_rows_##NAME##_avx512(const numla_qblock_weight *w, int64_t r0, int64_t r1, int64_t m, \
                                               const float *x, int64_t ldx, float *y, int64_t ldy, int accumulate); \
    void numla_qblock_f32_decode_##NAME##_avx512(const numla_qblock_weight *w, const uint8_t *row, int64_t k0, \
                                                 int64_t k1, float *dst);
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q8_0)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q4_0)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q4_k)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q5_k)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q6_k)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(iq4_xs)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q2_k)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q3_k)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q5_0)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(iq4_nl)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(q5_1)
NUMLA_QBLOCK_F32_AVX512_DECLARE_(mxfp4)
#undef NUMLA_QBLOCK_F32_AVX512_DECLARE_

/* The amx level's F32-mode tile decoders (kernels/x86/qblock_f32_amx.c), per type. */
void numla_qblock_bf16_tile_mxfp4_amx(const uint8_t *blocks, int64_t ld, uint16_t *tile);

/* The avx2 level's F32-mode kernels (kernels/x86/qblock_f32_avx2.c), per type. */
#define NUMLA_QBLOCK_F32_AVX2_DECLARE_(NAME)                                                                  \
    void numla_qblock_f32_rows_##NAME##_avx2(const uint8_t *row, int64_t nb, int mr, const float *x, int64_t ldx, \
                                             float *out);                                                     \
    void numla_qblock_f32_decode_##NAME##_avx2(const numla_qblock_weight *w, const uint8_t *row, int64_t k0,    \
                                               int64_t k1, float *dst);
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q8_0)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q4_0)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q4_1)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q5_0)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(iq4_nl)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(mxfp4)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q4_k)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q5_k)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q6_k)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(iq4_xs)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q2_k)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q3_k)
NUMLA_QBLOCK_F32_AVX2_DECLARE_(q5_1)
#undef NUMLA_QBLOCK_F32_AVX2_DECLARE_

/* The avx2 level's Q8-mode kernels (kernels/x86/qblock_avx2.c), per type. */
#define NUMLA_QBLOCK_Q8_AVX2_DECLARE_(NAME)                                                                   \
    void numla_qblock_q8_rows_##NAME##_avx2(const uint8_t *blk, int64_t b0, int64_t nu, int mr, const int8_t *xq, \
                                            int64_t k, const float *dx, const int32_t *bs, float *acc);
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q8_0)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q4_0)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q4_k)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q5_k)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q6_k)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(iq4_xs)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q2_k)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q3_k)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q5_0)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(iq4_nl)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(q5_1)
NUMLA_QBLOCK_Q8_AVX2_DECLARE_(mxfp4)
#undef NUMLA_QBLOCK_Q8_AVX2_DECLARE_

/* The vnni level's Q8-mode kernels (kernels/x86/qblock_avx512vnni.c, qblock_gemm_avx512vnni.c). */
#define NUMLA_QBLOCK_Q8_DOT_DECLARE_(NAME)                                                                    \
    float numla_qblock_q8_dot_##NAME##_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx, \
                                                  const int32_t *bs);
NUMLA_QBLOCK_Q8_DOT_DECLARE_(q4_0)
NUMLA_QBLOCK_Q8_DOT_DECLARE_(q5_k)
NUMLA_QBLOCK_Q8_DOT_DECLARE_(q2_k)
NUMLA_QBLOCK_Q8_DOT_DECLARE_(q3_k)
NUMLA_QBLOCK_Q8_DOT_DECLARE_(q5_1)
#undef NUMLA_QBLOCK_Q8_DOT_DECLARE_
#define NUMLA_QBLOCK_Q8_GEMM_DECLARE_(NAME)                                                                   \
    void numla_qblock_q8_gemm_##NAME##_full_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k, \
                                                       const float *dx, const int32_t *bs, float *out);        \
    void numla_qblock_q8_gemm_##NAME##_part_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k, \
                                                       const float *dx, const int32_t *bs, float *out, int mr);
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(q4_k)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(q6_k)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(q8_0)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(q8_0s)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(q5_0)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(iq4_nl)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(iq4_xs)
NUMLA_QBLOCK_Q8_GEMM_DECLARE_(mxfp4)
#undef NUMLA_QBLOCK_Q8_GEMM_DECLARE_

#endif
