/* tests/unit/launch/test_plan.c — suite `plan`: binding plans (launch/plan.c) checked against
 * plan.h's rules written out independently here: over a grid of synthetic machines and
 * options, every plan's ranks, cores, CPUs, threads and summary fields, and its mpirun line;
 * a hand-written XML machine with unequal nodes (tests/data/topo/asym_cores.xml); restricting
 * a hyper-threaded rank; the mpirun line's own options; shell quoting checked by /bin/sh.
 * (suite `topo` holds the first plan tests, on named machines.) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/plan.h"
#include "launch/topo.h"
#include "test_util.h"

/* What plan.h promises for R ranks on "numa:N core:C pu:P" (PU os index (node*C+core)*P+u),
 * checked on p; returns the number of broken rules (each printed). */
static int check_plan(const numla_launch_plan *p, int N, int C, int P,
                      const numla_launch_opts *o, const char *what)
{
    int bad = 0;
#define RULE(cond, ...)                                                                    \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            bad++;                                                                         \
            fprintf(stderr, "\n    %s: ", what);                                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
        }                                                                                  \
    } while (0)
    const int R = o->ranks ? o->ranks : N;
    RULE(p->num_ranks == R, "%d ranks, want %d", p->num_ranks, R);
    if (p->num_ranks != R)
        return bad;
    int most_share = 0, fewest_cores = 1 << 30, fewest_threads = 1 << 30, over = 0;
    for (int j = 0; j < N; j++) {
        const int share = R / N + (j < R % N); /* round-robin: ranks j, j+N, j+2N, ... */
        most_share = share > most_share ? share : most_share;
        over |= share > 1;
        int next_core = 0; /* ranks of one node take its cores in order, without gaps */
        for (int pos = 0; pos < share; pos++) {
            const int r = j + pos * N;
            const numla_launch_rank *rk = &p->ranks[r];
            RULE(rk->node == j && rk->node_slot == j, "rank %d on node %d, want %d", r,
                 rk->node, j);
            int first = -1, cores = rk->num_cores;
            if (share <= C) {
                const int lo = C / share, hi = (C + share - 1) / share;
                RULE(cores == lo || cores == hi, "rank %d has %d cores, want %d or %d", r, cores,
                     lo, hi);
                first = next_core;
                next_core += cores;
            } else { /* more ranks than cores: one shared core each, in turn */
                RULE(cores == 1, "rank %d has %d cores, want 1 (shared)", r, cores);
                first = pos % C;
                over = 1;
            }
            const int per = o->hyperthreads ? P : 1;
            RULE(rk->num_cpus == cores * per, "rank %d has %d CPUs, want %d", r, rk->num_cpus,
                 cores * per);
            for (int k = 0; k < rk->num_cpus && k < cores * per; k++) {
                const int want = ((j * C) + first + k / per) * P + k % per;
                RULE(rk->cpus[k] == want, "rank %d CPU %d is %d, want %d", r, k, rk->cpus[k],
                     want);
            }
            const int threads = o->threads_per_rank ? o->threads_per_rank : rk->num_cpus;
            RULE(rk->threads == threads, "rank %d has %d threads, want %d", r, rk->threads,
                 threads);
            over |= threads > rk->num_cpus;
            fewest_cores = cores < fewest_cores ? cores : fewest_cores;
            fewest_threads = threads < fewest_threads ? threads : fewest_threads;
        }
        if (share > 0 && share <= C)
            RULE(next_core == C, "node %d: its ranks cover %d of %d cores", j, next_core, C);
    }
    int uniform = 1;
    for (int r = 1; r < R; r++)
        uniform &= p->ranks[r].num_cores == p->ranks[0].num_cores &&
                   p->ranks[r].threads == p->ranks[0].threads;
    RULE(p->ranks_per_node == most_share, "ranks_per_node %d, want %d", p->ranks_per_node,
         most_share);
    RULE(p->cores_per_rank == fewest_cores, "cores_per_rank %d, want %d", p->cores_per_rank,
         fewest_cores);
    RULE(p->threads_per_rank == fewest_threads, "threads_per_rank %d, want %d",
         p->threads_per_rank, fewest_threads);
    RULE(p->uniform == uniform, "uniform %d, want %d", p->uniform, uniform);
    RULE(!!p->oversubscribed == over, "oversubscribed %d, want %d", p->oversubscribed, over);
#undef RULE
    return bad;
}

