/* engine/cli/generation_config.h — a model directory's generation_config.json: the EOS ids the
 * model ends a turn with (stop tokens beside config.json's and the tokenizer's) and the sampling
 * defaults its publisher recommends (temperature, top_p, top_k), applied to requests that do not
 * set them, as vLLM does (`--generation-config auto`, the default; `none` ignores the file).
 *
 * Read through engine/json/model_json.h, so a number beyond 64 bits never refuses the file; a
 * field numla uses that is out of range or of the wrong type is an error naming the file and the
 * field. Other fields (max_length, pad_token_id, transformers_version, ...) are not read.
 * Not collective (rank 0 reads it).
 */
#ifndef NUMLA_ENGINE_CLI_GENERATION_CONFIG_H
#define NUMLA_ENGINE_CLI_GENERATION_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/model/config.h"
#include "engine/serving/sampler.h"

typedef struct numla_generation_config {
    int found;                  /* the file was there (0: every field absent) */
    int32_t bos_token_id;       /* -1: absent or null */
    int32_t num_eos;
    int32_t eos_token_ids[NUMLA_CONFIG_MAX_EOS]; /* (num_eos) an integer or a list in the file */
    int has_temperature, has_top_p, has_top_k, has_do_sample;
    double temperature;         /* >= 0 */
    double top_p;               /* (0, 1] */
    int32_t top_k;              /* <= 0: off */
    int do_sample;
} numla_generation_config;

/* Parse the text of a generation_config.json (len bytes); `source` names it in errors; token
 * ids must be below vocab_size (<= 0: not checked). Local. */
numla_status numla_generation_config_parse(const char *text, size_t len, const char *source,
                                           int64_t vocab_size, numla_generation_config *out);

/* <model_dir>/generation_config.json; absent (or a GGUF file, which has none): out->found = 0
 * and OK. Local. */
numla_status numla_generation_config_load(const char *model_dir, int64_t vocab_size,
                                          numla_generation_config *out);

/* The request defaults: p (already holding numla_sampling_params_default) with the file's
 * temperature, top_p and top_k; do_sample false without a temperature means greedy
 * (temperature 0), as transformers generates. Local. */
void numla_generation_config_defaults(const numla_generation_config *g, numla_sampling_params *p);

/* Add the file's EOS ids that cfg does not list yet to cfg's (up to NUMLA_CONFIG_MAX_EOS);
 * returns how many were added. Local. */
int numla_generation_config_add_eos(const numla_generation_config *g, numla_model_config *cfg);

/* One line saying what was taken from the file ("" when nothing was), e.g.
 * "temperature 0.6, top_p 0.95; stop tokens 1". Local. */
void numla_generation_config_describe(const numla_generation_config *g, char *buf, size_t n);

#endif
