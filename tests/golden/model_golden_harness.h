/* tests/golden/model_golden_harness.h — the engine against the Hugging Face reference data of
 * tests/golden/<model>/ (tests/golden/README.md), shared by the model_golden suites
 * (test_model_golden.c: V2, V3, Kimi; test_model_golden_dsa.c: V3.2, GLM-5):
 *   - logits at every prompt position (all-at-once prefill) within LOGIT_TOL of expected;
 *   - 16 greedy tokens through the KV cache identical while the reference margin > tolerance;
 *   - prefill-then-decode (half the prompt, then one token per step) equals the full prefill;
 *   - per-layer residual stream, cached c' and k_pe (de-interleave permutation), router choices
 *     for prompt0 against debug.safetensors (V2/V3 layout only).
 * Every configuration with fp32 activations and an fp32 cache is held to the README's 2e-3;
 * a bf16 KV cache gets a stated, looser tolerance (LOGIT_TOL_BF16KV). Header-only (static
 * functions; a suite uses some of them). */
#ifndef NUMLA_TESTS_MODEL_GOLDEN_HARNESS_H
#define NUMLA_TESTS_MODEL_GOLDEN_HARNESS_H

#pragma GCC diagnostic ignored "-Wunused-function"

#include <jansson.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_harness.h"
#include "engine/model/model_testing.h"

enum { MAX_PROMPTS = 8, N_GREEDY = 16 };

#define LOGIT_TOL 2e-3      /* README: ~20x the fp64/fp32 spread of the reference */
/* bf16 KV cache: c' and k_pe rounded to bf16 move scores by ~1e-2 relative, which can flip
 * a near-tied expert choice deep in a 100-token prompt, and everything after it: the worst
 * position moved between 1.5 and 2.0 on v2 prompt 3 with fp32 summation order alone (router
 * GEMM). So a bf16-cache run is held to LOGIT_TOL_BF16KV at most positions and to
 * LOGIT_MAX_BF16KV at every one; a wrong layout or scale gives errors of O(10) everywhere. */
#define LOGIT_TOL_BF16KV 0.5
#define LOGIT_MAX_BF16KV 4.0
#define LOGIT_FRAC_BF16KV 0.2 /* at most this fraction of a prompt's positions above the tol */
/* The Kimi golden chooses 4 of 16 experts in one group with routed scaling 2.827: one expert that
 * a bf16 cache flips moves its logits further than in the V2/V3 goldens (figure in
 * tests/golden/README.md); a wrong layout still fails the fraction above. */
#define LOGIT_MAX_BF16KV_KIMI 6.0

#define DEBUG_TOL 1e-4

/* Positions (rows of V logits) whose max |a - b| exceeds tol. */
static int rows_above(const float *a, const float *b, int64_t rows, int64_t V, double tol)
{
    int n = 0;
    for (int64_t r = 0; r < rows; r++) {
        double e = 0;
        for (int64_t i = 0; i < V; i++)
            e = fmax(e, fabs((double)a[r * V + i] - (double)b[r * V + i]));
        n += e > tol;
    }
    return n;
}


/* debug.safetensors holds I32 tensors (topk_ids), which numla_safetensors_open rejects by contract
 * (F32/F16/BF16 only); this test reads that small file itself. */
typedef struct dbg_file {
    char *buf;
    size_t len;
    json_t *hdr;
    const char *data;
} dbg_file;

static int dbg_open(dbg_file *d, const char *path)
{
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    d->buf = malloc((size_t)n);
    d->len = (size_t)n;
    int ok = d->buf && fread(d->buf, 1, (size_t)n, f) == (size_t)n && n >= 8;
    fclose(f);
    if (!ok)
        return -1;
    uint64_t hl = 0;
    memcpy(&hl, d->buf, 8);
    if (hl > d->len - 8)
        return -1;
    d->hdr = json_loadb(d->buf + 8, (size_t)hl, 0, NULL);
    d->data = d->buf + 8 + hl;
    return d->hdr ? 0 : -1;
}

static void dbg_close(dbg_file *d)
{
    json_decref(d->hdr);
    free(d->buf);
    memset(d, 0, sizeof *d);
}