/* The mpirun line a plan must give (plan.h's example, with its optional parts). */
static void want_line(const numla_launch_plan *p, const numla_launch_opts *o, char *buf,
                      size_t n)
{
    char plan[64] = "";
    if (o->threads_per_rank)
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "threads=%d,",
                 o->threads_per_rank);
    if (o->oversubscribe)
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "oversubscribe=1,");
    if (o->hyperthreads)
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "hyperthreads=1,");
    char planarg[96] = "";
    if (plan[0]) {
        plan[strlen(plan) - 1] = '\0';
        snprintf(planarg, sizeof planarg, "-x NUMLA_PLAN=%s ", plan);
    }
    const int ht = p->ranks[0].num_cpus > p->ranks[0].num_cores;
    snprintf(buf, n,
             "mpirun -n %d --map-by ppr:%d:numa:PE=%d --bind-to %s %s-x OMP_NUM_THREADS=%d "
             "-x OMP_PLACES=%s -x OMP_PROC_BIND=close /opt/numla serve",
             p->num_ranks, p->ranks_per_node, p->cores_per_rank,
             p->oversubscribed ? "core:overload-allowed --oversubscribe" : "core", planarg,
             p->threads_per_rank, ht ? "threads" : "cores");
}

static char *line_of(const numla_launch_plan *p, const numla_launch_mpirun_opts *mo, int argc,
                     char **args)
{
    char **v = NULL;
    int n = 0;
    if (numla_launch_plan_mpirun(p, mo, argc, args, &v, &n) != NUMLA_STATUS_OK) {
        NUMLA_ASSERT_MSG(0, "mpirun line: %s", numla_error_message());
        return NULL;
    }
    CU_ASSERT_PTR_NULL(v[n]);
    char *line = numla_launch_shell_join(n, v);
    free(v);
    return line;
}

/* Every machine of a grid with every option mix: the plan keeps plan.h's rules, and the
 * errors come exactly where they say (more ranks than nodes, more threads than CPUs). */
static void test_rules_over_a_grid(void)
{
    static const int Ns[] = {1, 2, 3, 4}, Cs[] = {1, 2, 3, 5, 8}, Ps[] = {1, 2};
    int plans = 0, errors = 0, broken = 0;
    for (size_t a = 0; a < sizeof Ns / sizeof *Ns; a++)
        for (size_t b = 0; b < sizeof Cs / sizeof *Cs; b++)
            for (size_t c = 0; c < sizeof Ps / sizeof *Ps; c++) {
                const int N = Ns[a], C = Cs[b], P = Ps[c];
                char desc[64];
                snprintf(desc, sizeof desc, "numa:%d core:%d pu:%d", N, C, P);
                numla_topo *t = NULL;
                if (numla_topo_load(desc, NULL, &t) != NUMLA_STATUS_OK) {
                    NUMLA_ASSERT_MSG(0, "load %s: %s", desc, numla_error_message());
                    continue;
                }
                const int Rs[] = {0, 1, N, N + 1, 2 * N + 1, C * N + 2};
                const int Ts[] = {0, 1, 3};
                for (size_t ri = 0; ri < sizeof Rs / sizeof *Rs; ri++)
                    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                        for (int ht = 0; ht < 2; ht++)
                            for (int ov = 0; ov < 2; ov++) {
                                numla_launch_opts o = {.ranks = Rs[ri],
                                                       .threads_per_rank = Ts[ti],
                                                       .oversubscribe = ov, .hyperthreads = ht};
                                char what[160];
                                snprintf(what, sizeof what, "%s ranks %d threads %d ht %d "
                                         "over %d", desc, o.ranks, o.threads_per_rank, ht, ov);
                                const int R = o.ranks ? o.ranks : N;
                                /* the fewest CPUs any rank gets */
                                const int share = (R + N - 1) / N;
                                const int cores = share <= C ? C / share : 1;
                                const int cpus = cores * (ht ? P : 1);
                                numla_launch_plan *p = NULL;
                                numla_status s = numla_launch_plan_make(t, &o, &p);
                                if (R > N && !ov) {
                                    errors++;
                                    char want[64];
                                    snprintf(want, sizeof want, "only %d NUMA node", N);
                                    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_INVALID_ARG && !p &&
                                                         strstr(numla_error_message(), want),
                                                     "%s: %d %s", what, (int)s,
                                                     numla_error_message());
                                } else if (o.threads_per_rank > cpus && !ov) {
                                    errors++;
                                    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_INVALID_ARG && !p &&
                                                         strstr(numla_error_message(),
                                                                "threads per rank requested"),
                                                     "%s: %d %s", what, (int)s,
                                                     numla_error_message());
                                } else if (s != NUMLA_STATUS_OK) {
                                    NUMLA_ASSERT_MSG(0, "%s: %s", what, numla_error_message());
                                } else {
                                    plans++;
                                    broken += check_plan(p, N, C, P, &o, what) > 0;
                                    char want[512], *args[] = {"serve"};
                                    numla_launch_mpirun_opts mo = {.exe = "/opt/numla"};
                                    want_line(p, &o, want, sizeof want);
                                    char *line = line_of(p, &mo, 1, args);
                                    NUMLA_ASSERT_MSG(line && !strcmp(line, want),
                                                     "%s:\n      got  %s\n      want %s", what,
                                                     line ? line : "(null)", want);
                                    free(line);
                                }
                                numla_launch_plan_destroy(&p);
                            }
                numla_topo_destroy(&t);
            }
    NUMLA_ASSERT_MSG(broken == 0, "%d of %d plans broke a rule", broken, plans);
    CU_ASSERT(plans > 500);
    CU_ASSERT(errors > 100);
}

