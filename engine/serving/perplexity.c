/* engine/serving/perplexity.c — llama.cpp's perplexity and KL-divergence arithmetic, and the
 * base file of saved log-probabilities (see perplexity.h). */
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include "engine/serving/perplexity.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PPL_MAGIC "NUMLAKLB"
#define PPL_VERSION 1u
#define PPL_HEADER_BYTES 64
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv_bytes(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t u32_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint64_t numla_ppl_tokens_hash(const int32_t *tokens, int64_t n)
{
    uint64_t h = FNV_OFFSET;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b[4];
        put_u32(b, (uint32_t)tokens[i]);
        h = fnv_bytes(h, b, 4);
    }
    return h;
}

/* ---- one row ---- */

double numla_ppl_row_nll(const float *logits, int64_t V, int32_t tok)
{
    float max_logit = logits[0];
    for (int64_t i = 1; i < V; i++)
        max_logit = logits[i] > max_logit ? logits[i] : max_logit;
    double sum_exp = 0.0;
    for (int64_t i = 0; i < V; i++)
        sum_exp += expf(logits[i] - max_logit);
    return -((double)logits[tok] - (double)max_logit - log(sum_exp));
}

void numla_ppl_row_encode(const float *logits, int64_t V, float *scale, float *min_log_prob,
                          uint16_t *codes)
{
    float max_logit = logits[0], min_logit = logits[0];
    for (int64_t i = 1; i < V; i++) {
        max_logit = logits[i] > max_logit ? logits[i] : max_logit;
        min_logit = logits[i] < min_logit ? logits[i] : min_logit;
    }
    min_logit = min_logit > max_logit - 16 ? min_logit : max_logit - 16;
    double sum_exp = 0.0;
    for (int64_t i = 0; i < V; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    *min_log_prob = min_logit - max_logit - log_sum_exp;
    *scale = (max_logit - min_logit) / 65535.f;
    if (*scale == 0) {
        memset(codes, 0, (size_t)V * sizeof *codes);
        return;
    }
    const float inv = 1 / *scale;
    for (int64_t i = 0; i < V; i++) {
        if (!(logits[i] > min_logit)) {
            codes[i] = 0;
            continue;
        }
        const long c = lrintf(inv * (logits[i] - min_logit)); /* nearest, ties to even */
        codes[i] = (uint16_t)(c < 0 ? 0 : c > 65535 ? 65535 : c);
    }
}

void numla_ppl_kl_compare(const float *logits, int64_t V, float scale, float min_log_prob,
                          const uint16_t *codes, int32_t tok, numla_ppl_kl_row *out)
{
    float max_logit = logits[0];
    int64_t imax = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    double sum_exp = 0.0;
    for (int64_t i = 0; i < V; i++)
        sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float nll = max_logit + log_sum_exp - logits[tok];
    const float nll_base = -(scale * codes[tok] + min_log_prob);
    const float lse = max_logit + log_sum_exp;
    double sum = 0;
    int64_t imax_base = 0;
    float lp_base_max = 0;
    for (int64_t i = 0; i < V; i++) {
        const float lp_base = scale * codes[i] + min_log_prob;
        if (i == 0 || lp_base > lp_base_max) {
            lp_base_max = lp_base;
            imax_base = i;
        }
        if (lp_base > -16.f)
            sum += expf(lp_base) * (lp_base - logits[i] + lse);
    }
    out->nll = nll;
    out->nll_base = nll_base;
    out->kld = sum;
    out->p_diff = (double)(expf(-nll) - expf(-nll_base));
    out->same_top = imax == imax_base;
}

/* ---- summaries ---- */

void numla_ppl_mean_unc(double sum, double sum2, int64_t n, double *mean, double *unc)
{
    *mean = n > 0 ? sum / (double)n : 0;
    double var = n > 0 ? sum2 / (double)n - *mean * *mean : 0;
    *unc = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

double numla_ppl_percentile(const float *sorted, int64_t n, double fraction)
{
    if (fraction <= 0)
        return sorted[0];
    if (fraction >= 1)
        return sorted[n - 1];
    float p = (float)fraction * (float)(n - 1);
    int64_t ip = (int64_t)p;
    p -= (float)ip;
    const int64_t ip1 = ip + 1 < n ? ip + 1 : n - 1;
    return (1 - p) * sorted[ip] + p * sorted[ip1];
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

numla_status numla_ppl_kl_summarize(const numla_ppl_kl_row *rows, int64_t n,
                                    numla_ppl_kl_summary *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "perplexity: no rows to summarize");
    double s_nll = 0, s_nll2 = 0, s_b = 0, s_b2 = 0, s_nb = 0, s_k = 0, s_k2 = 0, s_d = 0,
           s_d2 = 0, s_d4 = 0, max_d = 0;
    int64_t same = 0;
    float *k = malloc((size_t)n * sizeof *k);
    if (!k)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "perplexity: no memory for %lld rows", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const numla_ppl_kl_row *r = &rows[i];
        s_nll += r->nll;
        s_nll2 += r->nll * r->nll;
        s_b += r->nll_base;
        s_b2 += r->nll_base * r->nll_base;
        s_nb += r->nll * r->nll_base;
        s_k += r->kld;
        s_k2 += r->kld * r->kld;
        s_d += r->p_diff;
        const double d2 = r->p_diff * r->p_diff;
        s_d2 += d2;
        s_d4 += d2 * d2;
        max_d = fabs(r->p_diff) > max_d ? fabs(r->p_diff) : max_d;
        same += r->same_top != 0;
        k[i] = (float)r->kld;
    }
    out->count = n;
    double m, u, mb, ub;
    numla_ppl_mean_unc(s_nll, s_nll2, n, &m, &u);
    numla_ppl_mean_unc(s_b, s_b2, n, &mb, &ub);
    out->ppl = exp(m);
    out->ppl_unc = out->ppl * u;
    out->ppl_base = exp(mb);
    out->ppl_base_unc = out->ppl_base * ub;
    const double cov = n < 10 ? 0.0 : (s_nb / (double)n - (s_nll / (double)n) * (s_b / (double)n)) /
                                          (double)(n - 1);
    out->ln_ratio = m - mb;
    const double v = u * u + ub * ub - 2.0 * cov;
    out->ln_ratio_unc = v > 0 ? sqrt(v) : 0;
    numla_ppl_mean_unc(s_k, s_k2, n, &out->kld_mean, &out->kld_unc);
    qsort(k, (size_t)n, sizeof *k, cmp_float);
    out->kld_max = k[n - 1];
    out->kld_p999 = numla_ppl_percentile(k, n, 0.999);
    out->kld_p99 = numla_ppl_percentile(k, n, 0.99);
    out->kld_p95 = numla_ppl_percentile(k, n, 0.95);
    out->kld_p90 = numla_ppl_percentile(k, n, 0.90);
    out->kld_median = n % 2 == 0 ? 0.5 * ((double)k[n / 2] + (double)k[n / 2 - 1]) : k[n / 2];
    free(k);
    out->same_top = (double)same / (double)n;
    out->same_top_unc =
        n > 1 ? sqrt(out->same_top * (1 - out->same_top) / (double)(n - 1)) : 0;
    out->p_diff_mean = s_d / (double)n;
    double mse, mse_unc;
    numla_ppl_mean_unc(s_d2, s_d4, n, &mse, &mse_unc);
    out->p_diff_rms = sqrt(mse);
    out->p_diff_rms_unc = out->p_diff_rms > 0 ? 0.5 / out->p_diff_rms * mse_unc : 0;
    out->p_diff_max_abs = max_d;
    return NUMLA_STATUS_OK;
}

/* ---- the base file ---- */

int32_t numla_ppl_base_rows(const numla_ppl_base_header *h) { return h->ctx - 1 - h->first; }

static int64_t row_bytes(const numla_ppl_base_header *h) { return 8 + 2 * h->vocab_size; }

static int64_t chunk_bytes(const numla_ppl_base_header *h)
{
    return (int64_t)numla_ppl_base_rows(h) * row_bytes(h);
}

static void header_encode(const numla_ppl_base_header *h, uint8_t *b)
{
    memset(b, 0, PPL_HEADER_BYTES);
    memcpy(b, PPL_MAGIC, 8);
    put_u32(b + 8, PPL_VERSION);
    put_u32(b + 12, PPL_HEADER_BYTES);
    put_u64(b + 16, (uint64_t)h->vocab_size);
    put_u32(b + 24, (uint32_t)h->ctx);
    put_u32(b + 28, (uint32_t)h->first);
    put_u64(b + 32, (uint64_t)h->num_tokens);
    put_u64(b + 40, (uint64_t)h->num_chunks);
    put_u64(b + 48, h->tokens_hash);
    put_u64(b + 56, fnv_bytes(FNV_OFFSET, b, 56));
}

struct numla_ppl_base {
    FILE *f;
    char name[512];
    numla_ppl_base_header h;
    uint64_t *sums;            /* (num_chunks) stored checksums */
    uint64_t *state;           /* (num_chunks) running checksums */
    int32_t *next_row;         /* (num_chunks) rows read so far */
    uint8_t *buf;              /* (row_bytes) */
};

void numla_ppl_base_close(numla_ppl_base **pb)
{
    if (!pb || !*pb)
        return;
    numla_ppl_base *b = *pb;
    free(b->sums);
    free(b->state);
    free(b->next_row);
    free(b->buf);
    free(b);
    *pb = NULL;
}

const numla_ppl_base_header *numla_ppl_base_get_header(const numla_ppl_base *b) { return &b->h; }

static numla_status base_open(numla_ppl_base *b)
{
    uint8_t hb[PPL_HEADER_BYTES];
    if (fseeko(b->f, 0, SEEK_SET) != 0 || fread(hb, 1, sizeof hb, b->f) != sizeof hb)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: not a numla perplexity base file (shorter than its "
                   "%d-byte header)", b->name, PPL_HEADER_BYTES);
    if (memcmp(hb, PPL_MAGIC, 8) != 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: not a numla perplexity base file (no %s magic; "
                   "write one with numla perplexity --save-logits)", b->name, PPL_MAGIC);
    const uint32_t version = get_u32(hb + 8), hbytes = get_u32(hb + 12);
    if (version != PPL_VERSION || hbytes != PPL_HEADER_BYTES)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: base file version %u (header %u bytes); this numla "
                   "reads version %u", b->name, version, hbytes, PPL_VERSION);
    if (get_u64(hb + 56) != fnv_bytes(FNV_OFFSET, hb, 56))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: corrupt base file: header checksum mismatch",
                   b->name);
    numla_ppl_base_header *h = &b->h;
    h->vocab_size = (int64_t)get_u64(hb + 16);
    h->ctx = (int32_t)get_u32(hb + 24);
    h->first = (int32_t)get_u32(hb + 28);
    h->num_tokens = (int64_t)get_u64(hb + 32);
    h->num_chunks = (int64_t)get_u64(hb + 40);
    h->tokens_hash = get_u64(hb + 48);
    if (h->vocab_size < 2 || h->vocab_size > NUMLA_PPL_BASE_MAX_VOCAB || h->ctx < 4 ||
        h->ctx > (1 << 24) || h->first != h->ctx / 2 || h->num_tokens < 0 ||
        h->num_chunks < 1 || h->num_tokens / h->ctx < h->num_chunks ||
        h->num_chunks > ((int64_t)1 << 40) / chunk_bytes(h))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: corrupt base file: impossible header (vocab %lld, "
                   "ctx %d, first %d, %lld tokens, %lld chunks)", b->name,
                   (long long)h->vocab_size, h->ctx, h->first, (long long)h->num_tokens,
                   (long long)h->num_chunks);
    const int64_t want = PPL_HEADER_BYTES + h->num_chunks * chunk_bytes(h) + 8 * h->num_chunks;
    if (fseeko(b->f, 0, SEEK_END) != 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: cannot seek: %s", b->name, strerror(errno));
    const int64_t have = (int64_t)ftello(b->f);
    if (have != want)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %s base file: %lld bytes where its header (%lld "
                   "chunks of %d rows over %lld tokens) needs %lld", b->name,
                   have < want ? "truncated" : "corrupt", (long long)have,
                   (long long)h->num_chunks, numla_ppl_base_rows(h), (long long)h->vocab_size,
                   (long long)want);
    const size_t C = (size_t)h->num_chunks;
    b->sums = malloc(C * sizeof *b->sums);
    b->state = malloc(C * sizeof *b->state);
    b->next_row = calloc(C, sizeof *b->next_row);
    b->buf = malloc((size_t)row_bytes(h));
    uint8_t *raw = malloc(8 * C);
    if (!b->sums || !b->state || !b->next_row || !b->buf || !raw) {
        free(raw);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for %zu chunks", b->name, C);
    }
    if (fseeko(b->f, want - (int64_t)(8 * C), SEEK_SET) != 0 || fread(raw, 1, 8 * C, b->f) != 8 * C) {
        free(raw);
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: cannot read the chunk checksums", b->name);
    }
    for (size_t c = 0; c < C; c++) {
        b->sums[c] = get_u64(raw + 8 * c);
        b->state[c] = FNV_OFFSET;
    }
    free(raw);
    return NUMLA_STATUS_OK;
}

numla_status numla_ppl_base_open(FILE *f, const char *name, numla_ppl_base **out)
{
    *out = NULL;
    numla_ppl_base *b = calloc(1, sizeof *b);
    if (!b)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory", name);
    b->f = f;
    snprintf(b->name, sizeof b->name, "%s", name);
    numla_status s = base_open(b);
    if (s != NUMLA_STATUS_OK) {
        numla_ppl_base_close(&b);
        return s;
    }
    *out = b;
    return NUMLA_STATUS_OK;
}

numla_status numla_ppl_base_read_row(numla_ppl_base *b, int64_t chunk, int32_t row, float *scale,
                                     float *min_log_prob, uint16_t *codes)
{
    const numla_ppl_base_header *h = &b->h;
    const int32_t R = numla_ppl_base_rows(h);
    if (chunk < 0 || chunk >= h->num_chunks || row < 0 || row >= R || b->next_row[chunk] != row)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: row %d of chunk %lld read out of order (next: "
                   "%d of %lld chunks)", b->name, row, (long long)chunk,
                   chunk >= 0 && chunk < h->num_chunks ? b->next_row[chunk] : -1,
                   (long long)h->num_chunks);
    const int64_t rb = row_bytes(h);
    const int64_t at = PPL_HEADER_BYTES + chunk * chunk_bytes(h) + (int64_t)row * rb;
    if (fseeko(b->f, at, SEEK_SET) != 0 || fread(b->buf, 1, (size_t)rb, b->f) != (size_t)rb)
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: cannot read row %d of chunk %lld", b->name, row,
                   (long long)chunk + 1);
    b->state[chunk] = fnv_bytes(b->state[chunk], b->buf, (size_t)rb);
    b->next_row[chunk]++;
    *scale = f32_of(get_u32(b->buf));
    *min_log_prob = f32_of(get_u32(b->buf + 4));
    /* what the writer can give: max - min of the logits <= 16, the minimum log-prob at most 0
     * and above -(16 + log V) (a vocabulary of 2^24 gives -16.7 - a margin) */
    if (!isfinite(*scale) || !isfinite(*min_log_prob) || *scale < 0 ||
        *scale > 16.0001f / 65535.f || *min_log_prob > 0 || *min_log_prob < -64.f)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: corrupt base file: row %d of chunk %lld has scale "
                   "%g and minimum log-prob %g", b->name, row, (long long)chunk + 1,
                   (double)*scale, (double)*min_log_prob);
    for (int64_t i = 0; i < h->vocab_size; i++)
        codes[i] = (uint16_t)(b->buf[8 + 2 * i] | (b->buf[9 + 2 * i] << 8));
    if (row == R - 1 && b->state[chunk] != b->sums[chunk])
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: corrupt base file: chunk %lld does not match its "
                   "checksum", b->name, (long long)chunk + 1);
    return NUMLA_STATUS_OK;
}

