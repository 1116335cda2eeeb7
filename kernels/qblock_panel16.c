/* kernels/qblock_panel16.c — the PANEL16 layout of kernels/qblock.h (in Q8 mode, the types whose
 * row in kernels/qblock_types.c names its piece): which weights take it, its size, packing a
 * block-row source into it (each type's p16_put), and reading a row's blocks back out (p16_get:
 * the reference's view of a panel, numla_qblock_row_blocks). Scalar and ISA-independent; the
 * kernels that run it are in kernels/x86/qblock_p16_avx512vnni.c and
 * kernels/x86/qblock_panel_avx512vnni.c. */
#include "kernels/qblock_internal.h"

int numla_qblock_p16_takes_(numla_qblock_type type, numla_qblock_act act, int64_t k)
{
    if (act != NUMLA_QBLOCK_ACT_Q8 || k <= 0 || (unsigned)type >= NUMLA_QBLOCK_TYPE_COUNT)
        return 0;
    const int64_t cols = numla_qblock_type_row_get(type)->p16_cols;
    return cols && k % cols == 0;
}

int64_t numla_qblock_p16_ld_(numla_qblock_type type, int64_t k)
{
    const numla_qblock_type_row *row = numla_qblock_type_row_get(type);
    return k / row->p16_cols * row->p16_bytes;
}

/* One 32-element block g of row c into its panel. */
static void numla_qblock_p16_put_b32_(numla_qblock_type type, const uint8_t *blk, int c, int64_t g, uint8_t *pan)
{
    uint8_t *piece = pan + (g / 2) * numla_qblock_p16_sb_(type);
    const int t = (int)(g % 2);
    memcpy(piece + numla_qblock_p16_b32_d_(type) + 32 * t + 2 * c, blk, 2);
    if (type == NUMLA_QBLOCK_Q8_0) {
        for (int u = 0; u < 8; u++)
            memcpy(piece + (8 * t + u) * 64 + 4 * c, blk + 2 + 4 * u, 4);
        return;
    }
    /* Q5_0: d, qh, qs; Q5_1: d, m (after the d's in the piece), qh, qs; the others d, qs */
    const int q5 = type == NUMLA_QBLOCK_Q5_0 || type == NUMLA_QBLOCK_Q5_1, h0 = type == NUMLA_QBLOCK_Q5_1 ? 4 : 2;
    if (type == NUMLA_QBLOCK_Q5_1)
        memcpy(piece + numla_qblock_p16_b32_d_(type) + 64 + 32 * t + 2 * c, blk + 2, 2);
    const uint8_t *qs = blk + (q5 ? h0 + 4 : 2);
    for (int u = 0; u < 4; u++)
        memcpy(piece + (4 * t + u) * 64 + 4 * c, qs + 4 * u, 4);
    if (q5) {
        uint32_t qh;
        memcpy(&qh, blk + h0, 4);
        for (int u = 0; u < 4; u++)
            for (int half = 0; half < 2; half++) {
                uint8_t *mp = piece + NUMLA_QBLOCK_P16_B32_MASKS + (4 * t + u) * 16 + 8 * half;
                uint64_t mk;
                memcpy(&mk, mp, 8);
                for (int j = 0; j < 4; j++)
                    mk |= (uint64_t)((qh >> (16 * half + 4 * u + j)) & 1) << (4 * c + j);
                memcpy(mp, &mk, 8);
            }
    }
}

/* Its inverse. */
static void numla_qblock_p16_get_b32_(numla_qblock_type type, const uint8_t *pan, int c, int64_t g, uint8_t *blk)
{
    const uint8_t *piece = pan + (g / 2) * numla_qblock_p16_sb_(type);
    const int t = (int)(g % 2);
    memcpy(blk, piece + numla_qblock_p16_b32_d_(type) + 32 * t + 2 * c, 2);
    if (type == NUMLA_QBLOCK_Q8_0) {
        for (int u = 0; u < 8; u++)
            memcpy(blk + 2 + 4 * u, piece + (8 * t + u) * 64 + 4 * c, 4);
        return;
    }
    const int q5 = type == NUMLA_QBLOCK_Q5_0 || type == NUMLA_QBLOCK_Q5_1, h0 = type == NUMLA_QBLOCK_Q5_1 ? 4 : 2;
    if (type == NUMLA_QBLOCK_Q5_1)
        memcpy(blk + 2, piece + numla_qblock_p16_b32_d_(type) + 64 + 32 * t + 2 * c, 2);
    uint8_t *qs = blk + (q5 ? h0 + 4 : 2);
    for (int u = 0; u < 4; u++)
        memcpy(qs + 4 * u, piece + (4 * t + u) * 64 + 4 * c, 4);
    if (q5) {
        uint32_t qh = 0;
        for (int u = 0; u < 4; u++)
            for (int half = 0; half < 2; half++) {
                uint64_t mk;
                memcpy(&mk, piece + NUMLA_QBLOCK_P16_B32_MASKS + (4 * t + u) * 16 + 8 * half, 8);
                for (int j = 0; j < 4; j++)
                    qh |= (uint32_t)((mk >> (4 * c + j)) & 1) << (16 * half + 4 * u + j);
            }
        memcpy(blk + h0, &qh, 4);
    }
}

