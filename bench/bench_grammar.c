/* bench/bench_grammar.c — `numla bench grammar [--json] [--vocab V] [--reps R]`: the
 * response_format token mask (engine/serving/grammar.h) per generated token over the synthetic
 * vocabulary of V tokens (default 129280, DeepSeek-V3's; engine/text/synthetic_vocab.h, the
 * one `numla synth --tokenizer synthetic` writes): the 256 bytes, then distinct byte-level-BPE-
 * like pieces (words with and without a leading space, digits, JSON punctuation, CJK and other
 * UTF-8, a few random bytes), drawn from a fixed seed, and the special tokens. A document of a schema and one of
 * json_object mode are fed token by token (the longest token that starts the rest), and the
 * mask is computed before each token: p50, p90 and the largest over those steps, best of R
 * rounds each; a third document, of a schema whose strings have patterns and formats and whose
 * numbers have bounds, the same way; a fourth, of the bounded object `numla bench serve --schema
 * bounded` sends, its strings filled to their maxLength. Then one sampler row (temperature 1)
 * with and without the schema, to show what the mask adds to a draw. Never asserts a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "engine/cli/cli.h"
#include "engine/serving/grammar.h"
#include "engine/serving/sampler.h"
#include "engine/text/synthetic_vocab.h"

static uint32_t numla_bench_gr_rand_(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

static int numla_bench_gr_cmp_(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Feed doc token by token, timing the mask before each (best of reps): p50, p90, max in µs. */
static int numla_bench_gr_run_(const numla_grammar *g, const numla_grammar_vocab *v,
                               const uint8_t *const *tb, const size_t *tl, int32_t V,
                               const char *doc, int reps, double out[3], int *steps)
{
    uint64_t *mask = malloc(((size_t)V + 63) / 64 * sizeof *mask);
    double *best = calloc(strlen(doc) + 2, sizeof *best);
    int n = 0, ok = mask && best;
    for (int r = 0; ok && r < reps; r++) {
        numla_grammar_matcher *m = NULL;
        if (numla_grammar_matcher_create(g, &m) != NUMLA_STATUS_OK)
            ok = 0;
        size_t at = 0, len = strlen(doc);
        n = 0;
        while (ok && at <= len) {
            const double t0 = numla_now_s();
            if (numla_grammar_matcher_fill_mask(m, v, mask) != NUMLA_STATUS_OK)
                ok = 0;
            const double dt = numla_now_s() - t0;
            best[n] = r == 0 || dt < best[n] ? dt : best[n];
            n++;
            if (at == len)
                break;
            int32_t pick = -1;
            size_t pl = 0;
            for (int32_t t = 0; t < V; t++) /* the longest allowed token that starts the rest */
                if ((mask[t / 64] >> (t % 64) & 1) && tl[t] > pl && tl[t] <= len - at &&
                    !memcmp(tb[t], doc + at, tl[t])) {
                    pick = t;
                    pl = tl[t];
                }
            if (pick < 0 || numla_grammar_matcher_accept_token(m, v, pick) != NUMLA_STATUS_OK) {
                fprintf(stderr, "numla bench grammar: the document is refused at byte %zu\n", at);
                ok = 0;
            }
            at += pl;
        }
        numla_grammar_matcher_destroy(&m);
    }
    if (ok) {
        qsort(best, (size_t)n, sizeof *best, numla_bench_gr_cmp_);
        out[0] = best[n / 2] * 1e6;
        out[1] = best[(n * 9) / 10] * 1e6;
        out[2] = best[n - 1] * 1e6;
        *steps = n;
    }
    free(mask);
    free(best);
    return ok;
}

/* an 8-property object: `numla bench serve --schema builtin` sends it too (bench.h) */
const char numla_bench_schema_8prop[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"},\"email\":{\"type\":\"string\",\"maxLength\":64},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"},\"maxItems\":8},\"color\":{\"enum\":[\"red\",\"green\","
    "\"blue\"]},\"score\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"},\"note\":{\"type\":"
    "[\"string\",\"null\"]}},\"required\":[\"name\",\"age\",\"email\",\"tags\",\"color\",\"score\","
    "\"ok\",\"note\"],\"additionalProperties\":false}";
const char numla_bench_schema_bounded[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":"
    "\"string\",\"maxLength\":16},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"maxLength\":8},\"maxItems\":3},\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100},\"ok\":{\"type\":"
    "\"boolean\"},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":12}},\"required\":"
    "[\"name\",\"age\",\"email\",\"tags\",\"color\",\"score\",\"ok\",\"note\"],"
    "\"additionalProperties\":false}";
