/* tests/unit/launch/test_bind.c — suite `bind`: launch/bind.c applied to this process and
 * checked with independent system calls (sched_getaffinity of every OpenMP thread,
 * get_mempolicy), the report's counts for plans the process does not match, its one-line
 * summary, every thread checked against the mask recorded at start, and the refusals (another
 * machine's topology, a rank outside the plan). The process's affinity, thread count and memory
 * policy are restored afterwards. */
#define _GNU_SOURCE
#include <numa.h>
#include <numaif.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/bind.h"
#include "launch/plan.h"
#include "launch/topo.h"
#include "test_util.h"

/* The process state a binding changes, to put back. */
typedef struct saved_state {
    cpu_set_t affinity;
    int threads;
} saved_state;

static void save(saved_state *s)
{
    sched_getaffinity(0, sizeof s->affinity, &s->affinity);
    s->threads = omp_get_max_threads();
}

static void restore(const saved_state *s)
{
#pragma omp parallel
    sched_setaffinity(0, sizeof s->affinity, &s->affinity);
    sched_setaffinity(0, sizeof s->affinity, &s->affinity);
    omp_set_num_threads(s->threads);
    if (numa_available() >= 0) {
        numa_set_membind(numa_all_nodes_ptr);
        numa_set_localalloc();
    }
}

/* This machine's topology, or NULL when the caller pointed hwloc elsewhere. */
static numla_topo *this_machine(void)
{
    numla_topo *t = NULL;
    if (numla_topo_load(NULL, NULL, &t) != NUMLA_STATUS_OK || !t->this_system) {
        numla_topo_destroy(&t);
        return NULL;
    }
    return t;
}

/* Only CPU `cpu` in the set. */
static int only(const cpu_set_t *s, int cpu)
{
    return CPU_COUNT(s) == 1 && CPU_ISSET(cpu, s);
}

static void test_refusals(void)
{
    numla_topo *syn = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_topo_load("numa:2 core:2 pu:1", NULL, &syn), NUMLA_STATUS_OK);
    numla_launch_opts o = {0};
    numla_launch_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(syn, &o, &p), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_bind_apply(NULL, p, 0, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_bind_apply(syn, NULL, 0, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_bind_apply(syn, p, 0, 0), NUMLA_STATUS_UNSUPPORTED);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "not this machine") &&
                         strstr(numla_error_message(), "numa:2 core:2 pu:1"),
                     "message: %s", numla_error_message());
    numla_topo *t = this_machine();
    if (t) {
        CU_ASSERT_EQUAL(numla_bind_apply(t, p, 7, 0), NUMLA_STATUS_OUT_OF_RANGE);
        NUMLA_ASSERT_MSG(strstr(numla_error_message(), "rank 7") != NULL, "message: %s",
                         numla_error_message());
    }
    /* the report of a rank the plan does not have: one problem, nothing measured */
    numla_bind_info info;
    memset(&info, 0x55, sizeof info);
    CU_ASSERT_EQUAL(numla_bind_report(p, 5, 0, &info), 1);
    CU_ASSERT_EQUAL(info.num_cpus, 0);
    CU_ASSERT_EQUAL(info.threads, 0);
    CU_ASSERT_EQUAL(numla_bind_report(NULL, 0, 0, &info), 1);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
    numla_topo_destroy(&syn);
}

/* Apply rank 0 of a plan for this machine with strict memory: every OpenMP thread i runs on
 * CPU i of the plan only, the initial thread on the first, the team has the plan's size, and
 * the memory policy binds to the rank's node; the report agrees, and prints one line. */