/* Data of tensor `name` if its dtype is `dtype` ("F32", "I32"); rows/cols from its shape. */
static const void *dbg_get(const dbg_file *d, const char *name, const char *dtype, int64_t *rows,
                           int64_t *cols)
{
    json_t *t = d->hdr ? json_object_get(d->hdr, name) : NULL;
    if (!t || strcmp(json_string_value(json_object_get(t, "dtype")), dtype))
        return NULL;
    json_t *sh = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
    if (rows)
        *rows = json_integer_value(json_array_get(sh, 0));
    if (cols)
        *cols = json_array_size(sh) > 1 ? json_integer_value(json_array_get(sh, 1)) : 1;
    size_t b = (size_t)json_integer_value(json_array_get(off, 0));
    size_t e = (size_t)json_integer_value(json_array_get(off, 1));
    if (e > d->len - (size_t)(d->data - d->buf) || b > e)
        return NULL;
    return d->data + b;
}

typedef struct golden {
    char dir[1024];
    int nprompts;
    int len[MAX_PROMPTS];
    int32_t *tokens[MAX_PROMPTS];
    int32_t greedy[MAX_PROMPTS][N_GREEDY];
    double margin[MAX_PROMPTS][N_GREEDY];
    numla_safetensors_model *expected; /* prompt{i}.logits */
    dbg_file debug;           /* fp32 dirs only */
    double softmax_scale;
    double inv_freq[64];
    int n_inv;
} golden;

/* numla_safetensors_open takes a directory holding model.safetensors; point one at another file. */
static numla_status open_file_as_model(const char *file, const char *tag, numla_safetensors_model **out)
{
    char d[1200], link[1300];
    snprintf(d, sizeof d, "%s/st_%s", numla_test_tmpdir(), tag);
    mkdir(d, 0755);
    snprintf(link, sizeof link, "%s/model.safetensors", d);
    unlink(link);
    if (symlink(file, link) != 0)
        return NUMLA_STATUS_IO;
    numla_status s = numla_safetensors_open(d, out);
    if (s)
        fprintf(stderr, "\n    %s: %s", file, numla_error_message());
    return s;
}

/* sub: "" (fp32 weights, with debug.safetensors), "model_bf16", "model_fp8", "model_int8";
 * expected: the logits file ("expected.safetensors", or model_int8's "expected_w8a32..."). */
static int golden_load_file(golden *g, const char *model, const char *sub, const char *expected)
{
    memset(g, 0, sizeof *g);
    snprintf(g->dir, sizeof g->dir, "%s", numla_test_source_path("tests/golden"));
    size_t n = strlen(g->dir);
    snprintf(g->dir + n, sizeof g->dir - n, "/%s%s%s", model, *sub ? "/" : "", sub);
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.json", g->dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) {
        fprintf(stderr, "\n    %s: %s\n", path, err.text);
        return -1;
    }
    g->softmax_scale = json_real_value(json_object_get(j, "softmax_scale"));
    json_t *inv = json_object_get(j, "rope_inv_freq");
    for (size_t i = 0; i < json_array_size(inv) && i < 64; i++)
        g->inv_freq[g->n_inv++] = json_number_value(json_array_get(inv, i));
    json_t *ps = json_object_get(j, "prompts");
    for (size_t p = 0; p < json_array_size(ps) && p < MAX_PROMPTS; p++) {
        json_t *pr = json_array_get(ps, p), *tk = json_object_get(pr, "tokens");
        g->len[p] = (int)json_array_size(tk);
        g->tokens[p] = malloc(sizeof(int32_t) * (size_t)g->len[p]);
        for (int i = 0; i < g->len[p]; i++)
            g->tokens[p][i] = (int32_t)json_integer_value(json_array_get(tk, (size_t)i));
        json_t *gr = json_object_get(pr, "greedy"), *gm = json_object_get(pr, "greedy_margins");
        for (int i = 0; i < N_GREEDY; i++) {
            g->greedy[p][i] = (int32_t)json_integer_value(json_array_get(gr, (size_t)i));
            g->margin[p][i] = json_number_value(json_array_get(gm, (size_t)i));
        }
        g->nprompts++;
    }
    json_decref(j);
    char tag[128];
    snprintf(tag, sizeof tag, "%s_%s_%s", model, *sub ? sub : "fp32", expected);
    snprintf(path, sizeof path, "%s/%s", g->dir, expected);
    if (open_file_as_model(path, tag, &g->expected))
        return -1;
    if (!*sub) {
        snprintf(path, sizeof path, "%s/debug.safetensors", g->dir);
        if (dbg_open(&g->debug, path)) {
            fprintf(stderr, "\n    %s: cannot read", path);
            return -1;
        }
    }
    return 0;
}


