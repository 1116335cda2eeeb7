/* kernels/linear_internal.h — private to the linear kernels: the packed weight layout, the
 * per-ISA entry points of the dispatch table in kernels/linear.c (the blocking:
 * kernels/blocking.h). Nothing outside kernels/linear*.c and kernels/{ref,x86}/linear_*.c includes it.
 *
 * Packed layout (one layout for every ISA, so a weight packed at any level runs at every level, and
 * the tests compare levels on identical bytes):
 *
 *   W (N, K) is cut into panels of NUMLA_LINEAR_NR = 16 consecutive rows (output features);
 *   the last panel is zero-padded to 16 rows. Panels are stored one after another, so the
 *   threads that split N each stream one contiguous range of memory.
 *
 *   bf16: Kp = K rounded up to even (zero-padded). Inside a panel, for each k-pair kk the 16 rows
 *         contribute (w[n][2kk], w[n][2kk+1]) as one 32-bit pair: 64 bytes per kk, exactly the
 *         B operand of one vdpbf16ps. panel stride = Kp * 16 elements (a multiple of 64 bytes).
 *            panel[p][kk][j][e] = W[16p + j][2kk + e]        (p, Kp/2, 16, 2)
 *   f32:  inside a panel, for each k the 16 rows as one 64-byte vector. panel stride = K * 16.
 *            panel[p][k][j]     = W[16p + j][k]              (p, K, 16)
 */
#ifndef NUMLA_KERNELS_LINEAR_INTERNAL_H
#define NUMLA_KERNELS_LINEAR_INTERNAL_H

#include "kernels/linear.h"
#include "kernels/blocking.h"

/* The panel's rows (the layout above); the blocking of the variants: kernels/blocking.h. */
enum {
    NUMLA_LINEAR_NR = 16,           /* rows of W per panel (one zmm of fp32 outputs) */
};

static inline int64_t numla_linear_panels(int64_t n) { return (n + NUMLA_LINEAR_NR - 1) / NUMLA_LINEAR_NR; }
static inline int64_t numla_linear_kp(int64_t k) { return (k + 1) & ~(int64_t)1; }
/* Elements per packed panel. */
static inline size_t numla_linear_panel_elems(const numla_linear_weight *w)
{
    return (size_t)NUMLA_LINEAR_NR *
           (size_t)(w->dtype == NUMLA_DTYPE_BF16 ? numla_linear_kp(w->k) : w->k);
}

/* Split [0, total) into nth near-equal ranges; range of thread ith. */
static inline void numla_linear_split(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t q = total / nth, r = total % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

typedef void (*numla_linear_forward_fn)(const numla_linear_weight *w, int64_t m, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int accumulate,
                                        void *workspace);
typedef size_t (*numla_linear_workspace_fn)(const numla_linear_weight *w, int64_t m,
                                            int num_threads);

/* A variant of the table in kernels/linear.c: the head (kernels/isa.h: name, CPU needs, and
 * applies(), asked about the weight and M) and its functions. */
typedef struct numla_linear_impl {
    numla_variant v;
    numla_linear_forward_fn forward;
    numla_linear_workspace_fn workspace; /* NULL: needs none */
} numla_linear_impl;

/* Arguments are validated by kernels/linear.c before these run. */
void numla_linear_forward_ref(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *workspace);
void numla_linear_forward_avx2(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace);
void numla_linear_forward_avx512(const numla_linear_weight *w, int64_t m, const float *x,
                                 int64_t ldx, float *y, int64_t ldy, int accumulate, void *workspace);
size_t numla_linear_workspace_avx512(const numla_linear_weight *w, int64_t m, int num_threads);
/* M > NUMLA_LINEAR_AVX512_MR: x packed in blocks of MR rows, k-major — xp (ceil(M/MR), K, MR) —
 * so a tile's broadcasts read one sequential stream instead of MR rows 4 KiB apart that all map
 * to the same L1 set. Thread ith of nth packs its share of the blocks. */
void numla_linear_avx512_pack_x(int64_t m, int64_t k, const float *x, int64_t ldx, float *xp, int ith,
                                int nth);
/* One thread's share of the avx512 widen+FMA path: panels [p0, p1);
 * xp: x packed by numla_linear_avx512_pack_x, or NULL to read x (M, ldx) directly (M <= MR). */
void numla_linear_avx512_panels(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                                const float *xp, float *y, int64_t ldy, int accumulate, int64_t p0,
                                int64_t p1);
/* The vdpbf16ps GEMM (kernels/x86/linear_avx512bf16.c): bf16 weights with
 * NUMLA_LINEAR_ACT_BF16, every M; x packed into the workspace as bf16 pairs. */
int numla_linear_avx512bf16_applies(const numla_linear_weight *w, int64_t m);
size_t numla_linear_workspace_avx512bf16(const numla_linear_weight *w, int64_t m, int num_threads);
void numla_linear_forward_avx512bf16(const numla_linear_weight *w, int64_t m, const float *x,
                                     int64_t ldx, float *y, int64_t ldy, int accumulate,
                                     void *workspace);
/* The AMX tile GEMM (kernels/x86/linear_amx.c): whether it takes this weight and M (bf16,
 * M >= NUMLA_LINEAR_AMX_MIN_M, K % 32 == 0; the tiles themselves are the amx entry's needs,
 * NUMLA_CPU_AMX_BF16), its workspace (any alignment) and the GEMM itself. */
int numla_linear_amx_applies(const numla_linear_weight *w, int64_t m);
size_t numla_linear_workspace_amx(const numla_linear_weight *w, int64_t m, int num_threads);
void numla_linear_forward_amx(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *workspace);

#endif
