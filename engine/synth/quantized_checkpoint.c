/* engine/synth/quantized_checkpoint.c — 8-bit checkpoints in the published formats
 * (quantized_checkpoint.h): the naming rules, the streaming quantized tensor, and
 * `numla quantize` over a safetensors checkpoint. */
#define _GNU_SOURCE
#include "engine/synth/quantized_checkpoint.h"

#include "engine/json/model_json.h"
#include "kernels/quant.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int numla_qckpt_format_parse(const char *s, numla_qckpt_format *out)
{
    return numla_weight_encoding_parse(s, NUMLA_ENCODING_BY_QUANTIZE, out);
}

int numla_qckpt_quantizes(numla_qckpt_format f, const char *name, int32_t ndim, int keep_lm_head)
{
    /* the DSA indexer's wq_b and wk too (DeepSeek-V3.2's FP8 file has them in fp8); its
     * weights_proj and k_norm stay as they are */
    static const char *const proj[] = {"q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
                                       "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                       "wq_b", "wk"};
    if (f == NUMLA_QCKPT_NONE || ndim != 2)
        return 0;
    if (!strcmp(name, "lm_head.weight"))
        return f == NUMLA_QCKPT_INT8 && !keep_lm_head;
    size_t n = strlen(name);
    if (n < 8 || strcmp(name + n - 7, ".weight"))
        return 0;
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++) {
        size_t p = strlen(proj[i]);
        if (n >= p + 8 && name[n - 8 - p] == '.' && !strncmp(name + n - 7 - p, proj[i], p))
            return 1;
    }
    return 0;
}

/* The scale tensors' names, grids and byte counts come from the encoding table. */
void numla_qckpt_scale_name(numla_qckpt_format f, const char *name, char *buf, size_t cap)
{
    const numla_weight_encoding_info *in = numla_weight_encoding_get(f);
    snprintf(buf, cap, "%s%s", name, in && in->scale_suffix ? in->scale_suffix : "");
}

void numla_qckpt_scale_shape(numla_qckpt_format f, int64_t n, int64_t k, int64_t shape[2])
{
    numla_weight_encoding_scale_grid(f, n, k, shape);
}

int64_t numla_qckpt_bytes(numla_qckpt_format f, int64_t n, int64_t k)
{
    return numla_weight_encoding_bytes(f, n, k, 0);
}

numla_status numla_qckpt_config_set(json_t *config, numla_qckpt_format f)
{
    json_t *q = f == NUMLA_QCKPT_FP8
                    ? json_pack("{s:s, s:s, s:[i,i], s:s}", "quant_method", "fp8", "fmt", "e4m3",
                                "weight_block_size", NUMLA_QUANT_FP8_BLOCK, NUMLA_QUANT_FP8_BLOCK,
                                "activation_scheme", "dynamic")
                    : json_pack("{s:s, s:s}", "quant_method", "w8a8_int8", "activation_scheme",
                                "dynamic");
    if (!q || json_object_set_new(config, "quantization_config", q))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "quantize: cannot build quantization_config");
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* one quantized tensor                                                                      */

struct numla_qckpt_tensor {
    numla_qckpt_format f;
    char name[256], scale_name[272];
    int64_t n, k;
    int64_t scale_shape[2];
    float *scales;            /* fp8 (ceil(n/128), ceil(k/128)); int8 (n) */
    numla_qckpt_rows_fn rows;
    void *ctx;
};

enum { NUMLA_QCKPT_BAND = NUMLA_QUANT_FP8_BLOCK };

