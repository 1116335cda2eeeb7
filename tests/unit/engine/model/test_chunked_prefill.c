/* tests/unit/engine/model/test_chunked_prefill.c — a prompt prefilled in chunks of 1, 7, 64 tokens
 * gives the same logits (within tolerance) and the same greedy continuation as the whole
 * prompt at once (engine/model/model.c: cached-prefix attention merged by LSE with causal attention
 * inside the chunk). Models: the tiny synth preset and the golden HF models (v2lite, v2, v3). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/formats/safetensors.h"
#include "engine/synth/synth.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine.h"
#include "test_util.h"

typedef struct cp_eng {
    numla_model_config cfg;
    numla_safetensors_model *st;
    numla_model_weights *w;
    numla_model *m;
    numla_kv_cache *kv;
} cp_eng;

/* form: the model's prefill form (the engine default follows NUMLA_PREFILL_FORM) */
static int cp_open_form(cp_eng *e, const char *dir, numla_isa isa, numla_prefill_form form)
{
    memset(e, 0, sizeof *e);
    numla_model_options mo = numla_model_options_default(isa);
    mo.num_threads = 2;
    mo.prefill_form = form;
    if (numla_model_config_load(dir, &e->cfg) ||
        numla_safetensors_open(dir, &e->st) || numla_weights_load(&e->cfg, e->st, 0, 1, isa, &e->w) ||
        numla_model_create(e->w, &mo, &e->m) ||
        numla_kv_cache_create((int32_t)e->cfg.num_hidden_layers, (int32_t)e->cfg.kv_lora_rank,
                              (int32_t)e->cfg.qk_rope_head_dim, 16, 256, NUMLA_DTYPE_BF16,
                              &e->kv)) {
        fprintf(stderr, "\n    open %s failed: %s\n%s", dir, numla_error_message(),
                numla_error_trace());
        return -1;
    }
    numla_test_rng r = {7};
    for (int64_t i = e->kv->num_free - 1; i > 0; i--) { /* shuffled block tables */
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = e->kv->free_blocks[i];
        e->kv->free_blocks[i] = e->kv->free_blocks[j];
        e->kv->free_blocks[j] = t;
    }
    return 0;
}

static int cp_open(cp_eng *e, const char *dir, numla_isa isa)
{
    return cp_open_form(e, dir, isa, numla_engine_options_default().kernels.prefill_form);
}

static void cp_close(cp_eng *e)
{
    numla_kv_cache_destroy(&e->kv);
    numla_model_destroy(&e->m);
    numla_weights_destroy(&e->w);
    numla_safetensors_close(&e->st);
}

/* One step over several sequences: seqs[b] gets the n[b] tokens tok[b]; the logits of every
 * new row go to out in step order (sum n, V). */
static int cp_step_multi(cp_eng *e, int32_t B, numla_kv_seq **seqs, const int32_t *const *tok,
                         const int32_t *n, float *out)
{
    int32_t T = 0, mb = 1;
    for (int32_t b = 0; b < B; b++) {
        if (numla_kv_seq_reserve(e->kv, seqs[b], seqs[b]->len + n[b]))
            return -1;
        T += n[b];
        mb = seqs[b]->num_blocks > mb ? seqs[b]->num_blocks : mb;
    }
    int32_t *toks = malloc((size_t)T * 4), *pos = malloc((size_t)T * 4);
    int32_t *rows = malloc((size_t)T * 4), *qsl = malloc((size_t)(B + 1) * 4);
    int32_t *lens = malloc((size_t)B * 4), *tables = calloc((size_t)(B * mb), 4);
    int64_t *slots = malloc((size_t)T * 8);
    qsl[0] = 0;
    for (int32_t b = 0, t = 0; b < B; b++) {
        for (int32_t i = 0; i < n[b]; i++, t++) {
            toks[t] = tok[b][i];
            pos[t] = (int32_t)seqs[b]->len + i;
            slots[t] = numla_kv_seq_slot(e->kv, seqs[b], seqs[b]->len + i);
            rows[t] = t;
        }
        qsl[b + 1] = t;
        lens[b] = (int32_t)seqs[b]->len + n[b];
        memcpy(tables + (size_t)b * (size_t)mb, seqs[b]->block_table,
               (size_t)seqs[b]->num_blocks * 4);
    }
    numla_step st = {.num_seqs = B, .num_tokens = T, .tokens = toks, .positions = pos,
                     .slots = slots, .query_start_loc = qsl, .seq_lens = lens,
                     .block_tables = tables, .max_blocks_per_seq = mb,
                     .num_logit_rows = T, .logit_rows = rows};
    numla_status s = numla_model_forward(e->m, e->kv, &st, out);
    if (s)
        fprintf(stderr, "\n    forward: %s\n", numla_error_message());
    for (int32_t b = 0; b < B; b++)
        seqs[b]->len += n[b];
    free(toks);
    free(pos);
    free(rows);
    free(qsl);
    free(lens);
    free(tables);
    free(slots);
    return s ? -1 : 0;
}