numla_status numla_ppl_base_check(const numla_ppl_base *b, const numla_ppl_base_header *run)
{
    const numla_ppl_base_header *h = &b->h;
    if (h->vocab_size != run->vocab_size)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s was saved from a model with a vocabulary of %lld, "
                   "this model has %lld: compare runs of the same model", b->name,
                   (long long)h->vocab_size, (long long)run->vocab_size);
    if (h->ctx != run->ctx)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s was saved with --ctx %d, this run uses --ctx %d",
                   b->name, h->ctx, run->ctx);
    if (h->num_chunks != run->num_chunks && h->num_tokens == run->num_tokens &&
        h->tokens_hash == run->tokens_hash)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s holds %lld chunks, this run scores %lld: give the "
                   "same --chunks", b->name, (long long)h->num_chunks,
                   (long long)run->num_chunks);
    if (h->num_tokens != run->num_tokens || h->tokens_hash != run->tokens_hash)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s was saved from another text or tokenizer (%lld "
                   "tokens, hash %016llx; this run: %lld tokens, hash %016llx)", b->name,
                   (long long)h->num_tokens, (unsigned long long)h->tokens_hash,
                   (long long)run->num_tokens, (unsigned long long)run->tokens_hash);
    return NUMLA_STATUS_OK;
}

