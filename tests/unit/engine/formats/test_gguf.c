/* Tests for engine/formats/gguf: files written by the gguf PyPI package (tests/golden/gguf/,
 * scripts/make_gguf_golden.py) read back value by value, split sets (whole, a missing part, a
 * part out of place), a table of hostile files built byte by byte (each must fail with the
 * right status and a message naming the file and the key or tensor), the typed getters'
 * errors, and the fuzz target's checks over seeded mutations. */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/gguf.h"
#include "engine/formats/weight_encoding.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

numla_status numla_fuzz_gguf_run(const uint8_t *data, size_t size);

static const char *gg_golden(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s", numla_test_source_path("tests/golden/gguf"));
    size_t n = strlen(p);
    snprintf(p + n, 512 - n, "/%s", name);
    return p;
}

static const char *gg_tmp(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/gguf-%s", numla_test_tmpdir(), name);
    return p;
}

static void gg_write(const char *path, const void *data, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* ---------------------------------------------------------------------------------------- */

static void test_meta_values(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(gg_golden("meta.gguf"), &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_gguf_version(g), 3);
    CU_ASSERT_EQUAL(numla_gguf_alignment(g), 64);
    CU_ASSERT_EQUAL(numla_gguf_part_count(g), 1);
    CU_ASSERT_EQUAL(numla_gguf_kv_count(g), 21);
    const char *s = NULL;
    CU_ASSERT_EQUAL(numla_gguf_get_str(g, "general.architecture", &s), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(s, "numla-test");
    CU_ASSERT_EQUAL(numla_gguf_get_str(g, "t.str", &s), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(s, "h\xc3\xa9llo w\xc3\xb6rld");
    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    double f64 = 0;
    float f32 = 0;
    int b = 0;
    CU_ASSERT_EQUAL(numla_gguf_get_u32(g, "t.u8", &u32), 0);
    CU_ASSERT_EQUAL(u32, 200);
    CU_ASSERT_EQUAL(numla_gguf_get_i64(g, "t.i8", &i64), 0);
    CU_ASSERT_EQUAL(i64, -100);
    CU_ASSERT_EQUAL(numla_gguf_get_u32(g, "t.u16", &u32), 0);
    CU_ASSERT_EQUAL(u32, 60000);
    CU_ASSERT_EQUAL(numla_gguf_get_i64(g, "t.i16", &i64), 0);
    CU_ASSERT_EQUAL(i64, -30000);
    CU_ASSERT_EQUAL(numla_gguf_get_u32(g, "t.u32", &u32), 0);
    CU_ASSERT_EQUAL(u32, 4000000000u);
    CU_ASSERT_EQUAL(numla_gguf_get_i64(g, "t.i32", &i64), 0);
    CU_ASSERT_EQUAL(i64, -2000000000);
    CU_ASSERT_EQUAL(numla_gguf_get_f32(g, "t.f32", &f32), 0);
    CU_ASSERT_EQUAL(f32, 1.5f);
    CU_ASSERT_EQUAL(numla_gguf_get_bool(g, "t.bool", &b), 0);
    CU_ASSERT_EQUAL(b, 1);
    CU_ASSERT_EQUAL(numla_gguf_get_u64(g, "t.u64", &u64), 0);
    CU_ASSERT_EQUAL(u64, 18000000000000000000ull);
    CU_ASSERT_EQUAL(numla_gguf_get_i64(g, "t.i64", &i64), 0);
    CU_ASSERT_EQUAL(i64, -9000000000000000000ll);
    CU_ASSERT_EQUAL(numla_gguf_get_f64(g, "t.f64", &f64), 0);
    CU_ASSERT_EQUAL(f64, -2.25);
    CU_ASSERT_EQUAL(numla_gguf_get_f64(g, "t.i32", &f64), 0); /* integers read as numbers */
    CU_ASSERT_EQUAL(f64, -2000000000.0);

    const numla_gguf_value *a = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_i32", NUMLA_GGUF_INT32, &a), 0);
    CU_ASSERT_EQUAL_FATAL(a->v.arr.count, 3);
    const int32_t *ai = a->v.arr.items;
    CU_ASSERT(ai[0] == 1 && ai[1] == -2 && ai[2] == 3);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_u8", NUMLA_GGUF_UINT8, &a), 0);
    CU_ASSERT(a->v.arr.count == 3 && ((const uint8_t *)a->v.arr.items)[2] == 255);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_f32", NUMLA_GGUF_FLOAT32, &a), 0);
    CU_ASSERT(a->v.arr.count == 2 && ((const float *)a->v.arr.items)[1] == -1.0f);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_bool", NUMLA_GGUF_BOOL, &a), 0);
    const uint8_t *ab = a->v.arr.items;
    CU_ASSERT(a->v.arr.count == 3 && ab[0] == 1 && ab[1] == 0 && ab[2] == 1);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_str", NUMLA_GGUF_STRING, &a), 0);
    const numla_gguf_str *as = a->v.arr.items;
    CU_ASSERT_EQUAL_FATAL(a->v.arr.count, 3);
    CU_ASSERT(!strcmp(as[0].s, "a") && as[1].len == 0 && !strcmp(as[2].s, "ccc") && as[2].len == 3);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_nested", NUMLA_GGUF_ARRAY, &a), 0);
    CU_ASSERT_EQUAL_FATAL(a->v.arr.count, 2);
    const numla_gguf_value *an = a->v.arr.items;
    CU_ASSERT(an[0].type == NUMLA_GGUF_ARRAY && an[0].v.arr.count == 2 && an[1].v.arr.count == 1);
    CU_ASSERT_EQUAL(((const int32_t *)an[1].v.arr.items)[0], 3);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_get_array(g, "t.arr_nested_str", NUMLA_GGUF_ARRAY, &a), 0);
    an = a->v.arr.items;
    CU_ASSERT_EQUAL_FATAL(an[0].v.arr.type, NUMLA_GGUF_STRING);
    CU_ASSERT_STRING_EQUAL(((const numla_gguf_str *)an[0].v.arr.items)[1].s, "yy");
    CU_ASSERT_STRING_EQUAL(((const numla_gguf_str *)an[1].v.arr.items)[0].s, "zzz");

    /* tensors: ne in ggml order, data where the writer put it */
    CU_ASSERT_EQUAL(numla_gguf_tensor_count(g), 5);
    const numla_gguf_tensor *t = numla_gguf_tensor_find(g, "f32.2d");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->type == NUMLA_GGML_F32 && t->ndim == 2 && t->ne[0] == 5 && t->ne[1] == 3 && t->nbytes == 60);
    CU_ASSERT_EQUAL((uintptr_t)t->data % 64, 0);
    for (int i = 0; i < 15; i++)
        CU_ASSERT_EQUAL(((const float *)t->data)[i], (float)i);
    const int64_t ne3[] = {4, 3, 2};
    CU_ASSERT_EQUAL(numla_gguf_tensor_expect(g, "f32.3d", 3, ne3, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(((const float *)t->data)[23], 23.0f);
    t = numla_gguf_tensor_find(g, "q8_0.2d");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->type == NUMLA_GGML_Q8_0 && t->ne[0] == 32 && t->ne[1] == 2 && t->nbytes == 68);
    t = numla_gguf_tensor_find(g, "i32.1d");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->type == NUMLA_GGML_I32 && ((const int32_t *)t->data)[1] == -8);
    CU_ASSERT_PTR_NULL(numla_gguf_tensor_find(g, "nope"));
    CU_ASSERT_PTR_NULL(numla_gguf_find(g, "nope"));
    numla_gguf_close(&g);
    CU_ASSERT_PTR_NULL(g);
}

/* Each getter's errors name the file and the key. */
static void test_getter_errors(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(gg_golden("meta.gguf"), &g), NUMLA_STATUS_OK);
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    int b;
    const char *s;
    const numla_gguf_value *a;
    struct {
        numla_status got;
        const char *key, *words;
    } cases[] = {
        {numla_gguf_get_u32(g, "deepseek2.block_count", &u32), "deepseek2.block_count", "is missing"},
        {numla_gguf_get_u32(g, "t.str", &u32), "t.str", "is a string, expected an integer"},
        {numla_gguf_get_u32(g, "t.i8", &u32), "t.i8", "is negative"},
        {numla_gguf_get_u32(g, "t.u64", &u32), "t.u64", "does not fit a uint32"},
        {numla_gguf_get_u64(g, "t.i64", &u64), "t.i64", "is negative"},
        {numla_gguf_get_i64(g, "t.u64", &i64), "t.u64", "does not fit an int64"},
        {numla_gguf_get_bool(g, "t.u8", &b), "t.u8", "is a uint8, expected a bool"},
        {numla_gguf_get_str(g, "t.arr_str", &s), "t.arr_str", "is a array, expected a string"},
        {numla_gguf_get_array(g, "t.arr_str", NUMLA_GGUF_INT32, &a), "t.arr_str", "array of string, expected int32"},
        {numla_gguf_get_array(g, "t.f32", NUMLA_GGUF_INT32, &a), "t.f32", "expected an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL(cases[i].got, NUMLA_STATUS_FORMAT);
        (void)cases[i].key;
    }
    /* The messages: re-run each to read its own message. */
    CU_ASSERT_EQUAL(numla_gguf_get_u32(g, "deepseek2.block_count", &u32), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "meta.gguf"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "'deepseek2.block_count' is missing"));
    CU_ASSERT_EQUAL(numla_gguf_get_u32(g, "t.u64", &u32), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "'t.u64' = 18000000000000000000 does not fit a uint32"));
    CU_ASSERT_EQUAL(numla_gguf_get_array(g, "t.arr_str", NUMLA_GGUF_INT32, &a), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "'t.arr_str' is an array of string, expected int32"));
    const int64_t ne[] = {5, 4};
    CU_ASSERT_EQUAL(numla_gguf_tensor_expect(g, "f32.2d", 2, ne, NULL), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "'f32.2d' has ne = [5, 3, 1, 1], expected [5, 4, 1, 1]"));
    CU_ASSERT_EQUAL(numla_gguf_tensor_expect(g, "blk.0.x", 2, ne, NULL), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "tensor 'blk.0.x' is missing"));
    numla_gguf_close(&g);
}

