/* engine/model/model_v4.c — DeepSeek-V4 on one rank (model_v4.h; the math: docs/design.md
 * §5.9). Loading, the per-sequence cache, and the forward: mHC around each block, shared-KV
 * attention over the window and the compressed entries, MoE. */
#define _GNU_SOURCE /* mremap */
#include "engine/model/model_v4.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/dtype.h"
#include "common/log.h"
#include "kernels/dsa.h"
#include "kernels/linear.h"
#include "kernels/qblock.h"
#include "kernels/qblock_quant.h"
#include "kernels/qlinear.h"
#include "kernels/sink_attn.h"

/* ---- weights ---- */

/* A linear (n, k): bf16/f32 through kernels/linear.h, MXFP4 blocks through kernels/qblock.h
 * (the published FP4 experts, repacked losslessly), or the published FP8 e4m3 projections as
 * stored through kernels/qlinear.h. */
typedef struct v4_lin {
    int blocks;              /* 1: q, else w (or f8) */
    int fp8;                 /* 1: f8 */
    numla_qlinear_weight f8; /* (n, k) FP8 e4m3 with its 128 x 128 block scales */
    numla_linear_weight w;   /* (n, k) packed */
    numla_qblock_weight q;   /* (n, k) MXFP4 */
    int64_t n, k;
    void *buf;               /* owned packing */
    size_t bytes;            /* of buf */
} v4_lin;

/* A compressor (docs/design.md §5.9): HCA (c = 1) or the overlapping CSA scheme (c = 2), at
 * output width `width` (head_dim for the attention's, index_head_dim for the indexer's). */
typedef struct v4_comp {
    int c;
    int64_t width, rate;
    v4_lin wkv, wgate; /* (c·width, D) */
    float *ape;        /* (rate, c·width) */
    float *norm;       /* (width) */
} v4_comp;

typedef struct v4_layer {
    numla_v4_attn attn;
    int hash;
    float *attn_norm, *ffn_norm;      /* (D) */
    v4_lin hc_fn[2];                  /* attn, ffn: ((2+n)·n, n·D) fp32 */
    float *hc_base[2];                /* ((2+n)·n) */
    float *hc_scale[2];               /* (3) */
    v4_lin wq_a, wq_b, wkv;           /* (Rq, D), (H·Dh, Rq), (Dh, D) */
    float *q_norm, *kv_norm, *sink;   /* (Rq), (Dh), (H) */
    v4_lin *wo_a;                     /* G of (Ro, H·Dh/G) */
    v4_lin wo_b;                      /* (D, G·Ro) */
    v4_comp comp, icomp;              /* CSA/HCA compressor; CSA: the indexer's */
    v4_lin iwq_b, iweights;           /* CSA: (Hi·Di, Rq), (Hi, D) */
    v4_lin gate;                      /* (E, D) fp32 */
    float *gate_bias;                 /* (E), routed layers */
    int32_t *tid2eid;                 /* (V, k), hash layers */
    v4_lin *w1, *w2, *w3;             /* E each: (I, D), (D, I), (I, D) */
    v4_lin sw1, sw2, sw3;             /* shared expert */
} v4_layer;

struct numla_v4_model {
    numla_model_config cfg;
    numla_isa isa;
    /* the levels the options choose for the linears (numla_v4_model_set_options): float and
     * MXFP4 weights at the LINEAR family's, FP8 ones at QLINEAR's, as the MLA path's model
     * runs them; isa_cpu: the best level this CPU has, which caps what the kernels are given */
    numla_isa isa_linear, isa_qlinear, isa_cpu;
    /* linear forwards per family (0: LINEAR, 1: QLINEAR) and level (numla_v4_model_linear_calls);
     * forwards take a const model and add through a cast, relaxed atomics */
    uint64_t lin_calls[2][NUMLA_ISA_COUNT];
    struct v4_scratch *scr;           /* the forwards' buffers (v4_room) */
    /* this rank's part (model_v4.h): whole o_groups and their heads; experts, the shared
     * expert's intermediate columns and the vocabulary rows as numla_shard_plan says */
    int64_t g0, gcount;               /* o_groups [g0, g0 + gcount) */
    int64_t h0, hcount;               /* heads [h0, h0 + hcount) */
    numla_shard shard;
    numla_model_reduce_fn reduce;     /* sum over the ranks (NULL with one rank) */
    void *reduce_ctx;
    int cache_bf16;                   /* the sequences' window rows and compressed entries are
                                       * bf16 (numla_v4_model_set_cache_dtype), else fp32 */
    float *embed;                     /* (V, D) */
    float *norm;                      /* (D) */
    v4_lin head;                      /* (V, D) */
    v4_lin hc_head_fn;                /* (n, n·D) fp32 */
    float *hc_head_base, *hc_head_scale; /* (n), (1) */
    v4_layer *layers;                 /* (L), (L + 1) with the MTP layer: its block is layers[L] */
    /* the MTP layer (cfg.mtp_enabled; docs/design.md §5.9), on every rank but its block's heads,
     * experts (sharded like a layer) and the head it shares */
    int has_mtp;
    int ld_q8;                 /* V4_LD_Q8 where the load options ask block-quantized
                                  linears for int8 activations, else 0 */
    v4_lin mtp_e_proj, mtp_h_proj;    /* (D, D) each */
    float *mtp_enorm, *mtp_hnorm, *mtp_norm; /* (D) */
    v4_lin mtp_hc_head_fn;            /* (n, n·D) fp32 */
    float *mtp_hc_head_base, *mtp_hc_head_scale; /* (n), (1) */
};

/* The buffers of a forward, one per use (the uses nest: a linear's workspace inside a layer's
 * attention inside the forward), kept by the model between forwards and grown only when a step
 * needs more, as engine/model/scratch.c keeps the MLA path's: a forward allocates nothing once
 * steps of its shapes have run. The main and the MTP forward share them (they do not nest), so
 * a model runs one forward at a time. */
typedef enum v4_slot {
    /* the forward (numla_v4_forward_rows, numla_v4_mtp_forward) */
    V4_S_START, V4_S_SUBS, V4_S_TOKENS, V4_S_X, V4_S_XIN, V4_S_BOUT, V4_S_POST, V4_S_COMB,
    V4_S_FLAT, V4_S_Y,
    /* a layer's attention */
    V4_S_PREV, V4_S_WOFF, V4_S_RSEQ, V4_S_RPOS, V4_S_QR, V4_S_Q, V4_S_KVN, V4_S_WIN, V4_S_O,
    V4_S_YG, V4_S_TMP, V4_S_YO, V4_S_CK, V4_S_CG, V4_S_QI, V4_S_IW, V4_S_WP, V4_S_EP, V4_S_ETAB,
    V4_S_WL, V4_S_NSEL, V4_S_SEL, V4_S_SINK_WS,
    /* the indexer's selection (v4_select) */
    V4_S_IDX_W, V4_S_IDX_LENS, V4_S_IDX_WS,
    /* a layer's MoE and its decode experts (experts_team) */
    V4_S_LOGIT, V4_S_G, V4_S_U, V4_S_D, V4_S_XS, V4_S_ESEL, V4_S_ROWS, V4_S_WSEL, V4_S_WROW,
    V4_S_USED, V4_S_TEAM_G, V4_S_TEAM_U, V4_S_TEAM_D, V4_S_TEAM_J, V4_S_TEAM_WS,
    /* a linear's workspace (lin) */
    V4_S_LIN,
    V4_S_COUNT
} v4_slot;

typedef struct v4_scratch {
    void *p[V4_S_COUNT];
    size_t cap[V4_S_COUNT]; /* bytes */
    uint64_t grows;         /* allocations made (numla_v4_model_scratch_grows) */
} v4_scratch;

static void v4_scratch_free(v4_scratch *sc)
{
    for (int i = 0; sc && i < V4_S_COUNT; i++)
        free(sc->p[i]);
    free(sc);
}

/* Slot s of m's scratch with room for at least `bytes` (64-byte aligned; never NULL for 0
 * bytes), or NULL without memory. What it held is not kept when it grows: a use asks for its
 * room before it writes. */
static void *v4_room(const numla_v4_model *m, v4_slot s, size_t bytes)
{
    v4_scratch *sc = m->scr;
    if (!sc->p[s] || bytes > sc->cap[s]) {
        size_t cap = sc->cap[s] + sc->cap[s] / 2; /* a growing prompt grows it a few times */
        cap = bytes > cap ? bytes : cap;
        cap = cap ? (cap + 63) & ~(size_t)63 : 64;
        void *p = aligned_alloc(64, cap);
        if (!p)
            return NULL;
        free(sc->p[s]);
        sc->p[s] = p;
        sc->cap[s] = cap;
        sc->grows++;
    }
    return sc->p[s];
}

uint64_t numla_v4_model_scratch_grows(const numla_v4_model *m) { return m ? m->scr->grows : 0; }

static void lin_free(v4_lin *l)
{
    free(l->buf);
    l->buf = NULL;
}

static void comp_free(v4_comp *c)
{
    lin_free(&c->wkv);
    lin_free(&c->wgate);
    free(c->ape);
    free(c->norm);
}

void numla_v4_model_destroy(numla_v4_model **pm)
{
    if (!pm || !*pm)
        return;
    numla_v4_model *m = *pm;
    const numla_model_config *c = &m->cfg;
    for (int64_t l = 0; m->layers && l < c->num_hidden_layers + m->has_mtp; l++) {
        v4_layer *y = &m->layers[l];
        free(y->attn_norm);
        free(y->ffn_norm);
        for (int i = 0; i < 2; i++) {
            lin_free(&y->hc_fn[i]);
            free(y->hc_base[i]);
            free(y->hc_scale[i]);
        }
        lin_free(&y->wq_a);
        lin_free(&y->wq_b);
        lin_free(&y->wkv);
        free(y->q_norm);
        free(y->kv_norm);
        free(y->sink);
        for (int64_t g = 0; y->wo_a && g < m->gcount; g++)
            lin_free(&y->wo_a[g]);
        free(y->wo_a);
        lin_free(&y->wo_b);
        comp_free(&y->comp);
        comp_free(&y->icomp);
        lin_free(&y->iwq_b);
        lin_free(&y->iweights);
        lin_free(&y->gate);
        free(y->gate_bias);
        free(y->tid2eid);
        for (int64_t e = 0; e < m->shard.expert_count; e++) {
            if (y->w1) lin_free(&y->w1[e]);
            if (y->w2) lin_free(&y->w2[e]);
            if (y->w3) lin_free(&y->w3[e]);
        }
        free(y->w1);
        free(y->w2);
        free(y->w3);
        lin_free(&y->sw1);
        lin_free(&y->sw2);
        lin_free(&y->sw3);
    }
    free(m->layers);
    free(m->embed);
    free(m->norm);
    lin_free(&m->head);
    lin_free(&m->hc_head_fn);
    free(m->hc_head_base);
    free(m->hc_head_scale);
    lin_free(&m->mtp_e_proj);
    lin_free(&m->mtp_h_proj);
    free(m->mtp_enorm);
    free(m->mtp_hnorm);
    free(m->mtp_norm);
    lin_free(&m->mtp_hc_head_fn);
    free(m->mtp_hc_head_base);
    free(m->mtp_hc_head_scale);
    v4_scratch_free(m->scr);
    free(m);
    *pm = NULL;
}

const numla_model_config *numla_v4_model_config(const numla_v4_model *m) { return &m->cfg; }

static size_t comp_bytes(const v4_comp *c)
{
    return c->wkv.bytes + c->wgate.bytes;
}

/* One linear a token reads: its bytes and 2·n·k FLOPs, times `times`. */
static void tok_add(const v4_lin *l, double times, double *bytes, double *flops)
{
    *bytes += times * (double)l->bytes;
    *flops += times * 2.0 * (double)l->n * (double)l->k;
}

void numla_v4_model_token_costs(const numla_v4_model *m, numla_v4_token_costs *out)
{
    const numla_model_config *c = &m->cfg;
    memset(out, 0, sizeof *out);
    double *ab = &out->attn_bytes, *mb = &out->mlp_bytes, *fl = &out->linear_flops;
    const double k = (double)c->num_experts_per_tok, E = (double)m->shard.expert_count;
    for (int64_t l = 0; m->layers && l < c->num_hidden_layers; l++) {
        const v4_layer *y = &m->layers[l];
        tok_add(&y->hc_fn[0], 1, ab, fl);
        tok_add(&y->hc_fn[1], 1, mb, fl);
        tok_add(&y->wq_a, 1, ab, fl);
        tok_add(&y->wq_b, 1, ab, fl);
        tok_add(&y->wkv, 1, ab, fl);
        for (int64_t g = 0; y->wo_a && g < m->gcount; g++)
            tok_add(&y->wo_a[g], 1, ab, fl);
        tok_add(&y->wo_b, 1, ab, fl);
        if (y->attn != NUMLA_V4_ATTN_SLIDING) {
            tok_add(&y->comp.wkv, 1, ab, fl);
            tok_add(&y->comp.wgate, 1, ab, fl);
        }
        if (y->attn == NUMLA_V4_ATTN_CSA) {
            tok_add(&y->icomp.wkv, 1, ab, fl);
            tok_add(&y->icomp.wgate, 1, ab, fl);
            tok_add(&y->iwq_b, 1, ab, fl);
            tok_add(&y->iweights, 1, ab, fl);
        }
        if (!y->hash)
            tok_add(&y->gate, 1, mb, fl);
        tok_add(&y->sw1, 1, mb, fl);
        tok_add(&y->sw2, 1, mb, fl);
        tok_add(&y->sw3, 1, mb, fl);
        /* k routed experts at the mean size of this rank's */
        for (int64_t e = 0; y->w1 && E > 0 && e < m->shard.expert_count; e++) {
            tok_add(&y->w1[e], k / E, mb, fl);
            tok_add(&y->w2[e], k / E, mb, fl);
            tok_add(&y->w3[e], k / E, mb, fl);
        }
    }
    tok_add(&m->head, 1, &out->head_bytes, fl);
    tok_add(&m->hc_head_fn, 1, &out->head_bytes, fl);
    out->head_bytes += sizeof(float) * (double)c->hidden_size; /* the embedding row */
}

size_t numla_v4_model_weight_bytes(const numla_v4_model *m)
{
    const numla_model_config *c = &m->cfg;
    size_t b = sizeof(float) * (size_t)(c->vocab_size * c->hidden_size) + m->head.bytes +
               m->hc_head_fn.bytes;
    for (int64_t l = 0; m->layers && l < c->num_hidden_layers; l++) {
        const v4_layer *y = &m->layers[l];
        b += y->hc_fn[0].bytes + y->hc_fn[1].bytes + y->wq_a.bytes + y->wq_b.bytes +
             y->wkv.bytes + y->wo_b.bytes + comp_bytes(&y->comp) + comp_bytes(&y->icomp) +
             y->iwq_b.bytes + y->iweights.bytes + y->gate.bytes + y->sw1.bytes + y->sw2.bytes +
             y->sw3.bytes;
        for (int64_t g = 0; y->wo_a && g < m->gcount; g++)
            b += y->wo_a[g].bytes;
        for (int64_t e = 0; e < m->shard.expert_count; e++)
            b += (y->w1 ? y->w1[e].bytes : 0) + (y->w2 ? y->w2[e].bytes : 0) +
                 (y->w3 ? y->w3[e].bytes : 0);
    }
    return b;
}

const numla_shard *numla_v4_model_shard(const numla_v4_model *m) { return &m->shard; }

void numla_v4_model_set_options(numla_v4_model *m, const numla_model_options *o)
{
    m->isa_linear = numla_model_options_level(o, NUMLA_MODEL_KERNELS_LINEAR);
    m->isa_qlinear = numla_model_options_level(o, NUMLA_MODEL_KERNELS_QLINEAR);
    if (o->exact_activations) { /* as numla_model_lin_isa: fp32 activations at every M */
        m->isa_linear = numla_isa_min(m->isa_linear, NUMLA_ISA_AVX512);
        m->isa_qlinear = numla_isa_min(m->isa_qlinear, NUMLA_ISA_AVX512);
    }
    NUMLA_DEBUG("deepseek_v4 kernel levels for %s (%s): linear %s, 8-bit linear %s",
                numla_isa_name(o->isa), numla_uarch_name(o->uarch), numla_isa_name(m->isa_linear),
                numla_isa_name(m->isa_qlinear));
}

uint64_t numla_v4_model_linear_calls(const numla_v4_model *m, numla_model_kernels f, numla_isa level)
{
    if (!m || (f != NUMLA_MODEL_KERNELS_LINEAR && f != NUMLA_MODEL_KERNELS_QLINEAR) ||
        (unsigned)level >= NUMLA_ISA_COUNT)
        return 0;
    return __atomic_load_n(&m->lin_calls[f == NUMLA_MODEL_KERNELS_QLINEAR][level], __ATOMIC_RELAXED);
}

void numla_v4_model_set_reduce(numla_v4_model *m, numla_model_reduce_fn fn, void *ctx)
{
    m->reduce = fn;
    m->reduce_ctx = ctx;
}

/* buf (count) summed over the ranks; nothing with one rank. Collective. */
static numla_status v4_reduce(const numla_v4_model *m, float *buf, int64_t count)
{
    if (m->shard.nranks == 1)
        return NUMLA_STATUS_OK;
    if (!m->reduce)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4: %d ranks but no reduce hook set",
                   m->shard.nranks);
    NUMLA_CHECK(m->reduce(m->reduce_ctx, buf, count));
    return NUMLA_STATUS_OK;
}

/* The tensor `name` (or, when absent, `alt`) with the given shape. */
static numla_status ld_find(const numla_safetensors_model *st, const char *name, const char *alt,
                            int32_t ndim, const int64_t *shape, const numla_safetensors_tensor **out)
{
    if (alt && !numla_safetensors_find(st, name) && numla_safetensors_find(st, alt))
        name = alt;
    NUMLA_CHECK(numla_safetensors_expect(st, name, ndim, shape, out));
    const numla_dtype d = (*out)->dtype;
    if (d != NUMLA_DTYPE_F32 && d != NUMLA_DTYPE_BF16 && d != NUMLA_DTYPE_F16)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, BF16, F16 read)",
                   (*out)->file, name, numla_dtype_name(d));
    return NUMLA_STATUS_OK;
}

static numla_status ld_block_rows_f32(const numla_safetensors_tensor *t, const char *name,
                                      int64_t K, int64_t r0, int64_t nr, float *out);

