/* bench/bench_stream_probe.h — private to bench/: the stream probe of `numla bench machine`
 * (loops in bench/stream_probe_amx.c, orders and timing in bench/bench_stream_probe.c, used by
 * bench/bench_machine.c and bench/bench_decode_kernel.c).
 *
 * Layout: the decode kernel's bf16 latent cache at block size 16, i.e. blocks of 16 rows of
 * 576 bf16 (1152 bytes), block b at base + order[b] · 18432 bytes, visited as 64-key tiles of
 * four blocks (tile t = blocks 4t .. 4t + 3), which is how kernels/x86/mla_attn_amx.c walks a
 * context. `order` is the identity (blocks in memory order) or a shuffle (what a block table
 * looks like once a server has run a while, and what bench decode-kernel uses).
 *
 * The questions (each loop is one thread's share, tiles [t0, t1)):
 *   - numla_bench_probe_vector(tile_groups = 0): AVX-512 loads of each block in order, with a
 *     software prefetch of the first line of the block after next. The best stream found for
 *     shuffled blocks.
 *   - numla_bench_probe_vector(tile_groups = 1): the same stream with 18 groups of 4 tile loads
 *     + 4 TDPBF16PS per tile, all on an L1-resident buffer (the work of Q·K's 18 slice steps
 *     without its memory). If tile loads waited for the loads before them to complete, this
 *     costs a memory latency per group; if not, next to nothing.
 *   - numla_bench_probe_tiles(prefetch_next = 0): the kernel's Q·K loop, whose strided tile
 *     loads are the memory stream.
 *   - numla_bench_probe_tiles(NUMLA_BENCH_PROBE_PREFETCH): the same with a software prefetch of
 *     the first line of each block of the next tile at the start of each tile.
 *   - numla_bench_probe_tiles(NUMLA_BENCH_PROBE_SLICE_MAJOR): the same loop over the same bytes
 *     read as if each block were stored slice-major, [18 slices][16 keys][32 bf16], so that
 *     every tile load is 1 KiB contiguous (stride 64) instead of 16 rows 1152 bytes apart. Not
 *     the cache layout (docs/design.md §3 fixes [block][key][576]); it measures what the strided
 *     access itself costs.
 * Each returns a value depending on the data so the loads are not optimised away: _vector the
 * sum of every visited byte read as fp32 (the interleaved tile products are of zeros); _tiles
 * the sum over g < 4 of tile row g's bf16 sum in block g of the last tile (q is all ones):
 * key row g, or in slice-major order the 64-byte pieces [1024 s + 64 g, + 64) of the block. */
#ifndef NUMLA_BENCH_BENCH_STREAM_PROBE_H
#define NUMLA_BENCH_BENCH_STREAM_PROBE_H

#include <stddef.h>
#include <stdint.h>

enum {
    NUMLA_BENCH_PROBE_PREFETCH = 1,    /* numla_bench_probe_tiles flags */
    NUMLA_BENCH_PROBE_SLICE_MAJOR = 2,
    NUMLA_BENCH_PROBE_ROW_BYTES = 576 * 2,
    NUMLA_BENCH_PROBE_BLOCK_BYTES = 16 * NUMLA_BENCH_PROBE_ROW_BYTES,
};

/* The block order over `bytes` of buffer (whole tiles only; *tiles set): identity, or a
 * fixed-seed shuffle. malloc'd; NULL when out of memory or under one tile. */
int64_t *numla_bench_probe_order(size_t bytes, int shuffled, int64_t *tiles);
/* GB/s of one loop on `threads` threads at once, each over its share of the tiles, best of
 * `reps`: vector != 0 runs numla_bench_probe_vector(arg), else numla_bench_probe_tiles(arg).
 * Reads buf only. AMX must be usable (numla_bench_peak_amx_ok). */
double numla_bench_probe_gbps(int threads, const char *buf, const int64_t *order, int64_t tiles,
                              int vector, int arg, int reps);

float numla_bench_probe_vector(const char *base, const int64_t *order, int64_t t0, int64_t t1,
                               int tile_groups);
float numla_bench_probe_tiles(const char *base, const int64_t *order, int64_t t0, int64_t t1,
                              int flags);

#endif
