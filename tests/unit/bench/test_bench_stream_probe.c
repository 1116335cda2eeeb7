/* Tests for the stream probe of `numla bench machine` (bench/bench_stream_probe.h): the block
 * orders are permutations, and each probe loop reads exactly the blocks of its tiles, in the
 * layout it claims, checked through the value it returns. Timings are not tested. */
#include "test_util.h"

#include "bench/bench_peak.h"
#include "bench/bench_stream_probe.h"
#include "kernels/isa.h"

#include <stdlib.h>
#include <string.h>

enum { BLK = NUMLA_BENCH_PROBE_BLOCK_BYTES, ROWB = NUMLA_BENCH_PROBE_ROW_BYTES, NTILES = 6 };

static void test_order(void)
{
    int64_t tiles = -1;
    int64_t *id = numla_bench_probe_order((size_t)BLK * 4 * NTILES + BLK * 3, 0, &tiles);
    int64_t *sh = numla_bench_probe_order((size_t)BLK * 4 * NTILES + BLK * 3, 1, &tiles);
    int64_t *sh2 = numla_bench_probe_order((size_t)BLK * 4 * NTILES, 1, &tiles);
    CU_ASSERT_EQUAL(tiles, NTILES); /* whole tiles only: the 3 spare blocks are dropped */
    CU_ASSERT_PTR_NOT_NULL_FATAL(id);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sh);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sh2);
    int seen[4 * NTILES] = {0}, moved = 0;
    for (int b = 0; b < 4 * NTILES; b++) {
        CU_ASSERT_EQUAL(id[b], b);
        CU_ASSERT_FATAL(sh[b] >= 0 && sh[b] < 4 * NTILES);
        seen[sh[b]]++;
        moved += sh[b] != b;
        CU_ASSERT_EQUAL(sh[b], sh2[b]); /* the same fixed-seed shuffle every call */
    }
    for (int b = 0; b < 4 * NTILES; b++)
        CU_ASSERT_EQUAL(seen[b], 1);
    CU_ASSERT(moved > 4 * NTILES / 2);
    free(id);
    free(sh);
    free(sh2);
    CU_ASSERT_PTR_NULL(numla_bench_probe_order((size_t)BLK * 3, 0, &tiles)); /* under a tile */
}

static int amx_ok(void)
{
    return numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_bench_peak_amx_ok();
}

/* Block b holds fp32 (b + 1) everywhere: the vector probe's sum over tiles [t0, t1) is
 * Σ (b + 1) · BLK / 4 over their blocks, whatever the order. */
static void test_vector_reads_each_block_once(void)
{
    if (!amx_ok()) /* the loops are built with the AMX flags; the probe runs only there */
        return;
    char *buf = aligned_alloc(64, (size_t)BLK * 4 * NTILES);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (int b = 0; b < 4 * NTILES; b++)
        for (int i = 0; i < BLK / 4; i++)
            ((float *)(void *)(buf + (size_t)b * BLK))[i] = (float)(b + 1);
    int64_t tiles;
    int64_t *sh = numla_bench_probe_order((size_t)BLK * 4 * NTILES, 1, &tiles);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sh);
    for (int groups = 0; groups < 2; groups++) {
        double want = 0;
        for (int b = 4; b < 4 * 5; b++) /* tiles 1..4 in order */
            want += (double)(sh[b] + 1) * (BLK / 4);
        CU_ASSERT_DOUBLE_EQUAL(numla_bench_probe_vector(buf, sh, 1, 5, groups), want, 0.0);
    }
    free(sh);
    free(buf);
}

/* Key row r of block b holds bf16 (b + r + 1) — small integers, exact — so with q all ones the
 * tile probe returns Σ_{g<4} 576 · (blk_g + g + 1) over the blocks blk_g of its last tile. */
static void test_tiles_read_the_rows(void)
{
    if (!amx_ok())
        return;
    char *buf = aligned_alloc(64, (size_t)BLK * 4 * NTILES);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (int b = 0; b < 4 * NTILES; b++)
        for (int r = 0; r < 16; r++) {
            float v = (float)(b + r + 1);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t *row = (uint16_t *)(void *)(buf + (size_t)b * BLK + (size_t)r * ROWB);
            for (int d = 0; d < ROWB / 2; d++)
                row[d] = (uint16_t)(u >> 16);
        }
    int64_t tiles;
    int64_t *sh = numla_bench_probe_order((size_t)BLK * 4 * NTILES, 1, &tiles);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sh);
    for (int pf = 0; pf < 2; pf++) {
        double want = 0;
        for (int g = 0; g < 4; g++)
            want += 576.0 * (double)(sh[4 * 3 + g] + g + 1); /* tiles 0..3: the last is 3 */
        CU_ASSERT_DOUBLE_EQUAL(numla_bench_probe_tiles(buf, sh, 0, 4, pf), want, 0.0);
    }
    /* Slice-major: tile row g's slice s is bf16 element e of [1024 s + 64 g, + 64), which lies
     * in key row (1024 s + 64 g + 2 e) / 1152 of the block. */
    double want = 0;
    for (int g = 0; g < 4; g++)
        for (int s = 0; s < 18; s++)
            for (int e = 0; e < 32; e++)
                want += (double)(sh[4 * 3 + g] + (1024 * s + 64 * g + 2 * e) / ROWB + 1);
    CU_ASSERT_DOUBLE_EQUAL(
        numla_bench_probe_tiles(buf, sh, 0, 4, NUMLA_BENCH_PROBE_SLICE_MAJOR), want, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_probe_tiles(buf, sh, 0, 4,
                                                   NUMLA_BENCH_PROBE_SLICE_MAJOR |
                                                       NUMLA_BENCH_PROBE_PREFETCH),
                           want, 0.0);
    free(sh);
    free(buf);
}

NUMLA_TEST_SUITE(bench_stream_probe, NULL, NULL, NUMLA_TEST(test_order),
                 NUMLA_TEST(test_vector_reads_each_block_once), NUMLA_TEST(test_tiles_read_the_rows))
