/* tests/fuzz/fuzz_tiktoken.c — fuzz target for the tiktoken.model parser (engine/text/
 * tokenizer_tiktoken.c). Any input must fail with a message, or give a tokenizer whose ids stay
 * inside its vocabulary: encoding a fixed text and the input's own first bytes (when UTF-8)
 * gives ids in [0, vocab_size) that decode again; else abort.
 * Linked into numla_unit as well (test_tiktoken_fuzz feeds it mutations); -DNUMLA_FUZZ=ON:
 * libFuzzer. */
#include "engine/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int numla_fuzz_tiktoken_run(const uint8_t *data, size_t size);

static void fuzz_tiktoken_die(const char *what)
{
    fprintf(stderr, "fuzz_tiktoken: %s\n", what);
    abort();
}

static void fuzz_tiktoken_check_(numla_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (numla_tokenizer_encode(t, text, len, 1, &ids, &n) != NUMLA_STATUS_OK) {
        free(ids);
        if (!numla_error_message()[0])
            fuzz_tiktoken_die("encode failed without a message");
        return;
    }
    int64_t vocab = numla_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            fuzz_tiktoken_die("encode gave an id outside the vocabulary");
    char *back = NULL;
    size_t blen = 0;
    if (numla_tokenizer_decode(t, ids, n, 0, &back, &blen) != NUMLA_STATUS_OK)
        fuzz_tiktoken_die("ids from encode do not decode");
    if (numla_utf8_invalid_offset(text, len) < 0 && (blen != len || memcmp(back, text, len)))
        fuzz_tiktoken_die("decode(encode(text)) is not the text");
    free(back);
    free(ids);
}

/* 1 when the input loaded, 0 when it was refused with a message. */
int numla_fuzz_tiktoken_run(const uint8_t *data, size_t size)
{
    numla_tokenizer *t = NULL;
    if (numla_tokenizer_load_tiktoken_text((const char *)data, size, NULL, 0, NULL, &t) !=
        NUMLA_STATUS_OK) {
        if (!numla_error_message()[0])
            fuzz_tiktoken_die("failure without a message");
        return 0;
    }
    static const char text[] = "Hello, world! 123 héllo\n\t  <|reserved_token_300|> 你好 it's";
    fuzz_tiktoken_check_(t, text, sizeof text - 1);
    fuzz_tiktoken_check_(t, (const char *)data, size < 64 ? size : 64);
    numla_tokenizer_destroy(&t);
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_tiktoken_run(data, size);
    return 0;
}
#endif
