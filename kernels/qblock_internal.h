/* kernels/qblock_internal.h — private to the block-quantized linear kernels (kernels/qblock.c,
 * kernels/ref/qblock_ref.c, kernels/x86/qblock_<isa>.c): the per-ISA entry points of the
 * dispatch table and the helpers they share. */
#ifndef NUMLA_KERNELS_QBLOCK_INTERNAL_H
#define NUMLA_KERNELS_QBLOCK_INTERNAL_H

#include "kernels/qblock.h"
#include "kernels/blocking.h"
#include "kernels/qblock_types.h"

#include <stdint.h>
#include <string.h>

/* One entry point per (level, type, mode). Arguments are validated by kernels/qblock.c; the
 * workspace (Q8 mode) is the caller's, unaligned. */
typedef void (*numla_qblock_forward_fn)(const numla_qblock_weight *w, int64_t m, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int accumulate, void *ws,
                                        size_t ws_bytes);

void numla_qblock_forward_ref(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
/* AVX2 (kernels/x86/qblock_avx2.c): Q8 mode, the types whose row names q8_avx2, every M and
 * either layout; and its quantization of x (the bits of numla_qblock_quantize_rows_). */
void numla_qblock_forward_avx2(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                               int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
void numla_qblock_avx2_quantize_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws);
/* One group of x's Q8 quantization (group t: row t / ng, columns 256 (t % ng) ..) into the
 * workspace's sections xq, dx, bs: a level's vector form of numla_qblock_quantize_rows_. */
typedef void (*numla_qblock_quantize_group_fn)(const float *x, int64_t ldx, int64_t k, int64_t ng, int64_t t,
                                               int8_t *xq, float *dx, int32_t *bs);
/* x (m, ldx) quantized into ws by `group`, the m · ng groups split over an OpenMP team; below
 * NUMLA_QBLOCK_QUANT_TEAM_GROUPS groups, or called on a thread of a team, on the calling
 * thread (no region of one thread). Every level's quantizer runs it (kernels/qblock.c). */
void numla_qblock_quantize_team_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws,
                                 numla_qblock_quantize_group_fn group);
/* AVX2 (kernels/x86/qblock_f32_avx2.c): F32 mode, the types whose row names an f32_avx2 decoder
 * (every type), every M, the ROWS layout. */
void numla_qblock_forward_f32_avx2(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                   int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
/* AVX-512 (kernels/x86/qblock_avx512.c): every type, F32 mode. */
void numla_qblock_forward_avx512(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                 float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
/* AVX512-VNNI (kernels/x86/qblock_avx512vnni.c): every type in Q8 mode, at the avx512
 * level when the CPU has VNNI (NUMLA_CPU_VNNI). */
void numla_qblock_forward_avx512vnni(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
/* Q8 mode, any number of x rows (kernels/x86/qblock_gemm_avx512vnni.c): from NUMLA_QBLOCK_GEMM_MIN_M
 * rows the vnni level runs weight rows [lo, hi) against all m quantized x rows (the workspace's
 * sections, Q4_K's x already in its order) with each block unpacked once per tile of x rows;
 * the same bits whatever the tile height. applies: whether the type has it at this m. */
int numla_qblock_gemm_vnni_applies_(numla_qblock_type type, int64_t m);
/* numla_qblock_quantize_rows_ in AVX-512, the same bits (the vnni level's). */
void numla_qblock_gemm_vnni_quantize_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws);
/* Q5_0 and IQ4_NL read the quantized x as q + 128: xq's n bytes made so, in place. */
void numla_qblock_gemm_vnni_unsign_(int8_t *xq, int64_t n);
void numla_qblock_gemm_vnni_rows_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m, const int8_t *xq,
                                  const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate);

/* Q2_K's and Q3_K's sub-blocks are 16 columns: 16 scales per piece and row in their panels, four
 * k-quads per sub-block (the others: 8 and eight). */
static inline int numla_qblock_pn_s16_(numla_qblock_type type)
{
    return numla_qblock_type_row_get(type)->sub == 16;
}

/* Q8 mode, many x rows, every type but Q6_K (kernels/x86/qblock_panel_avx512vnni.c): from
 * NUMLA_QBLOCK_PANEL_MIN_M rows each thread unpacks NUMLA_QBLOCK_PANEL_NP panels of 16 weight
 * rows at a time (codes as bytes, k-quad-interleaved; fp32 sub-block scales and mins) and runs
 * vpdpbusd register tiles over all x rows (x in its natural order, not Q4_K's 1-row order).
 * Scratch per thread: numla_qblock_panel_thread_bytes_. */
static inline int numla_qblock_panel_applies_(const numla_qblock_weight *w, int64_t m)
{
    const numla_qblock_type_row *row = numla_qblock_type_row_get(w->type);
    /* the panel's column unit: the PANEL16 layout's, or for a type without one (MXFP4) its
     * 32-element blocks in pairs */
    const int64_t cols = row->p16_cols ? row->p16_cols : 64;
    return w->act == NUMLA_QBLOCK_ACT_Q8 && m >= NUMLA_QBLOCK_PANEL_MIN_M && row->panel_gemm &&
           w->k % cols == 0;
}
size_t numla_qblock_panel_thread_bytes_(const numla_qblock_weight *w);
void numla_qblock_panel_rows_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m, const int8_t *xq,
                              const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate,
                              void *scratch);
