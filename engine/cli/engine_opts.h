/* engine/cli/engine_opts.h — the serving options `numla run` and `numla serve` share: the model,
 * threads, context, batching (--max-batch-tokens, --max-seqs, --prefill-chunk) and the KV pool
 * (--kv-memory | --kv-blocks, --kv-dtype, --block-size) and the weights' format (--weights,
 * --keep-lm-head), --no-prefix-cache, --generation-config, --speculative mtp[:K]; their parsing, their checks and the
 * engine and scheduler options they make. Messages name the command (cmd, e.g. "numla run").
 * The benchmarks parse the ones they share through the same parser (bench/bench_opts.h).
 * Not collective (numla_cli_engine_create is: see numla_engine_create).
 */
#ifndef NUMLA_ENGINE_CLI_ENGINE_OPTS_H
#define NUMLA_ENGINE_CLI_ENGINE_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "common/dtype.h"
#include "common/status.h"
#include "engine/cli/settings.h"
#include "engine/model/config.h"
#include "engine/parallel/engine.h"
#include "engine/serving/sampler.h"
#include "engine/serving/scheduler.h"

typedef struct numla_cli_engine_opts {
    const char *model;
    const char *kv_memory_arg;  /* --kv-memory as given, for messages */
    int threads;                /* 0: the engine's default */
    int64_t max_context;        /* 0: the model's */
    int32_t block_size;         /* 0: the model's (numla_kv_default_block_size) */
    int32_t prefill_chunk, max_batch_tokens, max_seqs;
    double kv_memory_gib;       /* 0: the default fraction of free memory */
    int64_t kv_blocks;          /* 0: from the memory */
    numla_dtype kv_dtype;
    int index_dtype;            /* --index-keys: a numla_dtype, -1 (default): as kv_dtype */
    numla_weights_options weights; /* --weights bf16|int8|fp8, --keep-lm-head */
    int no_prefix_cache;        /* --no-prefix-cache */
    int generation_config;      /* --generation-config auto (1, default) | none (0) */
    int32_t spec_k;             /* --speculative mtp[:K]: K draft tokens; 0 (default): off */
    const char *mtp_model;      /* --mtp-model FILE: a deepseek4 GGUF model's MTP layer, the file
                                   llama.cpp's convert_hf_to_gguf.py --mtp writes; NULL: none */
    numla_sampling_params sampling_defaults; /* a request's defaults: numla_sampling_params_default
                                                with generation_config.json's sampling fields
                                                (numla_cli_engine_opts_model) */
} numla_cli_engine_opts;

/* Defaults: block 16, prefill chunk 512, 2048 batch tokens, 64 sequences, bf16 KV, weights as
 * the checkpoint stores them. */
void numla_cli_engine_opts_default(numla_cli_engine_opts *o);

/* The usage lines of these options (indented by `indent` spaces). */
void numla_cli_engine_opts_usage(FILE *f, int indent);

/* What numla_cli_engine_opts_parse did with an argument. */
enum {
    NUMLA_CLI_OPT_NONE = 0,  /* not one of these options */
    NUMLA_CLI_OPT_VALUE = 1, /* taken with its value v (skip v) */
    NUMLA_CLI_OPT_BAD = 2,   /* a bad or missing value: the message is printed, exit 2 */
    NUMLA_CLI_OPT_FLAG = 3,  /* a flag, taken alone (v untouched) */
};
/* Option a, with v the next argument (NULL at the end). */
int numla_cli_engine_opts_parse(const char *cmd, numla_cli_engine_opts *o, const char *a,
                                const char *v);
/* One step of a subcommand's option loop at argv[*i]: one of these options is taken (*i moves
 * past its value; VALUE or FLAG), a bad one is BAD (message printed), and any other option is
 * NONE with *value its value (*i moves past it; a missing value is BAD). */
int numla_cli_engine_opts_next(const char *cmd, numla_cli_engine_opts *o, int argc, char **argv,
                               int *i, const char **value);

/* The checks after parsing (--model given, positive sizes, --threads and --kv-memory within the
 * machine, --max-batch-tokens >= --max-seqs, one KV sizing). Returns -1 when all is well, else
 * the exit code 2 (the message printed). */
int numla_cli_engine_opts_check(const char *cmd, const numla_cli_engine_opts *o);

/* The engine on the ranks of comm with these options. Collective. */
numla_status numla_cli_engine_create(const numla_cli_engine_opts *o, const numla_settings *set,
                                     numla_comm *comm, numla_engine **eng);

/* Clamp o->max_context to the model's (0 or more than max_position_embeddings: the model's). */
void numla_cli_engine_opts_fit(numla_cli_engine_opts *o, const numla_model_config *cfg);

/* Once the model's config is read: numla_cli_engine_opts_fit, then (with --generation-config
 * auto) the model's generation_config.json (engine/cli/generation_config.h): its EOS ids join
 * cfg's (the scheduler's stop tokens, numla_cli_sched_options) and its temperature / top_p /
 * top_k become o->sampling_defaults; what was taken is logged once. A bad file is an error
 * naming the file and the field. Local (rank 0). */
numla_status numla_cli_engine_opts_model(const char *cmd, numla_cli_engine_opts *o,
                                         numla_model_config *cfg);

/* The scheduler's options for these settings and this model (stop_check left NULL). */
numla_sched_options numla_cli_sched_options(const numla_cli_engine_opts *o,
                                            const numla_model_config *cfg);

/* A serving front end (numla run, numla serve) as numla_cli_engine_serve runs it. */
typedef struct numla_cli_front {
    const char *cmd; /* "numla run": names the command in error messages */
    void *ctx;
    /* Rank 0, before the model loads: open what can fail early (files, the listening socket).
     * Returns -1 to go on, else the exit code (the message printed). */
    int (*prepare)(void *ctx);
    /* Rank 0 with the engine loaded: serve. Returns the exit code. */
    int (*serve)(void *ctx, numla_engine *eng, numla_comm *comm, double t_load);
    /* Rank 0, last: release what prepare and serve hold; may change *rc. */
    void (*close)(void *ctx, int *rc);
} numla_cli_front;

/* Print "cmd: <error message>" and the traceback; returns the exit code 1. */
int numla_cli_fail(const char *cmd);

/* The ranks of a serving job: the others ignore stop signals and run the engine's worker loop;
 * rank 0 runs f's prepare (every rank gets its verdict, so a bad path ends the job before the
 * model loads), loads the engine, serves, and closes. Returns this rank's exit code.
 * Collective over mpi's communicator. */
int numla_cli_engine_serve(const numla_cli_engine_opts *o, const numla_settings *set,
                           const numla_comm_session *mpi, const numla_cli_front *f);

/* The engine's step as the serving loop's exec (ctx: the numla_engine). Collective. */
numla_status numla_cli_engine_exec(void *ctx, const numla_step *st, float *logits);
/* The engine's MTP step as the scheduler's mtp_exec (ctx: the numla_engine). Collective. */
numla_status numla_cli_engine_mtp_exec(void *ctx, const numla_step *st,
                                       const int32_t *hidden_rows, float *logits);

#endif