numla_status numla_qckpt_tensor_create(numla_qckpt_format f, const char *name, int64_t n, int64_t k,
                                       numla_qckpt_rows_fn rows, void *ctx,
                                       numla_qckpt_tensor **out)
{
    *out = NULL;
    if (f == NUMLA_QCKPT_NONE || n < 1 || k < 1 || strlen(name) >= 256)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quantize: cannot quantize '%.200s' (%lld x %lld)",
                   name, (long long)n, (long long)k);
    numla_qckpt_tensor *t = calloc(1, sizeof *t);
    float *band = malloc((size_t)NUMLA_QCKPT_BAND * (size_t)k * sizeof *band);
    if (t) {
        numla_qckpt_scale_shape(f, n, k, t->scale_shape);
        t->scales = malloc((size_t)(t->scale_shape[0] * t->scale_shape[1]) * sizeof *t->scales);
    }
    if (!t || !band || !t->scales) {
        free(band);
        numla_qckpt_tensor_destroy(&t);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "quantize: no memory for '%.200s'", name);
    }
    t->f = f;
    snprintf(t->name, sizeof t->name, "%s", name);
    numla_qckpt_scale_name(f, name, t->scale_name, sizeof t->scale_name);
    t->n = n;
    t->k = k;
    t->rows = rows;
    t->ctx = ctx;
    numla_status s = NUMLA_STATUS_OK;
    for (int64_t r0 = 0; r0 < n && s == NUMLA_STATUS_OK; r0 += NUMLA_QCKPT_BAND) {
        int64_t nr = n - r0 < NUMLA_QCKPT_BAND ? n - r0 : NUMLA_QCKPT_BAND;
        s = rows(ctx, r0, r0 + nr, band);
        if (s != NUMLA_STATUS_OK) {
            numla_error_frame(__FILE__, __LINE__, __func__);
            break;
        }
        if (f == NUMLA_QCKPT_FP8)
            s = numla_quant_fp8_band_scales(nr, k, band, k,
                                            t->scales + (r0 / NUMLA_QCKPT_BAND) * t->scale_shape[1]);
        else
            for (int64_t r = 0; r < nr && s == NUMLA_STATUS_OK; r++)
                s = numla_quant_int8_row_scale(k, band + r * k, &t->scales[r0 + r]);
        if (s != NUMLA_STATUS_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", numla_error_message());
            s = numla_error_set(s, __FILE__, __LINE__, __func__,
                                "quantize: tensor '%.200s', rows from %lld: %s", name,
                                (long long)r0, why);
        }
    }
    free(band);
    if (s != NUMLA_STATUS_OK) {
        numla_qckpt_tensor_destroy(&t);
        return s;
    }
    *out = t;
    return NUMLA_STATUS_OK;
}

void numla_qckpt_tensor_destroy(numla_qckpt_tensor **pt)
{
    if (!*pt)
        return;
    free((*pt)->scales);
    free(*pt);
    *pt = NULL;
}

/* Codes [offset, offset + nbytes) of the weight: the rows they touch are read again and
 * encoded under the scales of the first pass. */
static numla_status numla_qckpt_fill(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    numla_qckpt_tensor *t = ctx;
    const size_t k = (size_t)t->k;
    const int64_t r0 = (int64_t)(offset / k), r1 = (int64_t)((offset + nbytes + k - 1) / k);
    float *w = malloc((size_t)(r1 - r0) * k * sizeof *w);
    unsigned char *row = malloc(k);
    if (!w || !row) {
        free(w);
        free(row);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "quantize: no memory writing '%.200s'", t->name);
    }
    numla_status s = t->rows(t->ctx, r0, r1, w);
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    for (int64_t r = r0; r < r1 && s == NUMLA_STATUS_OK; r++) {
        const float *src = w + (size_t)(r - r0) * k;
        if (t->f == NUMLA_QCKPT_FP8)
            numla_quant_fp8_encode_row(t->k, src,
                                       t->scales + (r / NUMLA_QCKPT_BAND) * t->scale_shape[1], row);
        else
            numla_quant_int8_encode_row(t->k, src, t->scales[r], (int8_t *)row);
        size_t rs = (size_t)r * k;
        size_t a = rs < offset ? offset - rs : 0;
        size_t b = rs + k > offset + nbytes ? offset + nbytes - rs : k;
        memcpy((unsigned char *)dst + rs + a - offset, row + a, b - a);
    }
    free(w);
    free(row);
    return s;
}