static void golden_free(golden *g)
{
    for (int p = 0; p < g->nprompts; p++)
        free(g->tokens[p]);
    numla_safetensors_close(&g->expected);
    dbg_close(&g->debug);
}

static const float *st_f32(numla_safetensors_model *st, const char *name, int64_t *rows, int64_t *cols)
{
    const numla_safetensors_tensor *t = numla_safetensors_find(st, name);
    if (!t || t->dtype != NUMLA_DTYPE_F32)
        return NULL;
    if (rows)
        *rows = t->shape[0];
    if (cols)
        *cols = t->ndim > 1 ? t->shape[1] : 1;
    return t->data;
}

static double maxabs_diff(const float *a, const float *b, size_t n, double *bmax)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    if (bmax)
        *bmax = m;
    return e;
}

/* Greedy decode N_GREEDY tokens after an all-at-once prefill; count mismatches while margin > tol. */
static int greedy_check(eng *e, const golden *g, int p, double tol, int *compared)
{
    const int V = (int)e->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)g->len[p] * V);
    numla_kv_seq s = {0};
    const int32_t *tk[1] = {g->tokens[p]};
    int n[1] = {g->len[p]}, bad = 0;
    *compared = 0;
    if (eng_step(e, 1, &s, tk, n, lg)) {
        free(lg);
        return -1;
    }
    const float *row = lg + (size_t)(g->len[p] - 1) * V;
    for (int i = 0; i < N_GREEDY; i++) {
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        if (g->margin[p][i] <= 2 * tol)
            break; /* docs/design.md §8: beyond a near-tie the sequences may legitimately part */
        (*compared)++;
        if (best != g->greedy[p][i]) {
            fprintf(stderr, "\n    prompt %d step %d: token %d, reference %d (margin %.4f)", p, i,
                    best, g->greedy[p][i], g->margin[p][i]);
            bad++;
            break;
        }
        if (i + 1 == N_GREEDY)
            break;
        const int32_t *nt[1] = {&g->greedy[p][i]};
        int one[1] = {1};
        if (eng_step(e, 1, &s, nt, one, lg)) {
            bad++;
            break;
        }
        row = lg;
    }
    numla_kv_seq_release(e->kv, &s);
    free(lg);
    return bad;
}

typedef struct hook_ctx {
    const golden *g;
    double max_err;
    int checked;
} hook_ctx;

static void layer_hook(void *ctx, int32_t layer, const float *h, int32_t tokens, int64_t hidden)
{
    hook_ctx *c = ctx;
    char name[64];
    snprintf(name, sizeof name, "prompt0.layer%d.out", layer);
    int64_t r, k;
    const float *ref = dbg_get(&c->g->debug, name, "F32", &r, &k);
    if (!ref || r != tokens || k != hidden)
        return;
    double m;
    double err = maxabs_diff(h, ref, (size_t)(r * k), &m) / fmax(1.0, m);
    c->max_err = fmax(c->max_err, err);
    c->checked++;
}