/* ---------------------------------------------------------------------------------------- */
/* split sets                                                                                */

static void gg_copy(const char *from, const char *to)
{
    size_t n = 0;
    unsigned char *b = (unsigned char *)numla_test_read_file(from, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    gg_write(to, b, n);
    free(b);
}

static void test_split(void)
{
    /* Opening any part opens the whole set. */
    for (int part = 1; part <= 3; part++) {
        char name[64];
        snprintf(name, sizeof name, "split-%05d-of-00003.gguf", part);
        numla_gguf *g = NULL;
        const numla_status st = numla_gguf_open(gg_golden(name), &g); /* the macro evaluates twice */
        NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s", numla_error_message());
        if (!g)
            continue;
        CU_ASSERT_EQUAL(numla_gguf_part_count(g), 3);
        CU_ASSERT_EQUAL(numla_gguf_tensor_count(g), 5);
        CU_ASSERT_PTR_NOT_NULL(strstr(numla_gguf_path(g), "split-00001-of-00003.gguf"));
        const char *s = NULL;
        CU_ASSERT_EQUAL(numla_gguf_get_str(g, "t.where", &s), NUMLA_STATUS_OK);
        CU_ASSERT_STRING_EQUAL(s ? s : "", "first part");
        for (int i = 0; i < 5; i++) {
            char tn[8];
            snprintf(tn, sizeof tn, "t%d", i);
            const numla_gguf_tensor *t = numla_gguf_tensor_find(g, tn);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            CU_ASSERT_EQUAL(((const float *)t->data)[5], (float)i);
            /* 2 tensors a part, in order */
            CU_ASSERT_PTR_NOT_NULL(strstr(t->file, i < 2 ? "-00001-" : i < 4 ? "-00002-" : "-00003-"));
        }
        numla_gguf_close(&g);
    }

    /* A missing part: IO naming the missing file. */
    const char *dir = gg_tmp("split-missing");
    mkdir(dir, 0700);
    char p1[600], p2[600], p3[600];
    snprintf(p1, sizeof p1, "%s/m-00001-of-00003.gguf", dir);
    snprintf(p2, sizeof p2, "%s/m-00002-of-00003.gguf", dir);
    snprintf(p3, sizeof p3, "%s/m-00003-of-00003.gguf", dir);
    gg_copy(gg_golden("split-00001-of-00003.gguf"), p1);
    gg_copy(gg_golden("split-00003-of-00003.gguf"), p3);
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL(numla_gguf_open(p1, &g), NUMLA_STATUS_IO);
    CU_ASSERT_PTR_NULL(g);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "split part 2 of 3 is missing") &&
                         strstr(numla_error_message(), "m-00002-of-00003.gguf"),
                     "%s", numla_error_message());
    /* A part in the wrong place (part 3's file under part 2's name): FORMAT naming it. */
    gg_copy(gg_golden("split-00003-of-00003.gguf"), p2);
    CU_ASSERT_EQUAL(numla_gguf_open(p3, &g), NUMLA_STATUS_FORMAT);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "m-00002-of-00003.gguf: split.no = 2, split.count = 3, "
                                                   "expected 1 and 3") != NULL,
                     "%s", numla_error_message());
    /* A renamed set: the count in the name disagrees with split.count. */
    char p4[600];
    snprintf(p4, sizeof p4, "%s/m-00001-of-00004.gguf", dir);
    gg_copy(gg_golden("split-00001-of-00003.gguf"), p4);
    CU_ASSERT_EQUAL(numla_gguf_open(p4, &g), NUMLA_STATUS_FORMAT);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "disagree with its name") != NULL, "%s", numla_error_message());
    /* A part renamed away from the pattern cannot find its siblings. */
    char p5[600];
    snprintf(p5, sizeof p5, "%s/renamed.gguf", dir);
    gg_copy(gg_golden("split-00001-of-00003.gguf"), p5);
    CU_ASSERT_EQUAL(numla_gguf_open(p5, &g), NUMLA_STATUS_FORMAT);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "renamed.gguf is part of a 3-part split set") != NULL, "%s",
                     numla_error_message());
}

