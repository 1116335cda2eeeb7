/* Tests for kernels/mla_attn: every supported ISA against an independent double-precision
 * reference (mla_attn_check.h states the tolerances), decode and multi-token, paged caches with
 * shuffled tables and NaN-filled unused rows, and the error paths. */
#include "mla_attn_check.h"
#include "kernels/mla_attn_internal.h"

#include <sys/mman.h>

#include "kernels/kv_write.h"

static const numla_dtype all_dt[3] = {NUMLA_DTYPE_BF16, NUMLA_DTYPE_F16, NUMLA_DTYPE_F32};
static const numla_dtype bf16_only[1] = {NUMLA_DTYPE_BF16};
static const numla_dtype bf16_f32[2] = {NUMLA_DTYPE_BF16, NUMLA_DTYPE_F32};

/* Small dims (tiny test models): every q/kv/out dtype combination; context 1, an exact
 * multiple of the block size, and ragged lengths in one batch. */
static void test_small_all_dtypes(void)
{
    static const int32_t lens[5] = {1, 32, 77, 300, 16};
    for (int qi = 0; qi < 3; qi++)
        for (int ki = 0; ki < 3; ki++) {
            mla_case c = {.B = 5, .H = 3, .Dc = 64, .Dr = 16, .bs = 16, .lens = lens,
                          .qt = all_dt[qi], .kvt = all_dt[ki], .seed = 11 + 3 * qi + ki};
            mla_check_case(&c, all_dt, 3, "small dtypes");
        }
}

static void test_block_sizes(void)
{
    static const int32_t lens[4] = {1, 256, 513, 37};
    static const int32_t bss[6] = {1, 2, 7, 64, 128, 256};
    for (int i = 0; i < 6; i++) {
        mla_case c = {.B = 4, .H = 16, .Dc = 64, .Dr = 16, .bs = bss[i], .lens = lens,
                      .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 100 + i};
        mla_check_case(&c, bf16_f32, 2, "block sizes");
    }
    mla_case c = {.B = 4, .H = 16, .Dc = 512, .Dr = 64, .bs = 1, .lens = lens,
                  .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 107};
    mla_check_case(&c, bf16_only, 1, "block size 1, Dc 512");
    /* Blocks the AMX path cannot load in place (rows staged) and exactly one tile high. */
    static const int32_t bss2[2] = {7, 16};
    for (int i = 0; i < 2; i++) {
        mla_case d = {.B = 4, .H = 16, .Dc = 512, .Dr = 64, .bs = bss2[i], .lens = lens,
                      .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 108 + i};
        mla_check_case(&d, bf16_f32, 2, "small blocks, Dc 512");
    }
}

static void test_many_heads(void)
{
    static const int32_t lens[2] = {700, 129};
    static const int32_t hs[3] = {22, 128, 1};
    for (int i = 0; i < 3; i++) {
        mla_case c = {.B = 2, .H = hs[i], .Dc = 512, .Dr = 64, .bs = 64, .lens = lens,
                      .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 200 + i};
        mla_check_case(&c, bf16_f32, 2, "heads");
    }
}

/* fp32 and fp16 caches at the real dims, with fp32 queries. */
static void test_wide_dtypes(void)
{
    static const int32_t lens[3] = {1000, 64, 3};
    for (int ki = 0; ki < 3; ki++) {
        mla_case c = {.B = 3, .H = 16, .Dc = 512, .Dr = 64, .bs = 32, .lens = lens,
                      .qt = NUMLA_DTYPE_F32, .kvt = all_dt[ki], .seed = 300 + ki};
        mla_check_case(&c, all_dt, 3, "wide dtypes");
    }
    /* fp16 q over a bf16 cache: on AMX its q is split into bf16 hi + lo like an fp32 one */
    mla_case d = {.B = 3, .H = 16, .Dc = 512, .Dr = 64, .bs = 32, .lens = lens,
                  .qt = NUMLA_DTYPE_F16, .kvt = NUMLA_DTYPE_BF16, .seed = 303};
    mla_check_case(&d, all_dt, 3, "fp16 q, bf16 cache");
}