/* prompt0 intermediates: per-layer residual, cache rows (c', k_pe), router choices. */
static void debug_checks(eng *e, const golden *g, const char *model)
{
    const numla_model_config *c = &e->cfg;
    const int V = (int)c->vocab_size, L = g->len[0];
    hook_ctx hc = {.g = g};
    numla_model_set_layer_hook(e->m, layer_hook, &hc);
    float *lg = malloc(sizeof(float) * (size_t)L * V);
    numla_kv_seq s = {0};
    const int32_t *tk[1] = {g->tokens[0]};
    int n[1] = {L};
    CU_ASSERT_EQUAL_FATAL(eng_step(e, 1, &s, tk, n, lg), 0);
    numla_model_set_layer_hook(e->m, NULL, NULL);
    NUMLA_ASSERT_MSG(hc.checked == c->num_hidden_layers && hc.max_err < DEBUG_TOL,
                     "%s: layer outputs checked %d, max rel err %g", model, hc.checked, hc.max_err);

    /* Cached rows: c' as is; k_pe stored de-interleaved [y0,y2,..,y1,y3,..], reference adjacent. */
    const int dc = (int)c->kv_lora_rank, dr = (int)c->qk_rope_head_dim;
    double ec = 0, ek = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, "prompt0.layer%d.kv_c", l);
        const float *rc = dbg_get(&g->debug, name, "F32", NULL, NULL);
        snprintf(name, sizeof name, "prompt0.layer%d.k_pe", l);
        const float *rk = dbg_get(&g->debug, name, "F32", NULL, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rc);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rk);
        const float *pool = numla_kv_cache_layer(e->kv, l);
        for (int t = 0; t < L; t++) {
            const float *row = pool + numla_kv_seq_slot(e->kv, &s, t) * (dc + dr);
            for (int i = 0; i < dc; i++)
                ec = fmax(ec, fabs(row[i] - rc[t * dc + i]));
            for (int i = 0; i < dr / 2; i++) {
                ek = fmax(ek, fabs(row[dc + i] - rk[t * dr + 2 * i]));
                ek = fmax(ek, fabs(row[dc + dr / 2 + i] - rk[t * dr + 2 * i + 1]));
            }
        }
    }
    NUMLA_ASSERT_MSG(ec < DEBUG_TOL * 10 && ek < DEBUG_TOL * 10, "%s: cache c' err %g, k_pe err %g",
                     model, ec, ek);
    numla_kv_seq_release(e->kv, &s);

    /* Router: route the reference's own logits and compare ids (sorted) and weights. */
    if (c->n_routed_experts > 0) {
        char name[64];
        int k0 = (int)c->first_k_dense_replace, K = (int)c->num_experts_per_tok;
        snprintf(name, sizeof name, "prompt0.layer%d.router_logits", k0);
        const float *rl = dbg_get(&g->debug, name, "F32", NULL, NULL);
        snprintf(name, sizeof name, "prompt0.layer%d.topk_weights", k0);
        const float *rw = dbg_get(&g->debug, name, "F32", NULL, NULL);
        snprintf(name, sizeof name, "prompt0.layer%d.topk_ids", k0);
        const int32_t *ids = dbg_get(&g->debug, name, "I32", NULL, NULL);
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate.e_score_correction_bias", k0);
        const numla_safetensors_tensor *bt = numla_safetensors_find(e->st, name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rl);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rw);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
        int bad = 0;
        double ew = 0;
        float w[16];
        int32_t idx[16];
        void *scr = malloc(numla_model_moe_route_scratch_bytes(c));
        CU_ASSERT_PTR_NOT_NULL_FATAL(scr);
        for (int t = 0; t < L; t++) {
            numla_model_moe_route(c, rl + t * c->n_routed_experts, bt ? bt->data : NULL, idx, w,
                                  scr);
            for (int a = 0; a < K; a++) /* sort by id like the reference */
                for (int b = a + 1; b < K; b++)
                    if (idx[b] < idx[a]) {
                        int32_t ti = idx[a]; idx[a] = idx[b]; idx[b] = ti;
                        float tw = w[a]; w[a] = w[b]; w[b] = tw;
                    }
            for (int j = 0; j < K; j++) {
                bad += idx[j] != ids[t * K + j];
                ew = fmax(ew, fabs(w[j] - rw[t * K + j]));
            }
        }
        free(scr);
        NUMLA_ASSERT_MSG(bad == 0 && ew < 1e-5, "%s: router ids wrong %d, weight err %g", model,
                         bad, ew);
    }
    free(lg);
}

/* One engine configuration run over every prompt. strict_below: prompts shorter than this many
 * tokens are held to `tol`; longer ones are measured and reported only (bf16-activation GEMM). */