/* ---------------------------------------------------------------------------------------- */
/* hostile files, built byte by byte                                                         */

typedef struct gg_buf {
    unsigned char b[4096];
    size_t n;
} gg_buf;

static void gb_bytes(gg_buf *g, const void *p, size_t n)
{
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void gb_u32(gg_buf *g, uint32_t v) { gb_bytes(g, &v, 4); }
static void gb_u64(gg_buf *g, uint64_t v) { gb_bytes(g, &v, 8); }
static void gb_str(gg_buf *g, const char *s)
{
    gb_u64(g, strlen(s));
    gb_bytes(g, s, strlen(s));
}
static void gb_pad(gg_buf *g, size_t align)
{
    while (g->n % align)
        g->b[g->n++] = 0;
}

/* What a hostile case changes in an otherwise valid file with one key ("a.k" = u32 7) and two
 * F32 tensors "w" (ne {4, 2}) and "v" (ne {8}) back to back. */
typedef struct gg_case {
    const char *name;
    uint32_t version;
    const char *magic;
    uint32_t w_type;
    uint32_t w_ndim;
    uint64_t w_ne0, w_ne1;
    uint64_t w_off, v_off;
    size_t cut;           /* file length cut to this (0: whole) */
    const char *v_name;
    int extra_kv;         /* 1: alignment 3; 2: duplicate key; 3: nested arrays too deep;
                             4: array count past the end; 5: unknown value type; 6: NUL in key */
    numla_status want;
    const char *words;    /* expected in the message, besides the file name */
} gg_case;

static size_t gg_build(const gg_case *c, gg_buf *g)
{
    g->n = 0;
    gb_bytes(g, c->magic ? c->magic : "GGUF", 4);
    gb_u32(g, c->version ? c->version : 3);
    gb_u64(g, 2);
    gb_u64(g, c->extra_kv ? 2 : 1);
    gb_str(g, "a.k");
    gb_u32(g, NUMLA_GGUF_UINT32);
    gb_u32(g, 7);
    switch (c->extra_kv) {
    case 1:
        gb_str(g, "general.alignment");
        gb_u32(g, NUMLA_GGUF_UINT32);
        gb_u32(g, 3);
        break;
    case 2:
        gb_str(g, "a.k");
        gb_u32(g, NUMLA_GGUF_UINT8);
        g->b[g->n++] = 1;
        break;
    case 3:
        gb_str(g, "deep");
        gb_u32(g, NUMLA_GGUF_ARRAY);
        for (int d = 0; d < 12; d++) {
            gb_u32(g, NUMLA_GGUF_ARRAY);
            gb_u64(g, 1);
        }
        break;
    case 4:
        gb_str(g, "many");
        gb_u32(g, NUMLA_GGUF_ARRAY);
        gb_u32(g, NUMLA_GGUF_STRING);
        gb_u64(g, (uint64_t)1 << 60);
        break;
    case 5:
        gb_str(g, "odd");
        gb_u32(g, 13);
        break;
    case 6:
        gb_u64(g, 3);
        gb_bytes(g, "a\0b", 3);
        gb_u32(g, NUMLA_GGUF_UINT8);
        g->b[g->n++] = 1;
        break;
    default:
        break;
    }
    gb_str(g, "w");
    gb_u32(g, c->w_ndim ? c->w_ndim : 2);
    gb_u64(g, c->w_ne0 ? c->w_ne0 : 4);
    gb_u64(g, c->w_ne1 ? c->w_ne1 : 2);
    for (uint32_t d = 2; d < (c->w_ndim ? c->w_ndim : 2) && d < 6; d++)
        gb_u64(g, 1);
    gb_u32(g, c->w_type);
    gb_u64(g, c->w_off);
    gb_str(g, c->v_name ? c->v_name : "v");
    gb_u32(g, 1);
    gb_u64(g, 8);
    gb_u32(g, NUMLA_GGML_F32);
    gb_u64(g, c->v_off ? c->v_off : 32);
    gb_pad(g, 32);
    for (int i = 0; i < 16; i++) {
        float f = (float)i;
        gb_bytes(g, &f, 4);
    }
    return c->cut ? c->cut : g->n;
}

static void test_hostile_files(void)
{
    static const gg_case cases[] = {
        {.name = "valid", .want = NUMLA_STATUS_OK},
        {.name = "v2", .version = 2, .want = NUMLA_STATUS_OK},
        {.name = "magic", .magic = "GGML", .want = NUMLA_STATUS_FORMAT, .words = "is not a GGUF file"},
        {.name = "v1", .version = 1, .want = NUMLA_STATUS_UNSUPPORTED, .words = "version 1"},
        {.name = "v4", .version = 4, .want = NUMLA_STATUS_UNSUPPORTED, .words = "version 4 is not supported"},
        {.name = "bigendian", .version = 0x03000000, .want = NUMLA_STATUS_UNSUPPORTED, .words = "big-endian"},
        {.name = "cut", .cut = 20, .want = NUMLA_STATUS_FORMAT, .words = "is truncated"},
        {.name = "cutdata", .cut = 150, .want = NUMLA_STATUS_FORMAT, .words = "tensor 'w' [0, 32) lies past the end"},
        {.name = "pastend", .v_off = 64, .want = NUMLA_STATUS_FORMAT, .words = "tensor 'v' [64, 96) lies past the end"},
        {.name = "type", .w_type = 4, .want = NUMLA_STATUS_UNSUPPORTED, .words = "tensor 'w' has unknown ggml type 4"},
        {.name = "type99", .w_type = 99, .want = NUMLA_STATUS_UNSUPPORTED, .words = "unknown ggml type 99"},
        {.name = "overflow", .w_ne0 = (uint64_t)1 << 40, .w_ne1 = (uint64_t)1 << 40, .want = NUMLA_STATUS_FORMAT,
         .words = "tensor 'w': dimensions 1099511627776 x 1099511627776 x 1 x 1 overflow"},
        {.name = "bytesoverflow", .w_type = NUMLA_GGML_F64, .w_ne0 = (uint64_t)1 << 61, .w_ne1 = 1,
         .want = NUMLA_STATUS_FORMAT, .words = "tensor 'w': byte count overflows"},
        {.name = "negative", .w_ne1 = (uint64_t)-2, .want = NUMLA_STATUS_FORMAT, .words = "dimension 1 is negative"},
        {.name = "ndim", .w_ndim = 5, .want = NUMLA_STATUS_FORMAT, .words = "tensor 'w' has 5 dimensions"},
        {.name = "block", .w_type = NUMLA_GGML_Q4_K, .w_ne0 = 128, .want = NUMLA_STATUS_FORMAT,
         .words = "ne[0] = 128 is not a multiple of Q4_K's block of 256"},
        {.name = "misaligned", .v_off = 36, .want = NUMLA_STATUS_FORMAT, .words = "'v': offset 36 is not a multiple"},
        {.name = "dupname", .v_name = "w", .want = NUMLA_STATUS_FORMAT, .words = "tensor 'w' appears twice"},
        {.name = "alignment", .extra_kv = 1, .want = NUMLA_STATUS_FORMAT, .words = "'general.alignment' must be"},
        {.name = "dupkey", .extra_kv = 2, .want = NUMLA_STATUS_FORMAT, .words = "key 'a.k' appears twice"},
        {.name = "deep", .extra_kv = 3, .want = NUMLA_STATUS_FORMAT, .words = "key 'deep': arrays nested deeper"},
        {.name = "many", .extra_kv = 4, .want = NUMLA_STATUS_FORMAT, .words = "key 'many': array of 1152921504606846976"},
        {.name = "vtype", .extra_kv = 5, .want = NUMLA_STATUS_FORMAT, .words = "key 'odd': value type 13 is unknown"},
        {.name = "nulkey", .extra_kv = 6, .want = NUMLA_STATUS_FORMAT, .words = "a key at byte"},
    };
    gg_buf g;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const gg_case *c = &cases[i];
        size_t n = gg_build(c, &g);
        char fname[64];
        snprintf(fname, sizeof fname, "hostile-%s.gguf", c->name);
        const char *path = gg_tmp(fname);
        gg_write(path, g.b, n);
        numla_gguf *m = NULL;
        numla_status s = numla_gguf_open(path, &m);
        NUMLA_ASSERT_MSG(s == c->want, "%s: status %d, want %d (%s)", c->name, (int)s, (int)c->want,
                         numla_error_message());
        if (s == NUMLA_STATUS_OK) {
            CU_ASSERT_PTR_NOT_NULL(m);
            const numla_gguf_tensor *v = numla_gguf_tensor_find(m, "v");
            CU_ASSERT_PTR_NOT_NULL(v);
            if (v && !strcmp(c->name, "valid"))
                CU_ASSERT_EQUAL(((const float *)v->data)[7], 15.0f);
            numla_gguf_close(&m);
            continue;
        }
        CU_ASSERT_PTR_NULL(m);
        NUMLA_ASSERT_MSG(strstr(numla_error_message(), path) != NULL, "%s: message names no file: %s", c->name,
                         numla_error_message());
        if (c->words)
            NUMLA_ASSERT_MSG(strstr(numla_error_message(), c->words) != NULL, "%s: '%s' not in: %s", c->name,
                             c->words, numla_error_message());
    }

    /* Overlapping tensors: w and v both at offset 32. */
    gg_case ov2 = {.name = "ov2", .w_off = 32, .v_off = 32};
    size_t n = gg_build(&ov2, &g);
    const char *path = gg_tmp("hostile-overlap2.gguf");
    gg_write(path, g.b, n);
    numla_gguf *m = NULL;
    CU_ASSERT_EQUAL(numla_gguf_open(path, &m), NUMLA_STATUS_FORMAT);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "overlap at offset 32") != NULL, "%s", numla_error_message());

    /* Every prefix of a real file is rejected as truncated (or fails a later check), never
     * read past its end. */
    size_t len = 0;
    unsigned char *meta = (unsigned char *)numla_test_read_file(gg_golden("meta.gguf"), &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(meta);
    const char *cut = gg_tmp("cut.gguf");
    int bad = 0;
    for (size_t k = 0; k < len; k += (k < 1000 ? 1 : 7)) {
        gg_write(cut, meta, k);
        numla_status s = numla_gguf_open(cut, &m);
        /* the writer pads the last tensor to the alignment (64): cutting only padding is fine */
        int ok = s == NUMLA_STATUS_OK ? k + 64 > len : s == NUMLA_STATUS_FORMAT && strstr(numla_error_message(), cut);
        if (!ok) {
            fprintf(stderr, "\n    prefix %zu: status %d (%s)\n", k, (int)s, numla_error_message());
            bad++;
        }
        if (m)
            numla_gguf_close(&m);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(meta);
    /* Not a file. */
    CU_ASSERT_EQUAL(numla_gguf_open(numla_test_tmpdir(), &m), NUMLA_STATUS_IO);
    CU_ASSERT_EQUAL(numla_gguf_open(gg_tmp("does-not-exist.gguf"), &m), NUMLA_STATUS_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "does-not-exist.gguf"));
}

