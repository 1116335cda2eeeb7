/* Loading GGUF files into the model room (weights.h numla_weights_load_gguf, config.h
 * numla_model_config_load on a .gguf path): the config the deepseek2 keys give, where the
 * blocks go (QBLOCK linears whose rows are the file's bytes, experts one per stacked slice, the
 * embedding kept in blocks), and bad input: every case an error naming the file and the
 * tensor, with nothing loaded. The numerics are tests/golden/test_gguf_golden.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/isa.h"
#include "kernels/qblock.h"
#include "test_util.h"

static const char *wg_path(const char *variant)
{
    static char p[1200];
    snprintf(p, sizeof p, "%s/%s/model.gguf", numla_test_source_path("tests/golden"), variant);
    return p;
}

/* A copy of src at dst with the ggml type of tensor `name` set to `type`. */
static int wg_copy_retype(const char *src, const char *dst, const char *name, uint32_t type)
{
    FILE *f = fopen(src, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n);
    int ok = b && fread(b, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    /* tensor info: u64 name length, name, u32 n_dims, u64 ne[n_dims], u32 type */
    const size_t len = strlen(name);
    char *at = NULL;
    for (long i = 8; ok && i + (long)len < n; i++)
        if (!memcmp(b + i, name, len) && !memcmp(b + i - 8, &(uint64_t){len}, 8)) {
            at = b + i;
            break;
        }
    if (at) {
        uint32_t nd;
        memcpy(&nd, at + len, 4);
        memcpy(at + len + 4 + 8 * nd, &type, 4);
        FILE *o = fopen(dst, "wb");
        ok = o && fwrite(b, 1, (size_t)n, o) == (size_t)n;
        if (o)
            fclose(o);
    }
    free(b);
    return ok && at ? 0 : -1;
}

static void test_config_and_layout(void)
{
    const char *p = wg_path("kq/gguf_mixed");
    CU_ASSERT_TRUE(numla_model_path_is_gguf(p));
    CU_ASSERT_FALSE(numla_model_path_is_gguf(numla_test_source_path("tests/golden/v2lite")));
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(p, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.arch, NUMLA_MODEL_ARCH_DEEPSEEK_V2);
    CU_ASSERT_EQUAL(c.hidden_size, 256);
    CU_ASSERT_EQUAL(c.num_attention_heads, 8);
    CU_ASSERT_EQUAL(c.n_routed_experts, 8);
    CU_ASSERT_EQUAL(c.first_k_dense_replace, 1);
    CU_ASSERT_EQUAL(c.q_lora_rank, 0);
    CU_ASSERT_EQUAL(c.topk_method, NUMLA_TOPK_METHOD_GREEDY);
    CU_ASSERT_TRUE(c.rope_yarn);

    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(p, &g), NUMLA_STATUS_OK);
    /* the reference level keeps rows of blocks; the vnni one stores Q4_K / IQ4_XS as panels,
     * whose rows numla_qblock_row_blocks gives back */
    const numla_isa isas[2] = {NUMLA_ISA_REF, NUMLA_ISA_AVX512};
    for (int il = 0; il < 2; il++) {
        if (!numla_isa_supported(isas[il]))
            continue;
        numla_model_weights *w = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_weights_load_gguf(&c, g, 1, 2, isas[il], NULL, &w),
                              NUMLA_STATUS_OK);
        /* the embedding stays Q6_K; rank 1 of 2 owns experts 4..7, heads 4..7 */
        CU_ASSERT_TRUE(w->embed_blocks);
        CU_ASSERT_EQUAL(w->embed_qtype, NUMLA_QBLOCK_Q6_K);
        CU_ASSERT_EQUAL(w->shard.expert_begin, 4);
        const numla_weights_layer *l1 = &w->layers[1];
        const numla_model_linear *gate5 = &l1->experts[1].gate; /* expert 5 */
        CU_ASSERT_EQUAL_FATAL(gate5->kind, NUMLA_MODEL_LINEAR_QBLOCK);
        const numla_gguf_tensor *t = numla_gguf_tensor_find(g, "blk.1.ffn_gate_exps.weight");
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
        const size_t rb = (size_t)(t->ne[0] / ti->block * ti->bytes);
        /* its rows are the file's bytes of slice 5 */
        uint8_t *rowb = malloc(rb);
        for (int64_t r = 0; r < gate5->n; r++) {
            CU_ASSERT_EQUAL(numla_qblock_row_blocks(&gate5->qb, r, rowb), NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL(memcmp(rowb, (const char *)t->data + (size_t)(5 * t->ne[1] + r) * rb, rb), 0);
        }
        free(rowb);
        CU_ASSERT_EQUAL(gate5->qb.layout, numla_qblock_layout_for(isas[il], gate5->qb.type, gate5->qb.act, gate5->qb.k));
        /* the q_proj rows of heads 4..7 (whole rows: always blocks) */
        const numla_gguf_tensor *q = numla_gguf_tensor_find(g, "blk.0.attn_q.weight");
        const numla_ggml_type_info *qi = numla_ggml_type_get(q->type);
        const size_t qrb = (size_t)(q->ne[0] / qi->block * qi->bytes);
        CU_ASSERT_EQUAL(w->layers[0].q_proj.kind, NUMLA_MODEL_LINEAR_QBLOCK);
        uint8_t *qrow = malloc(qrb);
        CU_ASSERT_EQUAL(numla_qblock_row_blocks(&w->layers[0].q_proj.qb, 0, qrow), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(memcmp(qrow, (const char *)q->data + (size_t)(4 * c.q_head_dim) * qrb, qrb), 0);
        free(qrow);
        /* o_proj of 2 ranks: 128 columns each, a cut Q*_K block: dequantized into fp32 */
        CU_ASSERT_EQUAL(w->layers[0].o_proj.kind, NUMLA_MODEL_LINEAR_FLOAT);
        /* the absorbed attention's per-head W_UKᵀ and W_UV stay in blocks: head 5 (the second of
         * this rank) is rows 5·Dc.. of attn_k_b and 5·v.. of attn_v_b, byte for byte */
        const struct {
            const char *name;
            const numla_model_linear *lin;
            int64_t rows;
        } heads[] = {{"blk.2.attn_k_b.weight", &w->layers[2].uk_t[1], c.kv_lora_rank},
                     {"blk.2.attn_v_b.weight", &w->layers[2].uv[1], c.v_head_dim}};
        for (int i = 0; i < 2; i++) {
            const numla_gguf_tensor *ht = numla_gguf_tensor_find(g, heads[i].name);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ht);
            const numla_ggml_type_info *hi = numla_ggml_type_get(ht->type);
            const size_t hrb = (size_t)(ht->ne[0] / hi->block * hi->bytes);
            NUMLA_ASSERT_MSG(heads[i].lin->kind == NUMLA_MODEL_LINEAR_QBLOCK, "%s: head not in blocks", heads[i].name);
            if (heads[i].lin->kind != NUMLA_MODEL_LINEAR_QBLOCK)
                continue;
            CU_ASSERT_EQUAL(heads[i].lin->n, heads[i].rows);
            /* the activation rule of every block linear (wg_act_check below), and its layout */
            const numla_qblock_weight *hq = &heads[i].lin->qb;
            const int native = isas[il] == NUMLA_ISA_REF ||
                               numla_qblock_level(isas[il], hq->type, NUMLA_QBLOCK_ACT_Q8) != NUMLA_ISA_REF;
            CU_ASSERT_EQUAL(hq->act, numla_qblock_q8_takes(hq->type, hq->k) && native ? NUMLA_QBLOCK_ACT_Q8
                                                                                   : NUMLA_QBLOCK_ACT_F32);
            CU_ASSERT_EQUAL(hq->layout, numla_qblock_layout_for(isas[il], hq->type, hq->act, hq->k));
            uint8_t *hrow = malloc(hrb);
            for (int64_t r = 0; r < heads[i].lin->n; r++) {
                CU_ASSERT_EQUAL(numla_qblock_row_blocks(hq, r, hrow), NUMLA_STATUS_OK);
                CU_ASSERT_EQUAL(memcmp(hrow, (const char *)ht->data + (size_t)(5 * heads[i].rows + r) * hrb, hrb), 0);
            }
            free(hrow);
        }
        numla_weights_destroy(&w);
    }
    numla_gguf_close(&g);
}