/* An fp32 copy of a float tensor of `count` values (or of a GGUF block matrix). */
static numla_status ld_f32(const numla_safetensors_model *st, const char *name, const char *alt,
                           int32_t ndim, const int64_t *shape, float **out)
{
    const numla_safetensors_tensor *t;
    const numla_safetensors_tensor *b = numla_safetensors_find(st, name);
    if (b && b->dtype == NUMLA_DTYPE_END && ndim == 2) { /* a GGUF block tensor (an embedding) */
        NUMLA_CHECK(numla_safetensors_expect(st, name, ndim, shape, &t));
        float *f = malloc(sizeof(float) * (size_t)(shape[0] * shape[1]) + 1);
        if (!f)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s", name);
        numla_status s = ld_block_rows_f32(t, name, shape[1], 0, shape[0], f);
        if (s != NUMLA_STATUS_OK) {
            free(f);
            NUMLA_CHECK(s);
        }
        *out = f;
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(ld_find(st, name, alt, ndim, shape, &t));
    size_t n = 1;
    for (int32_t i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    size_t es = numla_dtype_size(t->dtype);
    void *raw = malloc(n * es + 1);
    float *f = malloc(n * sizeof *f + 1);
    if (!raw || !f) {
        free(raw);
        free(f);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s", name);
    }
    memcpy(raw, t->data, n * es);
    for (size_t i = 0; i < n; i++)
        f[i] = numla_load_f32(raw, t->dtype, i);
    free(raw);
    *out = f;
    return NUMLA_STATUS_OK;
}

/* Rows [r0, r0+nr) of a GGUF view's block tensor t ((N, K) elements, ggml type
 * t->ggml_type) as fp32 (nr, K). */
static numla_status ld_block_rows_f32(const numla_safetensors_tensor *t, const char *name,
                                      int64_t K, int64_t r0, int64_t nr, float *out)
{
    numla_qblock_type qt;
    if (numla_qblock_from_ggml(t->ggml_type, &qt) != NUMLA_STATUS_OK) {
        numla_error_clear();
        const numla_ggml_type_info *ti = numla_ggml_type_get(t->ggml_type);
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: tensor %s is ggml %s, an encoding numla does "
                   "not run (F32, F16, BF16 or a block type of kernels/qblock.h)", t->file, name,
                   ti ? ti->name : "?");
    }
    const size_t rb = t->nbytes / (size_t)t->shape[0];
    for (int64_t r = 0; r < nr; r++)
        NUMLA_CHECK(numla_qblock_dequant_ref(qt, (const char *)t->data + (size_t)(r0 + r) * rb, K,
                                             out + r * K));
    return NUMLA_STATUS_OK;
}

/* How the ld_* functions pack a matrix (their `flags`): V4_LD_F32 as fp32 whatever its
 * encoding; V4_LD_Q8 a block-quantized one (the FP4 experts, a GGUF file's blocks) with int8
 * activations where numla_qblock_act_for gives the level's Q8 kernel (llama.cpp's arithmetic,
 * numla_weights_options.qblock_q8_act), else fp32 activations (exact). */
enum { V4_LD_F32 = 1, V4_LD_Q8 = 2 };

/* The activation mode a block-quantized (N, k) matrix of type qt is packed for under flags. */
static numla_qblock_act ld_blocks_act(numla_isa isa, numla_qblock_type qt, int64_t k, int flags)
{
    return (flags & V4_LD_Q8) ? numla_qblock_act_for(isa, qt, k) : NUMLA_QBLOCK_ACT_F32;
}

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of a GGUF view's block tensor `name` (N, K) (the
 * converter's Q8_0 and MXFP4, or any ggml block type kernels/qblock.h runs): the file's blocks
 * with fp32 activations (or int8 ones with V4_LD_Q8, ld_blocks_act), or fp32 where a column
 * slice cuts a block or V4_LD_F32 asks. */
static numla_status ld_lin_blocks(numla_isa isa, const numla_safetensors_model *st,
                                  const char *name, int64_t N, int64_t K, int64_t r0, int64_t nr,
                                  int64_t c0, int64_t nc, int flags, v4_lin *out)
{
    const int force_f32 = flags & V4_LD_F32;
    const numla_safetensors_tensor *t;
    NUMLA_CHECK(numla_safetensors_expect(st, name, 2, (int64_t[]){N, K}, &t));
    numla_qblock_type qt;
    const numla_ggml_type_info *ti = numla_ggml_type_get(t->ggml_type);
    if (!ti || numla_qblock_from_ggml(t->ggml_type, &qt) != NUMLA_STATUS_OK) {
        numla_error_clear();
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: tensor %s is ggml %s, an encoding numla does "
                   "not run (F32, F16, BF16 or a block type of kernels/qblock.h)", t->file, name,
                   ti ? ti->name : "?");
    }
    const int64_t rb = (int64_t)(t->nbytes / (size_t)N);
    if (!force_f32 && c0 % ti->block == 0 && nc % ti->block == 0) {
        const numla_qblock_act act = ld_blocks_act(isa, qt, nc, flags);
        const numla_qblock_source src = {qt, nr, nc,
                                         (const char *)t->data + r0 * rb + c0 / ti->block * ti->bytes,
                                         rb, act, numla_qblock_layout_for(isa, qt, act, nc)};
        const size_t bytes = numla_qblock_layout_size(qt, src.layout, nr, nc);
        out->buf = aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64);
        numla_status s = out->buf ? numla_qblock_pack(&src, out->buf, &out->q) : NUMLA_STATUS_NO_MEMORY;
        if (s != NUMLA_STATUS_OK)
            NUMLA_FAIL(s, "v4 weights: packing %s (%s)", name, ti->name);
        out->blocks = 1;
        return NUMLA_STATUS_OK;
    }
    float *f32 = malloc(sizeof(float) * (size_t)(nr * K) + 1);
    if (!f32)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s", name);
    numla_status s = ld_block_rows_f32(t, name, K, r0, nr, f32);
    const size_t bytes = numla_linear_packed_size(isa, nr, nc, NUMLA_DTYPE_F32);
    if (s == NUMLA_STATUS_OK)
        s = (out->buf = aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64)) != NULL
                ? numla_linear_pack(isa, nr, nc, f32 + c0, NUMLA_DTYPE_F32, K, out->buf, &out->w)
                : NUMLA_STATUS_NO_MEMORY;
    free(f32);
    if (s != NUMLA_STATUS_OK)
        NUMLA_FAIL(s, "v4 weights: dequantizing %s", name);
    return NUMLA_STATUS_OK;
}

/* The E8M0 scale tensor `P.scale` of `P.weight` with the given shape. */
static numla_status ld_scale(const numla_safetensors_model *st, const char *wname, int64_t rows,
                             int64_t cols, const numla_safetensors_tensor **out)
{
    char sn[320];
    size_t len = strlen(wname);
    if (len < 7 || strcmp(wname + len - 7, ".weight"))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "v4 weights: %s is quantized but not a P.weight", wname);
    snprintf(sn, sizeof sn, "%.*s.scale", (int)(len - 7), wname);
    const int64_t shape[2] = {rows, cols};
    NUMLA_CHECK(numla_safetensors_expect(st, sn, 2, shape, out));
    if ((*out)->dtype != NUMLA_DTYPE_F8_E8M0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: tensor %s has dtype %s (F8_E8M0 scales read)",
                   (*out)->file, sn, numla_dtype_name((*out)->dtype));
    return NUMLA_STATUS_OK;
}

static const float E2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* Rows [r0, r0+nr) of a quantized matrix (N, K) as bf16 values (nr, K): FP8 e4m3 codes x their
 * 128 x 128 block's 2^(s-127), or FP4 e2m1 pairs x their 32's 2^(s-127); both exact in bf16. */
static numla_status ld_dequant_rows(const numla_safetensors_tensor *t,
                                    const numla_safetensors_tensor *sc, const char *name,
                                    int64_t K, int64_t r0, int64_t nr, uint16_t *out)
{
    const uint8_t *q = t->data, *s = sc->data;
    const int fp4 = t->dtype == NUMLA_DTYPE_I8;
    const int64_t scols = sc->shape[1];
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t gr = r0 + r;
            const uint8_t sb = fp4 ? s[gr * scols + k / 32] : s[(gr / 128) * scols + k / 128];
            if (sb == 0xFF)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s: scale of row %lld column %lld is NaN",
                           t->file, name, (long long)gr, (long long)k);
            float v;
            if (fp4) {
                const uint8_t byte = q[gr * (K / 2) + k / 2];
                v = E2M1[k % 2 ? byte >> 4 : byte & 15];
            } else {
                v = numla_e4m3_to_f32(q[gr * K + k]);
            }
            v = ldexpf(v, (int)sb - 127);
            if (!isfinite(v))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s: element (%lld, %lld) is not finite",
                           t->file, name, (long long)gr, (long long)k);
            out[r * K + k] = numla_f32_to_bf16(v);
        }
    return NUMLA_STATUS_OK;
}

/* Rows [r0, r0+nr) x columns [c0, c0+nc) (c0 a multiple of 128) of the F8_E4M3 matrix `name`
 * (N, K) kept as FP8 for kernels/qlinear.h: its codes as stored and its E8M0 block scales as
 * fp32 2^(s-127) (exact), the value of a code being code x its 128 x 128 block's scale as
 * ld_dequant_rows has it. NaN codes and scales, and scales that overflow, are refused. */
static numla_status ld_lin_fp8(const numla_safetensors_tensor *t, const numla_safetensors_tensor *sc,
                               const char *name, int64_t N, int64_t K, int64_t r0, int64_t nr,
                               int64_t c0, int64_t nc, v4_lin *out)
{
    const int64_t gr = (N + 127) / 128, gc = (K + 127) / 128;
    const uint8_t *q = t->data, *s8 = sc->data;
    for (int64_t r = r0; r < r0 + nr; r++)
        for (int64_t k = c0; k < c0 + nc; k++)
            if ((q[r * K + k] & 0x7F) == 0x7F)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s: element (%lld, %lld) is an e4m3 NaN",
                           t->file, name, (long long)r, (long long)k);
    float *grid = malloc(sizeof(float) * (size_t)(gr * gc) + 1);
    if (!grid)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s's scales", name);
    for (int64_t i = 0; i < gr * gc; i++)
        grid[i] = ldexpf(1.0f, (int)s8[i] - 127);
    for (int64_t br = r0 / 128; br <= (r0 + nr - 1) / 128; br++)
        for (int64_t bc = c0 / 128; bc <= (c0 + nc - 1) / 128; bc++) {
            const uint8_t sb = s8[br * gc + bc];
            if (sb == 0xFF || !isfinite(448.0f * grid[br * gc + bc])) {
                free(grid);
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s: scale of block (%lld, %lld) is %s",
                           t->file, name, (long long)br, (long long)bc,
                           sb == 0xFF ? "NaN" : "too large (its values overflow fp32)");
            }
        }
    const numla_qlinear_source src = {NUMLA_QLINEAR_FP8_BLOCK, nr, nc, r0, c0, q + r0 * K + c0, K,
                                      grid, gr, gc};
    const size_t bytes = numla_qlinear_packed_size(NUMLA_QLINEAR_FP8_BLOCK, nr, nc);
    out->buf = bytes ? aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64) : NULL;
    numla_status s = out->buf ? numla_qlinear_pack(&src, out->buf, &out->f8) : NUMLA_STATUS_NO_MEMORY;
    free(grid);
    if (s != NUMLA_STATUS_OK)
        NUMLA_FAIL(s, "v4 weights: packing %s as FP8 (%lld x %lld)", name, (long long)nr,
                   (long long)nc);
    out->fp8 = 1;
    return NUMLA_STATUS_OK;
}

/* Rows [r0, r0+nr) x columns [c0, c0+nc) of the matrix `name` (N, K), packed as an (nr, nc)
 * weight: F32/F16 as fp32, BF16 as bf16 (fp32 with V4_LD_F32); the published quantized forms
 * (docs/quantization.md "DeepSeek-V4's FP4 experts"): F8_E4M3 with E8M0 `P.scale` per
 * 128 x 128 block kept as FP8 (ld_lin_fp8; a column slice that cuts a scale block, or
 * V4_LD_F32: as bf16 / fp32, exact), I8 FP4 pairs (N, K/2) with E8M0 `P.scale` per 32 as MXFP4
 * blocks (a whole matrix; exact, fp32 activations unless V4_LD_Q8) or else bf16. */
static numla_status ld_lin_part(numla_isa isa, const numla_safetensors_model *st,
                                const char *name, int64_t N, int64_t K, int64_t r0, int64_t nr,
                                int64_t c0, int64_t nc, int flags, v4_lin *out)
{
    const int force_f32 = flags & V4_LD_F32;
    const int64_t shape[2] = {N, K};
    const numla_safetensors_tensor *t = numla_safetensors_find(st, name), *sc = NULL;
    out->n = nr;
    out->k = nc;
    if (t && t->dtype == NUMLA_DTYPE_END) /* a GGUF file's block tensor */
        return ld_lin_blocks(isa, st, name, N, K, r0, nr, c0, nc, flags, out);
    if (t && (t->dtype == NUMLA_DTYPE_F8_E4M3 || t->dtype == NUMLA_DTYPE_I8)) {
        const int fp4 = t->dtype == NUMLA_DTYPE_I8;
        if (fp4 && K % 32)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: %s: FP4 with %lld columns (a multiple of 32)",
                       t->file, name, (long long)K);
        const int64_t qshape[2] = {N, fp4 ? K / 2 : K};
        NUMLA_CHECK(numla_safetensors_expect(st, name, 2, qshape, &t));
        NUMLA_CHECK(ld_scale(st, name, fp4 ? N : (N + 127) / 128, fp4 ? K / 32 : (K + 127) / 128,
                             &sc));
        if (fp4 && c0 == 0 && nc == K && !force_f32) {
            const int64_t nb = K / 32, ld = nb * 17;
            uint8_t *blk = malloc((size_t)(nr * ld) + 1);
            if (!blk)
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s", name);
            numla_status s = NUMLA_STATUS_OK;
            for (int64_t r = 0; r < nr && s == NUMLA_STATUS_OK; r++)
                if ((s = numla_qblock_mxfp4_from_e2m1((const uint8_t *)t->data + (r0 + r) * (K / 2),
                                                      (const uint8_t *)sc->data + (r0 + r) * nb,
                                                      K, blk + r * ld)) != NUMLA_STATUS_OK) {
                    char why[256]; /* a NaN scale: the kernel names the block */
                    snprintf(why, sizeof why, "%s", numla_error_message());
                    free(blk);
                    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s: row %lld: %s", t->file, name,
                               (long long)(r0 + r), why);
                }
            /* fp32 activations (F32 mode) unless V4_LD_Q8: Q8 mode rounds them to int8, which
             * moves the tiny golden's routed choices and its logits by O(10) */
            const numla_qblock_act act = ld_blocks_act(isa, NUMLA_QBLOCK_MXFP4, K, flags);
            const numla_qblock_source src = {NUMLA_QBLOCK_MXFP4, nr, K, blk, ld, act,
                                             numla_qblock_layout_for(isa, NUMLA_QBLOCK_MXFP4, act, K)};
            size_t bytes = numla_qblock_layout_size(src.type, src.layout, nr, K);
            out->buf = s == NUMLA_STATUS_OK ? aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64) : NULL;
            if (s == NUMLA_STATUS_OK)
                s = out->buf ? numla_qblock_pack(&src, out->buf, &out->q) : NUMLA_STATUS_NO_MEMORY;
            free(blk);
            if (s != NUMLA_STATUS_OK)
                NUMLA_FAIL(s, "v4 weights: repacking %s as MXFP4", name);
            out->blocks = 1;
            return NUMLA_STATUS_OK;
        }
        if (!fp4 && !force_f32 && c0 % NUMLA_QLINEAR_BLOCK == 0) /* kept as stored */
            return ld_lin_fp8(t, sc, name, N, K, r0, nr, c0, nc, out);
        uint16_t *rows = malloc(sizeof(uint16_t) * (size_t)(nr * K) + 1);
        float *f32 = force_f32 ? malloc(sizeof(float) * (size_t)(nr * K) + 1) : NULL;
        numla_status s = rows && (!force_f32 || f32) ? ld_dequant_rows(t, sc, name, K, r0, nr, rows)
                                                     : NUMLA_STATUS_NO_MEMORY;
        for (int64_t i = 0; f32 && s == NUMLA_STATUS_OK && i < nr * K; i++)
            f32[i] = numla_bf16_to_f32(rows[i]);
        const numla_dtype src = f32 ? NUMLA_DTYPE_F32 : NUMLA_DTYPE_BF16;
        const size_t es = numla_dtype_size(src);
        size_t bytes = numla_linear_packed_size(isa, nr, nc, src);
        if (s == NUMLA_STATUS_OK)
            s = (out->buf = aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64)) != NULL
                    ? numla_linear_pack(isa, nr, nc,
                                        (const char *)(f32 ? (void *)f32 : (void *)rows) + (size_t)c0 * es,
                                        src, K, out->buf, &out->w)
                    : NUMLA_STATUS_NO_MEMORY;
        free(rows);
        free(f32);
        if (s != NUMLA_STATUS_OK)
            NUMLA_FAIL(s, "v4 weights: dequantizing %s", name);
        return NUMLA_STATUS_OK;
    }
    if (t && t->dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: tensor %s has dtype %s (a matrix is F32, BF16, "
                   "F16, or F8_E4M3 / I8 FP4 pairs with an F8_E8M0 P.scale)", t->file, name,
                   numla_dtype_name(t->dtype));
    /* a float matrix has no scale: one beside it says the checkpoint stored it quantized */
    const size_t nl = strlen(name);
    if (t && nl > 7 && !strcmp(name + nl - 7, ".weight")) {
        char sn[320];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(nl - 7), name);
        const numla_safetensors_tensor *x = numla_safetensors_find(st, sn);
        if (x)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: tensor %s is %s but has a scale tensor %s (%s): "
                       "a scaled weight is F8_E4M3, or I8 FP4 pairs", t->file, name,
                       numla_dtype_name(t->dtype), sn, numla_dtype_name(x->dtype));
    }
    NUMLA_CHECK(ld_find(st, name, NULL, 2, shape, &t));
    const numla_dtype src = t->dtype == NUMLA_DTYPE_BF16 && !force_f32 ? NUMLA_DTYPE_BF16
                                                                       : NUMLA_DTYPE_F32;
    const size_t es = numla_dtype_size(t->dtype), cnt = (size_t)(nr * K);
    void *raw = malloc(cnt * es + 1);
    float *f32 = src == NUMLA_DTYPE_F32 ? malloc(cnt * sizeof(float) + 1) : NULL;
    if (!raw || (src == NUMLA_DTYPE_F32 && !f32)) {
        free(raw);
        free(f32);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory for %s", name);
    }
    memcpy(raw, (const char *)t->data + (size_t)(r0 * K) * es, cnt * es);
    if (f32)
        for (size_t i = 0; i < cnt; i++)
            f32[i] = numla_load_f32(raw, t->dtype, i);
    const char *from = f32 ? (const char *)f32 : (const char *)raw;
    size_t bytes = numla_linear_packed_size(isa, nr, nc, src);
    out->buf = aligned_alloc(64, out->bytes = (bytes + 63) / 64 * 64);
    numla_status s = out->buf ? numla_linear_pack(isa, nr, nc, from + (size_t)c0 * numla_dtype_size(src),
                                                  src, K, out->buf, &out->w)
                              : NUMLA_STATUS_NO_MEMORY;
    free(raw);
    free(f32);
    if (s != NUMLA_STATUS_OK)
        NUMLA_FAIL(s, "v4 weights: packing %s (%lld x %lld)", name, (long long)nr, (long long)nc);
    return NUMLA_STATUS_OK;
}

/* The whole matrix (n, k). */
static numla_status ld_lin(const numla_model_config *c, numla_isa isa,
                           const numla_safetensors_model *st, const char *name, int64_t n,
                           int64_t k, int flags, v4_lin *out)
{
    (void)c;
    return ld_lin_part(isa, st, name, n, k, 0, n, 0, k, flags, out);
}

static numla_status ld_comp(const numla_model_config *c, numla_isa isa,
                            const numla_safetensors_model *st, const char *pre, int cc,
                            int64_t width, int64_t rate, int flags, v4_comp *o)
{
    char nm[256];
    const int64_t D = c->hidden_size;
    o->c = cc;
    o->width = width;
    o->rate = rate;
    snprintf(nm, sizeof nm, "%swkv.weight", pre);
    NUMLA_CHECK(ld_lin(c, isa, st, nm, cc * width, D, flags, &o->wkv));
    snprintf(nm, sizeof nm, "%swgate.weight", pre);
    NUMLA_CHECK(ld_lin(c, isa, st, nm, cc * width, D, flags, &o->wgate));
    snprintf(nm, sizeof nm, "%sape", pre);
    NUMLA_CHECK(ld_f32(st, nm, NULL, 2, (int64_t[]){rate, cc * width}, &o->ape));
    snprintf(nm, sizeof nm, "%snorm.weight", pre);
    NUMLA_CHECK(ld_f32(st, nm, NULL, 1, (int64_t[]){width}, &o->norm));
    return NUMLA_STATUS_OK;
}