typedef void (*numla_qblock_panel_rows_fn)(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m,
                                           const int8_t *xq, const float *dx, const int32_t *bs, float *y,
                                           int64_t ldy, int accumulate, void *scratch);
/* The unpacked panel the panel GEMMs run on: codes (16 k bytes, byte 64 q + 4 c + b = row c's code
 * at column 4 q + b), then the fp32 scales and mins (k / 32 sub-blocks x 16 rows each, k / 16
 * for the 16-column types below; Q4_K and Q5_K: the piece form's integer scales,
 * kernels/x86/qblock_p16_avx512.h); its
 * size, and weight rows [r0, r0 + 16) (rows at or past hi zero) unpacked into dst with buf
 * (16 k bytes) as scratch. */
size_t numla_qblock_pn_panel_bytes_(int64_t k);
void numla_qblock_pn_pack_(const numla_qblock_weight *w, int64_t r0, int64_t hi, uint8_t *buf, uint8_t *dst);
/* The vnni level's forward with the panel GEMM's rows function and the stored panels' one
 * (numla_qblock_p16_rows_ below) as arguments: the avx512vnni entry passes its own, the amx one
 * its tile variants (which hand what they do not cover back to the vnni ones). */
typedef void (*numla_qblock_p16_rows_fn)(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m,
                                         const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                         int accumulate);
void numla_qblock_forward_vnni_with_(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                     int64_t ldy, int accumulate, void *ws, size_t ws_bytes,
                                     numla_qblock_panel_rows_fn panel_rows, numla_qblock_p16_rows_fn p16_rows);
/* AMX-INT8 (kernels/x86/qblock_panel_amx.c): every type in Q8 mode, at the amx level when the CPU
 * has AMX-INT8 and VNNI; from NUMLA_QBLOCK_PANEL_MIN_M rows the panel GEMM and Q6_K's stored
 * panels on tiles (TDPBSUD), the same bits as the vnni level's; below, the vnni level's kernels. */
void numla_qblock_forward_amx(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                              int64_t ldy, int accumulate, void *ws, size_t ws_bytes);

/* The PANEL16 layout (kernels/qblock_panel16.c; kernels/qblock.h says what it holds): whether
 * (type, act, k) takes it; a panel's bytes; packing (validated source, on the calling team);
 * block b of row r back in the file's bytes (out: the type's block bytes). */