static void test_bad_input(void)
{
    numla_model_config c;
    numla_model_weights *w = (numla_model_weights *)(uintptr_t)1;
    const char *p = wg_path("v2lite/gguf_q8_0");
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(p, &c), NUMLA_STATUS_OK);

    /* blocks cannot be loaded as fp8 / int8: FORMAT naming the tensor, nothing loaded */
    numla_weights_options o = numla_weights_options_default();
    o.format = NUMLA_WEIGHT_FORMAT_FP8;
    CU_ASSERT_EQUAL(numla_weights_load_path(&c, p, 0, 1, NUMLA_ISA_REF, &o, &w),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NULL(w);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "blk.0.attn_q.weight"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "cannot be loaded as fp8"));

    /* a tensor in an encoding numla does not run (Q8_1, ggml's activation type): UNSUPPORTED
     * naming file and tensor */
    char dst[1200];
    snprintf(dst, sizeof dst, "%s/wg_q8_1.gguf", numla_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(wg_copy_retype(p, dst, "blk.2.attn_output.weight", NUMLA_GGML_Q8_1), 0);
    numla_model_config c2;
    numla_status s = numla_model_config_load(dst, &c2);
    if (s == NUMLA_STATUS_OK) {
        w = (numla_model_weights *)(uintptr_t)1;
        s = numla_weights_load_path(&c2, dst, 0, 1, NUMLA_ISA_REF, NULL, &w);
        CU_ASSERT_PTR_NULL(w);
    }
    CU_ASSERT_NOT_EQUAL(s, NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "blk.2.attn_output.weight"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "wg_q8_1.gguf"));

    /* an unknown type code: the reader refuses the file by name */
    snprintf(dst, sizeof dst, "%s/wg_t99.gguf", numla_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(wg_copy_retype(p, dst, "blk.2.ffn_up_exps.weight", 99), 0);
    CU_ASSERT_NOT_EQUAL(numla_model_config_load(dst, &c2), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "blk.2.ffn_up_exps.weight"));

    /* more ranks than heads */
    w = (numla_model_weights *)(uintptr_t)1;
    CU_ASSERT_NOT_EQUAL(numla_weights_load_path(&c, p, 0, 7, NUMLA_ISA_REF, NULL, &w),
                        NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(w);

    /* a split set with its second part missing: IO naming that part, nothing loaded */
    char part[1300], cmd[4000];
    snprintf(part, sizeof part, "%s/model-00001-of-00002.gguf",
             numla_test_source_path("tests/golden/v2lite/gguf_q4_0_split"));
    snprintf(dst, sizeof dst, "%s/wg_split", numla_test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/'", dst, part, dst);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(dst, sizeof dst, "%s/wg_split/model-00001-of-00002.gguf", numla_test_tmpdir());
    CU_ASSERT_EQUAL(numla_model_config_load(dst, &c2), NUMLA_STATUS_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "model-00002-of-00002.gguf"));
    w = (numla_model_weights *)(uintptr_t)1;
    CU_ASSERT_EQUAL(numla_weights_load_path(&c, dst, 0, 1, NUMLA_ISA_REF, NULL, &w),
                    NUMLA_STATUS_IO);
    CU_ASSERT_PTR_NULL(w);

    /* a missing file */
    CU_ASSERT_NOT_EQUAL(numla_model_config_load("/nonexistent/x.gguf", &c2), NUMLA_STATUS_OK);
    numla_error_clear();
}

