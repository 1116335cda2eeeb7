/* Tests for engine/safetensors: writer -> reader round trip, sharded models, a table of hostile
 * files built byte by byte (each must fail with the right status and a message naming the file
 * and the tensor), and the fuzz target's checks over thousands of seeded mutations. */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/safetensors.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

numla_status numla_fuzz_safetensors_run(const uint8_t *data, size_t size);
numla_status numla_fuzz_safetensors_index_run(const uint8_t *data, size_t size);

/* A fresh subdirectory of the test tmpdir. */
static const char *st_dir(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/st-%s", numla_test_tmpdir(), name);
    mkdir(p, 0700);
    return p;
}

/* Write `8-byte length + header + data_len bytes` with a chosen length field. */
static void st_write_raw(const char *path, uint64_t hlen_field, const char *header, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hlen_field >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i * 7 & 0xff), f);
    fclose(f);
}

static void st_write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    if (n)
        fwrite(p, 1, n, f);
    fclose(f);
}

/* Open `dir`, expect status `want`, and a message holding each of the NULL-terminated needles. */
static void st_expect_fail(const char *dir, numla_status want, const char *case_name, ...)
{
    numla_safetensors_model *m = NULL;
    numla_error_clear();
    numla_status s = numla_safetensors_open(dir, &m);
    NUMLA_ASSERT_MSG(s == want, "%s: status %s, want %s (%s)", case_name, numla_status_name(s),
                     numla_status_name(want), numla_error_message());
    NUMLA_ASSERT_MSG(m == NULL, "%s: failed open returned a model", case_name);
    va_list ap;
    va_start(ap, case_name);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        NUMLA_ASSERT_MSG(strstr(numla_error_message(), needle) != NULL, "%s: message '%s' lacks '%s'",
                         case_name, numla_error_message(), needle);
    va_end(ap);
    numla_safetensors_close(&m);
}

/* ---------------------------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    numla_test_rng rng = {42};
    float a[6];
    uint16_t b[3 * 5 * 2], c[7];
    for (int i = 0; i < 6; i++)
        a[i] = (float)numla_test_rng_normal(&rng);
    for (int i = 0; i < 30; i++)
        b[i] = (uint16_t)numla_test_rng_u64(&rng);
    for (int i = 0; i < 7; i++)
        c[i] = numla_f32_to_f16((float)i - 3.5f);
    float scalar = 3.25f;
    const int64_t sa[] = {2, 3}, sb[] = {3, 5, 2}, sc[] = {7}, sz[] = {4, 0};

    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "a.f32", NUMLA_DTYPE_F32, 2, sa, a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "b.bf16", NUMLA_DTYPE_BF16, 3, sb, b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "c.f16", NUMLA_DTYPE_F16, 1, sc, c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "scalar", NUMLA_DTYPE_F32, 0, NULL, &scalar),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "empty", NUMLA_DTYPE_BF16, 2, sz, NULL),
                    NUMLA_STATUS_OK);
    /* The writer copies at add time: clobbering the source must not change the file. */
    float a_orig[6];
    memcpy(a_orig, a, sizeof a);
    memset(a, 0, sizeof a);
    const char *dir = st_dir("roundtrip");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    CU_ASSERT_PTR_NULL(w);

    /* Layout: 8-byte LE length, JSON padded with spaces to a multiple of 8, then data. */
    size_t n = 0;
    unsigned char *raw = (unsigned char *)numla_test_read_file(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)raw[i] << (8 * i);
    CU_ASSERT_EQUAL(hlen % 8, 0);
    CU_ASSERT_EQUAL(n, 8 + hlen + sizeof a + sizeof b + sizeof c + sizeof scalar);
    CU_ASSERT_EQUAL(raw[8], '{');
    free(raw);

    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(m), 5);
    const numla_safetensors_tensor *t = numla_safetensors_find(m, "a.f32");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dtype, NUMLA_DTYPE_F32);
    CU_ASSERT_EQUAL(t->ndim, 2);
    CU_ASSERT(t->shape[0] == 2 && t->shape[1] == 3);
    CU_ASSERT_EQUAL(t->nbytes, sizeof a);
    CU_ASSERT(memcmp(t->data, a_orig, sizeof a) == 0);
    CU_ASSERT(strstr(t->file, "roundtrip/model.safetensors") != NULL);
    t = numla_safetensors_find(m, "b.bf16");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->dtype == NUMLA_DTYPE_BF16 && t->ndim == 3 && t->shape[2] == 2);
    CU_ASSERT(t->nbytes == sizeof b && memcmp(t->data, b, sizeof b) == 0);
    t = numla_safetensors_find(m, "c.f16");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->dtype == NUMLA_DTYPE_F16 && memcmp(t->data, c, sizeof c) == 0);
    t = numla_safetensors_find(m, "scalar");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    float sv = 0; /* safetensors packs tensors back to back: data may be unaligned */
    memcpy(&sv, t->data, sizeof sv);
    CU_ASSERT(t->ndim == 0 && t->nbytes == 4 && sv == 3.25f);
    t = numla_safetensors_find(m, "empty");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->ndim == 2 && t->nbytes == 0);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "a.f3"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "__metadata__"));
    CU_ASSERT_PTR_NULL(numla_safetensors_at(m, 5));
    CU_ASSERT_PTR_NULL(numla_safetensors_at(m, -1));
    for (int64_t i = 0; i < numla_safetensors_count(m); i++)
        CU_ASSERT(numla_safetensors_find(m, numla_safetensors_at(m, i)->name) == numla_safetensors_at(m, i));

    /* expect(): right shape passes, wrong shape or name fails naming tensor, file, both shapes. */
    const numla_safetensors_tensor *got = NULL;
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "b.bf16", 3, sb, &got), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_EQUAL(got, numla_safetensors_find(m, "b.bf16"));
    const int64_t wrong[] = {3, 5, 3};
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "b.bf16", 3, wrong, &got), NUMLA_STATUS_FORMAT);
    const char *msg = numla_error_message();
    CU_ASSERT(strstr(msg, "b.bf16") && strstr(msg, "model.safetensors") &&
              strstr(msg, "[3, 5, 2]") && strstr(msg, "[3, 5, 3]"));
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "b.bf16", 2, sb, NULL), NUMLA_STATUS_FORMAT);
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "nope", 1, sc, NULL), NUMLA_STATUS_FORMAT);
    CU_ASSERT(strstr(numla_error_message(), "nope") != NULL);
    numla_safetensors_close(&m);
    CU_ASSERT_PTR_NULL(m);

    /* A file path opens that file alone. */
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(path, &m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(m), 5);
    numla_safetensors_close(&m);
}