typedef struct golden_cfg {
    int bf16_weights;
    numla_isa isa;
    int exact;
    numla_dtype kv;
    double tol;
    int strict_below;
    int debug;
    int greedy;  /* run the 16-token greedy comparison (decode-heavy: only where it adds) */
    const char *what;
    numla_prefill_form form; /* 0 (auto): the harness's default, which NUMLA_PREFILL_FORM sets */
    int report_ref; /* the distance to the reference is reported, not asserted (nor greedy);
                       prefill-then-decode against the whole prefill still is */
} golden_cfg;

static void run_cfg(const char *model, golden *g, const golden_cfg *gc)
{
    eng e;
    numla_model_options mo = eng_model_options(gc->isa);
    mo.exact_activations = gc->exact;
    if (gc->form != NUMLA_PREFILL_FORM_AUTO)
        mo.prefill_form = gc->form;
    mo.single_thread_below_bytes = 0; /* exercise the threaded path on these tiny models */
    if (eng_open_rank_opts(&e, g->dir, gc->kv, &mo, 0, 1)) {
        CU_FAIL("engine open");
        return;
    }
    if (gc->debug) {
        NUMLA_ASSERT_MSG(fabs(e.cfg.softmax_scale - g->softmax_scale) < 1e-7,
                         "%s: softmax scale %.8f vs %.8f", model, e.cfg.softmax_scale,
                         g->softmax_scale);
        for (int i = 0; i < g->n_inv; i++)
            NUMLA_ASSERT_MSG(fabs(e.cfg.rope_inv_freq[i] - g->inv_freq[i]) <= 1e-6 * g->inv_freq[i],
                             "%s: inv_freq[%d] %.9g vs %.9g", model, i, e.cfg.rope_inv_freq[i],
                             g->inv_freq[i]);
        debug_checks(&e, g, model);
    }
    const int V = (int)e.cfg.vocab_size;
    double worst = 0, worst_split = 0, worst_report = 0;
    int greedy_cmp = 0;
    for (int p = 0; p < g->nprompts; p++) {
        char name[64];
        snprintf(name, sizeof name, "prompt%d.logits", p);
        int64_t r = 0, k = 0;
        const float *ref = st_f32(g->expected, name, &r, &k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        CU_ASSERT_EQUAL_FATAL(r, g->len[p]);
        CU_ASSERT_EQUAL_FATAL(k, V);
        int strict = g->len[p] < gc->strict_below;
        float *full = malloc(sizeof(float) * (size_t)r * V);
        float *split = malloc(sizeof(float) * (size_t)r * V);
        numla_kv_seq s = {0};
        const int32_t *tk[1] = {g->tokens[p]};
        int n[1] = {g->len[p]};
        CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &s, tk, n, full), 0);
        numla_kv_seq_release(e.kv, &s);
        double err = maxabs_diff(full, ref, (size_t)r * V, NULL);
        if (!strict) {
            worst_report = fmax(worst_report, err);
        } else {
            worst = fmax(worst, err);
            if (gc->report_ref) {
                /* reported with the others */
            } else if (gc->kv == NUMLA_DTYPE_BF16) {
                int above = rows_above(full, ref, r, V, gc->tol);
                const double most =
                    strcmp(model, "kimi") ? LOGIT_MAX_BF16KV : LOGIT_MAX_BF16KV_KIMI;
                NUMLA_ASSERT_MSG(above <= LOGIT_FRAC_BF16KV * (double)r && err <= most,
                                 "%s %s prompt %d: %d of %lld positions off by more than %g "
                                 "(at most %.0f%%), worst %g (at most %g)", model, gc->what, p,
                                 above, (long long)r, gc->tol, 100 * LOGIT_FRAC_BF16KV, err,
                                 most);
                if (above)
                    printf("\n    %s %s prompt %d: %d of %lld positions above %g", model,
                           gc->what, p, above, (long long)r, gc->tol);
            } else {
                NUMLA_ASSERT_MSG(err <= gc->tol, "%s %s prompt %d: logits max err %g > %g",
                                 model, gc->what, p, err, gc->tol);
            }
            /* prefill all but the last 4 tokens, then one token per step */
            int h = g->len[p] > 4 ? g->len[p] - 4 : 1;
            int nh[1] = {h};
            CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &s, tk, nh, split), 0);
            for (int t = h; t < g->len[p]; t++) {
                const int32_t *one_tok[1] = {g->tokens[p] + t};
                int one[1] = {1};
                CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &s, one_tok, one, split + (size_t)t * V), 0);
            }
            numla_kv_seq_release(e.kv, &s);
            double es = maxabs_diff(split, full, (size_t)r * V, NULL);
            worst_split = fmax(worst_split, es);
            NUMLA_ASSERT_MSG(es <= gc->tol, "%s %s prompt %d: prefill+decode vs prefill %g", model,
                             gc->what, p, es);
            if (gc->greedy && !gc->report_ref) {
                int cmp = 0;
                int bad = greedy_check(&e, g, p, gc->tol, &cmp);
                greedy_cmp += cmp;
                NUMLA_ASSERT_MSG(bad == 0, "%s %s prompt %d: greedy mismatch", model, gc->what, p);
            }
        }
        free(full);
        free(split);
    }
    numla_model_stats ms;
    numla_model_get_stats(e.m, &ms);
    if (gc->form == NUMLA_PREFILL_FORM_EXPANDED)
        NUMLA_ASSERT_MSG(ms.expanded_tokens > 0, "%s %s: no token took the expanded form",
                         model, gc->what);
    if (gc->form == NUMLA_PREFILL_FORM_ABSORBED)
        NUMLA_ASSERT_MSG(ms.expanded_tokens == 0, "%s %s: %lld tokens took the expanded form",
                         model, gc->what, (long long)ms.expanded_tokens);
    fprintf(stderr, "\n    golden %-6s %-34s: logits max abs err %.3g (%s %.3g), "
                    "decode-vs-prefill %.3g, greedy tokens compared %d",
            model, gc->what, worst, gc->report_ref ? "reported only; tol of the split" : "tol",
            gc->tol, worst_split, greedy_cmp);
    if (worst_report > 0)
        fprintf(stderr, "; prompts >= %d tokens (reported, not asserted): %.3g", gc->strict_below,
                worst_report);
    eng_close(&e);
}

