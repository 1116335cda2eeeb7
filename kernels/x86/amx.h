/* kernels/x86/amx.h — AMX tile support shared by the x86 kernels that use it (MLA Q·K,
 * the linear GEMM): whether this process may run tile instructions, and the one tile
 * configuration they all use. Private to kernels/x86/ (and bench/peak_amx.c, which measures
 * the tile peak). */
#ifndef NUMLA_KERNELS_X86_AMX_H
#define NUMLA_KERNELS_X86_AMX_H

/* 1 when the CPU has AMX-TILE and AMX-BF16 and the OS granted this process the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM, requested once, thread-safely, on the first call). No
 * environment variable is read here: each kernel family has its own switch. (kernels/x86/amx.c) */
int numla_amx_usable(void);

/* Configure tiles 0..7 as 16 rows x 64 bytes on the calling thread, and release them
 * (kernels/x86/amx_tiles_amx.c). Callable only when numla_amx_usable(). */
void numla_amx_tiles_begin(void);
void numla_amx_tiles_end(void);

#endif
