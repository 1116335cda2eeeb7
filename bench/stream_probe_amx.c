/* bench/stream_probe_amx.c — per-thread loops of `numla bench machine`'s stream probe: how fast
 * one thread streams the decode kernel's cache layout from memory with AVX-512 loads and with
 * AMX tile loads, and what tile loads do to a stream running beside them (see
 * bench_stream_probe.h for the layout and the questions each loop answers). Built with the AMX
 * flags; the caller checks numla_bench_peak_amx_ok() first. */
#include "bench/bench_stream_probe.h"

#include <immintrin.h>
#include <stdint.h>

#include "kernels/x86/amx.h"

enum {
    ROW = NUMLA_BENCH_PROBE_ROW_BYTES,
    BLOCK = NUMLA_BENCH_PROBE_BLOCK_BYTES,
    SLICES = ROW / 64, /* 64-byte tile-row slices per cache row: 18 */
};

static inline const char *numla_probe_block_(const char *base, const int64_t *order, int64_t b)
{
    return base + (size_t)order[b] * BLOCK;
}

float numla_bench_probe_tiles(const char *base, const int64_t *order, int64_t t0, int64_t t1,
                              int flags)
{
    const int prefetch_next = flags & NUMLA_BENCH_PROBE_PREFETCH;
    /* slice s of tile row r: row-major, row r's bytes [64 s, 64 s + 64) (stride 1152); slice-
     * major, bytes [1024 s + 64 r, + 64) of the block (stride 64: 1 KiB contiguous) */
    const int slice_major = (flags & NUMLA_BENCH_PROBE_SLICE_MAJOR) != 0;
    const size_t sstep = slice_major ? 1024 : 64, stride = slice_major ? 64 : ROW;
    float out[4][256] __attribute__((aligned(64)));
    /* q = bf16 1.0 everywhere, so every score is its key row's sum (what the unit test checks) */
    uint16_t q[SLICES * 512] __attribute__((aligned(64)));
    for (int i = 0; i < SLICES * 512; i++)
        q[i] = 0x3f80;
    numla_amx_tiles_begin();
    for (int64_t t = t0; t < t1; t++) {
        const char *b0 = numla_probe_block_(base, order, 4 * t);
        const char *b1 = numla_probe_block_(base, order, 4 * t + 1);
        const char *b2 = numla_probe_block_(base, order, 4 * t + 2);
        const char *b3 = numla_probe_block_(base, order, 4 * t + 3);
        if (prefetch_next && t + 1 < t1)
            for (int g = 0; g < 4; g++)
                _mm_prefetch(numla_probe_block_(base, order, 4 * (t + 1) + g), _MM_HINT_T0);
        /* the Q·K loop of kernels/x86/mla_attn_amx.c: four 16-key groups interleaved */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int s = 0; s < SLICES; s++) {
            _tile_loadd(4, q + s * 512, 64);
            _tile_loadd(5, b0 + sstep * s, stride);
            _tile_dpbf16ps(0, 5, 4);
            _tile_loadd(6, b1 + sstep * s, stride);
            _tile_dpbf16ps(1, 6, 4);
            _tile_loadd(5, b2 + sstep * s, stride);
            _tile_dpbf16ps(2, 5, 4);
            _tile_loadd(6, b3 + sstep * s, stride);
            _tile_dpbf16ps(3, 6, 4);
        }
        _tile_stored(0, out[0], 64);
        _tile_stored(1, out[1], 64);
        _tile_stored(2, out[2], 64);
        _tile_stored(3, out[3], 64);
    }
    numla_amx_tiles_end();
    return out[0][0] + out[1][17] + out[2][34] + out[3][51]; /* key g, lane g of group g */
}

float numla_bench_probe_vector(const char *base, const int64_t *order, int64_t t0, int64_t t1,
                               int tile_groups)
{
    /* L1-resident operands for the interleaved tile loads (their values do not matter) */
    static __thread char hot[5 * 16 * 64] __attribute__((aligned(64)));
    float out[256] __attribute__((aligned(64)));
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int64_t nblocks = 4 * t1;
    if (tile_groups) {
        numla_amx_tiles_begin();
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    int64_t step = 0;
    for (int64_t t = t0; t < t1; t++)
        for (int g = 0; g < 4; g++) {
            const int64_t b = 4 * t + g;
            const char *p = numla_probe_block_(base, order, b);
            /* the first line of the block after next: starts its stream before it is needed */
            if (b + 2 < nblocks)
                _mm_prefetch(numla_probe_block_(base, order, b + 2), _MM_HINT_T0);
            for (int64_t off = 0; off < BLOCK; off += 128) {
                acc0 = _mm512_add_ps(acc0, _mm512_load_ps((const void *)(p + off)));
                acc1 = _mm512_add_ps(acc1, _mm512_load_ps((const void *)(p + off + 64)));
                /* 18 tile-load groups per tile (576 steps of 128 bytes), as many as Q·K's
                 * slice steps, spread evenly */
                if (tile_groups && ++step % 32 == 0) {
                    _tile_loadd(4, hot + 4096, 64);
                    _tile_loadd(5, hot, 64);
                    _tile_dpbf16ps(0, 5, 4);
                    _tile_loadd(6, hot + 1024, 64);
                    _tile_dpbf16ps(1, 6, 4);
                    _tile_loadd(5, hot + 2048, 64);
                    _tile_dpbf16ps(2, 5, 4);
                    _tile_loadd(6, hot + 3072, 64);
                    _tile_dpbf16ps(3, 6, 4);
                }
            }
        }
    if (tile_groups) {
        _tile_stored(0, out, 64);
        numla_amx_tiles_end();
    } else {
        out[0] = 0.0f;
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + out[0];
}
