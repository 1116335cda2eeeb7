/* bench/bench_decode_kernel.c — `numla bench decode-kernel`: the MLA decode kernel
 * (kernels/mla_attn.h) on DeepSeek shapes (Dc 512, Dr 64, bf16 cache and q, block 16, shuffled
 * block tables), reported against the roofline of this machine measured in the same run on the
 * same threads (docs/design.md §7): time = max(kv_bytes / read_BW, flops / peak).
 *
 * The caches of the long shapes would partly stay in a large LLC between repetitions, so every
 * shape gets enough independent copies of its cache to exceed twice the LLC (capped by memory)
 * and the repetitions rotate through them: each call reads its cache from DRAM, as a decode
 * step does when every layer has its own cache. One arena holds the stream arrays of the
 * machine figures and then the caches (filled once), so the slow first touch of a VM and the
 * cache fill are paid once per run.
 */
#include "bench/bench.h"
#include "bench/bench_peak.h"
#include "bench/bench_stream_probe.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "kernels/mla_attn.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DKB_DC = 512, DKB_DR = 64, DKB_ROW = DKB_DC + DKB_DR, DKB_BLOCK = 16 };

typedef struct dkb_shape {
    int32_t bs, seq_len, heads;
    int is_short; /* part of --short (scripts/demo) */
} dkb_shape;

static const dkb_shape dkb_shapes[] = {
    {1, 64000, 16, 0}, {1, 54321, 16, 0}, {1, 1243, 5, 1},
    {3, 1234, 16, 1},  {30, 2048, 16, 0}, {64, 128, 16, 1},
    /* all 128 heads of V2/V3 on one rank: 8 head blocks over the same cache rows */
    {1, 16384, 128, 0}, {4, 4096, 128, 0},
};

typedef struct dkb_opts {
    int json, is_short, threads;
    float q_scale; /* q values are uniform in [-q_scale, q_scale) */
    int io_f32;    /* q and out in fp32, as the engine passes them (engine/model/model.c) */
} dkb_opts;

typedef struct dkb_machine {
    double read_gbps, copy_gbps, peak_gflops;
    double tile_gbps; /* the AMX kernel's Q·K tile loads alone streaming shuffled blocks (the
                         stream probe, bench_stream_probe.h); 0 when the AMX path does not run */
} dkb_machine;

typedef struct dkb_result {
    const dkb_shape *shape;
    double ms, min_ms, gbps, gflops; /* measured */
    double kv_bytes, flops;          /* per call */
    double roofline_frac;            /* filled once the machine figures are final */
    double mem_frac;                 /* kv_bytes / read_BW over the median time: the bound
                                        when the tiles make the flops nearly free (AMX Q·K and
                                        P·V, kernels/x86/mla_attn_amx.c) */
    double tile_frac;                /* kv_bytes / tile_gbps over the median time: how close
                                        the kernel comes to its own Q·K tile loads streaming
                                        the cache with nothing else to do (0: no AMX) */
    int copies, reps;
    const char *bound;
} dkb_result;

static uint64_t dkb_hash(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* bf16 values uniform in [-amp, amp), from a hash of the index: parallel and reproducible. */
static void dkb_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float amp)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double u = (double)(dkb_hash(seed ^ (i * 0x632be59bd9b4e019ull)) >> 11) * 0x1.0p-53;
        p[i] = numla_f32_to_bf16(amp * (float)(2.0 * u - 1.0));
    }
}

/* Fill the whole arena with random bf16 once; every shape then uses it as its cache copies
 * (the stream passes left integer patterns that would read as NaN and subnormal bf16). A
 * 16 MiB random tile repeated keeps this at memcpy speed; copies being alike does not matter
 * to a kernel that reads each one from DRAM. */
static void dkb_fill_arena(char *arena, size_t bytes)
{
    const size_t tile = bytes < ((size_t)16 << 20) ? bytes : (size_t)16 << 20;
    dkb_fill_bf16((uint16_t *)arena, tile / sizeof(uint16_t), 2, 1.0f);
    const size_t ntiles = (bytes + tile - 1) / tile;
#pragma omp parallel for schedule(static)
    for (size_t i = 1; i < ntiles; i++) {
        size_t off = i * tile, n = bytes - off < tile ? bytes - off : tile;
        memcpy(arena + off, arena, n);
    }
}