static numla_status ld_layer(const numla_v4_model *m, const numla_safetensors_model *st,
                             int64_t l, v4_layer *y)
{
    const numla_model_config *c = &m->cfg;
    const numla_isa isa = m->isa;
    const int q8 = m->ld_q8;
    const numla_v4_config *v = &c->v4;
    const int64_t D = c->hidden_size, H = c->num_attention_heads, Dh = v->head_dim;
    const int64_t n = v->hc_mult, nm = (2 + n) * n, G = v->o_groups, Ro = v->o_lora_rank;
    const int64_t E = c->n_routed_experts, I = c->moe_intermediate_size;
    char a[256], b[256];
    y->attn = (numla_v4_attn)v->attn[l];
    y->hash = v->hash_moe[l];
    /* layer l, or the MTP layer's block (l = L: mtp.0.*) */
    char lp[48];
    if (l < c->num_hidden_layers)
        snprintf(lp, sizeof lp, "layers.%lld.", (long long)l);
    else
        snprintf(lp, sizeof lp, "mtp.%lld.", (long long)(l - c->num_hidden_layers));
#define P(buf, fmt, ...) snprintf(buf, sizeof buf, "%s" fmt, lp, ##__VA_ARGS__)
    P(a, "attn_norm.weight");
    NUMLA_CHECK(ld_f32(st, a, NULL, 1, &D, &y->attn_norm));
    P(a, "ffn_norm.weight");
    NUMLA_CHECK(ld_f32(st, a, NULL, 1, &D, &y->ffn_norm));
    static const char *const hcn[2] = {"attn", "ffn"};
    for (int i = 0; i < 2; i++) {
        P(a, "hc_%s_fn", hcn[i]);
        NUMLA_CHECK(ld_lin(c, isa, st, a, nm, n * D, V4_LD_F32, &y->hc_fn[i]));
        P(a, "hc_%s_base", hcn[i]);
        NUMLA_CHECK(ld_f32(st, a, NULL, 1, &nm, &y->hc_base[i]));
        P(a, "hc_%s_scale", hcn[i]);
        NUMLA_CHECK(ld_f32(st, a, NULL, 1, (int64_t[]){3}, &y->hc_scale[i]));
    }
    P(a, "attn.wq_a.weight");
    NUMLA_CHECK(ld_lin(c, isa, st, a, v->q_lora_rank, D, q8, &y->wq_a));
    P(a, "attn.q_norm.weight");
    NUMLA_CHECK(ld_f32(st, a, NULL, 1, &v->q_lora_rank, &y->q_norm));
    P(a, "attn.wq_b.weight"); /* this rank's heads' rows */
    NUMLA_CHECK(ld_lin_part(isa, st, a, H * Dh, v->q_lora_rank, m->h0 * Dh, m->hcount * Dh, 0,
                            v->q_lora_rank, q8, &y->wq_b));
    P(a, "attn.wkv.weight");
    NUMLA_CHECK(ld_lin(c, isa, st, a, Dh, D, q8, &y->wkv));
    /* DeepSeek's kv_norm; transformers' save writes attn.norm */
    P(a, "attn.kv_norm.weight");
    P(b, "attn.norm.weight");
    NUMLA_CHECK(ld_f32(st, a, b, 1, &Dh, &y->kv_norm));
    P(a, "attn.attn_sink");
    NUMLA_CHECK(ld_f32(st, a, NULL, 1, &H, &y->sink));
    /* wo_a (G·Ro, H·Dh/G): group g's rows g·Ro .. (g+1)·Ro, one packed linear each, this
     * rank's groups; wo_b: their columns */
    y->wo_a = calloc((size_t)m->gcount, sizeof *y->wo_a);
    if (!y->wo_a)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory");
    P(a, "attn.wo_a.weight");
    for (int64_t g = 0; g < m->gcount; g++)
        NUMLA_CHECK(ld_lin_part(isa, st, a, G * Ro, H * Dh / G, (m->g0 + g) * Ro, Ro, 0,
                                H * Dh / G, q8, &y->wo_a[g]));
    P(a, "attn.wo_b.weight");
    NUMLA_CHECK(ld_lin_part(isa, st, a, D, G * Ro, 0, D, m->g0 * Ro, m->gcount * Ro, q8, &y->wo_b));
    if (y->attn == NUMLA_V4_ATTN_CSA) {
        P(a, "attn.compressor.");
        NUMLA_CHECK(ld_comp(c, isa, st, a, 2, Dh, v->csa_rate, q8, &y->comp));
        P(a, "attn.indexer.compressor.");
        NUMLA_CHECK(ld_comp(c, isa, st, a, 2, v->index_head_dim, v->csa_rate, q8, &y->icomp));
        P(a, "attn.indexer.wq_b.weight");
        NUMLA_CHECK(ld_lin(c, isa, st, a, v->index_n_heads * v->index_head_dim, v->q_lora_rank,
                           q8, &y->iwq_b));
        P(a, "attn.indexer.weights_proj.weight");
        NUMLA_CHECK(ld_lin(c, isa, st, a, v->index_n_heads, D, q8, &y->iweights));
    } else if (y->attn == NUMLA_V4_ATTN_HCA) {
        P(a, "attn.compressor.");
        NUMLA_CHECK(ld_comp(c, isa, st, a, 1, Dh, v->hca_rate, q8, &y->comp));
    }
    /* MoE: the router in fp32 */
    P(a, "ffn.gate.weight");
    NUMLA_CHECK(ld_lin(c, isa, st, a, E, D, V4_LD_F32, &y->gate));
    if (y->hash) {
        const int64_t shape[2] = {c->vocab_size, c->num_experts_per_tok};
        const numla_safetensors_tensor *t;
        P(a, "ffn.gate.tid2eid");
        NUMLA_CHECK(numla_safetensors_expect(st, a, 2, shape, &t));
        if (t->dtype != NUMLA_DTYPE_I32 && t->dtype != NUMLA_DTYPE_I64)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: tensor %s has dtype %s (I32 or I64)", t->file, a,
                       numla_dtype_name(t->dtype));
        size_t cnt = (size_t)(shape[0] * shape[1]);
        y->tid2eid = malloc(cnt * sizeof *y->tid2eid);
        if (!y->tid2eid)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory");
        for (size_t i = 0; i < cnt; i++) {
            int64_t e;
            if (t->dtype == NUMLA_DTYPE_I32) {
                int32_t x;
                memcpy(&x, (const char *)t->data + i * 4, 4);
                e = x;
            } else {
                memcpy(&e, (const char *)t->data + i * 8, 8);
            }
            if (e < 0 || e >= E)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: tensor %s: token %zu's expert %lld is outside 0 ..< %lld", t->file,
                           a, i / (size_t)shape[1], (long long)e, (long long)E);
            y->tid2eid[i] = (int32_t)e;
        }
    } else {
        P(a, "ffn.gate.bias");
        NUMLA_CHECK(ld_f32(st, a, NULL, 1, &E, &y->gate_bias));
    }
    /* this rank's experts (whole), the shared expert's intermediate columns */
    const int64_t ne = m->shard.expert_count, s0 = m->shard.shared_begin, sc = m->shard.shared_count;
    y->w1 = calloc((size_t)ne + 1, sizeof *y->w1);
    y->w2 = calloc((size_t)ne + 1, sizeof *y->w2);
    y->w3 = calloc((size_t)ne + 1, sizeof *y->w3);
    if (!y->w1 || !y->w2 || !y->w3)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory");
    for (int64_t i = 0; i < ne; i++) {
        const long long e = (long long)(m->shard.expert_begin + i);
        P(a, "ffn.experts.%lld.w1.weight", e);
        NUMLA_CHECK(ld_lin(c, isa, st, a, I, D, q8, &y->w1[i]));
        P(a, "ffn.experts.%lld.w2.weight", e);
        NUMLA_CHECK(ld_lin(c, isa, st, a, D, I, q8, &y->w2[i]));
        P(a, "ffn.experts.%lld.w3.weight", e);
        NUMLA_CHECK(ld_lin(c, isa, st, a, I, D, q8, &y->w3[i]));
    }
    if (sc > 0) {
        P(a, "ffn.shared_experts.w1.weight");
        NUMLA_CHECK(ld_lin_part(isa, st, a, I, D, s0, sc, 0, D, q8, &y->sw1));
        P(a, "ffn.shared_experts.w2.weight");
        NUMLA_CHECK(ld_lin_part(isa, st, a, D, I, 0, D, s0, sc, q8, &y->sw2));
        P(a, "ffn.shared_experts.w3.weight");
        NUMLA_CHECK(ld_lin_part(isa, st, a, I, D, s0, sc, 0, D, q8, &y->sw3));
    }
#undef P
    return NUMLA_STATUS_OK;
}

/* The MTP layer's own tensors beside its block (docs/design.md §5.9). */
static numla_status ld_mtp(const numla_model_config *c, const numla_safetensors_model *st,
                           numla_isa isa, numla_v4_model *m)
{
    const int64_t D = c->hidden_size, n = c->v4.hc_mult;
    if (!numla_safetensors_find(st, "mtp.0.e_proj.weight") &&
        numla_safetensors_find(st, "mtp.0.eh_proj.weight")) {
        /* a GGUF MTP file's eh_proj (D, 2D): e_proj and h_proj side by side */
        NUMLA_CHECK(ld_lin_part(isa, st, "mtp.0.eh_proj.weight", D, 2 * D, 0, D, 0, D, m->ld_q8,
                                &m->mtp_e_proj));
        NUMLA_CHECK(ld_lin_part(isa, st, "mtp.0.eh_proj.weight", D, 2 * D, 0, D, D, D, m->ld_q8,
                                &m->mtp_h_proj));
    } else {
        NUMLA_CHECK(ld_lin(c, isa, st, "mtp.0.e_proj.weight", D, D, m->ld_q8, &m->mtp_e_proj));
        NUMLA_CHECK(ld_lin(c, isa, st, "mtp.0.h_proj.weight", D, D, m->ld_q8, &m->mtp_h_proj));
    }
    NUMLA_CHECK(ld_f32(st, "mtp.0.enorm.weight", NULL, 1, &D, &m->mtp_enorm));
    NUMLA_CHECK(ld_f32(st, "mtp.0.hnorm.weight", NULL, 1, &D, &m->mtp_hnorm));
    NUMLA_CHECK(ld_f32(st, "mtp.0.norm.weight", NULL, 1, &D, &m->mtp_norm));
    NUMLA_CHECK(ld_lin(c, isa, st, "mtp.0.hc_head_fn", n, n * D, V4_LD_F32, &m->mtp_hc_head_fn));
    NUMLA_CHECK(ld_f32(st, "mtp.0.hc_head_base", NULL, 1, &n, &m->mtp_hc_head_base));
    NUMLA_CHECK(ld_f32(st, "mtp.0.hc_head_scale", NULL, 1, (int64_t[]){1}, &m->mtp_hc_head_scale));
    return NUMLA_STATUS_OK;
}

static numla_status v4_load(const numla_model_config *c, const numla_safetensors_model *st,
                            numla_isa isa, numla_v4_model *m)
{
    const numla_shard *sh = &m->shard;
    const int64_t V = c->vocab_size, D = c->hidden_size, n = c->v4.hc_mult;
    NUMLA_CHECK(ld_f32(st, "embed.weight", NULL, 2, (int64_t[]){V, D}, &m->embed));
    NUMLA_CHECK(ld_f32(st, "norm.weight", NULL, 1, &D, &m->norm));
    NUMLA_CHECK(ld_lin_part(isa, st, c->tie_word_embeddings ? "embed.weight" : "head.weight", V, D,
                            sh->vocab_begin, sh->vocab_count, 0, D, m->ld_q8, &m->head));
    NUMLA_CHECK(ld_lin(c, isa, st, "hc_head_fn", n, n * D, V4_LD_F32, &m->hc_head_fn));
    NUMLA_CHECK(ld_f32(st, "hc_head_base", NULL, 1, &n, &m->hc_head_base));
    NUMLA_CHECK(ld_f32(st, "hc_head_scale", NULL, 1, (int64_t[]){1}, &m->hc_head_scale));
    m->layers = calloc((size_t)(c->num_hidden_layers + m->has_mtp), sizeof *m->layers);
    if (!m->layers)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory");
    for (int64_t l = 0; l < c->num_hidden_layers + m->has_mtp; l++)
        NUMLA_CHECK(ld_layer(m, st, l, &m->layers[l]));
    if (m->has_mtp)
        NUMLA_CHECK(ld_mtp(c, st, isa, m));
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_model_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                 numla_isa isa, numla_v4_model **out)
{
    return numla_v4_model_load_shard(cfg, st, isa, NULL, 0, 1, out);
}

numla_status numla_v4_model_load_shard(const numla_model_config *cfg,
                                       const numla_safetensors_model *st, numla_isa isa,
                                       const numla_weights_options *wo, int32_t rank,
                                       int32_t nranks, numla_v4_model **out)
{
    if (!cfg || !st || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_model_load: NULL argument");
    *out = NULL;
    if (cfg->arch != NUMLA_MODEL_ARCH_DEEPSEEK_V4 || !cfg->v4.enabled)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_model_load: model_type %s is not deepseek_v4",
                   cfg->model_type);
    numla_v4_model *m = calloc(1, sizeof *m);
    if (m && !(m->scr = calloc(1, sizeof *m->scr))) {
        free(m);
        m = NULL;
    }
    if (!m)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 weights: no memory");
    m->cfg = *cfg;
    m->isa = isa;
    m->isa_cpu = numla_isa_best();
    const numla_model_options o = numla_model_options_default(isa);
    numla_v4_model_set_options(m, &o);
    m->has_mtp = cfg->mtp_enabled ? 1 : 0;
    m->ld_q8 = wo && wo->qblock_q8_act ? V4_LD_Q8 : 0;
    numla_status s = numla_shard_plan(cfg, rank, nranks, &m->shard);
    const int64_t G = cfg->v4.o_groups, H = cfg->num_attention_heads;
    if (s == NUMLA_STATUS_OK && nranks > G) {
        numla_v4_model_destroy(&m);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "deepseek_v4: %d ranks for o_groups = %lld leaves a rank without an output "
                   "group (ranks shard whole groups)", nranks, (long long)G);
    }
    if (s == NUMLA_STATUS_OK) {
        numla_shard_range(G, rank, nranks, &m->g0, &m->gcount);
        m->h0 = m->g0 * (H / G);
        m->hcount = m->gcount * (H / G);
        s = v4_load(cfg, st, isa, m);
    }
    if (s != NUMLA_STATUS_OK) {
        numla_v4_model_destroy(&m);
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    if (cfg->v4.num_nextn_predict_layers > 0 && !m->has_mtp)
        NUMLA_INFO("deepseek_v4: the multi-token-prediction layer (mtp.*) is not loaded");
    *out = m;
    return NUMLA_STATUS_OK;
}

/* ---- the per-sequence cache ---- */

numla_status numla_v4_model_set_cache_dtype(numla_v4_model *m, numla_dtype dt)
{
    if (!m || (dt != NUMLA_DTYPE_F32 && dt != NUMLA_DTYPE_BF16))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "deepseek_v4: the cache is fp32 or bf16 (%s asked)",
                   m ? numla_dtype_name(dt) : "NULL model");
    m->cache_bf16 = dt == NUMLA_DTYPE_BF16;
    return NUMLA_STATUS_OK;
}

numla_dtype numla_v4_model_cache_dtype(const numla_v4_model *m)
{
    return m && m->cache_bf16 ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32;
}

/* Window rows and compressed entries are values of m's cache dtype (fp32 or bf16); the
 * compressors' raw rows stay fp32. es: bytes a value; at: value i of a cache array; put/get:
 * n values in from fp32 (bf16 rounds to nearest even) and out to fp32 (exact). */
static size_t v4_es(const numla_v4_model *m) { return m->cache_bf16 ? 2 : 4; }
static void *v4_at(const numla_v4_model *m, void *base, int64_t i)
{
    return (char *)base + (size_t)i * v4_es(m);
}
static const void *v4_cat(const numla_v4_model *m, const void *base, int64_t i)
{
    return (const char *)base + (size_t)i * v4_es(m);
}
static void v4_put(const numla_v4_model *m, void *dst, const float *src, int64_t n)
{
    if (!m->cache_bf16) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = numla_f32_to_bf16(src[i]);
}

/* A compressor's state: the raw (wkv, wgate) rows of the last 2·rate positions (slot
 * pos mod 2·rate: the current window and the previous one, which CSA's entries overlap) and the
 * entries made so far: in the KV pool's blocks (pool set, numla_v4_seq_use_pool: entry e in
 * block tab[e / epb] at offset e % epb, the sequence's block table, so a prefix-cache hit reads
 * the blocks it shares and a freed block frees its entries) or in the sequence's own mapping. */
typedef struct v4_cstate {
    float *raw_kv, *raw_gate; /* (2·rate, c·width) fp32 */
    void *entries;            /* (cap, width) of the cache dtype: a mapping of `map` bytes whose
                                 pages are touched only as entries are made (cstate_room); NULL
                                 in the pool */
    size_t map;
    char *pool;               /* (pool_blocks, epb, width) of the cache dtype: the pool's region
                                 of this compressor, or NULL */
    int64_t epb, pool_blocks; /* entries a block (block_size / rate), blocks of the pool */
    const int32_t *tab;       /* (cap / epb) the sequence's block table (numla_v4_seq_set_blocks) */
    float *tmp;               /* (width) the entry being made */
    int64_t count, cap;       /* in the pool: cap = the entries the table's blocks hold */
} v4_cstate;

/* Entry e (< cap) of c's state s. */
static void *cs_entry(const numla_v4_model *m, const v4_comp *c, const v4_cstate *s, int64_t e)
{
    const size_t row = v4_es(m) * (size_t)c->width;
    if (s->pool)
        return s->pool + ((size_t)s->tab[e / s->epb] * (size_t)s->epb + (size_t)(e % s->epb)) * row;
    return (char *)s->entries + (size_t)e * row;
}

typedef struct v4_lcache {
    void *ring;          /* (W, Dh) of the cache dtype: the KV row of position p at p mod W */
    v4_cstate comp, icomp;
} v4_lcache;

struct numla_v4_seq {
    const numla_v4_model *m;
    int64_t len;
    v4_lcache *layers; /* (L) */
    /* with the MTP layer (numla_v4_mtp_forward): its cache, a sequence of its own whose len
     * counts the MTP rows and whose layers[L] alone is set; the streams of the last forward's
     * rows (positions len - hid_rows ..) and of the last MTP step's block output (positions
     * mhid_pos0 ..) */
    numla_v4_seq *mtp;
    float *hid;                /* (hid_cap, n, D) */
    int64_t hid_rows, hid_cap;
    float *mhid;               /* (mhid_cap, n, D) */
    int64_t mhid_rows, mhid_cap, mhid_pos0;
    int64_t hid_pos0;          /* position of hid's first row */
    struct v4_snap *snap;      /* rows a rejected draft may undo (numla_v4_seq_mark) */
    /* prefix states the next forward keeps (numla_v4_seq_capture): one per multiple of
     * cap_stride it passes, in order of position */
    numla_v4_prefix **cap;     /* (ncap); the MTP cache's are borrowed (numla_v4_seq_mtp_capture) */
    int32_t ncap;
    int64_t cap_stride;
    int32_t pbs;               /* the pool's tokens a block (numla_v4_seq_use_pool), 0: none */
    int64_t ntab;              /* blocks of the table the last numla_v4_seq_set_blocks gave */
    /* the fixed state the rings, raw rows and entries being made live in (v4_state_carve): a
     * slot of the pool's (slots set) or the sequence's own allocation; the MTP cache's
     * (a borrower: state NULL) from mtp_state on */
    char *state;
    char *mtp_state;
    numla_v4_slots *slots;
    int32_t slot;
};

/* What positions base .. base + saved - 1 overwrote in a sequence's cache (docs/design.md
 * §5.9, rolling back rejected drafts): per layer of [l0, l1), the window ring's row and each
 * compressor's raw kv and gate rows at the slots those positions took, as they were. */
#define V4_SNAP_ROWS 16
typedef struct v4_snap {
    int64_t base, saved;
    int64_t l0, l1;
    int broken;        /* a call of more rows than a compressor's 2·rate slots since base */
    void **ring;       /* (l1 - l0) of (V4_SNAP_ROWS, Dh) of the cache dtype */
    float **ckv, **cg; /* 2 (l1 - l0) of (V4_SNAP_ROWS, c·width): comp, icomp */
} v4_snap;

static void v4_snap_free(v4_snap *p)
{
    if (!p)
        return;
    for (int64_t i = 0; i < p->l1 - p->l0; i++) {
        if (p->ring)
            free(p->ring[i]);
        for (int k = 0; k < 2 && p->ckv; k++) {
            free(p->ckv[2 * i + k]);
            free(p->cg[2 * i + k]);
        }
    }
    free(p->ring);
    free(p->ckv);
    free(p->cg);
    free(p);
}

/* Before a forward writes positions s->len .. + n - 1: keep what they overwrite (the first
 * V4_SNAP_ROWS positions from base). */
