/* engine/model/weights.c — load one rank's shard into owned anonymous memory (see weights.h).
 *
 * Two passes over the same plan: pass 0 validates every tensor (collecting every problem into
 * one message) and sums the bytes; pass 1 copies/packs into one anonymous mapping sized by
 * pass 0, so the shard is a single huge-page-backed region and nothing runs from file pages
 * (DESIGN.md §3).
 */
#include "engine/model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void numla_shard_range(int64_t n, int32_t rank, int32_t nranks, int64_t *begin, int64_t *count)
{
    int64_t base = n / nranks, rem = n % nranks;
    *count = base + (rank < rem ? 1 : 0);
    *begin = (int64_t)rank * base + (rank < rem ? rank : rem);
}

numla_status numla_shard_plan(const numla_model_config *cfg, int32_t rank, int32_t nranks,
                              numla_shard *out)
{
    if (nranks < 1 || rank < 0 || rank >= nranks)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "shard: rank %d of %d is not valid", rank, nranks);
    if (nranks > cfg->num_attention_heads)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "shard: %d ranks for %lld attention heads leaves a rank without heads",
                   nranks, (long long)cfg->num_attention_heads);
    numla_shard s = {.rank = rank, .nranks = nranks};
    numla_shard_range(cfg->num_attention_heads, rank, nranks, &s.head_begin, &s.head_count);
    numla_shard_range(cfg->intermediate_size, rank, nranks, &s.inter_begin, &s.inter_count);
    numla_shard_range(cfg->n_shared_experts * cfg->moe_intermediate_size, rank, nranks,
                      &s.shared_begin, &s.shared_count);
    numla_shard_range(cfg->n_routed_experts, rank, nranks, &s.expert_begin, &s.expert_count);
    numla_shard_range(cfg->vocab_size, rank, nranks, &s.vocab_begin, &s.vocab_count);
    *out = s;
    return NUMLA_STATUS_OK;
}

typedef struct loader {
    const numla_model_config *cfg;
    const numla_safetensors_model *st;
    numla_isa isa;
    int pass;           /* 0: validate + size, 1: copy */
    char *arena;        /* pass 1 */
    size_t used;
    size_t loaded;
    char problems[8192];
    size_t problems_len;
    int num_problems;
} loader;

static void ld_problem(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ld_problem(loader *L, const char *fmt, ...)
{
    L->num_problems++;
    if (L->problems_len + 200 > sizeof L->problems) {
        if (L->problems_len + 8 < sizeof L->problems && !strstr(L->problems, "\n  ..."))
            L->problems_len += (size_t)snprintf(L->problems + L->problems_len,
                                                sizeof L->problems - L->problems_len, "\n  ...");
        return;
    }
    L->problems_len += (size_t)snprintf(L->problems + L->problems_len,
                                        sizeof L->problems - L->problems_len, "\n  ");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(L->problems + L->problems_len, sizeof L->problems - L->problems_len, fmt, ap);
    va_end(ap);
    if (n > 0)
        L->problems_len += (size_t)n;
    if (L->problems_len >= sizeof L->problems)
        L->problems_len = sizeof L->problems - 1;
}

/* The tensor with the given shape, or NULL (pass 0 records why). */
static const numla_safetensors_tensor *ld_get(loader *L, const char *name, int32_t ndim,
                                     const int64_t *shape)
{
    const numla_safetensors_tensor *t = numla_safetensors_find(L->st, name);
    if (L->pass == 1)
        return t;
    if (!t) {
        ld_problem(L, "missing %s", name);
        return NULL;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[128] = "", want[128] = "";
        size_t g = 0, w = 0;
        for (int i = 0; i < t->ndim && g < 100; i++)
            g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        for (int i = 0; i < ndim && w < 100; i++)
            w += (size_t)snprintf(want + w, sizeof want - w, "%s%lld", i ? ", " : "",
                                  (long long)shape[i]);
        ld_problem(L, "%s has shape (%s), expected (%s)", name, got, want);
        return NULL;
    }
    return t;
}

static void *ld_take(loader *L, size_t bytes)
{
    size_t at = (L->used + 63) & ~(size_t)63;
    L->used = at + bytes;
    return L->pass == 1 ? L->arena + at : NULL;
}

static numla_status ld_norm(loader *L, const char *name, int64_t n, float **out)
{
    int64_t shape[1] = {n};
    const numla_safetensors_tensor *t = ld_get(L, name, 1, shape);
    float *dst = ld_take(L, (size_t)n * 4);
    *out = dst;
    if (L->pass == 1) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = numla_load_f32(t->data, t->dtype, (size_t)i);
        L->loaded += t->nbytes;
    }
    return NUMLA_STATUS_OK;
}

