/* tests/fuzz/fuzz_gguf.c — fuzz target for the GGUF reader (engine/formats/gguf.c).
 *
 * The input bytes become `model.gguf` in a private temporary directory, which is then opened
 * with numla_gguf_open. Any status but OK, FORMAT or UNSUPPORTED, an error message that does not
 * name the file, or an accepted file whose keys, arrays or tensors cannot all be read back
 * (every tensor found by its name, sized by its dims and type, inside the mapping) is a bug and
 * aborts. A `deepseek4` MTP file (nextn_predict_layers) goes through
 * numla_gguf_deepseek4_read_mtp by itself (OK, or FORMAT / UNSUPPORTED naming the file). Any
 * other `deepseek4` file goes through numla_gguf_deepseek4_read (OK, or FORMAT /
 * UNSUPPORTED naming the file) and, when accepted, its view under DeepSeek's names (every entry
 * found by its name, its bytes readable). A `deepseek2` file goes through
 * numla_gguf_deepseek2_read likewise; when accepted, at least one decoder layer is left beside
 * its MTP blocks (nextn_predict_layers) and the MTP tensors (blk.N.nextn.*) that have an HF
 * name have one under model.layers. Built two ways:
 *   * with -DNUMLA_FUZZ=ON (clang): build/fuzz_gguf, a libFuzzer binary;
 *   * always: linked into numla_unit, whose gguf suite feeds it seeded mutations of a valid
 *     file, so CI exercises the same checks without clang.
 */
#define _GNU_SOURCE
#include "engine/formats/gguf.h"
#include "engine/formats/gguf_deepseek2.h"
#include "engine/formats/gguf_deepseek4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"

numla_status numla_fuzz_gguf_run(const uint8_t *data, size_t size);

static numla_fuzz_file numla_fuzz_gguf_dir_ = {.target = "fuzz_gguf", .tag = "gguf"};
static char numla_fuzz_gguf_path_[300];

static void numla_fuzz_gguf_die(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_gguf: %s (%s)\n", what, msg);
    abort();
}

/* Every element of a value, nested arrays included, is readable. */
static void numla_fuzz_gguf_walk(const numla_gguf_value *v, int depth)
{
    if (depth > NUMLA_GGUF_MAX_NESTING)
        numla_fuzz_gguf_die("arrays nested deeper than the limit", "");
    if (v->type == NUMLA_GGUF_STRING) {
        if (v->v.str.s[v->v.str.len] != 0)
            numla_fuzz_gguf_die("string not NUL-terminated", "");
        return;
    }
    if (v->type != NUMLA_GGUF_ARRAY)
        return;
    volatile uint8_t sink = 0;
    if (v->v.arr.type == NUMLA_GGUF_STRING) {
        const numla_gguf_str *s = v->v.arr.items;
        for (uint64_t i = 0; i < v->v.arr.count; i++)
            sink ^= (uint8_t)s[i].s[s[i].len];
    } else if (v->v.arr.type == NUMLA_GGUF_ARRAY) {
        const numla_gguf_value *s = v->v.arr.items;
        for (uint64_t i = 0; i < v->v.arr.count; i++)
            numla_fuzz_gguf_walk(&s[i], depth + 1);
    } else if (v->v.arr.count) {
        sink ^= ((const uint8_t *)v->v.arr.items)[0];
    }
    (void)sink;
}