/* The benchmark shapes (B, L, H), bf16 only. The two longest contexts and the 30-sequence batch
 * run under NUMLA_TEST_SWEEP=full (the default run has contexts past 128k at small dims below,
 * many sequences in the head-group cases, and mla_attn_slow at the real dims); the default run
 * has (1, 1243, 5) and (3, 1234, 16), a lean sweep (3, 1234, 16) only. */
static void test_main_shapes(void)
{
    static const int32_t shapes[5][3] = {{1, 64000, 16}, {1, 54321, 16}, {1, 1243, 5},
                                         {3, 1234, 16}, {30, 2048, 16}};
    int32_t lens[30];
    const int first = numla_test_sweep_full() ? 0 : numla_test_sweep_lean() ? 3 : 2;
    const int end = numla_test_sweep_full() ? 5 : 4;
    for (int s = first; s < end; s++) {
        for (int b = 0; b < shapes[s][0]; b++)
            lens[b] = shapes[s][1];
        mla_case c = {.B = shapes[s][0], .H = shapes[s][2], .Dc = 512, .Dr = 64, .bs = 64,
                      .lens = lens, .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16,
                      .seed = 400 + s};
        char label[64];
        snprintf(label, sizeof label, "shape (%d,%d,%d)", shapes[s][0], shapes[s][1], shapes[s][2]);
        mla_check_case(&c, s == 0 ? bf16_f32 : bf16_only, s == 0 ? 2 : 1, label);
    }
}

/* Contexts past 128k keys in every variant, at small dims so the default run stays short
 * (mla_attn_slow has them at the real dims): 2^17 + 1 keys over 16-row blocks, with fp32
 * and bf16 caches; a decode and a few causal queries at the end of the context. A lean sweep
 * runs the bf16 cache and bf16 output only (the small cases cover every output dtype), at
 * the vector levels (MLA_LEAN_REF_WORK). */
static void test_128k_context(void)
{
    static const int32_t lens[2] = {131073, 140000};
    static const int32_t nq[2] = {1, 3};
    const int lean = numla_test_sweep_lean();
    for (int ki = 0; ki < (lean ? 1 : 2); ki++) {
        mla_case c = {.B = 2, .H = 4, .Dc = 64, .Dr = 16, .bs = 16, .lens = lens,
                      .qt = NUMLA_DTYPE_F32, .kvt = ki ? NUMLA_DTYPE_F32 : NUMLA_DTYPE_BF16,
                      .seed = 450 + ki};
        mla_check_case(&c, bf16_f32, lean ? 1 : 2, "128k+ keys");
    }
    mla_case d = {.B = 2, .H = 4, .Dc = 64, .Dr = 16, .bs = 16, .lens = lens, .nq = nq,
                  .causal = 1, .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 452};
    mla_check_case(&d, bf16_f32, lean ? 1 : 2, "128k+ keys, causal");
}

/* Offsets past 2^31 elements and 2^32 bytes: blocks near index 240000 of a bf16 cache at
 * Dc 512 / Dr 64 / block 16 (9216 elements a block; 4.4 GB of address space, mapped without
 * reserve so only the touched pages exist). The rows are written there by
 * concat_and_cache_mla and read by every variant, which must give the same bits as the same
 * rows at small block indices. A 32-bit product anywhere would read or write another block. */