/* Pack rows [r0, r0+n) × columns [c0, c0+k) of a (full_n, full_k) tensor. */
static numla_status ld_linear(loader *L, const char *name, int64_t full_n, int64_t full_k,
                              int64_t r0, int64_t n, int64_t c0, int64_t k,
                              numla_linear_weight *out)
{
    int64_t shape[2] = {full_n, full_k};
    const numla_safetensors_tensor *t = ld_get(L, name, 2, shape);
    memset(out, 0, sizeof *out);
    if (n == 0 || k == 0)
        return NUMLA_STATUS_OK;
    numla_dtype dt = t ? t->dtype : NUMLA_DTYPE_BF16;
    size_t bytes = numla_linear_packed_size(L->isa, n, k, dt);
    void *dst = ld_take(L, bytes);
    if (L->pass == 1) {
        const char *src = (const char *)t->data +
                          ((size_t)r0 * (size_t)full_k + (size_t)c0) * numla_dtype_size(dt);
        NUMLA_CHECK(numla_linear_pack(L->isa, n, k, src, dt, full_k, dst, out));
        L->loaded += (size_t)n * (size_t)k * numla_dtype_size(dt);
    }
    return NUMLA_STATUS_OK;
}

static numla_status ld_mlp(loader *L, const char *prefix, int64_t full_inter, int64_t i0,
                           int64_t ni, numla_mlp_weights *m)
{
    const int64_t hid = L->cfg->hidden_size;
    char name[256];
    m->inter = ni;
    snprintf(name, sizeof name, "%sgate_proj.weight", prefix);
    NUMLA_CHECK(ld_linear(L, name, full_inter, hid, i0, ni, 0, hid, &m->gate));
    snprintf(name, sizeof name, "%sup_proj.weight", prefix);
    NUMLA_CHECK(ld_linear(L, name, full_inter, hid, i0, ni, 0, hid, &m->up));
    snprintf(name, sizeof name, "%sdown_proj.weight", prefix);
    NUMLA_CHECK(ld_linear(L, name, hid, full_inter, 0, hid, i0, ni, &m->down));
    return NUMLA_STATUS_OK;
}