/* Append n tokens to seq in one step; logits of every new row into out (n, vocab). */
static int cp_step(cp_eng *e, numla_kv_seq *seq, const int32_t *tok, int32_t n, float *out)
{
    return cp_step_multi(e, 1, &seq, &tok, &n, out);
}

static int32_t argmax(const float *v, int64_t n, float *margin)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b])
            b = (int32_t)i;
    float second = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (i != b && v[i] > second)
            second = v[i];
    *margin = v[b] - second;
    return b;
}

enum { CP_GEN = 8 };

/* Logit tolerance, relative to the largest |logit|. Chunking or batching changes the GEMM
 * shapes (M), the attention form and summation order; with bf16 KV a row may round one ulp
 * apart. Every linear path keeps fp32-class error (the AMX GEMM splits x into two bf16 parts,
 * kernels/x86/linear_amx.c), so bf16 and fp32 models alike agree to 2e-3 of their range. */
#define CP_REL_TOL 2e-3f

/* Prefill `prompt` in chunks of `chunk`, then greedy-decode CP_GEN tokens. logits: (P, V) of
 * the prompt rows; gen/margins: (CP_GEN). */
static int cp_run(cp_eng *e, const int32_t *prompt, int32_t P, int32_t chunk, float *logits,
                  int32_t *gen, float *margins)
{
    const int64_t V = e->cfg.vocab_size;
    numla_kv_seq seq = {0};
    int rc = 0;
    for (int32_t at = 0; at < P && !rc; at += chunk) {
        int32_t n = P - at < chunk ? P - at : chunk;
        rc = cp_step(e, &seq, prompt + at, n, logits + (size_t)at * (size_t)V);
    }
    float *lg = malloc((size_t)V * sizeof *lg);
    memcpy(lg, logits + (size_t)(P - 1) * (size_t)V, (size_t)V * sizeof *lg);
    for (int g = 0; g < CP_GEN && !rc; g++) {
        gen[g] = argmax(lg, V, &margins[g]);
        if (g + 1 < CP_GEN)
            rc = cp_step(e, &seq, &gen[g], 1, lg);
    }
    free(lg);
    numla_kv_seq_release(e->kv, &seq);
    return rc;
}

