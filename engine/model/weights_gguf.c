/* engine/model/weights_gguf.c — a GGUF deepseek2 file's tensors under the Hugging Face names the
 * loader knows (weights_internal.h: numla_weights_view), so that weights.c loads a GGUF file
 * through the same plan as a safetensors checkpoint.
 *
 * Each GGUF tensor becomes an entry named by numla_gguf_deepseek2_hf_name with PyTorch's shape
 * (ggml's ne reversed: ne {K, N} is (N, K)); its rows are the file's rows, in the file's
 * encoding. Stacked experts (ne {K, N, E}) give E entries, each a view of its N rows. The split
 * MLA layout (attn_k_b ne {nope, Dc, H}: per head W_UK,hᵀ; attn_v_b ne {Dc, v, H}: per head
 * W_UV,h) gives kv_b_proj (H · (nope + v), Dc) rows [k_nope | v] per head, as HF stores it;
 * those rows are assembled in fp32 when read (small tensors: Dc · H · (nope + v) weights a
 * layer). The MTP layer (blk.N.nextn.* and its decoder layer blk.N.*, N = num_hidden_layers)
 * is shown as model.layers.N.* when the config has it enabled, else left out, as are tensors
 * the architecture does not know.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/formats/gguf_deepseek2.h"
#include "engine/model/weights_internal.h"

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const numla_weights_entry *)a)->hf, ((const numla_weights_entry *)b)->hf);
}

/* The loader's float dtype of a ggml float type; 0 when it is not one. */
static int float_dtype(uint32_t ggml, numla_dtype *out)
{
    switch (ggml) {
    case NUMLA_GGML_F32: *out = NUMLA_DTYPE_F32; return 1;
    case NUMLA_GGML_F16: *out = NUMLA_DTYPE_F16; return 1;
    case NUMLA_GGML_BF16: *out = NUMLA_DTYPE_BF16; return 1;
    default: return 0;
    }
}