static numla_status dkb_run_shape(numla_isa isa, const dkb_shape *s, const dkb_opts *o,
                                  char *arena, size_t arena_bytes, dkb_result *res)
{
    const int64_t B = s->bs, L = s->seq_len, H = s->heads;
    const int64_t blocks_per_seq = (L + DKB_BLOCK - 1) / DKB_BLOCK;
    const int64_t num_blocks = B * blocks_per_seq;
    const size_t copy_bytes = (size_t)num_blocks * DKB_BLOCK * DKB_ROW * sizeof(uint16_t);
    if (copy_bytes > arena_bytes)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench decode-kernel: a (%d, %d, %d) cache needs %zu bytes, arena has %zu",
                   s->bs, s->seq_len, s->heads, copy_bytes, arena_bytes);
    /* > 2x LLC of caches in total, as many as the arena holds at most. */
    const double want = 2.2 * (double)numla_bench_llc_bytes();
    int64_t copies = (int64_t)ceil(want / (double)copy_bytes);
    if (copies < 1)
        copies = 1;
    if ((size_t)copies * copy_bytes > arena_bytes)
        copies = (int64_t)(arena_bytes / copy_bytes);

    numla_status st = NUMLA_STATUS_OK;
    int32_t *table = malloc((size_t)num_blocks * sizeof *table);
    int32_t *seq_lens = malloc((size_t)B * sizeof *seq_lens);
    const size_t io_size = o->io_f32 ? sizeof(float) : sizeof(uint16_t);
    uint16_t *q = malloc((size_t)(B * H * DKB_ROW) * io_size);
    void *out = malloc((size_t)(B * H * DKB_DC) * io_size);
    double *times = NULL;
    void *ws = NULL;
    if (!table || !seq_lens || !q || !out) {
        st = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                             "bench decode-kernel: out of memory for tables and q");
        goto done;
    }
    /* Shuffled block table: a random permutation of every block of the pool. */
    for (int64_t i = 0; i < num_blocks; i++)
        table[i] = (int32_t)i;
    for (int64_t i = num_blocks - 1; i > 0; i--) {
        int64_t j = (int64_t)(dkb_hash(0x5eed + (uint64_t)i) % (uint64_t)(i + 1));
        int32_t x = table[i];
        table[i] = table[j];
        table[j] = x;
    }
    for (int64_t b = 0; b < B; b++)
        seq_lens[b] = (int32_t)L;
    dkb_fill_bf16(q, (size_t)(B * H * DKB_ROW), 1, o->q_scale);
    if (o->io_f32) /* the same values, widened in place from the back */
        for (int64_t i = B * H * DKB_ROW - 1; i >= 0; i--)
            ((float *)(void *)q)[i] = numla_bf16_to_f32(q[i]);
    const numla_dtype io_dtype = o->io_f32 ? NUMLA_DTYPE_F32 : NUMLA_DTYPE_BF16;
    numla_mla_attn_args a = {
        .num_seqs = s->bs, .num_heads = s->heads, .kv_lora_rank = DKB_DC, .rope_dim = DKB_DR,
        .block_size = DKB_BLOCK, .num_blocks = num_blocks, .max_blocks_per_seq = (int32_t)blocks_per_seq,
        .q = q, .q_dtype = io_dtype, .kv_cache = arena, .kv_dtype = NUMLA_DTYPE_BF16,
        .block_tables = table, .seq_lens = seq_lens, .query_start_loc = NULL, .causal = 0,
        .scale = 0.1147f, /* DeepSeek-V2-Lite, docs/design.md §5 */
        .out = out, .out_dtype = io_dtype, .lse = NULL,
    };
    const size_t ws_bytes = numla_mla_attn_workspace_size(isa, &a, o->threads);
    ws = malloc(ws_bytes ? ws_bytes : 1);
    const int max_reps = 1000, min_reps = o->is_short ? 5 : 7;
    const double budget = o->is_short ? 0.3 : 1.5; /* seconds of timed calls per shape */
    times = malloc(max_reps * sizeof *times);
    if (!ws || !times) {
        st = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                             "bench decode-kernel: out of memory for %zu bytes of workspace", ws_bytes);
        goto done;
    }
    NUMLA_CHECK_GOTO(numla_mla_attn(isa, &a, ws, ws_bytes), st, done); /* warm-up, checks args */
    int reps = 0;
    double spent = 0;
    while (reps < max_reps && (reps < min_reps || spent < budget)) {
        a.kv_cache = arena + (size_t)((reps + 1) % copies) * copy_bytes;
        double t0 = numla_now_s();
        NUMLA_CHECK_GOTO(numla_mla_attn(isa, &a, ws, ws_bytes), st, done);
        times[reps] = numla_now_s() - t0;
        spent += times[reps++];
    }
    int finite = 1;
    for (int64_t i = 0; i < B * H * DKB_DC; i++)
        finite &= isfinite(o->io_f32 ? ((const float *)out)[i]
                                     : numla_bf16_to_f32(((const uint16_t *)out)[i])) != 0;
    if (!finite)
        fprintf(stderr, "numla bench decode-kernel: warning: (%d, %d, %d) produced non-finite output\n",
                s->bs, s->seq_len, s->heads);

    const double t = numla_bench_median(times, reps);
    const double kv_bytes = (double)B * (double)L * DKB_ROW * 2;
    const double io_bytes = kv_bytes + (double)(B * H * DKB_ROW + B * H * DKB_DC) * (double)io_size;
    const double flops = 2.0 * (double)B * (double)H * (double)L * (DKB_ROW + DKB_DC);
    res->shape = s;
    res->kv_bytes = kv_bytes;
    res->flops = flops;
    res->ms = t * 1e3;
    res->min_ms = numla_bench_percentile(times, reps, 0) * 1e3; /* a busy machine inflates the median */
    res->gbps = io_bytes / t * 1e-9;
    res->gflops = flops / t * 1e-9;
    res->copies = (int)copies;
    res->reps = reps;