/* kv_b_proj (H · (nope + v), Dc) → per owned head uk_t (Dc, nope) and uv (v, Dc). */
static numla_status ld_kv_b(loader *L, const char *name, const numla_shard *sh,
                            numla_layer_weights *lw)
{
    const numla_model_config *c = L->cfg;
    const int64_t nope = c->qk_nope_head_dim, vd = c->v_head_dim, dc = c->kv_lora_rank;
    int64_t shape[2] = {c->num_attention_heads * (nope + vd), dc};
    const numla_safetensors_tensor *t = ld_get(L, name, 2, shape);
    numla_dtype dt = t ? t->dtype : NUMLA_DTYPE_BF16;
    size_t es = numla_dtype_size(dt);
    char *tmp = NULL;
    if (L->pass == 1) {
        tmp = malloc((size_t)dc * (size_t)nope * es);
        if (!tmp)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for the W_UK transpose", name);
    }
    numla_status s = NUMLA_STATUS_OK;
    for (int64_t hh = 0; hh < sh->head_count; hh++) {
        int64_t h = sh->head_begin + hh;
        size_t uk_bytes = numla_linear_packed_size(L->isa, dc, nope, dt);
        size_t uv_bytes = numla_linear_packed_size(L->isa, vd, dc, dt);
        void *uk = ld_take(L, uk_bytes);
        void *uv = ld_take(L, uv_bytes);
        if (L->pass != 1)
            continue;
        const char *rows = (const char *)t->data + (size_t)h * (size_t)(nope + vd) * (size_t)dc * es;
        for (int64_t j = 0; j < nope; j++)
            for (int64_t cc = 0; cc < dc; cc++)
                memcpy(tmp + ((size_t)cc * (size_t)nope + (size_t)j) * es,
                       rows + ((size_t)j * (size_t)dc + (size_t)cc) * es, es);
        s = numla_linear_pack(L->isa, dc, nope, tmp, dt, nope, uk, &lw->uk_t[hh]);
        if (s != NUMLA_STATUS_OK)
            break;
        s = numla_linear_pack(L->isa, vd, dc, rows + (size_t)nope * (size_t)dc * es, dt, dc, uv,
                              &lw->uv[hh]);
        if (s != NUMLA_STATUS_OK)
            break;
        L->loaded += (size_t)(nope + vd) * (size_t)dc * es;
    }
    free(tmp);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

static numla_status ld_layer(loader *L, int64_t l, const numla_shard *sh, numla_layer_weights *lw)
{
    const numla_model_config *c = L->cfg;
    const int64_t hid = c->hidden_size, H = c->num_attention_heads, qhd = c->q_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim;
    char p[96], name[256];
    snprintf(p, sizeof p, "model.layers.%lld.", (long long)l);
#define NAME(suffix) (snprintf(name, sizeof name, "%s%s", p, suffix), name)
    NUMLA_CHECK(ld_norm(L, NAME("input_layernorm.weight"), hid, &lw->input_norm));
    NUMLA_CHECK(ld_norm(L, NAME("post_attention_layernorm.weight"), hid, &lw->post_attn_norm));
    int64_t h0 = sh->head_begin, nh = sh->head_count;
    if (c->q_lora_rank == 0) {
        NUMLA_CHECK(ld_linear(L, NAME("self_attn.q_proj.weight"), H * qhd, hid, h0 * qhd,
                              nh * qhd, 0, hid, &lw->q_proj));
    } else {
        int64_t r = c->q_lora_rank;
        NUMLA_CHECK(ld_linear(L, NAME("self_attn.q_a_proj.weight"), r, hid, 0, r, 0, hid,
                              &lw->q_a_proj));
        NUMLA_CHECK(ld_norm(L, NAME("self_attn.q_a_layernorm.weight"), r, &lw->q_a_norm));
        NUMLA_CHECK(ld_linear(L, NAME("self_attn.q_b_proj.weight"), H * qhd, r, h0 * qhd,
                              nh * qhd, 0, r, &lw->q_b_proj));
    }
    NUMLA_CHECK(ld_linear(L, NAME("self_attn.kv_a_proj_with_mqa.weight"), dc + dr, hid, 0,
                          dc + dr, 0, hid, &lw->kv_a_proj));
    NUMLA_CHECK(ld_norm(L, NAME("self_attn.kv_a_layernorm.weight"), dc, &lw->kv_a_norm));
    NUMLA_CHECK(ld_kv_b(L, NAME("self_attn.kv_b_proj.weight"), sh, lw));
    {
        /* The same rows once more, whole, for the expanded prefill form (engine/model/model.c); not
         * counted again in loaded_bytes. */
        const int64_t hw = c->qk_nope_head_dim + c->v_head_dim;
        const size_t before = L->loaded;
        NUMLA_CHECK(ld_linear(L, NAME("self_attn.kv_b_proj.weight"), H * hw, dc,
                              sh->head_begin * hw, sh->head_count * hw, 0, dc, &lw->kv_b));
        L->loaded = before;
    }
    NUMLA_CHECK(ld_linear(L, NAME("self_attn.o_proj.weight"), hid, H * c->v_head_dim, 0, hid,
                          h0 * c->v_head_dim, nh * c->v_head_dim, &lw->o_proj));

    lw->is_moe = numla_model_config_is_moe_layer(c, l);
    if (!lw->is_moe) {
        NUMLA_CHECK(ld_mlp(L, NAME("mlp."), c->intermediate_size, sh->inter_begin,
                           sh->inter_count, &lw->dense));
        return NUMLA_STATUS_OK;
    }
    const int64_t E = c->n_routed_experts;
    {
        /* packed as fp32 whatever the file's dtype: routing is computed in fp32 (DESIGN.md §5) */
        int64_t shape[2] = {E, hid};
        const numla_safetensors_tensor *t = ld_get(L, NAME("mlp.gate.weight"), 2, shape);
        void *dst = ld_take(L, numla_linear_packed_size(L->isa, E, hid, NUMLA_DTYPE_F32));
        memset(&lw->router, 0, sizeof lw->router);
        if (L->pass == 1) {
            float *tmp = malloc((size_t)(E * hid) * sizeof(float));
            if (!tmp)
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory for a router of %lld x %lld",
                           (long long)E, (long long)hid);
            for (int64_t i = 0; i < E * hid; i++)
                tmp[i] = numla_load_f32(t->data, t->dtype, (size_t)i);
            numla_status s = numla_linear_pack(L->isa, E, hid, tmp, NUMLA_DTYPE_F32, hid, dst,
                                               &lw->router);
            free(tmp);
            NUMLA_CHECK(s);
            L->loaded += t->nbytes;
        }
    }
    lw->router_bias = NULL;
    if (c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC)
        NUMLA_CHECK(ld_norm(L, NAME("mlp.gate.e_score_correction_bias"), E, &lw->router_bias));
    for (int64_t ee = 0; ee < sh->expert_count; ee++) {
        char ep[160];
        snprintf(ep, sizeof ep, "%smlp.experts.%lld.", p, (long long)(sh->expert_begin + ee));
        NUMLA_CHECK(ld_mlp(L, ep, c->moe_intermediate_size, 0, c->moe_intermediate_size,
                           &lw->experts[ee]));
    }
    memset(&lw->shared, 0, sizeof lw->shared);
    if (c->n_shared_experts > 0)
        NUMLA_CHECK(ld_mlp(L, NAME("mlp.shared_experts."),
                           c->n_shared_experts * c->moe_intermediate_size, sh->shared_begin,
                           sh->shared_count, &lw->shared));
#undef NAME
    return NUMLA_STATUS_OK;
}