/* Fill e from GGUF tensor t: rows [row0, row0 + n) of its 2-D (or 1-D) view. */
static numla_status entry_set(const numla_gguf_tensor *t, int64_t row0, int64_t n,
                              numla_weights_entry *e)
{
    numla_dtype dt;
    e->src = t;
    e->qtype = -1;
    const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
    if (!ti)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: tensor %s has unknown ggml type %u", t->file,
                   t->name, t->type);
    e->row_bytes = t->ne[0] / ti->block * ti->bytes;
    if (float_dtype(t->type, &dt)) {
        e->t.dtype = dt;
    } else {
        numla_qblock_type qt;
        if (numla_qblock_from_ggml(t->type, &qt) != NUMLA_STATUS_OK) {
            numla_error_clear();
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: tensor %s is %s, an encoding numla does not run (F32, F16, BF16, "
                       "or a block type of kernels/qblock.h)",
                       t->file, t->name, ti->name);
        }
        e->qtype = (int)qt;
        e->t.dtype = NUMLA_DTYPE_END;
    }
    e->t.data = (const char *)t->data + (size_t)row0 * (size_t)e->row_bytes;
    e->t.nbytes = (size_t)n * (size_t)e->row_bytes;
    e->t.file = t->file;
    if (t->ndim == 1) {
        e->t.ndim = 1;
        e->t.shape[0] = t->ne[0];
    } else {
        e->t.ndim = 2;
        e->t.shape[0] = n;
        e->t.shape[1] = t->ne[0];
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_weights_view_create(const numla_gguf *g, const numla_model_config *cfg,
                                       numla_weights_view **out)
{
    *out = NULL;
    /* the layers the loader reads: the MTP layer too when it is enabled */
    const int64_t nt = numla_gguf_tensor_count(g), L = numla_model_config_kv_layers(cfg);
    int64_t cap = 0;
    for (int64_t i = 0; i < nt; i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        cap += t->ndim == 3 ? t->ne[2] : 1;
    }
    cap += L; /* split kv_b_proj entries */
    numla_weights_view *v = calloc(1, sizeof *v);
    numla_weights_entry *e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *e);
    const numla_gguf_tensor **kb = calloc((size_t)(2 * L + 1), sizeof *kb);
    char *has_kvb = calloc((size_t)(L + 1), 1);
    if (!v || !e || !kb || !has_kvb) {
        free(v);
        free(e);
        free(kb);
        free(has_kvb);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for the tensor view",
                   numla_gguf_path(g));
    }
    v->e = e;
    v->g = g;
    numla_status s = NUMLA_STATUS_OK;
    int64_t n = 0;
    for (int64_t i = 0; i < nt && s == NUMLA_STATUS_OK; i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        numla_gguf_hf_name hn;
        if (numla_gguf_deepseek2_hf_name(t->name, &hn) != NUMLA_STATUS_OK) {
            numla_error_clear(); /* not a tensor the model reads */
            continue;
        }
        long layer = -1;
        if (!strncmp(hn.hf, "model.layers.", 13))
            layer = strtol(hn.hf + 13, NULL, 10);
        if (layer >= L) /* an MTP layer not loaded */
            continue;
        if (hn.kv_b_part) {
            kb[2 * layer + hn.kv_b_part - 1] = t;
            continue;
        }
        if (strstr(hn.hf, "kv_b_proj") && layer >= 0)
            has_kvb[layer] = 1;
        if (hn.stacked_experts) {
            if (t->ndim != 3) {
                s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                    "%s: tensor %s has %d dimensions, expected 3 (K, N, "
                                    "experts)", t->file, t->name, t->ndim);
                break;
            }
            const char *at = strstr(hn.hf, "{E}");
            for (int64_t x = 0; x < t->ne[2] && s == NUMLA_STATUS_OK; x++) {
                snprintf(e[n].hf, sizeof e[n].hf, "%.*s%lld%s", (int)(at - hn.hf), hn.hf,
                         (long long)x, at + 3);
                s = entry_set(t, x * t->ne[1], t->ne[1], &e[n]);
                n++;
            }
            continue;
        }
        if (t->ndim > 2) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "%s: tensor %s has %d dimensions, expected at most 2", t->file,
                                t->name, t->ndim);
            break;
        }
        snprintf(e[n].hf, sizeof e[n].hf, "%s", hn.hf);
        s = entry_set(t, 0, t->ndim == 1 ? 1 : t->ne[1], &e[n]);
        n++;
    }
    const int64_t nope = cfg->qk_nope_head_dim, vd = cfg->v_head_dim, dc = cfg->kv_lora_rank;
    const int64_t H = cfg->num_attention_heads;
    for (int64_t l = 0; l < L && s == NUMLA_STATUS_OK; l++) {
        const numla_gguf_tensor *k = kb[2 * l], *vb = kb[2 * l + 1];
        if (has_kvb[l] || (!k && !vb))
            continue; /* attn_kv_b given (or neither: the loader reports kv_b_proj missing) */
        if (!k || !vb) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "%s: layer %lld has blk.%lld.attn_%s_b.weight without "
                                "blk.%lld.attn_%s_b.weight", numla_gguf_path(g), (long long)l,
                                (long long)l, k ? "k" : "v", (long long)l, k ? "v" : "k");
            break;
        }
        if (k->ndim != 3 || k->ne[0] != nope || k->ne[1] != dc || k->ne[2] != H ||
            vb->ndim != 3 || vb->ne[0] != dc || vb->ne[1] != vd || vb->ne[2] != H) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "%s: %s is {%lld, %lld, %lld} and %s {%lld, %lld, %lld}, "
                                "expected {%lld, %lld, %lld} and {%lld, %lld, %lld} (nope, "
                                "kv_lora_rank, heads / kv_lora_rank, v, heads)",
                                k->file, k->name, (long long)k->ne[0], (long long)k->ne[1],
                                (long long)k->ne[2], vb->name, (long long)vb->ne[0],
                                (long long)vb->ne[1], (long long)vb->ne[2], (long long)nope,
                                (long long)dc, (long long)H, (long long)dc, (long long)vd,
                                (long long)H);
            break;
        }
        numla_weights_entry *x = &e[n++];
        snprintf(x->hf, sizeof x->hf, "model.layers.%lld.self_attn.kv_b_proj.weight",
                 (long long)l);
        s = entry_set(k, 0, 0, x);
        if (s != NUMLA_STATUS_OK)
            break;
        numla_weights_entry tmp;
        memset(&tmp, 0, sizeof tmp);
        s = entry_set(vb, 0, 0, &tmp); /* the same checks for attn_v_b's encoding */
        x->v_b = vb;
        x->nope = nope;
        x->vdim = vd;
        x->heads = H;
        x->t.data = NULL;
        x->t.nbytes = (size_t)(k->nbytes + vb->nbytes);
        x->t.ndim = 2;
        x->t.shape[0] = H * (nope + vd);
        x->t.shape[1] = dc;
        x->t.dtype = NUMLA_DTYPE_END; /* never packed as it is */
    }
    free(kb);
    free(has_kvb);
    if (s != NUMLA_STATUS_OK) {
        free(e);
        free(v);
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    for (int64_t i = 0; i < n; i++) {
        e[i].t.name = e[i].hf;
        if (i > 0 && !strcmp(e[i].hf, e[i - 1].hf)) {
            numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "%s: tensors %s and %s are both %s", numla_gguf_path(g),
                            e[i - 1].src->name, e[i].src->name, e[i].hf);
            free(e);
            free(v);
            return NUMLA_STATUS_FORMAT;
        }
    }
    v->n = n;
    *out = v;
    return NUMLA_STATUS_OK;
}