int numla_qblock_p16_takes_(numla_qblock_type type, numla_qblock_act act, int64_t k);
int64_t numla_qblock_p16_ld_(numla_qblock_type type, int64_t k);
/* A panel is k / 256 pieces of NUMLA_QBLOCK_P16_SB bytes, one per 256 columns, in column order
 * (one sequential stream): the codes (units (h, u) at 64 (8h + u)), the 16 rows' fp16 d (Q4_K:
 * then dmin), then per sub-block the 16 rows' scale bytes (Q4_K: sc, then m; IQ4_XS: ls - 32),
 * zero padding to 64. Offsets in a piece: */
enum {
    NUMLA_QBLOCK_P16_D = 2048,       /* fp16 d[16] */
    NUMLA_QBLOCK_P16_DMIN = 2080,    /* Q4_K: fp16 dmin[16] */
    NUMLA_QBLOCK_P16_SC_Q4K = 2112,  /* Q4_K: u8 sc[8][16], then u8 m[8][16] at + 128 */
    NUMLA_QBLOCK_P16_SC_IQ4 = 2080,  /* IQ4_XS: int8 (ls - 32)[8][16] */
    NUMLA_QBLOCK_P16_SB_Q4K = 2368,  /* bytes per 256 columns */
    NUMLA_QBLOCK_P16_SB_IQ4 = 2240,  /* 2208 and padding */
};
/* Q6_K's piece holds exactly its 16 blocks' bytes, so pieces are not 64-aligned (read with
 * unaligned loads). The codes come in 16 groups of three units, in the order the kernel reads
 * them (one sequential stream): group 8n + v (n = 0, 1; v = 0 .. 7) at 192 (8n + v) holds the ql
 * units (n, v) and (n, v + 8), then the qh unit (n, v). In ql unit (n, u) byte 4c + j is row c's
 * ql[64n + 4u + j] (its low nibble column 128n + 4u + j, its high one + 64); in qh unit (n, v)
 * row c's qh[32n + 4v + j] (bits 2s, 2s + 1: the high bits of column 128n + 32s + 4v + j).
 * Then int8 sc[16][16] (sub-block, row), then fp16 d[16]. */
/* Q2_K's piece, in the order its kernel reads it: fp16 d[16], fp16 dmin[16], then per (n, half)
 * (n = 0, 1; half = 0, 1) its 4 units (n, u), u = 4 half + 0 .. 3, byte 4c + j row c's
 * qs[32n + 4u + j] (its bits 2j', 2j' + 1: column 128n + 32j' + 4u + j), and the scale bytes of
 * its sub-blocks 8n + 2j + half (j = 0 .. 3) for the 16 rows: the file's 84 bytes a row. */
enum {
    NUMLA_QBLOCK_P16_Q2_D = 0,
    NUMLA_QBLOCK_P16_Q2_DMIN = 32,
    NUMLA_QBLOCK_P16_SB_Q2K = 1344, /* 16 x 84 */
};
static inline int64_t numla_qblock_p16_q2_qs_(int n, int u) { return 64 + 320 * (2 * n + u / 4) + 64 * (u % 4); }
static inline int64_t numla_qblock_p16_q2_sc_(int sb)
{
    return 64 + 320 * (2 * (sb / 8) + sb % 2) + 256 + 16 * ((sb % 8) / 2);
}
/* Q5_K's piece, in the order its kernel reads it: fp16 d[16], fp16 dmin[16], u8 sc[8][16] and
 * m[8][16] (Q4_K's 6-bit scales and mins as bytes), the 8 qh units u (byte 4c + j row c's
 * qh[4u + j]: bits 2h and 2h + 1 the fifth bits of Q4_K's columns 64h + 4u + j and + 32), then
 * Q4_K's 32 qs units (h, u): 180 bytes a row for the file's 176. */
