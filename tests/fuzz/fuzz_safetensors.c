/* tests/fuzz/fuzz_safetensors.c — fuzz target for the safetensors reader (engine/formats/safetensors.c).
 *
 * The input bytes become `model.safetensors` in a private temporary directory, which is then
 * opened with numla_safetensors_open. Any status but OK, FORMAT or UNSUPPORTED, an error message that
 * does not name the file, or a tensor that does not lie inside the file is a bug and aborts.
 * numla_fuzz_safetensors_index_run does the same for `model.safetensors.index.json` next to
 * two valid shards (IO is then also legal: the index may name a missing shard). Built two ways:
 *   * with -DNUMLA_FUZZ=ON (clang): build/fuzz_safetensors, a libFuzzer binary;
 *   * always: linked into numla_unit, whose safetensors suite feeds it mutated files, so CI
 *     exercises the same checks without clang.
 */
#define _GNU_SOURCE
#include "engine/formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_file.h"

numla_status numla_fuzz_safetensors_run(const uint8_t *data, size_t size);
numla_status numla_fuzz_safetensors_index_run(const uint8_t *data, size_t size);

static numla_fuzz_file numla_fuzz_dir_ = {.target = "fuzz_safetensors", .tag = "st"};
static char numla_fuzz_path_[300];

static numla_fuzz_file numla_fuzz_idx_dir_ = {.target = "fuzz_safetensors", .tag = "idx"};
static char numla_fuzz_idx_path_[300];

static void numla_fuzz_die(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, msg);
    abort();
}

numla_status numla_fuzz_safetensors_run(const uint8_t *data, size_t size)
{
    numla_fuzz_file_write(&numla_fuzz_dir_, "model.safetensors", data, size, numla_fuzz_path_,
                          sizeof numla_fuzz_path_);

    numla_safetensors_model *m = NULL;
    numla_status s = numla_safetensors_open(numla_fuzz_dir_.dir, &m);
    if (s != NUMLA_STATUS_OK) {
        if (m)
            numla_fuzz_die("failed open returned a model", numla_error_message());
        if (s != NUMLA_STATUS_FORMAT && s != NUMLA_STATUS_UNSUPPORTED)
            numla_fuzz_die("unexpected status", numla_error_message());
        if (!strstr(numla_error_message(), numla_fuzz_path_))
            numla_fuzz_die("error message does not name the file", numla_error_message());
        return s;
    }
    /* Accepted: every tensor is found by its name, its size matches its shape, and together
     * the tensors fit in the data section (they do not overlap). */
    uint64_t hlen = 0, total = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)data[i] << (8 * i);
    int64_t n = numla_safetensors_count(m);
    for (int64_t i = 0; i < n; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(m, i);
        if (!t || numla_safetensors_find(m, t->name) != t)
            numla_fuzz_die("tensor not found by its name", t ? t->name : "?");
        size_t count = numla_dtype_size(t->dtype);
        for (int32_t d = 0; d < t->ndim; d++)
            count *= (size_t)t->shape[d];
        if (count != t->nbytes)
            numla_fuzz_die("nbytes does not match the shape", t->name);
        total += t->nbytes;
        if (total > size - 8 - hlen)
            numla_fuzz_die("tensors exceed the data section", t->name);
        volatile uint8_t sink = 0;
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k += 4096)
            sink ^= p[k]; /* touch every page: a tensor outside the mapping faults here */
        if (t->nbytes)
            sink ^= p[t->nbytes - 1];
        (void)sink;
    }
    numla_safetensors_close(&m);
    return s;
}

/* Every tensor of an accepted model is found by its name and sized by its shape. */
static void numla_fuzz_check_model(const numla_safetensors_model *m)
{
    for (int64_t i = 0; i < numla_safetensors_count(m); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(m, i);
        if (!t || numla_safetensors_find(m, t->name) != t)
            numla_fuzz_die("tensor not found by its name", t ? t->name : "?");
        size_t count = numla_dtype_size(t->dtype);
        for (int32_t d = 0; d < t->ndim; d++)
            count *= (size_t)t->shape[d];
        if (count != t->nbytes)
            numla_fuzz_die("nbytes does not match the shape", t->name);
        if (t->nbytes)
            (void)*(volatile const uint8_t *)((const uint8_t *)t->data + t->nbytes - 1);
    }
}

numla_status numla_fuzz_safetensors_index_run(const uint8_t *data, size_t size)
{
    if (!numla_fuzz_idx_dir_.dir[0]) {
        /* s1 holds a and b, s2 holds c. */
        const int64_t shape[] = {2, 3};
        const uint16_t v[6] = {1, 2, 3, 4, 5, 6};
        for (int k = 0; k < 2; k++) {
            char shard[300], name[32];
            snprintf(name, sizeof name, "s%d.safetensors", k + 1);
            numla_fuzz_file_path(&numla_fuzz_idx_dir_, name, shard, sizeof shard);
            numla_safetensors_writer *w = NULL;
            if (numla_safetensors_writer_create(&w) != NUMLA_STATUS_OK ||
                numla_safetensors_writer_add(w, k ? "c" : "a", NUMLA_DTYPE_BF16, 2, shape, v) ||
                (!k && numla_safetensors_writer_add(w, "b", NUMLA_DTYPE_F16, 2, shape, v)) ||
                numla_safetensors_writer_write(w, shard) != NUMLA_STATUS_OK)
                numla_fuzz_die("cannot write the shards", numla_error_message());
            numla_safetensors_writer_destroy(&w);
        }
    }
    numla_fuzz_file_write(&numla_fuzz_idx_dir_, "model.safetensors.index.json", data, size,
                          numla_fuzz_idx_path_, sizeof numla_fuzz_idx_path_);
    numla_safetensors_model *m = NULL;
    numla_status s = numla_safetensors_open(numla_fuzz_idx_dir_.dir, &m);
    if (s != NUMLA_STATUS_OK) {
        if (m)
            numla_fuzz_die("failed open returned a model", numla_error_message());
        if (s != NUMLA_STATUS_FORMAT && s != NUMLA_STATUS_UNSUPPORTED && s != NUMLA_STATUS_IO)
            numla_fuzz_die("unexpected status", numla_error_message());
        if (!strstr(numla_error_message(), numla_fuzz_idx_dir_.dir))
            numla_fuzz_die("error message names no file of the model", numla_error_message());
        return s;
    }
    numla_fuzz_check_model(m);
    numla_safetensors_close(&m);
    return s;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_safetensors_run(data, size);
    return 0;
}
#endif
