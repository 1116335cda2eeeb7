/* tests/unit/kernels/amx_probe.h — one AMX tile instruction on operands in memory, written once
 * and built twice: by amx_probe_amx.c with the real tile intrinsics, and by test_amx_hardware.c
 * over the tile emulator (tests/support/amx_emulate.h), so the suite amx_hardware can run the
 * same instruction on the hardware and on the emulator and compare the bits. */
#ifndef NUMLA_TESTS_UNIT_KERNELS_AMX_PROBE_H
#define NUMLA_TESTS_UNIT_KERNELS_AMX_PROBE_H

#include <stdint.h>
#include <string.h>

#include "kernels/x86/amx.h"

typedef enum amx_probe_op {
    AMX_PROBE_BF16PS, /* TDPBF16PS */
    AMX_PROBE_SSD,    /* TDPBSSD */
    AMX_PROBE_SUD,    /* TDPBSUD */
    AMX_PROBE_USD,    /* TDPBUSD */
    AMX_PROBE_UUD,    /* TDPBUUD */
    AMX_PROBE_OPS,
} amx_probe_op;

/* C (rows x colsb_c bytes) op= A (rows x colsb_a bytes) · B (colsb_a / 4 rows x colsb_c bytes),
 * every operand with a 64-byte row stride: tiles 0 (C), 1 (A), 2 (B) configured to exactly
 * these shapes (rows <= 16, colsb <= 64, multiples of 4), loaded, one product, C stored. A
 * file-scope configuration: gcc 12 drops the stores that fill a stack copy read only by
 * LDTILECFG (kernels/x86/amx_tiles_amx.c). Single-threaded callers only. */
static numla_amx_tilecfg amx_probe_cfg_ __attribute__((aligned(64)));

static inline void amx_probe_dp(amx_probe_op op, int rows, int colsb_c, int colsb_a, void *c, const void *a,
                                const void *b)
{
    memset(&amx_probe_cfg_, 0, sizeof amx_probe_cfg_);
    amx_probe_cfg_.palette = 1;
    amx_probe_cfg_.rows[0] = (uint8_t)rows, amx_probe_cfg_.colsb[0] = (uint16_t)colsb_c;
    amx_probe_cfg_.rows[1] = (uint8_t)rows, amx_probe_cfg_.colsb[1] = (uint16_t)colsb_a;
    amx_probe_cfg_.rows[2] = (uint8_t)(colsb_a / 4), amx_probe_cfg_.colsb[2] = (uint16_t)colsb_c;
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&amx_probe_cfg_);
    _tile_loadd(0, c, 64);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    switch (op) {
    case AMX_PROBE_BF16PS: _tile_dpbf16ps(0, 1, 2); break;
    case AMX_PROBE_SSD: _tile_dpbssd(0, 1, 2); break;
    case AMX_PROBE_SUD: _tile_dpbsud(0, 1, 2); break;
    case AMX_PROBE_USD: _tile_dpbusd(0, 1, 2); break;
    default: _tile_dpbuud(0, 1, 2); break;
    }
    _tile_stored(0, c, 64);
    _tile_release();
}

#endif