static void v4_snap_save(const numla_v4_model *m, numla_v4_seq *s, int64_t n)
{
    v4_snap *p = s->snap;
    if (!p || p->base < 0)
        return;
    const numla_v4_config *v = &m->cfg.v4;
    const int64_t W = v->sliding_window, Dh = v->head_dim;
    for (int64_t l = p->l0; l < p->l1; l++) {
        const v4_layer *y = &m->layers[l];
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        for (int k = 0; k < 2; k++)
            if (s->layers[l].comp.raw_kv && (k == 0 || s->layers[l].icomp.raw_kv) &&
                n > 2 * cp[k]->rate)
                p->broken = 1;
    }
    for (int64_t pos = s->len; pos < s->len + n; pos++) {
        const int64_t off = pos - p->base;
        if (off != p->saved || off >= V4_SNAP_ROWS)
            continue;
        for (int64_t l = p->l0; l < p->l1; l++) {
            const int64_t i = l - p->l0;
            const v4_lcache *lc = &s->layers[l];
            memcpy(v4_at(m, p->ring[i], off * Dh), v4_cat(m, lc->ring, (pos % W) * Dh),
                   v4_es(m) * (size_t)Dh);
            const v4_layer *y = &m->layers[l];
            const v4_comp *cp[2] = {&y->comp, &y->icomp};
            const v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
            for (int k = 0; k < 2; k++) {
                if (!cs[k]->raw_kv)
                    continue;
                const int64_t row = cp[k]->c * cp[k]->width, sl = pos % (2 * cp[k]->rate);
                memcpy(p->ckv[2 * i + k] + off * row, cs[k]->raw_kv + sl * row,
                       sizeof(float) * (size_t)row);
                memcpy(p->cg[2 * i + k] + off * row, cs[k]->raw_gate + sl * row,
                       sizeof(float) * (size_t)row);
            }
        }
        p->saved++;
    }
}

/* Arm s's snapshot at its length, over its layers [l0, l1). */
static numla_status v4_snap_mark(const numla_v4_model *m, numla_v4_seq *s, int64_t l0, int64_t l1)
{
    v4_snap *p = s->snap;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for a draft snapshot");
        s->snap = p;
        p->l0 = l0;
        p->l1 = l1;
        p->ring = calloc((size_t)(l1 - l0), sizeof *p->ring);
        p->ckv = calloc((size_t)(2 * (l1 - l0)), sizeof *p->ckv);
        p->cg = calloc((size_t)(2 * (l1 - l0)), sizeof *p->cg);
        int bad = !p->ring || !p->ckv || !p->cg;
        const int64_t Dh = m->cfg.v4.head_dim;
        for (int64_t l = l0; !bad && l < l1; l++) {
            const int64_t i = l - l0;
            p->ring[i] = malloc(v4_es(m) * (size_t)(V4_SNAP_ROWS * Dh));
            bad |= !p->ring[i];
            const v4_comp *cp[2] = {&m->layers[l].comp, &m->layers[l].icomp};
            const v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
            for (int k = 0; k < 2; k++) {
                if (!cs[k]->raw_kv)
                    continue;
                const size_t sz = sizeof(float) * (size_t)(V4_SNAP_ROWS * cp[k]->c * cp[k]->width);
                p->ckv[2 * i + k] = malloc(sz);
                p->cg[2 * i + k] = malloc(sz);
                bad |= !p->ckv[2 * i + k] || !p->cg[2 * i + k];
            }
        }
        if (bad) {
            v4_snap_free(p);
            s->snap = NULL;
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for a draft snapshot");
        }
    }
    p->base = s->len;
    p->saved = 0;
    p->broken = 0;
    return NUMLA_STATUS_OK;
}

/* Why s cannot go back to n tokens (NULL if it can). */
static const char *v4_snap_why(const numla_v4_seq *s, int64_t n)
{
    const v4_snap *p = s->snap;
    if (n == s->len)
        return NULL;
    if (n > s->len || n < 0)
        return "more tokens than it holds";
    if (!p || p->base < 0 || n < p->base)
        return "tokens before its last mark";
    if (s->len > p->base + p->saved)
        return "more rows since its mark than a snapshot keeps";
    if (p->broken)
        return "a step of more rows since its mark than a compressor's two windows";
    return NULL;
}

/* Undo positions n .. s->len - 1 (v4_snap_why(s, n) NULL). */
static void v4_snap_restore(const numla_v4_model *m, numla_v4_seq *s, int64_t n)
{
    v4_snap *p = s->snap;
    const numla_v4_config *v = &m->cfg.v4;
    const int64_t W = v->sliding_window, Dh = v->head_dim;
    for (int64_t pos = s->len - 1; pos >= n; pos--) {
        const int64_t off = pos - p->base;
        for (int64_t l = p->l0; l < p->l1; l++) {
            const int64_t i = l - p->l0;
            v4_lcache *lc = &s->layers[l];
            memcpy(v4_at(m, lc->ring, (pos % W) * Dh), v4_cat(m, p->ring[i], off * Dh),
                   v4_es(m) * (size_t)Dh);
            const v4_layer *y = &m->layers[l];
            const v4_comp *cp[2] = {&y->comp, &y->icomp};
            v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
            for (int k = 0; k < 2; k++) {
                if (!cs[k]->raw_kv)
                    continue;
                const int64_t row = cp[k]->c * cp[k]->width, sl = pos % (2 * cp[k]->rate);
                memcpy(cs[k]->raw_kv + sl * row, p->ckv[2 * i + k] + off * row,
                       sizeof(float) * (size_t)row);
                memcpy(cs[k]->raw_gate + sl * row, p->cg[2 * i + k] + off * row,
                       sizeof(float) * (size_t)row);
                cs[k]->count = n / cp[k]->rate;
            }
        }
    }
    p->saved = n - p->base;
    s->len = n;
}

/* Room in s for `count` entries of c. The buffer is an anonymous mapping: its capacity doubles
 * in address space only (mremap moves the pages, nothing is copied), and only the pages the
 * entries fill are ever touched, so a sequence's memory is its entries within a page
 * (numla_v4_cache_charge). */
static numla_status cstate_room(const numla_v4_model *m, const v4_comp *c, v4_cstate *s,
                                int64_t count)
{
    if (count <= s->cap)
        return NUMLA_STATUS_OK;
    if (s->pool)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "v4 cache: %lld compressed entries of rate %lld need "
                   "%lld blocks of the sequence's table, which lists %lld", (long long)count,
                   (long long)c->rate, (long long)((count + s->epb - 1) / s->epb),
                   (long long)(s->cap / s->epb));
    const size_t row = v4_es(m) * (size_t)c->width;
    int64_t cap = s->cap ? 2 * s->cap : 64;
    cap = cap < count ? count : cap;
    const size_t bytes = (row * (size_t)cap + 4095) & ~(size_t)4095;
    void *e = s->entries ? mremap(s->entries, s->map, bytes, MREMAP_MAYMOVE)
                         : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (e == MAP_FAILED)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: cannot map %zu bytes for %lld compressed "
                   "entries", bytes, (long long)count);
    s->entries = e;
    s->map = bytes;
    s->cap = (int64_t)(bytes / row);
    return NUMLA_STATUS_OK;
}

static void cstate_unmap(v4_cstate *s)
{
    if (s->entries)
        munmap(s->entries, s->map);
    s->entries = NULL;
    s->map = 0;
    s->count = s->cap = 0;
}

/* The buffers of a compressor's state that are not the sequence's fixed state. */
static void cstate_free(v4_cstate *s) { cstate_unmap(s); }

/* The next `bytes` of a state region at *at (64-byte aligned offsets), NULL with no region. */
static void *v4_take(char *base, size_t *at, size_t bytes)
{
    void *p = base ? base + *at : NULL;
    *at += (bytes + 63) & ~(size_t)63;
    return p;
}

/* Layer l's part of a sequence's fixed state at base + *at (numla_v4_state_bytes' layout): the
 * window ring, then per compressor of the layer its raw kv rows, raw gate rows and the entry
 * being made. lc NULL or base NULL: count only. */
static void v4_carve_layer(const numla_v4_model *m, int64_t l, v4_lcache *lc, char *base,
                           size_t *at)
{
    const numla_v4_config *v = &m->cfg.v4;
    const v4_layer *y = &m->layers[l];
    void *ring = v4_take(base, at, v4_es(m) * (size_t)(v->sliding_window * v->head_dim));
    const v4_comp *cp[2] = {&y->comp, &y->icomp};
    const int has[2] = {y->attn != NUMLA_V4_ATTN_SLIDING, y->attn == NUMLA_V4_ATTN_CSA};
    float *p[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    for (int k = 0; k < 2; k++) {
        if (!has[k])
            continue;
        const size_t rows = sizeof(float) * (size_t)(2 * cp[k]->rate * cp[k]->c * cp[k]->width);
        p[k][0] = v4_take(base, at, rows);
        p[k][1] = v4_take(base, at, rows);
        p[k][2] = v4_take(base, at, sizeof(float) * (size_t)cp[k]->width);
    }
    if (!lc || !base)
        return;
    lc->ring = ring;
    v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
    for (int k = 0; k < 2; k++) {
        cs[k]->raw_kv = p[k][0];
        cs[k]->raw_gate = p[k][1];
        cs[k]->tmp = p[k][2];
    }
}

/* Lay s's fixed state out in base (at least v4_state_size bytes, whatever they hold: a forward
 * reads no row it has not written): its layers' parts, then the MTP layer's (taken by
 * mtp_seq_make). Returns the bytes; base NULL: count only. */
static size_t v4_state_carve(const numla_v4_model *m, numla_v4_seq *s, char *base)
{
    size_t at = 0;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
        v4_carve_layer(m, l, s ? &s->layers[l] : NULL, base, &at);
    if (s)
        s->mtp_state = base ? base + at : NULL;
    if (m->has_mtp)
        v4_carve_layer(m, m->cfg.num_hidden_layers, NULL, NULL, &at);
    return at;
}

static size_t v4_state_size(const numla_v4_model *m) { return v4_state_carve(m, NULL, NULL); }

/* Give s's state slot back to its pool. Its pages stay, as the pool's blocks' do: the next
 * sequence writes every row before it reads it (a ring row, a raw row, the entry being made:
 * numla_v4_seq_create's zeros are never read), so it takes the slot as it is. */
static void v4_slot_give(numla_v4_seq *s)
{
    numla_v4_slots *p = s->slots;
    if (!p || s->slot < 0)
        return;
    p->free[p->nfree++] = s->slot;
    s->slots = NULL;
    s->slot = -1;
    s->state = NULL;
}

void numla_v4_seq_destroy(numla_v4_seq **ps)
{
    if (!ps || !*ps)
        return;
    numla_v4_seq *s = *ps;
    for (int64_t l = 0; s->layers && l < s->m->cfg.num_hidden_layers; l++) {
        cstate_free(&s->layers[l].comp);
        cstate_free(&s->layers[l].icomp);
    }
    free(s->layers);
    if (s->slots)
        v4_slot_give(s);
    else
        free(s->state);
    if (s->mtp) { /* its layers[L] alone is set, in s's state */
        const int64_t L = s->m->cfg.num_hidden_layers;
        if (s->mtp->layers) {
            cstate_free(&s->mtp->layers[L].comp);
            cstate_free(&s->mtp->layers[L].icomp);
        }
        free(s->mtp->layers);
        v4_snap_free(s->mtp->snap);
        free(s->mtp->cap); /* its states are borrowed */
        free(s->mtp);
    }
    free(s->hid);
    free(s->mhid);
    v4_snap_free(s->snap);
    for (int32_t i = 0; i < s->ncap; i++)
        numla_v4_prefix_destroy(&s->cap[i]);
    free(s->cap);
    free(s);
    *ps = NULL;
}

numla_status numla_v4_seq_create(const numla_v4_model *m, numla_v4_seq **out)
{
    if (!m || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_create: NULL argument");
    *out = NULL;
    numla_v4_seq *s = calloc(1, sizeof *s);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory");
    s->m = m;
    s->slot = -1;
    s->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof *s->layers);
    /* its own fixed state until a pool gives it a slot (numla_v4_seq_use_pool) */
    const size_t bytes = v4_state_size(m);
    s->state = s->layers ? calloc(1, bytes) : NULL;
    if (!s->state) {
        numla_v4_seq_destroy(&s);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for a sequence's %zu bytes of "
                   "window rings and compressors' rows", bytes);
    }
    (void)v4_state_carve(m, s, s->state);
    *out = s;
    return NUMLA_STATUS_OK;
}

int64_t numla_v4_seq_len(const numla_v4_seq *s) { return s ? s->len : 0; }
numla_status numla_v4_seq_reserve(numla_v4_seq *s, int64_t tokens)
{
    if (!s || tokens < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_reserve: bad argument");
    for (int64_t l = 0; l < s->m->cfg.num_hidden_layers; l++) {
        const v4_layer *y = &s->m->layers[l];
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
        for (int k = 0; k < 2; k++)
            if (cs[k]->raw_kv && !cs[k]->pool)
                NUMLA_CHECK(cstate_room(s->m, cp[k], cs[k], tokens / cp[k]->rate));
    }
    return NUMLA_STATUS_OK;
}

size_t numla_v4_pool_block_bytes(const numla_model_config *cfg, int32_t block_size,
                                 numla_dtype dt, int64_t layer, int comp)
{
    const numla_v4_config *c = &cfg->v4;
    if (!cfg->v4.enabled || block_size < 1 || layer < 0 || layer >= c->num_layers)
        return 0;
    const int at = c->attn[layer];
    const int64_t rate = at == NUMLA_V4_ATTN_CSA   ? c->csa_rate
                         : at == NUMLA_V4_ATTN_HCA ? c->hca_rate : 0;
    if (!rate || (comp == 1 && at != NUMLA_V4_ATTN_CSA) || comp < 0 || comp > 1 ||
        block_size % rate)
        return 0;
    const int64_t w = comp ? c->index_head_dim : c->head_dim;
    return numla_dtype_size(dt) * (size_t)(block_size / rate * w);
}

numla_status numla_v4_seq_use_pool(numla_v4_seq *s, const numla_v4_pool *pool)
{
    if (!s || !pool || pool->block_size < 1 || pool->num_blocks < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_use_pool: bad argument");
    if (s->len || s->pbs)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_use_pool: the sequence is not new");
    const numla_v4_model *m = s->m;
    if (pool->dtype != numla_v4_model_cache_dtype(m))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_use_pool: the pool holds %s entries, "
                   "the model's cache is %s", numla_dtype_name(pool->dtype),
                   numla_dtype_name(numla_v4_model_cache_dtype(m)));
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        const v4_layer *y = &m->layers[l];
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
        for (int k = 0; k < 2; k++) {
            const size_t bb =
                numla_v4_pool_block_bytes(&m->cfg, pool->block_size, pool->dtype, l, k);
            if (!cs[k]->raw_kv || !bb)
                continue;
            if (!pool->entries[l][k])
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_use_pool: the pool has no "
                           "region for layer %lld's %s", (long long)l,
                           k ? "index keys" : "entries");
            cstate_unmap(cs[k]);
            cs[k]->pool = pool->entries[l][k];
            cs[k]->epb = pool->block_size / cp[k]->rate;
            cs[k]->pool_blocks = pool->num_blocks;
        }
    }
    numla_v4_slots *sl = pool->slots;
    if (sl) { /* its fixed state in a slot of the pool's, as the slot's last sequence left it
               * (v4_slot_give) */
        const size_t need = v4_state_size(m);
        if (need != sl->need || need > sl->stride)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_use_pool: the pool's state slots "
                       "hold %zu bytes, a sequence of the model needs %zu", sl->need, need);
        if (sl->nfree < 1)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: all %d state slots of the KV pool are "
                       "held (one a running sequence)", sl->count);
        free(s->state);
        s->slots = sl;
        s->slot = sl->free[--sl->nfree];
        s->state = sl->base + (size_t)s->slot * sl->stride;
        (void)v4_state_carve(m, s, s->state);
    }
    s->pbs = pool->block_size;
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seq_set_blocks(numla_v4_seq *s, const int32_t *table, int64_t nblocks)
{
    if (!s || nblocks < 0 || (nblocks && !table))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_set_blocks: bad argument");
    int64_t pool_blocks = 0; /* the same for every compressor in the pool */
    for (int64_t l = 0; s->pbs && !pool_blocks && l < s->m->cfg.num_hidden_layers; l++)
        pool_blocks = s->layers[l].comp.pool ? s->layers[l].comp.pool_blocks : 0;
    for (int64_t i = 0; pool_blocks && i < nblocks; i++) /* once, not per layer */
        if (table[i] < 0 || table[i] >= pool_blocks)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "numla_v4_seq_set_blocks: block %lld of the "
                       "table is %d, the pool has %lld", (long long)i, table[i],
                       (long long)pool_blocks);
    for (int64_t l = 0; s->pbs && l < s->m->cfg.num_hidden_layers; l++) {
        v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
        for (int k = 0; k < 2; k++)
            if (cs[k]->pool) {
                cs[k]->tab = table;
                cs[k]->cap = nblocks * cs[k]->epb;
            }
    }
    s->ntab = nblocks;
    return NUMLA_STATUS_OK;
}


int64_t numla_v4_seq_cache_values(const numla_v4_seq *s)
{
    if (!s)
        return 0;
    const numla_v4_config *v = &s->m->cfg.v4;
    int64_t total = 0;
    for (int64_t l = 0; l < s->m->cfg.num_hidden_layers; l++) {
        const v4_layer *y = &s->m->layers[l];
        const v4_lcache *lc = &s->layers[l];
        total += v->sliding_window * v->head_dim;
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        const v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
        for (int k = 0; k < 2; k++)
            if (cs[k]->raw_kv) /* kv and gate rows of two windows, then the entries */
                total += 2 * (2 * cp[k]->rate) * (cp[k]->c * cp[k]->width) + cs[k]->count * cp[k]->width;
    }
    return total;
}

/* n cache values (m's dtype) of unit variance (uniform on ±√3) from a xorshift stream seeded
 * by `seed`. */
static void v4_fill_values(const numla_v4_model *m, void *x, int64_t n, uint32_t seed)
{
    uint32_t h = seed * 0x9e3779b9u + 0x85ebca6bu;
    float buf[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t k = n - i0 < 256 ? n - i0 : 256;
        for (int64_t i = 0; i < k; i++) {
            h ^= h << 13;
            h ^= h >> 17;
            h ^= h << 5;
            buf[i] = ((float)(h >> 8) * 0x1.0p-24f * 2.0f - 1.0f) * 1.7320508f;
        }
        v4_put(m, v4_at(m, x, i0), buf, k);
    }
}

static numla_status cstate_fill(const numla_v4_model *m, const v4_comp *c, v4_cstate *s,
                               int64_t n, uint32_t seed)
{
    const int64_t count = n / c->rate;
    if (count == 0)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(cstate_room(m, c, s, count));
    s->count = count;
    if (!s->pool) {
        v4_fill_values(m, s->entries, count * c->width, seed);
        return NUMLA_STATUS_OK;
    }
    for (int64_t e0 = 0; e0 < count; e0 += s->epb) /* a block's entries at a time */
        v4_fill_values(m, cs_entry(m, c, s, e0),
                       (count - e0 < s->epb ? count - e0 : s->epb) * c->width,
                       seed + (uint32_t)(e0 / s->epb) * 0x9e3779b9u);
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seq_fill(numla_v4_seq *s, int64_t n)
{
    if (!s || s->len != 0 || n < 1 || n >= s->m->cfg.max_position_embeddings)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_fill: %s",
                   !s ? "NULL sequence" : s->len ? "the sequence is not empty"
                                                 : "the length is out of range");
    const numla_v4_config *v = &s->m->cfg.v4;
    numla_status st = NUMLA_STATUS_OK;
    for (int64_t l = 0; st == NUMLA_STATUS_OK && l < s->m->cfg.num_hidden_layers; l++) {
        const v4_layer *y = &s->m->layers[l];
        v4_lcache *lc = &s->layers[l];
        v4_fill_values(s->m, lc->ring, v->sliding_window * v->head_dim, (uint32_t)(3 * l + 1));
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
        for (int k = 0; k < 2; k++) /* no carry-over (a slot may hold another sequence's rows) */
            if (cs[k]->raw_kv) {
                const size_t rows = sizeof(float) * (size_t)(2 * cp[k]->rate * cp[k]->c * cp[k]->width);
                memset(cs[k]->raw_kv, 0, rows);
                memset(cs[k]->raw_gate, 0, rows);
            }
        if (y->attn != NUMLA_V4_ATTN_SLIDING)
            st = cstate_fill(s->m, &y->comp, &lc->comp, n, (uint32_t)(3 * l + 2));
        if (st == NUMLA_STATUS_OK && y->attn == NUMLA_V4_ATTN_CSA)
            st = cstate_fill(s->m, &y->icomp, &lc->icomp, n, (uint32_t)(3 * l + 3));
    }
    if (st != NUMLA_STATUS_OK) {
        for (int64_t l = 0; l < s->m->cfg.num_hidden_layers; l++) {
            v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
            for (int k = 0; k < 2; k++) {
                if (!cs[k]->pool)
                    cstate_unmap(cs[k]);
                cs[k]->count = 0;
            }
            memset(s->layers[l].ring, 0, v4_es(s->m) * (size_t)(v->sliding_window * v->head_dim));
        }
        numla_error_frame(__FILE__, __LINE__, __func__);
        return st;
    }
    s->len = n;
    return NUMLA_STATUS_OK;
}