static void test_apply_pins_threads_and_memory(void)
{
    numla_topo *t = this_machine();
    if (!t)
        return;
    saved_state saved;
    save(&saved);
    numla_launch_opts o = {.ranks = 1};
    numla_launch_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    numla_status s = numla_bind_apply(t, p, 0, 1);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "bind apply: %s", numla_error_message());
    const numla_launch_rank *rk = &p->ranks[0];
    if (s == NUMLA_STATUS_OK) {
        CU_ASSERT_EQUAL(omp_get_max_threads(), rk->threads);
        int wrong = 0, team = 0;
#pragma omp parallel reduction(+ : wrong)
        {
            cpu_set_t mine;
            sched_getaffinity(0, sizeof mine, &mine);
            wrong += !only(&mine, rk->cpus[omp_get_thread_num() % rk->num_cpus]);
#pragma omp single
            team = omp_get_num_threads();
        }
        CU_ASSERT_EQUAL(team, rk->threads);
        NUMLA_ASSERT_MSG(wrong == 0, "%d of %d threads are not on their CPU of the plan", wrong,
                         team);
        cpu_set_t initial;
        sched_getaffinity(0, sizeof initial, &initial);
        CU_ASSERT(only(&initial, rk->cpus[0]));

        if (numa_available() >= 0) {
            int mode = -1;
            unsigned long mask[16] = {0};
            CU_ASSERT_EQUAL(get_mempolicy(&mode, mask, 8 * sizeof mask, NULL, 0), 0);
            CU_ASSERT_EQUAL(mode, MPOL_BIND);
            const unsigned bits = 8 * sizeof mask[0];
            CU_ASSERT(mask[rk->node / bits] & (1UL << (rk->node % bits)));
        }

        numla_bind_info info;
        char path[] = "/tmp/numla_test_bind_XXXXXX";
        int fd = mkstemp(path);
        CU_ASSERT_FATAL(fd >= 0);
        fflush(stdout);
        int out = dup(1);
        dup2(fd, 1);
        int problems = numla_bind_report(p, 0, 1, &info);
        fflush(stdout);
        dup2(out, 1);
        close(out);
        char line[512];
        ssize_t got = pread(fd, line, sizeof line - 1, 0);
        line[got > 0 ? got : 0] = '\0';
        close(fd);
        unlink(path);

        CU_ASSERT_EQUAL(problems, 0);
        CU_ASSERT_EQUAL(info.node, rk->node);
        CU_ASSERT_EQUAL(info.num_cpus, rk->num_cpus);
        CU_ASSERT_EQUAL(info.threads, rk->threads);
        CU_ASSERT_EQUAL(info.threads_outside, 0);
        CU_ASSERT_EQUAL(info.cpus_outside, 0);
        char cpus[256];
        numla_topo_cpulist(rk->cpus, rk->num_cpus, cpus, sizeof cpus);
        CU_ASSERT_STRING_EQUAL(info.cpus, cpus);
        char want[512];
        snprintf(want, sizeof want, "rank 0: node %d cpus %s (%d) mempolicy %s threads %d "
                 "pinned ok\n", rk->node, cpus, rk->num_cpus, info.mempolicy, rk->threads);
        CU_ASSERT_STRING_EQUAL(line, want);
        if (numa_available() >= 0) {
            char pol[32];
            snprintf(pol, sizeof pol, "bind %d", rk->node);
            CU_ASSERT_STRING_EQUAL(info.mempolicy, pol);
        }
    }
    restore(&saved);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* The report counts what does not match: a plan that names no CPU of the process has every
 * CPU and thread outside; a plan that wants one more thread is one problem. */