/* ---------------------------------------------------------------------------------------- */

/* The fuzz target's checks over seeded mutations of meta.gguf: bit flips, byte overwrites with
 * values that matter in this format (small counts, type codes, 0xff), truncation, span
 * duplication and deletion. Deterministic; a crash or a wrong status aborts inside the target. */
static void test_fuzz_mutations(void)
{
    size_t n0 = 0;
    unsigned char *seed = (unsigned char *)numla_test_read_file(gg_golden("meta.gguf"), &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_gguf_run(seed, n0), NUMLA_STATUS_OK);
    static const unsigned char values[] = {0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 16, 31, 32, 64, 0x7f, 0x80, 0xff};
    unsigned char *buf = malloc(2 * n0 + 64);
    numla_test_rng rng = {20261204};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    for (int it = 0; it < 3000; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        int muts = 1 + (int)(numla_test_rng_u64(&rng) % 3);
        for (int k = 0; k < muts; k++) {
            uint64_t r = numla_test_rng_u64(&rng);
            /* most edits in the header and tables (the first ~700 bytes), where parsing happens */
            size_t span = n < 700 ? n : ((r >> 60) & 1 ? n : 700);
            size_t pos = span ? (size_t)((r >> 8) % span) : 0;
            switch (r % 6) {
            case 0:
                if (n)
                    buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7));
                break;
            case 1:
            case 2:
                if (n)
                    buf[pos] = values[(r >> 48) % sizeof values];
                break;
            case 3:
                n = pos;
                break;
            case 4: {
                size_t len = 1 + (size_t)((r >> 40) % 16);
                if (pos + len <= n && n + len <= 2 * n0 + 64) {
                    memmove(buf + pos + len, buf + pos, n - pos);
                    n += len;
                }
                break;
            }
            default: {
                size_t len = 1 + (size_t)((r >> 40) % 16);
                if (pos + len <= n) {
                    memmove(buf + pos, buf + pos + len, n - pos - len);
                    n -= len;
                }
                break;
            }
            }
        }
        counts[numla_fuzz_gguf_run(buf, n)]++;
    }
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    mutations: ok %d, format %d, unsupported %d\n", counts[NUMLA_STATUS_OK],
                counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 100 && counts[NUMLA_STATUS_FORMAT] > 1000,
                     "ok %d, format %d, unsupported %d", counts[NUMLA_STATUS_OK], counts[NUMLA_STATUS_FORMAT],
                     counts[NUMLA_STATUS_UNSUPPORTED]);
    free(buf);
    free(seed);
}