struct numla_ppl_base_writer {
    FILE *f;
    char path[4096];
    numla_ppl_base_header h;
    uint64_t *state;           /* (num_chunks) */
    int32_t *next_row;         /* (num_chunks) */
    uint8_t *buf;              /* (row_bytes) */
};

static void writer_free(numla_ppl_base_writer *w)
{
    if (w->f)
        fclose(w->f);
    free(w->state);
    free(w->next_row);
    free(w->buf);
    free(w);
}

numla_status numla_ppl_base_writer_create(const char *path, const numla_ppl_base_header *h,
                                          numla_ppl_base_writer **out)
{
    *out = NULL;
    numla_ppl_base_writer *w = calloc(1, sizeof *w);
    if (!w)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory", path);
    w->h = *h;
    snprintf(w->path, sizeof w->path, "%s", path);
    const size_t C = (size_t)h->num_chunks;
    w->state = malloc(C * sizeof *w->state);
    w->next_row = calloc(C, sizeof *w->next_row);
    w->buf = malloc((size_t)row_bytes(h));
    if (!w->state || !w->next_row || !w->buf) {
        writer_free(w);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for %zu chunks", path, C);
    }
    for (size_t c = 0; c < C; c++)
        w->state[c] = FNV_OFFSET;
    w->f = fopen(path, "wb");
    if (!w->f) {
        int e = errno;
        writer_free(w);
        NUMLA_FAIL(NUMLA_STATUS_IO, "--save-logits %s: %s", path, strerror(e));
    }
    uint8_t hb[PPL_HEADER_BYTES];
    header_encode(h, hb);
    if (fwrite(hb, 1, sizeof hb, w->f) != sizeof hb) {
        int e = errno;
        writer_free(w);
        unlink(path);
        NUMLA_FAIL(NUMLA_STATUS_IO, "--save-logits %s: %s", path, strerror(e));
    }
    *out = w;
    return NUMLA_STATUS_OK;
}

