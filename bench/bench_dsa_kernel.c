/* bench/bench_dsa_kernel.c — `numla bench dsa-kernel`: DeepSeek Sparse Attention (kernels/dsa.h:
 * the indexer pass with fused top-k, then sparse MLA over the kept rows) against numla's dense
 * MLA (kernels/mla_attn.h) on the same paged latent cache in the same run (issue #26 targets:
 * decode >= 3x the dense rate at 32k context, >= 8x at 128k; the indexer pass at >= 0.8 of the
 * read bandwidth on the index-key bytes; a 16k-token prefill >= 2x dense).
 *
 * Rows: decode steps at 4k, 32k and 128k context (or --context N), and one causal prefill of
 * --prefill N tokens (16384; 0 skips it) on an empty context; each with the indexer on the bf16
 * index-key cache (transformers' scoring, the default) and on the I8 cache (the quantized
 * option), the two alternated inside every repetition. `overlap` is the share of the bf16
 * selection the I8 one keeps (on this benchmark's uniform random data). `index_frac` is the
 * indexer's rate on the index-key bytes (decode: every row once) over the measured read
 * bandwidth; `index_gflops` its multiply-add rate (2 · Hi · Di flops a scored key).
 *
 * Shapes: one sequence, 16 heads (one rank's share of 128), Dc 512 + Dr 64, indexer 64 x 128,
 * topk 2048, bf16 caches on shuffled 16-token blocks, fp32 attention q and out as the engine
 * passes them, a bf16 indexer q (the bf16 models' dtype).
 * The caches are filled once and reused across repetitions, so contexts whose caches fit the
 * LLC read them from cache: the ratios of the long contexts are the meaningful ones. They are
 * mapped as engine/model/kv_cache.c maps its pools (MADV_HUGEPAGE): on 4 KiB pages the
 * shuffled blocks cost a TLB miss each, which the engine does not pay.
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
#include <sys/mman.h>

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

/* A cache pool as kv_cache.c maps it (huge pages where the kernel grants them). */
static void *bdsa_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void bdsa_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

typedef struct bdsa_row {
    int32_t seq_len, tokens;                /* context, queries (1: decode) */
    double dense_ms, index_ms[2], sparse_ms; /* index: [0] bf16 cache, [1] i8 cache */
    double overlap;                          /* share of the bf16 selection the i8 one keeps */
} bdsa_row;

/* Shared size of the two selections, per query (both ascending). */
static double bdsa_overlap(const int32_t *a, const int32_t *b, const int32_t *cnt, int64_t T)
{
    double tot = 0;
    for (int64_t q = 0; q < T; q++) {
        const int32_t *x = a + q * BDSA_TOPK, *y = b + q * BDSA_TOPK, n = cnt[q];
        int32_t i = 0, j = 0, same = 0;
        while (i < n && j < n) {
            if (x[i] == y[j])
                same++, i++, j++;
            else if (x[i] < y[j])
                i++;
            else
                j++;
        }
        tot += n ? (double)same / n : 1.0;
    }
    return T ? tot / (double)T : 1.0;
}