/* its strings filled to their maxLength */
static const char numla_bench_gr_bounded_doc_[] =
    "{\"name\":\"Jane Smith 日\",\"age\":42,\"email\":\"jane@example.com\",\"tags\":"
    "[\"alpha\",\"beta\",\"gamma de\"],\"color\":\"green\",\"score\":12.75,\"ok\":true,"
    "\"note\":\"a \\\"quoted\\\" w\"}";
static const char numla_bench_gr_doc_[] =
    "{\"name\":\"Jane Smith of the data team, 日本語 written\",\"age\":42,\"email\":"
    "\"jane.smith@example.com\",\"tags\":[\"alpha\",\"beta\",\"gamma delta\"],\"color\":\"green\","
    "\"score\":-12.75e-3,\"ok\":true,\"note\":\"a \\\"quoted\\\" word\\nand more text here\"}";
/* strings with a pattern or a format, bounded numbers */
static const char numla_bench_gr_pat_schema_[] =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":"
    "\"^[A-Z]{3}-\\\\d{4}$\"},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"when\":"
    "{\"type\":\"string\",\"format\":\"date-time\"},\"age\":{\"type\":\"integer\",\"minimum\":"
    "0,\"maximum\":150},\"price\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":"
    "10000},\"note\":{\"type\":\"string\",\"pattern\":\"\\\\S\"},\"slug\":{\"type\":"
    "\"string\",\"pattern\":\"^[a-z0-9-]+$\",\"maxLength\":40}},\"required\":[\"id\","
    "\"email\",\"when\",\"age\",\"price\",\"note\",\"slug\"],\"additionalProperties\":false}";
static const char numla_bench_gr_pat_doc_[] =
    "{\"id\":\"ABC-1234\",\"email\":\"jane.smith@example.com\",\"when\":"
    "\"2024-05-06T07:08:09Z\",\"age\":42,\"price\":19.99,\"note\":\"some words here with a "
    "long note text\",\"slug\":\"the-quick-brown-fox-jumps\"}";
static const char numla_bench_gr_obj_doc_[] =
    "{\"id\":7,\"items\":[{\"k\":\"first value\",\"n\":[1,2,3]},{\"k\":\"second\",\"x\":null}],"
    "\"text\":\"The quick brown fox jumps over the lazy dog 数据\"}";

