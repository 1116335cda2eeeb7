/* kernels/x86/amx_tiles_amx.c — the tile configuration every numla AMX kernel uses (built with
 * the AMX flags; see kernels/x86/amx.h). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/x86/amx.h"

/* A static object: gcc 12 does not see _tile_loadconfig read its operand and dropped the
 * stores filling a stack copy. */
const numla_amx_tilecfg numla_amx_tile_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void numla_amx_tiles_begin(void) { _tile_loadconfig(&numla_amx_tile_config); }

void numla_amx_tiles_end(void) { _tile_release(); }