static numla_status ld_model(loader *L, numla_model_weights *w)
{
    const numla_model_config *c = L->cfg;
    const int64_t hid = c->hidden_size, V = c->vocab_size;
    int64_t shape[2] = {V, hid};
    const numla_safetensors_tensor *emb = ld_get(L, "model.embed_tokens.weight", 2, shape);
    w->embed_dtype = emb ? emb->dtype : NUMLA_DTYPE_BF16;
    size_t emb_bytes = (size_t)V * (size_t)hid * numla_dtype_size(w->embed_dtype);
    w->embed = ld_take(L, emb_bytes);
    if (L->pass == 1) {
        memcpy(w->embed, emb->data, emb_bytes);
        L->loaded += emb_bytes;
    }
    int tty = L->pass == 1 && isatty(2);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        if (tty)
            fprintf(stderr, "\rnumla: loading weights: layer %lld/%lld", (long long)(l + 1),
                    (long long)c->num_hidden_layers);
        NUMLA_CHECK(ld_layer(L, l, &w->shard, &w->layers[l]));
    }
    if (tty)
        fprintf(stderr, "\n");
    NUMLA_CHECK(ld_norm(L, "model.norm.weight", hid, &w->final_norm));
    const char *head = c->tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    NUMLA_CHECK(ld_linear(L, head, V, hid, w->shard.vocab_begin, w->shard.vocab_count, 0, hid,
                          &w->lm_head));
    return NUMLA_STATUS_OK;
}