static numla_status st_fill_iota(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    uint16_t *p = dst;
    for (size_t i = 0; i < nbytes / 2; i++)
        p[i] = (uint16_t)(offset / 2 + i + *(int *)ctx);
    return NUMLA_STATUS_OK;
}

static numla_status st_fill_fail(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    (void)ctx, (void)dst, (void)offset, (void)nbytes;
    NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "fill failed on purpose");
}

/* writer_add_fill produces bytes at write time; a failing fill fails the write and leaves no
 * file; duplicated names and bad shapes are rejected. */
static void test_writer_fill_and_errors(void)
{
    int base1 = 100, base2 = 7;
    const int64_t s1[] = {3, 4}, s2[] = {5};
    numla_safetensors_writer *w = NULL, *w2 = NULL;
    float v0[5] = {1, 2, 3, 4, 5};
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w, "x", NUMLA_DTYPE_BF16, 2, s1, st_fill_iota, &base1),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w, "y", NUMLA_DTYPE_F16, 1, s2, st_fill_iota, &base2),
                    NUMLA_STATUS_OK);
    const char *dir = st_dir("fill");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *x = numla_safetensors_find(m, "x"), *y = numla_safetensors_find(m, "y");
    CU_ASSERT_FATAL(x && y);
    CU_ASSERT(((const uint16_t *)x->data)[11] == 111 && ((const uint16_t *)y->data)[4] == 11);
    numla_safetensors_close(&m);

    /* Large produced tensors are written in chunks; fill sees the right offsets. */
    const int64_t big[] = {3, 1000003};
    int base3 = 0;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w2), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w2, "big", NUMLA_DTYPE_BF16, 2, big, st_fill_iota,
                                             &base3), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w2, "after", NUMLA_DTYPE_F32, 1, s2, &v0), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w2, "big2", NUMLA_DTYPE_BF16, 2, big, st_fill_iota,
                                             &base2), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w2, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w2);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *bg = numla_safetensors_find(m, "big"), *b2 = numla_safetensors_find(m, "big2");
    CU_ASSERT_FATAL(bg && b2 && bg->nbytes == 6000018);
    int wrong = 0;
    for (size_t i = 0; i < 3000009; i++) {
        uint16_t h1, h2;
        memcpy(&h1, (const char *)bg->data + 2 * i, 2);
        memcpy(&h2, (const char *)b2->data + 2 * i, 2);
        wrong += h1 != (uint16_t)i || h2 != (uint16_t)(i + 7);
    }
    CU_ASSERT_EQUAL(wrong, 0);
    numla_safetensors_close(&m);

    const int64_t neg[] = {2, -1};
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "neg", NUMLA_DTYPE_F32, 2, neg, NULL),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "nine", NUMLA_DTYPE_F32, 9, s1, NULL),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "__metadata__", NUMLA_DTYPE_F32, 1, s2, NULL),
                    NUMLA_STATUS_INVALID_ARG);
    float v[5] = {0};
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "x", NUMLA_DTYPE_F32, 1, s2, v), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "'x'") != NULL);
    numla_safetensors_writer_destroy(&w);

    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w, "z", NUMLA_DTYPE_F32, 1, s2, st_fill_fail, NULL),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_INTERNAL);
    CU_ASSERT(access(path, F_OK) != 0);
    numla_safetensors_writer_destroy(&w);
    char bad[700];
    snprintf(bad, sizeof bad, "%s/no/such/dir/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_write(w, bad), NUMLA_STATUS_IO);
    CU_ASSERT(strstr(numla_error_message(), bad) != NULL);
    numla_safetensors_writer_destroy(&w);
}

