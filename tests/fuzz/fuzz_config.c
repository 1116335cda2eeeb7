/* tests/fuzz/fuzz_config.c — fuzz target for the config.json parser (engine/model/config.c).
 * Any input must fail with a message, or give a config whose invariants hold (the kernels'
 * multiples, k <= experts, groups dividing experts, finite derived values); else abort.
 * Linked into numla_unit (suite config feeds it mutated configs and checks the outcomes it
 * returns); -DNUMLA_FUZZ=ON: libFuzzer. */
#include "engine/model/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: accepted (*out, when given, is the config), 0: rejected with a message naming the file,
 * -1: out of memory before parsing. */
int numla_fuzz_config_run(const uint8_t *data, size_t size, numla_model_config *out);

static void fuzz_config_die(const char *what)
{
    fprintf(stderr, "fuzz_config: %s\n", what);
    abort();
}

int numla_fuzz_config_run(const uint8_t *data, size_t size, numla_model_config *out)
{
    char *text = malloc(size + 1);
    if (!text)
        return -1;
    memcpy(text, data, size);
    text[size] = 0;
    numla_model_config c;
    numla_status s = numla_model_config_parse(text, "fuzz.json", &c);
    free(text);
    if (s != NUMLA_STATUS_OK) {
        if (!numla_error_message()[0] || !strstr(numla_error_message(), "fuzz.json"))
            fuzz_config_die("failure without a message naming the file");
        return 0;
    }
    if (c.arch == NUMLA_MODEL_ARCH_DEEPSEEK_V4) {
        /* V4 (config_v4.h): its own attention shapes and per-layer kinds */
        const numla_v4_config *v = &c.v4;
        if (!v->enabled || v->num_layers != c.num_hidden_layers || v->head_dim < 2 ||
            v->rope_dim < 2 || v->rope_dim % 2 || v->rope_dim > v->head_dim ||
            v->rope_dim > NUMLA_V4_MAX_ROPE_DIM || v->o_groups < 1 ||
            c.num_attention_heads % v->o_groups || v->hc_mult < 1 || v->hc_mult > NUMLA_V4_MAX_HC ||
            v->csa_rate < 1 || v->hca_rate < 1 || v->sliding_window < 1 || v->index_topk < 1 ||
            !(v->swiglu_limit > 0) || c.n_routed_experts < 1)
            fuzz_config_die("V4 shape outside its range accepted");
        for (int64_t i = 0; i < v->num_layers; i++) {
            if (v->attn[i] > NUMLA_V4_ATTN_HCA || v->hash_moe[i] > 1)
                fuzz_config_die("V4 layer kind not one of its values");
            if (v->attn[i] == NUMLA_V4_ATTN_CSA && v->rope_dim > v->index_head_dim)
                fuzz_config_die("V4 indexer narrower than the rope accepted");
        }
        for (int64_t i = 0; i < v->rope_dim / 2; i++)
            if (!isnormal(v->main_inv_freq[i]) || !isnormal(v->compress_inv_freq[i]))
                fuzz_config_die("V4 non-finite inv_freq");
    } else if (c.kv_lora_rank <= 0 || c.kv_lora_rank % 32 || c.qk_rope_head_dim <= 0 ||
               c.qk_rope_head_dim % 16 || c.qk_rope_head_dim > NUMLA_CONFIG_MAX_ROPE_DIM)
        fuzz_config_die("attention dims the kernels cannot take were accepted");
    if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
        c.vocab_size <= 0 || c.vocab_size > NUMLA_CONFIG_MAX_VOCAB ||
        c.num_hidden_layers > NUMLA_CONFIG_MAX_LAYERS ||
        c.max_position_embeddings > NUMLA_CONFIG_MAX_POSITIONS ||
        c.n_routed_experts > NUMLA_CONFIG_MAX_EXPERTS)
        fuzz_config_die("size outside its range accepted");
    if (c.n_routed_experts > 0 &&
        (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.n_routed_experts ||
         c.n_group <= 0 || c.n_routed_experts % c.n_group || c.topk_group > c.n_group ||
         c.moe_layer_freq <= 0))
        fuzz_config_die("inconsistent MoE config accepted");
    if (!isfinite(c.softmax_scale) || !(c.softmax_scale > 0) || !isfinite(c.rope_attention_factor))
        fuzz_config_die("non-finite derived value");
    for (int64_t i = 0; i < c.qk_rope_head_dim / 2; i++)
        if (!isfinite(c.rope_inv_freq[i]) || !(c.rope_inv_freq[i] > 0))
            fuzz_config_die("non-finite inv_freq");
    if (out)
        *out = c;
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_config_run(data, size, NULL);
    return 0;
}
#endif