/* ---- prefix states (the prefix cache for V4: docs/serving.md "DeepSeek-V4's cache") ---- */

/* What a sequence needs to continue from position pos, a multiple of stride, for the segment of
 * positions [pos - stride, pos): per layer the window rows of positions pos - W + 1 .. pos - 1
 * (row j: position pos - W + 1 + j; those before 0 unused), each compressor's entries made in
 * the segment (stride / rate of them: the ones that end in it) and, for CSA's two compressors,
 * the carry: the first halves (kv and gate) of positions pos - rate .. pos - 1, which the next
 * entry overlaps. HCA carries nothing (pos closes its window). With the MTP layer loaded, its
 * part follows the layers' (layer L, the same parts of the MTP cache after its rows 0 .. pos - 1),
 * filled by the MTP step that runs row pos - 1 (numla_v4_seq_mtp_capture): mtp_done. */
struct numla_v4_prefix {
    const numla_v4_model *m;
    int64_t pos, stride;
    char *v;        /* (bytes) the layers' parts in order (v4_prefix_layer) */
    size_t bytes;
    int mtp_done;   /* the MTP layer's part is filled (m->has_mtp) */
    int32_t pbs;    /* the pool's tokens a block of the sequence it was taken from (0: none):
                       the entries of compressors in the pool stay in the pool's blocks */
};

/* Layers a prefix state holds parts of: the model's, and its MTP layer's when loaded. */
static int64_t v4_prefix_layers(const numla_v4_model *m)
{
    return m->cfg.num_hidden_layers + m->has_mtp;
}

typedef struct v4_pview {
    void *ring;             /* (W - 1, Dh) of the cache dtype */
    void *ent[2];           /* (stride / rate, width) of the cache dtype: comp, icomp; NULL
                               where none */
    float *ckv[2], *cg[2];  /* (rate, width) fp32: CSA's carry; NULL where none */
} v4_pview;

/* The parts of layer l in a state of m at stride, for a sequence in a pool of pbs tokens a
 * block (0: none), beginning at v (NULL: counting only); returns the bytes they take. A
 * compressor whose entries live in the pool's blocks keeps none here (ent NULL). */
static size_t v4_prefix_layer(const numla_v4_model *m, int64_t l, int64_t stride, int32_t pbs,
                              char *v, v4_pview *pv)
{
    const numla_v4_config *c = &m->cfg.v4;
    const v4_layer *y = &m->layers[l];
    size_t n = v4_es(m) * (size_t)((c->sliding_window - 1) * c->head_dim);
    memset(pv, 0, sizeof *pv);
    pv->ring = v;
    const v4_comp *cp[2] = {&y->comp, &y->icomp};
    const int ncomp = y->attn == NUMLA_V4_ATTN_CSA ? 2 : y->attn == NUMLA_V4_ATTN_HCA ? 1 : 0;
    for (int k = 0; k < ncomp; k++) {
        if (!numla_v4_pool_block_bytes(&m->cfg, pbs, numla_v4_model_cache_dtype(m), l, k)) {
            pv->ent[k] = v ? v + n : NULL;
            n += v4_es(m) * (size_t)(stride / cp[k]->rate * cp[k]->width);
        }
        if (cp[k]->c == 2) {
            pv->ckv[k] = v ? (float *)(void *)(v + n) : NULL;
            n += sizeof(float) * (size_t)(cp[k]->rate * cp[k]->width);
            pv->cg[k] = v ? (float *)(void *)(v + n) : NULL;
            n += sizeof(float) * (size_t)(cp[k]->rate * cp[k]->width);
        }
    }
    return n;
}

int64_t numla_v4_prefix_stride(const numla_model_config *cfg, int32_t block_size)
{
    const numla_v4_config *c = &cfg->v4;
    int64_t s = block_size > 0 ? block_size : 1;
    /* the MTP layer's type (attn[num_layers]) when the config has one: its part of a state is
     * taken at the same positions */
    const int64_t nl = c->num_layers + (c->num_nextn_predict_layers > 0 &&
                                        c->num_layers < NUMLA_V4_MAX_LAYERS);
    for (int64_t l = 0; l < nl; l++) {
        const int64_t r = c->attn[l] == NUMLA_V4_ATTN_CSA   ? c->csa_rate
                          : c->attn[l] == NUMLA_V4_ATTN_HCA ? c->hca_rate : 1;
        int64_t a = s, b = r; /* s = lcm(s, r) */
        while (b) {
            const int64_t t = a % b;
            a = b;
            b = t;
        }
        s = s / a * r;
    }
    return s;
}

void numla_v4_prefix_destroy(numla_v4_prefix **p)
{
    if (!p || !*p)
        return;
    free((*p)->v);
    free(*p);
    *p = NULL;
}

int64_t numla_v4_prefix_pos(const numla_v4_prefix *p) { return p ? p->pos : -1; }

size_t numla_v4_prefix_bytes(const numla_v4_prefix *p)
{
    return p ? sizeof *p + p->bytes : 0;
}

size_t numla_v4_prefix_bytes_cfg(const numla_model_config *cfg, int64_t stride,
                                 int32_t block_size, numla_dtype dt)
{
    const numla_v4_config *c = &cfg->v4;
    const size_t es = numla_dtype_size(dt), f = sizeof(float);
    const int64_t Dh = c->head_dim, Di = c->index_head_dim;
    size_t n = 0;
    /* the MTP layer's part with the layer enabled (cfg->mtp_enabled) */
    const int64_t nl = c->num_layers + (cfg->mtp_enabled && c->num_layers < NUMLA_V4_MAX_LAYERS);
    for (int64_t l = 0; l < nl; l++) {
        n += es * (size_t)((c->sliding_window - 1) * Dh);
        /* entries and index keys (those not in the pool's blocks), both CSA compressors' carry */
        const int pe = !numla_v4_pool_block_bytes(cfg, block_size, dt, l, 0);
        const int pi = !numla_v4_pool_block_bytes(cfg, block_size, dt, l, 1);
        if (c->attn[l] == NUMLA_V4_ATTN_CSA)
            n += es * (size_t)(stride / c->csa_rate * (pe * Dh + pi * Di)) +
                 2 * f * (size_t)(c->csa_rate * (Dh + Di));
        else if (c->attn[l] == NUMLA_V4_ATTN_HCA)
            n += es * (size_t)(stride / c->hca_rate * pe * Dh);
    }
    return sizeof(numla_v4_prefix) + n;
}

/* Layer l's compressors in cfg (the MTP layer's: l = num_layers, type attn[L]): comp[k] =
 * {rate, c, width}, rate 0 where the layer has none. */
static void v4_cfg_comps(const numla_model_config *cfg, int64_t l, int64_t comp[2][3])
{
    const numla_v4_config *c = &cfg->v4;
    memset(comp, 0, sizeof(int64_t) * 6);
    if (c->attn[l] == NUMLA_V4_ATTN_CSA) {
        comp[0][0] = comp[1][0] = c->csa_rate;
        comp[0][1] = comp[1][1] = 2;
        comp[0][2] = c->head_dim;
        comp[1][2] = c->index_head_dim;
    } else if (c->attn[l] == NUMLA_V4_ATTN_HCA) {
        comp[0][0] = c->hca_rate;
        comp[0][1] = 1;
        comp[0][2] = c->head_dim;
    }
}

size_t numla_v4_state_bytes(const numla_model_config *cfg, numla_dtype dt)
{
    const numla_v4_config *c = &cfg->v4;
    size_t at = 0; /* v4_carve_layer's layout, layer after layer */
    for (int64_t l = 0; cfg->v4.enabled && l < c->num_layers + (cfg->mtp_enabled ? 1 : 0); l++) {
        int64_t comp[2][3];
        v4_cfg_comps(cfg, l, comp);
        (void)v4_take(NULL, &at, numla_dtype_size(dt) * (size_t)(c->sliding_window * c->head_dim));
        for (int k = 0; k < 2; k++) {
            if (!comp[k][0])
                continue;
            const size_t rows = sizeof(float) * (size_t)(2 * comp[k][0] * comp[k][1] * comp[k][2]);
            (void)v4_take(NULL, &at, rows);
            (void)v4_take(NULL, &at, rows);
            (void)v4_take(NULL, &at, sizeof(float) * (size_t)comp[k][2]);
        }
    }
    return at;
}

void numla_v4_cache_charge(const numla_model_config *cfg, int32_t block_size, numla_dtype dt,
                           size_t *per_block, size_t *per_seq)
{
    const numla_v4_config *c = &cfg->v4;
    const size_t es = numla_dtype_size(dt), f = sizeof(float);
    const int64_t Dh = c->head_dim, bs = block_size > 0 ? block_size : 1;
    /* the fixed state (a slot of the pool's: rings, raw rows, entries being made) */
    size_t blk = 0, seq = numla_v4_state_bytes(cfg, dt);
    /* the model's layers, and the MTP layer's cache when it is loaded (its type: attn[L]) */
    for (int64_t l = 0; l < c->num_layers + (cfg->mtp_enabled ? 1 : 0); l++) {
        /* one compressor: (rate, c, width); its entries rounded up to whole values per block,
         * and where they are not in the pool's blocks, its own buffer's last page (cstate_room) */
        int64_t comp[2][3];
        v4_cfg_comps(cfg, l, comp);
        for (int k = 0; k < 2; k++) {
            const int64_t R = comp[k][0], w = comp[k][2];
            if (!R)
                continue;
            const int pooled = numla_v4_pool_block_bytes(cfg, block_size, dt, l, k) > 0;
            blk += es * (size_t)((bs * w + R - 1) / R);
            seq += pooled ? 0 : 4096;
        }
        if (cfg->mtp_enabled) /* draft snapshots: V4_SNAP_ROWS rows of the ring and raw rows */
            seq += es * (size_t)(V4_SNAP_ROWS * Dh) +
                   f * (size_t)(2 * V4_SNAP_ROWS * (comp[0][1] * comp[0][2] + comp[1][1] * comp[1][2]));
    }
    *per_block = blk;
    *per_seq = seq;
}

size_t numla_v4_prefix_bytes_for(const numla_v4_model *m, int64_t stride, int32_t block_size)
{
    size_t n = 0;
    v4_pview pv;
    for (int64_t l = 0; m && l < v4_prefix_layers(m); l++)
        n += v4_prefix_layer(m, l, stride, block_size, NULL, &pv);
    return sizeof(numla_v4_prefix) + n;
}

numla_status numla_v4_seq_capture(numla_v4_seq *s, int64_t stride, int64_t n)
{
    if (!s || stride < 1 || n < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_capture: bad argument");
    for (int32_t i = 0; i < s->ncap; i++)
        numla_v4_prefix_destroy(&s->cap[i]);
    s->ncap = 0;
    const numla_v4_model *m = s->m;
    for (int64_t l = 0; l < v4_prefix_layers(m); l++)
        if (m->layers[l].attn != NUMLA_V4_ATTN_SLIDING && stride % m->layers[l].comp.rate)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_capture: stride %lld is not a "
                       "multiple of layer %lld's compress rate", (long long)stride, (long long)l);
    const int64_t first = s->len / stride + 1, last = (s->len + n) / stride;
    if (last < first)
        return NUMLA_STATUS_OK;
    numla_v4_prefix **cap = realloc(s->cap, sizeof *cap * (size_t)(last - first + 1));
    if (!cap)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for prefix states");
    s->cap = cap;
    const size_t bytes = numla_v4_prefix_bytes_for(m, stride, s->pbs) - sizeof(numla_v4_prefix);
    for (int64_t k = first; k <= last; k++) {
        numla_v4_prefix *p = calloc(1, sizeof *p);
        char *v = p ? calloc(1, bytes + sizeof(float)) : NULL;
        if (!v) {
            free(p);
            for (int32_t i = 0; i < s->ncap; i++)
                numla_v4_prefix_destroy(&s->cap[i]);
            s->ncap = 0;
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for a prefix state (%zu "
                       "bytes)", bytes);
        }
        *p = (numla_v4_prefix){m, k * stride, stride, v, bytes, 0, s->pbs};
        s->cap[s->ncap++] = p;
    }
    s->cap_stride = stride;
    return NUMLA_STATUS_OK;
}

numla_v4_prefix *numla_v4_seq_take_capture(numla_v4_seq *s)
{
    if (!s || s->ncap == 0)
        return NULL;
    numla_v4_prefix *p = s->cap[0];
    memmove(s->cap, s->cap + 1, sizeof *s->cap * (size_t)(s->ncap - 1));
    s->ncap--;
    return p;
}

/* The state s captures at position pos (after the forward that passes it), NULL if none. */
static numla_v4_prefix *v4_capture_at(const numla_v4_seq *s, int64_t pos)
{
    for (int32_t i = 0; i < s->ncap; i++)
        if (s->cap[i]->pos == pos)
            return s->cap[i];
    return NULL;
}

static char *v4_prefix_view(const numla_v4_prefix *p, int64_t l, v4_pview *pv)
{
    char *v = p->v;
    for (int64_t i = 0; i < l; i++)
        v += v4_prefix_layer(p->m, i, p->stride, p->pbs, NULL, pv);
    v4_prefix_layer(p->m, l, p->stride, p->pbs, v, pv);
    return v;
}

/* During layer l's compressor ci: position pos's rows were just pushed into cs; if it ends a
 * segment s captures, keep CSA's carry (the first halves of the last `rate` positions). */
static void v4_capture_carry(const numla_v4_seq *s, int64_t l, int ci, const v4_comp *cp,
                             const v4_cstate *cs, int64_t pos)
{
    if (!s->ncap || cp->c != 2 || (pos + 1) % s->cap_stride)
        return;
    const numla_v4_prefix *p = v4_capture_at(s, pos + 1);
    if (!p)
        return;
    v4_pview pv;
    v4_prefix_view(p, l, &pv);
    const int64_t R = cp->rate, w = cp->width, row = cp->c * w;
    for (int64_t j = 0; j < R; j++) {
        const int64_t sl = (pos + 1 - R + j) % (2 * R);
        memcpy(pv.ckv[ci] + j * w, cs->raw_kv + sl * row, sizeof(float) * (size_t)w);
        memcpy(pv.cg[ci] + j * w, cs->raw_gate + sl * row, sizeof(float) * (size_t)w);
    }
}

/* At the end of layer l's attention for s: for each segment end it captures, the window rows
 * before it (rows: positions r0 .. of the step's window buffer, in the cache dtype) and the
 * entries made in the segment. */
static void v4_capture_rows(const numla_v4_seq *s, int64_t l, const void *rows, int64_t r0)
{
    const numla_v4_model *m = s->m;
    const int64_t W = m->cfg.v4.sliding_window, Dh = m->cfg.v4.head_dim;
    const v4_layer *y = &m->layers[l];
    for (int32_t i = 0; i < s->ncap; i++) {
        const numla_v4_prefix *p = s->cap[i];
        v4_pview pv;
        v4_prefix_view(p, l, &pv);
        for (int64_t pos = p->pos - W + 1 > 0 ? p->pos - W + 1 : 0; pos < p->pos; pos++)
            memcpy(v4_at(m, pv.ring, (pos - (p->pos - W + 1)) * Dh), v4_cat(m, rows, (pos - r0) * Dh),
                   v4_es(m) * (size_t)Dh);
        const v4_comp *cp[2] = {&y->comp, &y->icomp};
        const v4_cstate *cs[2] = {&s->layers[l].comp, &s->layers[l].icomp};
        for (int k = 0; k < 2; k++)
            if (pv.ent[k]) { /* entries kept by the sequence, not in the pool's blocks */
                const int64_t e0 = (p->pos - p->stride) / cp[k]->rate, ne = p->stride / cp[k]->rate;
                memcpy(pv.ent[k], cs_entry(m, cp[k], cs[k], e0),
                       v4_es(m) * (size_t)(ne * cp[k]->width));
            }
    }
}

int numla_v4_prefix_complete(const numla_v4_prefix *p)
{
    return p && (!p->m->has_mtp || p->mtp_done);
}

/* Layer l's cache lc (of a sequence, or layer L of its MTP cache) set to position nseg·stride
 * from the states segs: every segment's entries, the last one's window rows and carry. */
static numla_status v4_restore_layer(const numla_v4_model *m, v4_lcache *lc, int64_t l,
                                     const numla_v4_prefix *const *segs, int64_t nseg)
{
    const int64_t stride = segs[0]->stride, pos = nseg * stride;
    const numla_v4_config *c = &m->cfg.v4;
    const int64_t W = c->sliding_window, Dh = c->head_dim;
    const v4_layer *y = &m->layers[l];
    v4_pview pv;
    v4_prefix_view(segs[nseg - 1], l, &pv);
    for (int64_t q = pos - W + 1 > 0 ? pos - W + 1 : 0; q < pos; q++)
        memcpy(v4_at(m, lc->ring, (q % W) * Dh), v4_cat(m, pv.ring, (q - (pos - W + 1)) * Dh),
               v4_es(m) * (size_t)Dh);
    const v4_comp *cp[2] = {&y->comp, &y->icomp};
    v4_cstate *cs[2] = {&lc->comp, &lc->icomp};
    for (int k = 0; k < 2; k++) {
        if (!cs[k]->raw_kv)
            continue;
        const int64_t w = cp[k]->width, R = cp[k]->rate, row = cp[k]->c * w;
        const int64_t count = pos / R, per = stride / R;
        NUMLA_CHECK(cstate_room(m, cp[k], cs[k], count));
        /* entries in the pool: the hit's blocks hold them already (shared, not copied) */
        for (int64_t g = 0; !cs[k]->pool && g < nseg; g++) {
            v4_pview sv;
            v4_prefix_view(segs[g], l, &sv);
            memcpy(cs_entry(m, cp[k], cs[k], g * per), sv.ent[k], v4_es(m) * (size_t)(per * w));
        }
        cs[k]->count = count;
        if (cp[k]->c == 2)
            for (int64_t j = 0; j < R; j++) {
                const int64_t sl = (pos - R + j) % (2 * R);
                memcpy(cs[k]->raw_kv + sl * row, pv.ckv[k] + j * w, sizeof(float) * (size_t)w);
                memcpy(cs[k]->raw_gate + sl * row, pv.cg[k] + j * w, sizeof(float) * (size_t)w);
            }
    }
    return NUMLA_STATUS_OK;
}

static numla_status mtp_seq_make(numla_v4_seq *s);

numla_status numla_v4_seq_restore(numla_v4_seq *s, const numla_v4_prefix *const *segs, int64_t nseg)
{
    if (!s || s->len != 0 || nseg < 1 || !segs || (s->mtp && s->mtp->len != 0))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_restore: %s",
                   !s || !segs ? "NULL argument" : nseg < 1 ? "no segment"
                                                            : "the sequence is not empty");
    const numla_v4_model *m = s->m;
    const int64_t stride = segs[0] ? segs[0]->stride : 0, pos = nseg * stride;
    for (int64_t k = 0; k < nseg; k++) {
        if (!segs[k] || segs[k]->m != m || segs[k]->stride != stride ||
            segs[k]->pos != (k + 1) * stride || segs[k]->pbs != s->pbs)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_restore: segment %lld is not the "
                       "state of positions up to %lld", (long long)k, (long long)((k + 1) * stride));
        if (!numla_v4_prefix_complete(segs[k]))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_restore: segment %lld (positions "
                       "up to %lld) lacks the MTP layer's part (its MTP row %lld was not run)",
                       (long long)k, (long long)((k + 1) * stride),
                       (long long)((k + 1) * stride - 1));
    }
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
        NUMLA_CHECK(v4_restore_layer(m, &s->layers[l], l, segs, nseg));
    if (m->has_mtp) { /* the MTP layer's cache after its rows 0 .. pos - 1 */
        const int64_t L = m->cfg.num_hidden_layers;
        if (!s->mtp)
            NUMLA_CHECK(mtp_seq_make(s));
        NUMLA_CHECK(v4_restore_layer(m, &s->mtp->layers[L], L, segs, nseg));
        s->mtp->len = pos;
    }
    s->len = pos;
    return NUMLA_STATUS_OK;
}