void numla_weights_view_destroy(numla_weights_view **v)
{
    if (!v || !*v)
        return;
    free((*v)->e);
    free(*v);
    *v = NULL;
}

const numla_weights_entry *numla_weights_view_find(const numla_weights_view *v, const char *name)
{
    int64_t lo = 0, hi = v->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v->e[mid].hf, name);
        if (c == 0)
            return &v->e[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Row `row` (row_len elements) of a tensor whose rows start at base, as fp32. */
static numla_status row_f32(const void *base, int qtype, numla_dtype dt, int64_t row_bytes,
                            int64_t row, int64_t row_len, float *dst)
{
    const char *p = (const char *)base + (size_t)row * (size_t)row_bytes;
    if (qtype >= 0)
        return numla_qblock_dequant_ref((numla_qblock_type)qtype, p, row_len, dst);
    for (int64_t i = 0; i < row_len; i++)
        dst[i] = numla_load_f32(p, dt, (size_t)i);
    return NUMLA_STATUS_OK;
}

numla_status numla_weights_entry_rows_f32(const numla_weights_entry *e, int64_t r0, int64_t n,
                                          int64_t c0, int64_t k, float *dst)
{
    const int64_t K = e->t.ndim == 1 ? e->t.shape[0] : e->t.shape[1];
    float *row = malloc((size_t)(K > 0 ? K : 1) * sizeof(float));
    if (!row)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to dequantize it", e->t.name);
    numla_status s = NUMLA_STATUS_OK;
    if (!e->v_b) {
        for (int64_t r = 0; r < n && s == NUMLA_STATUS_OK; r++) {
            s = row_f32(e->t.data, e->qtype, e->t.dtype, e->row_bytes, r0 + r, K, row);
            memcpy(dst + r * k, row + c0, (size_t)k * sizeof(float));
        }
        free(row);
        NUMLA_CHECK(s);
        return NUMLA_STATUS_OK;
    }
    /* split kv_b_proj: row h·(nope + v) + j is W_UK,h row j (column j of attn_k_b's head h,
     * a (Dc, nope) matrix) for j < nope, else attn_v_b's head h row j - nope */
    const numla_gguf_tensor *kt = e->src, *vt = e->v_b;
    const int64_t nope = e->nope, hw = e->nope + e->vdim, dc = K;
    numla_dtype kd = NUMLA_DTYPE_F32, vdt = NUMLA_DTYPE_F32;
    numla_qblock_type kq = NUMLA_QBLOCK_Q8_0, vq = NUMLA_QBLOCK_Q8_0;
    const int kfl = float_dtype(kt->type, &kd), vfl = float_dtype(vt->type, &vdt);
    if (!kfl)
        s = numla_qblock_from_ggml(kt->type, &kq);
    if (s == NUMLA_STATUS_OK && !vfl)
        s = numla_qblock_from_ggml(vt->type, &vq);
    const numla_ggml_type_info *ki = numla_ggml_type_get(kt->type);
    const numla_ggml_type_info *vi = numla_ggml_type_get(vt->type);
    const int64_t krb = nope / ki->block * ki->bytes, vrb = dc / vi->block * vi->bytes;
    float *kh = malloc((size_t)(dc * nope) * sizeof(float)); /* head h of attn_k_b */
    int64_t kh_head = -1;
    if (!kh) {
        free(row);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to assemble it", e->t.name);
    }
    for (int64_t r = 0; r < n && s == NUMLA_STATUS_OK; r++) {
        const int64_t h = (r0 + r) / hw, j = (r0 + r) % hw;
        if (j < nope) {
            for (int64_t c = 0; kh_head != h && c < dc && s == NUMLA_STATUS_OK; c++)
                s = row_f32(kt->data, kfl ? -1 : (int)kq, kd, krb, h * dc + c, nope,
                            kh + c * nope);
            kh_head = h;
            for (int64_t c = 0; c < k; c++)
                dst[r * k + c] = kh[(c0 + c) * nope + j];
        } else {
            s = row_f32(vt->data, vfl ? -1 : (int)vq, vdt, vrb, h * e->vdim + (j - nope), dc,
                        row);
            memcpy(dst + r * k, row + c0, (size_t)k * sizeof(float));
        }
    }
    free(kh);
    free(row);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
