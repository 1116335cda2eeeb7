/* kernels/x86/amx_tiles_amx.c — the tile configuration every numla AMX kernel uses (built with
 * the AMX flags; see kernels/x86/amx.h). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/x86/amx.h"

typedef struct numla_amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} numla_amx_tilecfg;

void numla_amx_tiles_begin(void)
{
    /* A static object: gcc 12 does not see _tile_loadconfig read its operand and dropped the
     * stores filling a stack copy. */
    static const numla_amx_tilecfg cfg __attribute__((aligned(64))) = {
        .palette = 1,
        .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
        .rows = {16, 16, 16, 16, 16, 16, 16, 16},
    };
    _tile_loadconfig(&cfg);
}

void numla_amx_tiles_end(void) { _tile_release(); }