numla_status numla_qckpt_tensor_add(numla_qckpt_tensor *t, numla_safetensors_writer *w)
{
    const int64_t shape[2] = {t->n, t->k};
    NUMLA_CHECK(numla_safetensors_writer_add_fill(
        w, t->name, t->f == NUMLA_QCKPT_FP8 ? NUMLA_DTYPE_F8_E4M3 : NUMLA_DTYPE_I8, 2, shape,
        numla_qckpt_fill, t));
    NUMLA_CHECK(numla_safetensors_writer_add(w, t->scale_name, NUMLA_DTYPE_F32, 2, t->scale_shape,
                                             t->scales));
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* numla quantize                                                                            */

static numla_status numla_qckpt_src_rows(void *ctx, int64_t r0, int64_t r1, float *dst)
{
    const numla_safetensors_tensor *t = ctx;
    const size_t k = (size_t)t->shape[1];
    for (size_t i = (size_t)r0 * k, j = 0; i < (size_t)r1 * k; i++, j++)
        dst[j] = numla_load_f32(t->data, t->dtype, i);
    return NUMLA_STATUS_OK;
}

static numla_status numla_qckpt_src_copy(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    const numla_safetensors_tensor *t = ctx;
    memcpy(dst, (const char *)t->data + offset, nbytes);
    return NUMLA_STATUS_OK;
}

numla_status numla_qckpt_copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: %s", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: %s", dst, strerror(errno));
    }
    char buf[65536];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        bad |= fwrite(buf, 1, n, out) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    if (bad)
        NUMLA_FAIL(NUMLA_STATUS_IO, "copying %s to %s failed", src, dst);
    return NUMLA_STATUS_OK;
}

/* Every regular file of model_dir but the weights, their index and config.json. */
static numla_status numla_qckpt_copy_others(const char *model_dir, const char *out_dir)
{
    DIR *d = opendir(model_dir);
    if (!d)
        NUMLA_FAIL(NUMLA_STATUS_IO, "quantize: cannot list %s: %s", model_dir, strerror(errno));
    numla_status s = NUMLA_STATUS_OK;
    for (struct dirent *e; s == NUMLA_STATUS_OK && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "config.json") ||
            !strcmp(e->d_name, "model.safetensors.index.json") ||
            (n >= 12 && !strcmp(e->d_name + n - 12, ".safetensors")))
            continue;
        char src[4096], dst[4096];
        struct stat st;
        snprintf(src, sizeof src, "%s/%s", model_dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, e->d_name);
        if (stat(src, &st) == 0 && S_ISREG(st.st_mode))
            s = numla_qckpt_copy_file(src, dst);
    }
    closedir(d);
    return s;
}

typedef struct numla_qckpt_item {
    const numla_safetensors_tensor *t;
    int quant;
    int64_t bytes;
} numla_qckpt_item;