/* Many tensors: lookups by name go through the hash table, every one resolves. */
static void test_many_tensors(void)
{
    enum { N = 20000 };
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    const int64_t shape[] = {1};
    char name[64];
    for (int i = 0; i < N; i++) {
        float v = (float)i;
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", i / 256,
                 i % 256);
        CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, name, NUMLA_DTYPE_F32, 1, shape, &v),
                        NUMLA_STATUS_OK);
    }
    const char *dir = st_dir("many");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(m), N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", i / 256,
                 i % 256);
        const numla_safetensors_tensor *t = numla_safetensors_find(m, name);
        bad += !t || *(const float *)t->data != (float)i;
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weigh", i / 256,
                 i % 256);
        bad += numla_safetensors_find(m, name) != NULL;
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d lookups wrong", bad);
    numla_safetensors_close(&m);
}

/* ---------------------------------------------------------------------------------------- */

/* Two shards + index: opens, tensors from both, each names its own file. */
static void st_write_shard(const char *path, const char *name1, const char *name2, float base)
{
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    const int64_t shape[] = {4};
    float v[4] = {base, base + 1, base + 2, base + 3};
    if (name1)
        CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, name1, NUMLA_DTYPE_F32, 1, shape, v),
                        NUMLA_STATUS_OK);
    v[0] = -base;
    if (name2)
        CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, name2, NUMLA_DTYPE_F32, 1, shape, v),
                        NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
}

static void st_write_text(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st_write_bytes(path, text, strlen(text));
}

static const char *st_shard_path(const char *dir, const char *name)
{
    static char buf[4][700];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 700, "%s/%s", dir, name);
    return p;
}

static void test_sharded(void)
{
    const char *dir = st_dir("sharded");
    st_write_shard(st_shard_path(dir, "model-00001-of-00002.safetensors"), "t.a", "t.b", 1);
    st_write_shard(st_shard_path(dir, "model-00002-of-00002.safetensors"), "t.c", NULL, 10);
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {"
                  "\"t.a\": \"model-00001-of-00002.safetensors\","
                  "\"t.c\": \"model-00002-of-00002.safetensors\","
                  "\"t.b\": \"model-00001-of-00002.safetensors\"}}");
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(m), 3);
    const numla_safetensors_tensor *a = numla_safetensors_find(m, "t.a"), *b = numla_safetensors_find(m, "t.b"),
                          *c = numla_safetensors_find(m, "t.c");
    CU_ASSERT_FATAL(a && b && c);
    CU_ASSERT(((const float *)a->data)[0] == 1 && ((const float *)b->data)[0] == -1 &&
              ((const float *)c->data)[3] == 13);
    CU_ASSERT(strstr(a->file, "model-00001-of-00002") && strstr(b->file, "model-00001-of-00002"));
    CU_ASSERT(strstr(c->file, "model-00002-of-00002") != NULL);
    numla_safetensors_close(&m);

    /* Both layouts present: model.safetensors wins, as in transformers. */
    st_write_shard(st_shard_path(dir, "model.safetensors"), "single.only", NULL, 5);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT(numla_safetensors_count(m) == 1 && numla_safetensors_find(m, "single.only") != NULL);
    numla_safetensors_close(&m);
}

