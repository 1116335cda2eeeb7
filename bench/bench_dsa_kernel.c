/* bench/bench_dsa_kernel.c — `numla bench dsa-kernel`: one decode step of DeepSeek Sparse
 * Attention (kernels/dsa.h: the indexer pass with fused top-k, then sparse MLA over the kept
 * rows) against numla's dense MLA decode (kernels/mla_attn.h) on the same paged latent cache in
 * the same run (issue #26 targets: >= 3x the dense rate at 32k context, >= 8x at 128k; the
 * indexer pass at >= 0.8 of the read bandwidth on the index-key bytes).
 *
 * Shapes: one sequence, 16 heads (one rank's share of 128), Dc 512 + Dr 64, indexer 64 x 128,
 * topk 2048, bf16 caches on shuffled 16-token blocks, fp32 attention q and out as the engine
 * passes them, a bf16 indexer q (the bf16 models' dtype).
 * The caches are filled once and reused across repetitions, so contexts whose caches fit the
 * LLC read them from cache: the ratios of the long contexts are the meaningful ones.
 */
#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "common/dtype.h"
#include "common/status.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "kernels/dsa.h"
#include "kernels/mla_attn.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BDSA_H = 16, BDSA_DC = 512, BDSA_DR = 64, BDSA_W = BDSA_DC + BDSA_DR, BDSA_HI = 64,
       BDSA_DI = 128, BDSA_TOPK = 2048, BDSA_BLOCK = 16 };

static uint64_t bdsa_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float bdsa_uniform(uint64_t *s) { return (float)((bdsa_rng(s) >> 40) * (1.0 / (1 << 24)) * 2 - 1); }

typedef struct bdsa_row {
    int32_t seq_len;
    double dense_ms, index_ms, sparse_ms, index_gbps;
} bdsa_row;

static numla_status bdsa_run(numla_isa isa, int32_t L, int reps, bdsa_row *r)
{
    const int32_t nb = (L + BDSA_BLOCK - 1) / BDSA_BLOCK;
    uint64_t seed = 2026;
    uint16_t *kv = malloc((size_t)nb * BDSA_BLOCK * BDSA_W * 2);
    uint16_t *kc = malloc((size_t)nb * BDSA_BLOCK * BDSA_DI * 2);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
    float *q = malloc(sizeof(float) * BDSA_H * BDSA_W);
    uint16_t *iq = malloc(sizeof(uint16_t) * BDSA_HI * BDSA_DI);
    float *w = malloc(sizeof(float) * BDSA_HI), *out = malloc(sizeof(float) * BDSA_H * BDSA_DC);
    float *lse = malloc(sizeof(float) * BDSA_H);
    int32_t ix[BDSA_TOPK], cnt[1], lens[1] = {L};
    numla_status st = NUMLA_STATUS_NO_MEMORY;
    void *ws = NULL;
    if (!kv || !kc || !table || !q || !iq || !w || !out || !lse)
        goto out;
    for (int32_t i = 0; i < nb; i++)
        table[i] = i;
    for (int32_t i = nb - 1; i > 0; i--) {
        int32_t j = (int32_t)(bdsa_rng(&seed) % (uint64_t)(i + 1)), t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < (int64_t)nb * BDSA_BLOCK; i++) {
        uint64_t s = 77 + (uint64_t)i;
        for (int d = 0; d < BDSA_W; d++)
            kv[i * BDSA_W + d] = numla_f32_to_bf16(bdsa_uniform(&s));
        for (int d = 0; d < BDSA_DI; d++)
            kc[i * BDSA_DI + d] = numla_f32_to_bf16(bdsa_uniform(&s));
    }
    for (int i = 0; i < BDSA_H * BDSA_W; i++)
        q[i] = 0.3f * bdsa_uniform(&seed);
    for (int i = 0; i < BDSA_HI * BDSA_DI; i++)
        iq[i] = numla_f32_to_bf16(bdsa_uniform(&seed));
    for (int i = 0; i < BDSA_HI; i++)
        w[i] = bdsa_uniform(&seed) / 8;
    numla_mla_attn_args m = {.num_seqs = 1, .num_heads = BDSA_H, .kv_lora_rank = BDSA_DC,
                             .rope_dim = BDSA_DR, .block_size = BDSA_BLOCK, .num_blocks = nb,
                             .max_blocks_per_seq = nb, .q = q, .q_dtype = NUMLA_DTYPE_F32,
                             .kv_cache = kv, .kv_dtype = NUMLA_DTYPE_BF16, .block_tables = table,
                             .seq_lens = lens, .scale = 0.07f, .out = out,
                             .out_dtype = NUMLA_DTYPE_F32, .lse = lse};
    numla_dsa_index_args ia = {.num_seqs = 1, .num_heads = BDSA_HI, .head_dim = BDSA_DI,
                               .block_size = BDSA_BLOCK, .num_blocks = nb, .max_blocks_per_seq = nb,
                               .topk = BDSA_TOPK, .q = iq, .q_dtype = NUMLA_DTYPE_BF16, .w = w,
                               .kcache = kc, .k_dtype = NUMLA_DTYPE_BF16, .block_tables = table,
                               .seq_lens = lens, .scale = 1.0f / sqrtf(BDSA_DI), .indices = ix,
                               .counts = cnt};
    numla_dsa_attn_args sa = {.num_seqs = 1, .num_heads = BDSA_H, .kv_lora_rank = BDSA_DC,
                              .rope_dim = BDSA_DR, .block_size = BDSA_BLOCK, .num_blocks = nb,
                              .max_blocks_per_seq = nb, .index_stride = BDSA_TOPK, .q = q,
                              .q_dtype = NUMLA_DTYPE_F32, .kv_cache = kv,
                              .kv_dtype = NUMLA_DTYPE_BF16, .block_tables = table, .seq_lens = lens,
                              .indices = ix, .counts = cnt, .scale = 0.07f, .out = out,
                              .out_dtype = NUMLA_DTYPE_F32, .lse = lse};
    const int nt = omp_get_max_threads();
    size_t b1 = numla_mla_attn_workspace_size(isa, &m, nt), b2 = numla_dsa_index_workspace_size(isa, &ia, nt);
    size_t b3 = numla_dsa_attn_workspace_size(isa, &sa, nt), wb = b1 > b2 ? b1 : b2;
    wb = wb > b3 ? wb : b3;
    ws = malloc(wb);
    if (!ws)
        goto out;
    r->seq_len = L;
    r->dense_ms = r->index_ms = r->sparse_ms = INFINITY;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = numla_now_s();
        NUMLA_CHECK(numla_mla_attn(isa, &m, ws, wb));
        double t1 = numla_now_s();
        NUMLA_CHECK(numla_dsa_index(isa, &ia, ws, wb));
        double t2 = numla_now_s();
        NUMLA_CHECK(numla_dsa_attn(isa, &sa, ws, wb));
        double t3 = numla_now_s();
        r->dense_ms = fmin(r->dense_ms, (t1 - t0) * 1e3);
        r->index_ms = fmin(r->index_ms, (t2 - t1) * 1e3);
        r->sparse_ms = fmin(r->sparse_ms, (t3 - t2) * 1e3);
    }
    r->index_gbps = (double)L * BDSA_DI * 2 / (r->index_ms * 1e-3) / 1e9;
    st = NUMLA_STATUS_OK;