/* A decode step at context L (T = 1) or a causal prefill of T = L tokens. */
static numla_status bdsa_run(numla_isa isa, int32_t L, int prefill, int reps, bdsa_row *r)
{
    const int32_t nb = (L + BDSA_BLOCK - 1) / BDSA_BLOCK;
    const int64_t T = prefill ? L : 1;
    const size_t krow8 = numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, BDSA_DI);
    uint64_t seed = 2026;
    const size_t kvb = (size_t)nb * BDSA_BLOCK * BDSA_W * 2, kcb = (size_t)nb * BDSA_BLOCK * BDSA_DI * 2,
                 kc8b = (size_t)nb * BDSA_BLOCK * krow8;
    uint16_t *kv = bdsa_map(kvb), *kc = bdsa_map(kcb);
    char *kc8 = bdsa_map(kc8b);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
    float *q = malloc(sizeof(float) * (size_t)T * BDSA_H * BDSA_W);
    uint16_t *iq = malloc(sizeof(uint16_t) * (size_t)T * BDSA_HI * BDSA_DI);
    float *w = malloc(sizeof(float) * (size_t)T * BDSA_HI);
    float *out = malloc(sizeof(float) * (size_t)T * BDSA_H * BDSA_DC);
    float *lse = malloc(sizeof(float) * (size_t)T * BDSA_H);
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)T * BDSA_TOPK);
    int32_t *ix8 = malloc(sizeof(int32_t) * (size_t)T * BDSA_TOPK);
    int32_t *cnt = malloc(sizeof(int32_t) * (size_t)T), lens[1] = {L}, qsl[2] = {0, L};
    numla_status st = NUMLA_STATUS_NO_MEMORY;
    void *ws = NULL;
    if (!kv || !kc || !kc8 || !table || !q || !iq || !w || !out || !lse || !ix || !ix8 || !cnt)
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
        float k[BDSA_DI];
        for (int d = 0; d < BDSA_W; d++)
            kv[i * BDSA_W + d] = numla_f32_to_bf16(bdsa_uniform(&s));
        for (int d = 0; d < BDSA_DI; d++) {
            kc[i * BDSA_DI + d] = numla_f32_to_bf16(bdsa_uniform(&s));
            k[d] = numla_bf16_to_f32(kc[i * BDSA_DI + d]);
        }
        numla_dsa_key_quantize(k, BDSA_DI, kc8 + (size_t)i * krow8); /* the same keys */
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        uint64_t s = 991 + (uint64_t)t;
        for (int i = 0; i < BDSA_H * BDSA_W; i++)
            q[t * BDSA_H * BDSA_W + i] = 0.3f * bdsa_uniform(&s);
        for (int i = 0; i < BDSA_HI * BDSA_DI; i++)
            iq[t * BDSA_HI * BDSA_DI + i] = numla_f32_to_bf16(bdsa_uniform(&s));
        for (int i = 0; i < BDSA_HI; i++)
            w[t * BDSA_HI + i] = bdsa_uniform(&s) / 8;
    }
    const int32_t *qs = prefill ? qsl : NULL;
    numla_mla_attn_args m = {.num_seqs = 1, .num_heads = BDSA_H, .kv_lora_rank = BDSA_DC,
                             .rope_dim = BDSA_DR, .block_size = BDSA_BLOCK, .num_blocks = nb,
                             .max_blocks_per_seq = nb, .q = q, .q_dtype = NUMLA_DTYPE_F32,
                             .kv_cache = kv, .kv_dtype = NUMLA_DTYPE_BF16, .block_tables = table,
                             .seq_lens = lens, .query_start_loc = qs, .causal = prefill,
                             .scale = 0.07f, .out = out, .out_dtype = NUMLA_DTYPE_F32, .lse = lse};
    numla_dsa_index_args ia = {.num_seqs = 1, .num_heads = BDSA_HI, .head_dim = BDSA_DI,
                               .block_size = BDSA_BLOCK, .num_blocks = nb, .max_blocks_per_seq = nb,
                               .topk = BDSA_TOPK, .q = iq, .q_dtype = NUMLA_DTYPE_BF16, .w = w,
                               .kcache = kc, .k_dtype = NUMLA_DTYPE_BF16, .block_tables = table,
                               .seq_lens = lens, .query_start_loc = qs, .causal = prefill,
                               .scale = 1.0f / sqrtf(BDSA_DI), .indices = ix, .counts = cnt};
    numla_dsa_index_args ia8 = ia;
    ia8.kcache = kc8, ia8.k_dtype = NUMLA_DTYPE_I8, ia8.indices = ix8;
    numla_dsa_attn_args sa = {.num_seqs = 1, .num_heads = BDSA_H, .kv_lora_rank = BDSA_DC,
                              .rope_dim = BDSA_DR, .block_size = BDSA_BLOCK, .num_blocks = nb,
                              .max_blocks_per_seq = nb, .index_stride = BDSA_TOPK, .q = q,
                              .q_dtype = NUMLA_DTYPE_F32, .kv_cache = kv,
                              .kv_dtype = NUMLA_DTYPE_BF16, .block_tables = table, .seq_lens = lens,
                              .query_start_loc = qs, .indices = ix, .counts = cnt, .scale = 0.07f,
                              .out = out, .out_dtype = NUMLA_DTYPE_F32, .lse = lse};
    const int nt = omp_get_max_threads();
    size_t wb = numla_mla_attn_workspace_size(isa, &m, nt);
    const size_t b2 = numla_dsa_index_workspace_size(isa, &ia, nt),
                 b3 = numla_dsa_index_workspace_size(isa, &ia8, nt),
                 b4 = numla_dsa_attn_workspace_size(isa, &sa, nt);
    wb = wb > b2 ? wb : b2;
    wb = wb > b3 ? wb : b3;
    wb = wb > b4 ? wb : b4;
    ws = malloc(wb);
    if (!ws)
        goto out;
    r->seq_len = L;
    r->tokens = (int32_t)T;
    r->dense_ms = r->index_ms[0] = r->index_ms[1] = r->sparse_ms = INFINITY;
    for (int rep = 0; rep < reps; rep++) {
        /* the two indexer variants alternate inside each repetition */
        double t0 = numla_now_s();
        NUMLA_CHECK(numla_mla_attn(isa, &m, ws, wb));
        double t1 = numla_now_s();
        NUMLA_CHECK(numla_dsa_index(isa, rep % 2 ? &ia8 : &ia, ws, wb));
        double t2 = numla_now_s();
        NUMLA_CHECK(numla_dsa_index(isa, rep % 2 ? &ia : &ia8, ws, wb));
        double t3 = numla_now_s();
        NUMLA_CHECK(numla_dsa_attn(isa, &sa, ws, wb));
        double t4 = numla_now_s();
        r->dense_ms = fmin(r->dense_ms, (t1 - t0) * 1e3);
        r->index_ms[rep % 2] = fmin(r->index_ms[rep % 2], (t2 - t1) * 1e3);
        r->index_ms[1 - rep % 2] = fmin(r->index_ms[1 - rep % 2], (t3 - t2) * 1e3);
        r->sparse_ms = fmin(r->sparse_ms, (t4 - t3) * 1e3);
    }
    r->overlap = bdsa_overlap(ix, ix8, cnt, T);
    st = NUMLA_STATUS_OK;
