/* engine/cli/quantize_cmd.c — `numla quantize`: a bf16/fp16/fp32 checkpoint rewritten in a
 * published 8-bit format (engine/synth/quantized_checkpoint.h). Not collective. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/cli/cli.h"
#include "engine/synth/quantized_checkpoint.h"

static int numla_quantize_usage(FILE *f)
{
    fprintf(f,
            "usage: numla quantize --model DIR --to int8|fp8 --out DIR [--keep-lm-head]\n"
            "                      [--shard-mb MB]\n"
            "Writes the checkpoint with 8-bit linear weights and their scale tensors, everything\n"
            "else in its own dtype:\n"
            "  fp8   DeepSeek-V3's format: F8_E4M3 weights, weight_scale_inv per 128x128 block;\n"
            "        lm_head stays bf16, as DeepSeek publishes it (other engines load the files)\n"
            "  int8  SGLang's w8a8_int8: I8 weights, weight_scale per output row; lm_head is\n"
            "        quantized too unless --keep-lm-head\n");
    return f == stdout ? 0 : 2;
}

static int numla_quantize_main(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    numla_qckpt_format f = NUMLA_QCKPT_NONE;
    int keep_lm_head = 0;
    int64_t shard = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return numla_quantize_usage(stdout);
        if (!strcmp(a, "--keep-lm-head")) {
            keep_lm_head = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "numla quantize: %s needs a value\n", a);
            return numla_quantize_usage(stderr);
        }
        i++;
        char *end = NULL;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--to") && numla_qckpt_format_parse(v, &f))
            continue;
        else if (!strcmp(a, "--shard-mb") && (errno = 0, shard = strtoll(v, &end, 10), 1) &&
                 !errno && end && !*end && shard > 0 && shard < (1ll << 40))
            shard <<= 20;
        else {
            fprintf(stderr, "numla quantize: bad option %s %s\n", a, v);
            return numla_quantize_usage(stderr);
        }
    }
    if (!model || !out || f == NUMLA_QCKPT_NONE)
        return numla_quantize_usage(stderr);
    int64_t bytes = 0;
    numla_status s = numla_qckpt_quantize_model(model, out, f, keep_lm_head, shard, &bytes);
    if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla quantize: %s: %s\n%s", numla_status_name(s), numla_error_message(),
                numla_error_trace());
        return 1;
    }
    printf("quantize: wrote %s (%s, %.3f GB of weights)\n", out,
           f == NUMLA_QCKPT_FP8 ? "fp8" : "int8", (double)bytes * 1e-9);
    return 0;
}

NUMLA_CLI_COMMAND("quantize", numla_quantize_main,
                  "rewrite a bf16/fp16/fp32 checkpoint with fp8 or int8 weights")
