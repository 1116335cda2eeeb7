/* engine/cli/engine_opts.c — the serving options `numla run` and `numla serve` share (see
 * engine_opts.h). */
#define _GNU_SOURCE /* CPU_COUNT, sched_getaffinity */
#include "engine/cli/engine_opts.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "engine/cli/generation_config.h"
#include "engine/cli/stop.h"
#include "engine/model/kv_cache.h"

/* --threads above this many per CPU of the allowed set is refused */
#define ENGINE_OPTS_THREADS_PER_CPU 8

void numla_cli_engine_opts_default(numla_cli_engine_opts *o)
{
    *o = (numla_cli_engine_opts){.block_size = 0, .prefill_chunk = 512,
                                 .max_batch_tokens = 2048, .max_seqs = 64,
                                 .kv_dtype = NUMLA_DTYPE_BF16, .index_dtype = -1,
                                 .weights = numla_weights_options_default(),
                                 .generation_config = 1};
    numla_sampling_params_default(&o->sampling_defaults);
}

void numla_cli_engine_opts_usage(FILE *f, int indent)
{
    fprintf(f,
            "%*s[--threads N] [--max-context N (default: the model's)]\n"
            "%*s[--max-batch-tokens N (2048)] [--max-seqs N (64)]\n"
            "%*s[--prefill-chunk N (512)] [--kv-memory GiB | --kv-blocks N]\n"
            "%*s[--kv-dtype bf16|f16|f32] [--block-size N (16; DeepSeek-V4: 128)]\n"
            "%*s[--index-keys bf16|f16|f32|i8 (sparse-attention models; default: as --kv-dtype)]\n"
            "%*s[--weights bf16|int8|fp8|q8_0|q4_0|q4_k (default: as the checkpoint) [--keep-lm-head]]\n"
            "%*s[--no-prefix-cache (default: a repeated prompt prefix is computed once)]\n"
            "%*s[--linear-act f32|bf16|q8 (bf16 linears' activations; default f32, fp32-class;\n"
            "%*s q8: DeepSeek-V4's FP4 experts and GGUF blocks on int8 activations, as llama.cpp)]\n"
            "%*s[--generation-config auto|none (auto: generation_config.json's EOS ids stop,\n"
            "%*s its temperature/top_p/top_k are the requests' defaults)]\n"
            "%*s[--speculative mtp[:K] (draft K tokens (1-%d, default 2) with the model's MTP\n"
            "%*s layer, verified in one step; default off)]\n"
            "%*s[--mtp-model FILE (a deepseek4 GGUF model's MTP layer: the mtp-*.gguf file\n"
            "%*s llama.cpp's convert_hf_to_gguf.py --mtp writes)]\n",
            indent, "", indent, "", indent, "", indent, "", indent, "", indent, "", indent, "",
            indent, "", indent + 2, "", indent, "", indent + 2, "", indent, "", NUMLA_SCHED_MAX_DRAFT,
            indent + 2, "", indent, "", indent + 2, "");
}