static void test_sharded_hostile(void)
{
    const char *dir;

    dir = st_dir("shard-missing");
    st_write_shard(st_shard_path(dir, "s1.safetensors"), "t.a", NULL, 1);
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.b\": \"s2.safetensors\"}}");
    st_expect_fail(dir, NUMLA_STATUS_IO, "missing shard", "s2.safetensors",
                   "model.safetensors.index.json", (char *)NULL);

    dir = st_dir("shard-absent");
    st_write_shard(st_shard_path(dir, "s1.safetensors"), "t.a", NULL, 1);
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.zz\": \"s1.safetensors\"}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "tensor absent from its shard", "t.zz",
                   "s1.safetensors", "index.json", (char *)NULL);

    dir = st_dir("shard-wrong");
    st_write_shard(st_shard_path(dir, "s1.safetensors"), "t.a", NULL, 1);
    st_write_shard(st_shard_path(dir, "s2.safetensors"), "t.b", NULL, 1);
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"t.a\": \"s2.safetensors\", \"t.b\": \"s1.safetensors\"}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "tensor in another shard", "t.", "index.json",
                   (char *)NULL);

    dir = st_dir("shard-dup");
    st_write_shard(st_shard_path(dir, "s1.safetensors"), "t.a", "t.dup", 1);
    st_write_shard(st_shard_path(dir, "s2.safetensors"), "t.dup", NULL, 1);
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.dup\": \"s2.safetensors\"}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "duplicate across shards", "t.dup",
                   "s1.safetensors", "s2.safetensors", (char *)NULL);

    dir = st_dir("shard-escape");
    st_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"t.a\": \"../st-roundtrip/model.safetensors\"}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "shard outside the directory", "t.a",
                   "index.json", (char *)NULL);

    dir = st_dir("shard-badjson");
    st_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"t.a\": ");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "index garbage", "index.json", (char *)NULL);

    dir = st_dir("shard-nomap");
    st_write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "index without weight_map", "weight_map",
                   (char *)NULL);

    dir = st_dir("shard-nonstring");
    st_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"t.q\": 3}}");
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "non-string shard", "t.q", (char *)NULL);

    dir = st_dir("empty-dir");
    st_expect_fail(dir, NUMLA_STATUS_IO, "no model", dir, (char *)NULL);
    st_expect_fail("/nonexistent/numla/model", NUMLA_STATUS_IO, "no dir", "/nonexistent",
                   (char *)NULL);
}

/* ---------------------------------------------------------------------------------------- */

typedef struct st_case {
    const char *name;
    const char *header;     /* JSON text (not padded) */
    size_t data_len;        /* bytes of data after the header */
    int64_t hlen_override;  /* -1: strlen(header) */
    int64_t truncate_to;    /* -1: whole file; else cut the file to this many bytes */
    numla_status want;
    const char *tensor;     /* must appear in the message (NULL: a file-level error) */
} st_case;