/* --weights q8_0 / q4_0 on v2lite's fp32 checkpoint packs exactly the blocks the gguf package
 * wrote for the same weights into v2lite/gguf_q8_0 and gguf_q4_0 (scripts/make_gguf_model_golden.py
 * quantizes them with gguf.quants): q_proj rows, a routed expert's gate, lm_head. */
static void test_quantize_at_load(void)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v2lite"));
    static const struct {
        const char *variant;
        numla_weight_encoding enc;
    } cases[] = {{"v2lite/gguf_q8_0", NUMLA_ENCODING_Q8_0}, {"v2lite/gguf_q4_0", NUMLA_ENCODING_Q4_0}};
    for (int ci = 0; ci < 2; ci++) {
        numla_model_config c;
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &c), NUMLA_STATUS_OK);
        numla_weights_options o = numla_weights_options_default();
        o.format = cases[ci].enc;
        numla_model_weights *w = NULL;
        numla_status s = numla_weights_load_path(&c, dir, 1, 2, NUMLA_ISA_REF, &o, &w);
        if (s)
            fprintf(stderr, "\n    %s", numla_error_message());
        CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
        numla_gguf *g = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_gguf_open(wg_path(cases[ci].variant), &g), NUMLA_STATUS_OK);
        const struct {
            const char *name;
            const numla_model_linear *lin;
            int64_t row0;
        } t[] = {
            {"blk.0.attn_q.weight", &w->layers[0].q_proj, w->shard.head_begin * c.q_head_dim},
            {"blk.3.ffn_gate_exps.weight", &w->layers[3].experts[0].gate,
             w->shard.expert_begin * c.moe_intermediate_size},
            {"output.weight", &w->lm_head, w->shard.vocab_begin},
            {"blk.1.ffn_up.weight", &w->layers[1].dense.up, w->shard.inter_begin},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            const numla_gguf_tensor *gt = numla_gguf_tensor_find(g, t[i].name);
            CU_ASSERT_PTR_NOT_NULL_FATAL(gt);
            const numla_ggml_type_info *ti = numla_ggml_type_get(gt->type);
            const size_t rb = (size_t)(gt->ne[0] / ti->block * ti->bytes);
            NUMLA_ASSERT_MSG(t[i].lin->kind == NUMLA_MODEL_LINEAR_QBLOCK, "%s not blocks",
                             t[i].name);
            int same = 1;
            for (int64_t r = 0; same && r < t[i].lin->n; r++)
                same = !memcmp(t[i].lin->qb.q + r * t[i].lin->qb.ld,
                               (const char *)gt->data + (size_t)(t[i].row0 + r) * rb, rb);
            NUMLA_ASSERT_MSG(same, "%s %s: packed blocks differ from the file's",
                             cases[ci].variant, t[i].name);
        }
        numla_gguf_close(&g);
        numla_weights_destroy(&w);
    }
}