out:
    bdsa_unmap(kv, kvb), bdsa_unmap(kc, kcb), bdsa_unmap(kc8, kc8b);
    free(ws), free(table), free(q), free(iq), free(w), free(out);
    free(lse), free(ix), free(ix8), free(cnt);
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "bench dsa-kernel: no memory for %s %d", prefill ? "prefill" : "context", L);
    return st;
}

static void bdsa_print(int json, numla_isa isa, int threads, double read_gbps, const bdsa_row *r,
                       const char *variant, int v)
{
    const int decode = r->tokens == 1;
    const double speedup = r->dense_ms / (r->index_ms[v] + r->sparse_ms);
    /* scored keys: decode every visible one, a causal prefill T (T + 1) / 2 */
    const double keys = decode ? (double)r->seq_len : (double)r->tokens * (r->tokens + 1) / 2;
    const double gflops = keys * 2.0 * BDSA_HI * BDSA_DI / (r->index_ms[v] * 1e-3) / 1e9;
    const double row = (double)numla_dsa_key_row_bytes(v ? NUMLA_DTYPE_I8 : NUMLA_DTYPE_BF16, BDSA_DI);
    const double gbps = decode ? (double)r->seq_len * row / (r->index_ms[v] * 1e-3) / 1e9 : 0;
    const double frac = decode && read_gbps > 0 ? gbps / read_gbps : 0;
    const char *mode = decode ? "decode" : "prefill";
    if (json)
        printf("{\"bench\":\"dsa-kernel\",\"mode\":\"%s\",\"seq_len\":%d,\"tokens\":%d,"
               "\"index_keys\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"dense_ms\":%.4f,"
               "\"index_ms\":%.4f,\"sparse_ms\":%.4f,\"speedup\":%.3f,\"index_gflops\":%.2f,"
               "\"index_gbps\":%.3f,\"read_gbps\":%.3f,\"index_frac\":%.4f,\"overlap\":%.4f}\n",
               mode, r->seq_len, r->tokens, variant, numla_isa_name(isa), threads, r->dense_ms,
               r->index_ms[v], r->sparse_ms, speedup, gflops, gbps, read_gbps, frac,
               v ? r->overlap : 1.0);
    else
        printf("%-8s %8d %6s %11.3f %10.3f %10.3f %8.2f %12.1f %10.2f %10.3f %8.4f\n", mode,
               r->seq_len, variant, r->dense_ms, r->index_ms[v], r->sparse_ms, speedup, gflops,
               gbps, frac, v ? r->overlap : 1.0);
}