#define E_(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const st_case st_cases[] = {
    {"empty file", "", 0, 0, 0, NUMLA_STATUS_FORMAT, NULL},
    {"5 bytes", "", 0, 0, 5, NUMLA_STATUS_FORMAT, NULL},
    {"header length past end", "{}", 0, 1000, -1, NUMLA_STATUS_FORMAT, NULL},
    {"header length 2^63", "{}", 0, INT64_MAX, -1, NUMLA_STATUS_FORMAT, NULL},
    {"garbage json", "{\"w\": {\"dtype\": \"F32\", ", 64, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"binary garbage", "\x01\x02\xff\xfe garbage", 64, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"header is an array", "[1, 2, 3]", 0, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"header is a string", "\"w\"", 0, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"trailing junk", "{} {}", 0, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"duplicate key", "{\"w\":" E_("F32", "[1]", 0, 4) ",\"w\":" E_("F32", "[1]", 0, 4) "}", 4,
     -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"metadata not object", "{\"__metadata__\": 3}", 0, -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"entry not object", "{\"w.bad\": [1, 2]}", 0, -1, -1, NUMLA_STATUS_FORMAT, "w.bad"},
    {"missing dtype", "{\"w.nodt\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, -1, -1,
     NUMLA_STATUS_FORMAT, "w.nodt"},
    {"missing shape", "{\"w.nosh\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, -1, -1,
     NUMLA_STATUS_FORMAT, "w.nosh"},
    {"missing offsets", "{\"w.nooff\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, -1, -1,
     NUMLA_STATUS_FORMAT, "w.nooff"},
    {"dtype not string", "{\"w.dtnum\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}",
     4, -1, -1, NUMLA_STATUS_FORMAT, "w.dtnum"},
    {"dtype U64", "{\"w.u64\":" E_("U64", "[1]", 0, 8) "}", 8, -1, -1, NUMLA_STATUS_UNSUPPORTED,
     "w.u64"},
    {"dtype F8_E5M2", "{\"w.e5m2\":" E_("F8_E5M2", "[4]", 0, 4) "}", 4, -1, -1,
     NUMLA_STATUS_UNSUPPORTED, "w.e5m2"},
    {"F8_E4M3 size is 1 byte", "{\"w.fp8\":" E_("F8_E4M3", "[4]", 0, 8) "}", 8, -1, -1,
     NUMLA_STATUS_FORMAT, "w.fp8"},
    {"I8 size is 1 byte", "{\"w.i8\":" E_("I8", "[2, 3]", 0, 12) "}", 12, -1, -1,
     NUMLA_STATUS_FORMAT, "w.i8"},
    {"dtype unknown", "{\"w.q9\":" E_("Q9", "[4]", 0, 4) "}", 4, -1, -1, NUMLA_STATUS_FORMAT,
     "w.q9"},
    {"negative dim", "{\"w.neg\":" E_("F32", "[2, -1]", 0, 0) "}", 0, -1, -1, NUMLA_STATUS_FORMAT,
     "w.neg"},
    {"float dim", "{\"w.fdim\":" E_("F32", "[2.0]", 0, 8) "}", 8, -1, -1, NUMLA_STATUS_FORMAT,
     "w.fdim"},
    {"nine dims", "{\"w.nine\":" E_("F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, -1, -1,
     NUMLA_STATUS_FORMAT, "w.nine"},
    {"offsets past data", "{\"w.past\":" E_("F32", "[4]", 8, 24) "}", 16, -1, -1,
     NUMLA_STATUS_FORMAT, "w.past"},
    {"offsets huge", "{\"w.huge\":" E_("F32", "[1]", 9223372036854775803, 9223372036854775807) "}",
     16, -1, -1, NUMLA_STATUS_FORMAT, "w.huge"},
    {"offsets too big for int64", "{\"w.big\":" E_("F32", "[1]", 0, 99999999999999999999) "}", 4,
     -1, -1, NUMLA_STATUS_FORMAT, NULL},
    {"negative offset", "{\"w.nego\":" E_("F32", "[1]", -4, 0) "}", 4, -1, -1,
     NUMLA_STATUS_FORMAT, "w.nego"},
    {"offsets one value", "{\"w.one\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
     -1, -1, NUMLA_STATUS_FORMAT, "w.one"},
    {"begin > end", "{\"w.rev\":" E_("F32", "[1]", 8, 4) "}", 16, -1, -1, NUMLA_STATUS_FORMAT,
     "w.rev"},
    {"size mismatch", "{\"w.size\":" E_("BF16", "[3, 4]", 0, 48) "}", 48, -1, -1,
     NUMLA_STATUS_FORMAT, "w.size"},
    {"shape overflow", "{\"w.ovf\":" E_("F32", "[4294967296, 4294967296, 16]", 0, 0) "}", 0, -1, -1,
     NUMLA_STATUS_FORMAT, "w.ovf"},
    {"shape x dtype overflow", "{\"w.ovf2\":" E_("BF16", "[9223372036854775807]", 0, 2) "}", 2, -1,
     -1, NUMLA_STATUS_FORMAT, "w.ovf2"},
    {"shape overflow wraps to 0", "{\"w.wrap\":" E_("BF16", "[4294967296, 2147483648]", 0, 0) "}",
     0, -1, -1, NUMLA_STATUS_FORMAT, "w.wrap"},
    {"overlap", "{\"w.first\":" E_("F32", "[4]", 0, 16) ",\"w.second\":" E_("F32", "[2]", 12, 20)
     "}", 20, -1, -1, NUMLA_STATUS_FORMAT, "w.second"},
    {"overlap unsorted", "{\"w.x\":" E_("F32", "[2]", 16, 24) ",\"w.y\":" E_("F32", "[1]", 28, 32)
     ",\"w.z\":" E_("F32", "[6]", 8, 32) "}", 32, -1, -1, NUMLA_STATUS_FORMAT, "w.z"},
    {"identical offsets", "{\"w.p\":" E_("F32", "[2]", 0, 8) ",\"w.q\":" E_("F32", "[2]", 0, 8) "}",
     8, -1, -1, NUMLA_STATUS_FORMAT, "w."},
    {"truncated data", "{\"w.trunc\":" E_("F32", "[16]", 0, 64) "}", 64, -1, 120,
     NUMLA_STATUS_FORMAT, "w.trunc"},
};