int numla_cli_engine_opts_parse(const char *cmd, numla_cli_engine_opts *o, const char *a,
                                const char *v)
{
    char *end = NULL;
    if (!strcmp(a, "--keep-lm-head")) {
        o->weights.keep_lm_head = 1;
        return NUMLA_CLI_OPT_FLAG;
    }
    if (!strcmp(a, "--no-prefix-cache")) {
        o->no_prefix_cache = 1;
        return NUMLA_CLI_OPT_FLAG;
    }
    static const char *const valued[] = {"--model", "--threads", "--max-context", "--block-size",
                                         "--prefill-chunk", "--max-batch-tokens", "--max-seqs",
                                         "--kv-memory", "--kv-blocks", "--kv-dtype", "--weights",
                                         "--index-keys", "--linear-act", "--generation-config",
                                         "--speculative", "--mtp-model"};
    int known = 0;
    for (size_t i = 0; i < sizeof valued / sizeof *valued; i++)
        known |= !strcmp(a, valued[i]);
    if (!known)
        return NUMLA_CLI_OPT_NONE;
    if (!v) {
        fprintf(stderr, "%s: option %s needs a value\n", cmd, a);
        return NUMLA_CLI_OPT_BAD;
    }
    if (!strcmp(a, "--weights")) {
        /* int8 (W8A8, a scale per row), fp8 (e4m3, 128x128 block scales), q8_0 / q4_0 (ggml
         * blocks of 32), q4_k (llama.cpp's Q4_K_M recipe) quantize a bf16/fp16/fp32 checkpoint while loading; bf16 dequantizes
         * an 8-bit one */
        if (!numla_weights_format_parse(v, &o->weights)) {
            char names[128];
            numla_weight_encoding_option_list(NUMLA_ENCODING_AT_LOAD, names, sizeof names);
            fprintf(stderr, "%s: --weights %s is not %s\n", cmd, v, names);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--linear-act")) {
        /* bf16: x rounded to bf16 once for bf16 weights (kernels/linear.h NUMLA_LINEAR_ACT_BF16),
         * as llama.cpp and PyTorch's bf16 models compute */
        /* q8: DeepSeek-V4's block-quantized linears (weights.h qblock_q8_act); the last
         * --linear-act given decides both */
        const int ok = !strcmp(v, "f32") || !strcmp(v, "bf16") || !strcmp(v, "q8");
        if (ok) {
            o->weights.linear_act = !strcmp(v, "bf16") ? NUMLA_LINEAR_ACT_BF16 : NUMLA_LINEAR_ACT_F32;
            o->weights.qblock_q8_act = !strcmp(v, "q8");
        } else {
            fprintf(stderr, "%s: --linear-act %s is not f32, bf16 or q8\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--generation-config")) {
        if (!strcmp(v, "auto"))
            o->generation_config = 1;
        else if (!strcmp(v, "none"))
            o->generation_config = 0;
        else {
            fprintf(stderr, "%s: --generation-config %s is not auto or none\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--speculative")) {
        /* mtp: the model's own multi-token-prediction layer drafts (docs/speculative.md) */
        long k = 2;
        if (strncmp(v, "mtp", 3) || (v[3] && v[3] != ':') ||
            (v[3] == ':' && ((k = strtol(v + 4, &end, 10)) < 1 || k > NUMLA_SCHED_MAX_DRAFT ||
                             end == v + 4 || *end))) {
            fprintf(stderr, "%s: --speculative %s is not mtp or mtp:K with K from 1 to %d\n",
                    cmd, v, NUMLA_SCHED_MAX_DRAFT);
            return NUMLA_CLI_OPT_BAD;
        }
        end = NULL;
        o->spec_k = (int32_t)k;
    } else if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--mtp-model")) {
        o->mtp_model = v;
    } else if (!strcmp(a, "--threads")) {
        long t = strtol(v, &end, 10);
        o->threads = t > INT32_MAX ? INT32_MAX : t < -1 ? -1 : (int)t;
    } else if (!strcmp(a, "--max-context")) {
        o->max_context = strtoll(v, &end, 10);
    } else if (!strcmp(a, "--block-size")) {
        const long b = strtol(v, &end, 10); /* 0 stays the model's default: not a size */
        o->block_size = b < 1 || b > INT32_MAX ? -1 : (int32_t)b;
    } else if (!strcmp(a, "--prefill-chunk")) {
        o->prefill_chunk = (int32_t)strtol(v, &end, 10);
    } else if (!strcmp(a, "--max-batch-tokens")) {
        o->max_batch_tokens = (int32_t)strtol(v, &end, 10);
    } else if (!strcmp(a, "--max-seqs")) {
        o->max_seqs = (int32_t)strtol(v, &end, 10);
    } else if (!strcmp(a, "--kv-memory")) {
        o->kv_memory_gib = strtod(v, &end);
        o->kv_memory_arg = v;
        if (!(o->kv_memory_gib > 0)) {
            fprintf(stderr, "%s: --kv-memory %s must be a positive number of GiB\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--kv-blocks")) {
        o->kv_blocks = strtoll(v, &end, 10);
        if (o->kv_blocks < 1) {
            fprintf(stderr, "%s: --kv-blocks %s must be positive\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--kv-dtype")) {
        if (!strcmp(v, "bf16"))
            o->kv_dtype = NUMLA_DTYPE_BF16;
        else if (!strcmp(v, "f16"))
            o->kv_dtype = NUMLA_DTYPE_F16;
        else if (!strcmp(v, "f32"))
            o->kv_dtype = NUMLA_DTYPE_F32;
        else {
            fprintf(stderr, "%s: --kv-dtype %s is not bf16, f16 or f32\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    } else if (!strcmp(a, "--index-keys")) {
        if (!strcmp(v, "bf16"))
            o->index_dtype = NUMLA_DTYPE_BF16;
        else if (!strcmp(v, "f16"))
            o->index_dtype = NUMLA_DTYPE_F16;
        else if (!strcmp(v, "f32"))
            o->index_dtype = NUMLA_DTYPE_F32;
        else if (!strcmp(v, "i8"))
            o->index_dtype = NUMLA_DTYPE_I8;
        else {
            fprintf(stderr, "%s: --index-keys %s is not bf16, f16, f32 or i8\n", cmd, v);
            return NUMLA_CLI_OPT_BAD;
        }
    }
    if (end && *end) {
        fprintf(stderr, "%s: option %s: '%s' is not a number\n", cmd, a, v);
        return NUMLA_CLI_OPT_BAD;
    }
    return NUMLA_CLI_OPT_VALUE;
}

int numla_cli_engine_opts_next(const char *cmd, numla_cli_engine_opts *o, int argc, char **argv,
                               int *i, const char **value)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const int r = numla_cli_engine_opts_parse(cmd, o, a, v);
    if (r == NUMLA_CLI_OPT_VALUE)
        ++*i;
    if (r != NUMLA_CLI_OPT_NONE)
        return r;
    if (!v) {
        fprintf(stderr, "%s: option %s needs a value\n", cmd, a);
        return NUMLA_CLI_OPT_BAD;
    }
    ++*i;
    *value = v;
    return NUMLA_CLI_OPT_NONE;
}

int numla_cli_engine_opts_check(const char *cmd, const numla_cli_engine_opts *o)
{
    if (o->threads < 0 || o->max_context < 0 || o->block_size < 0 || o->prefill_chunk < 1 ||
        o->max_batch_tokens < 1 || o->max_seqs < 1) {
        fprintf(stderr, "%s: --threads/--max-context/--block-size/--prefill-chunk/"
                        "--max-batch-tokens/--max-seqs must be positive\n", cmd);
        return 2;
    }
    if (o->threads > 0) {
        /* OpenMP thread stacks and per-thread scratch: a typo like 100000 must not reach them */
        cpu_set_t set;
        int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
        if (cpus < 1)
            cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
        const int most = ENGINE_OPTS_THREADS_PER_CPU * (cpus > 0 ? cpus : 1);
        if (o->threads > most) {
            fprintf(stderr, "%s: --threads %d is more than %d (%d times the %d CPU%s this "
                            "process may run on)\n", cmd, o->threads, most,
                    ENGINE_OPTS_THREADS_PER_CPU, cpus, cpus == 1 ? "" : "s");
            return 2;
        }
    }
    if (o->kv_memory_gib > 0) {
        /* more than the machine has can only be a mistake (the engine also checks the pool
         * against the free memory of the rank's node, shared with the other ranks there) */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const double have = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0.0;
        if (have > 0 && o->kv_memory_gib * 1073741824.0 > have) {
            fprintf(stderr, "%s: --kv-memory %s GiB is more than the %.1f GiB of memory "
                            "this machine has\n", cmd, o->kv_memory_arg, have / 1073741824.0);
            return 2;
        }
    }
    if (o->max_batch_tokens < o->max_seqs) {
        fprintf(stderr, "%s: --max-batch-tokens %d is below --max-seqs %d\n", cmd,
                o->max_batch_tokens, o->max_seqs);
        return 2;
    }
    if (o->kv_memory_gib > 0 && o->kv_blocks > 0) {
        fprintf(stderr, "%s: give --kv-memory or --kv-blocks, not both\n", cmd);
        return 2;
    }
    return -1;
}

numla_status numla_cli_engine_create(const numla_cli_engine_opts *o, const numla_settings *set,
                                     numla_comm *comm, numla_engine **eng)
{
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(set, &eo);
    eo.num_threads = o->threads;
    eo.block_size = o->block_size;
    eo.kv_dtype = o->kv_dtype;
    eo.index_dtype = o->index_dtype;
    eo.num_blocks = o->kv_blocks;
    eo.kv_memory_bytes = (int64_t)(o->kv_memory_gib * 1073741824.0);
    eo.kv_memory_fraction = NUMLA_KV_MEMORY_FRACTION;
    eo.max_seqs = o->max_seqs;
    eo.max_context = o->max_context;
    eo.weights = o->weights;
    eo.mtp = o->spec_k > 0;
    eo.prefix_cache = !o->no_prefix_cache;
    eo.mtp_model = o->mtp_model;
    return numla_engine_create(comm, o->model, &eo, eng);
}

void numla_cli_engine_opts_fit(numla_cli_engine_opts *o, const numla_model_config *cfg)
{
    if (o->max_context == 0 || o->max_context > cfg->max_position_embeddings)
        o->max_context = cfg->max_position_embeddings;
}

numla_status numla_cli_engine_opts_model(const char *cmd, numla_cli_engine_opts *o,
                                         numla_model_config *cfg)
{
    if (o->mtp_model && o->spec_k == 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: --mtp-model %s is the MTP layer's file for "
                   "--speculative mtp[:K], which is not given", cmd, o->mtp_model);
    numla_cli_engine_opts_fit(o, cfg);
    if (cfg->v4.enabled && o->spec_k > 0) {
        /* a verify step's K + 1 rows are undone through a snapshot of what they overwrite
         * (docs/design.md §5.9): at most 16 rows, and no more than a compressor's 2·rate slots */
        int64_t most = 16;
        const int64_t nl = cfg->v4.num_layers + (cfg->v4.num_nextn_predict_layers > 0 &&
                                                  cfg->v4.num_layers < NUMLA_V4_MAX_LAYERS);
        for (int64_t l = 0; l < nl; l++) { /* the MTP layer's too */
            const int64_t r = cfg->v4.attn[l] == NUMLA_V4_ATTN_CSA   ? cfg->v4.csa_rate
                              : cfg->v4.attn[l] == NUMLA_V4_ATTN_HCA ? cfg->v4.hca_rate : 8;
            most = 2 * r < most ? 2 * r : most;
        }
        if (o->spec_k + 1 > most)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: --speculative mtp:%d on deepseek_v4: a "
                       "verify step's %d rows exceed the %lld a sequence's cache can roll back "
                       "(twice the smallest compress rate); use mtp:%lld or less", cmd,
                       (int)o->spec_k, (int)o->spec_k + 1, (long long)most, (long long)most - 1);
    }
    numla_sampling_params_default(&o->sampling_defaults);
    if (!o->generation_config)
        return NUMLA_STATUS_OK;
    numla_generation_config g;
    NUMLA_CHECK(numla_generation_config_load(o->model, cfg->vocab_size, &g));
    numla_generation_config_defaults(&g, &o->sampling_defaults);
    numla_generation_config_add_eos(&g, cfg);
    char what[512];
    numla_generation_config_describe(&g, what, sizeof what);
    if (what[0])
        NUMLA_INFO("%s: %s/generation_config.json: %s (defaults for requests that do not set "
                   "them; --generation-config none ignores the file)", cmd, o->model, what);
    return NUMLA_STATUS_OK;
}

numla_sched_options numla_cli_sched_options(const numla_cli_engine_opts *o,
                                            const numla_model_config *cfg)
{
    /* the prefix cache's salt: the model directory and the weights' format (FNV-1a) */
    uint64_t salt = 0xcbf29ce484222325ULL;
    for (const char *c = o->model ? o->model : ""; *c; c++)
        salt = (salt ^ (unsigned char)*c) * 0x100000001b3ULL;
    salt = (salt ^ (uint64_t)(o->weights.format + 1)) * 0x100000001b3ULL;
    salt = (salt ^ (uint64_t)o->weights.keep_lm_head) * 0x100000001b3ULL;
    return (numla_sched_options){.max_batch_tokens = o->max_batch_tokens,
                                 .max_seqs = o->max_seqs, .prefill_chunk = o->prefill_chunk,
                                 .vocab_size = cfg->vocab_size, .num_eos = cfg->num_eos,
                                 .eos_token_ids = cfg->eos_token_ids,
                                 .no_prefix_cache = o->no_prefix_cache, .prefix_salt = salt,
                                 .prefix_stride = cfg->v4.enabled ? numla_v4_prefix_stride(cfg, 1)
                                                                  : 0,
                                 .spec_k = o->spec_k,
                                 .mtp_exec = o->spec_k > 0 ? numla_cli_engine_mtp_exec : NULL};
}

numla_status numla_cli_engine_exec(void *ctx, const numla_step *st, float *logits)
{
    return numla_engine_step(ctx, st, logits);
}

numla_status numla_cli_engine_mtp_exec(void *ctx, const numla_step *st,
                                       const int32_t *hidden_rows, float *logits)
{
    return numla_engine_mtp_step(ctx, st, hidden_rows, logits);
}

int numla_cli_fail(const char *cmd)
{
    fprintf(stderr, "%s: %s\n%s", cmd, numla_error_message(), numla_error_trace());
    return 1;
}

int numla_cli_engine_serve(const numla_cli_engine_opts *o, const numla_settings *set,
                           const numla_comm_session *mpi, const numla_cli_front *f)
{
    const int rank = numla_comm_rank(mpi->comm);
    if (rank != 0)
        numla_cli_stop_ignore(); /* rank 0 decides when to stop and releases the others */
    int32_t early = rank == 0 ? f->prepare(f->ctx) : -1;
    if (numla_comm_size(mpi->comm) > 1 &&
        numla_comm_bcast(mpi->comm, &early, sizeof early, 0) != NUMLA_STATUS_OK)
        early = numla_cli_fail(f->cmd);
    numla_engine *eng = NULL;
    const double t_load = numla_now_s();
    int rc;
    if (early >= 0)
        rc = early;
    else if (numla_cli_engine_create(o, set, mpi->comm, &eng) != NUMLA_STATUS_OK)
        rc = numla_cli_fail(f->cmd);
    else if (rank != 0)
        rc = numla_engine_worker_loop(eng) == NUMLA_STATUS_OK ? 0 : numla_cli_fail(f->cmd);
    else
        rc = f->serve(f->ctx, eng, mpi->comm, t_load);
    if (rank == 0)
        f->close(f->ctx, &rc);
    numla_engine_destroy(&eng); /* rank 0: releases the workers */
    return rc;
}
