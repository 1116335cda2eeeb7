/* DeepSeek-V4 checkpoints that are corrupt are refused by the loader (engine/model/model_v4.c)
 * with an error naming the tensor and the problem, never loaded or crashed on. Each case is a
 * copy of the published-form golden checkpoint tests/golden/v4/model_fp8 (FP8 e4m3 projections
 * with E8M0 `P.scale` per 128 x 128 block, FP4 experts as I8 e2m1 pairs with E8M0 `P.scale` per
 * 32) written at test time with one tensor changed: a scale of the wrong shape or dtype, a
 * weight of the wrong dtype, a scale left out, an FP4 expert of the wrong packed shape, NaN
 * scales; and the file cut short. Every case is loaded whole and as rank 1 of 2 (the sharded
 * path slices the same tensors). The unchanged copy loads (the writer is not the problem). */
#define _GNU_SOURCE /* strcasestr */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/status.h"
#include "engine/formats/safetensors.h"
#include "engine/model/config.h"
#include "engine/model/model_v4.h"

#define SRC "tests/golden/v4/model_fp8"

typedef struct corrupt_case {
    const char *what;
    const char *tensor;     /* the tensor changed */
    numla_dtype dtype;      /* its new dtype (NUMLA_DTYPE_END: kept) */
    int32_t ndim;           /* its new shape (0: kept) */
    int64_t shape[2];
    int drop;               /* left out of the file */
    int byte;               /* >= 0: every byte of its data set to this */
    const char *says;       /* must appear in the message (any case) besides the tensor's
                               name (a NaN scale: its weight's name) */
} corrupt_case;

static const corrupt_case CASES[] = {
    /* FP8 projections */
    {"fp8 scale of the wrong shape", "layers.1.attn.wq_b.scale", NUMLA_DTYPE_END, 2, {2, 1}, 0,
     -1, "shape"},
    {"fp8 scale of one dimension", "layers.1.attn.wkv.scale", NUMLA_DTYPE_END, 1, {1, 0}, 0, -1,
     "shape"},
    {"fp8 scale as F32", "layers.1.attn.wq_b.scale", NUMLA_DTYPE_F32, 0, {0}, 0, -1, "F32"},
    {"fp8 scale as e4m3", "layers.1.attn.wo_a.scale", NUMLA_DTYPE_F8_E4M3, 0, {0}, 0, -1,
     "F8_E4M3"},
    {"fp8 scale missing", "layers.1.attn.wkv.scale", NUMLA_DTYPE_END, 0, {0}, 1, -1, "no tensor"},
    {"fp8 scale NaN", "layers.1.attn.wq_a.scale", NUMLA_DTYPE_END, 0, {0}, 0, 0xFF, "NaN"},
    {"fp8 weight as BF16 beside its scale", "layers.1.attn.wkv.weight", NUMLA_DTYPE_BF16, 0, {0},
     0, -1, "scale"},
    {"fp8 weight as F32 beside its scale", "layers.0.attn.wq_b.weight", NUMLA_DTYPE_F32, 0, {0},
     0, -1, "scale"},
    {"fp8 weight as I8", "layers.1.attn.wo_a.weight", NUMLA_DTYPE_I8, 0, {0}, 0, -1, "shape"},
    {"fp8 weight as F8_E8M0", "layers.1.attn.wq_a.weight", NUMLA_DTYPE_F8_E8M0, 0, {0}, 0, -1,
     "F8_E8M0"},
    {"fp8 weight as I32", "layers.1.attn.wo_a.weight", NUMLA_DTYPE_I32, 0, {0}, 0, -1, "I32"},
    /* FP4 experts */
    {"fp4 expert unpacked", "layers.1.ffn.experts.3.w1.weight", NUMLA_DTYPE_END, 2, {32, 64}, 0,
     -1, "shape"},
    {"fp4 expert short rows", "layers.2.ffn.experts.0.w2.weight", NUMLA_DTYPE_END, 2, {64, 8}, 0,
     -1, "shape"},
    {"fp4 expert as F8_E4M3", "layers.1.ffn.experts.5.w3.weight", NUMLA_DTYPE_F8_E4M3, 0, {0}, 0,
     -1, "shape"},
    {"fp4 expert as BF16 beside its scale", "layers.3.ffn.experts.1.w2.weight", NUMLA_DTYPE_BF16,
     2, {64, 32}, 0, -1, "scale"},
    {"fp4 scale of the wrong shape", "layers.1.ffn.experts.2.w1.scale", NUMLA_DTYPE_END, 2,
     {32, 1}, 0, -1, "shape"},
    {"fp4 scale transposed", "layers.3.ffn.experts.7.w3.scale", NUMLA_DTYPE_END, 2, {2, 32}, 0,
     -1, "shape"},
    {"fp4 scale as I8", "layers.1.ffn.experts.4.w2.scale", NUMLA_DTYPE_I8, 0, {0}, 0, -1, "I8"},
    {"fp4 scale as BF16", "layers.2.ffn.experts.6.w1.scale", NUMLA_DTYPE_BF16, 0, {0}, 0, -1,
     "BF16"},
    {"fp4 scale missing", "layers.1.ffn.experts.0.w3.scale", NUMLA_DTYPE_END, 0, {0}, 1, -1,
     "no tensor"},
    {"fp4 scale NaN", "layers.2.ffn.experts.4.w3.scale", NUMLA_DTYPE_END, 0, {0}, 0, 0xFF, "NaN"},
};