enum {
    NUMLA_QBLOCK_P16_Q5_D = 0,
    NUMLA_QBLOCK_P16_Q5_DMIN = 32,
    NUMLA_QBLOCK_P16_Q5_SC = 64, /* then m at + 128 */
    NUMLA_QBLOCK_P16_Q5_QH = 320,
    NUMLA_QBLOCK_P16_Q5_QS = 832,
    NUMLA_QBLOCK_P16_SB_Q5K = 2880,
};
/* Q3_K's piece, in the order its kernel reads it (one forward stream): fp16 d[16] (and padding
 * to 64), then per (n, half) (n = 0, 1; half = 0, 1) its 4 qs units (n, u), u = 4 half + 0 .. 3
 * (as Q2_K's: byte 4c + j row c's qs[32n + 4u + j]), for n = 0 the 4 hmask units u (byte 4c + j
 * row c's hmask[4u + j]: bit 4n' + j' of it belongs to column 128n' + 32j' + 4u + j; n = 1
 * reads them again), and the scales of its sub-blocks 8n + 2j + half (j = 0 .. 3) as int8 s - 32
 * for the 16 rows: 116 bytes a row for the file's 110. */
enum {
    NUMLA_QBLOCK_P16_Q3_D = 0,
    NUMLA_QBLOCK_P16_SB_Q3K = 1856,
};
static inline int64_t numla_qblock_p16_q3_base_(int n, int half)
{
    return 64 + (n ? 1152 + 320 * half : 576 * half);
}
static inline int64_t numla_qblock_p16_q3_qs_(int n, int u) { return numla_qblock_p16_q3_base_(n, u / 4) + 64 * (u % 4); }
static inline int64_t numla_qblock_p16_q3_h_(int u) { return numla_qblock_p16_q3_base_(0, u / 4) + 256 + 64 * (u % 4); }
static inline int64_t numla_qblock_p16_q3_sc_(int sb)
{
    const int n = sb / 8;
    return numla_qblock_p16_q3_base_(n, sb % 2) + (n ? 256 : 512) + 16 * ((sb % 8) / 2);
}
enum {
    NUMLA_QBLOCK_P16_Q6_SC = 3072,
    NUMLA_QBLOCK_P16_Q6_D = 3328,
    NUMLA_QBLOCK_P16_SB_Q6K = 3360, /* 16 x 210 */
};
/* The 32-element types (Q5_0, IQ4_NL, Q4_0, Q8_0; K a multiple of 64) take pieces of 64 columns,
 * two blocks t: the codes (units (t, u) at 64 (4t + u), Q8_0 64 (8t + u): byte 4c + j is byte
 * 4u + j of row c's qs, its low nibble column 32t + 4u + j and its high one + 16; Q8_0's byte is
 * column 32t + 4u + j), then Q5_0's fifth bits as byte masks (per (t, u) two 64-bit masks, of
 * the low then the high nibbles: bit 4c + j is row c's bit of that column), then the two
 * blocks' fp16 d[16]. */
enum {
    NUMLA_QBLOCK_P16_B32_MASKS = 512, /* Q5_0 */
    NUMLA_QBLOCK_P16_B32_D_NL = 512,  /* IQ4_NL and Q4_0 (the same bytes): d, and the piece is 576 bytes */
    NUMLA_QBLOCK_P16_B32_D_Q5 = 640,  /* Q5_0: 704; Q5_1: then the two blocks' fp16 m[16], 768 */
    NUMLA_QBLOCK_P16_B32_D_Q8 = 1024, /* Q8_0: 1088 */
};
/* The row's PANEL16 columns (kernels/qblock_types.h): a 32-element type's pieces of 64 columns,
 * where its fp16 d start, a piece's bytes, where Q4_K's and IQ4_XS's scale bytes start. */
