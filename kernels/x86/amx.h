/* kernels/x86/amx.h — AMX tile support shared by the x86 kernels that use it (MLA Q·K,
 * the linear GEMM): the one tile configuration they all use. Whether this process may run
 * tile instructions is a CPU feature bit, read once with the others (kernels/isa.c: CPUID and
 * the OS's permission for the tile state, arch_prctl ARCH_REQ_XCOMP_PERM, asked once):
 * numla_cpu_has(NUMLA_CPU_AMX_BF16), and NUMLA_CPU_AMX_INT8 for TDPBSSD and kin; a tile
 * variant names them in its entry's needs. Private to kernels/x86/ (and bench/peak_amx.c,
 * which measures the tile peak). */
#ifndef NUMLA_KERNELS_X86_AMX_H
#define NUMLA_KERNELS_X86_AMX_H

#include <stdint.h>

/* The tile configuration (palette 1, Intel SDM's 64-byte TILECFG layout): tiles 0..7 are 16
 * rows x 64 bytes, which serves bf16 (16 x 32) and int8 (16 x 64) operands alike and int32 or
 * fp32 accumulators (16 x 16). numla_amx_tiles_begin loads it; a kernel built for the tile
 * emulator of the tests loads it with _tile_loadconfig itself (kernels/x86/qlinear_amx.c). */
typedef struct numla_amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} numla_amx_tilecfg;
extern const numla_amx_tilecfg numla_amx_tile_config;

/* Configure tiles 0..7 as 16 rows x 64 bytes on the calling thread, and release them
 * (kernels/x86/amx_tiles_amx.c). Callable only when numla_cpu_has(NUMLA_CPU_AMX_BF16). */
void numla_amx_tiles_begin(void);
void numla_amx_tiles_end(void);
/* A kernel file built over the tile emulator (NUMLA_AMX_EMULATE, tests/CMakeLists.txt)
 * configures and releases the emulator's tiles instead. */
#ifdef NUMLA_AMX_EMULATE
#define numla_amx_tiles_begin() _tile_loadconfig(&numla_amx_tile_config)
#define numla_amx_tiles_end() _tile_release()
#endif

#endif
