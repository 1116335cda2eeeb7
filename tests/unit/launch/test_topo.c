/* tests/unit/launch/test_topo.c — suite `topo`: topology reading, binding plans and mpirun
 * lines for synthetic and XML machines (two packages with sub-NUMA clusters, eight nodes, one
 * node, a memory-only CXL node), plan errors, and binding this process for real. */
#define _GNU_SOURCE
#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/bind.h"
#include "launch/plan.h"
#include "launch/topo.h"
#include "test_util.h"

static numla_topo *load_synthetic(const char *desc)
{
    numla_topo *t = NULL;
    numla_status s = numla_topo_load(desc, NULL, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load '%s': %s", desc, numla_error_message());
    return t;
}

static numla_launch_plan *make_plan(const numla_topo *t, int ranks, int threads, int over,
                                    int ht)
{
    numla_launch_opts o = {.ranks = ranks, .threads_per_rank = threads, .oversubscribe = over,
                           .hyperthreads = ht};
    numla_launch_plan *p = NULL;
    numla_status s = numla_launch_plan_make(t, &o, &p);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "plan: %s", numla_error_message());
    return p;
}

/* Rank r's cpus must be first, first+stride, ... (count of them). */
static int cpus_are(const numla_launch_rank *rk, int first, int stride, int count)
{
    if (rk->num_cpus != count)
        return 0;
    for (int i = 0; i < count; i++)
        if (rk->cpus[i] != first + i * stride)
            return 0;
    return 1;
}

/* The mpirun line for plan p with a fixed exe and "run --model m", shell-joined. */
static char *mpirun_line(const numla_launch_plan *p, int as_root, int keep_places)
{
    char *args[] = {"run", "--model", "m"};
    numla_launch_mpirun_opts mo = {.exe = "/opt/numla", .as_root = as_root,
                                   .keep_omp_places = keep_places};
    char **v = NULL;
    int n = 0;
    numla_status s = numla_launch_plan_mpirun(p, &mo, 3, args, &v, &n);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "mpirun line: %s", numla_error_message());
    if (s != NUMLA_STATUS_OK)
        return NULL;
    CU_ASSERT_PTR_NULL(v[n]);
    CU_ASSERT_STRING_EQUAL(v[n - 1], "m");
    char *line = numla_launch_shell_join(n, v);
    free(v);
    return line;
}

static void expect_line(const numla_launch_plan *p, int as_root, int keep, const char *want)
{
    char *line = mpirun_line(p, as_root, keep);
    NUMLA_ASSERT_MSG(line && !strcmp(line, want), "mpirun line\n      got  %s\n      want %s",
                     line ? line : "(null)", want);
    free(line);
}