numla_status numla_ppl_base_writer_put(numla_ppl_base_writer *w, int64_t chunk, int32_t row,
                                       float scale, float min_log_prob, const uint16_t *codes)
{
    const numla_ppl_base_header *h = &w->h;
    if (chunk < 0 || chunk >= h->num_chunks || w->next_row[chunk] != row)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: row %d of chunk %lld written out of order",
                   w->path, row, (long long)chunk);
    const int64_t rb = row_bytes(h);
    put_u32(w->buf, u32_of(scale));
    put_u32(w->buf + 4, u32_of(min_log_prob));
    for (int64_t i = 0; i < h->vocab_size; i++) {
        w->buf[8 + 2 * i] = (uint8_t)codes[i];
        w->buf[9 + 2 * i] = (uint8_t)(codes[i] >> 8);
    }
    const int64_t at = PPL_HEADER_BYTES + chunk * chunk_bytes(h) + (int64_t)row * rb;
    if (fseeko(w->f, at, SEEK_SET) != 0 || fwrite(w->buf, 1, (size_t)rb, w->f) != (size_t)rb)
        NUMLA_FAIL(NUMLA_STATUS_IO, "--save-logits %s: %s", w->path, strerror(errno));
    w->state[chunk] = fnv_bytes(w->state[chunk], w->buf, (size_t)rb);
    w->next_row[chunk]++;
    return NUMLA_STATUS_OK;
}