/* The name the message must hold: the tensor's, or for a NaN scale its weight's (the loader
 * finds the NaN reading the weight's blocks) in buf. */
static const char *named(const corrupt_case *c, char *buf, size_t cap)
{
    const size_t n = strlen(c->tensor);
    if (c->byte == 0xFF && n > 6 && !strcmp(c->tensor + n - 6, ".scale"))
        snprintf(buf, cap, "%.*s.weight", (int)(n - 6), c->tensor);
    else
        snprintf(buf, cap, "%s", c->tensor);
    return buf;
}

static int64_t numel(int32_t nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int32_t i = 0; i < nd; i++)
        n *= shape[i];
    return n;
}

/* dir/config.json: a copy of the golden's. */
static void copy_config(const char *dir)
{
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/config.json", numla_test_source_path(SRC));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    size_t len = 0;
    char *text = numla_test_read_file(src, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    FILE *f = fopen(dst, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(text, 1, len, f), len);
    fclose(f);
    free(text);
}

/* A fresh directory under the test's temporary one. */
static const char *case_dir(const char *name)
{
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/v4-corrupt-%s", numla_test_tmpdir(), name);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || access(dir, W_OK) == 0);
    return dir;
}

/* The golden's tensors into dir/model.safetensors, c's tensor changed (c NULL: none). */
static void write_copy(const numla_safetensors_model *st, const corrupt_case *c, const char *dir)
{
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    int seen = 0;
    for (int64_t i = 0; i < numla_safetensors_count(st); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(st, i);
        if (!c || strcmp(t->name, c->tensor)) {
            CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_add(w, t->name, t->dtype, t->ndim,
                                                               t->shape, t->data),
                                  NUMLA_STATUS_OK);
            continue;
        }
        seen = 1;
        if (c->drop)
            continue;
        const numla_dtype dt = c->dtype != NUMLA_DTYPE_END ? c->dtype : t->dtype;
        const int32_t nd = c->ndim ? c->ndim : t->ndim;
        const int64_t *shape = c->ndim ? c->shape : t->shape;
        const size_t bytes = (size_t)numel(nd, shape) * numla_dtype_size(dt);
        /* the stored bytes as far as they go, then a repeat of them: plausible values */
        uint8_t *data = malloc(bytes + 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(data);
        for (size_t b = 0; b < bytes; b++)
            data[b] = c->byte >= 0 ? (uint8_t)c->byte
                                   : ((const uint8_t *)t->data)[b % (t->nbytes ? t->nbytes : 1)];
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_add(w, t->name, dt, nd, shape, data),
                              NUMLA_STATUS_OK);
        free(data);
    }
    NUMLA_ASSERT_MSG(!c || seen, "%s: the golden has no tensor %s", c->what, c->tensor);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, path), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    copy_config(dir);
}

