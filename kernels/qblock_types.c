/* kernels/qblock_types.c — the rows of kernels/qblock_types.h: one per block type. */
#include "kernels/qblock_types.h"

#include "common/ggml_types.h"
#include "kernels/qblock_internal.h"

/* The avx512 level's F32-mode kernels of a type. */
#define F32_AVX512_(NAME)                                                                                       \
    .f32_rows = numla_qblock_f32_rows_##NAME##_avx512, .f32_decode = numla_qblock_f32_decode_##NAME##_avx512
/* The PANEL16 packing of a type, and its stored panels' kernel at the vnni level. */
#define P16_(NAME)                                                                                              \
    .p16_put = numla_qblock_p16_put_##NAME##_, .p16_get = numla_qblock_p16_get_##NAME##_,                    \
    .p16_vnni = numla_qblock_p16_rows_##NAME##_avx512vnni
/* The vnni level's Q8-mode kernels of a type: one-row dots, or the many-row GEMM's tiles. */
#define Q8_DOT_(NAME) .q8_dot = numla_qblock_q8_dot_##NAME##_avx512vnni
/* The avx2 level's F32-mode kernel of a type. */
#define F32_AVX2_(NAME)                                                                                         \
    .f32_avx2 = numla_qblock_f32_rows_##NAME##_avx2, .f32_avx2_decode = numla_qblock_f32_decode_##NAME##_avx2