static void check_model_isa(const char *dir, int32_t P, numla_isa isa)
{
    cp_eng e;
    if (cp_open(&e, dir, isa)) {
        CU_FAIL("model open");
        return;
    }
    const int64_t V = e.cfg.vocab_size;
    int32_t *prompt = malloc((size_t)P * 4);
    numla_test_rng r = {12345};
    for (int32_t i = 0; i < P; i++)
        prompt[i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)V);
    float *ref = malloc((size_t)P * (size_t)V * 4), *got = malloc((size_t)P * (size_t)V * 4);
    int32_t gref[CP_GEN], ggot[CP_GEN];
    float mref[CP_GEN], mgot[CP_GEN];
    if (cp_run(&e, prompt, P, P, ref, gref, mref)) {
        CU_FAIL("whole-prompt run");
        goto out;
    }
    float scale = 0;
    for (int64_t i = 0; i < (int64_t)P * V; i++)
        scale = fabsf(ref[i]) > scale ? fabsf(ref[i]) : scale;
    const float tol = CP_REL_TOL * (scale > 1 ? scale : 1);
    const int32_t chunks[] = {1, 7, 64};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        if (cp_run(&e, prompt, P, chunks[c], got, ggot, mgot)) {
            CU_FAIL("chunked run");
            continue;
        }
        float maxd = 0;
        int64_t flips = 0;
        for (int32_t t = 0; t < P; t++) {
            const float *a = ref + (size_t)t * (size_t)V, *b = got + (size_t)t * (size_t)V;
            for (int64_t i = 0; i < V; i++) {
                float d = fabsf(a[i] - b[i]);
                maxd = d > maxd ? d : maxd;
            }
            float ma, mb;
            if (argmax(a, V, &ma) != argmax(b, V, &mb) && ma > 2 * tol)
                flips++;
        }
        NUMLA_ASSERT_MSG(maxd <= tol, "%s %s chunk %d: max |logit diff| %g > %g", dir,
                         numla_isa_name(isa), chunks[c],
                         (double)maxd, (double)tol);
        NUMLA_ASSERT_MSG(flips == 0, "%s chunk %d: %lld decisive argmax flips", dir, chunks[c],
                         (long long)flips);
        for (int g = 0; g < CP_GEN; g++) {
            NUMLA_ASSERT_MSG(ggot[g] == gref[g], "%s chunk %d: greedy token %d: %d vs %d "
                             "(margin %g)", dir, chunks[c], g, ggot[g], gref[g], (double)mref[g]);
            if (ggot[g] != gref[g] || mref[g] < 2 * tol)
                break; /* past a near-tie the continuations may differ legitimately */
        }
    }
out:
    free(prompt);
    free(ref);
    free(got);
    cp_close(&e);
}

static void check_model(const char *dir, int32_t P)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++)
        check_model_isa(dir, P, isas[i]);
}

static void test_tiny(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/chunk_tiny", numla_test_tmpdir());
    numla_synth_options so = {.preset = "tiny", .out_dir = dir, .seed = 3,
                              .dtype = NUMLA_DTYPE_BF16};
    if (numla_synth_write(&so, NULL)) {
        CU_FAIL("synth");
        return;
    }
    check_model(dir, 130);
}

/* A step mixing both attention forms (AUTO): a first chunk (expanded), a decode row and a
 * short chunk over a long prefix (both absorbed), another first chunk (expanded), in that
 * interleaved order, equals each sequence's step run alone; and the step really split (the
 * expanded form ran for the two first chunks only). */