static int cpus_eq(const numla_launch_rank *rk, const int *want, int n)
{
    return rk->num_cpus == n && !memcmp(rk->cpus, want, (size_t)n * sizeof *want);
}

/* Nodes of unequal size (asym_cores.xml: node 0 four single-PU cores, node 1 two cores of two
 * PUs): the plan is not uniform, and the mpirun line carries the smaller rank's figures. */
static void test_unequal_nodes_from_xml(void)
{
    numla_topo *t = NULL;
    const char *xml = numla_test_source_path("tests/data/topo/asym_cores.xml");
    numla_status s = numla_topo_load(NULL, xml, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load %s: %s", xml, numla_error_message());
    if (!t)
        return;
    CU_ASSERT_EQUAL(t->num_nodes, 2);
    CU_ASSERT_EQUAL(t->num_cores, 6);
    CU_ASSERT_EQUAL(t->num_pus, 8);
    CU_ASSERT_FALSE(t->this_system);

    numla_launch_opts o = {0};
    numla_launch_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    const int r0[] = {0, 1, 2, 3}, r1[] = {4, 6};
    CU_ASSERT(cpus_eq(&p->ranks[0], r0, 4));
    CU_ASSERT(cpus_eq(&p->ranks[1], r1, 2));
    CU_ASSERT_EQUAL(p->ranks[0].threads, 4);
    CU_ASSERT_EQUAL(p->ranks[1].threads, 2);
    CU_ASSERT_EQUAL(p->ranks[1].node, 1);
    CU_ASSERT_FALSE(p->uniform);
    CU_ASSERT_FALSE(p->oversubscribed);
    CU_ASSERT_EQUAL(p->cores_per_rank, 2);
    CU_ASSERT_EQUAL(p->threads_per_rank, 2);
    numla_launch_mpirun_opts mo = {.exe = "/opt/numla"};
    char *args[] = {"serve"};
    char *line = line_of(p, &mo, 1, args);
    CU_ASSERT_STRING_EQUAL(line ? line : "", "mpirun -n 2 --map-by ppr:1:numa:PE=2 --bind-to core "
                                             "-x OMP_NUM_THREADS=2 -x OMP_PLACES=cores "
                                             "-x OMP_PROC_BIND=close /opt/numla serve");
    free(line);
    numla_launch_plan_destroy(&p);

    /* 3 threads fit node 0's rank but not node 1's: the error names rank 1 and its CPUs */
    o = (numla_launch_opts){.threads_per_rank = 3};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    NUMLA_ASSERT_MSG(NULL != strstr(numla_error_message(), "rank 1 (NUMA node 1) has only 2 CPUs"),
                     "message: %s", numla_error_message());

    /* hyper-threads: node 1's rank gets both PUs of its cores */
    o = (numla_launch_opts){.hyperthreads = 1};
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    const int h1[] = {4, 5, 6, 7};
    CU_ASSERT(cpus_eq(&p->ranks[0], r0, 4));
    CU_ASSERT(cpus_eq(&p->ranks[1], h1, 4));
    CU_ASSERT_EQUAL(p->ranks[1].threads, 4);
    CU_ASSERT_EQUAL(p->ranks[1].num_cores, 2);
    /* the launcher gave rank 1 both PUs of core 4 and one of core 5: it keeps all three */
    const int given[] = {6, 4, 5};
    int changed = 0;
    CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 1, given, 3, &changed), NUMLA_STATUS_OK);
    const int want[] = {4, 5, 6};
    CU_ASSERT_EQUAL(changed, 1);
    CU_ASSERT(cpus_eq(&p->ranks[1], want, 3));
    CU_ASSERT_EQUAL(p->ranks[1].num_cores, 2);
    CU_ASSERT_EQUAL(p->ranks[1].threads, 3);
    const int seconds[] = {7, 5};
    CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, -1, seconds, 2, &changed),
                    NUMLA_STATUS_OUT_OF_RANGE);
    CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 0, NULL, 2, &changed),
                    NUMLA_STATUS_INVALID_ARG);
    numla_launch_plan_destroy(&p);

    /* three ranks: node 0 is split between ranks 0 and 2 */
    o = (numla_launch_opts){.ranks = 3, .oversubscribe = 1};
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    const int a[] = {0, 1}, c[] = {2, 3};
    CU_ASSERT(cpus_eq(&p->ranks[0], a, 2));
    CU_ASSERT(cpus_eq(&p->ranks[1], r1, 2));
    CU_ASSERT(cpus_eq(&p->ranks[2], c, 2));
    CU_ASSERT(p->uniform);
    CU_ASSERT_EQUAL(p->ranks_per_node, 2);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* The mpirun line's own options: another launcher, every NUMLA_PLAN item, bindings reported,
 * no arguments after the program; bad arguments are refused. */
