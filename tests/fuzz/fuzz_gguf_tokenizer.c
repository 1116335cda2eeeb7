/* tests/fuzz/fuzz_gguf_tokenizer.c — fuzz target for a GGUF file's tokenizer keys as
 * engine/cli/model_text.c maps them (the gpt2 vocabulary with the deepseek-v3 / deepseek-llm
 * pre-tokenizers, and kimi-k2's vocabulary turned back into tiktoken ranks and specials).
 *
 * The input bytes become `model.gguf` in a private temporary directory, whose tokenizer is then
 * loaded with numla_model_text_tokenizer. Any status but OK, FORMAT or UNSUPPORTED, or a
 * failed load that still returns a tokenizer, aborts; a loaded one must encode a fixed mixed
 * text to ids inside its vocabulary (or refuse it with an error) and decode them again. Built
 * two ways:
 *   * with -DNUMLA_FUZZ=ON (clang): build/fuzz_gguf_tokenizer, a libFuzzer binary;
 *   * always: linked into numla_unit, whose model_text suite feeds it seeded mutations of the
 *     tokenizer goldens, so CI exercises the same checks without clang.
 */
#define _GNU_SOURCE
#include "engine/cli/model_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"

numla_status numla_fuzz_gguf_tokenizer_run(const uint8_t *data, size_t size);

static numla_fuzz_file numla_fuzz_gtok_dir_ = {.target = "fuzz_gguf_tokenizer", .tag = "gtok"};
static char numla_fuzz_gtok_path_[300];

static void numla_fuzz_gtok_die(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_gguf_tokenizer: %s (%s)\n", what, msg);
    abort();
}

numla_status numla_fuzz_gguf_tokenizer_run(const uint8_t *data, size_t size)
{
    numla_fuzz_file_write(&numla_fuzz_gtok_dir_, "model.gguf", data, size, numla_fuzz_gtok_path_,
                          sizeof numla_fuzz_gtok_path_);

    numla_tokenizer *t = NULL;
    numla_status s = numla_model_text_tokenizer(numla_fuzz_gtok_path_, 0, &t);
    if (s != NUMLA_STATUS_OK) {
        if (t)
            numla_fuzz_gtok_die("failed load returned a tokenizer", numla_error_message());
        if (s != NUMLA_STATUS_FORMAT && s != NUMLA_STATUS_UNSUPPORTED)
            numla_fuzz_gtok_die("unexpected status", numla_error_message());
        numla_error_clear();
        return s;
    }
    static const char text[] = "Hello, world! It's 2026: 12345 \xe4\xbd\xa0\xe5\xa5\xbd "
                               "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82\n\n  tabs\tand spaces   ";
    int32_t *ids = NULL;
    int64_t n = 0;
    for (int special = 0; special < 2; special++) {
        if (numla_tokenizer_encode(t, text, sizeof text - 1, special, &ids, &n) == NUMLA_STATUS_OK) {
            const int64_t V = numla_tokenizer_vocab_size(t);
            for (int64_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= V)
                    numla_fuzz_gtok_die("encode gave an id outside the vocabulary", numla_fuzz_gtok_path_);
            char *out = NULL;
            size_t len = 0;
            if (numla_tokenizer_decode(t, ids, n, 0, &out, &len) != NUMLA_STATUS_OK)
                numla_fuzz_gtok_die("decode of encoded ids failed", numla_error_message());
            free(out);
        }
        free(ids);
        ids = NULL;
        numla_error_clear();
    }
    numla_tokenizer_destroy(&t);
    return s;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_gguf_tokenizer_run(data, size);
    return 0;
}
#endif