/* --weights q4_k on v2lite (width 96: no slice is whole blocks of 256): every quantizable
 * linear falls back to Q8_0 blocks, the same bytes --weights q8_0 makes (the recipe's fallback);
 * the experts' down_proj (K = 16, not whole blocks of 32) stays float. */
static void test_q4_k_fallback(void)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v2lite"));
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &c), NUMLA_STATUS_OK);
    numla_weights_options o = numla_weights_options_default();
    CU_ASSERT_TRUE(numla_weights_format_parse("q4_k", &o));
    numla_model_weights *wk = NULL, *w8 = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_weights_load_path(&c, dir, 0, 1, NUMLA_ISA_REF, &o, &wk),
                          NUMLA_STATUS_OK);
    CU_ASSERT_TRUE(numla_weights_format_parse("q8_0", &o));
    CU_ASSERT_EQUAL_FATAL(numla_weights_load_path(&c, dir, 0, 1, NUMLA_ISA_REF, &o, &w8),
                          NUMLA_STATUS_OK);
    const numla_model_linear *a = &wk->lm_head, *b = &w8->lm_head;
    CU_ASSERT_EQUAL(a->kind, NUMLA_MODEL_LINEAR_QBLOCK);
    CU_ASSERT_EQUAL(a->qb.type, NUMLA_QBLOCK_Q8_0);
    CU_ASSERT_EQUAL(memcmp(a->qb.q, b->qb.q, (size_t)(a->n * a->qb.ld)), 0);
    CU_ASSERT_EQUAL(wk->layers[3].experts[0].down.kind, NUMLA_MODEL_LINEAR_FLOAT);
    CU_ASSERT_EQUAL(wk->layers[3].experts[0].gate.qb.type, NUMLA_QBLOCK_Q8_0);
    CU_ASSERT_FALSE(numla_weights_format_parse("q5_k", &o));
    numla_weights_destroy(&wk);
    numla_weights_destroy(&w8);
}

/* compressed-tensors quantization_config: pack-quantized int4 groups of 32 only, every other
 * setting refused naming the field; a checkpoint whose int4 tensors are missing is refused
 * naming them, with nothing loaded. */