/* ---- forward pieces ---- */

/* The level chosen for w: its family's (FP8: isa_qlinear; float and MXFP4: isa_linear), as
 * numla_model_lin_isa picks it for the MLA path. */
static numla_isa lin_isa(const numla_v4_model *m, const v4_lin *w)
{
    return w->fp8 ? m->isa_qlinear : m->isa_linear;
}

/* The level w's kernels run at: the chosen one, or the best this CPU has below it (the same
 * with the engine, which only runs levels the CPU has; the tests choose any and count it). */
static numla_isa lin_run_isa(const numla_v4_model *m, const v4_lin *w)
{
    return numla_isa_min(lin_isa(m, w), m->isa_cpu);
}

/* Count n forwards of w's family at level isa (numla_v4_model_linear_calls). */
static void lin_count(const numla_v4_model *m, const v4_lin *w, numla_isa isa, uint64_t n)
{
    uint64_t *c = (uint64_t *)&m->lin_calls[w->fp8 ? 1 : 0][isa]; /* m itself is not const */
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

/* y (M, w->n) = x (M, w->k) · Wᵀ */
static numla_status lin(const numla_v4_model *m, const v4_lin *w, int64_t M, const float *x,
                        float *y)
{
    const int nth = omp_get_max_threads();
    const numla_isa isa = lin_run_isa(m, w);
    size_t need = w->blocks ? numla_qblock_workspace_size(&w->q, M, nth)
                  : w->fp8  ? numla_qlinear_workspace_size(&w->f8, M, nth)
                            : numla_linear_workspace_size(isa, &w->w, M, nth);
    void *ws = need ? v4_room(m, V4_S_LIN, need) : NULL;
    if (need && !ws)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 forward: no memory for a linear's workspace");
    lin_count(m, w, lin_isa(m, w), 1);
    numla_status s =
        w->blocks ? numla_qblock_forward(isa, &w->q, M, x, w->k, y, w->n, 0, ws, need)
        : w->fp8  ? numla_qlinear_forward(isa, &w->f8, M, x, w->k, y, w->n, 0, ws, need)
                  : numla_linear_forward(isa, &w->w, M, x, w->k, y, w->n, 0, ws, need);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

/* x ← x / sqrt(mean(x²) + eps) · w (w NULL: unweighted), n values. */
static void rms(float *x, const float *w, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        x[i] = w ? w[i] * (x[i] * r) : x[i] * r;
}

/* Rotate the trailing dr values of x (adjacent pairs, in place) by pos · inv_freq; sign -1 is the
 * conjugate rotation (the attention output's). */
static void rope_tail(float *x, int64_t width, int64_t dr, const double *inv_freq, double af,
                      int64_t pos, int sign)
{
    float *r = x + width - dr;
    for (int64_t i = 0; i < dr / 2; i++) {
        float ang = (float)pos * (float)inv_freq[i];
        float c = (float)(cos((double)ang) * af), s = (float)(sin((double)ang) * af) * (float)sign;
        float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c - b * s;
        r[2 * i + 1] = b * c + a * s;
    }
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The hyper-connection weights of one token (docs/design.md §5.9): pre (n), post (n),
 * comb (n, n) from y = fn · RMSNorm(flatten(X)) ((2+n)·n). */
static void hc_weights(const numla_v4_model *m, const float *y, const float *base,
                       const float *scale, float *pre, float *post, float *comb)
{
    const numla_v4_config *v = &m->cfg.v4;
    const int64_t n = v->hc_mult;
    const float eps = (float)v->hc_eps;
    for (int64_t j = 0; j < n; j++) {
        pre[j] = sigmoidf_(y[j] * scale[0] + base[j]) + eps;
        post[j] = 2.0f * sigmoidf_(y[n + j] * scale[1] + base[n + j]);
    }
    for (int64_t j = 0; j < n; j++) { /* row softmax */
        float *row = comb + j * n, mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < n; k++) {
            row[k] = y[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
            mx = fmaxf(mx, row[k]);
        }
        for (int64_t k = 0; k < n; k++)
            sum += row[k] = expf(row[k] - mx);
        for (int64_t k = 0; k < n; k++)
            row[k] = row[k] / sum + eps;
    }
    for (int64_t it = 0; it < v->hc_sinkhorn_iters; it++) {
        if (it > 0)
            for (int64_t j = 0; j < n; j++) { /* rows */
                float s = 0;
                for (int64_t k = 0; k < n; k++)
                    s += comb[j * n + k];
                for (int64_t k = 0; k < n; k++)
                    comb[j * n + k] /= s + eps;
            }
        for (int64_t k = 0; k < n; k++) { /* columns */
            float s = 0;
            for (int64_t j = 0; j < n; j++)
                s += comb[j * n + k];
            for (int64_t j = 0; j < n; j++)
                comb[j * n + k] /= s + eps;
        }
    }
}

/* y (T, rows of fn) = fn · RMSNorm(flatten(X_t)) for every token, unweighted norm. */
static numla_status hc_mix(const numla_v4_model *m, const v4_lin *fn, const float *X, int64_t T,
                           float *flat, float *y)
{
    const int64_t nD = m->cfg.v4.hc_mult * m->cfg.hidden_size;
    memcpy(flat, X, sizeof(float) * (size_t)(T * nD));
    for (int64_t t = 0; t < T; t++)
        rms(flat + t * nD, NULL, nD, m->cfg.rms_norm_eps);
    NUMLA_CHECK(lin(m, fn, T, flat, y));
    return NUMLA_STATUS_OK;
}

/* Feed one position's raw compressor rows into s; when it closes a window, make that window's
 * entry (docs/design.md §5.9) and append it. */
static numla_status comp_push(const numla_v4_model *m, const v4_comp *c, v4_cstate *s,
                              const float *kv, const float *gate, int64_t pos)
{
    const int64_t row = c->c * c->width, R = c->rate, w = c->width;
    const int64_t slot = pos % (2 * R);
    memcpy(s->raw_kv + slot * row, kv, sizeof(float) * (size_t)row);
    memcpy(s->raw_gate + slot * row, gate, sizeof(float) * (size_t)row);
    if ((pos + 1) % R)
        return NUMLA_STATUS_OK;
    const int64_t win = (pos + 1) / R - 1;
    NUMLA_CHECK(cstate_room(m, c, s, s->count + 1)); /* a step reserved it (or its table
                                                         covers it): no call */
    float *out = s->tmp;
    const int64_t cur0 = (win * R) % (2 * R), prev0 = ((win + 1) * R) % (2 * R);
    /* slots: CSA: the previous window's first halves (win > 0), then this window's second
     * halves; HCA: this window. A softmax over the slots per channel, in two passes. */
    const int prevw = c->c == 2 && win > 0;
    const int64_t off = c->c == 2 ? w : 0;
    for (int64_t d = 0; d < w; d++) {
        float mx = -INFINITY;
        for (int half = prevw ? 0 : 1; half < 2; half++)
            for (int64_t j = 0; j < R; j++) {
                const int64_t sl = (half ? cur0 : prev0) + j, ch = (half ? off : 0) + d;
                mx = fmaxf(mx, s->raw_gate[sl * row + ch] + c->ape[j * row + ch]);
            }
        float sum = 0, acc = 0;
        for (int half = prevw ? 0 : 1; half < 2; half++)
            for (int64_t j = 0; j < R; j++) {
                const int64_t sl = (half ? cur0 : prev0) + j, ch = (half ? off : 0) + d;
                const float e = expf(s->raw_gate[sl * row + ch] + c->ape[j * row + ch] - mx);
                sum += e;
                acc += e * s->raw_kv[sl * row + ch];
            }
        out[d] = acc / sum;
    }
    rms(out, c->norm, w, m->cfg.rms_norm_eps);
    const numla_v4_config *v = &m->cfg.v4;
    rope_tail(out, w, v->rope_dim, v->compress_inv_freq, v->compress_attention_factor, win * R, 1);
    v4_put(m, cs_entry(m, c, s, s->count), out, w);
    s->count++;
    return NUMLA_STATUS_OK;
}

/* The sequences of one forward: rows start[b] .. start[b+1] belong to seqs[b], at positions
 * seqs[b]->len + (row - start[b]). */
typedef struct v4_batch {
    int32_t B;
    numla_v4_seq *const *seqs; /* (B) */
    const int64_t *start;      /* (B + 1) */
} v4_batch;

/* CSA: each row's entries (sel (T, index_topk), nsel (T) holding every row's visible count):
 * rows that see no more than index_topk entries attend all of them; the others the top
 * index_topk by the lightning indexer's score (docs/design.md §5.9), through kernels/dsa.h's
 * scoring with fused top-k (higher score first, ties to the lower entry): per sequence, its
 * rows past index_topk visible entries as one query each over the index keys made so far. */
static numla_status v4_select(const numla_v4_model *m, const v4_batch *bt, int64_t l,
                              const int64_t *rpos, const float *qi, const float *iw, int32_t *sel,
                              int32_t *nsel)
{
    const numla_v4_config *v = &m->cfg.v4;
    const int64_t Hi = v->index_n_heads, Di = v->index_head_dim, K = v->index_topk;
    const float ws = (float)(1.0 / sqrt((double)Hi));
    numla_status st = NUMLA_STATUS_OK;
    for (int b = 0; b < bt->B && st == NUMLA_STATUS_OK; b++) {
        const v4_cstate *ic = &bt->seqs[b]->layers[l].icomp;
        const int64_t t1 = bt->start[b + 1];
        int64_t first = t1; /* rows past K visible entries: a tail, positions increase */
        for (int64_t t = bt->start[b]; t < t1; t++) {
            if (nsel[t] > K) {
                if (first == t1)
                    first = t;
                continue;
            }
            for (int32_t i = 0; i < nsel[t]; i++)
                sel[t * K + i] = i;
        }
        const int64_t n = t1 - first;
        if (n == 0)
            continue;
        /* the keys: in the pool, through the sequence's block table (blocks of epb keys), else
         * its own array as one block; every query reads that one table (stride 0) */
        static const int32_t one_block = 0;
        const int64_t last = (rpos[t1 - 1] + 1) / v->csa_rate;
        const int64_t kbs = ic->pool ? ic->epb : ic->count;
        const int64_t nb = ic->pool ? (last + kbs - 1) / kbs : 1;
        float *w = v4_room(m, V4_S_IDX_W, sizeof(float) * (size_t)(n * Hi));
        int32_t *lens = v4_room(m, V4_S_IDX_LENS, sizeof(int32_t) * (size_t)n);
        if (w && lens) {
            for (int64_t i = 0; i < n * Hi; i++)
                w[i] = iw[first * Hi + i] * ws;
            for (int64_t i = 0; i < n; i++)
                lens[i] = (int32_t)((rpos[first + i] + 1) / v->csa_rate);
            const numla_dsa_index_args a = {
                .num_seqs = (int32_t)n, .num_heads = (int32_t)Hi, .head_dim = (int32_t)Di,
                .block_size = (int32_t)kbs, .num_blocks = ic->pool ? ic->pool_blocks : 1,
                .max_blocks_per_seq = (int32_t)nb, .block_table_stride = 0,
                .topk = (int32_t)K, .q = qi + first * Hi * Di, .q_dtype = NUMLA_DTYPE_F32,
                .w = w, .kcache = ic->pool ? (const void *)ic->pool : ic->entries,
                .k_dtype = m->cache_bf16 ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32,
                .block_tables = ic->pool ? ic->tab : &one_block,
                .seq_lens = lens, .query_start_loc = NULL, .causal = 0,
                .scale = (float)(1.0 / sqrt((double)Di)), .indices = sel + first * K,
                .counts = nsel + first};
            const size_t need = numla_dsa_index_workspace_size(m->isa, &a, omp_get_max_threads());
            void *work = v4_room(m, V4_S_IDX_WS, need + 1);
            st = work ? numla_dsa_index(m->isa, &a, work, need) : NUMLA_STATUS_NO_MEMORY;
        } else {
            st = NUMLA_STATUS_NO_MEMORY;
        }
    }
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "v4 forward: layer %lld: the indexer's selection failed", (long long)l);
    return NUMLA_STATUS_OK;
}

/* The attention block of layer l on the batch's T rows: x (T, D) normed input, out (T, D).
 * Projections run over all rows at once; the window, the compressors and the indexer per
 * sequence. Updates the sequences' caches. */
static numla_status attention(const numla_v4_model *m, const v4_batch *bt, int64_t l,
                              const float *x, int64_t T, float *out)
{
    const numla_model_config *c = &m->cfg;
    const numla_v4_config *v = &c->v4;
    const v4_layer *y = &m->layers[l];
    /* this rank's heads H and output groups G (whole groups: kin inputs each) */
    const int64_t D = c->hidden_size, H = m->hcount, Dh = v->head_dim;
    const int64_t Rq = v->q_lora_rank, W = v->sliding_window, dr = v->rope_dim;
    const int64_t G = m->gcount, Ro = v->o_lora_rank;
    const int64_t kin = c->num_attention_heads * Dh / v->o_groups;
    const int64_t Hi = v->index_n_heads, Di = v->index_head_dim;
    const double *fq = y->attn == NUMLA_V4_ATTN_SLIDING ? v->main_inv_freq : v->compress_inv_freq;
    const double af = y->attn == NUMLA_V4_ATTN_SLIDING ? 1.0 : v->compress_attention_factor;
    const double eps = c->rms_norm_eps;
    const int B = bt->B;
    const int ncomp = y->attn == NUMLA_V4_ATTN_CSA ? 2 : y->attn == NUMLA_V4_ATTN_HCA ? 1 : 0;
    numla_status st = NUMLA_STATUS_OK;
    /* per sequence: cached window rows before the step (prev), where its window rows start in
     * win (woff); per row: its sequence and position */
    int64_t *prev = v4_room(m, V4_S_PREV, sizeof(int64_t) * (size_t)B);
    int64_t *woff = v4_room(m, V4_S_WOFF, sizeof(int64_t) * (size_t)(B + 1));
    int32_t *rseq = v4_room(m, V4_S_RSEQ, sizeof(int32_t) * (size_t)T);
    int64_t *rpos = v4_room(m, V4_S_RPOS, sizeof(int64_t) * (size_t)T);
    float *qr = NULL, *q = NULL, *kvn = NULL, *o = NULL, *yg = NULL, *tmp = NULL;
    char *win = NULL; /* (woff[B], Dh) each sequence's window rows in the cache dtype */
    const size_t es = v4_es(m);
    float *yo = NULL;
    float *ck = NULL, *cg = NULL, *qi = NULL, *iw = NULL;
    const void **wp = NULL, **ep = NULL;  /* (T) each row's window, its compressed entries */
    const int32_t **etab = NULL;          /* (T) the entries' block table (in the pool) or NULL */
    int32_t *wl = NULL, *nsel = NULL;     /* (T) window rows, entries attended */
    int32_t *sel = NULL;                  /* (T, index_topk) CSA: the entries attended */
    if (!prev || !woff || !rseq || !rpos) {
        st = NUMLA_STATUS_NO_MEMORY;
        goto done;
    }
    woff[0] = 0;
    for (int b = 0; b < B; b++) {
        const int64_t p0 = bt->seqs[b]->len, n = bt->start[b + 1] - bt->start[b];
        prev[b] = p0 < W - 1 ? p0 : W - 1;
        woff[b + 1] = woff[b] + prev[b] + n;
        for (int64_t t = bt->start[b]; t < bt->start[b + 1]; t++) {
            rseq[t] = b;
            rpos[t] = p0 + (t - bt->start[b]);
        }
    }
    qr = v4_room(m, V4_S_QR, sizeof(float) * (size_t)(T * Rq));
    q = v4_room(m, V4_S_Q, sizeof(float) * (size_t)(T * H * Dh));
    kvn = v4_room(m, V4_S_KVN, sizeof(float) * (size_t)(T * Dh));
    win = v4_room(m, V4_S_WIN, es * (size_t)(woff[B] * Dh));
    o = v4_room(m, V4_S_O, sizeof(float) * (size_t)(T * H * Dh));
    yg = v4_room(m, V4_S_YG, sizeof(float) * (size_t)(T * G * Ro));
    tmp = v4_room(m, V4_S_TMP, sizeof(float) * (size_t)(T * kin));
    yo = v4_room(m, V4_S_YO, sizeof(float) * (size_t)(T * Ro));
    if (!qr || !q || !kvn || !win || !o || !yg || !tmp || !yo) {
        st = NUMLA_STATUS_NO_MEMORY;
        goto done;
    }
    memset(o, 0, sizeof(float) * (size_t)(T * H * Dh));
    if ((st = lin(m, &y->wq_a, T, x, qr)))
        goto done;
    for (int64_t t = 0; t < T; t++)
        rms(qr + t * Rq, y->q_norm, Rq, eps);
    if ((st = lin(m, &y->wq_b, T, qr, q)) || (st = lin(m, &y->wkv, T, x, kvn)))
        goto done;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            float *qh = q + (t * H + h) * Dh;
            rms(qh, NULL, Dh, eps);
            rope_tail(qh, Dh, dr, fq, af, rpos[t], 1);
        }
        rms(kvn + t * Dh, y->kv_norm, Dh, eps);
        rope_tail(kvn + t * Dh, Dh, dr, fq, af, rpos[t], 1);
        if (m->cache_bf16) /* the row as the cache keeps it, whichever step reads it */
            for (int64_t d = 0; d < Dh; d++)
                kvn[t * Dh + d] = numla_bf16_to_f32(numla_f32_to_bf16(kvn[t * Dh + d]));
    }
    /* each sequence's window in the cache dtype (the attention reads it as the cache keeps
     * it): its cached rows, then its new ones */
    for (int b = 0; b < B; b++) {
        const v4_lcache *lc = &bt->seqs[b]->layers[l];
        const int64_t p0 = bt->seqs[b]->len, n = bt->start[b + 1] - bt->start[b];
        for (int64_t i = 0; i < prev[b]; i++)
            memcpy(win + (size_t)((woff[b] + i) * Dh) * es,
                   v4_cat(m, lc->ring, ((p0 - prev[b] + i) % W) * Dh), es * (size_t)Dh);
        v4_put(m, win + (size_t)((woff[b] + prev[b]) * Dh) * es, kvn + bt->start[b] * Dh, n * Dh);
    }
    /* the compressors: every row, each sequence's in order */
    const v4_comp *cps[2] = {&y->comp, &y->icomp};
    for (int ci = 0; ci < ncomp; ci++) {
        const v4_comp *cp = cps[ci];
        const int64_t row = cp->c * cp->width;
        ck = v4_room(m, V4_S_CK, sizeof(float) * (size_t)(T * row));
        cg = v4_room(m, V4_S_CG, sizeof(float) * (size_t)(T * row));
        if (!ck || !cg) {
            st = NUMLA_STATUS_NO_MEMORY;
            goto done;
        }
        if ((st = lin(m, &cp->wkv, T, x, ck)) || (st = lin(m, &cp->wgate, T, x, cg)))
            goto done;
        for (int64_t t = 0; t < T; t++) {
            v4_lcache *lc = &bt->seqs[rseq[t]]->layers[l];
            if ((st = comp_push(m, cp, ci ? &lc->icomp : &lc->comp, ck + t * row, cg + t * row,
                                rpos[t])))
                goto done;
            v4_capture_carry(bt->seqs[rseq[t]], l, ci, cp, ci ? &lc->icomp : &lc->comp, rpos[t]);
        }
    }
    /* CSA: the indexer's queries and head weights */
    if (y->attn == NUMLA_V4_ATTN_CSA) {
        qi = v4_room(m, V4_S_QI, sizeof(float) * (size_t)(T * Hi * Di));
        iw = v4_room(m, V4_S_IW, sizeof(float) * (size_t)(T * Hi));
        if (!qi || !iw) {
            st = NUMLA_STATUS_NO_MEMORY;
            goto done;
        }
        if ((st = lin(m, &y->iwq_b, T, qr, qi)) || (st = lin(m, &y->iweights, T, x, iw)))
            goto done;
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hi; h++)
                rope_tail(qi + (t * Hi + h) * Di, Di, dr, v->compress_inv_freq,
                          v->compress_attention_factor, rpos[t], 1);
    }
    /* each row's compressed entries: every visible one (HCA, or CSA with no more than
     * index_topk visible), else the indexer's top index_topk (v4_select); then the attention
     * over them, the window and the sink (kernels/sink_attn.h) */
    const int64_t K = y->attn == NUMLA_V4_ATTN_CSA ? v->index_topk : 0;
    const int64_t rate = ncomp ? y->comp.rate : 1;
    int64_t epb = 1; /* entries a pool block (the same for every sequence in the pool) */
    wp = v4_room(m, V4_S_WP, sizeof *wp * (size_t)T);
    ep = v4_room(m, V4_S_EP, sizeof *ep * (size_t)T);
    etab = v4_room(m, V4_S_ETAB, sizeof *etab * (size_t)T);
    wl = v4_room(m, V4_S_WL, sizeof *wl * (size_t)T);
    nsel = v4_room(m, V4_S_NSEL, sizeof *nsel * (size_t)T);
    sel = K ? v4_room(m, V4_S_SEL, sizeof *sel * (size_t)(T * K)) : NULL; /* NULL: every entry */
    if (!wp || !ep || !etab || !wl || !nsel || (K && !sel)) {
        st = NUMLA_STATUS_NO_MEMORY;
        goto done;
    }
    memset(nsel, 0, sizeof *nsel * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        const int b = rseq[t];
        const int64_t p0 = bt->seqs[b]->len, pos = rpos[t];
        const int64_t lo = pos - W + 1 > 0 ? pos - W + 1 : 0; /* first window position */
        wp[t] = win + (size_t)((woff[b] + lo - (p0 - prev[b])) * Dh) * es;
        wl[t] = (int32_t)(pos - lo + 1);
        const v4_cstate *ec = &bt->seqs[b]->layers[l].comp;
        ep[t] = !ncomp ? NULL : ec->pool ? (const void *)ec->pool : ec->entries;
        etab[t] = ncomp && ec->pool ? ec->tab : NULL;
        if (ncomp && ec->pool)
            epb = ec->epb;
        nsel[t] = ncomp ? (int32_t)((pos + 1) / rate) : 0;
    }
    if (K && (st = v4_select(m, bt, l, rpos, qi, iw, sel, nsel)))
        goto done;
    {
        /* window rows and entries read in place in the cache dtype */
        const numla_sink_attn_args a = {(int32_t)T, (int32_t)H, (int32_t)Dh, q, wp, wl, ep, sel,
                                        (int32_t)K, nsel, y->sink + m->h0,
                                        (float)c->softmax_scale, o,
                                        m->cache_bf16 ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32,
                                        etab, (int32_t)epb};
        const size_t need = numla_sink_attn_workspace_size(m->isa, &a, omp_get_max_threads());
        void *ws = v4_room(m, V4_S_SINK_WS, need);
        st = ws ? numla_sink_attn(m->isa, &a, ws, need) : NUMLA_STATUS_NO_MEMORY;
        if (st)
            goto done;
    }
    /* the output's rope slice rotated back by each query's position */
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            rope_tail(o + (t * H + h) * Dh, Dh, dr, fq, af, rpos[t], -1);
    /* grouped output projection: local group g = local heads g·H/G .. (g+1)·H/G - 1,
     * contiguous in o; wo_b's columns of this rank's groups give a partial sum */
    for (int64_t g = 0; g < G; g++) {
        for (int64_t t = 0; t < T; t++)
            memcpy(tmp + t * kin, o + t * H * Dh + g * kin, sizeof(float) * (size_t)kin);
        if ((st = lin(m, &y->wo_a[g], T, tmp, yo)))
            goto done;
        for (int64_t t = 0; t < T; t++)
            memcpy(yg + t * G * Ro + g * Ro, yo + t * Ro, sizeof(float) * (size_t)Ro);
    }
    if ((st = lin(m, &y->wo_b, T, yg, out)) || (st = v4_reduce(m, out, T * D)))
        goto done;
    /* each window ring keeps its sequence's last W rows (and a prefix state its segments) */
    for (int b = 0; b < B; b++) {
        v4_lcache *lc = &bt->seqs[b]->layers[l];
        const int64_t p0 = bt->seqs[b]->len, nw = woff[b + 1] - woff[b];
        if (bt->seqs[b]->ncap)
            v4_capture_rows(bt->seqs[b], l, win + (size_t)(woff[b] * Dh) * es, p0 - prev[b]);
        for (int64_t i = nw > W ? nw - W : 0; i < nw; i++)
            memcpy(v4_at(m, lc->ring, ((p0 - prev[b] + i) % W) * Dh),
                   win + (size_t)((woff[b] + i) * Dh) * es, es * (size_t)Dh);
    }