static void check_mixed_isa(const char *dir, numla_isa isa)
{
    cp_eng e;
    if (cp_open_form(&e, dir, isa, NUMLA_PREFILL_FORM_AUTO)) { /* whatever NUMLA_PREFILL_FORM says */
        CU_FAIL("model open");
        return;
    }
    const int64_t V = e.cfg.vocab_size;
    enum { NS = 4, PFX = 120 };
    /* seq 0: first chunk of 40; seq 1: decode after PFX; seq 2: 3 tokens after PFX; seq 3:
     * first chunk of 24 */
    const int32_t n[NS] = {40, 1, 3, 24}, pre[NS] = {0, PFX, PFX, 0};
    int32_t *tok[NS], *ptok[NS];
    numla_test_rng r = {99};
    for (int b = 0; b < NS; b++) {
        tok[b] = malloc((size_t)n[b] * 4);
        ptok[b] = malloc((size_t)PFX * 4);
        for (int32_t i = 0; i < n[b]; i++)
            tok[b][i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)V);
        for (int32_t i = 0; i < PFX; i++)
            ptok[b][i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)V);
    }
    int32_t T = 0;
    for (int b = 0; b < NS; b++)
        T += n[b];
    float *ref = malloc((size_t)T * (size_t)V * 4), *got = malloc((size_t)T * (size_t)V * 4);
    float *pl = malloc((size_t)PFX * (size_t)V * 4);
    numla_kv_seq sa[NS] = {{0}}, sb[NS] = {{0}};
    int rc = 0;
    /* alone: each sequence's prefix, then its step */
    for (int b = 0, t = 0; b < NS && !rc; t += n[b], b++) {
        if (pre[b])
            rc |= cp_step(&e, &sa[b], ptok[b], pre[b], pl);
        rc |= cp_step(&e, &sa[b], tok[b], n[b], ref + (size_t)t * (size_t)V);
    }
    /* together: the same prefixes, then one step of all four */
    for (int b = 0; b < NS && !rc; b++)
        if (pre[b])
            rc |= cp_step(&e, &sb[b], ptok[b], pre[b], pl);
    numla_model_stats ms;
    numla_model_get_stats(e.m, &ms);
    const int64_t xp0 = ms.expanded_tokens;
    numla_kv_seq *sp[NS] = {&sb[0], &sb[1], &sb[2], &sb[3]};
    rc |= rc ? 0 : cp_step_multi(&e, NS, sp, (const int32_t *const *)tok, n, got);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    /* expanded_tokens counts per layer */
    const int64_t want_xp = (int64_t)(n[0] + n[3]) * e.cfg.num_hidden_layers;
    numla_model_get_stats(e.m, &ms);
    NUMLA_ASSERT_MSG(ms.expanded_tokens - xp0 == want_xp,
                     "%s %s: expanded %lld token-layers, want %lld (the two first chunks)", dir,
                     numla_isa_name(isa), (long long)(ms.expanded_tokens - xp0),
                     (long long)want_xp);
    float scale = 0, maxd = 0;
    for (int64_t i = 0; i < (int64_t)T * V; i++) {
        scale = fabsf(ref[i]) > scale ? fabsf(ref[i]) : scale;
        float d = fabsf(ref[i] - got[i]);
        maxd = d > maxd ? d : maxd;
    }
    const float tol = CP_REL_TOL * (scale > 1 ? scale : 1);
    NUMLA_ASSERT_MSG(maxd <= tol, "%s %s mixed step: max |logit diff| %g > %g", dir,
                     numla_isa_name(isa), (double)maxd, (double)tol);
    for (int b = 0; b < NS; b++) {
        numla_kv_seq_release(e.kv, &sa[b]);
        numla_kv_seq_release(e.kv, &sb[b]);
        free(tok[b]);
        free(ptok[b]);
    }
    free(ref);
    free(got);
    free(pl);
    cp_close(&e);
}

static void test_mixed_step(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    const char *dirs[] = {"tests/golden/v2lite", "tests/golden/v3"};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < n; i++)
            if (isas[i] >= NUMLA_ISA_AVX2) /* AUTO expands only there (attention.c expand_seq) */
                check_mixed_isa(numla_test_source_path(dirs[d]), isas[i]);
}

static void test_golden_v2lite(void) { check_model(numla_test_source_path("tests/golden/v2lite"), 80); }
static void test_golden_v2(void) { check_model(numla_test_source_path("tests/golden/v2"), 80); }
static void test_golden_v3(void) { check_model(numla_test_source_path("tests/golden/v3"), 80); }

NUMLA_TEST_SUITE(chunked_prefill, NULL, NULL, NUMLA_TEST(test_tiny), NUMLA_TEST(test_golden_v2lite),
                 NUMLA_TEST(test_golden_v2), NUMLA_TEST(test_golden_v3),
                 NUMLA_TEST(test_mixed_step))