static inline int numla_qblock_p16_b32_(numla_qblock_type type)
{
    return numla_qblock_type_row_get(type)->p16_cols == 64;
}
static inline int64_t numla_qblock_p16_b32_d_(numla_qblock_type type)
{
    return numla_qblock_type_row_get(type)->p16_scales;
}
static inline int64_t numla_qblock_p16_sb_(numla_qblock_type type)
{
    return numla_qblock_type_row_get(type)->p16_bytes;
}
static inline int64_t numla_qblock_p16_sc_(numla_qblock_type type)
{
    return numla_qblock_type_row_get(type)->p16_scales;
}
numla_status numla_qblock_p16_pack_(const numla_qblock_source *src, void *dst, numla_qblock_weight *out);
void numla_qblock_p16_block_(const numla_qblock_weight *w, int64_t r, int64_t b, uint8_t *out);
/* PANEL16 in Q8 mode below NUMLA_QBLOCK_PANEL_MIN_M x rows (kernels/x86/qblock_p16_avx512vnni.c):
 * panels [plo, phi) against all m quantized x rows (natural column order, signed), straight
 * from the stored panels, with the panel GEMM's arithmetic (the same bits as its rows). */
void numla_qblock_p16_rows_(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m, const int8_t *xq,
                            const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate);

/* Q8 mode's quantization groups of a k-column row: 256 columns each, the last one k mod 256
 * where k is not a multiple of 256 (the 32-element types of numla_qblock_q8_takes). */
static inline int64_t numla_qblock_q8_groups_(int64_t k) { return (k + 255) / 256; }
/* Q8 mode workspace, from the caller's pointer aligned up to 64: xq (m, k) int8, then dx
 * (m, groups) fp32, then bsums (m, k / 16) int32 (Σ q over each 16 columns), each section
 * 64-aligned. */