static void test_two_packages_snc(void)
{
    numla_topo *t = load_synthetic("pack:2 numa:2 core:16 pu:2");
    if (!t)
        return;
    CU_ASSERT_EQUAL(t->num_nodes, 4);
    CU_ASSERT_EQUAL(t->num_packages, 2);
    CU_ASSERT_EQUAL(t->num_cores, 64);
    CU_ASSERT_EQUAL(t->num_pus, 128);
    CU_ASSERT_FALSE(t->this_system);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(t->nodes[i].os_index, i);
        CU_ASSERT_EQUAL(t->nodes[i].package, i / 2);
        CU_ASSERT_EQUAL(t->nodes[i].num_cores, 16);
        CU_ASSERT(t->nodes[i].memory_bytes > 0);
        CU_ASSERT_EQUAL(t->nodes[i].cores[3].num_pus, 2);
        CU_ASSERT_EQUAL(t->nodes[i].cores[3].pus[1], 32 * i + 7);
    }
    numla_launch_plan *p = make_plan(t, 0, 0, 0, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 4);
        CU_ASSERT_FALSE(p->oversubscribed);
        CU_ASSERT(p->uniform);
        for (int r = 0; r < 4; r++) {
            CU_ASSERT_EQUAL(p->ranks[r].node, r);
            CU_ASSERT_EQUAL(p->ranks[r].threads, 16);
            CU_ASSERT_EQUAL(p->ranks[r].num_cores, 16);
            NUMLA_ASSERT_MSG(cpus_are(&p->ranks[r], 32 * r, 2, 16),
                             "rank %d: one PU per core expected", r);
        }
        expect_line(p, 0, 0,
                    "mpirun -n 4 --map-by ppr:1:numa:PE=16 --bind-to core -x OMP_NUM_THREADS=16 "
                    "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla run --model m");
        expect_line(p, 1, 1,
                    "mpirun -n 4 --map-by ppr:1:numa:PE=16 --bind-to core --allow-run-as-root "
                    "-x OMP_NUM_THREADS=16 -x OMP_PLACES -x OMP_PROC_BIND /opt/numla run "
                    "--model m");
    }
    numla_launch_plan_destroy(&p);
    CU_ASSERT_PTR_NULL(p);

    /* Hyper-threads on request: every PU, places are threads. */
    p = make_plan(t, 0, 0, 0, 1);
    if (p) {
        for (int r = 0; r < 4; r++) {
            CU_ASSERT(cpus_are(&p->ranks[r], 32 * r, 1, 32));
            CU_ASSERT_EQUAL(p->ranks[r].threads, 32);
        }
        expect_line(p, 0, 0,
                    "mpirun -n 4 --map-by ppr:1:numa:PE=16 --bind-to core "
                    "-x NUMLA_PLAN=hyperthreads=1 -x OMP_NUM_THREADS=32 -x OMP_PLACES=threads -x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);

    /* Fewer ranks than nodes: the first nodes; fewer threads than cores is fine. */
    p = make_plan(t, 2, 8, 0, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 2);
        CU_ASSERT_EQUAL(p->ranks[0].node, 0);
        CU_ASSERT_EQUAL(p->ranks[1].node, 1);
        CU_ASSERT_EQUAL(p->ranks[1].threads, 8);
        CU_ASSERT(cpus_are(&p->ranks[1], 32, 2, 16));
        expect_line(p, 0, 0,
                    "mpirun -n 2 --map-by ppr:1:numa:PE=16 --bind-to core -x NUMLA_PLAN=threads=8 "
                    "-x OMP_NUM_THREADS=8 "
                    "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
    CU_ASSERT_PTR_NULL(t);
}

static void test_eight_nodes_and_oversubscribe(void)
{
    numla_topo *t = load_synthetic("numa:8 core:8 pu:1");
    if (!t)
        return;
    CU_ASSERT_EQUAL(t->num_nodes, 8);
    numla_launch_plan *p = make_plan(t, 0, 0, 0, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 8);
        for (int r = 0; r < 8; r++) {
            CU_ASSERT_EQUAL(p->ranks[r].node, r);
            CU_ASSERT(cpus_are(&p->ranks[r], 8 * r, 1, 8));
            CU_ASSERT_EQUAL(p->ranks[r].threads, 8);
        }
        expect_line(p, 0, 0,
                    "mpirun -n 8 --map-by ppr:1:numa:PE=8 --bind-to core -x OMP_NUM_THREADS=8 "
                    "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);

    /* More ranks than nodes is an error naming the limit... */
    numla_launch_opts o = {.ranks = 9};
    numla_status s = numla_launch_plan_make(t, &o, &p);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "only 8 NUMA nodes") &&
                         strstr(numla_error_message(), "--oversubscribe"),
                     "message: %s", numla_error_message());
    /* ...and so are more threads than a rank's CPUs. */
    o = (numla_launch_opts){.threads_per_rank = 9};
    s = numla_launch_plan_make(t, &o, &p);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_INVALID_ARG);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "only 8 CPUs") != NULL, "message: %s",
                     numla_error_message());
    o = (numla_launch_opts){.ranks = -1};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);

    /* With oversubscribe: round-robin, ranks on one node split its cores. */
    p = make_plan(t, 9, 0, 1, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 9);
        CU_ASSERT(p->oversubscribed);
        CU_ASSERT_FALSE(p->uniform);
        CU_ASSERT_EQUAL(p->ranks_per_node, 2);
        CU_ASSERT_EQUAL(p->ranks[8].node, 0);
        CU_ASSERT(cpus_are(&p->ranks[0], 0, 1, 4));
        CU_ASSERT(cpus_are(&p->ranks[8], 4, 1, 4));
        CU_ASSERT(cpus_are(&p->ranks[1], 8, 1, 8));
        CU_ASSERT_EQUAL(p->cores_per_rank, 4);
        CU_ASSERT_EQUAL(p->threads_per_rank, 4);
        expect_line(p, 0, 0,
                    "mpirun -n 9 --map-by ppr:2:numa:PE=4 --bind-to core:overload-allowed "
                    "--oversubscribe -x NUMLA_PLAN=oversubscribe=1 -x OMP_NUM_THREADS=4 "
                    "-x OMP_PLACES=cores "
                    "-x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);
    /* Far more ranks than cores: they share cores, never get none. */
    p = make_plan(t, 80, 0, 1, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->ranks[79].node, 7);
        CU_ASSERT(cpus_are(&p->ranks[79], 56 + (79 / 8) % 8, 1, 1));
        CU_ASSERT(cpus_are(&p->ranks[64], 0, 1, 1)); /* 9th rank on node 0 wraps to core 0 */
    }
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

