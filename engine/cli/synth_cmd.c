/* engine/cli/synth_cmd.c — `numla synth`: the command line of the synthetic checkpoint writer
 * (engine/synth/synth.h). Not collective. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/status.h"
#include "engine/cli/cli.h"
#include "engine/synth/synth.h"

static int numla_synth_usage(FILE *f)
{
    fprintf(f, "usage: numla synth --preset PRESET --out DIR [--layers N]\n"
               "                   [--seed S] [--dtype bf16|f32] [--experts N] [--shard-mb MB]\n"
               "                   [--tokenizer DIR (copy its tokenizer.json; vocab follows it)\n"
               "                    | --tokenizer synthetic (the preset's vocab_size of synthetic\n"
               "                    byte-level BPE tokens, as `numla bench grammar` uses; a\n"
               "                    directory of that name: ./synthetic)]\n"
               "                   [--weights bf16|fp8|int8 [--keep-lm-head]] [--mtp on|off|csa|hca]\n"
               "  --weights fp8   linear weights as DeepSeek-V3 publishes them (F8_E4M3 +\n"
               "                  weight_scale_inv per 128x128 block; lm_head stays --dtype)\n"
               "                  (v4-flash, v4-pro, tiny-v4: DeepSeek-V4's published FP8 + FP4,\n"
               "                  E8M0 .scale tensors, FP4 routed experts)\n"
               "  --weights int8  SGLang w8a8_int8 (I8 + weight_scale per row; lm_head too\n"
               "                  unless --keep-lm-head)\n"
               "  PRESET          tiny, tiny-v3, v2-lite, v3, kimi-k2, tiny-kimi, v32\n"
               "                  (DeepSeek-V3.2), glm5 (GLM-5), tiny-v32, tiny-glm5, v4-flash,\n"
               "                  v4-pro (DeepSeek-V4; DeepSeek's tensor names), tiny-v4\n"
               "  --mtp on|off    write the multi-token-prediction layer (layer N of N\n"
               "                  layers; default: as the preset's model ships it: v3, v32, glm5)\n"
               "  --mtp csa|hca   (v4-flash, v4-pro, tiny-v4) the layer with CSA (rate 4) or HCA\n"
               "                  (rate 128) attention instead of V4-Flash's sliding window\n"
               "Writes config.json and deterministic random weights (HF DeepSeek names).\n");
    return f == stdout ? 0 : 2;
}

static int numla_synth_parse_i64(const char *s, int64_t lo, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || !end || *end || end == s || v < lo)
        return 0;
    *out = v;
    return 1;
}

static int numla_synth_main(int argc, char **argv)
{
    numla_synth_options opt = {.dtype = NUMLA_DTYPE_BF16, .seed = 0, .progress = isatty(2)};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return numla_synth_usage(stdout);
        if (!strcmp(a, "--keep-lm-head")) {
            opt.keep_lm_head = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "numla synth: %s needs a value\n", a);
            return numla_synth_usage(stderr);
        }
        i++;
        if (!strcmp(a, "--preset"))
            opt.preset = v;
        else if (!strcmp(a, "--out"))
            opt.out_dir = v;
        else if (!strcmp(a, "--layers") && numla_synth_parse_i64(v, 1, &x) && x < 100000)
            opt.layers = (int32_t)x;
        else if (!strcmp(a, "--experts") && numla_synth_parse_i64(v, 1, &x) && x < 100000)
            opt.experts = (int32_t)x;
        else if (!strcmp(a, "--seed") && numla_synth_parse_i64(v, 0, &x))
            opt.seed = (uint64_t)x;
        else if (!strcmp(a, "--shard-mb") && numla_synth_parse_i64(v, 1, &x) && x < (1ll << 40))
            opt.shard_bytes = x << 20;
        else if (!strcmp(a, "--weights") && !strcmp(v, "bf16"))
            opt.weights = NUMLA_QCKPT_NONE;
        else if (!strcmp(a, "--weights") && numla_qckpt_format_parse(v, &opt.weights))
            continue;
        else if (!strcmp(a, "--mtp") && (!strcmp(v, "on") || !strcmp(v, "off")))
            opt.mtp = !strcmp(v, "on") ? 1 : -1;
        else if (!strcmp(a, "--mtp") && (!strcmp(v, "csa") || !strcmp(v, "hca")))
            opt.mtp = 1, opt.mtp_ratio = !strcmp(v, "csa") ? 4 : 128;
        else if (!strcmp(a, "--tokenizer") && !strcmp(v, "synthetic"))
            opt.synthetic_tokenizer = 1;
        else if (!strcmp(a, "--tokenizer"))
            opt.tokenizer_dir = v;
        else if (!strcmp(a, "--dtype") && (!strcmp(v, "bf16") || !strcmp(v, "f32")))
            opt.dtype = !strcmp(v, "f32") ? NUMLA_DTYPE_F32 : NUMLA_DTYPE_BF16;
        else {
            fprintf(stderr, "numla synth: bad option %s %s\n", a, v);
            return numla_synth_usage(stderr);
        }
    }
    if (!opt.preset || !opt.out_dir)
        return numla_synth_usage(stderr);
    const double t0 = numla_now_s();
    int64_t bytes = 0;
    numla_status s = numla_synth_write(&opt, &bytes);
    const double sec = numla_now_s() - t0;
    if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla synth: %s: %s\n%s", numla_status_name(s), numla_error_message(),
                numla_error_trace());
        return 1;
    }
    printf("synth: wrote %s (preset %s, %.3f GB of weights) in %.1f s (%.0f MB/s)\n", opt.out_dir,
           opt.preset, (double)bytes * 1e-9, sec, (double)bytes * 1e-6 / (sec + 1e-9));
    return 0;
}

NUMLA_CLI_COMMAND("synth", numla_synth_main, "write a synthetic DeepSeek model (config + weights)")
