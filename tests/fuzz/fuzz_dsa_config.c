/* tests/fuzz/fuzz_dsa_config.c — fuzz target for the DSA config parser
 * (engine/model/config_dsa.c). Any input must fail with a message naming the file, or give a
 * config whose invariants hold (sizes in range, rope inside the index head, layer 0 "full",
 * MoE layers only with experts); else abort. Linked into numla_unit (suite config_dsa feeds it
 * mutated configs); -DNUMLA_FUZZ=ON: libFuzzer. */
#include "engine/model/config_dsa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: accepted (*out, when given, is the config), 0: rejected with a message naming the file,
 * -1: out of memory before parsing. */
int numla_fuzz_dsa_config_run(const uint8_t *data, size_t size, numla_dsa_config *out);

static void fuzz_dsa_config_die(const char *what)
{
    fprintf(stderr, "fuzz_dsa_config: %s\n", what);
    abort();
}

int numla_fuzz_dsa_config_run(const uint8_t *data, size_t size, numla_dsa_config *out)
{
    char *text = malloc(size + 1);
    if (!text)
        return -1;
    memcpy(text, data, size);
    text[size] = 0;
    numla_dsa_config *c = malloc(sizeof *c);
    if (!c) {
        free(text);
        return -1;
    }
    numla_status s = numla_dsa_config_parse(text, "fuzz.json", c);
    free(text);
    if (s != NUMLA_STATUS_OK) {
        free(c);
        if (!numla_error_message()[0] || !strstr(numla_error_message(), "fuzz.json"))
            fuzz_dsa_config_die("failure without a message naming the file");
        return 0;
    }
    if (c->enabled) {
        if (c->num_layers < 1 || c->num_layers > NUMLA_DSA_MAX_LAYERS || c->index_n_heads < 1 ||
            c->index_head_dim < 1 || c->index_topk < 1 || c->index_topk > NUMLA_DSA_MAX_TOPK)
            fuzz_dsa_config_die("size outside its range accepted");
        if (c->rope_dim < 1 || c->rope_dim % 2 || c->rope_dim > c->index_head_dim)
            fuzz_dsa_config_die("rope dim the indexer cannot take accepted");
        if (!c->indexer_full[0])
            fuzz_dsa_config_die("shared first layer accepted");
        for (int64_t i = 0; i < c->num_layers; i++)
            if (c->indexer_full[i] > 1 || c->mlp_moe[i] > 1)
                fuzz_dsa_config_die("layer flag not 0/1");
    }
    if (out)
        *out = *c;
    free(c);
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_dsa_config_run(data, size, NULL);
    return 0;
}
#endif
