/* engine/model/weights.c — load one rank's shard into owned anonymous memory (see weights.h).
 *
 * Two passes over the same plan: pass 0 validates every tensor (collecting every problem into
 * one message) and sums the bytes; pass 1 copies/packs into one anonymous mapping sized by
 * pass 0, so the shard is a single huge-page-backed region and nothing runs from file pages
 * (docs/design.md §3). Which rows a rank takes: shard.c; reading, quantizing and dequantizing 8-bit
 * tensors: weights_quantize.c; running the loaded linears: model_linear.c.
 */
#include "engine/model/weights.h"
#include "engine/model/weights_internal.h"
#include "engine/model/quant_recipe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/qblock_quant.h"
#include "kernels/quant.h"

/* File ranges the copy has read (pass 1), given back to the OS a layer at a time so loading
 * peaks near the shard's size, not the shard plus the file (engine/formats/map_release.h). */
typedef struct ld_range {
    const void *p;
    size_t n;
} ld_range;
typedef struct ld_spent {
    ld_range *r;
    size_t n, cap;
} ld_spent;

typedef struct loader {
    const numla_model_config *cfg;
    const numla_safetensors_model *st;  /* one of st and view */
    const numla_weights_view *view;     /* a GGUF file's tensors under HF names */
    numla_isa isa;
    numla_weights_options opts;
    int pass;           /* 0: validate + size, 1: copy */
    char *arena;        /* pass 1 */
    size_t used;
    size_t loaded;
    char problems[8192];
    size_t problems_len;
    int num_problems;
    ld_spent *spent;    /* pass 1: file ranges read since the last ld_release */
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

/* The checkpoint's tensor called name: a GGUF file's entry under its HF name (L->view), or the
 * safetensors tensor under the config's tensor_prefix ("language_model." for Kimi K2.5's text
 * model); NULL when absent. */
static void ld_spend(const loader *L, const void *p, size_t n);

static const numla_safetensors_tensor *ld_find(const loader *L, const char *name)
{
    if (L->view) {
        const numla_weights_entry *e = numla_weights_view_find(L->view, name);
        if (e && e->src)
            ld_spend(L, e->src->data, e->src->nbytes);
        if (e && e->v_b)
            ld_spend(L, e->v_b->data, e->v_b->nbytes);
        return e ? &e->t : NULL;
    }
    const numla_safetensors_tensor *t;
    if (!L->cfg->tensor_prefix[0]) {
        t = numla_safetensors_find(L->st, name);
    } else {
        char full[400];
        snprintf(full, sizeof full, "%s%s", L->cfg->tensor_prefix, name);
        t = numla_safetensors_find(L->st, full);
    }
    if (t)
        ld_spend(L, t->data, t->nbytes);
    return t;
}

/* Note a file range the copy reads (pass 1 only). When the list cannot grow, the range is
 * released at once: it is read again from the page cache, nothing is lost. */
static void ld_spend(const loader *L, const void *p, size_t n)
{
    if (L->pass != 1 || !L->spent || !p || !n)
        return;
    ld_spent *s = L->spent;
    if (s->n == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 256;
        ld_range *r = realloc(s->r, cap * sizeof *r);
        if (!r) {
            if (L->view)
                numla_gguf_release(L->view->g, p, n);
            else
                numla_safetensors_release(L->st, p, n);
            return;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (ld_range){p, n};
}

/* Give back the resident pages of every range read since the last call: the copies are done
 * (pass 1, after the embedding, each layer and the head). */
static void ld_release(loader *L)
{
    if (!L->spent)
        return;
    for (size_t i = 0; i < L->spent->n; i++) {
        if (L->view)
            numla_gguf_release(L->view->g, L->spent->r[i].p, L->spent->r[i].n);
        else
            numla_safetensors_release(L->st, L->spent->r[i].p, L->spent->r[i].n);
    }
    L->spent->n = 0;
}

/* The GGUF entry behind a tensor ld_find returned, or NULL for a safetensors tensor. */
static const numla_weights_entry *ld_entry(const loader *L, const numla_safetensors_tensor *t)
{
    return L->view && t ? (const numla_weights_entry *)(const void *)t : NULL;
}

/* Elements [0, n) of a norm, router or bias tensor as fp32 (GGUF blocks dequantized). */
static numla_status ld_read_f32(const loader *L, const numla_safetensors_tensor *t, int64_t rows,
                                int64_t cols, float *dst)
{
    const numla_weights_entry *e = ld_entry(L, t);
    if (e && (e->qtype >= 0 || e->v_b))
        return numla_weights_entry_rows_f32(e, 0, rows, 0, cols, dst);
    for (int64_t i = 0; i < rows * cols; i++)
        dst[i] = numla_load_f32(t->data, t->dtype, (size_t)i);
    return NUMLA_STATUS_OK;
}

/* The tensor with the given shape, or NULL (pass 0 records why). */
static const numla_safetensors_tensor *ld_get(loader *L, const char *name, int32_t ndim,
                                     const int64_t *shape)
{
    const numla_safetensors_tensor *t = ld_find(L, name);
    if (L->pass == 1)
        return t;
    if (!t) {
        ld_problem(L, "missing %s%s", L->cfg->tensor_prefix, name);
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

/* numla_linear_pack at the loader's level; bf16 weights get the activation precision the
 * options ask for (numla_weights_options.linear_act; f32 weights have no choice). */
static numla_status ld_pack(const loader *L, int64_t n, int64_t k, const void *src, numla_dtype dt,
                            int64_t ld, void *dst, numla_linear_weight *out)
{
    NUMLA_CHECK(numla_linear_pack(L->isa, n, k, src, dt, ld, dst, out));
    if (out->dtype == NUMLA_DTYPE_BF16)
        out->act = L->opts.linear_act;
    return NUMLA_STATUS_OK;
}

/* A norm, router or embedding tensor must be a float type: an 8-bit one has no scale to read
 * it with. */
static void ld_want_float(loader *L, const numla_safetensors_tensor *t)
{
    const numla_weights_entry *e = ld_entry(L, t);
    if (e && e->qtype >= 0)
        return; /* GGUF blocks: dequantized with the encoding's reference */
    if (L->pass == 0 && t && (unsigned)t->dtype >= NUMLA_DTYPE_COUNT)
        ld_problem(L, "%s is %s; numla reads it only as F32, F16 or BF16", t->name,
                   numla_dtype_name(t->dtype));
}

static numla_status ld_norm(loader *L, const char *name, int64_t n, float **out)
{
    int64_t shape[1] = {n};
    const numla_safetensors_tensor *t = ld_get(L, name, 1, shape);
    ld_want_float(L, t);
    float *dst = ld_take(L, (size_t)n * 4);
    *out = dst;
    if (L->pass == 1) {
        NUMLA_CHECK(ld_read_f32(L, t, 1, n, dst));
        L->loaded += t->nbytes;
    }
    return NUMLA_STATUS_OK;
}

/* Pass 0: a file scale tensor's dtype, shape and values (finite, > 0). */
static void ld_check_scale(loader *L, const numla_weights_tensor *d, const char *sname)
{
    const numla_safetensors_tensor *s = d->scale;
    if (!s) {
        ld_problem(L, "missing %s (the scale of %s, %s)", sname, d->t->name,
                   numla_dtype_name(d->t->dtype));
        return;
    }
    if (s->dtype != NUMLA_DTYPE_F32) {
        ld_problem(L, "%s is %s, expected F32", sname, numla_dtype_name(s->dtype));
        return;
    }
    if (s->ndim != 2 || s->shape[0] != d->grid_rows || s->shape[1] != d->grid_cols) {
        ld_problem(L, "%s has %d dimensions (%lld, %lld), expected (%lld, %lld) for %s", sname,
                   s->ndim, (long long)s->shape[0], (long long)(s->ndim > 1 ? s->shape[1] : 0),
                   (long long)d->grid_rows, (long long)d->grid_cols, d->t->name);
        return;
    }
    const int64_t cnt = d->grid_rows * d->grid_cols;
    for (int64_t i = 0; i < cnt; i++) {
        float v;
        memcpy(&v, (const char *)s->data + (size_t)i * 4, 4);
        if (!isfinite(v) || v <= 0.0f) {
            ld_problem(L, "%s[%lld][%lld] = %g: a scale must be finite and positive", sname,
                       (long long)(i / d->grid_cols), (long long)(i % d->grid_cols), (double)v);
            return;
        }
    }
}

/* A compressed-tensors int4 linear `name` (X.weight): X.weight_packed I32 (full_n, full_k / 8),
 * X.weight_scale float (full_n, full_k / 32) finite, X.weight_shape I32/I64 (2) = (full_n,
 * full_k). Returns 0 when it is not there or not valid (pass 0 records why). */
static int ld_classify_int4(loader *L, const char *name, int64_t full_n, int64_t full_k,
                            numla_weights_tensor *d)
{
    char pn[300], sn[300], hn[300];
    snprintf(pn, sizeof pn, "%s_packed", name);
    snprintf(sn, sizeof sn, "%s_scale", name);
    snprintf(hn, sizeof hn, "%s_shape", name);
    const numla_safetensors_tensor *p = ld_find(L, pn), *sc = ld_find(L, sn), *sh = ld_find(L, hn);
    d->t = p;
    d->scale = sc;
    d->mode = NUMLA_WEIGHTS_INT4;
    if (L->pass == 1)
        return 1;
    if (!p) {
        ld_problem(L, "missing %s (nor %s: config.json's quantization_config is "
                   "compressed-tensors)", name, pn);
        return 0;
    }
    if (full_k % 32 || p->dtype != NUMLA_DTYPE_I32 || p->ndim != 2 || p->shape[0] != full_n ||
        p->shape[1] != full_k / 8) {
        ld_problem(L, "%s is %s (%lld, %lld), expected I32 (%lld, %lld) for an int4 (%lld, "
                   "%lld) weight in groups of 32", pn, numla_dtype_name(p->dtype),
                   (long long)p->shape[0], (long long)(p->ndim > 1 ? p->shape[1] : 0),
                   (long long)full_n, (long long)(full_k / 8), (long long)full_n,
                   (long long)full_k);
        return 0;
    }
    if (!sc || (unsigned)sc->dtype >= NUMLA_DTYPE_COUNT || sc->ndim != 2 ||
        sc->shape[0] != full_n || sc->shape[1] != full_k / 32) {
        ld_problem(L, "%s: missing, or not a float (%lld, %lld) tensor (the scales of %s)", sn,
                   (long long)full_n, (long long)(full_k / 32), pn);
        return 0;
    }
    if (sh) {
        int64_t v[2] = {-1, -1};
        for (int i = 0; i < 2 && sh->ndim == 1 && sh->shape[0] == 2; i++)
            v[i] = sh->dtype == NUMLA_DTYPE_I64 ? ((const int64_t *)sh->data)[i]
                   : sh->dtype == NUMLA_DTYPE_I32 ? ((const int32_t *)sh->data)[i]
                                                  : -1;
        if (v[0] != full_n || v[1] != full_k) {
            ld_problem(L, "%s is (%lld, %lld), expected (%lld, %lld)", hn, (long long)v[0],
                       (long long)v[1], (long long)full_n, (long long)full_k);
            return 0;
        }
    }
    for (int64_t i = 0; i < full_n * (full_k / 32); i++) {
        const float v = numla_load_f32(sc->data, sc->dtype, (size_t)i);
        if (!isfinite(v) || fabsf(v) > 65504.0f) {
            ld_problem(L, "%s[%lld][%lld] = %g: an int4 scale must be finite and fit fp16", sn,
                       (long long)(i / (full_k / 32)), (long long)(i % (full_k / 32)), (double)v);
            return 0;
        }
    }
    return 1;
}

/* Find and classify a (full_n, full_k) linear tensor; quantizable: it may be quantized while
 * loading. Returns 0 when it cannot be loaded (pass 0 recorded why). */
static int ld_classify(loader *L, const char *name, int64_t full_n, int64_t full_k,
                       int quantizable, numla_weights_tensor *d)
{
    int64_t shape[2] = {full_n, full_k};
    memset(d, 0, sizeof *d);
    d->full_n = full_n;
    d->full_k = full_k;
    if (L->cfg->weight_format == NUMLA_ENCODING_INT4 && !ld_find(L, name))
        return ld_classify_int4(L, name, full_n, full_k, d); /* else in `ignore`: as stored */
    d->t = ld_get(L, name, 2, shape);
    if (!d->t)
        return 0;
    const numla_dtype dt = d->t->dtype;
    const int want = L->opts.format;
    const numla_weights_entry *e = ld_entry(L, d->t);
    if (e && (e->qtype >= 0 || e->v_b)) {
        if (want == NUMLA_WEIGHT_FORMAT_FP8 || want == NUMLA_WEIGHT_FORMAT_INT8) {
            if (L->pass == 0)
                ld_problem(L, "%s (%s in %s) is %s: a GGUF file's blocks cannot be loaded as "
                           "%s", name, e->src->name, e->t.file,
                           e->qtype >= 0 ? numla_qblock_info_get((numla_qblock_type)e->qtype)->name
                                         : "attn_k_b + attn_v_b",
                           numla_model_config_format_name((numla_weight_format)want));
            return 0;
        }
        /* bf16 asked for: ld_linear_qblock dequantizes into fp32; q8_0 / q4_0: the file's
         * blocks stay as they are */
        d->mode = NUMLA_WEIGHTS_QBLOCK;
        return 1;
    }
    if (dt == NUMLA_DTYPE_F8_E4M3 || dt == NUMLA_DTYPE_I8) {
        const numla_weight_format wf =
            dt == NUMLA_DTYPE_F8_E4M3 ? NUMLA_WEIGHT_FORMAT_FP8 : NUMLA_WEIGHT_FORMAT_INT8;
        if (L->cfg->weight_format != wf) {
            if (L->pass == 0)
                ld_problem(L, "%s is %s but config.json's quantization_config is %s", name,
                           numla_dtype_name(dt),
                           L->cfg->weight_format == NUMLA_WEIGHT_FORMAT_NONE
                               ? "absent"
                               : numla_model_config_format_name(L->cfg->weight_format));
            return 0;
        }
        if (want >= 0 && want != NUMLA_WEIGHT_FORMAT_NONE && want != (int)wf) {
            if (L->pass == 0)
                ld_problem(L, "%s is %s: an %s checkpoint cannot be loaded as %s", name,
                           numla_dtype_name(dt), numla_model_config_format_name(wf),
                           numla_model_config_format_name((numla_weight_format)want));
            return 0;
        }
        d->mode = want == NUMLA_WEIGHT_FORMAT_NONE ? NUMLA_WEIGHTS_DEQUANT : NUMLA_WEIGHTS_Q8_FILE;
        d->fmt = numla_weights_q8_format(wf);
        char sname[300];
        snprintf(sname, sizeof sname, "%s%s", name,
                 wf == NUMLA_WEIGHT_FORMAT_FP8 ? "_scale_inv" : "_scale");
        d->scale = ld_find(L, sname);
        d->grid_rows = wf == NUMLA_WEIGHT_FORMAT_FP8 ? numla_quant_blocks(full_n) : full_n;
        d->grid_cols = wf == NUMLA_WEIGHT_FORMAT_FP8 ? numla_quant_blocks(full_k) : 1;
        if (L->pass == 0) {
            int before = L->num_problems;
            ld_check_scale(L, d, sname);
            if (L->num_problems != before)
                return 0;
        }
        return 1;
    }
    if (quantizable &&
        (want == NUMLA_ENCODING_Q8_0 || want == NUMLA_ENCODING_Q4_0 || want == NUMLA_ENCODING_Q4_K) &&
        (unsigned)dt < NUMLA_DTYPE_COUNT) {
        d->mode = NUMLA_WEIGHTS_QBLOCK_MAKE;
        return 1;
    }
    if (quantizable && (want == NUMLA_WEIGHT_FORMAT_FP8 || want == NUMLA_WEIGHT_FORMAT_INT8)) {
        d->mode = NUMLA_WEIGHTS_Q8_MAKE;
        d->fmt = numla_weights_q8_format((numla_weight_format)want);
        d->grid_rows = want == NUMLA_WEIGHT_FORMAT_FP8 ? numla_quant_blocks(full_n) : full_n;
        d->grid_cols = want == NUMLA_WEIGHT_FORMAT_FP8 ? numla_quant_blocks(full_k) : 1;
    }
    return 1;
}

/* How ld_linear_q packs a tensor. */
enum {
    LD_QUANTIZABLE = 1,      /* --weights may quantize it */
    LD_FP32_ACTIVATIONS = 2, /* int8 weights run with fp32 activations (INT8_ROW), not W8A8 */
    LD_SPLIT_INPUT = 4,      /* the input is split over the ranks (K slices): with
                              * LD_FP32_ACTIVATIONS, a block linear whose slice holds whole
                              * 256-column groups still takes Q8 activations (ld_linear_q) */
};

/* The activation mode a block linear of type qt with k columns runs in: the kernels' choice
 * at the engine's level (numla_qblock_act_for), F32 where the loader needs fp32 activations. */
static numla_qblock_act ld_qblock_act(const loader *L, numla_qblock_type qt, int64_t k, int flags)
{
    if ((flags & LD_FP32_ACTIVATIONS) || L->opts.qblock_fp32_act)
        return NUMLA_QBLOCK_ACT_F32;
    return numla_qblock_act_for(L->isa, qt, k);
}

/* The layout a block linear is stored in: the one its kernel at the engine's level runs on
 * (kernels/qblock.h: 16-row panels for the types it has panel kernels for, in Q8 mode at the VNNI level). */
static numla_qblock_layout ld_qblock_layout(const loader *L, numla_qblock_type qt, int64_t k, int flags)
{
    return numla_qblock_layout_for(L->isa, qt, ld_qblock_act(L, qt, k, flags), k);
}

/* Rows [r0, r0 + n) x columns [c0, c0 + k) of a GGUF tensor in ggml blocks. Rows are whole
 * blocks along K, so a row shard (heads, experts, MLP slices, vocabulary) is always the file's
 * bytes. A column shard (o_proj, down_proj of the dense MLP and shared experts: a K split) is
 * kept in blocks when c0 and k fall on the encoding's block (32 or 256 elements); otherwise,
 * and for the split layout's kv_b_proj (assembled from attn_k_b and attn_v_b), that shard is
 * dequantized once into fp32 (its share of the weights at 4 bytes each: say so in
 * docs/design.md §10). Activations are quantized per 256 columns (kernels/qblock.h Q8 mode,
 * llama.cpp's Q8_K idea) when k is a multiple of 256 and the input is whole on every rank;
 * a linear whose input is split over the ranks (LD_SPLIT_INPUT) takes them too where its slice
 * holds whole groups (ld_linear_q), and keeps fp32 activations where a group would be cut, so
 * that no group's quantization depends on where the split falls. */
static numla_status ld_linear_qblock(loader *L, const numla_weights_entry *e, int64_t r0,
                                     int64_t n, int64_t c0, int64_t k, int flags,
                                     numla_model_linear *out)
{
    const numla_qblock_info *in = e->qtype >= 0 && !e->v_b
                                      ? numla_qblock_info_get((numla_qblock_type)e->qtype)
                                      : NULL;
    const int blocks = in && c0 % in->block == 0 && k % in->block == 0 &&
                       L->opts.format != NUMLA_WEIGHT_FORMAT_NONE;
    if (!blocks) { /* fp32 (the cut shard, the assembled kv_b_proj, --weights bf16) */
        const numla_dtype dt = NUMLA_DTYPE_F32;
        void *dst = ld_take(L, numla_linear_packed_size(L->isa, n, k, dt));
        if (L->pass != 1)
            return NUMLA_STATUS_OK;
        float *tmp = malloc((size_t)n * (size_t)k * sizeof(float));
        if (!tmp)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to dequantize it", e->t.name);
        numla_status s = numla_weights_entry_rows_f32(e, r0, n, c0, k, tmp);
        if (s == NUMLA_STATUS_OK)
            s = ld_pack(L, n, k, tmp, dt, k, dst, &out->lin);
        free(tmp);
        NUMLA_CHECK(s);
        L->loaded += (size_t)n * (size_t)k * sizeof(float);
        return NUMLA_STATUS_OK;
    }
    const numla_qblock_type qt = (numla_qblock_type)e->qtype;
    void *dst = ld_take(L, numla_qblock_layout_size(qt, ld_qblock_layout(L, qt, k, flags), n, k));
    out->kind = NUMLA_MODEL_LINEAR_QBLOCK;
    if (L->pass != 1)
        return NUMLA_STATUS_OK;
    numla_qblock_source src = {
        .type = qt, .n = n, .k = k,
        .data = (const char *)e->t.data + (size_t)r0 * (size_t)e->row_bytes +
                (size_t)(c0 / in->block) * (size_t)in->bytes,
        .ld = e->row_bytes,
        .act = ld_qblock_act(L, qt, k, flags),
        .layout = ld_qblock_layout(L, qt, k, flags),
    };
    NUMLA_CHECK(numla_qblock_pack(&src, dst, &out->qb));
    L->loaded += (size_t)n * (size_t)(k / in->block) * (size_t)in->bytes;
    return NUMLA_STATUS_OK;
}

/* A compressed-tensors int4 linear's rows [r0, r0 + n) x columns [c0, c0 + k). A group of 32
 * (q + 8 in nibbles, element e at bits 4(e % 8) of int32 word e / 8) with its scale s is a
 * Q4_0 block (d = fp16(s), element j in the low nibble of byte j, j + 16 in the high) after a
 * nibble shuffle, so the rows run through kernels/qblock unexpanded; the values are the same
 * (s · q) when s is an fp16 normal (a bf16 scale always is above 2^-14; below, fp16 subnormals
 * keep fewer bits). A slice off the groups (a K split not on 32), and --weights bf16, take the
 * values s · q in fp32. */
static numla_status ld_linear_int4(loader *L, const numla_weights_tensor *d, int64_t r0,
                                   int64_t n, int64_t c0, int64_t k, int flags,
                                   numla_model_linear *out)
{
    const int64_t K = d->full_k, G = K / 32;
    const int blocks = c0 % 32 == 0 && k % 32 == 0 && L->opts.format != NUMLA_WEIGHT_FORMAT_NONE;
    const numla_qblock_type qt = NUMLA_QBLOCK_Q4_0;
    void *dst = ld_take(L, blocks ? numla_qblock_layout_size(qt, ld_qblock_layout(L, qt, k, flags), n, k)
                                  : numla_linear_packed_size(L->isa, n, k, NUMLA_DTYPE_F32));
    out->kind = blocks ? NUMLA_MODEL_LINEAR_QBLOCK : NUMLA_MODEL_LINEAR_FLOAT;
    if (L->pass != 1)
        return NUMLA_STATUS_OK;
    const uint32_t *words = d->t->data;
    if (!blocks) {
        float *tmp = malloc((size_t)(n * k) * sizeof(float));
        if (!tmp)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to dequantize it", d->t->name);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < k; c++) {
                const int64_t e = c0 + c, row = r0 + r;
                const uint32_t u = (words[row * (K / 8) + e / 8] >> (4 * (e % 8))) & 15u;
                const float s = numla_load_f32(d->scale->data, d->scale->dtype,
                                               (size_t)(row * G + e / 32));
                tmp[r * k + c] = s * (float)((int)u - 8);
            }
        numla_status s = ld_pack(L, n, k, tmp, NUMLA_DTYPE_F32, k, dst, &out->lin);
        free(tmp);
        NUMLA_CHECK(s);
        L->loaded += (size_t)(n * k) * sizeof(float);
        return NUMLA_STATUS_OK;
    }
    const int64_t rb = k / 32 * 18;
    uint8_t *b = malloc((size_t)(n * rb));
    if (!b)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to repack it", d->t->name);
    for (int64_t r = 0; r < n; r++)
        for (int64_t g = 0; g < k / 32; g++) {
            const int64_t row = r0 + r, gi = c0 / 32 + g;
            uint8_t *blk = b + r * rb + g * 18, u[32];
            const uint16_t h = numla_f32_to_f16(
                numla_load_f32(d->scale->data, d->scale->dtype, (size_t)(row * G + gi)));
            memcpy(blk, &h, 2);
            for (int e = 0; e < 32; e++)
                u[e] = (uint8_t)((words[row * (K / 8) + gi * 4 + e / 8] >> (4 * (e % 8))) & 15u);
            for (int j = 0; j < 16; j++)
                blk[2 + j] = (uint8_t)(u[j] | u[j + 16] << 4);
        }
    numla_qblock_source src = {
        .type = qt, .n = n, .k = k, .data = b, .ld = rb,
        .act = ld_qblock_act(L, qt, k, flags),
        .layout = ld_qblock_layout(L, qt, k, flags),
    };
    numla_status s = numla_qblock_pack(&src, dst, &out->qb);
    free(b);
    NUMLA_CHECK(s);
    L->loaded += (size_t)(n * (k / 32)) * 18;
    return NUMLA_STATUS_OK;
}

/* The block type --weights gives a tensor (engine/model/quant_recipe.h). */
static numla_qblock_type ld_make_type(const loader *L, const char *name, int64_t c0, int64_t k)
{
    return numla_quant_recipe_type((numla_weight_encoding)L->opts.format,
                                   L->cfg->num_hidden_layers, name, c0, k);
}

/* k values of a float tensor from element `at` on, as fp32. */
static void ld_row_f32(const numla_safetensors_tensor *t, size_t at, int64_t k, float *row)
{
    for (int64_t c = 0; c < k; c++)
        row[c] = numla_load_f32(t->data, t->dtype, at + (size_t)c);
}

/* --weights q8_0|q4_0|q4_k on a float checkpoint: rows [r0, r0 + n) x columns [c0, c0 + k) (c0
 * and k multiples of the block) made into blocks (kernels/qblock_quant.h; a block's values are
 * the same whichever rank quantizes them, so any rank count packs the same bytes), then run as
 * a GGUF file's blocks are (ld_linear_qblock's activation rule). */
static numla_status ld_linear_qblock_make(loader *L, const numla_safetensors_tensor *t,
                                          int64_t full_k, int64_t r0, int64_t n, int64_t c0,
                                          int64_t k, int flags, numla_qblock_type qt,
                                          numla_model_linear *out)
{
    const numla_qblock_info *in = numla_qblock_info_get(qt);
    const int64_t rb = k / in->block * in->bytes;
    void *dst = ld_take(L, numla_qblock_layout_size(qt, ld_qblock_layout(L, qt, k, flags), n, k));
    out->kind = NUMLA_MODEL_LINEAR_QBLOCK;
    if (L->pass != 1)
        return NUMLA_STATUS_OK;
    uint8_t *blocks = malloc((size_t)(n * rb));
    float *row = malloc((size_t)k * sizeof(float));
    numla_status s = blocks && row ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    /* Row 0 alone first (a bad type or k fails it, naming the problem), then the rest on the
     * engine's threads (the OpenMP team): the K-quants' scale search costs about ten times a
     * min/max rounding, and rows are independent (each thread its own row buffer), so the
     * bytes do not depend on the thread count. */
    if (s == NUMLA_STATUS_OK && n > 0) {
        ld_row_f32(t, (size_t)r0 * (size_t)full_k + (size_t)c0, k, row);
        s = numla_qblock_quantize_row_ref(qt, row, k, blocks);
    }
    if (s == NUMLA_STATUS_OK && n > 1) {
        int nomem = 0;
#pragma omp parallel reduction(|| : nomem)
        {
            float *mine = malloc((size_t)k * sizeof(float));
            nomem = !mine;
#pragma omp for schedule(dynamic, 8)
            for (int64_t r = 1; r < n; r++) {
                if (!mine)
                    continue;
                ld_row_f32(t, (size_t)(r0 + r) * (size_t)full_k + (size_t)c0, k, mine);
                /* cannot fail: the type and k of row 0 */
                (void)numla_qblock_quantize_row_ref(qt, mine, k, blocks + r * rb);
            }
            free(mine);
        }
        if (nomem)
            s = NUMLA_STATUS_NO_MEMORY;
    }
    if (s == NUMLA_STATUS_OK) {
        numla_qblock_source src = {
            .type = qt, .n = n, .k = k, .data = blocks, .ld = rb,
            .act = ld_qblock_act(L, qt, k, flags),
            .layout = ld_qblock_layout(L, qt, k, flags),
        };
        s = numla_qblock_pack(&src, dst, &out->qb);
    }
    free(blocks);
    free(row);
    if (s == NUMLA_STATUS_NO_MEMORY)
        NUMLA_FAIL(s, "%s: no memory to quantize it", t->name);
    NUMLA_CHECK(s);
    L->loaded += (size_t)(n * rb);
    return NUMLA_STATUS_OK;
}

/* Pack rows [r0, r0+n) × columns [c0, c0+k) of a (full_n, full_k) tensor; flags: LD_*. */
static numla_status ld_linear_q(loader *L, const char *name, int64_t full_n, int64_t full_k,
                                int64_t r0, int64_t n, int64_t c0, int64_t k, int flags,
                                numla_model_linear *out)
{
    numla_weights_tensor d;
    int ok = ld_classify(L, name, full_n, full_k, flags & LD_QUANTIZABLE, &d);
    if ((flags & LD_FP32_ACTIVATIONS) && d.fmt == NUMLA_QLINEAR_INT8_W8A8)
        d.fmt = NUMLA_QLINEAR_INT8_ROW;
    memset(out, 0, sizeof *out);
    out->n = n;
    out->k = k;
    if (n == 0 || k == 0 || !ok)
        return NUMLA_STATUS_OK;
    /* A block linear's Q8 mode quantizes x per 256-column group (kernels/qblock.h), not per
     * row, so a K slice that starts on a group and ends on one or at the row's end quantizes
     * every group exactly as one rank holding the whole row would: such a split input may take
     * int8 activations too. (int8 W8A8's one scale per row could not: it stays fp32 above.) */
    const int groups_whole = c0 % 256 == 0 && (c0 + k == full_k || k % 256 == 0);
    const int qflags = groups_whole && (flags & LD_SPLIT_INPUT) ? flags & ~LD_FP32_ACTIVATIONS : flags;
    if (d.mode == NUMLA_WEIGHTS_QBLOCK)
        return ld_linear_qblock(L, ld_entry(L, d.t), r0, n, c0, k, qflags, out);
    if (d.mode == NUMLA_WEIGHTS_INT4)
        return ld_linear_int4(L, &d, r0, n, c0, k, qflags, out);
    if (d.mode == NUMLA_WEIGHTS_QBLOCK_MAKE && (c0 % 32 == 0 && k % 32 == 0))
        return ld_linear_qblock_make(L, d.t, full_k, r0, n, c0, k, qflags,
                                     ld_make_type(L, name, c0, k), out);
    if (d.mode == NUMLA_WEIGHTS_QBLOCK_MAKE) /* K not whole blocks of 32: stays float */
        d.mode = NUMLA_WEIGHTS_FLOAT;
    if (d.mode == NUMLA_WEIGHTS_FLOAT) {
        const numla_dtype dt = d.t->dtype;
        void *dst = ld_take(L, numla_linear_packed_size(L->isa, n, k, dt));
        if (L->pass == 1) {
            const char *src = (const char *)d.t->data +
                              ((size_t)r0 * (size_t)full_k + (size_t)c0) * numla_dtype_size(dt);
            NUMLA_CHECK(ld_pack(L, n, k, src, dt, full_k, dst, &out->lin));
            L->loaded += (size_t)n * (size_t)k * numla_dtype_size(dt);
        }
        return NUMLA_STATUS_OK;
    }
    if (d.mode == NUMLA_WEIGHTS_DEQUANT) {
        void *dst = ld_take(L, numla_linear_packed_size(L->isa, n, k, NUMLA_DTYPE_BF16));
        if (L->pass != 1)
            return NUMLA_STATUS_OK;
        const uint8_t *codes;
        uint8_t *own;
        float *grid;
        NUMLA_CHECK(numla_weights_q8_rows(&d, r0, n, &codes, &own, &grid));
        uint16_t *tmp = malloc((size_t)n * (size_t)k * 2);
        numla_status s = tmp ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
        for (int64_t r = 0; tmp && r < n; r++)
            for (int64_t c = 0; c < k; c++)
                tmp[r * k + c] = numla_f32_to_bf16(
                    numla_weights_q8_dequant(&d, codes, grid, r0, r0 + r, c0 + c));
        if (tmp)
            s = ld_pack(L, n, k, tmp, NUMLA_DTYPE_BF16, k, dst, &out->lin);
        free(tmp);
        free(own);
        free(grid);
        if (s == NUMLA_STATUS_NO_MEMORY && !tmp)
            NUMLA_FAIL(s, "%s: no memory to dequantize it", name);
        NUMLA_CHECK(s);
        L->loaded += (size_t)n * (size_t)k * 2;
        return NUMLA_STATUS_OK;
    }
    /* 8-bit: an fp8 column slice starts on its scale block (zero weights before c0) */
    const int64_t kofs = d.fmt == NUMLA_QLINEAR_FP8_BLOCK ? c0 % NUMLA_QLINEAR_BLOCK : 0;
    const int64_t kp = kofs + k;
    void *dst = ld_take(L, numla_qlinear_packed_size(d.fmt, n, kp));
    out->kind = NUMLA_MODEL_LINEAR_Q8;
    out->kofs = kofs;
    if (L->pass != 1)
        return NUMLA_STATUS_OK;
    const uint8_t *codes;
    uint8_t *own;
    float *grid;
    NUMLA_CHECK(numla_weights_q8_rows(&d, r0, n, &codes, &own, &grid));
    numla_qlinear_source src = {
        .fmt = d.fmt, .n = n, .k = kp, .row0 = r0, .col0 = c0 - kofs,
        .data = codes + (c0 - kofs), .ld = full_k,
        .scales = grid, .scale_rows = d.grid_rows, .scale_cols = d.grid_cols,
    };
    numla_status s = numla_qlinear_pack(&src, dst, &out->q);
    free(own);
    free(grid);
    NUMLA_CHECK(s);
    if (kofs) {
        int8_t *q = (int8_t *)(uintptr_t)out->q.q;
        for (int64_t r = 0; r < n; r++)
            memset(q + r * out->q.kp, 0, (size_t)kofs);
    }
    L->loaded += (size_t)n * (size_t)k +
                 (size_t)(out->q.scale_rows * out->q.scale_cols) * sizeof(float);
    return NUMLA_STATUS_OK;
}

static numla_status ld_linear(loader *L, const char *name, int64_t full_n, int64_t full_k,
                              int64_t r0, int64_t n, int64_t c0, int64_t k,
                              numla_model_linear *out)
{
    return ld_linear_q(L, name, full_n, full_k, r0, n, c0, k, LD_QUANTIZABLE, out);
}

/* A SiLU-gated MLP's gate/up rows [i0, i0 + ni) and down columns of the same range. down_flags:
 * LD_FP32_ACTIVATIONS for an MLP split over the ranks (the dense one, the shared experts), whose
 * down_proj input each rank holds only a slice of. */
static numla_status ld_mlp(loader *L, const char *prefix, int64_t full_inter, int64_t i0,
                           int64_t ni, int down_flags, numla_weights_mlp *m)
{
    const int64_t hid = L->cfg->hidden_size;
    char name[256];
    m->inter = ni;
    snprintf(name, sizeof name, "%sgate_proj.weight", prefix);
    NUMLA_CHECK(ld_linear(L, name, full_inter, hid, i0, ni, 0, hid, &m->gate));
    snprintf(name, sizeof name, "%sup_proj.weight", prefix);
    NUMLA_CHECK(ld_linear(L, name, full_inter, hid, i0, ni, 0, hid, &m->up));
    snprintf(name, sizeof name, "%sdown_proj.weight", prefix);
    NUMLA_CHECK(ld_linear_q(L, name, hid, full_inter, 0, hid, i0, ni,
                            LD_QUANTIZABLE | down_flags, &m->down));
    return NUMLA_STATUS_OK;
}

/* Is W_UK,hᵀ kept 8-bit for this shape (weights.h)? fp8: each head's nope rows must be whole
 * 128-row scale blocks, so its transpose has a block grid of its own. */
int numla_weights_uk_q8(const numla_model_config *c, numla_weight_format f)
{
    const int64_t B = NUMLA_QLINEAR_BLOCK, hw = c->qk_nope_head_dim + c->v_head_dim;
    if (f == NUMLA_WEIGHT_FORMAT_INT8)
        return 1;
    return f == NUMLA_WEIGHT_FORMAT_FP8 && c->qk_nope_head_dim % B == 0 && hw % B == 0;
}

/* A float (n, k) per-head weight: rows of dtype dt, leading dimension ld. */
static numla_status ld_head_float(loader *L, int64_t n, int64_t k, const void *src,
                                  numla_dtype dt, int64_t ld, void *dst, numla_model_linear *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->k = k;
    return ld_pack(L, n, k, src, dt, ld, dst, &out->lin);
}

/* An 8-bit (n, k) per-head weight from src (its own scale grid). */
static numla_status ld_head_q8(const numla_qlinear_source *src, void *dst,
                               numla_model_linear *out)
{
    memset(out, 0, sizeof *out);
    out->kind = NUMLA_MODEL_LINEAR_Q8;
    out->n = src->n;
    out->k = src->k;
    return numla_qlinear_pack(src, dst, &out->q);
}

/* Whether rows of k elements of GGUF tensor gt can stay in its blocks as a per-head linear:
 * an encoding numla runs, k whole blocks, and not --weights bf16. */
static int ld_head_blocks(const loader *L, const numla_gguf_tensor *gt, int64_t k)
{
    numla_qblock_type qt;
    if (!gt || L->opts.format == NUMLA_WEIGHT_FORMAT_NONE || numla_qblock_from_ggml(gt->type, &qt) != NUMLA_STATUS_OK) {
        numla_error_clear();
        return 0;
    }
    const numla_qblock_info *in = numla_qblock_info_get(qt);
    return k % in->block == 0;
}

/* Rows [row0, row0 + n) of GGUF tensor gt (rows of k elements, ld_head_blocks) packed as a
 * block linear at the file's bytes instead of 4 bytes a weight. Its activations follow the
 * rule of every other block linear (ld_qblock_act: quantized per group where the encoding
 * takes K, as llama.cpp runs these heads; fp32 with --qblock-fp32-act). */
static size_t ld_head_qblock_size(const loader *L, numla_qblock_type qt, int64_t n, int64_t k)
{
    return numla_qblock_layout_size(qt, ld_qblock_layout(L, qt, k, 0), n, k);
}

static numla_status ld_head_qblock(loader *L, const numla_gguf_tensor *gt, int64_t row0, int64_t n,
                                   int64_t k, void *dst, numla_model_linear *out)
{
    numla_qblock_type qt;
    NUMLA_CHECK(numla_qblock_from_ggml(gt->type, &qt));
    const numla_qblock_info *in = numla_qblock_info_get(qt);
    const int64_t row_bytes = k / in->block * in->bytes;
    numla_qblock_source src = {.type = qt, .n = n, .k = k,
                               .data = (const char *)gt->data + (size_t)row0 * (size_t)row_bytes,
                               .ld = row_bytes, .act = ld_qblock_act(L, qt, k, 0),
                               .layout = ld_qblock_layout(L, qt, k, 0)};
    out->kind = NUMLA_MODEL_LINEAR_QBLOCK;
    out->n = n;
    out->k = k;
    NUMLA_CHECK(numla_qblock_pack(&src, dst, &out->qb));
    L->loaded += (size_t)(n * row_bytes);
    return NUMLA_STATUS_OK;
}

/* kv_b_proj (H · (nope + v), Dc) → per owned head uk_t (Dc, nope) and uv (v, Dc). A GGUF
 * kv_b_proj stays in its blocks where the rows allow (ld_head_blocks): uv always (rows of Dc, of
 * attn_v_b or of attn_kv_b), uk_t in the split layout (attn_k_b holds W_UKᵀ per head, rows of
 * nope); the rest is dequantized once into fp32. An 8-bit
 * kv_b_proj (in the file, or quantized now) stays 8-bit where weights.h says so: uv is a row
 * slice packed from the codes and the full grid; uk_t is the transposed codes, with (fp8) the
 * head's block row of the grid transposed, or (int8) unit row scales and the original row
 * scales kept in uk_in_scale. Otherwise (and for --weights bf16) it is dequantized once into
 * fp32. */
static numla_status ld_kv_b(loader *L, const char *name, const numla_shard *sh,
                            numla_weights_layer *lw)
{
    const numla_model_config *c = L->cfg;
    const int64_t nope = c->qk_nope_head_dim, vd = c->v_head_dim, dc = c->kv_lora_rank;
    const int64_t hw = nope + vd, Hr = sh->head_count, B = NUMLA_QLINEAR_BLOCK;
    numla_weights_tensor d;
    if (!ld_classify(L, name, c->num_attention_heads * hw, dc, 1, &d))
        return NUMLA_STATUS_OK;
    if (d.mode == NUMLA_WEIGHTS_QBLOCK_MAKE) /* W_UK / W_UV stay float (the expanded kv_b is
                                              * quantized: ld_layer) */
        d.mode = NUMLA_WEIGHTS_FLOAT;
    if (d.mode == NUMLA_WEIGHTS_INT4) { /* Kimi keeps attention unquantized (`ignore`) */
        if (L->pass == 0)
            ld_problem(L, "%s: an int4 kv_b_proj is not supported (list it in "
                       "quantization_config.ignore)", name);
        return NUMLA_STATUS_OK;
    }
    const numla_safetensors_tensor *t = d.t;
    const int q8 = d.mode != NUMLA_WEIGHTS_FLOAT;       /* not float rows as they are */
    const int qb = d.mode == NUMLA_WEIGHTS_QBLOCK;      /* GGUF: blocks, or dequantized to fp32 */
    const numla_weights_entry *ge = qb ? ld_entry(L, t) : NULL;
    /* GGUF heads kept in blocks: W_UKᵀ from attn_k_b (rows of nope), W_UV from attn_v_b or
     * from attn_kv_b's v rows (rows of Dc) */
    const int ukb = ge && ge->v_b && ld_head_blocks(L, ge->src, nope);
    const int uvb = ge && ld_head_blocks(L, ge->v_b ? ge->v_b : ge->src, dc);
    const int keep8 = d.mode == NUMLA_WEIGHTS_Q8_FILE || d.mode == NUMLA_WEIGHTS_Q8_MAKE;
    const int fp8 = d.fmt == NUMLA_QLINEAR_FP8_BLOCK;
    const numla_qlinear_format f8 = fp8 ? NUMLA_QLINEAR_FP8_BLOCK : NUMLA_QLINEAR_INT8_ROW;
    const int uk8 = keep8 && numla_weights_uk_q8(c, fp8 ? NUMLA_WEIGHT_FORMAT_FP8
                                                        : NUMLA_WEIGHT_FORMAT_INT8);
    const numla_dtype dt = q8 ? NUMLA_DTYPE_F32 : t->dtype; /* of a float uk_t / uv */
    const size_t es = numla_dtype_size(dt);
    const int64_t tgr = numla_quant_blocks(dc), tgc = nope / B; /* fp8 uk_t's grid */
    lw->uk_in_scale = uk8 && !fp8 ? ld_take(L, (size_t)(Hr * nope) * sizeof(float)) : NULL;
    char *tmp = NULL, *deq = NULL;
    const uint8_t *codes = NULL;
    uint8_t *own = NULL, *tcodes = NULL;
    float *grid = NULL, *tgrid = NULL;
    numla_status s = NUMLA_STATUS_OK;
    if (L->pass == 1) {
        if (q8 && !qb) {
            s = numla_weights_q8_rows(&d, sh->head_begin * hw, Hr * hw, &codes, &own, &grid);
            NUMLA_CHECK(s);
        }
        const int64_t tg = fp8 ? tgr * tgc : dc; /* uk_t grid: fp8 blocks, int8 unit rows */
        if (uk8) {
            tcodes = malloc((size_t)(dc * nope));
            tgrid = malloc((size_t)tg * sizeof(float));
        }
        if (!uk8 && !ukb) /* the fp32 / bf16 transpose of a head's W_UK (blocks stay as they are) */
            tmp = malloc((size_t)dc * (size_t)nope * es);
        const int need_deq = q8 && !uk8 && !(ukb && uvb);
        if (need_deq) /* --weights bf16 (all of it), the fp8 uk_t fallback, GGUF rows not in blocks */
            deq = malloc((size_t)(Hr * hw * dc) * es);
        if ((uk8 && (!tcodes || !tgrid)) || (!uk8 && !ukb && !tmp) || (need_deq && !deq)) {
            free(own);
            free(grid);
            free(tcodes);
            free(tgrid);
            free(tmp);
            free(deq);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for the W_UK transpose", name);
        }
        if (uk8 && !fp8)
            for (int64_t i = 0; i < tg; i++)
                tgrid[i] = 1.0f;
        const int64_t r0 = sh->head_begin * hw;
        if (qb && deq)
            s = numla_weights_entry_rows_f32(ge, r0, Hr * hw, 0, dc, (float *)deq);
        for (int64_t r = 0; !qb && deq && r < Hr * hw; r++)
            for (int64_t cc = 0; cc < dc; cc++)
                ((float *)deq)[r * dc + cc] =
                    numla_weights_q8_dequant(&d, codes, grid, r0, r0 + r, cc);
    }
    numla_qblock_type ukt = NUMLA_QBLOCK_Q8_0, uvt = NUMLA_QBLOCK_Q8_0;
    if (ukb)
        (void)numla_qblock_from_ggml(ge->src->type, &ukt);
    if (uvb)
        (void)numla_qblock_from_ggml((ge->v_b ? ge->v_b : ge->src)->type, &uvt);
    /* Every head's uk_t, then every head's uv, each run in one piece (a head's bytes rounded up
     * to 64): a decode step walks the heads of each in turn, so a thread reads one stream. */
    const size_t uk_st = ((ukb   ? ld_head_qblock_size(L, ukt, dc, nope)
                           : uk8 ? numla_qlinear_packed_size(f8, dc, nope)
                                 : numla_linear_packed_size(L->isa, dc, nope, dt)) + 63) & ~(size_t)63;
    const size_t uv_st = ((uvb     ? ld_head_qblock_size(L, uvt, vd, dc)
                           : keep8 ? numla_qlinear_packed_size(f8, vd, dc)
                                   : numla_linear_packed_size(L->isa, vd, dc, dt)) + 63) & ~(size_t)63;
    char *uk_all = ld_take(L, uk_st * (size_t)Hr), *uv_all = ld_take(L, uv_st * (size_t)Hr);
    for (int64_t hh = 0; hh < Hr && s == NUMLA_STATUS_OK && L->pass == 1; hh++) {
        const int64_t h = sh->head_begin + hh;
        void *uk = uk_all + (size_t)hh * uk_st, *uv = uv_all + (size_t)hh * uv_st;
        if (ukb)
            s = ld_head_qblock(L, ge->src, h * dc, dc, nope, uk, &lw->uk_t[hh]);
        if (s == NUMLA_STATUS_OK && uvb)
            s = ge->v_b ? ld_head_qblock(L, ge->v_b, h * vd, vd, dc, uv, &lw->uv[hh])
                        : ld_head_qblock(L, ge->src, h * hw + nope, vd, dc, uv, &lw->uv[hh]);
        if (s != NUMLA_STATUS_OK)
            break;
        const char *rows = deq ? deq + (size_t)(hh * hw * dc) * es
                               : !q8 ? (const char *)t->data + (size_t)(h * hw * dc) * es : NULL;
        if (ukb) {
            /* packed above */
        } else if (uk8) { /* (Dc, nope) codes; grid: fp8 block row h·hw/128.. transposed, int8 ones */
            const uint8_t *hc = codes + (size_t)(hh * hw * dc);
            for (int64_t j = 0; j < nope; j++)
                for (int64_t cc = 0; cc < dc; cc++)
                    tcodes[cc * nope + j] = hc[j * dc + cc];
            if (fp8) {
                for (int64_t cb = 0; cb < tgr; cb++)
                    for (int64_t jb = 0; jb < tgc; jb++)
                        tgrid[cb * tgc + jb] = grid[(h * hw / B + jb) * d.grid_cols + cb];
            } else {
                for (int64_t j = 0; j < nope; j++)
                    lw->uk_in_scale[hh * nope + j] = grid[h * hw + j];
            }
            numla_qlinear_source src = {
                .fmt = f8, .n = dc, .k = nope, .data = tcodes, .ld = nope, .scales = tgrid,
                .scale_rows = fp8 ? tgr : dc, .scale_cols = fp8 ? tgc : 1};
            s = ld_head_q8(&src, uk, &lw->uk_t[hh]);
            L->loaded += (size_t)(dc * nope) +
                         (size_t)(fp8 ? tgr * tgc : dc + nope) * sizeof(float);
        } else {
            for (int64_t j = 0; j < nope; j++)
                for (int64_t cc = 0; cc < dc; cc++)
                    memcpy(tmp + ((size_t)cc * (size_t)nope + (size_t)j) * es,
                           rows + ((size_t)j * (size_t)dc + (size_t)cc) * es, es);
            s = ld_head_float(L, dc, nope, tmp, dt, nope, uk, &lw->uk_t[hh]);
            L->loaded += (size_t)(dc * nope) * es;
        }
        if (s != NUMLA_STATUS_OK)
            break;
        if (uvb) {
            /* packed above */
        } else if (keep8) { /* rows h·hw + nope.. of the codes, the full grid */
            numla_qlinear_source src = {
                .fmt = f8, .n = vd, .k = dc, .row0 = h * hw + nope, .col0 = 0,
                .data = codes + (size_t)((hh * hw + nope) * dc), .ld = dc, .scales = grid,
                .scale_rows = d.grid_rows, .scale_cols = d.grid_cols};
            s = ld_head_q8(&src, uv, &lw->uv[hh]);
            L->loaded += (size_t)(vd * dc) + (size_t)(lw->uv[hh].q.scale_rows *
                                                      lw->uv[hh].q.scale_cols) * sizeof(float);
        } else {
            s = ld_head_float(L, vd, dc, rows + (size_t)(nope * dc) * es, dt, dc, uv,
                              &lw->uv[hh]);
            L->loaded += (size_t)(vd * dc) * es;
        }
    }
    free(own);
    free(grid);
    free(tcodes);
    free(tgrid);
    free(tmp);
    free(deq);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

/* The DSA indexer of layer l (weights.h), whole on every rank. A file's 8-bit wq_b / wk (the
 * published V3.2 is FP8) stay 8-bit with fp32 activations; nothing is quantized at load. */
static numla_status ld_indexer(loader *L, int64_t l, const char *p, numla_weights_layer *lw)
{
    const numla_model_config *c = L->cfg;
    lw->has_indexer = c->dsa.enabled && c->dsa.indexer_full[l];
    if (!lw->has_indexer)
        return NUMLA_STATUS_OK;
    const int64_t hid = c->hidden_size, hi = c->dsa.index_n_heads, di = c->dsa.index_head_dim;
    const int64_t r = c->q_lora_rank;
    char name[256];
#define INAME(suffix) (snprintf(name, sizeof name, "%sself_attn.indexer.%s", p, suffix), name)
    NUMLA_CHECK(ld_linear_q(L, INAME("wq_b.weight"), hi * di, r, 0, hi * di, 0, r,
                            LD_FP32_ACTIVATIONS, &lw->idx_wq_b));
    NUMLA_CHECK(ld_linear_q(L, INAME("wk.weight"), di, hid, 0, di, 0, hid, LD_FP32_ACTIVATIONS,
                            &lw->idx_wk));
    NUMLA_CHECK(ld_norm(L, INAME("k_norm.weight"), di, &lw->idx_k_norm_w));
    NUMLA_CHECK(ld_norm(L, INAME("k_norm.bias"), di, &lw->idx_k_norm_b));
    NUMLA_CHECK(ld_linear_q(L, INAME("weights_proj.weight"), hi, hid, 0, hi, 0, hid,
                            LD_FP32_ACTIVATIONS, &lw->idx_weights));
#undef INAME
    return NUMLA_STATUS_OK;
}

static numla_status ld_layer(loader *L, int64_t l, const numla_shard *sh, numla_weights_layer *lw)
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
         * counted again in loaded_bytes. Its input c' is never quantized (nor is the absorbed
         * form's input to W_UK / W_UV), so int8 runs with fp32 activations. */
        const int64_t hw = c->qk_nope_head_dim + c->v_head_dim;
        const size_t before = L->loaded;
        NUMLA_CHECK(ld_linear_q(L, NAME("self_attn.kv_b_proj.weight"), H * hw, dc,
                                sh->head_begin * hw, sh->head_count * hw, 0, dc,
                                LD_QUANTIZABLE | LD_FP32_ACTIVATIONS, &lw->kv_b));
        L->loaded = before;
    }
    /* o_proj's input, the heads' outputs, is split over the ranks: fp32 activations (int8) */
    NUMLA_CHECK(ld_linear_q(L, NAME("self_attn.o_proj.weight"), hid, H * c->v_head_dim, 0, hid,
                            h0 * c->v_head_dim, nh * c->v_head_dim,
                            LD_QUANTIZABLE | LD_FP32_ACTIVATIONS | LD_SPLIT_INPUT, &lw->o_proj));

    NUMLA_CHECK(ld_indexer(L, l, p, lw));

    lw->is_moe = numla_model_config_is_moe_layer(c, l);
    if (!lw->is_moe) {
        NUMLA_CHECK(ld_mlp(L, NAME("mlp."), c->intermediate_size, sh->inter_begin,
                           sh->inter_count, LD_FP32_ACTIVATIONS | LD_SPLIT_INPUT, &lw->dense));
        return NUMLA_STATUS_OK;
    }
    const int64_t E = c->n_routed_experts;
    {
        /* packed as fp32 whatever the file's dtype: routing is computed in fp32 (docs/design.md §5) */
        int64_t shape[2] = {E, hid};
        const numla_safetensors_tensor *t = ld_get(L, NAME("mlp.gate.weight"), 2, shape);
        ld_want_float(L, t);
        void *dst = ld_take(L, numla_linear_packed_size(L->isa, E, hid, NUMLA_DTYPE_F32));
        memset(&lw->router, 0, sizeof lw->router);
        lw->router.n = E;
        lw->router.k = hid;
        if (L->pass == 1) {
            float *tmp = malloc((size_t)(E * hid) * sizeof(float));
            if (!tmp)
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory for a router of %lld x %lld",
                           (long long)E, (long long)hid);
            numla_status s = ld_read_f32(L, t, E, hid, tmp);
            if (s == NUMLA_STATUS_OK)
                s = ld_pack(L, E, hid, tmp, NUMLA_DTYPE_F32, hid, dst,
                                               &lw->router.lin);
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
        NUMLA_CHECK(ld_mlp(L, ep, c->moe_intermediate_size, 0, c->moe_intermediate_size, 0,
                           &lw->experts[ee]));
    }
    memset(&lw->shared, 0, sizeof lw->shared);
    if (c->n_shared_experts > 0)
        NUMLA_CHECK(ld_mlp(L, NAME("mlp.shared_experts."),
                           c->n_shared_experts * c->moe_intermediate_size, sh->shared_begin,
                           sh->shared_count, LD_FP32_ACTIVATIONS | LD_SPLIT_INPUT, &lw->shared));
#undef NAME
    return NUMLA_STATUS_OK;
}

/* The MTP layer (weights.h numla_weights_mtp): its decoder block as layer num_hidden_layers,
 * the three norms and this rank's rows of eh_proj. */
static numla_status ld_mtp(loader *L, numla_model_weights *w)
{
    const numla_model_config *c = L->cfg;
    const int64_t hid = c->hidden_size, N = c->num_hidden_layers;
    char name[256];
#define MNAME(suffix) (snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)N, suffix), name)
    NUMLA_CHECK(ld_layer(L, N, &w->shard, &w->layers[N]));
    NUMLA_CHECK(ld_norm(L, MNAME("enorm.weight"), hid, &w->mtp.enorm));
    NUMLA_CHECK(ld_norm(L, MNAME("hnorm.weight"), hid, &w->mtp.hnorm));
    NUMLA_CHECK(ld_norm(L, MNAME("shared_head.norm.weight"), hid, &w->mtp.head_norm));
    numla_shard_range(hid, w->shard.rank, w->shard.nranks, &w->mtp.row_begin, &w->mtp.row_count);
    NUMLA_CHECK(ld_linear(L, MNAME("eh_proj.weight"), hid, 2 * hid, w->mtp.row_begin,
                          w->mtp.row_count, 0, 2 * hid, &w->mtp.eh_proj));
#undef MNAME
    ld_release(L);
    return NUMLA_STATUS_OK;
}

static numla_status ld_model(loader *L, numla_model_weights *w)
{
    const numla_model_config *c = L->cfg;
    const int64_t hid = c->hidden_size, V = c->vocab_size;
    int64_t shape[2] = {V, hid};
    const numla_safetensors_tensor *emb = ld_get(L, "model.embed_tokens.weight", 2, shape);
    ld_want_float(L, emb);
    const numla_weights_entry *ee = ld_entry(L, emb);
    w->embed_blocks = ee && ee->qtype >= 0;
    w->embed_qtype = w->embed_blocks ? (numla_qblock_type)ee->qtype : NUMLA_QBLOCK_Q8_0;
    w->embed_dtype = emb && !w->embed_blocks ? emb->dtype : NUMLA_DTYPE_BF16;
    /* GGUF blocks stay blocks: a token's row is dequantized when it is looked up */
    w->embed_row_bytes = w->embed_blocks
                             ? (size_t)ee->row_bytes
                             : (size_t)hid * numla_dtype_size(w->embed_dtype);
    size_t emb_bytes = (size_t)V * w->embed_row_bytes;
    w->embed = ld_take(L, emb_bytes);
    if (L->pass == 1) {
        memcpy(w->embed, emb->data, emb_bytes);
        L->loaded += emb_bytes;
        ld_release(L);
    }
    int tty = L->pass == 1 && isatty(2);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        if (tty)
            fprintf(stderr, "\rnumla: loading weights: layer %lld/%lld", (long long)(l + 1),
                    (long long)c->num_hidden_layers);
        NUMLA_CHECK(ld_layer(L, l, &w->shard, &w->layers[l]));
        ld_release(L);
    }
    if (tty)
        fprintf(stderr, "\n");
    NUMLA_CHECK(ld_norm(L, "model.norm.weight", hid, &w->final_norm));
    const char *head = c->tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    NUMLA_CHECK(ld_linear_q(L, head, V, hid, w->shard.vocab_begin, w->shard.vocab_count, 0, hid,
                            L->opts.keep_lm_head ? 0 : LD_QUANTIZABLE, &w->lm_head));
    w->lm_head_q8 = w->lm_head.kind == NUMLA_MODEL_LINEAR_Q8;
    ld_release(L);
    if (c->mtp_enabled)
        NUMLA_CHECK(ld_mtp(L, w));
    return NUMLA_STATUS_OK;
}

void numla_weights_destroy(numla_model_weights **pw)
{
    if (!pw || !*pw)
        return;
    numla_model_weights *w = *pw;
    if (w->layers) {
        for (int64_t l = 0; l < numla_model_config_kv_layers(&w->cfg); l++) {
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

numla_weights_options numla_weights_options_default(void)
{
    return (numla_weights_options){.format = -1, .keep_lm_head = 0, .qblock_fp32_act = 0,
                                   .linear_act = NUMLA_LINEAR_ACT_F32};
}

int numla_weights_format_parse(const char *s, numla_weights_options *o)
{
    numla_weight_encoding e;
    if (!numla_weight_encoding_parse(s, NUMLA_ENCODING_AT_LOAD, &e))
        return 0;
    o->format = (int)e;
    return 1;
}

numla_status numla_weights_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                int32_t rank, int32_t nranks, numla_isa isa,
                                numla_model_weights **out)
{
    return numla_weights_load_ex(cfg, st, rank, nranks, isa, NULL, out);
}

static numla_status weights_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                 const numla_weights_view *view, int32_t rank, int32_t nranks,
                                 numla_isa isa, const numla_weights_options *opts,
                                 numla_model_weights **out)
{
    if (!cfg || (!st && !view) || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_weights_load: NULL argument");
    if (cfg->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V4)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "model_type deepseek_v4: the config is read, but this loader builds the MLA "
                   "forward pass only (docs/design.md §5.9)");
    const numla_weights_options o = opts ? *opts : numla_weights_options_default();
    if (o.format < -1 || (o.format > NUMLA_WEIGHT_FORMAT_INT8 && o.format != NUMLA_ENCODING_Q8_0 &&
                          o.format != NUMLA_ENCODING_Q4_0 && o.format != NUMLA_ENCODING_Q4_K))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_weights_load: weight format %d unknown",
                   o.format);
    *out = NULL;
    numla_model_weights *w = calloc(1, sizeof *w);
    if (!w)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "weights: no memory");
    w->cfg = *cfg;
    w->isa = isa;
    w->format = o.format >= 0 ? (numla_weight_format)o.format : cfg->weight_format;
    numla_status s = numla_shard_plan(cfg, rank, nranks, &w->shard);
    if (s != NUMLA_STATUS_OK) {
        numla_weights_destroy(&w);
        NUMLA_CHECK(s);
    }
    const int64_t nl = numla_model_config_kv_layers(cfg); /* with the MTP block */
    w->layers = calloc((size_t)nl, sizeof *w->layers);
    s = w->layers ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    for (int64_t l = 0; s == NUMLA_STATUS_OK && l < nl; l++) {
        numla_weights_layer *lw = &w->layers[l];
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
    L->view = view;
    L->isa = isa;
    L->opts = o;
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
            ld_spent spent = {0};
            L->pass = 1;
            L->arena = a;
            L->used = 0;
            L->spent = &spent;
            s = ld_model(L, w);
            ld_release(L); /* what an error left behind */
            free(spent.r);
            L->spent = NULL;
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

numla_status numla_weights_load_ex(const numla_model_config *cfg, const numla_safetensors_model *st,
                                   int32_t rank, int32_t nranks, numla_isa isa,
                                   const numla_weights_options *opts, numla_model_weights **out)
{
    return weights_load(cfg, st, NULL, rank, nranks, isa, opts, out);
}

numla_status numla_weights_load_gguf(const numla_model_config *cfg, const numla_gguf *g,
                                     int32_t rank, int32_t nranks, numla_isa isa,
                                     const numla_weights_options *opts, numla_model_weights **out)
{
    if (!cfg || !g || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_weights_load_gguf: NULL argument");
    *out = NULL;
    numla_weights_view *v = NULL;
    NUMLA_CHECK(numla_weights_view_create(g, cfg, &v));
    numla_status s = weights_load(cfg, NULL, v, rank, nranks, isa, opts, out);
    numla_weights_view_destroy(&v);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_weights_load_path(const numla_model_config *cfg, const char *path,
                                     int32_t rank, int32_t nranks, numla_isa isa,
                                     const numla_weights_options *opts, numla_model_weights **out)
{
    numla_status s;
    if (!out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_weights_load_path: NULL argument");
    *out = NULL;
    if (numla_model_path_is_gguf(path)) {
        numla_gguf *g = NULL;
        NUMLA_CHECK(numla_gguf_open(path, &g));
        s = numla_weights_load_gguf(cfg, g, rank, nranks, isa, opts, out);
        numla_gguf_close(&g); /* the shard lives in owned memory now (docs/design.md §3) */
    } else {
        numla_safetensors_model *st = NULL;
        NUMLA_CHECK(numla_safetensors_open(path, &st));
        s = numla_weights_load_ex(cfg, st, rank, nranks, isa, opts, out);
        numla_safetensors_close(&st);
    }
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