static void test_hostile_files(void)
{
    char dirname[64];
    for (size_t i = 0; i < sizeof st_cases / sizeof st_cases[0]; i++) {
        const st_case *c = &st_cases[i];
        snprintf(dirname, sizeof dirname, "hostile-%zu", i);
        const char *dir = st_dir(dirname);
        const char *path = st_shard_path(dir, "model.safetensors");
        uint64_t hlen = c->hlen_override >= 0 ? (uint64_t)c->hlen_override : strlen(c->header);
        st_write_raw(path, hlen, c->header, c->data_len);
        if (c->truncate_to >= 0)
            CU_ASSERT_EQUAL(truncate(path, c->truncate_to), 0);
        st_expect_fail(dir, c->want, c->name, path, c->tensor, (char *)NULL);
    }

    /* Header length within the file but absurd: a sparse 120 MB file claiming a 110 MB header. */
    const char *dir = st_dir("hostile-absurd");
    const char *path = st_shard_path(dir, "model.safetensors");
    st_write_raw(path, 110u * 1000 * 1000, "{}", 0);
    CU_ASSERT_EQUAL(truncate(path, 120l * 1000 * 1000), 0);
    st_expect_fail(dir, NUMLA_STATUS_FORMAT, "absurd header length", path, "absurd", (char *)NULL);
    unlink(path);

    /* Not hostile, just unusual: __metadata__, zero-size tensors at any offset, holes. */
    dir = st_dir("unusual");
    path = st_shard_path(dir, "model.safetensors");
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},\"w.e\":" E_("F32", "[0, 7]", 4, 4)
                    ",\"w.a\":" E_("F32", "[1]", 0, 4) ",\"w.b\":" E_("BF16", "[2]", 8, 12) "}";
    st_write_raw(path, strlen(h), h, 12);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    if (m) {
        CU_ASSERT_EQUAL(numla_safetensors_count(m), 3);
        numla_safetensors_close(&m);
    }
}

/* ---------------------------------------------------------------------------------------- */

/* 4000 mutations of seed (n0 bytes) through the fuzz target: bit flips, JSON-ish header
 * bytes, truncation, the length field, spans duplicated or deleted. */
static void fuzz_mutations_of(const unsigned char *seed, size_t n0, uint64_t rng_seed,
                              const char *what)
{
    static const char alphabet[] = "{}[],:\"0123456789-.eE FBI8_ \\u";
    unsigned char *buf = malloc(2 * n0 + 64);
    numla_test_rng rng = {rng_seed};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    for (int it = 0; it < 4000; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        int muts = 1 + (int)(numla_test_rng_u64(&rng) % 4);
        for (int k = 0; k < muts; k++) {
            uint64_t r = numla_test_rng_u64(&rng);
            size_t pos = n ? (size_t)((r >> 8) % n) : 0;
            switch (r % 7) {
            case 0: /* flip a bit anywhere */
                if (n)
                    buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7));
                break;
            case 1: /* JSON-ish byte in the header */
            case 2:
                if (n > 8)
                    buf[8 + (size_t)((r >> 8) % (n - 8))] =
                        (unsigned char)alphabet[(r >> 48) % (sizeof alphabet - 1)];
                break;
            case 3: /* truncate */
                n = pos;
                break;
            case 4: /* edit the length field */
                if (n >= 8) {
                    uint64_t h = 0;
                    for (int i = 0; i < 8; i++)
                        h |= (uint64_t)buf[i] << (8 * i);
                    h += (uint64_t)((int64_t)((r >> 32) % 33) - 16);
                    if ((r >> 20) % 8 == 0)
                        h = r;
                    for (int i = 0; i < 8; i++)
                        buf[i] = (unsigned char)(h >> (8 * i));
                }
                break;
            case 5: { /* duplicate a short span (shifts everything after it) */
                size_t len = 1 + (size_t)((r >> 40) % 16);
                if (pos + len <= n && n + len <= 2 * n0 + 64) {
                    memmove(buf + pos + len, buf + pos, n - pos);
                    n += len;
                }
                break;
            }
            default: { /* delete a short span */
                size_t len = 1 + (size_t)((r >> 40) % 16);
                if (pos + len <= n) {
                    memmove(buf + pos, buf + pos + len, n - pos - len);
                    n -= len;
                }
                break;
            }
            }
        }
        numla_status s = numla_fuzz_safetensors_run(buf, n);
        counts[s]++;
    }
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    mutations: ok %d, format %d, unsupported %d\n", counts[NUMLA_STATUS_OK],
                counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    /* The mutations must reach both outcomes, or this test exercises nothing. */
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 20 && counts[NUMLA_STATUS_FORMAT] > 1000,
                     "%s: ok %d, format %d, unsupported %d", what, counts[NUMLA_STATUS_OK],
                     counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    free(buf);
}

/* The fuzz target's checks over seeded mutations of two valid files (the writer's, and the V4
 * corpus seed): byte flips, JSON-ish byte substitutions, truncation, length-field edits,
 * splices. Deterministic; a crash or a wrong status aborts inside the target (and ASan builds
 * check every access). */