static int numla_bench_grammar(int argc, char **argv)
{
    int V = 129280, reps = 5, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--vocab") || !strcmp(argv[i], "--reps")) {
            if (!numla_bench_int_opt("numla bench grammar", argc, argv, &i,
                                     !strcmp(argv[i], "--vocab") ? &V : &reps))
                return 2;
        } else {
            fprintf(stderr, "usage: numla bench grammar [--json] [--vocab V (129280)] "
                            "[--reps R (5)]\n");
            return 2;
        }
    }
    if (V < NUMLA_SYNTHETIC_VOCAB_MIN || reps < 1) {
        fprintf(stderr, "numla bench grammar: --vocab must be >= 512 and --reps >= 1\n");
        return 2;
    }
    numla_synthetic_vocab *sv = NULL;
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!logits || numla_synthetic_vocab_create(V, &sv) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla bench grammar: no vocabulary of %d tokens: %s\n", V,
                numla_error_message());
        return 1;
    }
    const uint8_t *const *tb;
    const size_t *tl;
    numla_synthetic_vocab_tokens(sv, &tb, &tl);
    uint64_t x = 12345;
    const int32_t eos = numla_synthetic_vocab_eos(sv);
    numla_grammar_vocab *v = NULL;
    numla_grammar *gs = NULL, *go = NULL, *gp = NULL, *gb = NULL;
    json_t *schema = json_loads(numla_bench_schema_8prop, 0, NULL);
    json_t *bschema = json_loads(numla_bench_schema_bounded, 0, NULL);
    json_t *pschema = json_loads(numla_bench_gr_pat_schema_, 0, NULL);
    const double t0 = numla_now_s();
    if (!schema || numla_grammar_vocab_create(V, tb, tl, &eos, 1, &v) != NUMLA_STATUS_OK ||
        numla_grammar_compile_schema(schema, &gs) != NUMLA_STATUS_OK ||
        numla_grammar_compile_json_object(&go) != NUMLA_STATUS_OK || !pschema ||
        numla_grammar_compile_schema(pschema, &gp) != NUMLA_STATUS_OK || !bschema ||
        numla_grammar_compile_schema(bschema, &gb) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla bench grammar: %s\n", numla_error_message());
        return 1;
    }
    const double build = numla_now_s() - t0;
    double rs[3], ro[3], rp[3], rb[3];
    int ns = 0, no = 0, np = 0, nb = 0;
    if (!numla_bench_gr_run_(gs, v, tb, tl, V, numla_bench_gr_doc_, reps, rs, &ns) ||
        !numla_bench_gr_run_(go, v, tb, tl, V, numla_bench_gr_obj_doc_, reps, ro, &no) ||
        !numla_bench_gr_run_(gp, v, tb, tl, V, numla_bench_gr_pat_doc_, reps, rp, &np) ||
        !numla_bench_gr_run_(gb, v, tb, tl, V, numla_bench_gr_bounded_doc_, reps, rb, &nb))
        return 1;
    /* one sampler row, with and without the schema (at the document's start: mask + draw) */
    double row[2] = {0, 0};
    for (int with = 0; with < 2; with++) {
        numla_sampling_params p;
        numla_sampling_params_default(&p);
        p.has_seed = 1;
        numla_sampler *s = NULL;
        if (numla_sampler_create(&p, V, &s) != NUMLA_STATUS_OK ||
            (with && numla_sampler_set_grammar(s, gs, v) != NUMLA_STATUS_OK)) {
            fprintf(stderr, "numla bench grammar: %s\n", numla_error_message());
            return 1;
        }
        for (int32_t t = 0; t < V; t++)
            logits[t] = (float)(numla_bench_gr_rand_(&x) % 1000) / 100.0f;
        double best = 1e30;
        for (int r = 0; r < 20 * reps; r++) {
            int32_t tok;
            const double a = numla_now_s();
            if (numla_sampler_sample(s, logits, &tok, NULL) != NUMLA_STATUS_OK)
                return 1;
            const double dt = numla_now_s() - a;
            best = dt < best ? dt : best;
        }
        row[with] = best * 1e6;
        numla_sampler_destroy(&s);
    }
    if (json)
        printf("{\"bench\": \"grammar\", \"vocab\": %d, \"vocab_build_ms\": %.1f, "
               "\"schema_steps\": %d, \"schema_mask_us_p50\": %.1f, \"schema_mask_us_p90\": %.1f, "
               "\"schema_mask_us_max\": %.1f, \"json_object_steps\": %d, "
               "\"json_object_mask_us_p50\": %.1f, \"json_object_mask_us_p90\": %.1f, "
               "\"json_object_mask_us_max\": %.1f, \"pattern_steps\": %d, "
               "\"pattern_mask_us_p50\": %.1f, \"pattern_mask_us_p90\": %.1f, "
               "\"pattern_mask_us_max\": %.1f, \"bounded_steps\": %d, "
               "\"bounded_mask_us_p50\": %.1f, \"bounded_mask_us_p90\": %.1f, "
               "\"bounded_mask_us_max\": %.1f, \"sampler_row_us\": %.1f, "
               "\"sampler_row_schema_us\": %.1f}\n",
               V, build * 1e3, ns, rs[0], rs[1], rs[2], no, ro[0], ro[1], ro[2], np, rp[0],
               rp[1], rp[2], nb, rb[0], rb[1], rb[2], row[0], row[1]);
    else {
        printf("bench grammar: synthetic vocab %d (trie built in %.1f ms), 1 thread, best of %d "
               "per step\n", V, build * 1e3, reps);
        printf("%-12s %6s %10s %10s %10s\n", "mode", "steps", "mask p50", "p90", "max (us)");
        printf("%-12s %6d %10.1f %10.1f %10.1f\n", "json_schema", ns, rs[0], rs[1], rs[2]);
        printf("%-12s %6d %10.1f %10.1f %10.1f\n", "json_object", no, ro[0], ro[1], ro[2]);
        printf("%-12s %6d %10.1f %10.1f %10.1f\n", "patterns", np, rp[0], rp[1], rp[2]);
        printf("%-12s %6d %10.1f %10.1f %10.1f\n", "bounded", nb, rb[0], rb[1], rb[2]);
        printf("sampler row (temperature 1, first step): %.1f us without, %.1f us with the "
               "schema\n", row[0], row[1]);
    }
    numla_grammar_destroy(&gs);
    numla_grammar_destroy(&go);
    numla_grammar_destroy(&gp);
    numla_grammar_destroy(&gb);
    json_decref(pschema);
    json_decref(bschema);
    numla_grammar_vocab_destroy(&v);
    json_decref(schema);
    numla_synthetic_vocab_destroy(&sv);
    free(logits);
    return 0;
}

NUMLA_CLI_COMMAND("bench grammar", numla_bench_grammar,
                  "[--json] [--vocab V] [--reps R]: response_format mask time per token")

/* `numla bench grammar-schemas [--verbose] < LIST`: each file named on stdin (one path a line)
 * holds a JSON Schema, or JSONSchemaBench's maskbench form {"schema": ..., "tests": [{"data",
 * "valid"}, ...]}; compile each, and feed each test document (jansson's compact serialization,
 * keys in the document's order) to the matcher. Prints the schemas compiled, the refusals by
 * keyword, and the valid documents accepted / invalid documents rejected (the matcher takes
 * only compact documents without extra keys, so such a valid document counts as not accepted;
 * an invalid one accepted would be a bug: each is named on stderr). scripts/jsonschemabench runs it over a local copy of the benchmark. */
