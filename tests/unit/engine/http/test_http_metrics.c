/* tests/unit/engine/http/test_http_metrics.c — the Prometheus text (engine/http/metrics.h):
 * every series present with the values put in, cumulative buckets, concurrent updates. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/http/metrics.h"
#include "test_util.h"

/* The value of the sample line that starts with `series ` (-1 when absent). */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return atof(p + n + 1);
    return -1;
}

static void test_render(void)
{
    numla_http_metrics *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_metrics_create(&m), NUMLA_STATUS_OK);
    numla_http_metrics_request_done(m, NUMLA_HTTP_OUTCOME_OK);
    numla_http_metrics_request_done(m, NUMLA_HTTP_OUTCOME_OK);
    numla_http_metrics_request_done(m, NUMLA_HTTP_OUTCOME_REJECTED);
    numla_http_metrics_add_tokens(m, 10, 4);
    numla_http_metrics_add_tokens(m, 5, 2);
    numla_http_metrics_observe_ttft(m, 0.02);  /* bucket 0.025 */
    numla_http_metrics_observe_ttft(m, 0.3);   /* bucket 0.5 */
    numla_http_metrics_observe_ttft(m, 100);   /* +Inf only */
    numla_http_metrics_observe_tpot(m, 0.01);  /* exactly on the 0.01 bound: le is inclusive */
    numla_http_metrics_set_engine(m, 3, 40, 60);
    numla_http_metrics_set_waiting(m, 7);
    numla_http_metrics_add_preemptions(m, 2);
    const numla_http_prefix_figures pf = {.queried_tokens = 400, .hit_tokens = 100,
                                          .prompt_cached = 96, .prompt_computed = 250,
                                          .blocks_in_use = 5, .blocks_idle = 9};
    numla_http_metrics_set_prefix(m, &pf);
    char *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_metrics_render(m, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_total{outcome=\"ok\"}"), 2);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_total{outcome=\"rejected\"}"), 1);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_total{outcome=\"cancelled\"}"), 0);
    CU_ASSERT_EQUAL(sample(t, "numla_prompt_tokens_total"), 15);
    CU_ASSERT_EQUAL(sample(t, "numla_generation_tokens_total"), 6);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"0.01\"}"), 0);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"0.025\"}"), 1);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"0.25\"}"), 1);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"0.5\"}"), 2);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"60\"}"), 2);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 3);
    CU_ASSERT_EQUAL(sample(t, "numla_time_to_first_token_seconds_count"), 3);
    CU_ASSERT_DOUBLE_EQUAL(sample(t, "numla_time_to_first_token_seconds_sum"), 100.32, 1e-9);
    CU_ASSERT_EQUAL(sample(t, "numla_time_per_output_token_seconds_bucket{le=\"0.005\"}"), 0);
    CU_ASSERT_EQUAL(sample(t, "numla_time_per_output_token_seconds_bucket{le=\"0.01\"}"), 1);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_running"), 3);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_waiting"), 7);
    CU_ASSERT_EQUAL(sample(t, "numla_kv_blocks_used"), 40);
    CU_ASSERT_EQUAL(sample(t, "numla_kv_blocks_free"), 60);
    CU_ASSERT_EQUAL(sample(t, "numla_preemptions_total"), 2);
    CU_ASSERT_DOUBLE_EQUAL(sample(t, "numla_prefix_cache_hit_rate"), 0.25, 1e-9);
    CU_ASSERT_EQUAL(sample(t, "numla_prefix_cache_queried_tokens_total"), 400);
    CU_ASSERT_EQUAL(sample(t, "numla_prefix_cache_hit_tokens_total"), 100);
    CU_ASSERT_EQUAL(sample(t, "numla_prompt_tokens_cached_total"), 96);
    CU_ASSERT_EQUAL(sample(t, "numla_prompt_tokens_computed_total"), 250);
    CU_ASSERT_EQUAL(sample(t, "numla_kv_blocks_cached_in_use"), 5);
    CU_ASSERT_EQUAL(sample(t, "numla_kv_blocks_cached_idle"), 9);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE numla_prefix_cache_hit_rate gauge\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE numla_requests_total counter\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE numla_time_to_first_token_seconds histogram\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE numla_kv_blocks_free gauge\n"));
    /* every line is a comment or "name[{labels}] value" */
    for (char *line = t; *line;) {
        char *nl = strchr(line, '\n');
        CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
        NUMLA_ASSERT_MSG(line[0] == '#' || (strncmp(line, "numla_", 6) == 0 && memchr(line, ' ', (size_t)(nl - line))),
                         "bad line %.*s", (int)(nl - line), line);
        line = nl + 1;
    }
    free(t);
    numla_http_metrics_destroy(&m);
    CU_ASSERT_PTR_NULL(m);
}

static void *hammer(void *arg)
{
    numla_http_metrics *m = arg;
    for (int i = 0; i < 20000; i++) {
        numla_http_metrics_request_done(m, NUMLA_HTTP_OUTCOME_OK);
        numla_http_metrics_add_tokens(m, 1, 2);
        numla_http_metrics_observe_tpot(m, 0.02);
    }
    return NULL;
}

static void test_concurrent_updates(void)
{
    numla_http_metrics *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_metrics_create(&m), NUMLA_STATUS_OK);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, m);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_metrics_render(m, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(sample(t, "numla_requests_total{outcome=\"ok\"}"), 80000);
    CU_ASSERT_EQUAL(sample(t, "numla_prompt_tokens_total"), 80000);
    CU_ASSERT_EQUAL(sample(t, "numla_generation_tokens_total"), 160000);
    CU_ASSERT_EQUAL(sample(t, "numla_time_per_output_token_seconds_count"), 80000);
    free(t);
    numla_http_metrics_destroy(&m);
}

NUMLA_TEST_SUITE(http_metrics, NULL, NULL, NUMLA_TEST(test_render),
                 NUMLA_TEST(test_concurrent_updates))