/* Where Q6_K's bytes go (kernels/qblock_internal.h): move i (0 .. NUMLA_QBLOCK_P16_Q6_MOVES) of a
 * block in row c of a panel takes `bytes` from the file's block at *at_blk to the piece at
 * *at_piece: the 16 groups' ql, ql and qh quads, the 16 scales, d. */
enum { NUMLA_QBLOCK_P16_Q6_MOVES = 32 + 16 + 16 + 1 };
static int numla_qblock_p16_q6_k_move_(int i, int c, int *at_piece, int *at_blk)
{
    if (i < 48) { /* group 8n + v: ql units (n, v), (n, v + 8), qh unit (n, v) */
        const int g = i / 3, n = g / 8, v = g % 8, e = i % 3;
        *at_piece = 192 * g + 64 * e + 4 * c;
        *at_blk = e < 2 ? 64 * n + 4 * (v + 8 * e) : 128 + 32 * n + 4 * v;
        return 4;
    }
    if (i < 64) { /* scale of sub-block j */
        *at_piece = NUMLA_QBLOCK_P16_Q6_SC + 16 * (i - 48) + c;
        *at_blk = 192 + (i - 48);
        return 1;
    }
    *at_piece = NUMLA_QBLOCK_P16_Q6_D + 2 * c;
    *at_blk = 208;
    return 2;
}

/* The same for Q2_K (kernels/qblock_internal.h): the 16 code quads, the 16 scales, d, dmin. */
enum { NUMLA_QBLOCK_P16_Q2_MOVES = 16 + 16 + 2 };
static int numla_qblock_p16_q2_k_move_(int i, int c, int *at_piece, int *at_blk)
{
    if (i < 16) { /* unit (n, u) = (i / 8, i % 8): qs[32n + 4u .. + 4) */
        *at_piece = (int)numla_qblock_p16_q2_qs_(i / 8, i % 8) + 4 * c;
        *at_blk = 16 + 32 * (i / 8) + 4 * (i % 8);
        return 4;
    }
    if (i < 32) { /* scale byte of sub-block i - 16 */
        *at_piece = (int)numla_qblock_p16_q2_sc_(i - 16) + c;
        *at_blk = i - 16;
        return 1;
    }
    *at_piece = (i == 32 ? NUMLA_QBLOCK_P16_Q2_D : NUMLA_QBLOCK_P16_Q2_DMIN) + 2 * c;
    *at_blk = i == 32 ? 80 : 82;
    return 2;
}

/* Q3_K's block of row c into / out of its piece (kernels/qblock_internal.h): qs and hmask quads
 * and d move as they are; the 12 scale bytes become the 16 6-bit scales as int8 s - 32 and back
 * (kernels/qblock.h: low nibbles in bytes 0-7, sub-blocks 0-7 then 8-15; the high 2 bits of
 * sub-block i + 4q in bits 2q, 2q + 1 of byte 8 + i). */
static void numla_qblock_p16_put_q3_(const uint8_t *blk, int c, uint8_t *piece)
{
    for (int i = 0; i < 16; i++)
        memcpy(piece + numla_qblock_p16_q3_qs_(i / 8, i % 8) + 4 * c, blk + 32 + 32 * (i / 8) + 4 * (i % 8), 4);
    for (int u = 0; u < 8; u++)
        memcpy(piece + numla_qblock_p16_q3_h_(u) + 4 * c, blk + 4 * u, 4);
    const uint8_t *sp = blk + 96;
    for (int sb = 0; sb < 16; sb++) {
        const int lo = sb < 8 ? sp[sb] & 15 : sp[sb - 8] >> 4, hi = (sp[8 + sb % 4] >> (2 * (sb / 4))) & 3;
        piece[numla_qblock_p16_q3_sc_(sb) + c] = (uint8_t)(int8_t)((lo | hi << 4) - 32);
    }
    memcpy(piece + NUMLA_QBLOCK_P16_Q3_D + 2 * c, blk + 108, 2);
}