/* The avx2 level's Q8-mode kernel of a type. */
#define Q8_AVX2_(NAME) .q8_avx2 = numla_qblock_q8_rows_##NAME##_avx2
#define Q8_GEMM_(NAME)                                                                                          \
    {.full = numla_qblock_q8_gemm_##NAME##_full_avx512vnni, .part = numla_qblock_q8_gemm_##NAME##_part_avx512vnni}

const numla_qblock_type_row numla_qblock_type_rows[NUMLA_QBLOCK_TYPE_COUNT] = {
    [NUMLA_QBLOCK_Q8_0] = {.info = {NUMLA_GGML_ROW(Q8_0)}, .f16_count = 1, .f16_at = {0}, .q8_group = 32, .sub = 32,
                           .p16_cols = 64, .p16_bytes = NUMLA_QBLOCK_P16_B32_D_Q8 + 64,
                           .p16_scales = NUMLA_QBLOCK_P16_B32_D_Q8, .panel_gemm = 1,
                           .dequant = numla_qblock_dequant_q8_0_ref, .quantize = numla_qblock_quantize_q8_0_ref,
                           F32_AVX512_(q8_0), P16_(q8_0),
                           .q8_gemm = Q8_GEMM_(q8_0), .q8_gemm_short = Q8_GEMM_(q8_0s), Q8_AVX2_(q8_0), F32_AVX2_(q8_0)},
    [NUMLA_QBLOCK_Q4_0] = {.info = {NUMLA_GGML_ROW(Q4_0)}, .f16_count = 1, .f16_at = {0}, .q8_group = 32, .sub = 32,
                           .p16_cols = 64, .p16_bytes = NUMLA_QBLOCK_P16_B32_D_NL + 64,
                           .p16_scales = NUMLA_QBLOCK_P16_B32_D_NL, .panel_gemm = 1,
                           .dequant = numla_qblock_dequant_q4_0_ref, .quantize = numla_qblock_quantize_q4_0_ref,
                           F32_AVX512_(q4_0), P16_(q4_0),
                           Q8_DOT_(q4_0), Q8_AVX2_(q4_0), F32_AVX2_(q4_0)},
    [NUMLA_QBLOCK_Q4_K] = {.info = {NUMLA_GGML_ROW(Q4_K)}, .f16_count = 2, .f16_at = {0, 2}, .q8_group = 256, .sub = 32,
                           .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_Q4K,
                           .p16_scales = NUMLA_QBLOCK_P16_SC_Q4K, .panel_gemm = 1, .int_scales = NUMLA_QBLOCK_FORM_K4,
                           .dequant = numla_qblock_dequant_q4_k_ref, .quantize = numla_qblock_quantize_q4_k_ref,
                           F32_AVX512_(q4_k), P16_(q4_k),
                           .q8_gemm = Q8_GEMM_(q4_k), Q8_AVX2_(q4_k), F32_AVX2_(q4_k)},
    [NUMLA_QBLOCK_Q5_K] = {.info = {NUMLA_GGML_ROW(Q5_K)}, .f16_count = 2, .f16_at = {0, 2}, .q8_group = 256, .sub = 32,
                           .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_Q5K, .panel_gemm = 1,
                           .int_scales = NUMLA_QBLOCK_FORM_K4, .dequant = numla_qblock_dequant_q5_k_ref, F32_AVX512_(q5_k), P16_(q5_k),
                           Q8_DOT_(q5_k), Q8_AVX2_(q5_k), F32_AVX2_(q5_k)},
    [NUMLA_QBLOCK_Q6_K] = {.info = {NUMLA_GGML_ROW(Q6_K)}, .f16_count = 1, .f16_at = {208}, .q8_group = 256, .sub = 32,
                           .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_Q6K,
                           .dequant = numla_qblock_dequant_q6_k_ref, .quantize = numla_qblock_quantize_q6_k_ref,
                           F32_AVX512_(q6_k), P16_(q6_k),
                           .q8_gemm = Q8_GEMM_(q6_k), Q8_AVX2_(q6_k), F32_AVX2_(q6_k)},
    [NUMLA_QBLOCK_IQ4_XS] = {.info = {NUMLA_GGML_ROW(IQ4_XS)},
                             .f16_count = 1, .f16_at = {0}, .q8_group = 256, .sub = 32,
                             .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_IQ4,
                             .p16_scales = NUMLA_QBLOCK_P16_SC_IQ4, .x_offset = 1, .panel_gemm = 1, .int_scales = NUMLA_QBLOCK_FORM_IQ4,
                             .dequant = numla_qblock_dequant_iq4_xs_ref, F32_AVX512_(iq4_xs), P16_(iq4_xs),
                           .q8_gemm = Q8_GEMM_(iq4_xs), Q8_AVX2_(iq4_xs), F32_AVX2_(iq4_xs)},
    [NUMLA_QBLOCK_Q2_K] = {.info = {NUMLA_GGML_ROW(Q2_K)},
                           .f16_count = 2, .f16_at = {80, 82}, .q8_group = 256, .sub = 16,
                           .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_Q2K, .panel_gemm = 1, .int_scales = NUMLA_QBLOCK_FORM_Q2,
                           .dequant = numla_qblock_dequant_q2_k_ref, F32_AVX512_(q2_k), P16_(q2_k),
                           Q8_DOT_(q2_k), Q8_AVX2_(q2_k), F32_AVX2_(q2_k)},
    [NUMLA_QBLOCK_Q3_K] = {.info = {NUMLA_GGML_ROW(Q3_K)}, .f16_count = 1, .f16_at = {108}, .q8_group = 256, .sub = 16,
                           .p16_cols = 256, .p16_bytes = NUMLA_QBLOCK_P16_SB_Q3K, .panel_gemm = 1, .int_scales = NUMLA_QBLOCK_FORM_Q3,
                           .dequant = numla_qblock_dequant_q3_k_ref, F32_AVX512_(q3_k), P16_(q3_k),
                           Q8_DOT_(q3_k), Q8_AVX2_(q3_k), F32_AVX2_(q3_k)},
    [NUMLA_QBLOCK_Q5_0] = {.info = {NUMLA_GGML_ROW(Q5_0)}, .f16_count = 1, .f16_at = {0}, .q8_group = 32, .sub = 32,
                           .p16_cols = 64, .p16_bytes = NUMLA_QBLOCK_P16_B32_D_Q5 + 64,
                           .p16_scales = NUMLA_QBLOCK_P16_B32_D_Q5, .x_offset = 1, .panel_gemm = 1,
                           .dequant = numla_qblock_dequant_q5_0_ref, F32_AVX512_(q5_0), P16_(q5_0),
                           .q8_gemm = Q8_GEMM_(q5_0), Q8_AVX2_(q5_0), F32_AVX2_(q5_0)},
    [NUMLA_QBLOCK_IQ4_NL] = {.info = {NUMLA_GGML_ROW(IQ4_NL)}, .f16_count = 1, .f16_at = {0}, .q8_group = 32, .sub = 32,
                             .p16_cols = 64, .p16_bytes = NUMLA_QBLOCK_P16_B32_D_NL + 64,
                             .p16_scales = NUMLA_QBLOCK_P16_B32_D_NL, .x_offset = 1, .panel_gemm = 1,
                             .dequant = numla_qblock_dequant_iq4_nl_ref, F32_AVX512_(iq4_nl), P16_(iq4_nl),
                           .q8_gemm = Q8_GEMM_(iq4_nl), Q8_AVX2_(iq4_nl), F32_AVX2_(iq4_nl)},
    [NUMLA_QBLOCK_Q5_1] = {.info = {NUMLA_GGML_ROW(Q5_1)}, .f16_count = 2, .f16_at = {0, 2}, .q8_group = 32, .sub = 32,
                           .p16_cols = 64, .p16_bytes = NUMLA_QBLOCK_P16_B32_D_Q5 + 128, /* then its m[16] */
                           .p16_scales = NUMLA_QBLOCK_P16_B32_D_Q5, .panel_gemm = 1,
                           .dequant = numla_qblock_dequant_q5_1_ref, F32_AVX512_(q5_1), P16_(q5_1),
                           Q8_DOT_(q5_1), Q8_AVX2_(q5_1), F32_AVX2_(q5_1)},
    /* F32 mode at the avx2 level (the levels above inherit it); Q8 mode the reference's */
    [NUMLA_QBLOCK_Q4_1] = {.info = {NUMLA_GGML_ROW(Q4_1)}, .f16_count = 2, .f16_at = {0, 2}, .q8_group = 32, .sub = 32,
                           .dequant = numla_qblock_dequant_q4_1_ref, F32_AVX2_(q4_1)},
    /* F32 mode at the avx512 level and on AMX-BF16 tiles (its values are exact in bf16); Q8 mode
     * at the vnni level (IQ4_NL's GEMM with MXFP4's code book and E8M0 scale) and from
     * NUMLA_QBLOCK_PANEL_MIN_M rows the panel GEMM on panels unpacked per call (no PANEL16
     * layout) */
    [NUMLA_QBLOCK_MXFP4] = {.info = {NUMLA_GGML_ROW(MXFP4)}, .e8m0 = 1, .q8_group = 32, .sub = 32, .x_offset = 1,
                            .panel_gemm = 1,
                            .dequant = numla_qblock_dequant_mxfp4_ref, F32_AVX512_(mxfp4),
                            .bf16_tile = numla_qblock_bf16_tile_mxfp4_amx,
                            .q8_gemm = Q8_GEMM_(mxfp4), Q8_AVX2_(mxfp4), F32_AVX2_(mxfp4)},
};