static void test_mpirun_options(void)
{
    numla_topo *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_topo_load("numa:2 core:2 pu:2", NULL, &t), NUMLA_STATUS_OK);
    numla_launch_opts o = {.threads_per_rank = 2, .oversubscribe = 1, .hyperthreads = 1};
    numla_launch_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    numla_launch_mpirun_opts mo = {.mpirun = "/usr/bin/mpiexec", .exe = "./numla",
                                   .report_bindings = 1, .as_root = 1};
    char *line = line_of(p, &mo, 0, NULL);
    CU_ASSERT_STRING_EQUAL(line ? line : "",
                           "/usr/bin/mpiexec -n 2 --map-by ppr:1:numa:PE=2 --bind-to core "
                           "--allow-run-as-root --report-bindings "
                           "-x NUMLA_PLAN=threads=2,oversubscribe=1,hyperthreads=1 "
                           "-x OMP_NUM_THREADS=2 -x OMP_PLACES=threads -x OMP_PROC_BIND=close "
                           "./numla");
    free(line);
    char **v = NULL;
    int n = 0;
    mo.exe = NULL;
    CU_ASSERT_EQUAL(numla_launch_plan_mpirun(p, &mo, 0, NULL, &v, &n), NUMLA_STATUS_INVALID_ARG);
    mo.exe = "./numla";
    CU_ASSERT_EQUAL(numla_launch_plan_mpirun(p, &mo, 2, NULL, &v, &n), NUMLA_STATUS_INVALID_ARG);
    numla_launch_plan_destroy(&p);
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, NULL, &p), NUMLA_STATUS_INVALID_ARG);
    o = (numla_launch_opts){.threads_per_rank = -2};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    numla_topo_destroy(&t);
}

/* shell_join's line, read back by /bin/sh, gives the same words. */
static void test_shell_join_round_trip(void)
{
    char *words[] = {"printf", "%s\\n", "plain", "two words", "it's", "a\"b", "$HOME", "*",
                     "semi;colon", "back\\slash", "x=1,2", "-n", "", "tab\there", "~user"};
    const int n = (int)(sizeof words / sizeof *words);
    char *line = numla_launch_shell_join(n, words);
    CU_ASSERT_PTR_NOT_NULL_FATAL(line);
    CU_ASSERT_EQUAL(strncmp(line, "printf '%s\\n' plain 'two words' ", 32), 0);
    FILE *f = popen(line, "r"); /* popen runs /bin/sh -c line */
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char got[512];
    size_t len = fread(got, 1, sizeof got - 1, f);
    got[len] = '\0';
    pclose(f);
    char want[512] = "";
    for (int i = 2; i < n; i++) {
        strcat(want, words[i]);
        strcat(want, "\n");
    }
    NUMLA_ASSERT_MSG(!strcmp(got, want), "line %s\n      printed:\n%s", line, got);
    free(line);
    char *empty = numla_launch_shell_join(0, NULL);
    CU_ASSERT_STRING_EQUAL(empty ? empty : "(null)", "");
    free(empty);
}

NUMLA_TEST_SUITE(plan, NULL, NULL, NUMLA_TEST(test_rules_over_a_grid),
                 NUMLA_TEST(test_unequal_nodes_from_xml), NUMLA_TEST(test_mpirun_options),
                 NUMLA_TEST(test_shell_join_round_trip))
