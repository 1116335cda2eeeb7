/* engine/serving/perplexity.h — the arithmetic of `numla perplexity` (docs/quantization.md) with
 * llama.cpp's definitions (its tools/perplexity), and the base file a KL-divergence run compares
 * against.
 *
 * Scoring (llama.cpp's perplexity()): the text's tokens (BOS first when the tokenizer adds one)
 * are cut into num_chunks = num_tokens / ctx non-overlapping chunks of ctx tokens (or the first
 * N of them, llama.cpp's --chunks); each chunk's
 * first token is replaced by BOS (when the tokenizer adds one) and the chunk is run from
 * position 0; rows first = ctx / 2 .. ctx - 2 are scored, row j by the negative log-likelihood
 * of the chunk's original token j + 1. Perplexity = exp(mean NLL) over all scored rows; its
 * uncertainty = PPL * sqrt((mean(NLL²) - mean(NLL)²) / (count - 1)).
 *
 * KL divergence (llama.cpp's --kl-divergence): the base run's log-probabilities of every scored
 * row are stored compressed as llama.cpp stores them: per row a scale and a minimum log-prob
 * (min = max(smallest logit, largest - 16) - logsumexp), and one uint16 code per vocabulary
 * entry, log p = scale * code + min (entries below the cut read as the minimum). Per row:
 *   KLD     = sum over entries with base log p > -16 of p_base * (log p_base - log p)
 *   top-1   the argmax of the logits equals the argmax of the base's decoded log-probs
 *   Δp      = p(token) - p_base(token)
 * and the summary: mean KLD ± its uncertainty, percentiles (linear interpolation on the sorted
 * values, as llama.cpp), the share of equal top-1, RMS Δp = sqrt(mean(Δp²)).
 *
 * Base file (little-endian, version 1; docs/quantization.md):
 *   offset 0   8 bytes "NUMLAKLB"
 *          8   u32 version (1)          12  u32 header bytes (64)
 *         16   i64 vocab_size           24  i32 ctx       28  i32 first (ctx / 2)
 *         32   i64 num_tokens (of the whole tokenized text)
 *         40   i64 num_chunks (at most num_tokens / ctx)
 *         48   u64 tokens_hash (FNV-1a 64 over the token ids as int32 LE)
 *         56   u64 FNV-1a 64 of bytes 0..55
 *         64   num_chunks * (ctx - 1 - first) rows, chunk after chunk, each: f32 scale,
 *              f32 min log-prob, u16 codes[vocab_size]
 *        end   u64 FNV-1a 64 of each chunk's rows (num_chunks of them)
 * The size is exact; a file of another size, another vocabulary, context, text (hash) or chunk
 * count is
 * refused with a message naming the difference, a chunk whose rows do not match its checksum
 * when its last row is read, and a row whose scale or minimum is out of range when it is read.
 *
 * Not collective; a reader or writer is used by one thread at a time.
 */
#ifndef NUMLA_ENGINE_PERPLEXITY_H
#define NUMLA_ENGINE_PERPLEXITY_H

#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

/* ---- one row ---- */

/* Negative log-likelihood of token tok under logits (V): max + log(sum exp(l - max)) - l[tok],
 * the sum of expf terms in double, as llama.cpp's log_softmax. */
double numla_ppl_row_nll(const float *logits, int64_t V, int32_t tok);

/* A row's log-probabilities compressed as llama.cpp does: *scale, *min_log_prob and codes (V). */
void numla_ppl_row_encode(const float *logits, int64_t V, float *scale, float *min_log_prob,
                          uint16_t *codes);

/* One row of a run against the base's compressed row (scale, min_log_prob, codes (V)); tok the
 * scored token. */
typedef struct numla_ppl_kl_row {
    double nll, nll_base;      /* -log p(tok), -log p_base(tok) */
    double kld;                /* KL(base || this) over entries with log p_base > -16 */
    double p_diff;             /* p(tok) - p_base(tok) */
    int same_top;              /* 1: equal argmax */
} numla_ppl_kl_row;
void numla_ppl_kl_compare(const float *logits, int64_t V, float scale, float min_log_prob,
                          const uint16_t *codes, int32_t tok, numla_ppl_kl_row *out);