out:
    free(ws), free(kv), free(kc), free(table), free(q), free(iq), free(w), free(out), free(lse);
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "bench dsa-kernel: no memory for context %d", L);
    return st;
}

static int bdsa_main(int argc, char **argv)
{
    static const char *cmd = "numla bench dsa-kernel";
    int json = 0, reps = 5, threads = omp_get_max_threads(), one = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--reps") || !strcmp(argv[i], "--threads") ||
                 !strcmp(argv[i], "--context")) {
            int *dst = !strcmp(argv[i], "--reps") ? &reps : !strcmp(argv[i], "--threads") ? &threads : &one;
            if (!numla_bench_int_opt(cmd, argc, argv, &i, dst))
                return 2;
        } else {
            fprintf(stderr, "usage: %s [--json] [--context N] [--reps R (5)] [--threads N]\n", cmd);
            return 2;
        }
    }
    if (reps < 1 || threads < 1 || one < 0) {
        fprintf(stderr, "%s: --reps, --threads must be >= 1 and --context >= 0\n", cmd);
        return 2;
    }
    omp_set_num_threads(threads);
    numla_settings set;
    if (numla_settings_load(&set) != NUMLA_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", cmd, numla_error_message());
        return 1;
    }
    const numla_isa isa = numla_model_options_level(&set.kernels, NUMLA_MODEL_KERNELS_MLA);
    const size_t sb = numla_bench_stream_bytes();
    void *arena = numla_bench_alloc(sb);
    double read_gbps = arena ? numla_bench_read_gbps_in(threads, arena, sb, 3) : 0;
    if (arena)
        numla_bench_free(arena, sb);
    FILE *info = json ? stderr : stdout;
    fprintf(info, "%s: isa %s, %d threads, read %.2f GB/s; 1 sequence, %d heads, %d + %d latent, "
                  "indexer %d x %d, topk %d, bf16 caches, block %d\n",
            cmd, numla_isa_name(isa), threads, read_gbps, BDSA_H, BDSA_DC, BDSA_DR, BDSA_HI,
            BDSA_DI, BDSA_TOPK, BDSA_BLOCK);
    static const int32_t ctx[3] = {4096, 32768, 131072};
    if (!json)
        printf("%8s %10s %10s %10s %9s %10s %10s\n", "seq_len", "dense_ms", "index_ms",
               "sparse_ms", "speedup", "index_gbps", "index_frac");
    int rc = 0;
    for (int c = 0; c < 3 || (one && c == 0); c++) {
        int32_t L = one ? one : ctx[c];
        bdsa_row r;
        if (bdsa_run(isa, L, reps, &r) != NUMLA_STATUS_OK) {
            fprintf(stderr, "%s: %s\n", cmd, numla_error_message());
            rc = 1;
            break;
        }
        const double speedup = r.dense_ms / (r.index_ms + r.sparse_ms);
        const double frac = read_gbps > 0 ? r.index_gbps / read_gbps : 0;
        if (json)
            printf("{\"bench\":\"dsa-kernel\",\"seq_len\":%d,\"isa\":\"%s\",\"threads\":%d,"
                   "\"dense_ms\":%.4f,\"index_ms\":%.4f,\"sparse_ms\":%.4f,\"speedup\":%.3f,"
                   "\"index_gbps\":%.3f,\"read_gbps\":%.3f,\"index_frac\":%.4f}\n",
                   L, numla_isa_name(isa), threads, r.dense_ms, r.index_ms, r.sparse_ms, speedup,
                   r.index_gbps, read_gbps, frac);
        else
            printf("%8d %10.3f %10.3f %10.3f %9.2f %10.2f %10.3f\n", L, r.dense_ms, r.index_ms,
                   r.sparse_ms, speedup, r.index_gbps, frac);
        if (one)
            break;
    }
    return rc;
}

NUMLA_CLI_COMMAND("bench dsa-kernel", bdsa_main,
                  "sparse attention (DSA) decode step vs dense MLA on the same cache "
                  "[--json] [--context N] [--reps R] [--threads N]")