done: /* the buffers are the model's scratch */
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "v4 forward: layer %lld attention failed", (long long)l);
    return NUMLA_STATUS_OK;
}

/* One expert (or the shared one) on M tokens: d (M, D) = w2(silu(min(w1 x, L)) · clamp(w3 x,
 * -L, L)); g, u (M, I) scratch. In a step of at most NUMLA_LINEAR_ROW_INVARIANT_M rows (a verify
 * step's, docs/speculative.md) each row keeps the bits of a one-row step: block-quantized
 * weights run in calls of at most numla_qblock_row_invariant_m rows (MXFP4's AMX tiles start
 * below that count), every row the same products either way. */
static numla_status expert(const numla_v4_model *m, const v4_lin *w1, const v4_lin *w2,
                           const v4_lin *w3, const float *x, int64_t M, int64_t step_rows, float *g,
                           float *u, float *d)
{
    const int64_t I = w1->n, D = w2->n;
    const float L = (float)m->cfg.v4.swiglu_limit;
    int64_t part = M;
    if (step_rows <= NUMLA_LINEAR_ROW_INVARIANT_M) {
        const v4_lin *ws[3] = {w1, w2, w3};
        for (int i = 0; i < 3; i++)
            if (ws[i]->blocks) {
                const int64_t p = numla_qblock_row_invariant_m(lin_run_isa(m, ws[i]), &ws[i]->q);
                part = p < part ? p : part;
            }
    }
    for (int64_t r0 = 0; r0 < M; r0 += part) {
        const int64_t n = M - r0 < part ? M - r0 : part;
        float *gr = g + r0 * I, *ur = u + r0 * I;
        NUMLA_CHECK(lin(m, w1, n, x + r0 * w1->k, gr));
        NUMLA_CHECK(lin(m, w3, n, x + r0 * w1->k, ur));
        for (int64_t i = 0; i < n * I; i++) {
            float a = fminf(gr[i], L), b = fminf(fmaxf(ur[i], -L), L);
            gr[i] = a / (1.0f + expf(-a)) * b;
        }
        NUMLA_CHECK(lin(m, w2, n, gr, d + r0 * D));
    }
    return NUMLA_STATUS_OK;
}

/* Routed experts per token that experts_team takes at once (V4-Flash and V4-Pro route 6). */
enum { NUMLA_V4_TEAM_EXPERTS = 16 };

/* A GEMV (M = 1) on block-quantized rows: y (w->n) = w · x. */
typedef struct v4_rows_job {
    const numla_qblock_weight *w;
    const float *x; /* (w->k) */
    float *y;       /* (w->n) */
} v4_rows_job;

/* Whether lin_rows_team takes l: block-quantized rows (the FP4 experts; fp32 or int8
 * activations) in the ROWS layout, which numla_qblock_rows slices. */
static int rows_team_takes(const v4_lin *l)
{
    return l->blocks && l->q.layout == NUMLA_QBLOCK_LAYOUT_ROWS;
}

/* count GEMVs in one parallel region: the team splits the rows of all of them evenly, each
 * thread running its share as slices (numla_qblock_rows; the forward's own region then has one
 * thread), instead of a region per GEMV: one fork, join and wait for the slower thread for all
 * of them. Each row's output has the bits a whole-weight forward gives it (kernels/qblock.h). */
static numla_status lin_rows_team(const numla_v4_model *m, const v4_rows_job *j, int count)
{
    static const v4_lin blocks = {.blocks = 1}; /* the family of the jobs' weights */
    const numla_isa isa = lin_run_isa(m, &blocks);
    int64_t total = 0;
    for (int i = 0; i < count; i++)
        total += j[i].w->n;
    lin_count(m, &blocks, lin_isa(m, &blocks), (uint64_t)count);
    /* a thread's own workspace for its slices' M = 1 forwards (Q8 mode: x rounded to int8; F32
     * mode needs none), the most any job needs */
    size_t ws = 0;
    for (int i = 0; i < count; i++) {
        const size_t need = numla_qblock_workspace_size(j[i].w, 1, 1);
        ws = need > ws ? need : ws;
    }
    ws = (ws + 63) & ~(size_t)63;
    const int team = omp_get_max_threads();
    char *room = ws ? v4_room(m, V4_S_TEAM_WS, ws * (size_t)team) : NULL;
    if (ws && !room)
        return NUMLA_STATUS_NO_MEMORY; /* the caller names it */
    numla_status st = NUMLA_STATUS_OK;
#pragma omp parallel num_threads(team)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        void *mine = room ? room + (size_t)t * ws : NULL;
        const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
        int64_t base = 0;
        for (int i = 0; i < count; base += j[i].w->n, i++) {
            const int64_t r0 = lo > base ? lo - base : 0;
            const int64_t r1 = hi - base < j[i].w->n ? hi - base : j[i].w->n;
            if (r0 >= r1)
                continue;
            numla_qblock_weight v;
            numla_status s = numla_qblock_rows(j[i].w, r0, r1, &v);
            if (s == NUMLA_STATUS_OK)
                s = numla_qblock_forward(isa, &v, 1, j[i].x, v.k, j[i].y + r0, v.n, 0, mine, ws);
            if (s != NUMLA_STATUS_OK) {
#pragma omp critical(v4_rows_team)
                st = s;
            }
        }
    }
    NUMLA_CHECK(st);
    return NUMLA_STATUS_OK;
}

/* One token's routed experts on this rank, ex (ne, ascending local indices) with weights wt (ne),
 * added to out (D) as the per-expert loop of moe() adds them (expert order, wt · d): their gate
 * and up GEMVs in one lin_rows_team region, their downs in another, so a decode layer's experts
 * take two parallel regions instead of three each. The same products and sums as expert() per
 * expert, so the same bits. NO_MEMORY (not set as the error) without scratch. */
static numla_status experts_team(const numla_v4_model *m, const v4_layer *y, const int64_t *ex,
                                 const float *wt, int ne, const float *x, float *out)
{
    const int64_t D = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    const float L = (float)m->cfg.v4.swiglu_limit;
    float *g = v4_room(m, V4_S_TEAM_G, sizeof(float) * (size_t)(ne * I));
    float *u = v4_room(m, V4_S_TEAM_U, sizeof(float) * (size_t)(ne * I));
    float *d = v4_room(m, V4_S_TEAM_D, sizeof(float) * (size_t)(ne * D));
    v4_rows_job *j = v4_room(m, V4_S_TEAM_J, sizeof *j * (size_t)(2 * ne));
    numla_status st = g && u && d && j ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    for (int i = 0; st == NUMLA_STATUS_OK && i < ne; i++) {
        j[2 * i] = (v4_rows_job){&y->w1[ex[i]].q, x, g + i * I};
        j[2 * i + 1] = (v4_rows_job){&y->w3[ex[i]].q, x, u + i * I};
    }
    if (st == NUMLA_STATUS_OK)
        st = lin_rows_team(m, j, 2 * ne);
    for (int64_t i = 0; st == NUMLA_STATUS_OK && i < ne * I; i++) { /* as expert() */
        float a = fminf(g[i], L), b = fminf(fmaxf(u[i], -L), L);
        g[i] = a / (1.0f + expf(-a)) * b;
    }
    for (int i = 0; st == NUMLA_STATUS_OK && i < ne; i++)
        j[i] = (v4_rows_job){&y->w2[ex[i]].q, g + i * I, d + i * D};
    if (st == NUMLA_STATUS_OK)
        st = lin_rows_team(m, j, ne);
    for (int i = 0; st == NUMLA_STATUS_OK && i < ne; i++)
        for (int64_t c = 0; c < D; c++)
            out[c] += wt[i] * d[i * D + c];
    return st;
}

static float sqrtsoftplus(float x)
{
    float sp = x > 20.0f ? x : log1pf(expf(x)); /* torch's softplus, threshold 20 */
    return sqrtf(sp);
}

/* The MoE block of layer l on n tokens: x (n, D) normed, out (n, D). Each expert runs once on
 * the tokens routed to it. */
static numla_status moe(const numla_v4_model *m, int64_t l, const int32_t *tokens,
                        const float *x, int64_t n, float *out)
{
    const numla_model_config *c = &m->cfg;
    const v4_layer *y = &m->layers[l];
    const int64_t D = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    const int64_t I = c->moe_intermediate_size;
    float *logit = v4_room(m, V4_S_LOGIT, sizeof(float) * (size_t)(n * E));
    float *g = v4_room(m, V4_S_G, sizeof(float) * (size_t)(n * I));
    float *u = v4_room(m, V4_S_U, sizeof(float) * (size_t)(n * I));
    float *d = v4_room(m, V4_S_D, sizeof(float) * (size_t)(n * D));
    float *xs = v4_room(m, V4_S_XS, sizeof(float) * (size_t)(n * D));
    int64_t *sel = v4_room(m, V4_S_ESEL, sizeof(int64_t) * (size_t)(n * K));
    int64_t *rows = v4_room(m, V4_S_ROWS, sizeof(int64_t) * (size_t)n);
    float *wsel = v4_room(m, V4_S_WSEL, sizeof(float) * (size_t)(n * K));
    float *wrow = v4_room(m, V4_S_WROW, sizeof(float) * (size_t)n);
    uint8_t *used = v4_room(m, V4_S_USED, (size_t)E);
    numla_status st = logit && g && u && d && xs && sel && rows && wsel && wrow && used
                          ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    if (st == NUMLA_STATUS_OK)
        st = lin(m, &y->gate, n, x, logit);
    for (int64_t t = 0; st == NUMLA_STATUS_OK && t < n; t++) {
        float *s = logit + t * E;
        int64_t *idx = sel + t * K;
        for (int64_t e = 0; e < E; e++)
            s[e] = sqrtsoftplus(s[e]);
        if (y->hash) {
            for (int64_t k = 0; k < K; k++)
                idx[k] = y->tid2eid[(int64_t)tokens[t] * K + k];
        } else { /* top K of the biased scores, ties to the lower expert */
            memset(used, 0, (size_t)E);
            for (int64_t k = 0; k < K; k++) {
                int64_t best = -1;
                for (int64_t e = 0; e < E; e++)
                    if (!used[e] && (best < 0 || s[e] + y->gate_bias[e] > s[best] + y->gate_bias[best]))
                        best = e;
                idx[k] = best;
                used[best] = 1;
            }
        }
        float sum = 0;
        for (int64_t k = 0; k < K; k++)
            sum += s[idx[k]];
        for (int64_t k = 0; k < K; k++)
            wsel[t * K + k] = s[idx[k]] / (sum + 1e-20f) * (float)c->routed_scaling_factor;
    }
    /* this rank's part: the shared expert's columns on every token, then each of its routed
     * experts on the tokens routed to it; the ranks' parts summed */
    if (st == NUMLA_STATUS_OK && m->shard.shared_count > 0)
        st = expert(m, &y->sw1, &y->sw2, &y->sw3, x, n, n, g, u, out);
    else if (st == NUMLA_STATUS_OK)
        memset(out, 0, sizeof(float) * (size_t)(n * D));
    /* one token (decode) on FP4 experts: this rank's routed experts in two parallel regions */
    int64_t ex[NUMLA_V4_TEAM_EXPERTS];
    float wex[NUMLA_V4_TEAM_EXPERTS];
    int ne = 0, team = st == NUMLA_STATUS_OK && n == 1 && K <= NUMLA_V4_TEAM_EXPERTS;
    for (int64_t e = 0; team && e < m->shard.expert_count; e++) {
        const int64_t ge = m->shard.expert_begin + e;
        int hits = 0;
        for (int64_t k = 0; k < K; k++)
            if (sel[k] == ge) {
                hits++;
                ex[ne] = e;
                wex[ne] = wsel[k];
            }
        if (hits > 1 || (hits && !(rows_team_takes(&y->w1[e]) && rows_team_takes(&y->w2[e]) &&
                                   rows_team_takes(&y->w3[e]))))
            team = 0; /* an expert twice, or not block-quantized rows: the loop below */
        ne += hits;
    }
    if (team && ne > 0)
        st = experts_team(m, y, ex, wex, ne, x, out);
    for (int64_t e = 0; st == NUMLA_STATUS_OK && !team && e < m->shard.expert_count; e++) {
        const int64_t ge = m->shard.expert_begin + e;
        int64_t cnt = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < K; k++)
                if (sel[t * K + k] == ge) {
                    rows[cnt] = t;
                    wrow[cnt] = wsel[t * K + k];
                    memcpy(xs + cnt * D, x + t * D, sizeof(float) * (size_t)D);
                    cnt++;
                }
        if (!cnt)
            continue;
        st = expert(m, &y->w1[e], &y->w2[e], &y->w3[e], xs, cnt, n, g, u, d);
        for (int64_t r = 0; st == NUMLA_STATUS_OK && r < cnt; r++)
            for (int64_t i = 0; i < D; i++)
                out[rows[r] * D + i] += wrow[r] * d[r * D + i];
    }
    if (st == NUMLA_STATUS_OK)
        st = v4_reduce(m, out, n * D);
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "v4 forward: layer %lld MoE failed", (long long)l);
    return NUMLA_STATUS_OK;
}

/* One block with its hyper-connection: X (n_tok, hc, D) in place; flat (n_tok, hc·D) and
 * y (n_tok, (2+hc)·hc) scratch. */
static numla_status block(const numla_v4_model *m, const v4_batch *bt, int64_t l, int ffn,
                          const int32_t *tokens, int64_t n, float *X, float *xin, float *bout,
                          float *post, float *comb, float *flat, float *y)
{
    const numla_model_config *c = &m->cfg;
    const int64_t hc = c->v4.hc_mult, D = c->hidden_size, ny = (2 + hc) * hc;
    const v4_layer *ly = &m->layers[l];
    NUMLA_CHECK(hc_mix(m, &ly->hc_fn[ffn], X, n, flat, y));
    for (int64_t t = 0; t < n; t++) {
        float pre[NUMLA_V4_MAX_HC];
        const float *Xt = X + t * hc * D;
        hc_weights(m, y + t * ny, ly->hc_base[ffn], ly->hc_scale[ffn], pre, post + t * hc,
                   comb + t * hc * hc);
        float *xt = xin + t * D;
        for (int64_t i = 0; i < D; i++) {
            float a = 0;
            for (int64_t j = 0; j < hc; j++)
                a += pre[j] * Xt[j * D + i];
            xt[i] = a;
        }
        rms(xt, ffn ? ly->ffn_norm : ly->attn_norm, D, c->rms_norm_eps);
    }
    if (ffn)
        NUMLA_CHECK(moe(m, l, tokens, xin, n, bout));
    else
        NUMLA_CHECK(attention(m, bt, l, xin, n, bout));
    for (int64_t t = 0; t < n; t++) {
        float *Xt = X + t * hc * D, *old = flat + t * hc * D;
        const float *pt = post + t * hc, *cb = comb + t * hc * hc, *b = bout + t * D;
        memcpy(old, Xt, sizeof(float) * (size_t)(hc * D));
        for (int64_t k = 0; k < hc; k++)
            for (int64_t i = 0; i < D; i++) {
                float a = pt[k] * b[i];
                for (int64_t j = 0; j < hc; j++)
                    a += cb[j * hc + k] * old[j * D + i];
                Xt[k * D + i] = a;
            }
    }
    return NUMLA_STATUS_OK;
}