static void test_report_counts_mismatches(void)
{
    numla_topo *t = this_machine();
    if (!t)
        return;
    saved_state saved;
    save(&saved);
    numla_launch_opts o = {.ranks = 1};
    numla_launch_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    if (numla_bind_apply(t, p, 0, 0) == NUMLA_STATUS_OK) {
        numla_bind_info info;
        CU_ASSERT_EQUAL(numla_bind_report(p, 0, 0, &info), 0);
        numla_launch_rank *rk = &p->ranks[0];
        rk->threads++;
        CU_ASSERT_EQUAL(numla_bind_report(p, 0, 0, &info), 1);
        rk->threads--;
        const int keep = rk->num_cpus;
        rk->num_cpus = 0; /* the plan names none of our CPUs */
        int problems = numla_bind_report(p, 0, 0, &info);
        rk->num_cpus = keep;
        CU_ASSERT_EQUAL(info.cpus_outside, info.num_cpus);
        CU_ASSERT_EQUAL(info.threads_outside, info.threads);
        CU_ASSERT(problems >= 2);
        if (rk->num_cpus > 1) {
            /* every thread on one CPU: they share it while there are CPUs enough */
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(rk->cpus[0], &one);
#pragma omp parallel
            sched_setaffinity(0, sizeof one, &one);
            CU_ASSERT_EQUAL(numla_bind_report(p, 0, 0, &info), 1);
            CU_ASSERT_EQUAL(info.threads_shared, info.threads);
        }
    } else {
        NUMLA_ASSERT_MSG(0, "bind apply: %s", numla_error_message());
    }
    restore(&saved);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* A thread that can run somewhere the recorded start mask does not allow. */
typedef struct escape_thread {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int cpu;   /* set by the test: the CPU to allow next (-1: finish) */
    int done;  /* set by the thread once it has applied cpu */
} escape_thread;

static void *escape_main(void *arg)
{
    escape_thread *e = arg;
    pthread_setname_np(pthread_self(), "numla_escape");
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (e->done)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->cpu < 0)
            break;
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(e->cpu, &cs);
        sched_setaffinity(0, sizeof cs, &cs);
        e->done = 1;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void escape_move(escape_thread *e, int cpu)
{
    pthread_mutex_lock(&e->mu);
    e->cpu = cpu;
    e->done = 0;
    pthread_cond_broadcast(&e->cv);
    while (cpu >= 0 && !e->done)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

/* numla_bind_check_threads reads every thread of the process, not only OpenMP's, against the
 * mask recorded at start: a thread allowed on a CPU outside it is counted and named (id, name,
 * CPUs) in an error; back inside, it is not. numla_bind_report counts it as a problem. */
static void test_check_threads_against_start_mask(void)
{
    saved_state saved;
    save(&saved);
    int a = -1, b = -1;
    for (int c = 0; c < CPU_SETSIZE && b < 0; c++)
        if (CPU_ISSET(c, &saved.affinity)) {
            if (a < 0)
                a = c;
            else
                b = c;
        }
    if (b < 0)
        return; /* one CPU: nothing can be outside */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(a, &one);
#pragma omp parallel
    sched_setaffinity(0, sizeof one, &one);
    sched_setaffinity(0, sizeof one, &one);
    numla_bind_record_start_mask();
    int allowed[CPU_SETSIZE];
    int num_allowed = numla_bind_allowed_cpus(allowed);
    if (num_allowed == 1 && allowed[0] == a) { /* OpenMP places would widen it: skip */
        int base = numla_bind_check_threads(0);
        escape_thread e = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, a, 0};
        pthread_t th;
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, escape_main, &e), 0);
        escape_move(&e, a);
        CU_ASSERT_EQUAL(numla_bind_check_threads(0), base);

        escape_move(&e, b);
        char path[] = "/tmp/numla_test_escape_XXXXXX";
        int fd = mkstemp(path);
        CU_ASSERT_FATAL(fd >= 0);
        fflush(stderr);
        int err = dup(2);
        dup2(fd, 2);
        int escaped = numla_bind_check_threads(3);
        fflush(stderr);
        dup2(err, 2);
        close(err);
        char text[4096];
        ssize_t got = pread(fd, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = '\0';
        close(fd);
        unlink(path);
        CU_ASSERT_EQUAL(escaped, base + 1);
        char want[128];
        snprintf(want, sizeof want, "(numla_escape) may run on CPUs %d, outside the CPUs this "
                 "process was given: %d", b, a);
        NUMLA_ASSERT_MSG(strstr(text, "rank 3: thread ") && strstr(text, want),
                         "want '%s' in: %s", want, text);

        escape_move(&e, a);
        CU_ASSERT_EQUAL(numla_bind_check_threads(0), base);
        escape_move(&e, -1);
        pthread_join(th, NULL);
    }
    restore(&saved);
    numla_bind_record_start_mask();
}

/* As numla_cli_main does first thing: the mask this process was given is the one every check
 * holds threads to, before any test moves one (a thread the tests do not pin, such as a
 * sanitizer's, keeps the whole mask and is inside it). */
static int bind_suite_init(void)
{
    numla_bind_record_start_mask();
    return 0;
}

NUMLA_TEST_SUITE(bind, bind_suite_init, NULL, NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_apply_pins_threads_and_memory),
                 NUMLA_TEST(test_report_counts_mismatches),
                 NUMLA_TEST(test_check_threads_against_start_mask))