typedef struct numla_bench_gs_reason {
    char key[64];
    int64_t n;
} numla_bench_gs_reason;

static int numla_bench_gs_doc(const numla_grammar *g, const json_t *d)
{
    char *text = json_dumps(d, JSON_COMPACT | JSON_ENCODE_ANY);
    numla_grammar_matcher *m = NULL;
    int ok = text && numla_grammar_matcher_create(g, &m) == NUMLA_STATUS_OK &&
             numla_grammar_matcher_accept_bytes(m, (const uint8_t *)text, strlen(text)) &&
             numla_grammar_matcher_is_complete(m);
    numla_grammar_matcher_destroy(&m);
    free(text);
    return ok;
}

static int numla_bench_grammar_schemas(int argc, char **argv)
{
    int verbose = argc > 1 && !strcmp(argv[1], "--verbose");
    if (argc > 1 + verbose) {
        fprintf(stderr, "usage: numla bench grammar-schemas [--verbose] < FILE_LIST\n");
        return 2;
    }
    int64_t files = 0, unreadable = 0, compiled = 0, vt = 0, va = 0, it = 0, ir = 0;
    numla_bench_gs_reason reasons[64] = {{{0}, 0}};
    int nr = 0;
    double t_compile = 0;
    char path[4096];
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        if (!path[0])
            continue;
        files++;
        json_t *f = json_load_file(path, 0, NULL);
        if (!f) {
            unreadable++;
            continue;
        }
        json_t *schema = f, *tests = NULL;
        if (json_is_object(f) && json_object_get(f, "schema") && json_object_get(f, "tests")) {
            schema = json_object_get(f, "schema");
            tests = json_object_get(f, "tests");
        }
        numla_grammar *g = NULL;
        const double t0 = numla_now_s();
        numla_status st = numla_grammar_compile_schema(schema, &g);
        t_compile += numla_now_s() - t0;
        if (st != NUMLA_STATUS_OK) {
            const char *msg = numla_error_message(), *q = strstr(msg, ": '");
            char key[64];
            if (q && strchr(q + 3, '\''))
                snprintf(key, sizeof key, "%.*s", (int)(strchr(q + 3, '\'') - q - 3), q + 3);
            else
                snprintf(key, sizeof key, "(other)");
            int r = 0;
            while (r < nr && strcmp(reasons[r].key, key))
                r++;
            if (r == nr && nr < 64)
                snprintf(reasons[nr++].key, sizeof reasons[0].key, "%s", key);
            if (r < nr)
                reasons[r].n++;
            if (verbose)
                fprintf(stderr, "refused %s: %s\n", path, msg);
            json_decref(f);
            continue;
        }
        compiled++;
        for (size_t i = 0; json_is_array(tests) && i < json_array_size(tests); i++) {
            const json_t *t = json_array_get(tests, i), *d = json_object_get(t, "data");
            if (!d)
                continue;
            const int valid = json_is_true(json_object_get(t, "valid"));
            const int acc = numla_bench_gs_doc(g, d);
            if (valid) {
                vt++;
                va += acc;
            } else {
                it++;
                ir += !acc;
                if (acc) {
                    char *text = json_dumps(d, JSON_COMPACT | JSON_ENCODE_ANY);
                    fprintf(stderr, "INVALID ACCEPTED %s: %.300s\n", path, text ? text : "?");
                    free(text);
                }
            }
        }
        numla_grammar_destroy(&g);
        json_decref(f);
    }
    printf("schemas: %lld files, %lld unreadable, %lld compiled (%.1f %%), %.1f us per compile\n",
           (long long)files, (long long)unreadable, (long long)compiled,
           files ? 100.0 * (double)compiled / (double)files : 0.0,
           files ? 1e6 * t_compile / (double)files : 0.0);
    if (vt || it)
        printf("tests: valid accepted %lld / %lld (%.1f %%), invalid rejected %lld / %lld "
               "(%.1f %%)\n", (long long)va, (long long)vt, vt ? 100.0 * (double)va / (double)vt : 0,
               (long long)ir, (long long)it, it ? 100.0 * (double)ir / (double)it : 0);
    for (int pass = 0; pass < 8 && nr; pass++) { /* the most frequent refusals */
        int best = 0;
        for (int r = 1; r < nr; r++)
            best = reasons[r].n > reasons[best].n ? r : best;
        if (!reasons[best].n)
            break;
        printf("  refused for '%s': %lld\n", reasons[best].key, (long long)reasons[best].n);
        reasons[best].n = 0;
    }
    return 0;
}

NUMLA_CLI_COMMAND("bench grammar-schemas", numla_bench_grammar_schemas,
                  "[--verbose] < FILE_LIST: compile JSON Schemas, match their test documents")