static void test_64bit_offsets(void)
{
    enum { DC = 512, DR = 64, W = DC + DR, BS = 16, L = 70, H = 16, NBLK = 5 };
    const int64_t far_blocks = 240003;
    const size_t far_bytes = (size_t)far_blocks * BS * W * 2;
    CU_ASSERT_FATAL((double)(far_blocks - 1) * BS * W > 2147483648.0);
    void *far = mmap(NULL, far_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (far == MAP_FAILED) { /* an address-space limit (ulimit -v): nothing to test here */
        fprintf(stderr, "\n    64-bit offsets: mmap of %zu bytes refused, skipped\n", far_bytes);
        return;
    }
    uint16_t *near = calloc((size_t)NBLK * BS * W, 2);
    float *kvc = malloc(sizeof(float) * L * DC), *kpe = malloc(sizeof(float) * L * DR);
    float *q = malloc(sizeof(float) * H * W);
    numla_test_rng rng = {4242};
    for (int i = 0; i < L * DC; i++)
        kvc[i] = (float)numla_test_rng_uniform(&rng, -1.0, 1.0);
    for (int i = 0; i < L * DR; i++)
        kpe[i] = (float)numla_test_rng_uniform(&rng, -1.0, 1.0);
    for (int i = 0; i < H * W; i++)
        q[i] = (float)numla_test_rng_uniform(&rng, -1.0, 1.0);
    const int32_t far_tab[NBLK] = {240002, 3, 240000, 131072, 239999};
    const int32_t near_tab[NBLK] = {4, 0, 2, 1, 3};
    int64_t far_slots[L], near_slots[L];
    for (int t = 0; t < L; t++) {
        far_slots[t] = (int64_t)far_tab[t / BS] * BS + t % BS;
        near_slots[t] = (int64_t)near_tab[t / BS] * BS + t % BS;
    }
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        numla_kv_write_args kw = {.num_tokens = L, .kv_lora_rank = DC, .rope_dim = DR,
                                  .kv_c = kvc, .kv_c_stride = DC, .k_pe = kpe, .k_pe_stride = DR,
                                  .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = far_slots,
                                  .kv_cache = far, .kv_dtype = NUMLA_DTYPE_BF16,
                                  .num_blocks = far_blocks, .block_size = BS};
        CU_ASSERT_EQUAL_FATAL(numla_concat_and_cache_mla(isas[i], &kw), NUMLA_STATUS_OK);
        kw.slot_mapping = near_slots, kw.kv_cache = near, kw.num_blocks = NBLK;
        CU_ASSERT_EQUAL_FATAL(numla_concat_and_cache_mla(isas[i], &kw), NUMLA_STATUS_OK);
        int rows_same = 1; /* every written row landed where its 64-bit slot says */
        for (int t = 0; t < L; t++)
            rows_same &= !memcmp((const uint16_t *)far + (size_t)far_slots[t] * W,
                                 near + (size_t)near_slots[t] * W, W * 2);
        NUMLA_ASSERT_MSG(rows_same, "[%s] rows written past 2^31 elements differ",
                         numla_isa_name(isas[i]));
        float out_far[H * DC], out_near[H * DC], lse_far[H], lse_near[H];
        const int32_t len = L;
        numla_mla_attn_args a = {.num_seqs = 1, .num_heads = H, .kv_lora_rank = DC,
                                 .rope_dim = DR, .block_size = BS, .num_blocks = far_blocks,
                                 .max_blocks_per_seq = NBLK, .q = q, .q_dtype = NUMLA_DTYPE_F32,
                                 .kv_cache = far, .kv_dtype = NUMLA_DTYPE_BF16,
                                 .block_tables = far_tab, .seq_lens = &len, .scale = 0.06f,
                                 .out = out_far, .out_dtype = NUMLA_DTYPE_F32, .lse = lse_far};
        size_t wsb = numla_mla_attn_workspace_size(isas[i], &a, omp_get_max_threads());
        void *ws = malloc(wsb);
        CU_ASSERT_EQUAL(numla_mla_attn(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
        a.num_blocks = NBLK, a.kv_cache = near, a.block_tables = near_tab;
        a.out = out_near, a.lse = lse_near;
        CU_ASSERT_EQUAL(numla_mla_attn(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
        free(ws);
        NUMLA_ASSERT_MSG(!memcmp(out_far, out_near, sizeof out_far) &&
                             !memcmp(lse_far, lse_near, sizeof lse_far),
                         "[%s] attention over blocks past 2^31 elements differs",
                         numla_isa_name(isas[i]));
    }
    munmap(far, far_bytes);
    free(near);
    free(kvc);
    free(kpe);
    free(q);
}

/* Each supported level runs its own variant at dims every variant takes, and a vector level
 * falls back to the reference only for dims it cannot take (Dc % 32, Dr % 16). Without this
 * a table entry pointing at the level below would pass every accuracy test. */
static void test_variant_per_level(void)
{
    numla_mla_attn_args a = {.num_seqs = 1, .num_heads = 16, .kv_lora_rank = 512, .rope_dim = 64,
                             .block_size = 16, .q_dtype = NUMLA_DTYPE_BF16,
                             .kv_dtype = NUMLA_DTYPE_BF16, .out_dtype = NUMLA_DTYPE_BF16};
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        a.kv_lora_rank = 512, a.rope_dim = 64;
        CU_ASSERT_STRING_EQUAL(numla_mla_attn_variant(isas[i], &a), numla_isa_name(isas[i]));
        a.kv_lora_rank = 40, a.rope_dim = 8; /* only the reference takes these */
        CU_ASSERT_STRING_EQUAL(numla_mla_attn_variant(isas[i], &a), "ref");
    }
    /* amx and avx512bf16 need a bf16 cache; with another they run avx512's variant */
    a.kv_lora_rank = 512, a.rope_dim = 64, a.kv_dtype = NUMLA_DTYPE_F32;
    if (numla_isa_supported(NUMLA_ISA_AMX))
        CU_ASSERT_STRING_EQUAL(numla_mla_attn_variant(NUMLA_ISA_AMX, &a), "avx512");
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16))
        CU_ASSERT_STRING_EQUAL(numla_mla_attn_variant(NUMLA_ISA_AVX512BF16, &a), "avx512");
}

/* Head groups (kernels/mla_attn.c): more than 16 rows of a sequence run as one item over
 * 512-key sub-ranges whose results are folded, with V packed once when every row sees every
 * key. Whether an item is long enough to fold depends on the team size (the split count
 * does), so these run on a team of 2 whatever the machine: the cases below then fold in about
 * 20 items each, split others and have short tails. */
static void test_head_groups(void)
{
    const int team = omp_get_max_threads();
    omp_set_num_threads(2);
    /* H > 16: many sequences keep most groups whole (700 keys: a fold of 512 + 188), the
     * longest is split. */
    int32_t lens2[20];
    for (int b = 0; b < 20; b++)
        lens2[b] = b == 0 ? 2900 : b == 1 ? 1 : b == 2 ? 40 : b == 3 ? 513 : 700 - b;
    static const int32_t hs2[2] = {32, 128};
    const int lean = numla_test_sweep_lean();
    /* full: 32 and 128 heads; else 32 (two head blocks a group; the grouped cases below have
     * eight); lean: bf16 output only, here and below */
    for (int i = 0; i < (numla_test_sweep_full() ? 2 : 1); i++) {
        mla_case c = {.B = i ? 12 : 20, .H = hs2[i], .Dc = 512, .Dr = 64, .bs = 16, .lens = lens2,
                      .qt = NUMLA_DTYPE_F32, .kvt = NUMLA_DTYPE_BF16, .seed = 210 + i};
        mla_check_case(&c, bf16_f32, lean ? 1 : 2, "head groups");
    }
    /* Grouped query blocks (8 x 16 rows per item) over prefixes longer than a 512-key
     * sub-range, causal (each block of a group with its own key ends) and non-causal (V
     * shared), where a group may also have no key at all (the first chunk of a prompt). */
    static const int32_t lens4[4] = {1400, 900, 0, 700};
    static const int32_t nq4[4] = {128, 3, 40, 0}; /* and a sequence without queries */
    for (int causal = 0; causal < 2; causal++) {
        mla_case e = {.B = causal ? 2 : 4, .H = 16, .Dc = 64, .Dr = 16, .bs = 16,
                      .lens = lens4, .nq = nq4, .causal = causal, .qt = NUMLA_DTYPE_F32,
                      .kvt = NUMLA_DTYPE_BF16, .seed = 512 + causal};
        mla_check_case(&e, bf16_f32, lean ? 1 : 2, causal ? "grouped causal" : "grouped prefix");
    }
    omp_set_num_threads(team);
}

/* The plan keeps threads busy and still groups head blocks where it can: one sequence of
 * 128 heads gives every one of 64 threads an item at 4096 keys (32 key chunks: groups of 2
 * head blocks, two items a thread), and two threads items at 300 keys, while long or many sequences
 * keep groups of 8. Plan only: no kernel runs. */
static void test_head_group_plan(void)
{
    static int32_t lens[30];
    static const int32_t tab[1] = {0};
    numla_mla_attn_args a = {.num_seqs = 1, .num_heads = 128, .kv_lora_rank = 512, .rope_dim = 64,
                             .block_size = 16, .block_tables = tab, .seq_lens = lens};
    static const struct {
        int32_t B, L, nt;
        int64_t min_items;
        int32_t min_units, max_units;
    } cases[] = {
        {1, 4096, 64, 64, 2, 4},   /* one sequence, many threads: smaller groups */
        {1, 300, 2, 2, 1, 4},      /* too few keys for a group to split: smaller groups */
        {1, 64000, 2, 16, 8, 8},   /* long: groups of 8, split */
        {1, 64000, 64, 64, 1, 8},
        {30, 2048, 64, 64, 8, 8},  /* many sequences: groups of 8, each split */
        {30, 2048, 2, 16, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        a.num_seqs = cases[i].B;
        for (int b = 0; b < cases[i].B; b++)
            lens[b] = cases[i].L;
        int64_t items;
        int32_t units;
        numla_mla_attn_plan_stats(&a, cases[i].nt, &items, &units);
        NUMLA_ASSERT_MSG(items >= cases[i].min_items && units >= cases[i].min_units &&
                             units <= cases[i].max_units,
                         "(%d, %d, 128) on %d threads: %lld items, groups of up to %d units",
                         cases[i].B, cases[i].L, cases[i].nt, (long long)items, units);
    }
}

static void test_multi_token(void)
{
    static const int32_t lens[4] = {40, 300, 17, 1};
    static const int32_t nq[4] = {5, 33, 17, 1}; /* sequence 2 is a whole prefill */
    static const int32_t hs[2] = {16, 5};
    for (int causal = 0; causal < 2; causal++)
        for (int i = 0; i < 2; i++) {
            mla_case c = {.B = 4, .H = hs[i], .Dc = 64, .Dr = 16, .bs = 16, .lens = lens,
                          .nq = nq, .causal = causal, .qt = NUMLA_DTYPE_BF16,
                          .kvt = NUMLA_DTYPE_BF16, .seed = 500 + 2 * causal + i};
            mla_check_case(&c, bf16_f32, 2, causal ? "causal" : "non-causal");
        }
    static const int32_t lens2[2] = {600, 90};
    static const int32_t nq2[2] = {20, 90};
    mla_case c = {.B = 2, .H = 16, .Dc = 512, .Dr = 64, .bs = 64, .lens = lens2, .nq = nq2,
                  .causal = 1, .qt = NUMLA_DTYPE_F32, .kvt = NUMLA_DTYPE_BF16, .seed = 510};
    mla_check_case(&c, bf16_f32, 2, "causal Dc 512");
    /* Non-causal chunked prefill may have more queries than cached keys, or none cached. */
    static const int32_t lens3[3] = {10, 0, 100};
    static const int32_t nq3[3] = {7, 3, 130};
    mla_case d = {.B = 3, .H = 3, .Dc = 64, .Dr = 16, .bs = 8, .lens = lens3, .nq = nq3,
                  .causal = 0, .qt = NUMLA_DTYPE_F16, .kvt = NUMLA_DTYPE_F32, .seed = 511};
    mla_check_case(&d, all_dt, 3, "non-causal prefix");
}

/* seq_len 0 gives zeros and -inf LSE, next to non-empty sequences. */
static void test_empty_sequences(void)
{
    static const int32_t lens[3] = {0, 5, 0};
    mla_case c = {.B = 3, .H = 4, .Dc = 64, .Dr = 16, .bs = 4, .lens = lens,
                  .qt = NUMLA_DTYPE_F32, .kvt = NUMLA_DTYPE_BF16, .seed = 600};
    mla_problem *p = mla_problem_make(&c);
    mla_problem_reference(p);
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        mla_problem_check(p, isas[i], NUMLA_DTYPE_F32, "empty");
        float out[3 * 4 * 64], lse[12];
        memset(out, 0xff, sizeof out);
        numla_mla_attn_args a = mla_problem_args(p, out, NUMLA_DTYPE_F32, lse);
        size_t wsb = numla_mla_attn_workspace_size(isas[i], &a, omp_get_max_threads());
        void *ws = malloc(wsb);
        CU_ASSERT_EQUAL(numla_mla_attn(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
        int zeros = 1, inf = 1;
        for (int b = 0; b < 3; b += 2)
            for (int r = 0; r < 4; r++) {
                inf &= isinf(lse[b * 4 + r]) && lse[b * 4 + r] < 0;
                for (int d = 0; d < 64; d++)
                    zeros &= out[(b * 4 + r) * 64 + d] == 0.0f;
            }
        NUMLA_ASSERT_MSG(zeros && inf, "[%s] empty sequence: zeros %d, lse -inf %d",
                         numla_isa_name(isas[i]), zeros, inf);
        free(ws);
    }
    mla_problem_free(p);
}

/* Bad tables, lengths and query counts fail before anything is written. */
static void test_out_of_range(void)
{
    static const int32_t lens[2] = {20, 9};
    static const int32_t nq[2] = {3, 4};
    mla_case c = {.B = 2, .H = 2, .Dc = 64, .Dr = 16, .bs = 8, .lens = lens, .nq = nq,
                  .causal = 1, .qt = NUMLA_DTYPE_BF16, .kvt = NUMLA_DTYPE_BF16, .seed = 700};
    mla_problem *p = mla_problem_make(&c);
    size_t nout = (size_t)p->T * 2 * 64;
    uint16_t *out = malloc(nout * 2);
    float lse[14];
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++)
        for (int kind = 0; kind < 5; kind++) {
            numla_mla_attn_args a = mla_problem_args(p, out, NUMLA_DTYPE_BF16, lse);
            int32_t save_tab = p->tables[p->mbps + 1], save_len = p->lens[1];
            int32_t qsl_save = p->qsl[2];
            if (kind == 0)
                p->tables[p->mbps + 1] = (int32_t)p->num_blocks; /* last used block of seq 1 */
            else if (kind == 1)
                p->tables[p->mbps + 1] = -1;
            else if (kind == 2)
                p->lens[1] = p->mbps * 8 + 1; /* more keys than the table row holds */
            else if (kind == 3)
                p->qsl[2] = p->qsl[1] + 10; /* 10 causal queries over 9 keys */
            else
                p->lens[1] = 3; /* 4 causal queries over 3 keys */
            memset(out, 0x5a, nout * 2);
            memset(lse, 0x5a, sizeof lse);
            size_t wsb = numla_mla_attn_workspace_size(isas[i], &a, omp_get_max_threads());
            void *ws = malloc(wsb);
            numla_status st = numla_mla_attn(isas[i], &a, ws, wsb);
            NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OUT_OF_RANGE, "[%s] kind %d: status %s",
                             numla_isa_name(isas[i]), kind, numla_status_name(st));
            int untouched = 1;
            for (size_t j = 0; j < nout; j++)
                untouched &= out[j] == 0x5a5a;
            for (int j = 0; j < 14; j++) {
                uint32_t u;
                memcpy(&u, &lse[j], 4);
                untouched &= u == 0x5a5a5a5au;
            }
            NUMLA_ASSERT_MSG(untouched, "[%s] kind %d wrote output", numla_isa_name(isas[i]), kind);
            p->tables[p->mbps + 1] = save_tab;
            p->lens[1] = save_len;
            p->qsl[2] = qsl_save;
            free(ws);
        }
    /* The unmodified problem runs. */
    numla_mla_attn_args a = mla_problem_args(p, out, NUMLA_DTYPE_BF16, lse);
    size_t wsb = numla_mla_attn_workspace_size(NUMLA_ISA_REF, &a, omp_get_max_threads());
    void *ws = malloc(wsb);
    CU_ASSERT_EQUAL(numla_mla_attn(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_mla_attn(NUMLA_ISA_REF, &a, ws, wsb / 2), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "workspace"));
    free(ws);
    free(out);
    mla_problem_free(p);
}

NUMLA_TEST_SUITE(mla_attn, NULL, NULL, NUMLA_TEST(test_small_all_dtypes), NUMLA_TEST(test_block_sizes),
                 NUMLA_TEST(test_many_heads), NUMLA_TEST(test_wide_dtypes),
                 NUMLA_TEST(test_128k_context), NUMLA_TEST(test_64bit_offsets),
                 NUMLA_TEST(test_variant_per_level), NUMLA_TEST(test_head_groups),
                 NUMLA_TEST(test_head_group_plan),
                 NUMLA_TEST(test_multi_token), NUMLA_TEST(test_empty_sequences),
                 NUMLA_TEST(test_out_of_range), NUMLA_TEST(test_main_shapes))