/* ---- summaries (sums taken in row order) ---- */

/* mean and llama.cpp's uncertainty sqrt((mean(x²) - mean²) / (n - 1)) (0 for n <= 10 or a
 * negative variance). */
void numla_ppl_mean_unc(double sum, double sum2, int64_t n, double *mean, double *unc);

/* llama.cpp's percentile of sorted values (n >= 1): linear interpolation at fraction*(n-1). */
double numla_ppl_percentile(const float *sorted, int64_t n, double fraction);

typedef struct numla_ppl_kl_summary {
    int64_t count;
    double ppl, ppl_unc, ppl_base, ppl_base_unc;
    double ln_ratio, ln_ratio_unc;         /* mean ln(PPL/PPL(base)) and its uncertainty */
    double kld_mean, kld_unc, kld_max, kld_p99, kld_p999, kld_p95, kld_p90, kld_median;
    double same_top, same_top_unc;         /* fractions (0..1) */
    double p_diff_mean, p_diff_rms, p_diff_rms_unc, p_diff_max_abs;
} numla_ppl_kl_summary;
/* The summary of n >= 1 rows. NO_MEMORY only. */
numla_status numla_ppl_kl_summarize(const numla_ppl_kl_row *rows, int64_t n,
                                    numla_ppl_kl_summary *out);

/* FNV-1a 64 of n token ids (as int32 little-endian bytes). */
uint64_t numla_ppl_tokens_hash(const int32_t *tokens, int64_t n);

/* ---- the base file ---- */

typedef struct numla_ppl_base_header {
    int64_t vocab_size;
    int32_t ctx, first;
    int64_t num_tokens, num_chunks;
    uint64_t tokens_hash;
} numla_ppl_base_header;

#define NUMLA_PPL_BASE_MAX_VOCAB ((int64_t)1 << 24)

/* Rows per chunk: ctx - 1 - first. */
int32_t numla_ppl_base_rows(const numla_ppl_base_header *h);

typedef struct numla_ppl_base numla_ppl_base;

/* Read and check a base file's header, size and chunk checksums from f (borrowed: must stay
 * open, seekable; name: for messages). FORMAT naming the problem for anything malformed. */
numla_status numla_ppl_base_open(FILE *f, const char *name, numla_ppl_base **out);
void numla_ppl_base_close(numla_ppl_base **b);
const numla_ppl_base_header *numla_ppl_base_get_header(const numla_ppl_base *b);
/* Row `row` of chunk `chunk` into *scale, *min_log_prob, codes (vocab_size). Each chunk's rows
 * are read in order, once (its checksum is checked at its last row); FORMAT for a corrupt row
 * or chunk, INVALID_ARG for an index out of order or range. */
numla_status numla_ppl_base_read_row(numla_ppl_base *b, int64_t chunk, int32_t row, float *scale,
                                     float *min_log_prob, uint16_t *codes);
/* The header's fields against a run's (what differs is named: another model's vocabulary,
 * another context, another text). FORMAT when they differ. */
numla_status numla_ppl_base_check(const numla_ppl_base *b, const numla_ppl_base_header *run);

typedef struct numla_ppl_base_writer numla_ppl_base_writer;
/* Create path (truncated) for a run with header h. */
numla_status numla_ppl_base_writer_create(const char *path, const numla_ppl_base_header *h,
                                          numla_ppl_base_writer **out);
/* Write one row; each chunk's rows in order, once. */
numla_status numla_ppl_base_writer_put(numla_ppl_base_writer *w, int64_t chunk, int32_t row,
                                       float scale, float min_log_prob, const uint16_t *codes);
/* Write the checksums and close (every row must have been written). */
numla_status numla_ppl_base_writer_finish(numla_ppl_base_writer **w);
/* Close without finishing and remove the file. */
void numla_ppl_base_writer_abandon(numla_ppl_base_writer **w);

#endif