numla_status numla_qckpt_quantize_model(const char *model_dir, const char *out_dir,
                                        numla_qckpt_format f, int keep_lm_head,
                                        int64_t shard_bytes, int64_t *total_bytes)
{
    if (f == NUMLA_QCKPT_NONE)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quantize: no target format");
    char *rm = realpath(model_dir, NULL), *ro = realpath(out_dir, NULL);
    int same = rm && ro && !strcmp(rm, ro);
    free(rm);
    free(ro);
    if (same)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quantize: --out %s is the model directory itself",
                   out_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    json_t *cfg = NULL;
    NUMLA_CHECK(numla_json_file_read(path, 0, &cfg));
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "quantize: %s: not an object", path);
    }
    if (json_object_get(cfg, "quantization_config")) {
        json_decref(cfg);
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "quantize: %s already has a quantization_config: "
                   "numla quantize reads bf16/fp16/fp32 checkpoints", path);
    }
    numla_safetensors_model *m = NULL;
    numla_status s = numla_safetensors_open(model_dir, &m);
    if (s != NUMLA_STATUS_OK) {
        json_decref(cfg);
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    const int64_t nt = numla_safetensors_count(m);
    numla_qckpt_item *it = calloc((size_t)(nt ? nt : 1), sizeof *it);
    numla_qckpt_tensor **qt = calloc((size_t)(nt ? nt : 1), sizeof *qt);
    int64_t *cut = malloc((size_t)(nt + 2) * sizeof *cut);
    json_t *wm = json_object();
    numla_safetensors_writer *w = NULL;
    if (!it || !qt || !cut || !wm) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "quantize: no memory");
        goto done;
    }
    int64_t total = 0, cur = 0, limit = shard_bytes > 0 ? shard_bytes : (int64_t)4 << 30;
    int64_t nshards = 0;
    cut[0] = 0;
    for (int64_t i = 0; i < nt; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(m, i);
        if ((unsigned)t->dtype >= NUMLA_DTYPE_COUNT) {
            s = numla_error_set(NUMLA_STATUS_UNSUPPORTED, __FILE__, __LINE__, __func__,
                                "quantize: %s: tensor '%.200s' is %s already: numla quantize "
                                "reads bf16/fp16/fp32 checkpoints", t->file, t->name,
                                numla_dtype_name(t->dtype));
            goto done;
        }
        it[i].t = t;
        it[i].quant = numla_qckpt_quantizes(f, t->name, t->ndim, keep_lm_head);
        it[i].bytes = it[i].quant ? numla_qckpt_bytes(f, t->shape[0], t->shape[1])
                                  : (int64_t)t->nbytes;
        if (cur > 0 && cur + it[i].bytes > limit) {
            cut[++nshards] = i;
            cur = 0;
        }
        cur += it[i].bytes;
        total += it[i].bytes;
    }
    cut[++nshards] = nt;

    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "quantize: cannot create %s: %s", out_dir, strerror(errno));
        goto done;
    }
    /* A stale single file would win over the new index. */
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    unlink(path);
    for (int64_t k = 0; k < nshards && s == NUMLA_STATUS_OK; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05lld-of-%05lld.safetensors", (long long)k + 1,
                 (long long)nshards);
        NUMLA_CHECK_GOTO(numla_safetensors_writer_create(&w), s, done);
        for (int64_t i = cut[k]; i < cut[k + 1]; i++) {
            const numla_safetensors_tensor *t = it[i].t;
            json_object_set_new(wm, t->name, json_string(name));
            if (!it[i].quant) {
                NUMLA_CHECK_GOTO(numla_safetensors_writer_add_fill(w, t->name, t->dtype, t->ndim,
                                                                   t->shape, numla_qckpt_src_copy,
                                                                   (void *)t), s, done);
                continue;
            }
            NUMLA_CHECK_GOTO(numla_qckpt_tensor_create(f, t->name, t->shape[0], t->shape[1],
                                                       numla_qckpt_src_rows, (void *)t, &qt[i]),
                             s, done);
            NUMLA_CHECK_GOTO(numla_qckpt_tensor_add(qt[i], w), s, done);
            char sn[300];
            numla_qckpt_scale_name(f, t->name, sn, sizeof sn);
            json_object_set_new(wm, sn, json_string(name));
        }
        snprintf(path, sizeof path, "%s/%s", out_dir, name);
        NUMLA_CHECK_GOTO(numla_safetensors_writer_write(w, path), s, done);
        numla_safetensors_writer_destroy(&w);
        for (int64_t i = cut[k]; i < cut[k + 1]; i++)
            numla_qckpt_tensor_destroy(&qt[i]);
    }
    NUMLA_CHECK_GOTO(numla_qckpt_config_set(cfg, f), s, done);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (json_dump_file(cfg, path, JSON_INDENT(2)) != 0) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "quantize: cannot write %s", path);
        goto done;
    }
    NUMLA_CHECK_GOTO(numla_qckpt_copy_others(model_dir, out_dir), s, done);
    /* The index last: a failed run never leaves one naming missing shards. */
    json_t *root = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
                             "weight_map", wm);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    if (!root || json_dump_file(root, path, JSON_INDENT(2)) != 0) {
        json_decref(root);
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "quantize: cannot write %s", path);
        goto done;
    }
    json_decref(root);
    if (total_bytes)
        *total_bytes = total;
done:
    numla_safetensors_writer_destroy(&w);
    for (int64_t i = 0; qt && i < nt; i++)
        numla_qckpt_tensor_destroy(&qt[i]);
    free(qt);
    free(it);
    free(cut);
    json_decref(wm);
    json_decref(cfg);
    numla_safetensors_close(&m);
    return s;
}