static void numla_qblock_p16_get_q3_(const uint8_t *piece, int c, uint8_t *blk)
{
    for (int i = 0; i < 16; i++)
        memcpy(blk + 32 + 32 * (i / 8) + 4 * (i % 8), piece + numla_qblock_p16_q3_qs_(i / 8, i % 8) + 4 * c, 4);
    for (int u = 0; u < 8; u++)
        memcpy(blk + 4 * u, piece + numla_qblock_p16_q3_h_(u) + 4 * c, 4);
    int s[16];
    for (int sb = 0; sb < 16; sb++)
        s[sb] = (int8_t)piece[numla_qblock_p16_q3_sc_(sb) + c] + 32;
    uint8_t *sp = blk + 96;
    for (int i = 0; i < 8; i++)
        sp[i] = (uint8_t)((s[i] & 15) | (s[i + 8] & 15) << 4);
    for (int i = 0; i < 4; i++)
        sp[8 + i] = (uint8_t)((s[i] >> 4) | (s[i + 4] >> 4) << 2 | (s[i + 8] >> 4) << 4 | (s[i + 12] >> 4) << 6);
    memcpy(blk + 108, piece + NUMLA_QBLOCK_P16_Q3_D + 2 * c, 2);
}

/* Q4_K's 6-bit packing of 8 scales and 8 mins into 12 bytes (kernels/qblock.h), the inverse of
 * numla_qblock_k4_scale_min_. */