/* fp32_sub: "" for the V2/V3 layout (fp32 weights in the model dir, with debug.safetensors),
 * or the fp32 weights' subdirectory (the DSA dirs: "model_fp32", no debug dump).
 * bf16kv_report: the bf16-KV configurations' distance to the reference is reported only. */
static void check_model_dirs(const char *model, const char *fp32_sub, int bf16kv_report)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int nisa = numla_test_isas(isas);
    numla_isa best = isas[nisa - 1];
    const golden_cfg cfgs[] = {
        {0, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 1, 1, "fp32 weights, best isa, f32 kv", NUMLA_PREFILL_FORM_AUTO, 0},
        {0, NUMLA_ISA_REF, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "fp32 weights, ref isa, f32 kv", NUMLA_PREFILL_FORM_AUTO, 0},
        {1, best, 1, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 1, "bf16 weights, exact activations", NUMLA_PREFILL_FORM_AUTO, 0},
        /* the default bf16 GEMM keeps fp32-class activations (amx splits them into two bf16
         * halves) */
        {1, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0,
         "bf16 weights, default linear path", NUMLA_PREFILL_FORM_AUTO, 0},
        {0, best, 0, NUMLA_DTYPE_BF16, LOGIT_TOL_BF16KV, 1 << 30, 0, 1, "fp32 weights, bf16 kv", NUMLA_PREFILL_FORM_AUTO, 0},
        /* the expanded prefill form (docs/prefill.md), forced for every multi-token chunk;
         * the prefill-then-decode check then compares it with absorbed decode */
        {0, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "fp32 weights, expanded prefill",
         NUMLA_PREFILL_FORM_EXPANDED, 0},
        {0, NUMLA_ISA_REF, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "ref isa, expanded prefill",
         NUMLA_PREFILL_FORM_EXPANDED, 0},
        {0, best, 0, NUMLA_DTYPE_BF16, LOGIT_TOL_BF16KV, 1 << 30, 0, 1, "bf16 kv, expanded prefill",
         NUMLA_PREFILL_FORM_EXPANDED, 0},
        {1, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "bf16 weights, expanded prefill",
         NUMLA_PREFILL_FORM_EXPANDED, 0},
        {0, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "fp32 weights, absorbed prefill",
         NUMLA_PREFILL_FORM_ABSORBED, 0},
    };
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        golden g;
        if (golden_load_file(&g, model, bf16 ? "model_bf16" : fp32_sub, "expected.safetensors")) {
            CU_FAIL("golden data");
            golden_free(&g);
            return;
        }
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            if (cfgs[i].bf16_weights != bf16)
                continue;
            if (i == 3 && best != NUMLA_ISA_AVX512BF16)
                continue;
            /* The first configuration runs with the default OpenMP team; the others on one
             * thread, since with 2 cores shared by parallel CTest jobs every extra team member
             * turns each of the ~100 parallel regions per step into a scheduling wait (the
             * kernels' own tests cover their threading). */
            int team = omp_get_max_threads();
            if (i > 0)
                omp_set_num_threads(1);
            golden_cfg gc = cfgs[i];
            gc.debug &= !*fp32_sub;
            gc.report_ref = bf16kv_report && gc.kv == NUMLA_DTYPE_BF16;
            run_cfg(model, &g, &gc);
            omp_set_num_threads(team);
        }
        golden_free(&g);
    }
}