void numla_weights_destroy(numla_model_weights **pw)
{
    if (!pw || !*pw)
        return;
    numla_model_weights *w = *pw;
    if (w->layers) {
        for (int64_t l = 0; l < w->cfg.num_hidden_layers; l++) {
            free(w->layers[l].uk_t);
            free(w->layers[l].uv);
            free(w->layers[l].experts);
        }
        free(w->layers);
    }
    if (w->arena)
        munmap(w->arena, w->arena_bytes);
    free(w);
    *pw = NULL;
}

numla_status numla_weights_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                int32_t rank, int32_t nranks, numla_isa isa,
                                numla_model_weights **out)
{
    if (!cfg || !st || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_weights_load: NULL argument");
    *out = NULL;
    numla_model_weights *w = calloc(1, sizeof *w);
    if (!w)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory");
    w->cfg = *cfg;
    w->isa = isa;
    numla_status s = numla_shard_plan(cfg, rank, nranks, &w->shard);
    if (s != NUMLA_STATUS_OK) {
        numla_weights_destroy(&w);
        NUMLA_CHECK(s);
    }
    w->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *w->layers);
    s = w->layers ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    for (int64_t l = 0; s == NUMLA_STATUS_OK && l < cfg->num_hidden_layers; l++) {
        numla_layer_weights *lw = &w->layers[l];
        lw->uk_t = calloc((size_t)w->shard.head_count, sizeof *lw->uk_t);
        lw->uv = calloc((size_t)w->shard.head_count, sizeof *lw->uv);
        lw->experts = calloc((size_t)(w->shard.expert_count + 1), sizeof *lw->experts);
        if (!lw->uk_t || !lw->uv || !lw->experts)
            s = NUMLA_STATUS_NO_MEMORY;
    }
    if (s != NUMLA_STATUS_OK) {
        numla_weights_destroy(&w);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory for the layer tables");
    }

    loader *L = calloc(1, sizeof *L);
    if (!L) {
        numla_weights_destroy(&w);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory");
    }
    L->cfg = cfg;
    L->st = st;
    L->isa = isa;
    L->pass = 0;
    s = ld_model(L, w);
    if (s == NUMLA_STATUS_OK && L->num_problems) {
        numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                        "weights: %d tensor problem%s:%s", L->num_problems,
                        L->num_problems > 1 ? "s" : "", L->problems);
        s = NUMLA_STATUS_FORMAT;
    }
    if (s == NUMLA_STATUS_OK) {
        const size_t huge = 2u << 20;
        w->arena_bytes = (L->used + huge - 1) / huge * huge;
        if (w->arena_bytes == 0)
            w->arena_bytes = huge;
        void *a = mmap(NULL, w->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (a == MAP_FAILED) {
            w->arena = NULL;
            numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "weights: cannot map %zu bytes for the shard", w->arena_bytes);
            s = NUMLA_STATUS_NO_MEMORY;
        } else {
            w->arena = a;
#ifdef MADV_HUGEPAGE
            (void)madvise(a, w->arena_bytes, MADV_HUGEPAGE); /* best effort */
#endif
            L->pass = 1;
            L->arena = a;
            L->used = 0;
            s = ld_model(L, w);
            w->loaded_bytes = L->loaded;
        }
    }
    free(L);
    if (s != NUMLA_STATUS_OK) {
        numla_weights_destroy(&w);
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    *out = w;
    return NUMLA_STATUS_OK;
}