static void test_fuzz_mutations(void)
{
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    const int64_t s1[] = {3, 4}, s2[] = {5}, s3[] = {2, 2, 2};
    uint16_t b[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float f[8] = {0};
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "model.a", NUMLA_DTYPE_BF16, 2, s1, b), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "model.b", NUMLA_DTYPE_F32, 1, s2, f), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "model.c", NUMLA_DTYPE_F16, 3, s3, b), 0);
    const char *path = st_shard_path(st_dir("fuzzseed"), "model.safetensors");
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    size_t n0 = 0;
    unsigned char *seed = (unsigned char *)numla_test_read_file(path, &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL(numla_fuzz_safetensors_run(seed, n0), NUMLA_STATUS_OK);

    fuzz_mutations_of(seed, n0, 20261202, "bf16/f32/f16 seed");
    free(seed);
    /* DeepSeek-V4's published dtypes (F8_E4M3, F8_E8M0, I8 FP4 pairs, I64 tid2eid): the corpus
     * seed the fuzz target starts from too */
    seed = (unsigned char *)numla_test_read_file(
        numla_test_source_path("tests/fuzz/corpus/safetensors/v4_fp8_fp4.safetensors"), &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL(numla_fuzz_safetensors_run(seed, n0), NUMLA_STATUS_OK);
    fuzz_mutations_of(seed, n0, 20261206, "v4 seed");
    free(seed);
}

/* The same for index.json next to two valid shards (s1: a, b; s2: c). */
static void test_fuzz_index_mutations(void)
{
    static const char seed[] = "{\"metadata\": {\"total_size\": 36}, \"weight_map\": "
                               "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                               "\"c\": \"s2.safetensors\"}}";
    const size_t n0 = sizeof seed - 1;
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_safetensors_index_run((const uint8_t *)seed, n0),
                          NUMLA_STATUS_OK);
    static const char alphabet[] = "{}[],:\"0123456789./s abc\\";
    unsigned char buf[512];
    numla_test_rng rng = {7};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    for (int it = 0; it < 1500; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        int muts = 1 + (int)(numla_test_rng_u64(&rng) % 3);
        for (int k = 0; k < muts && n; k++) {
            uint64_t r = numla_test_rng_u64(&rng);
            size_t pos = (size_t)((r >> 8) % n);
            switch (r % 4) {
            case 0: buf[pos] = (unsigned char)alphabet[(r >> 48) % (sizeof alphabet - 1)]; break;
            case 1: buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7)); break;
            case 2: n = pos; break;
            default: {
                size_t len = 1 + (size_t)((r >> 40) % 8);
                if (pos + len <= n) {
                    memmove(buf + pos, buf + pos + len, n - pos - len);
                    n -= len;
                }
            }
            }
        }
        counts[numla_fuzz_safetensors_index_run(buf, n)]++;
    }
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 10 && counts[NUMLA_STATUS_FORMAT] > 500 &&
                         counts[NUMLA_STATUS_IO] > 5,
                     "ok %d, format %d, io %d", counts[NUMLA_STATUS_OK],
                     counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_IO]);
}

/* The 1-byte weight types: the writer names them F8_E4M3 / I8 with 1-byte elements, and the
 * reader returns the same codes, dtype and shape (also when written through fill chunks). */
static numla_status st_fill_codes(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    memcpy(dst, (const unsigned char *)ctx + offset, nbytes);
    return NUMLA_STATUS_OK;
}

static void test_one_byte_dtypes(void)
{
    unsigned char f8[5 * 3], i8[3 * 7], big[1000];
    for (int i = 0; i < 15; i++)
        f8[i] = (unsigned char)(i * 37 + 1);
    for (int i = 0; i < 21; i++)
        i8[i] = (unsigned char)(int8_t)(i * 13 - 128);
    for (int i = 0; i < 1000; i++)
        big[i] = (unsigned char)(i * 131 + 7);
    const int64_t s8[] = {5, 3}, si[] = {3, 7}, sb[] = {1000}, s1[] = {3};
    const float f32[3] = {1.5f, -2.0f, 0.25f};
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "q.weight", NUMLA_DTYPE_F8_E4M3, 2, s8, f8), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "i.weight", NUMLA_DTYPE_I8, 2, si, i8), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add_fill(w, "big", NUMLA_DTYPE_I8, 1, sb,
                                                      st_fill_codes, big), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "s", NUMLA_DTYPE_F32, 1, s1, f32), 0);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "bad", NUMLA_DTYPE_COUNT, 1, s1, f32),
                    NUMLA_STATUS_INVALID_ARG);
    const char *dir = st_dir("onebyte");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    setenv("NUMLA_SAFETENSORS_CHUNK_BYTES", "12", 1); /* chunks that split the filled tensor */
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    unsetenv("NUMLA_SAFETENSORS_CHUNK_BYTES");
    numla_safetensors_writer_destroy(&w);

    size_t n = 0;
    unsigned char *raw = (unsigned char *)numla_test_read_file(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    CU_ASSERT(memmem(raw, n, "\"dtype\":\"F8_E4M3\"", strlen("\"dtype\":\"F8_E4M3\"")) != NULL);
    CU_ASSERT(memmem(raw, n, "\"dtype\":\"I8\"", strlen("\"dtype\":\"I8\"")) != NULL);
    free(raw);

    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *t = NULL;
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "q.weight", 2, s8, &t), NUMLA_STATUS_OK);
    if (t) {
        CU_ASSERT_EQUAL(t->dtype, NUMLA_DTYPE_F8_E4M3);
        CU_ASSERT_EQUAL(t->nbytes, sizeof f8);
        CU_ASSERT(memcmp(t->data, f8, sizeof f8) == 0);
    }
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "i.weight", 2, si, &t), NUMLA_STATUS_OK);
    if (t) {
        CU_ASSERT_EQUAL(t->dtype, NUMLA_DTYPE_I8);
        CU_ASSERT_EQUAL(t->nbytes, sizeof i8);
        CU_ASSERT(memcmp(t->data, i8, sizeof i8) == 0);
        CU_ASSERT_EQUAL(numla_load_f32(t->data, t->dtype, 0), -128.0f);
    }
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "big", 1, sb, &t), NUMLA_STATUS_OK);
    if (t) {
        CU_ASSERT_EQUAL(t->dtype, NUMLA_DTYPE_I8);
        CU_ASSERT(t->nbytes == sizeof big && memcmp(t->data, big, sizeof big) == 0);
    }
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "s", 1, s1, &t), NUMLA_STATUS_OK);
    if (t)
        CU_ASSERT(t->dtype == NUMLA_DTYPE_F32 && memcmp(t->data, f32, sizeof f32) == 0);
    numla_safetensors_close(&m);
}