static void test_int4_config(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json",
             numla_test_source_path("tests/golden/v2lite/model_int4"));
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(text, "int4", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.weight_format, NUMLA_ENCODING_INT4);
    static const struct {
        const char *from, *to, *field;
    } bad[] = {{"\"group_size\": 32", "\"group_size\": 128", "config_groups.group_0.weights"},
               {"\"num_bits\": 4", "\"num_bits\": 8", "config_groups.group_0.weights"},
               {"\"symmetric\": true", "\"symmetric\": false", "config_groups.group_0.weights"},
               {"pack-quantized", "float-quantized", "quantization_config.format"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *at = strstr(text, bad[i].from);
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        static char t2[65536];
        snprintf(t2, sizeof t2, "%.*s%s%s", (int)(at - text), text, bad[i].to,
                 at + strlen(bad[i].from));
        CU_ASSERT_EQUAL(numla_model_config_parse(t2, "int4", &c), NUMLA_STATUS_UNSUPPORTED);
        NUMLA_ASSERT_MSG(strstr(numla_error_message(), bad[i].field) != NULL, "%s: %s",
                         bad[i].to, numla_error_message());
    }
    /* the int4 config over the float v2lite checkpoint: every X.weight is there, so nothing is
     * int4 and it loads as stored (the `ignore` rule); over a directory without the int4
     * tensors' scales it would be refused (weights.c ld_classify_int4) */
    numla_model_config c2;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(text, "int4", &c2), NUMLA_STATUS_OK);
    numla_model_weights *w = NULL;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v2lite"));
    CU_ASSERT_EQUAL(numla_weights_load_path(&c2, dir, 0, 1, NUMLA_ISA_REF, NULL, &w),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(w->layers[3].experts[0].gate.kind, NUMLA_MODEL_LINEAR_FLOAT);
    numla_weights_destroy(&w);
    numla_error_clear();
}

/* Copy the safetensors model dir src to dst (config.json too), dropping tensor `drop` and
 * giving tensor `narrow` one column less (NULL: none). */