done:
    free(times);
    free(ws);
    free(out);
    free(q);
    free(seq_lens);
    free(table);
    return st;
}

/* Roofline time max(kv_bytes / read_BW, flops / peak) over the median time (docs/design.md §7). */
static void dkb_roofline(dkb_result *r, const dkb_machine *m)
{
    const double t_mem = m->read_gbps > 0 ? r->kv_bytes / (m->read_gbps * 1e9) : 0;
    const double t_cmp = m->peak_gflops > 0 ? r->flops / (m->peak_gflops * 1e9) : 0;
    r->roofline_frac = (t_mem > t_cmp ? t_mem : t_cmp) / (r->ms * 1e-3);
    r->mem_frac = t_mem / (r->ms * 1e-3);
    r->tile_frac = m->tile_gbps > 0 ? r->kv_bytes / (m->tile_gbps * 1e9) / (r->ms * 1e-3) : 0;
    r->bound = t_mem >= t_cmp ? "memory" : "compute";
}

static int dkb_usage(FILE *f)
{
    fprintf(f, "usage: numla bench decode-kernel [--json] [--short] [--threads N] [--q-scale S] [--io f32]\n"
               "  MLA decode kernel (kernels/mla_attn.h) vs this machine's roofline, measured in\n"
               "  the same run. ISA from NUMLA_ISA (default: best supported).\n"
               "  --json      one JSON object per shape on stdout (headers go to stderr)\n"
               "  --short     small shapes only (seconds; used by scripts/demo)\n"
               "  --threads N OpenMP threads for the kernel and the machine figures\n"
               "  --q-scale S q uniform in [-S, S) (default 1: scores of std ~1, a flat softmax;\n"
               "              ~30 gives a peaked one whose tiny weights are fp32 subnormals)\n"
               "  --io f32    q and out in fp32, as the engine passes them (default bf16)\n");
    return f == stderr ? 2 : 0;
}