/* F8_E8M0 as the Python safetensors package writes it (DeepSeek-V4's scales, torch's
 * float8_e8m0fnu): tests/golden/v4/model_fp8's expert and projection scales read with their
 * dtype, shape and power-of-two values; the writer names the dtype back. */
static void test_e8m0_scales(void)
{
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(numla_test_source_path("tests/golden/v4/model_fp8"), &m),
                          NUMLA_STATUS_OK);
    const int64_t se[] = {32, 2}, sq[] = {1, 1}, sw[] = {32, 32};
    const numla_safetensors_tensor *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_expect(m, "layers.2.ffn.experts.3.w1.scale", 2, se, &t),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t->dtype, NUMLA_DTYPE_F8_E8M0);
    CU_ASSERT_EQUAL(t->nbytes, 64u);
    for (int i = 0; i < 64; i++) {
        const uint8_t e = ((const uint8_t *)t->data)[i];
        CU_ASSERT(e > 100 && e < 140 && numla_load_f32(t->data, t->dtype, (size_t)i) == ldexpf(1.0f, e - 127));
    }
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "layers.0.attn.wq_a.scale", 2, sq, &t), NUMLA_STATUS_OK);
    CU_ASSERT(t && t->dtype == NUMLA_DTYPE_F8_E8M0);
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "layers.2.ffn.experts.3.w1.weight", 2, sw, &t), NUMLA_STATUS_OK);
    CU_ASSERT(t && t->dtype == NUMLA_DTYPE_I8); /* 64 e2m1 codes a row, two a byte */
    CU_ASSERT_EQUAL(numla_safetensors_expect(m, "layers.0.attn.wq_a.weight", 2, (const int64_t[]){32, 64}, &t),
                    NUMLA_STATUS_OK);
    CU_ASSERT(t && t->dtype == NUMLA_DTYPE_F8_E4M3);
    numla_safetensors_close(&m);

    numla_safetensors_writer *w = NULL;
    const uint8_t sc[3] = {0, 127, 254};
    const int64_t s3[] = {3};
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "x.scale", NUMLA_DTYPE_F8_E8M0, 1, s3, sc), 0);
    const char *dir = st_dir("e8m0");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    size_t n = 0;
    char *raw = numla_test_read_file(path, &n);
    CU_ASSERT(raw && memmem(raw, n, "\"dtype\":\"F8_E8M0\"", strlen("\"dtype\":\"F8_E8M0\"")) != NULL);
    free(raw);
}

NUMLA_TEST_SUITE(safetensors, NULL, NULL, NUMLA_TEST(test_roundtrip), NUMLA_TEST(test_one_byte_dtypes),
                 NUMLA_TEST(test_e8m0_scales),
                 NUMLA_TEST(test_writer_fill_and_errors), NUMLA_TEST(test_many_tensors),
                 NUMLA_TEST(test_sharded), NUMLA_TEST(test_sharded_hostile),
                 NUMLA_TEST(test_hostile_files), NUMLA_TEST(test_fuzz_mutations),
                 NUMLA_TEST(test_fuzz_index_mutations))