static inline size_t numla_qblock_align64_(size_t n) { return (n + 63) & ~(size_t)63; }
static inline int8_t *numla_qblock_ws_xq_(void *ws)
{
    return (int8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
}
static inline float *numla_qblock_ws_dx_(void *ws, int64_t m, int64_t k)
{
    return (float *)(void *)((char *)numla_qblock_ws_xq_(ws) + numla_qblock_align64_((size_t)(m * k)));
}
static inline int32_t *numla_qblock_ws_bs_(void *ws, int64_t m, int64_t k)
{
    return (int32_t *)(void *)((char *)numla_qblock_ws_dx_(ws, m, k) +
                               numla_qblock_align64_((size_t)(m * numla_qblock_q8_groups_(k)) * sizeof(float)));
}
/* ... then, where numla_qblock_panel_applies_, the panel path's per-thread scratch. */
static inline void *numla_qblock_ws_panel_(void *ws, int64_t m, int64_t k)
{
    return (char *)numla_qblock_ws_bs_(ws, m, k) + numla_qblock_align64_((size_t)(m * (k / 16)) * sizeof(int32_t));
}
/* F32 mode, many x rows (the avx512 level, kernels/x86/qblock_avx512.c): from this many rows
 * each thread decodes NUMLA_QBLOCK_MANY_NW weight rows at a time into fp32 scratch once and runs
 * register tiles over all x rows, instead of decoding every block once per 2 x rows. */
static inline int numla_qblock_many_applies_(const numla_qblock_weight *w, int64_t m)
{
    return w->act == NUMLA_QBLOCK_ACT_F32 && m >= NUMLA_QBLOCK_MANY_MIN_M;
}
/* The many-row paths' shared steps (avx512: kernels/x86/qblock_avx512.c; avx2:
 * kernels/x86/qblock_f32_avx2.c). Thread ith of nth's weight rows [*lo, *hi): the rows split in
 * groups of nw. */
static inline void numla_qblock_many_split_(int64_t n, int nw, int ith, int nth, int64_t *lo, int64_t *hi)
{
    const int64_t groups = (n + nw - 1) / nw, g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    *lo = nw * g0;
    *hi = nw * g1 < n ? nw * g1 : n;
}
/* Weight rows [r0, r0 + nw) of w, columns [k0, k0 + kc), decoded by dec into W (rows kc_max
 * floats apart); rows nw .. nw_max - 1 zeroed at the first block (their sums are never stored). */
static inline void numla_qblock_many_decode_(const numla_qblock_weight *w, numla_qblock_f32_decode_fn dec,
                                             int64_t r0, int nw, int nw_max, int64_t k0, int64_t kc, int64_t kc_max,
                                             float *W)
{
    for (int r = 0; r < nw_max; r++)
        if (r < nw)
            dec(w, w->q + (r0 + r) * w->ld, k0, k0 + kc, W + r * kc_max);
        else if (k0 == 0)
            memset(W + r * kc_max, 0, sizeof(float) * (size_t)kc_max);
}
/* Whether the avx512 many-row path copies its chunks of x (k + PAD floats a row): rows of one
 * column block (K up to KC, V4-Flash's experts), so the copy stays within 64 x (KC + PAD)
 * floats a thread (1 MiB); longer rows are read in place. */
static inline int numla_qblock_many_copies_x_(int64_t k) { return k <= NUMLA_QBLOCK_MANY_KC; }
/* Per-thread scratch of the many-row path for m x rows of k columns: NW decoded rows of KC
 * columns (KC + PAD floats apart), the four accumulator sets (16 floats each) of NW x min(m,
 * CHUNK) output pairs, and where numla_qblock_many_copies_x_ the avx512 path's copy of the
 * chunk's x rows (the avx2 path, whose column blocks stay in L1, reads x in place and uses the
 * first two). */
static inline size_t numla_qblock_many_thread_bytes_(int64_t m, int64_t k)
{
    const int64_t rows = m < NUMLA_QBLOCK_MANY_CHUNK ? m : NUMLA_QBLOCK_MANY_CHUNK;
    return (size_t)NUMLA_QBLOCK_MANY_NW * (NUMLA_QBLOCK_MANY_KC + NUMLA_QBLOCK_MANY_PAD) * sizeof(float) +
           (size_t)rows * NUMLA_QBLOCK_MANY_NW * 64 * sizeof(float) +
           (numla_qblock_many_copies_x_(k) ? (size_t)rows * (size_t)(k + NUMLA_QBLOCK_MANY_PAD) * sizeof(float) : 0);
}
/* x rows [i0, i1), columns [0, k), into X, rows k + NUMLA_QBLOCK_MANY_PAD floats apart (the
 * thread's own copy of its chunk: its tiles' x streams then fall in different cache sets). */
static inline void numla_qblock_many_copy_x_(const float *x, int64_t ldx, int64_t i0, int64_t i1, int64_t k, float *X)
{
    for (int64_t i = i0; i < i1; i++)
        memcpy(X + (i - i0) * (k + NUMLA_QBLOCK_MANY_PAD), x + i * ldx, sizeof(float) * (size_t)k);
}

/* F32 mode on AMX-BF16 tiles (the amx level, kernels/x86/qblock_f32_amx.c): types whose row names
 * a bf16 tile decoder, from NUMLA_QBLOCK_AMX_F32_MIN_M rows and N >= 16 (fewer run the avx512
 * level); below, the avx512 level's kernels. Workspace: from its 64-aligned start the packed x
 * chunk (hi and lo tiles of up to NUMLA_QBLOCK_AMX_F32_CHUNK rows x K), then per thread the A
 * tiles of a weight pair over NUMLA_QBLOCK_AMX_F32_KC columns and the pair's fp32 sums over a
 * chunk. */
static inline int numla_qblock_amx_f32_applies_(const numla_qblock_weight *w, int64_t m)
{
    return w->act == NUMLA_QBLOCK_ACT_F32 && m >= NUMLA_QBLOCK_AMX_F32_MIN_M && w->n >= 16 &&
           w->layout == NUMLA_QBLOCK_LAYOUT_ROWS && numla_qblock_type_row_get(w->type)->bf16_tile != NULL;
}
static inline size_t numla_qblock_amx_f32_x_bytes_(int64_t m, int64_t k)
{
    const int64_t rows = m < NUMLA_QBLOCK_AMX_F32_CHUNK ? m : NUMLA_QBLOCK_AMX_F32_CHUNK;
    return (size_t)((rows + 15) / 16) * (size_t)(k / 32) * 2 * 1024;
}
static inline size_t numla_qblock_amx_f32_thread_bytes_(void)
{
    return (size_t)2 * (NUMLA_QBLOCK_AMX_F32_KC / 32) * 1024 + (size_t)2 * (NUMLA_QBLOCK_AMX_F32_CHUNK / 16) * 1024;
}
void numla_qblock_forward_f32_amx(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                  int64_t ldy, int accumulate, void *ws, size_t ws_bytes);

/* The Q8 quantization rule of kernels/qblock.h for rows [0, m) of x into the workspace (scalar:
 * the reference's; the vnni level runs numla_qblock_gemm_vnni_quantize_, the same bits, so all
 * levels quantize alike). Runs on the calling team. */
void numla_qblock_quantize_rows_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws);