numla_status numla_ppl_base_writer_finish(numla_ppl_base_writer **pw)
{
    numla_ppl_base_writer *w = *pw;
    *pw = NULL;
    const numla_ppl_base_header *h = &w->h;
    const int32_t R = numla_ppl_base_rows(h);
    numla_status s = NUMLA_STATUS_OK;
    for (int64_t c = 0; c < h->num_chunks && s == NUMLA_STATUS_OK; c++)
        if (w->next_row[c] != R)
            s = numla_error_set(NUMLA_STATUS_INTERNAL, __FILE__, __LINE__, __func__, "%s: chunk %lld has %d of %d rows",
                                w->path, (long long)c + 1, w->next_row[c], R);
    const int64_t at = PPL_HEADER_BYTES + h->num_chunks * chunk_bytes(h);
    if (s == NUMLA_STATUS_OK && fseeko(w->f, at, SEEK_SET) != 0)
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "--save-logits %s: %s", w->path, strerror(errno));
    for (int64_t c = 0; c < h->num_chunks && s == NUMLA_STATUS_OK; c++) {
        uint8_t b[8];
        put_u64(b, w->state[c]);
        if (fwrite(b, 1, 8, w->f) != 8)
            s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "--save-logits %s: %s", w->path,
                                strerror(errno));
    }
    if (fclose(w->f) != 0 && s == NUMLA_STATUS_OK)
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "--save-logits %s: %s", w->path, strerror(errno));
    w->f = NULL;
    if (s != NUMLA_STATUS_OK)
        unlink(w->path);
    writer_free(w);
    return s;
}

void numla_ppl_base_writer_abandon(numla_ppl_base_writer **pw)
{
    if (!pw || !*pw)
        return;
    numla_ppl_base_writer *w = *pw;
    *pw = NULL;
    fclose(w->f);
    w->f = NULL;
    unlink(w->path);
    writer_free(w);
}