static int wg_copy_st(const char *src, const char *dst, const char *drop, const char *narrow)
{
    numla_safetensors_model *st = NULL;
    numla_safetensors_writer *w = NULL;
    if (numla_safetensors_open(src, &st) || numla_safetensors_writer_create(&w))
        return -1;
    for (int64_t i = 0; i < numla_safetensors_count(st); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(st, i);
        if (drop && !strcmp(t->name, drop))
            continue;
        int64_t shape[NUMLA_SAFETENSORS_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        void *data = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(data, t->data, t->nbytes);
        if (narrow && !strcmp(t->name, narrow) && t->ndim == 2) { /* rows keep their start */
            const size_t es = numla_dtype_size(t->dtype), rb = (size_t)shape[1] * es;
            for (int64_t r = 0; r < shape[0]; r++)
                memmove((char *)data + (size_t)r * (rb - es), (const char *)t->data + r * rb,
                        rb - es);
            shape[1]--;
        }
        numla_status s = numla_safetensors_writer_add(w, t->name, t->dtype, t->ndim, shape, data);
        free(data);
        if (s)
            return -1;
    }
    char p[1300], q[2800];
    mkdir(dst, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    int rc = numla_safetensors_writer_write(w, p) ? -1 : 0;
    numla_safetensors_writer_destroy(&w);
    numla_safetensors_close(&st);
    snprintf(p, sizeof p, "%s/config.json", src);
    snprintf(q, sizeof q, "cp '%s' '%s/config.json'", p, dst);
    return rc || system(q) != 0 ? -1 : 0;
}

/* An int4 checkpoint with a tensor missing or mis-shaped: FORMAT naming it, nothing loaded. */
static void test_int4_bad(void)
{
    char src[1200];
    snprintf(src, sizeof src, "%s", numla_test_source_path("tests/golden/v2lite/model_int4"));
    static const struct {
        const char *drop, *narrow, *want;
    } cases[] = {
        {"model.layers.2.mlp.experts.3.up_proj.weight_scale", NULL,
         "model.layers.2.mlp.experts.3.up_proj.weight_scale"},
        {"model.layers.3.mlp.experts.0.gate_proj.weight_packed", NULL,
         "model.layers.3.mlp.experts.0.gate_proj.weight_packed"},
        {NULL, "model.layers.2.mlp.experts.1.gate_proj.weight_packed",
         "model.layers.2.mlp.experts.1.gate_proj.weight_packed is i32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dst[1200];
        snprintf(dst, sizeof dst, "%s/wg_int4_bad%zu", numla_test_tmpdir(), i);
        CU_ASSERT_EQUAL_FATAL(wg_copy_st(src, dst, cases[i].drop, cases[i].narrow), 0);
        numla_model_config c;
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dst, &c), NUMLA_STATUS_OK);
        numla_model_weights *w = (numla_model_weights *)(uintptr_t)1;
        CU_ASSERT_EQUAL(numla_weights_load_path(&c, dst, 0, 1, NUMLA_ISA_REF, NULL, &w),
                        NUMLA_STATUS_FORMAT);
        CU_ASSERT_PTR_NULL(w);
        NUMLA_ASSERT_MSG(strstr(numla_error_message(), cases[i].want) != NULL, "case %zu: %s", i,
                         numla_error_message());
    }
    numla_error_clear();
}

/* A block linear is stored in the layout its kernel runs on (16-row panels for the types with
 * panel kernels, in Q8 mode at the VNNI level), and its rows are the file's blocks either way (checked
 * against the ROWS layout's bytes where both exist: test_config_and_layout). */
static int wg_panels_seen;
static void wg_layout_check(const numla_model_linear *l, numla_isa isa)
{
    const numla_qblock_layout want = numla_qblock_layout_for(isa, l->qb.type, l->qb.act, l->qb.k);
    NUMLA_ASSERT_MSG(l->qb.layout == want, "%s (%lld x %lld) act %d at level %s stored in layout %d, want %d",
                     numla_qblock_info_get(l->qb.type)->name, (long long)l->qb.n, (long long)l->qb.k, (int)l->qb.act,
                     numla_isa_name(isa), (int)l->qb.layout, (int)want);
    wg_panels_seen += l->qb.layout == NUMLA_QBLOCK_LAYOUT_PANEL16;
}

/* Tally one block linear's activation mode against the rule of weights.c (Q8 where Q8 mode
 * takes K (numla_qblock_q8_takes: a multiple of 256, of 32 for Q5_0, IQ4_NL and Q8_0) and the level
 * has a native Q8 kernel for the type, else F32). */
static void wg_act_check(const numla_model_linear *l, numla_isa isa, int counts[2])
{
    if (l->kind != NUMLA_MODEL_LINEAR_QBLOCK)
        return;
    const int native = isa == NUMLA_ISA_REF ||
                       numla_qblock_level(isa, l->qb.type, NUMLA_QBLOCK_ACT_Q8) != NUMLA_ISA_REF;
    const numla_qblock_act want =
        numla_qblock_q8_takes(l->qb.type, l->qb.k) && native ? NUMLA_QBLOCK_ACT_Q8 : NUMLA_QBLOCK_ACT_F32;
    NUMLA_ASSERT_MSG(l->qb.act == want, "%s (%lld x %lld) at level %s runs act %d, want %d",
                     numla_qblock_info_get(l->qb.type)->name, (long long)l->qb.n, (long long)l->qb.k,
                     numla_isa_name(isa), (int)l->qb.act, (int)want);
    wg_layout_check(l, isa);
    counts[l->qb.act == NUMLA_QBLOCK_ACT_Q8]++;
}

/* The same for a linear whose input is split over the ranks (o_proj, the dense and shared
 * down_proj): Q8 only where its K slice [c0, c0 + k) of full_k holds whole 256-column groups
 * (starts on one, ends on one or at the row's end), so no group's quantization depends on the
 * split; else F32. On kq a cut slice is never Q8-able anyway (its K-quants need K % 256 and are
 * then dequantized): the "cut group" clause matters for the 32-element types (Q8 from K % 32),
 * which the V2-shaped Q8_0 golden has at 3 ranks; wg_cut_held counts those slices. */
static int wg_cut_held;
static void wg_act_check_split(const numla_model_linear *l, numla_isa isa, int64_t c0, int64_t full_k, int counts[2])
{
    if (l->kind != NUMLA_MODEL_LINEAR_QBLOCK)
        return;
    const int64_t k = l->qb.k;
    const int whole = c0 % 256 == 0 && (c0 + k == full_k || k % 256 == 0);
    const int native = isa == NUMLA_ISA_REF ||
                       numla_qblock_level(isa, l->qb.type, NUMLA_QBLOCK_ACT_Q8) != NUMLA_ISA_REF;
    const numla_qblock_act want = whole && numla_qblock_q8_takes(l->qb.type, k) && native ? NUMLA_QBLOCK_ACT_Q8
                                                                                           : NUMLA_QBLOCK_ACT_F32;
    NUMLA_ASSERT_MSG(l->qb.act == want, "split-input %s (%lld x %lld, columns from %lld of %lld) at level %s runs act %d, "
                     "want %d", numla_qblock_info_get(l->qb.type)->name, (long long)l->qb.n, (long long)k,
                     (long long)c0, (long long)full_k, numla_isa_name(isa), (int)l->qb.act, (int)want);
    wg_cut_held += !whole && numla_qblock_q8_takes(l->qb.type, k) && native;
    wg_layout_check(l, isa);
    counts[l->qb.act == NUMLA_QBLOCK_ACT_Q8]++;
}

/* kq's linears cycle through every K-quant and IQ4_XS: at the reference level all of K 256 run
 * Q8; at a vector level a type without a native Q8 kernel runs F32 (the Q8 fallback would be
 * the scalar reference; wg_act_check holds every linear to the rule), and with VNNI every kq
 * type keeps Q8. Since every type has a VNNI kernel, that "native kernel" clause is exercised
 * only on a CPU without VNNI. */
static void test_qblock_act_choice(void)
{
    const numla_isa isas[2] = {NUMLA_ISA_REF, NUMLA_ISA_AVX512};
    int split_counts[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        /* kq's K-quants, then v2's Q8_0 (o_proj K 192, dense down 64, shared down 16: one
         * short group each, cut by every split) */
        const char *p = wg_path(i < 4 ? "kq/gguf_mixed" : "v2/gguf_q8_0");
        numla_model_config c;
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(p, &c), NUMLA_STATUS_OK);
        const numla_isa isa = isas[i % 2];
        const int ranks = i % 4 < 2 ? 1 : 3; /* 3 ranks: kq's 8 heads as 3 + 3 + 2, slices that cut groups */
        if (!numla_isa_supported(isa))
            continue;
        numla_model_weights *w = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_weights_load_path(&c, p, ranks - 1, ranks, isa, NULL, &w), NUMLA_STATUS_OK);
        int counts[2] = {0, 0};
        const numla_shard *sh = &w->shard;
        for (int64_t l = 0; l < c.num_hidden_layers; l++) {
            const numla_weights_layer *L = &w->layers[l];
            wg_act_check(&L->q_proj, isa, counts);
            wg_act_check(&L->kv_a_proj, isa, counts);
            const numla_weights_mlp *mlp = L->is_moe ? &L->shared : &L->dense;
            wg_act_check(&mlp->gate, isa, counts);
            wg_act_check(&mlp->up, isa, counts);
            wg_act_check_split(&L->o_proj, isa, sh->head_begin * c.v_head_dim,
                               c.num_attention_heads * c.v_head_dim, split_counts);
            if (L->is_moe)
                wg_act_check_split(&mlp->down, isa, sh->shared_begin, c.n_shared_experts * c.moe_intermediate_size,
                                   split_counts);
            else
                wg_act_check_split(&mlp->down, isa, sh->inter_begin, c.intermediate_size, split_counts);
            for (int64_t e = 0; L->is_moe && e < w->shard.expert_count; e++) {
                wg_act_check(&L->experts[e].gate, isa, counts);
                wg_act_check(&L->experts[e].up, isa, counts);
                wg_act_check(&L->experts[e].down, isa, counts);
            }
        }
        wg_act_check(&w->lm_head, isa, counts);
        /* (wg_act_check held every linear to the rule; here: the Q8 mode really occurs) */
        CU_ASSERT(counts[1] > 0);
        numla_weights_destroy(&w);
    }
    /* with VNNI, kq's panel types (Q4_K, Q6_K, IQ4_XS, Q8_0) are stored as panels */
    if (numla_isa_supported(NUMLA_ISA_AVX512) &&
        numla_qblock_level(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AVX512)
        CU_ASSERT(wg_panels_seen > 0);
    /* both modes: whole groups of a split input on 1 rank take Q8, cut ones on 3 ranks F32
     * (every other kq linear takes Q8 since Q8_0 does from K % 32), including Q8_0 slices that
     * Q8 mode would take by their K alone */
    CU_ASSERT(split_counts[0] > 0 && split_counts[1] > 0);
    CU_ASSERT(wg_cut_held > 0);
}

NUMLA_TEST_SUITE(weights_gguf, NULL, NULL, NUMLA_TEST(test_config_and_layout),
                 NUMLA_TEST(test_int4_bad),
                 NUMLA_TEST(test_int4_config),
                 NUMLA_TEST(test_bad_input), NUMLA_TEST(test_quantize_at_load),
                 NUMLA_TEST(test_q4_k_fallback), NUMLA_TEST(test_qblock_act_choice))