/* One block of `type` -> its `block` floats (the reference rounding of kernels/qblock.h). */
void numla_qblock_dequant_block_ref(numla_qblock_type type, const uint8_t *b, float *out);

/* IQ4_NL / IQ4_XS code book. */
extern const int8_t numla_qblock_iq4_values[16];
/* MXFP4's: twice the e2m1 values, by their 4-bit code (sign in bit 3). */
extern const int8_t numla_qblock_mxfp4_values[16];

/* An E8M0 byte as ggml's MXFP4 scale, 2^(e - 128): (e - 1) << 23 as float bits, and below e = 2
 * the subnormals 2^-128 and 2^-127 (0x00200000 << e). */
static inline float numla_qblock_e8m0_half_(uint8_t e)
{
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The E8M0 half-scales 2^(e - 128) of numla_qblock_e8m0_half_ as fp32 bits, one per byte e: a
 * block's scale is then one broadcast load instead of scalar bit work and a move across. */
#define NUMLA_QBLOCK_E8M0H_(e) ((e) < 2 ? 0x00200000u << ((e) & 1) : (uint32_t)((e) - 1) << 23)
#define NUMLA_QBLOCK_E8M0H4_(e) NUMLA_QBLOCK_E8M0H_(e), NUMLA_QBLOCK_E8M0H_((e) + 1), \
    NUMLA_QBLOCK_E8M0H_((e) + 2), NUMLA_QBLOCK_E8M0H_((e) + 3)
#define NUMLA_QBLOCK_E8M0H16_(e) NUMLA_QBLOCK_E8M0H4_(e), NUMLA_QBLOCK_E8M0H4_((e) + 4), \
    NUMLA_QBLOCK_E8M0H4_((e) + 8), NUMLA_QBLOCK_E8M0H4_((e) + 12)
#define NUMLA_QBLOCK_E8M0H64_(e) NUMLA_QBLOCK_E8M0H16_(e), NUMLA_QBLOCK_E8M0H16_((e) + 16), \
    NUMLA_QBLOCK_E8M0H16_((e) + 32), NUMLA_QBLOCK_E8M0H16_((e) + 48)
static const uint32_t numla_qblock_e8m0h_bits_[256] = {
    NUMLA_QBLOCK_E8M0H64_(0), NUMLA_QBLOCK_E8M0H64_(64), NUMLA_QBLOCK_E8M0H64_(128),
    NUMLA_QBLOCK_E8M0H64_(192)};

/* IEEE half -> float, exactly (subnormals, inf and NaN included). */
static inline float numla_qblock_f16_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, mant = h & 1023;
    uint32_t bits;
    if (e == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int sh = 0;
            uint32_t mm = mant;
            while (!(mm & 1024)) {
                mm <<= 1;
                sh++;
            }
            bits = sign | (uint32_t)(127 - 15 - sh + 1) << 23 | (mm & 1023) << 13;
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (e + 127 - 15) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes. */
static inline void numla_qblock_k4_scale_min_(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q3_K: signed 6-bit scale of group g (0..15), minus its bias of 32. */
static inline int numla_qblock_q3k_scale_(const uint8_t *s, int g)
{
    int lo = (s[g % 8] >> (4 * (g / 8))) & 15, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Split [0, total) into nth near-equal ranges; range of thread ith. */
static inline void numla_qblock_split_(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t q = total / nth, r = total % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

#endif
