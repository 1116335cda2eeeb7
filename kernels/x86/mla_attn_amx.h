/* kernels/x86/mla_attn_amx.h — AMX-BF16 Q·K scores for the avx512bf16 MLA attention kernel
 * (kernels/x86/mla_attn_amx.c, built with -mamx-tile -mamx-bf16). Private to the x86 MLA
 * kernels. */
#ifndef NUMLA_KERNELS_X86_MLA_ATTN_AMX_H
#define NUMLA_KERNELS_X86_MLA_ATTN_AMX_H

#include <stddef.h>
#include <stdint.h>

/* Whether the AMX path may run: the CPU has AMX-TILE and AMX-BF16, the OS granted the tile
 * state to this process (requested once, thread-safely, on first call) and NUMLA_MLA_AMX is
 * not "0". Read per call so tests can flip the environment variable between calls. */
int numla_mla_amx_enabled(void);

/* Configure the tiles for numla_mla_qk_amx on this thread (once per chunk), and release them. */
void numla_mla_amx_begin(void);
void numla_mla_amx_end(void);

/* S[t][r] (t < nt <= 64, 16 lanes per key) = Σ_j pair_j(q_r) · pair_j(row t), unscaled.
 * qv: (w / 2, 16) bf16 pairs of q, rows past the item's zeroed; rows[t]: bf16 cache rows of w
 * elements (w % 32 == 0); stage: 64·w bf16 of scratch, used when 16 consecutive keys are not
 * contiguous rows of one block. */
void numla_mla_qk_amx(const uint32_t *qv, int64_t w, const char *const *rows, int64_t nt,
                      float *S, uint16_t *stage);

#endif
