/* tests/fuzz/fuzz_tokenizer.c — fuzz target for the tokenizer.json loader (engine/text/). The
 * loader takes a model directory, so each input is written as tokenizer.json into a private
 * temporary directory and loaded from there. Any input must fail with a message, or give a
 * tokenizer whose ids stay inside its vocabulary: encoding a fixed text and the input's own
 * first bytes gives ids in [0, vocab_size) that decode again; else abort.
 * Linked into numla_unit as well (nothing calls it there); -DNUMLA_FUZZ=ON: libFuzzer. */
#include "engine/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"

void numla_fuzz_tokenizer_run(const uint8_t *data, size_t size);

static void fuzz_tokenizer_die(const char *what)
{
    fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    abort();
}

static numla_fuzz_file fuzz_tokenizer_dir_ = {.target = "fuzz_tokenizer", .tag = "tok"};

static void fuzz_tokenizer_check_(numla_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (numla_tokenizer_encode(t, text, len, 1, &ids, &n) != NUMLA_STATUS_OK) {
        free(ids);
        if (!numla_error_message()[0])
            fuzz_tokenizer_die("encode failed without a message");
        return;
    }
    int64_t vocab = numla_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            fuzz_tokenizer_die("encode gave an id outside the vocabulary");
    char *back = NULL;
    size_t blen = 0;
    if (numla_tokenizer_decode(t, ids, n, 0, &back, &blen) != NUMLA_STATUS_OK)
        fuzz_tokenizer_die("ids from encode do not decode");
    free(back);
    free(ids);
}

void numla_fuzz_tokenizer_run(const uint8_t *data, size_t size)
{
    char path[300];
    numla_fuzz_file_write(&fuzz_tokenizer_dir_, "tokenizer.json", data, size, path, sizeof path);
    numla_tokenizer *t = NULL;
    if (numla_tokenizer_load(fuzz_tokenizer_dir_.dir, &t) != NUMLA_STATUS_OK) {
        if (!numla_error_message()[0])
            fuzz_tokenizer_die("failure without a message");
        return;
    }
    static const char text[] = "Hello, world! 123 héllo\n\t  <|end|> 你好";
    fuzz_tokenizer_check_(t, text, sizeof text - 1);
    fuzz_tokenizer_check_(t, (const char *)data, size < 64 ? size : 64);
    numla_tokenizer_destroy(&t);
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_tokenizer_run(data, size);
    return 0;
}
#endif