static void numla_qblock_p16_k4_pack_(const uint8_t s[8], const uint8_t m[8], uint8_t *out)
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((s[j] & 63) | (s[j + 4] >> 4) << 6);
        out[4 + j] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        out[8 + j] = (uint8_t)((s[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/* Q5_K's block of row c into / out of its piece (kernels/qblock_internal.h). */
static void numla_qblock_p16_put_q5k_(const uint8_t *blk, int c, uint8_t *piece)
{
    memcpy(piece + NUMLA_QBLOCK_P16_Q5_D + 2 * c, blk, 2);
    memcpy(piece + NUMLA_QBLOCK_P16_Q5_DMIN + 2 * c, blk + 2, 2);
    for (int j = 0; j < 8; j++)
        numla_qblock_k4_scale_min_(blk + 4, j, piece + NUMLA_QBLOCK_P16_Q5_SC + 16 * j + c,
                                   piece + NUMLA_QBLOCK_P16_Q5_SC + 128 + 16 * j + c);
    for (int u = 0; u < 8; u++)
        memcpy(piece + NUMLA_QBLOCK_P16_Q5_QH + 64 * u + 4 * c, blk + 16 + 4 * u, 4);
    for (int i = 0; i < 32; i++) /* unit (h, u) = (i / 8, i % 8) */
        memcpy(piece + NUMLA_QBLOCK_P16_Q5_QS + 64 * i + 4 * c, blk + 48 + 32 * (i / 8) + 4 * (i % 8), 4);
}

static void numla_qblock_p16_get_q5k_(const uint8_t *piece, int c, uint8_t *blk)
{
    memcpy(blk, piece + NUMLA_QBLOCK_P16_Q5_D + 2 * c, 2);
    memcpy(blk + 2, piece + NUMLA_QBLOCK_P16_Q5_DMIN + 2 * c, 2);
    uint8_t s[8], m[8];
    for (int j = 0; j < 8; j++) {
        s[j] = piece[NUMLA_QBLOCK_P16_Q5_SC + 16 * j + c];
        m[j] = piece[NUMLA_QBLOCK_P16_Q5_SC + 128 + 16 * j + c];
    }
    numla_qblock_p16_k4_pack_(s, m, blk + 4);
    for (int u = 0; u < 8; u++)
        memcpy(blk + 16 + 4 * u, piece + NUMLA_QBLOCK_P16_Q5_QH + 64 * u + 4 * c, 4);
    for (int i = 0; i < 32; i++)
        memcpy(blk + 48 + 32 * (i / 8) + 4 * (i % 8), piece + NUMLA_QBLOCK_P16_Q5_QS + 64 * i + 4 * c, 4);
}

size_t numla_qblock_layout_size(numla_qblock_type type, numla_qblock_layout layout, int64_t n, int64_t k)
{
    if (layout == NUMLA_QBLOCK_LAYOUT_ROWS)
        return numla_qblock_packed_size(type, n, k);
    if (layout != NUMLA_QBLOCK_LAYOUT_PANEL16 || n <= 0 || !numla_qblock_p16_takes_(type, NUMLA_QBLOCK_ACT_Q8, k))
        return 0;
    return (size_t)((n + 15) / 16) * (size_t)numla_qblock_p16_ld_(type, k);
}

numla_qblock_layout numla_qblock_layout_for(numla_isa isa, numla_qblock_type type, numla_qblock_act act, int64_t k)
{
    /* the vnni kernels, or the amx level's (its tiles from 16 rows, the vnni kernels below) */
    const numla_isa level = numla_qblock_level(isa, type, act);
    return numla_qblock_p16_takes_(type, act, k) && (level == NUMLA_ISA_AVX512 || level == NUMLA_ISA_AMX)
               ? NUMLA_QBLOCK_LAYOUT_PANEL16
               : NUMLA_QBLOCK_LAYOUT_ROWS;
}

/* Q4_K's (q4k) or IQ4_XS's block of row c into / out of its piece: the codes (unit (h, u) holds
 * qs[32h + 4u .. + 4) of each row), d (Q4_K: dmin), the scales as bytes (Q4_K: sc then m; IQ4_XS:
 * ls - 32). */
static void numla_qblock_p16_put_k4_(int q4k, const uint8_t *blk, int c, uint8_t *piece)
{
    const int qs0 = q4k ? 16 : 8;
    uint8_t *sc = piece + (q4k ? NUMLA_QBLOCK_P16_SC_Q4K : NUMLA_QBLOCK_P16_SC_IQ4);
    for (int h = 0; h < 4; h++)
        for (int u = 0; u < 8; u++)
            memcpy(piece + (h * 8 + u) * 64 + 4 * c, blk + qs0 + 32 * h + 4 * u, 4);
    memcpy(piece + NUMLA_QBLOCK_P16_D + 2 * c, blk, 2);
    if (q4k) {
        memcpy(piece + NUMLA_QBLOCK_P16_DMIN + 2 * c, blk + 2, 2);
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            numla_qblock_k4_scale_min_(blk + 4, j, &s, &m);
            sc[16 * j + c] = s;
            sc[128 + 16 * j + c] = m;
        }
    } else {
        uint16_t sh;
        memcpy(&sh, blk + 2, 2);
        for (int j = 0; j < 8; j++) {
            const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4;
            sc[16 * j + c] = (uint8_t)(int8_t)(ls - 32);
        }
    }
}

static void numla_qblock_p16_get_k4_(int q4k, const uint8_t *piece, int c, uint8_t *out)
{
    const int qs0 = q4k ? 16 : 8;
    const uint8_t *sc = piece + (q4k ? NUMLA_QBLOCK_P16_SC_Q4K : NUMLA_QBLOCK_P16_SC_IQ4);
    for (int h = 0; h < 4; h++)
        for (int u = 0; u < 8; u++)
            memcpy(out + qs0 + 32 * h + 4 * u, piece + (h * 8 + u) * 64 + 4 * c, 4);
    memcpy(out, piece + NUMLA_QBLOCK_P16_D + 2 * c, 2);
    if (q4k) {
        memcpy(out + 2, piece + NUMLA_QBLOCK_P16_DMIN + 2 * c, 2);
        uint8_t s[8], m[8];
        for (int j = 0; j < 8; j++) {
            s[j] = sc[16 * j + c];
            m[j] = sc[128 + 16 * j + c];
        }
        numla_qblock_p16_k4_pack_(s, m, out + 4);
    } else {
        uint16_t sh = 0;
        memset(out + 4, 0, 4);
        for (int j = 0; j < 8; j++) {
            const int ls = (int)(int8_t)sc[16 * j + c] + 32;
            out[4 + j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            sh |= (uint16_t)(((ls >> 4) & 3) << (2 * j));
        }
        memcpy(out + 2, &sh, 2);
    }
}

/* Q6_K's and Q2_K's blocks move as the move tables say. */
typedef int (*numla_qblock_p16_move_fn)(int i, int c, int *at_piece, int *at_blk);
static void numla_qblock_p16_put_moves_(numla_qblock_p16_move_fn move, int moves, const uint8_t *blk, int c,
                                        uint8_t *piece)
{
    for (int i = 0; i < moves; i++) {
        int at_piece, at_blk;
        const int bytes = move(i, c, &at_piece, &at_blk);
        memcpy(piece + at_piece, blk + at_blk, (size_t)bytes);
    }
}

static void numla_qblock_p16_get_moves_(numla_qblock_p16_move_fn move, int moves, const uint8_t *piece, int c,
                                        uint8_t *blk)
{
    for (int i = 0; i < moves; i++) {
        int at_piece, at_blk;
        const int bytes = move(i, c, &at_piece, &at_blk);
        memcpy(blk + at_blk, piece + at_piece, (size_t)bytes);
    }
}

/* Each type's p16_put / p16_get (kernels/qblock_types.h): block b of row c of a panel. */
#define NUMLA_QBLOCK_P16_B32_(T, NAME)                                                                         \
    void numla_qblock_p16_put_##NAME##_(const uint8_t *blk, int c, int64_t b, uint8_t *panel)                 \
    {                                                                                                          \
        numla_qblock_p16_put_b32_(NUMLA_QBLOCK_##T, blk, c, b, panel);                                         \
    }                                                                                                          \
    void numla_qblock_p16_get_##NAME##_(const uint8_t *panel, int c, int64_t b, uint8_t *blk)                 \
    {                                                                                                          \
        numla_qblock_p16_get_b32_(NUMLA_QBLOCK_##T, panel, c, b, blk);                                         \
    }
NUMLA_QBLOCK_P16_B32_(Q8_0, q8_0)
NUMLA_QBLOCK_P16_B32_(Q4_0, q4_0)
NUMLA_QBLOCK_P16_B32_(Q5_0, q5_0)
NUMLA_QBLOCK_P16_B32_(IQ4_NL, iq4_nl)
NUMLA_QBLOCK_P16_B32_(Q5_1, q5_1)
#define NUMLA_QBLOCK_P16_PIECE_(NAME, SB, PUT, GET)                                                            \
    void numla_qblock_p16_put_##NAME##_(const uint8_t *blk, int c, int64_t b, uint8_t *panel)                 \
    {                                                                                                          \
        PUT(blk, c, panel + b * (SB));                                                                         \
    }                                                                                                          \
    void numla_qblock_p16_get_##NAME##_(const uint8_t *panel, int c, int64_t b, uint8_t *blk)                 \
    {                                                                                                          \
        GET(panel + b * (SB), c, blk);                                                                         \
    }
#define NUMLA_QBLOCK_P16_Q4K_PUT_(blk, c, piece) numla_qblock_p16_put_k4_(1, blk, c, piece)
#define NUMLA_QBLOCK_P16_Q4K_GET_(piece, c, blk) numla_qblock_p16_get_k4_(1, piece, c, blk)
#define NUMLA_QBLOCK_P16_IQ4_PUT_(blk, c, piece) numla_qblock_p16_put_k4_(0, blk, c, piece)
#define NUMLA_QBLOCK_P16_IQ4_GET_(piece, c, blk) numla_qblock_p16_get_k4_(0, piece, c, blk)
#define NUMLA_QBLOCK_P16_Q6_PUT_(blk, c, piece)                                                                \
    numla_qblock_p16_put_moves_(numla_qblock_p16_q6_k_move_, NUMLA_QBLOCK_P16_Q6_MOVES, blk, c, piece)
#define NUMLA_QBLOCK_P16_Q6_GET_(piece, c, blk)                                                                \
    numla_qblock_p16_get_moves_(numla_qblock_p16_q6_k_move_, NUMLA_QBLOCK_P16_Q6_MOVES, piece, c, blk)
#define NUMLA_QBLOCK_P16_Q2_PUT_(blk, c, piece)                                                                \
    numla_qblock_p16_put_moves_(numla_qblock_p16_q2_k_move_, NUMLA_QBLOCK_P16_Q2_MOVES, blk, c, piece)
#define NUMLA_QBLOCK_P16_Q2_GET_(piece, c, blk)                                                                \
    numla_qblock_p16_get_moves_(numla_qblock_p16_q2_k_move_, NUMLA_QBLOCK_P16_Q2_MOVES, piece, c, blk)
NUMLA_QBLOCK_P16_PIECE_(q4_k, NUMLA_QBLOCK_P16_SB_Q4K, NUMLA_QBLOCK_P16_Q4K_PUT_, NUMLA_QBLOCK_P16_Q4K_GET_)
NUMLA_QBLOCK_P16_PIECE_(iq4_xs, NUMLA_QBLOCK_P16_SB_IQ4, NUMLA_QBLOCK_P16_IQ4_PUT_, NUMLA_QBLOCK_P16_IQ4_GET_)
NUMLA_QBLOCK_P16_PIECE_(q6_k, NUMLA_QBLOCK_P16_SB_Q6K, NUMLA_QBLOCK_P16_Q6_PUT_, NUMLA_QBLOCK_P16_Q6_GET_)
NUMLA_QBLOCK_P16_PIECE_(q2_k, NUMLA_QBLOCK_P16_SB_Q2K, NUMLA_QBLOCK_P16_Q2_PUT_, NUMLA_QBLOCK_P16_Q2_GET_)
NUMLA_QBLOCK_P16_PIECE_(q3_k, NUMLA_QBLOCK_P16_SB_Q3K, numla_qblock_p16_put_q3_, numla_qblock_p16_get_q3_)
NUMLA_QBLOCK_P16_PIECE_(q5_k, NUMLA_QBLOCK_P16_SB_Q5K, numla_qblock_p16_put_q5k_, numla_qblock_p16_get_q5k_)

/* Panel p's 16 rows from the source (rows at or past n: zeros). */
static void numla_qblock_p16_pack_panel_(const numla_qblock_source *src, int64_t p, uint8_t *dst)
{
    const numla_qblock_type_row *trow = numla_qblock_type_row_get(src->type);
    const int64_t nb = src->k / trow->info.block;
    memset(dst, 0, (size_t)numla_qblock_p16_ld_(src->type, src->k));
    for (int c = 0; c < 16; c++) {
        const int64_t r = 16 * p + c;
        if (r >= src->n)
            break;
        const uint8_t *row = (const uint8_t *)src->data + r * src->ld;
        for (int64_t b = 0; b < nb; b++)
            trow->p16_put(row + b * trow->info.bytes, c, b, dst);
    }
}

numla_status numla_qblock_p16_pack_(const numla_qblock_source *src, void *dst, numla_qblock_weight *out)
{
    const int64_t np = (src->n + 15) / 16, ld = numla_qblock_p16_ld_(src->type, src->k);
    uint8_t *d = dst;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < np; p++)
        numla_qblock_p16_pack_panel_(src, p, d + p * ld);
    *out = (numla_qblock_weight){.type = src->type, .n = src->n, .k = src->k, .ld = ld, .q = d, .act = src->act,
                                 .layout = NUMLA_QBLOCK_LAYOUT_PANEL16};
    return NUMLA_STATUS_OK;
}

void numla_qblock_p16_block_(const numla_qblock_weight *w, int64_t r, int64_t b, uint8_t *out)
{
    numla_qblock_type_row_get(w->type)->p16_get(w->q + (r / 16) * w->ld, (int)(r % 16), b, out);
}

numla_status numla_qblock_row_blocks(const numla_qblock_weight *w, int64_t r, void *dst)
{
    if (!w || !w->q || !dst)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock row blocks: NULL %s", !dst ? "dst" : "weight");
    const numla_qblock_info *info = numla_qblock_info_get(w->type);
    if (!info || r < 0 || r >= w->n || (unsigned)w->layout >= NUMLA_QBLOCK_LAYOUT_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock row blocks: row %lld of a weight of %lld rows (type %d, layout %d)",
                   (long long)r, (long long)w->n, (int)w->type, (int)w->layout);
    const int64_t nb = w->k / info->block;
    if (w->layout == NUMLA_QBLOCK_LAYOUT_ROWS) {
        memcpy(dst, w->q + r * w->ld, (size_t)(nb * info->bytes));
        return NUMLA_STATUS_OK;
    }
    for (int64_t b = 0; b < nb; b++)
        numla_qblock_p16_block_(w, r, b, (uint8_t *)dst + b * info->bytes);
    return NUMLA_STATUS_OK;
}

numla_status numla_qblock_rows(const numla_qblock_weight *w, int64_t r0, int64_t r1, numla_qblock_weight *out)
{
    if (!w || !w->q || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock rows: NULL %s", !out ? "out" : "weight");
    if (r0 < 0 || r1 <= r0 || r1 > w->n)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock rows: rows [%lld, %lld) of a weight of %lld rows",
                   (long long)r0, (long long)r1, (long long)w->n);
    if (w->layout != NUMLA_QBLOCK_LAYOUT_ROWS)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "qblock rows: a slice of rows needs the ROWS layout (layout %d)",
                   (int)w->layout);
    *out = *w;
    out->q = w->q + r0 * w->ld;
    out->n = r1 - r0;
    return NUMLA_STATUS_OK;
}