static void check_model(const char *model) { check_model_dirs(model, "", 0); }



/* Sharded: R in-process ranks (uneven heads: v3 has 5, experts 12, vocab 288) against the
 * reference logits of every prompt. */
typedef struct shard_job {
    const golden *g;
    int prompt;
} shard_job;

static void *golden_rank_main(void *arg)
{
    rank_ctx *rc = arg;
    const shard_job *j = rc->job;
    numla_kv_seq s = {0};
    const int32_t *tk[1] = {j->g->tokens[j->prompt]};
    int n[1] = {j->g->len[j->prompt]};
    rc->ok = eng_step(&rc->e, 1, &s, tk, n, rc->logits) == 0;
    numla_kv_seq_release(rc->e.kv, &s);
    return NULL;
}

static void check_sharded_dir(const char *model, const char *sub, int rmax, double tol)
{
    golden g;
    if (golden_load_file(&g, model, sub, "expected.safetensors")) {
        CU_FAIL("golden data");
        golden_free(&g);
        return;
    }
    numla_isa isa = numla_isa_best();
    double worst = 0;
    int team = omp_get_max_threads();
    omp_set_num_threads(1); /* R rank threads already; see check_model */
    for (int R = 2; R <= rmax; R++) {
        shm_reduce sh = {.nranks = R};
        pthread_barrier_init(&sh.bar, NULL, (unsigned)R);
        rank_ctx rc[4];
        pthread_t th[4];
        int opened = 1;
        for (int r = 0; r < R && opened; r++) {
            rc[r] = (rank_ctx){.sh = &sh, .rank = r};
            opened = eng_open_rank(&rc[r].e, g.dir, NUMLA_DTYPE_F32, isa, r, R) == 0;
            if (!opened)
                break;
            numla_model_set_reduce(rc[r].e.m, shm_reduce_fn, &rc[r]);
            sh.cap = 128 * rc[r].e.cfg.hidden_size;
            sh.slot[r] = malloc(sizeof(float) * (size_t)sh.cap);
            rc[r].logits = malloc(sizeof(float) * 128 * (size_t)rc[r].e.w->shard.vocab_count);
        }
        CU_ASSERT_TRUE_FATAL(opened);
        for (int p = 0; p < g.nprompts; p++) {
            shard_job job = {&g, p};
            for (int r = 0; r < R; r++) {
                rc[r].job = &job;
                pthread_create(&th[r], NULL, golden_rank_main, &rc[r]);
            }
            for (int r = 0; r < R; r++)
                pthread_join(th[r], NULL);
            char name[64];
            snprintf(name, sizeof name, "prompt%d.logits", p);
            int64_t rows = 0, V = 0;
            const float *ref = st_f32(g.expected, name, &rows, &V);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
            double err = 0;
            for (int r = 0; r < R; r++) {
                CU_ASSERT_TRUE(rc[r].ok);
                const numla_shard *s = &rc[r].e.w->shard;
                for (int64_t t = 0; t < rows; t++)
                    for (int64_t v = 0; v < s->vocab_count; v++)
                        err = fmax(err, fabs(rc[r].logits[t * s->vocab_count + v] -
                                             ref[t * V + s->vocab_begin + v]));
            }
            worst = fmax(worst, err);
            NUMLA_ASSERT_MSG(err <= tol, "%s %s %d ranks prompt %d: logits max err %g", model, sub,
                             R, p, err);
        }
        for (int r = 0; r < R; r++) {
            free(rc[r].logits);
            free(sh.slot[r]);
            eng_close(&rc[r].e);
        }
        pthread_barrier_destroy(&sh.bar);
    }
    omp_set_num_threads(team);
    fprintf(stderr, "\n    golden %-6s %-10s 2-%d in-process ranks (f32 kv): logits max abs err %.3g",
            model, *sub ? sub : "fp32", rmax, worst);
    golden_free(&g);
}