static int bdsa_main(int argc, char **argv)
{
    static const char *cmd = "numla bench dsa-kernel";
    int json = 0, reps = 4, threads = omp_get_max_threads(), one = 0, prefill = 16384;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--reps") || !strcmp(argv[i], "--threads") ||
                 !strcmp(argv[i], "--context") || !strcmp(argv[i], "--prefill")) {
            int *dst = !strcmp(argv[i], "--reps")      ? &reps
                       : !strcmp(argv[i], "--threads") ? &threads
                       : !strcmp(argv[i], "--prefill") ? &prefill
                                                       : &one;
            if (!numla_bench_int_opt(cmd, argc, argv, &i, dst))
                return 2;
        } else {
            fprintf(stderr,
                    "usage: %s [--json] [--context N] [--prefill N (16384, 0: none)] "
                    "[--reps R (4)] [--threads N]\n", cmd);
            return 2;
        }
    }
    if (reps < 1 || threads < 1 || one < 0 || prefill < 0) {
        fprintf(stderr, "%s: --reps, --threads must be >= 1, --context and --prefill >= 0\n", cmd);
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
                  "indexer %d x %d, topk %d, bf16 caches, block %d; best of %d\n",
            cmd, numla_isa_name(isa), threads, read_gbps, BDSA_H, BDSA_DC, BDSA_DR, BDSA_HI,
            BDSA_DI, BDSA_TOPK, BDSA_BLOCK, reps);
    static const int32_t ctx[3] = {4096, 32768, 131072};
    if (!json)
        printf("%-8s %8s %6s %11s %10s %10s %8s %12s %10s %10s %8s\n", "mode", "seq_len", "keys",
               "dense_ms", "index_ms", "sparse_ms", "speedup", "index_gflops", "index_gbps",
               "index_frac", "overlap");
    int rc = 0;
    const int nrows = (one ? 1 : 3) + (prefill > 0);
    for (int c = 0; c < nrows && !rc; c++) {
        const int pf = prefill > 0 && c == nrows - 1;
        const int32_t L = pf ? prefill : one ? one : ctx[c];
        bdsa_row r;
        if (bdsa_run(isa, L, pf, pf && reps > 2 ? 2 : reps, &r) != NUMLA_STATUS_OK) {
            fprintf(stderr, "%s: %s\n", cmd, numla_error_message());
            rc = 1;
            break;
        }
        bdsa_print(json, isa, threads, read_gbps, &r, "bf16", 0);
        bdsa_print(json, isa, threads, read_gbps, &r, "i8", 1);
        fflush(stdout);
    }
    return rc;
}

NUMLA_CLI_COMMAND("bench dsa-kernel", bdsa_main,
                  "sparse attention (DSA) decode and prefill vs dense MLA on the same cache, "
                  "bf16 and i8 index keys [--json] [--context N] [--prefill N] [--reps R] "
                  "[--threads N]")