/* Load dir whole (rank -1) or as rank r of 2; the status, the message in msg. */
static numla_status load(const char *dir, int rank, char *msg, size_t cap)
{
    numla_model_config cfg;
    numla_safetensors_model *st = NULL;
    numla_v4_model *m = NULL;
    numla_status s = numla_model_config_load(dir, &cfg);
    if (!s)
        s = numla_safetensors_open(dir, &st);
    if (!s)
        s = rank < 0 ? numla_v4_model_load(&cfg, st, NUMLA_ISA_REF, &m)
                     : numla_v4_model_load_shard(&cfg, st, NUMLA_ISA_REF, NULL, rank, 2, &m);
    snprintf(msg, cap, "%s", s ? numla_error_message() : "");
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK || m == NULL, "%s: a failed load returned a model",
                     dir);
    numla_v4_model_destroy(&m);
    numla_safetensors_close(&st);
    numla_error_clear();
    return s;
}

static void test_intact_copy_loads(void)
{
    numla_safetensors_model *st = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(numla_test_source_path(SRC), &st),
                          NUMLA_STATUS_OK);
    const char *dir = case_dir("intact");
    write_copy(st, NULL, dir);
    numla_safetensors_close(&st);
    char msg[2048];
    for (int rank = -1; rank < 2; rank++)
        NUMLA_ASSERT_MSG(load(dir, rank, msg, sizeof msg) == NUMLA_STATUS_OK,
                         "the unchanged copy (rank %d): %s", rank, msg);
}

static void test_corrupt_tensors_refused(void)
{
    numla_safetensors_model *st = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(numla_test_source_path(SRC), &st),
                          NUMLA_STATUS_OK);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const corrupt_case *c = &CASES[i];
        char name[32];
        snprintf(name, sizeof name, "%zu", i);
        const char *dir = case_dir(name);
        write_copy(st, c, dir);
        /* a routed expert is read by the one rank that holds it, everything else by both */
        const int expert = strstr(c->tensor, ".experts.") != NULL;
        char want[256];
        named(c, want, sizeof want);
        int refused = 0;
        for (int rank = -1; rank < 2; rank++) {
            char msg[2048];
            const numla_status s = load(dir, rank, msg, sizeof msg);
            if (s == NUMLA_STATUS_OK && expert && rank >= 0)
                continue;
            refused += rank >= 0;
            NUMLA_ASSERT_MSG(s == NUMLA_STATUS_FORMAT || s == NUMLA_STATUS_UNSUPPORTED,
                             "%s (rank %d): status %d, %s", c->what, rank, (int)s, msg);
            NUMLA_ASSERT_MSG(strstr(msg, want) && strcasestr(msg, c->says),
                             "%s (rank %d): the message does not name %s and '%s': %s",
                             c->what, rank, want, c->says, msg);
        }
        NUMLA_ASSERT_MSG(refused >= 1, "%s: no rank of 2 refused it", c->what);
    }
    numla_safetensors_close(&st);
}

/* The file cut short, anywhere past its header: the reader refuses it naming the file and the
 * first tensor whose data lies beyond the end. */
static void test_truncated_file_refused(void)
{
    char src[1024];
    snprintf(src, sizeof src, "%s/model.safetensors", numla_test_source_path(SRC));
    size_t len = 0;
    char *bytes = numla_test_read_file(src, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    const size_t cuts[] = {len - 1, len / 2, len - 4096};
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        char name[32], path[1100], msg[2048];
        snprintf(name, sizeof name, "cut%zu", k);
        const char *dir = case_dir(name);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        FILE *f = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(fwrite(bytes, 1, cuts[k], f), cuts[k]);
        fclose(f);
        copy_config(dir);
        const numla_status s = load(dir, -1, msg, sizeof msg);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_FORMAT && strstr(msg, "model.safetensors") &&
                             strstr(msg, "layers."),
                         "cut to %zu of %zu bytes: status %d, %s", cuts[k], len, (int)s, msg);
    }
    free(bytes);
}

NUMLA_TEST_SUITE(v4_weights, NULL, NULL, NUMLA_TEST(test_intact_copy_loads),
                 NUMLA_TEST(test_corrupt_tensors_refused), NUMLA_TEST(test_truncated_file_refused))