static void test_single_node(void)
{
    numla_topo *t = load_synthetic("core:4 pu:2");
    if (!t)
        return;
    CU_ASSERT_EQUAL(t->num_nodes, 1);
    numla_launch_plan *p = make_plan(t, 0, 0, 0, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 1);
        CU_ASSERT(cpus_are(&p->ranks[0], 0, 2, 4));
        CU_ASSERT_EQUAL(p->ranks[0].threads, 4);
        expect_line(p, 0, 0,
                    "mpirun -n 1 --map-by ppr:1:numa:PE=4 --bind-to core -x OMP_NUM_THREADS=4 "
                    "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);
    numla_launch_opts o = {.ranks = 2};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    numla_topo_destroy(&t);

    /* No core level at all: every PU counts as a core. */
    t = load_synthetic("pu:3");
    if (t) {
        CU_ASSERT_EQUAL(t->num_cores, 3);
        p = make_plan(t, 0, 0, 0, 0);
        if (p)
            CU_ASSERT(cpus_are(&p->ranks[0], 0, 1, 3));
        numla_launch_plan_destroy(&p);
    }
    numla_topo_destroy(&t);
}

static void check_memory_only(numla_topo *t)
{
    CU_ASSERT_EQUAL(t->num_nodes, 3);
    CU_ASSERT_EQUAL(numla_topo_compute_nodes(t), 2);
    int memonly = -1;
    for (int i = 0; i < t->num_nodes; i++)
        if (t->nodes[i].num_cores == 0)
            memonly = t->nodes[i].os_index;
    CU_ASSERT_EQUAL(memonly, 2);
    numla_launch_plan *p = make_plan(t, 0, 0, 0, 0);
    if (p) {
        CU_ASSERT_EQUAL(p->num_ranks, 2);
        CU_ASSERT_EQUAL(p->ranks[0].node, 0);
        CU_ASSERT_EQUAL(p->ranks[1].node, 1);
        CU_ASSERT(cpus_are(&p->ranks[0], 0, 1, 4));
        CU_ASSERT(cpus_are(&p->ranks[1], 4, 1, 4));
        expect_line(p, 0, 0,
                    "mpirun -n 2 --map-by ppr:1:numa:PE=4 --bind-to core -x OMP_NUM_THREADS=4 "
                    "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla run --model m");
    }
    numla_launch_plan_destroy(&p);
    numla_launch_opts o = {.ranks = 3};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
}

/* A CXL-style node: memory attached at machine level, its cpuset covering every CPU, no core
 * of its own. Once from a committed XML file, once from the equivalent synthetic string. */
static void test_memory_only_node(void)
{
    numla_topo *t = NULL;
    const char *xml = numla_test_source_path("tests/data/topo/cxl_memonly.xml");
    numla_status s = numla_topo_load(NULL, xml, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load %s: %s", xml, numla_error_message());
    if (t) {
        CU_ASSERT(strstr(t->source, "xml") != NULL);
        check_memory_only(t);
    }
    numla_topo_destroy(&t);
    t = load_synthetic("[numa(memory=1000000000)] pack:2 [numa(memory=2000000000)] core:4 pu:1");
    if (t) {
        check_memory_only(t);
        for (int i = 0; i < t->num_nodes; i++)
            CU_ASSERT_EQUAL(t->nodes[i].memory_bytes,
                            t->nodes[i].os_index == 2 ? 1000000000ull : 2000000000ull);
    }
    numla_topo_destroy(&t);
}

static void test_bad_sources_and_env(void)
{
    numla_topo *t = NULL;
    CU_ASSERT_EQUAL(numla_topo_load("bogus:xyz", NULL, &t), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(numla_topo_load(NULL, "/nonexistent/topo.xml", &t), NUMLA_STATUS_IO);
    CU_ASSERT(strstr(numla_error_message(), "/nonexistent/topo.xml") != NULL);
    /* HWLOC_SYNTHETIC selects another machine when no explicit source is given: hwloc reads it
     * (launch/ reads no environment), and the source says the topology is not this machine's. */
    setenv("HWLOC_SYNTHETIC", "numa:3 core:2 pu:1", 1);
    numla_status s = numla_topo_load(NULL, NULL, &t);
    unsetenv("HWLOC_SYNTHETIC");
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (t) {
        CU_ASSERT_EQUAL(t->num_nodes, 3);
        CU_ASSERT(strstr(t->source, "another machine") != NULL);
        CU_ASSERT_EQUAL(t->this_system, 0);
    }
    numla_topo_destroy(&t);
}

/* What a launched rank reads back: the job size and NUMLA_PLAN from the mpirun line (the
 * settings read both from the environment and pass them in). */
static void test_opts_from_env(void)
{
    numla_launch_opts o = {0};
    CU_ASSERT_EQUAL(numla_launch_opts_from("threads=4,oversubscribe=1,hyperthreads=0", 9, &o),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(o.ranks, 9);
    CU_ASSERT_EQUAL(o.threads_per_rank, 4);
    CU_ASSERT_EQUAL(o.oversubscribe, 1);
    CU_ASSERT_EQUAL(o.hyperthreads, 0);
    /* no job size announced: the ranks stay as they were */
    CU_ASSERT_EQUAL(numla_launch_opts_from(NULL, 0, &o), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(o.ranks, 9);
    CU_ASSERT_EQUAL(numla_launch_opts_from("threads=x", 0, &o), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_launch_opts_from("colour=1", 0, &o), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "colour") != NULL);
    /* The round trip: a plan's mpirun line carries exactly its options. */
    numla_topo *t = load_synthetic("numa:8 core:8 pu:1");
    numla_launch_plan *p = t ? make_plan(t, 9, 2, 1, 0) : NULL;
    if (p) {
        char *line = mpirun_line(p, 0, 0);
        NUMLA_ASSERT_MSG(line && strstr(line, " -x NUMLA_PLAN=threads=2,oversubscribe=1 "),
                         "line: %s", line ? line : "(null)");
        free(line);
    }
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

static void test_strings(void)
{
    char buf[64];
    int a[] = {0, 1, 2, 3, 8, 10, 11};
    CU_ASSERT_STRING_EQUAL(numla_topo_cpulist(a, 7, buf, sizeof buf), "0-3,8,10-11");
    CU_ASSERT_STRING_EQUAL(numla_topo_cpulist(a, 0, buf, sizeof buf), "");
    char small[6];
    numla_topo_cpulist(a, 7, small, sizeof small);
    CU_ASSERT(strlen(small) < sizeof small);
    char *args[] = {"mpirun", "a b", "it's", "x=1,2", ""};
    char *line = numla_launch_shell_join(5, args);
    CU_ASSERT_STRING_EQUAL(line, "mpirun 'a b' 'it'\\''s' x=1,2 ''");
    free(line);
}

static int rank_cpus_eq(const numla_launch_rank *rk, const int *want, int n)
{
    if (rk->num_cpus != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (rk->cpus[i] != want[i])
            return 0;
    return 1;
}

/* A rank's CPUs stay inside the set the process was given (cpuset, taskset, launcher): the
 * plan's allowed CPUs, or the allowed CPUs themselves when the plan's are all outside. PUs of
 * "numa:2 core:4 pu:2" are numbered in order: node 0 has cores {0,1} {2,3} {4,5} {6,7}. */
static void test_restrict_to_allowed(void)
{
    numla_topo *t = load_synthetic("numa:2 core:4 pu:2");
    if (!t)
        return;
    numla_launch_plan *p = make_plan(t, 2, 0, 0, 0);
    int changed = -1;
    if (p) {
        const int plan1[] = {8, 10, 12, 14};
        CU_ASSERT(rank_cpus_eq(&p->ranks[1], plan1, 4));
        /* everything allowed: nothing changes */
        int all[16];
        for (int i = 0; i < 16; i++)
            all[15 - i] = i; /* any order */
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 0, all, 16, &changed), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(changed, 0);
        const int plan0[] = {0, 2, 4, 6};
        CU_ASSERT(rank_cpus_eq(&p->ranks[0], plan0, 4));
        CU_ASSERT_EQUAL(p->ranks[0].threads, 4);
        /* two cores' PUs allowed (like taskset -c 10-13): one PU of each, threads follow */
        const int some[] = {13, 10, 11, 12}, want1[] = {10, 12};
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 1, some, 4, &changed), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(changed, 1);
        CU_ASSERT(rank_cpus_eq(&p->ranks[1], want1, 2));
        CU_ASSERT_EQUAL(p->ranks[1].num_cores, 2);
        CU_ASSERT_EQUAL(p->ranks[1].threads, 2);
        CU_ASSERT_EQUAL(p->ranks[1].node, 1);
        /* rank 0 placed on node 1's second PUs by its launcher: that placement wins */
        const int elsewhere[] = {9, 15}, want0[] = {9, 15};
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 0, elsewhere, 2, &changed),
                        NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(changed, 1);
        CU_ASSERT(rank_cpus_eq(&p->ranks[0], want0, 2));
        CU_ASSERT_EQUAL(p->ranks[0].node, 1);
        CU_ASSERT_EQUAL(p->ranks[0].node_slot, 1);
        CU_ASSERT_EQUAL(p->ranks[0].threads, 2);
        /* no allowed CPU on the machine: an error, the rank untouched */
        const int none[] = {100};
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 0, none, 1, &changed),
                        NUMLA_STATUS_INVALID_ARG);
        CU_ASSERT(rank_cpus_eq(&p->ranks[0], want0, 2));
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 2, all, 16, &changed),
                        NUMLA_STATUS_OUT_OF_RANGE);
    }
    numla_launch_plan_destroy(&p);
    /* hyper-threads: every allowed PU of the plan's cores; fixed threads stay as asked */
    p = make_plan(t, 1, 3, 0, 1);
    if (p) {
        const int three[] = {0, 1, 2}, want[] = {0, 1, 2};
        CU_ASSERT_EQUAL(numla_launch_plan_restrict(t, p, 0, three, 3, &changed), NUMLA_STATUS_OK);
        CU_ASSERT(rank_cpus_eq(&p->ranks[0], want, 3));
        CU_ASSERT_EQUAL(p->ranks[0].num_cores, 2);
        CU_ASSERT_EQUAL(p->ranks[0].threads, 3);
    }
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* Bind this very process with a plan for this machine, check the report, then undo. */
static void test_bind_this_machine(void)
{
    numla_topo *t = NULL;
    if (numla_topo_load(NULL, NULL, &t) != NUMLA_STATUS_OK || !t->this_system) {
        numla_topo_destroy(&t);
        return; /* HWLOC_XMLFILE/HWLOC_SYNTHETIC set by the caller: nothing to bind */
    }
    numla_topo *syn = load_synthetic("numa:2 core:2 pu:1");
    numla_launch_plan *p = make_plan(t, 1, 0, 0, 0);
    if (p && syn)
        CU_ASSERT_EQUAL(numla_bind_apply(syn, p, 0, 0), NUMLA_STATUS_UNSUPPORTED);
    if (p)
        CU_ASSERT_EQUAL(numla_bind_apply(t, p, 1, 0), NUMLA_STATUS_OUT_OF_RANGE);

    cpu_set_t saved;
    sched_getaffinity(0, sizeof saved, &saved);
    int saved_threads = omp_get_max_threads();
    if (p && numla_bind_apply(t, p, 0, 0) == NUMLA_STATUS_OK) {
        numla_bind_info info;
        int problems = numla_bind_report(p, 0, 0, &info);
        NUMLA_ASSERT_MSG(problems == 0, "bind report found %d problems", problems);
        CU_ASSERT_EQUAL(info.node, p->ranks[0].node);
        CU_ASSERT_EQUAL(info.threads, p->ranks[0].threads);
        CU_ASSERT_EQUAL(info.threads_outside, 0);
        if (numa_available() >= 0) {
            char want[32];
            snprintf(want, sizeof want, "preferred %d", p->ranks[0].node);
            NUMLA_ASSERT_MSG(!strcmp(info.mempolicy, want), "mempolicy '%s'", info.mempolicy);
        }
        /* The report must notice a thread that escapes its plan. */
        if (p->ranks[0].num_cpus > 1) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(p->ranks[0].cpus[0], &one);
#pragma omp parallel
            sched_setaffinity(0, sizeof one, &one); /* every thread on one CPU: not pinned */
            CU_ASSERT(numla_bind_report(p, 0, 0, &info) > 0);
        }
    } else {
        NUMLA_ASSERT_MSG(0, "bind apply: %s", numla_error_message());
    }
    /* Given only the plan's last CPU (like taskset -c N), the binding stays on it. Without
     * OpenMP places: a runtime's places would still name the whole start mask. */
    numla_launch_plan_destroy(&p);
    p = make_plan(t, 1, 0, 0, 0);
    if (p && p->ranks[0].num_cpus > 1 && omp_get_num_places() == 0) {
        int last = p->ranks[0].cpus[p->ranks[0].num_cpus - 1];
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
#pragma omp parallel
        sched_setaffinity(0, sizeof one, &one);
        CU_ASSERT_EQUAL(numla_bind_apply(t, p, 0, 0), NUMLA_STATUS_OK);
        numla_bind_info info;
        CU_ASSERT_EQUAL(numla_bind_report(p, 0, 0, &info), 0);
        CU_ASSERT_EQUAL(info.num_cpus, 1);
        char want[16];
        snprintf(want, sizeof want, "%d", last);
        NUMLA_ASSERT_MSG(!strcmp(info.cpus, want), "bound to %s, allowed only %s", info.cpus,
                         want);
        CU_ASSERT_EQUAL(info.threads, 1);
        cpu_set_t mine;
        sched_getaffinity(0, sizeof mine, &mine);
        CU_ASSERT(CPU_EQUAL(&mine, &one));
    }
    /* Undo, so later suites in the same process run unbound. */
#pragma omp parallel
    sched_setaffinity(0, sizeof saved, &saved);
    omp_set_num_threads(saved_threads);
    if (numa_available() >= 0)
        numa_set_localalloc();
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&syn);
    numla_topo_destroy(&t);
}

NUMLA_TEST_SUITE(topo, NULL, NULL, NUMLA_TEST(test_two_packages_snc),
                 NUMLA_TEST(test_eight_nodes_and_oversubscribe), NUMLA_TEST(test_single_node),
                 NUMLA_TEST(test_memory_only_node), NUMLA_TEST(test_bad_sources_and_env),
                 NUMLA_TEST(test_strings), NUMLA_TEST(test_opts_from_env),
                 NUMLA_TEST(test_restrict_to_allowed),
                 NUMLA_TEST(test_bind_this_machine))