numla_status numla_fuzz_gguf_run(const uint8_t *data, size_t size)
{
    numla_fuzz_file_write(&numla_fuzz_gguf_dir_, "model.gguf", data, size, numla_fuzz_gguf_path_,
                          sizeof numla_fuzz_gguf_path_);

    numla_gguf *g = NULL;
    numla_status s = numla_gguf_open(numla_fuzz_gguf_path_, &g);
    if (s != NUMLA_STATUS_OK) {
        if (g)
            numla_fuzz_gguf_die("failed open returned a file", numla_error_message());
        if (s != NUMLA_STATUS_FORMAT && s != NUMLA_STATUS_UNSUPPORTED)
            numla_fuzz_gguf_die("unexpected status", numla_error_message());
        if (!strstr(numla_error_message(), numla_fuzz_gguf_path_))
            numla_fuzz_gguf_die("error message does not name the file", numla_error_message());
        return s;
    }
    for (int64_t i = 0; i < numla_gguf_kv_count(g); i++) {
        const numla_gguf_kv *kv = numla_gguf_kv_at(g, i);
        if (!kv || numla_gguf_find(g, kv->key) != &kv->value)
            numla_fuzz_gguf_die("key not found by its name", kv ? kv->key : "?");
        numla_fuzz_gguf_walk(&kv->value, 0);
    }
    for (int64_t i = 0; i < numla_gguf_tensor_count(g); i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        if (!t || numla_gguf_tensor_find(g, t->name) != t)
            numla_fuzz_gguf_die("tensor not found by its name", t ? t->name : "?");
        const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
        if (!ti)
            numla_fuzz_gguf_die("accepted an unknown type", t->name);
        uint64_t n = 1;
        for (int d = 0; d < NUMLA_GGUF_MAX_DIMS; d++)
            n *= (uint64_t)t->ne[d];
        if (n / (uint64_t)ti->block * (uint64_t)ti->bytes != t->nbytes)
            numla_fuzz_gguf_die("nbytes does not match the dims", t->name);
        if (t->nbytes > size)
            numla_fuzz_gguf_die("tensor larger than the file", t->name);
        volatile uint8_t sink = 0;
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k += 4096)
            sink ^= p[k]; /* touch every page: a tensor outside the mapping faults here */
        if (t->nbytes)
            sink ^= p[t->nbytes - 1];
        (void)sink;
    }
    /* A deepseek2 file: its keys and tensor set (engine/formats/gguf_deepseek2.h); the MTP
     * blocks after the decoder layers, their nextn tensors named under model.layers. */
    const numla_gguf_value *arch = numla_gguf_find(g, "general.architecture");
    if (arch && arch->type == NUMLA_GGUF_STRING && !strcmp(arch->v.str.s, "deepseek2")) {
        numla_gguf_deepseek2 d;
        numla_status r = numla_gguf_deepseek2_read(g, &d);
        if (r != NUMLA_STATUS_OK) {
            if (r != NUMLA_STATUS_FORMAT && r != NUMLA_STATUS_UNSUPPORTED)
                numla_fuzz_gguf_die("deepseek2: unexpected status", numla_error_message());
            if (!strstr(numla_error_message(), numla_fuzz_gguf_path_))
                numla_fuzz_gguf_die("deepseek2: error message does not name the file",
                                    numla_error_message());
            numla_gguf_close(&g);
            return r;
        }
        if (d.num_hidden_layers < 1 || d.nextn_predict_layers < 0)
            numla_fuzz_gguf_die("deepseek2: no decoder layer beside the MTP blocks", "");
        for (int64_t i = 0; i < numla_gguf_tensor_count(g); i++) {
            const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
            numla_gguf_hf_name hn;
            char pre[40];
            snprintf(pre, sizeof pre, "blk.%lld.nextn.", (long long)d.num_hidden_layers);
            if (!strncmp(t->name, pre, strlen(pre)) &&
                numla_gguf_deepseek2_hf_name(t->name, &hn) == NUMLA_STATUS_OK &&
                strncmp(hn.hf, "model.layers.", 13))
                numla_fuzz_gguf_die("deepseek2: an MTP tensor outside model.layers", t->name);
            numla_error_clear();
        }
    }
    /* A deepseek4 MTP file (nextn_predict_layers, as llama.cpp's --mtp conversion writes the
     * layer): read by itself, OK or FORMAT / UNSUPPORTED naming the file. */
    if (numla_gguf_is_deepseek4(g) && numla_gguf_find(g, "deepseek4.nextn_predict_layers")) {
        int32_t ratio = -1;
        numla_status r = numla_gguf_deepseek4_read_mtp(g, NULL, &ratio);
        if (r != NUMLA_STATUS_OK && r != NUMLA_STATUS_FORMAT && r != NUMLA_STATUS_UNSUPPORTED)
            numla_fuzz_gguf_die("deepseek4 mtp: unexpected status", numla_error_message());
        if (r != NUMLA_STATUS_OK && !strstr(numla_error_message(), numla_fuzz_gguf_path_))
            numla_fuzz_gguf_die("deepseek4 mtp: error message does not name the file",
                                numla_error_message());
        if (r == NUMLA_STATUS_OK && ratio < 0)
            numla_fuzz_gguf_die("deepseek4 mtp: accepted without its compress ratio", "");
        numla_gguf_close(&g);
        return r;
    }
    /* A deepseek4 file: its keys and tensor set (engine/formats/gguf_deepseek4.h), then the
     * view under DeepSeek's names, every entry's bytes inside its GGUF tensor. */
    if (numla_gguf_is_deepseek4(g)) {
        numla_gguf_deepseek4 d;
        numla_status r = numla_gguf_deepseek4_read(g, &d);
        if (r != NUMLA_STATUS_OK) {
            if (r != NUMLA_STATUS_FORMAT && r != NUMLA_STATUS_UNSUPPORTED)
                numla_fuzz_gguf_die("deepseek4: unexpected status", numla_error_message());
            if (!strstr(numla_error_message(), numla_fuzz_gguf_path_))
                numla_fuzz_gguf_die("deepseek4: error message does not name the file",
                                    numla_error_message());
            numla_gguf_close(&g);
            return r;
        }
        numla_safetensors_model *v = NULL;
        r = numla_gguf_deepseek4_view(g, &v);
        if (r != NUMLA_STATUS_OK)
            numla_fuzz_gguf_die("deepseek4: a file read() accepts has no view", numla_error_message());
        for (int64_t i = 0; i < numla_safetensors_count(v); i++) {
            const numla_safetensors_tensor *t = numla_safetensors_at(v, i);
            if (numla_safetensors_find(v, t->name) != t)
                numla_fuzz_gguf_die("deepseek4: view entry not found by its name", t->name);
            volatile uint8_t sink = 0;
            if (t->nbytes)
                sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)sink;
        }
        if (!numla_safetensors_find(v, "layers.0.attn.wq_b.weight") ||
            !numla_safetensors_find(v, "layers.0.ffn.experts.0.w1.weight"))
            numla_fuzz_gguf_die("deepseek4: view lacks a checked tensor", "");
        numla_safetensors_close(&v);
    }
    numla_gguf_close(&g);
    return s;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_gguf_run(data, size);
    return 0;
}
#endif