static void check_sharded(const char *model) { check_sharded_dir(model, "", 4, LOGIT_TOL); }


/* 8-bit checkpoints in the published formats (tests/golden/README.md "8-bit variants"):
 * model_fp8/ (DeepSeek FP8, 128x128 block scales; v3's split over two shards) and model_int8/
 * (SGLang w8a8_int8, per-row scales). Both references come from transformers on the
 * dequantized weights; model_int8's applies SGLang's per-token W8A8 activation rule
 * (kernels/qlinear.h) to every quantized linear but those whose input numla keeps in fp32:
 * kv_b_proj (absorbed as W_UK / W_UV) and the row-parallel o_proj and dense / shared-expert
 * down_proj (engine/model/weights.c LD_FP32_ACTIVATIONS), so any rank count gives the same.
 * Tolerances, from the README's calibration:
 *   fp8, fp32 activations: fp32-class, LOGIT_TOL (fp64-vs-fp32 spread of the reference <= 7.6e-5);
 *   int8 W8A8: LOGIT_TOL too. The activation rounding is reproduced exactly, but an engine's x
 *     differs from the reference's in the last bits, which can move an int8 code by one; the
 *     golden prompts were chosen so that neither the fp64 run nor two runs with every quantized
 *     input perturbed by up to 4 ulp move any logit by more than 5e-4 (measured <= 6.5e-5). A
 *     failure far above LOGIT_TOL that starts at one position and grows after it is such a
 *     rounding cascade, not necessarily a bug: compare the W8A8 path against the scalar reference.
 * Every configuration runs the greedy check (16 tokens, margins >= 0.015). */
static void check_quant(const char *model, const char *fmt)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int nisa = numla_test_isas(isas);
    numla_isa best = isas[nisa - 1];
    char sub[32], what[2][64];
    snprintf(sub, sizeof sub, "model_%s", fmt);
    snprintf(what[0], sizeof what[0], "%s weights, best isa, f32 kv", fmt);
    snprintf(what[1], sizeof what[1], "%s weights, ref isa, expanded prefill", fmt);
    const golden_cfg cfgs[] = {
        {0, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 1, what[0], NUMLA_PREFILL_FORM_AUTO, 0},
        {0, NUMLA_ISA_REF, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 1, what[1],
         NUMLA_PREFILL_FORM_EXPANDED, 0},
    };
    golden g;
    if (golden_load_file(&g, model, sub, "expected.safetensors")) {
        CU_FAIL("golden data");
        golden_free(&g);
        return;
    }
    int team = omp_get_max_threads();
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        if (i > 0)
            omp_set_num_threads(1); /* see check_model */
        run_cfg(model, &g, &cfgs[i]);
        omp_set_num_threads(team);
    }
    golden_free(&g);
    check_sharded_dir(model, sub, 3, LOGIT_TOL);
}

#endif