static int numla_bench_decode_kernel_main(int argc, char **argv)
{
    dkb_opts o = {0, 0, omp_get_max_threads(), 1.0f, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o.json = 1;
        } else if (!strcmp(argv[i], "--short")) {
            o.is_short = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 4096) {
                fprintf(stderr, "numla bench decode-kernel: --threads wants a count >= 1, got '%s'\n", argv[i]);
                return 2;
            }
            o.threads = (int)n;
        } else if (!strcmp(argv[i], "--q-scale") && i + 1 < argc) {
            char *end;
            o.q_scale = strtof(argv[++i], &end);
            if (*end || !(o.q_scale > 0 && o.q_scale < 1e6f)) {
                fprintf(stderr, "numla bench decode-kernel: --q-scale wants a positive number, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--io") && i + 1 < argc) {
            ++i;
            if (strcmp(argv[i], "f32") && strcmp(argv[i], "bf16")) {
                fprintf(stderr, "numla bench decode-kernel: --io wants f32 or bf16, got '%s'\n", argv[i]);
                return 2;
            }
            o.io_f32 = !strcmp(argv[i], "f32");
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            return dkb_usage(stdout);
        } else {
            fprintf(stderr, "numla bench decode-kernel: unknown option '%s'\n", argv[i]);
            return dkb_usage(stderr);
        }
    }
    omp_set_num_threads(o.threads); /* the kernel sizes its team from omp_get_max_threads() */
    numla_settings set;
    if (numla_settings_load(&set) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla bench decode-kernel: %s\n", numla_error_message());
        return 1;
    }
    /* the level the engine's MLA attention would run at (NUMLA_MLA_AMX=0: below amx) */
    const numla_isa isa = numla_model_options_level(&set.kernels, NUMLA_MODEL_KERNELS_MLA);
    FILE *info = o.json ? stderr : stdout;
    const size_t arena_bytes = numla_bench_stream_bytes();
    char *arena = numla_bench_alloc(arena_bytes);
    if (!arena) {
        fprintf(stderr, "numla bench decode-kernel: cannot map %zu bytes\n", arena_bytes);
        return 1;
    }
    fprintf(info, "numla bench decode-kernel: isa %s (%s), %d threads; %s q/out, bf16 kv, block %d, Dc %d, Dr %d, q-scale %g\n",
            numla_isa_name(isa), numla_uarch_name(set.kernels.uarch), o.threads, o.io_f32 ? "fp32" : "bf16", DKB_BLOCK, DKB_DC, DKB_DR, o.q_scale);
    fflush(info);
    /* Machine figures: best of two windows, before and after the kernel timings, so one
     * burst of other jobs on a shared machine cannot set the roofline alone. */
    const int mreps = o.is_short ? 2 : 3;
    double t_phase = numla_now_s();
    dkb_machine m;
    m.read_gbps = numla_bench_read_gbps_in(o.threads, arena, arena_bytes, mreps);
    m.copy_gbps = numla_bench_copy_gbps_in(o.threads, arena, arena_bytes, mreps);
    /* ~20 ms a rep: many reps are cheap. */
    m.peak_gflops = numla_bench_peak_gflops(isa, o.threads, 20);
    NUMLA_DEBUG("bench decode-kernel: machine figures took %.2f s", numla_now_s() - t_phase);
    t_phase = numla_now_s();
    dkb_fill_arena(arena, arena_bytes);
    NUMLA_DEBUG("bench decode-kernel: cache fill took %.2f s", numla_now_s() - t_phase);
    m.tile_gbps = 0;
    if (isa == NUMLA_ISA_AMX && numla_bench_peak_amx_ok()) {
        int64_t tiles = 0;
        int64_t *order = numla_bench_probe_order(arena_bytes, 1, &tiles);
        if (order)
            m.tile_gbps = numla_bench_probe_gbps(o.threads, arena, order, tiles, 0, 0, mreps);
        free(order);
    }

    enum { NSHAPES = sizeof dkb_shapes / sizeof dkb_shapes[0] };
    dkb_result res[NSHAPES];
    int nres = 0, rc = 0;
    for (int i = 0; i < NSHAPES; i++) {
        const dkb_shape *s = &dkb_shapes[i];
        if (o.is_short && !s->is_short)
            continue;
        dkb_result r = {0};
        t_phase = numla_now_s();
        if (dkb_run_shape(isa, s, &o, arena, arena_bytes, &r) != NUMLA_STATUS_OK) {
            fprintf(stderr, "numla bench decode-kernel: (%d, %d, %d): %s\n%s", s->bs, s->seq_len,
                    s->heads, numla_error_message(), numla_error_trace());
            rc = 1;
            continue;
        }
        res[nres++] = r;
        NUMLA_DEBUG("bench decode-kernel: (%d, %d, %d) took %.2f s", s->bs, s->seq_len, s->heads,
                    numla_now_s() - t_phase);
    }
    t_phase = numla_now_s();

    double g = numla_bench_read_gbps_in(o.threads, arena, arena_bytes, mreps);
    m.read_gbps = g > m.read_gbps ? g : m.read_gbps;
    g = numla_bench_peak_gflops(isa, o.threads, 20);
    m.peak_gflops = g > m.peak_gflops ? g : m.peak_gflops;
    NUMLA_DEBUG("bench decode-kernel: second window of machine figures took %.2f s",
                numla_now_s() - t_phase);
    fprintf(info, "machine: read %.2f GB/s, copy %.2f GB/s (read+write), peak %.1f GFLOP/s (%s), "
                  "LLC %.0f MiB, stream arrays %.2f GiB\n",
            m.read_gbps, m.copy_gbps, m.peak_gflops,
            isa >= NUMLA_ISA_AVX512BF16 ? "max of vdpbf16ps and fp32 FMA" : isa == NUMLA_ISA_REF ? "scalar" : "fp32 FMA",
            (double)numla_bench_llc_bytes() / (1 << 20), (double)arena_bytes / (1 << 30));
    if (m.tile_gbps > 0)
        fprintf(info, "AMX path: its Q·K tile loads alone stream shuffled 16-row blocks at %.2f GB/s "
                      "(%.2f of read; bench machine's stream probe, docs/decode.md); tile_frac = kv "
                      "bytes per second over that\n",
                m.tile_gbps, m.read_gbps > 0 ? m.tile_gbps / m.read_gbps : 0.0);
    if (!o.json)
        printf("%4s %7s %4s %6s %5s %10s %10s %8s %9s %9s %11s %8s %13s %8s %9s %s\n", "bs", "seq_len", "heads",
               "copies", "reps", "ms", "min_ms", "gbps", "copy_gbps", "read_gbps", "peak_gflops", "gflops",
               "roofline_frac", "mem_frac", "tile_frac", "bound");
    for (int i = 0; i < nres; i++) {
        dkb_result *r = &res[i];
        const dkb_shape *s = r->shape;
        dkb_roofline(r, &m);
        if (o.json)
            printf("{\"bench\":\"decode-kernel\",\"bs\":%d,\"seq_len\":%d,\"heads\":%d,\"block_size\":%d,"
                   "\"kv_lora_rank\":%d,\"rope_dim\":%d,\"kv_dtype\":\"bf16\",\"q_dtype\":\"%s\","
                   "\"out_dtype\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"ms\":%.4f,\"min_ms\":%.4f,\"gbps\":%.3f,"
                   "\"copy_gbps\":%.3f,\"read_gbps\":%.3f,\"peak_gflops\":%.2f,\"gflops\":%.3f,"
                   "\"roofline_frac\":%.4f,\"mem_frac\":%.4f,\"tile_gbps\":%.3f,\"tile_frac\":%.4f,"
                   "\"bound\":\"%s\",\"kv_copies\":%d,\"reps\":%d,\"q_scale\":%g}\n",
                   s->bs, s->seq_len, s->heads, DKB_BLOCK, DKB_DC, DKB_DR, o.io_f32 ? "f32" : "bf16",
                   o.io_f32 ? "f32" : "bf16", numla_isa_name(isa), o.threads, r->ms, r->min_ms, r->gbps, m.copy_gbps, m.read_gbps, m.peak_gflops,
                   r->gflops, r->roofline_frac, r->mem_frac, m.tile_gbps, r->tile_frac, r->bound,
                   r->copies, r->reps, o.q_scale);
        else
            printf("%4d %7d %5d %6d %5d %10.3f %10.3f %8.2f %9.2f %9.2f %11.1f %8.2f %13.3f %8.3f %9.3f %s\n", s->bs,
                   s->seq_len, s->heads, r->copies, r->reps, r->ms, r->min_ms, r->gbps, m.copy_gbps,
                   m.read_gbps, m.peak_gflops, r->gflops, r->roofline_frac, r->mem_frac, r->tile_frac,
                   r->bound);
    }
    fflush(stdout);
    numla_bench_free(arena, arena_bytes);
    return rc;
}

NUMLA_CLI_COMMAND("bench decode-kernel", numla_bench_decode_kernel_main,
                  "MLA decode kernel vs the measured roofline [--json] [--short] [--threads N]")
