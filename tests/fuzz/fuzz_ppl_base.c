/* tests/fuzz/fuzz_ppl_base.c — fuzz target for the reader of `numla perplexity`'s base files
 * (engine/serving/perplexity.c, numla_ppl_base_*). Any input must be refused with a message
 * naming the file, or open with a header whose sizes account for every byte; then every row is
 * read in order: each read either fails with a message (a corrupt row or chunk) or gives a
 * scale and minimum within range; else abort.
 * Linked into numla_unit as well (test_ppl_base_fuzz feeds it mutations); -DNUMLA_FUZZ=ON:
 * libFuzzer. */
#define _GNU_SOURCE /* fmemopen */
#include "engine/serving/perplexity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int numla_fuzz_ppl_base_run(const uint8_t *data, size_t size);

static void fuzz_ppl_base_die(const char *what)
{
    fprintf(stderr, "fuzz_ppl_base: %s\n", what);
    abort();
}

/* 1 when the input opened and every row read back, 0 when it was refused with a message. */
int numla_fuzz_ppl_base_run(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        fuzz_ppl_base_die("fmemopen failed");
    numla_ppl_base *b = NULL;
    if (numla_ppl_base_open(f, "fuzz.kld", &b) != NUMLA_STATUS_OK) {
        fclose(f);
        if (!strstr(numla_error_message(), "fuzz.kld"))
            fuzz_ppl_base_die("refused without naming the file");
        return 0;
    }
    const numla_ppl_base_header *h = numla_ppl_base_get_header(b);
    const int32_t R = numla_ppl_base_rows(h);
    if (h->vocab_size < 2 || R < 1 || h->num_chunks < 1 ||
        (uint64_t)(64 + h->num_chunks * (R * (8 + 2 * h->vocab_size) + 8)) != size)
        fuzz_ppl_base_die("a header that does not account for the file was accepted");
    uint16_t *codes = malloc((size_t)h->vocab_size * sizeof *codes);
    if (!codes)
        fuzz_ppl_base_die("no memory");
    int ok = 1;
    for (int64_t c = 0; c < h->num_chunks && ok; c++)
        for (int32_t r = 0; r < R; r++) {
            float scale = 0, minlp = 0;
            if (numla_ppl_base_read_row(b, c, r, &scale, &minlp, codes) != NUMLA_STATUS_OK) {
                if (!strstr(numla_error_message(), "fuzz.kld"))
                    fuzz_ppl_base_die("a row refused without naming the file");
                ok = 0;
                break;
            }
            if (!isfinite(scale) || !isfinite(minlp) || scale < 0 || minlp > 0)
                fuzz_ppl_base_die("a row out of range was accepted");
        }
    /* reading a row twice is refused, never read again */
    float scale, minlp;
    if (ok && numla_ppl_base_read_row(b, 0, 0, &scale, &minlp, codes) == NUMLA_STATUS_OK)
        fuzz_ppl_base_die("a row read twice");
    free(codes);
    numla_ppl_base_close(&b);
    fclose(f);
    return ok;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_ppl_base_run(data, size);
    return 0;
}
#endif