/* A stream buffer of at least rows (rows, n, D) in *buf (capacity *cap rows). */
static numla_status v4_stream_room(const numla_v4_model *m, float **buf, int64_t *cap, int64_t rows)
{
    if (rows <= *cap)
        return NUMLA_STATUS_OK;
    const int64_t nD = m->cfg.v4.hc_mult * m->cfg.hidden_size;
    float *b = realloc(*buf, sizeof(float) * (size_t)(rows * nD));
    if (!b)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 forward: no memory for the MTP layer's hidden rows");
    *buf = b;
    *cap = rows;
    return NUMLA_STATUS_OK;
}

/* Each sequence keeps its rows of the final streams X (T, n, D) for the MTP layer. */
static numla_status v4_keep_streams(const numla_v4_model *m, const v4_batch *bt, const float *X)
{
    const int64_t nD = m->cfg.v4.hc_mult * m->cfg.hidden_size;
    for (int32_t b = 0; b < bt->B; b++) {
        numla_v4_seq *s = bt->seqs[b];
        const int64_t r = bt->start[b + 1] - bt->start[b];
        NUMLA_CHECK(v4_stream_room(m, &s->hid, &s->hid_cap, r));
        memcpy(s->hid, X + bt->start[b] * nD, sizeof(float) * (size_t)(r * nD));
        s->hid_rows = r;
        s->hid_pos0 = s->len;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_forward(const numla_v4_model *m, numla_v4_seq *s, const int32_t *tokens,
                              int64_t n, float *logits)
{
    numla_v4_seq *seqs[1] = {s};
    const int32_t *tk[1] = {tokens};
    return numla_v4_forward_batch(m, 1, seqs, tk, &n, logits);
}

numla_status numla_v4_forward_batch(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                    const int32_t *const *toks, const int64_t *ns, float *logits)
{
    return numla_v4_forward_rows(m, B, seqs, toks, ns, -1, NULL, logits);
}

/* The streams X (n, hc, D) to logits: the hyper-head (fn, base, scale) collapses them, `norm`,
 * then the shared head over every row (R < 0) or rows[0..R) gathered into bout (R > 0; none
 * for R == 0). flat, y, xin, bout: scratch of the forward's sizes. Collective like the forward. */
static numla_status v4_head(const numla_v4_model *m, const v4_lin *fn, const float *base,
                            const float *scale, const float *norm, const float *X, int64_t n,
                            float *flat, float *y, float *xin, float *bout, int64_t R,
                            const int32_t *rows, float *logits)
{
    const numla_model_config *c = &m->cfg;
    const int64_t hc = c->v4.hc_mult, D = c->hidden_size;
    NUMLA_CHECK(hc_mix(m, fn, X, n, flat, y));
    for (int64_t t = 0; t < n; t++) {
        const float *Xt = X + t * hc * D;
        float *xt = xin + t * D;
        for (int64_t i = 0; i < D; i++)
            xt[i] = 0;
        for (int64_t j = 0; j < hc; j++) {
            float pre = sigmoidf_(y[t * hc + j] * scale[0] + base[j]) + (float)c->v4.hc_eps;
            for (int64_t i = 0; i < D; i++)
                xt[i] += pre * Xt[j * D + i];
        }
        rms(xt, norm, D, c->rms_norm_eps);
    }
    if (R < 0)
        NUMLA_CHECK(lin(m, &m->head, n, xin, logits));
    if (R > 0) {
        for (int64_t r = 0; r < R; r++)
            memcpy(bout + r * D, xin + (int64_t)rows[r] * D, sizeof(float) * (size_t)D);
        NUMLA_CHECK(lin(m, &m->head, R, bout, logits));
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_forward_rows(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                   const int32_t *const *toks, const int64_t *ns, int64_t R,
                                   const int32_t *rows, float *logits)
{
    if (!m || B < 1 || !seqs || !toks || !ns || (!logits && R != 0) || (R > 0 && !rows))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_forward: NULL argument or no sequence");
    const numla_model_config *c = &m->cfg;
    int64_t *start = v4_room(m, V4_S_START, sizeof(int64_t) * (size_t)(B + 1));
    if (!start)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 forward: no memory");
    start[0] = 0;
    for (int32_t b = 0; b < B; b++) {
        const numla_v4_seq *s = seqs[b];
        const int64_t n = ns[b];
        const char *bad = NULL;
        if (!s || !toks[b] || s->m != m)
            bad = "a NULL or foreign sequence";
        else if (n < 1)
            bad = "no new tokens";
        else if (s->len + n > c->max_position_embeddings)
            bad = "more tokens than max_position_embeddings";
        for (int32_t b2 = 0; !bad && b2 < b; b2++)
            if (seqs[b2] == s)
                bad = "a sequence given twice";
        for (int64_t t = 0; !bad && t < n; t++)
            if (toks[b][t] < 0 || toks[b][t] >= c->vocab_size)
                bad = "a token outside the vocabulary";
        if (bad)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_forward: sequence %d of %d has %s", b,
                       B, bad);
        start[b + 1] = start[b] + n;
    }
    const int64_t n = start[B];
    for (int64_t r = 0; r < R; r++)
        if (rows[r] < 0 || rows[r] >= n || R > n)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_forward: logit row %lld is %d, outside "
                       "the %lld new tokens", (long long)r, rows[r], (long long)n);
    const v4_batch bt = {B, seqs, start};
    for (int32_t b = 0; b < B; b++)
        v4_snap_save(m, seqs[b], ns[b]);
    int32_t *tokens = v4_room(m, V4_S_TOKENS, sizeof(int32_t) * (size_t)n);
    if (!tokens)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 forward: no memory");
    for (int32_t b = 0; b < B; b++)
        memcpy(tokens + start[b], toks[b], sizeof(int32_t) * (size_t)ns[b]);
    const int64_t hc = c->v4.hc_mult, D = c->hidden_size;
    float *X = v4_room(m, V4_S_X, sizeof(float) * (size_t)(n * hc * D));
    float *xin = v4_room(m, V4_S_XIN, sizeof(float) * (size_t)(n * D));
    float *bout = v4_room(m, V4_S_BOUT, sizeof(float) * (size_t)(n * D));
    float *post = v4_room(m, V4_S_POST, sizeof(float) * (size_t)(n * hc));
    float *comb = v4_room(m, V4_S_COMB, sizeof(float) * (size_t)(n * hc * hc));
    float *flat = v4_room(m, V4_S_FLAT, sizeof(float) * (size_t)(n * hc * D));
    float *y = v4_room(m, V4_S_Y, sizeof(float) * (size_t)(n * (2 + hc) * hc));
    numla_status st = X && xin && bout && post && comb && flat && y ? NUMLA_STATUS_OK
                                                                    : NUMLA_STATUS_NO_MEMORY;
    for (int64_t t = 0; st == NUMLA_STATUS_OK && t < n; t++)
        for (int64_t j = 0; j < hc; j++)
            memcpy(X + (t * hc + j) * D, m->embed + (int64_t)tokens[t] * D,
                   sizeof(float) * (size_t)D);
    for (int64_t l = 0; st == NUMLA_STATUS_OK && l < c->num_hidden_layers; l++) {
        st = block(m, &bt, l, 0, tokens, n, X, xin, bout, post, comb, flat, y);
        if (st == NUMLA_STATUS_OK)
            st = block(m, &bt, l, 1, tokens, n, X, xin, bout, post, comb, flat, y);
    }
    if (st == NUMLA_STATUS_OK && m->has_mtp)
        st = v4_keep_streams(m, &bt, X);
    /* the hyper-head, the final norm, the head */
    if (st == NUMLA_STATUS_OK)
        st = v4_head(m, &m->hc_head_fn, m->hc_head_base, m->hc_head_scale, m->norm, X, n, flat,
                     y, xin, bout, R, rows, logits);
    if (st == NUMLA_STATUS_OK)
        for (int32_t b = 0; b < B; b++)
            seqs[b]->len += ns[b];
    if (st != NUMLA_STATUS_OK) {
        numla_error_frame(__FILE__, __LINE__, __func__);
        return st;
    }
    return NUMLA_STATUS_OK;
}

/* ---- the MTP layer (docs/design.md §5.9) ---- */

int64_t numla_v4_seq_mtp_len(const numla_v4_seq *s) { return s && s->mtp ? s->mtp->len : 0; }

numla_status numla_v4_seq_mtp_capture(numla_v4_seq *s, numla_v4_prefix *const *states, int32_t n)
{
    if (!s || n < 0 || (n > 0 && !states) || !s->m->has_mtp)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_mtp_capture: %s",
                   s && !s->m->has_mtp ? "the model has no MTP layer" : "bad argument");
    if (!s->mtp)
        NUMLA_CHECK(mtp_seq_make(s));
    numla_v4_seq *t = s->mtp;
    t->ncap = 0;
    if (n == 0)
        return NUMLA_STATUS_OK;
    const int64_t stride = states[0] ? states[0]->stride : 0;
    for (int32_t i = 0; i < n; i++)
        if (!states[i] || states[i]->m != s->m || states[i]->stride != stride ||
            states[i]->pos <= t->len || states[i]->pos % stride ||
            (i > 0 && states[i]->pos <= states[i - 1]->pos))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_mtp_capture: state %d is not one "
                       "of the next MTP rows' (stride %lld, %lld rows held)", i,
                       (long long)stride, (long long)t->len);
    numla_v4_prefix **cap = realloc(t->cap, sizeof *cap * (size_t)n);
    if (!cap)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for prefix states");
    t->cap = cap;
    memcpy(cap, states, sizeof *cap * (size_t)n);
    t->ncap = n;
    t->cap_stride = stride;
    return NUMLA_STATUS_OK;
}

/* s's MTP cache: a sequence whose layers[L] alone is set. */
static numla_status mtp_seq_make(numla_v4_seq *s)
{
    const numla_v4_model *m = s->m;
    const int64_t L = m->cfg.num_hidden_layers;
    numla_v4_seq *t = calloc(1, sizeof *t);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for the MTP layer");
    t->m = m;
    t->slot = -1; /* its state is s's */
    t->layers = calloc((size_t)(L + 1), sizeof *t->layers);
    s->mtp = t;
    if (!t->layers)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 cache: no memory for the MTP layer");
    size_t at = 0; /* its part of s's fixed state (v4_state_carve) */
    v4_carve_layer(m, L, &t->layers[L], s->mtp_state, &at);
    return NUMLA_STATUS_OK;
}

/* Why row i of sequence b cannot run (NULL if it can): its hidden streams must be the row of the
 * same position in the last forward (src >= 0) or of the previous position in the last MTP step
 * (src < 0), at the MTP layer's next position. */
static const char *mtp_row_bad(const numla_v4_seq *s, int64_t i, int32_t tok, int32_t src,
                               int64_t V)
{
    const int64_t pos = (s->mtp ? s->mtp->len : 0) + i;
    if (tok < 0 || tok >= V)
        return "a token outside the vocabulary";
    if (src >= 0) {
        if (src >= s->hid_rows)
            return "a hidden row past the last forward's rows";
        if (s->hid_pos0 + src != pos)
            return "a hidden row of another position than the MTP row's";
    } else {
        const int64_t k = -1 - (int64_t)src;
        if (k >= s->mhid_rows)
            return "a chained row past the last MTP step's rows";
        if (s->mhid_pos0 + k + 1 != pos)
            return "a chained row not of the previous position";
    }
    return NULL;
}

numla_status numla_v4_mtp_forward(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                  const int32_t *const *toks, const int32_t *const *src,
                                  const int64_t *ns, int64_t R, const int32_t *rows, float *logits)
{
    if (!m || B < 1 || !seqs || !toks || !src || !ns || (!logits && R != 0) || (R > 0 && !rows))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_mtp_forward: NULL argument or no sequence");
    if (!m->has_mtp)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_mtp_forward: the model was loaded without "
                   "its MTP layer (numla_v4_config_enable_mtp)");
    const numla_model_config *c = &m->cfg;
    const int64_t L = c->num_hidden_layers, hc = c->v4.hc_mult, D = c->hidden_size, nD = hc * D;
    int64_t *start = v4_room(m, V4_S_START, sizeof(int64_t) * (size_t)(B + 1));
    numla_v4_seq **subs = v4_room(m, V4_S_SUBS, sizeof *subs * (size_t)B);
    if (!start || !subs)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 MTP forward: no memory");
    start[0] = 0;
    const char *bad = NULL;
    int32_t bb = 0;
    for (int32_t b = 0; !bad && b < B; b++) {
        const numla_v4_seq *s = seqs[b];
        bb = b;
        if (!s || s->m != m || !toks[b] || !src[b])
            bad = "a NULL or foreign sequence";
        else if (ns[b] < 1)
            bad = "no rows";
        else if ((s->mtp ? s->mtp->len : 0) + ns[b] > c->max_position_embeddings)
            bad = "more rows than max_position_embeddings";
        for (int32_t b2 = 0; !bad && b2 < b; b2++)
            if (seqs[b2] == s)
                bad = "a sequence given twice";
        for (int64_t i = 0; !bad && i < ns[b]; i++)
            bad = mtp_row_bad(s, i, toks[b][i], src[b][i], c->vocab_size);
        if (!bad)
            start[b + 1] = start[b] + ns[b];
    }
    const int64_t n = bad ? 0 : start[B];
    for (int64_t r = 0; !bad && r < R; r++)
        if (rows[r] < 0 || rows[r] >= n || R > n)
            bad = "a logit row outside its rows";
    if (bad) {
        for (int32_t b = 0; b < B; b++) /* armed captures end with the refused step */
            if (seqs[b] && seqs[b]->m == m && seqs[b]->mtp)
                seqs[b]->mtp->ncap = 0;
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_mtp_forward: sequence %d of %d has %s", bb,
                   B, bad);
    }
    numla_status st = NUMLA_STATUS_OK;
    for (int32_t b = 0; st == NUMLA_STATUS_OK && b < B; b++) {
        if (!seqs[b]->mtp)
            st = mtp_seq_make(seqs[b]);
        subs[b] = seqs[b]->mtp;
    }
    const v4_batch bt = {B, subs, start};
    for (int32_t b = 0; st == NUMLA_STATUS_OK && b < B; b++)
        v4_snap_save(m, subs[b], ns[b]);
    int32_t *tokens = v4_room(m, V4_S_TOKENS, sizeof(int32_t) * (size_t)n);
    float *X = v4_room(m, V4_S_X, sizeof(float) * (size_t)(n * nD));
    float *xin = v4_room(m, V4_S_XIN, sizeof(float) * (size_t)(n * D));
    float *bout = v4_room(m, V4_S_BOUT, sizeof(float) * (size_t)(n * D));
    float *post = v4_room(m, V4_S_POST, sizeof(float) * (size_t)(n * hc));
    float *comb = v4_room(m, V4_S_COMB, sizeof(float) * (size_t)(n * hc * hc));
    float *flat = v4_room(m, V4_S_FLAT, sizeof(float) * (size_t)(n * nD));
    float *y = v4_room(m, V4_S_Y, sizeof(float) * (size_t)(n * (2 + hc) * hc));
    if (st == NUMLA_STATUS_OK && !(tokens && X && xin && bout && post && comb && flat && y))
        st = NUMLA_STATUS_NO_MEMORY;
    /* e = e_proj · enorm(emb(t)) (xin -> bout); each stream h_proj · hnorm(X_j) (flat -> X) */
    for (int32_t b = 0; st == NUMLA_STATUS_OK && b < B; b++)
        for (int64_t i = 0; i < ns[b]; i++) {
            const int64_t t = start[b] + i;
            const numla_v4_seq *s = seqs[b];
            tokens[t] = toks[b][i];
            memcpy(xin + t * D, m->embed + (int64_t)tokens[t] * D, sizeof(float) * (size_t)D);
            rms(xin + t * D, m->mtp_enorm, D, c->rms_norm_eps);
            const int32_t sr = src[b][i];
            const float *h = sr >= 0 ? s->hid + sr * nD : s->mhid + (-1 - (int64_t)sr) * nD;
            memcpy(flat + t * nD, h, sizeof(float) * (size_t)nD);
            for (int64_t j = 0; j < hc; j++)
                rms(flat + t * nD + j * D, m->mtp_hnorm, D, c->rms_norm_eps);
        }
    if (st == NUMLA_STATUS_OK)
        st = lin(m, &m->mtp_e_proj, n, xin, bout);
    if (st == NUMLA_STATUS_OK)
        st = lin(m, &m->mtp_h_proj, n * hc, flat, X);
    for (int64_t t = 0; st == NUMLA_STATUS_OK && t < n; t++)
        for (int64_t j = 0; j < hc; j++)
            for (int64_t i = 0; i < D; i++)
                X[(t * hc + j) * D + i] += bout[t * D + i];
    if (st == NUMLA_STATUS_OK)
        st = block(m, &bt, L, 0, tokens, n, X, xin, bout, post, comb, flat, y);
    if (st == NUMLA_STATUS_OK)
        st = block(m, &bt, L, 1, tokens, n, X, xin, bout, post, comb, flat, y);
    /* the block output for chaining, each sequence's rows */
    for (int32_t b = 0; st == NUMLA_STATUS_OK && b < B; b++) {
        numla_v4_seq *s = seqs[b];
        st = v4_stream_room(m, &s->mhid, &s->mhid_cap, ns[b]);
        if (st == NUMLA_STATUS_OK) {
            memcpy(s->mhid, X + start[b] * nD, sizeof(float) * (size_t)(ns[b] * nD));
            s->mhid_rows = ns[b];
            s->mhid_pos0 = s->mtp->len;
        }
    }
    /* its hyper-head, its norm, the main head */
    if (st == NUMLA_STATUS_OK)
        st = v4_head(m, &m->mtp_hc_head_fn, m->mtp_hc_head_base, m->mtp_hc_head_scale,
                     m->mtp_norm, X, n, flat, y, xin, bout, R, rows, logits);
    if (st == NUMLA_STATUS_OK)
        for (int32_t b = 0; b < B; b++)
            seqs[b]->mtp->len += ns[b];
    /* the prefix states whose MTP rows are now all run have their MTP part; the captures end
     * with the step (states not reached stay without it) */
    for (int32_t b = 0; b < B; b++) {
        numla_v4_seq *t = seqs[b]->mtp;
        for (int32_t i = 0; t && st == NUMLA_STATUS_OK && i < t->ncap; i++)
            if (t->cap[i]->pos <= t->len)
                t->cap[i]->mtp_done = 1;
        if (t)
            t->ncap = 0;
    }
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "v4 MTP forward failed");
    return NUMLA_STATUS_OK;
}

/* ---- rolling back rejected drafts (docs/design.md §5.9) ---- */

numla_status numla_v4_seq_mark(numla_v4_seq *s)
{
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_mark: NULL sequence");
    NUMLA_CHECK(v4_snap_mark(s->m, s, 0, s->m->cfg.num_hidden_layers));
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seq_truncate(numla_v4_seq *s, int64_t n)
{
    const char *why = s ? v4_snap_why(s, n) : "no sequence";
    if (why)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_truncate: cannot go back to %lld "
                   "tokens: %s", (long long)n, why);
    if (n < s->len)
        v4_snap_restore(s->m, s, n);
    return NUMLA_STATUS_OK;
}

int numla_v4_seq_can_truncate(const numla_v4_seq *s, int64_t n) { return s && !v4_snap_why(s, n); }

numla_status numla_v4_seq_mtp_mark(numla_v4_seq *s)
{
    if (!s || !s->m->has_mtp)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_mtp_mark: no sequence or no MTP layer");
    if (!s->mtp)
        NUMLA_CHECK(mtp_seq_make(s));
    const int64_t L = s->m->cfg.num_hidden_layers;
    NUMLA_CHECK(v4_snap_mark(s->m, s->mtp, L, L + 1));
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seq_mtp_truncate(numla_v4_seq *s, int64_t n)
{
    const char *why = !s ? "no sequence" : !s->mtp ? (n ? "no MTP rows" : NULL)
                                                    : v4_snap_why(s->mtp, n);
    if (why)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seq_mtp_truncate: cannot go back to %lld "
                   "MTP rows: %s", (long long)n, why);
    if (s->mtp && n < s->mtp->len)
        v4_snap_restore(s->m, s->mtp, n);
    return NUMLA_STATUS_OK;
}

int numla_v4_seq_mtp_can_truncate(const numla_v4_seq *s, int64_t n)
{
    return s && (s->mtp ? !v4_snap_why(s->mtp, n) : n == 0);
}