/* The format's type table agrees with the gguf package's sizes: blocks.gguf's tensors (3 rows of
 * 512 elements) have the byte counts the package wrote. */
static void test_type_sizes(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(gg_golden("blocks.gguf"), &g), NUMLA_STATUS_OK);
    int quant = 0;
    for (int64_t i = 0; i < numla_gguf_tensor_count(g); i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        CU_ASSERT(t->ne[0] == 512 && t->ne[1] == 3);
        const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ti);
        if (t->type != NUMLA_GGML_F32) {
            quant++;
            char want[32];
            snprintf(want, sizeof want, "%s.q", ti->name);
            for (char *p = want; *p; p++)
                *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            CU_ASSERT_STRING_EQUAL(t->name, want);
            CU_ASSERT_EQUAL(t->nbytes, (size_t)(3 * 512 / ti->block * ti->bytes));
        }
    }
    int blocks = 0; /* the block encodings numla reads: blocks.gguf has one tensor of each */
    for (int e = 0; e < NUMLA_ENCODING_COUNT; e++)
        blocks += numla_weight_encoding_get((numla_weight_encoding)e)->scales == NUMLA_SCALES_IN_BLOCK;
    CU_ASSERT_EQUAL(quant, blocks);
    CU_ASSERT_PTR_NULL(numla_ggml_type_get(4));
    CU_ASSERT_PTR_NULL(numla_ggml_type_get(NUMLA_GGML_TYPE_LIMIT));
    numla_gguf_close(&g);
}

NUMLA_TEST_SUITE(gguf, NULL, NULL, NUMLA_TEST(test_meta_values), NUMLA_TEST(test_getter_errors),
                 NUMLA_TEST(test_split), NUMLA_TEST(test_hostile_files), NUMLA_TEST(test_fuzz_mutations),
                 NUMLA_TEST(test_type_sizes))
