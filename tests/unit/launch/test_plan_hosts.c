/* tests/unit/launch/test_plan_hosts.c — suite `plan_hosts`: plans over several machines
 * (launch/plan.h, hosts H > 1): every host gets this machine's plan, --ranks is the job's total,
 * rank r is local rank r % (ranks / H) of host r / (ranks / H); the mpirun line's --host list and
 * NUMLA_PLAN's hosts item, read back by the ranks (numla_launch_opts_from) into the same plan;
 * the host list and Open MPI hostfile parsers. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/plan.h"
#include "launch/topo.h"
#include "test_util.h"

static char *hosts_line(const numla_launch_plan *p, const numla_launch_mpirun_opts *mo)
{
    char **v = NULL;
    int n = 0;
    if (numla_launch_plan_mpirun(p, mo, 0, NULL, &v, &n) != NUMLA_STATUS_OK) {
        NUMLA_ASSERT_MSG(0, "mpirun line: %s", numla_error_message());
        return NULL;
    }
    char *line = numla_launch_shell_join(n, v);
    free(v);
    return line;
}

/* Two hosts of "numa:2 core:4 pu:2": auto is 2 ranks per host; the second host's ranks repeat
 * the first's nodes and CPUs; a rank count that is not a multiple of the hosts, or more ranks
 * per host than nodes, is refused (the latter allowed with oversubscribe). */
static void test_two_hosts_plan(void)
{
    numla_topo *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_topo_load("numa:2 core:4 pu:2", NULL, &t), NUMLA_STATUS_OK);
    numla_launch_plan *one = NULL, *p = NULL;
    numla_launch_opts o1 = {0}, o = {.hosts = 2};
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o1, &one), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(one->num_hosts, 1);
    CU_ASSERT_EQUAL(one->ranks_per_host, 2);
    CU_ASSERT_EQUAL(p->num_hosts, 2);
    CU_ASSERT_EQUAL(p->ranks_per_host, 2);
    CU_ASSERT_EQUAL_FATAL(p->num_ranks, 4);
    for (int r = 0; r < 4; r++) {
        const numla_launch_rank *a = &p->ranks[r], *b = &one->ranks[r % 2];
        NUMLA_ASSERT_MSG(a->node == b->node && a->num_cpus == b->num_cpus &&
                             a->threads == b->threads && a->num_cores == b->num_cores &&
                             !memcmp(a->cpus, b->cpus, (size_t)a->num_cpus * sizeof *a->cpus),
                         "rank %d is not local rank %d of the one-host plan", r, r % 2);
        CU_ASSERT_PTR_NOT_EQUAL(a->cpus, b->cpus); /* own copies: destroy frees each once */
    }
    CU_ASSERT(p->uniform);
    CU_ASSERT(!p->oversubscribed);
    CU_ASSERT_EQUAL(p->cores_per_rank, 4);
    numla_launch_plan_destroy(&p);

    o.ranks = 3; /* not a multiple of 2 */
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT(strstr(numla_error_message(), "multiple of the host count") != NULL);
    o.ranks = 2; /* one per host: the first node of each */
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(p->num_ranks, 2);
    CU_ASSERT_EQUAL(p->ranks_per_host, 1);
    CU_ASSERT_EQUAL(p->ranks[1].node, p->ranks[0].node);
    numla_launch_plan_destroy(&p);
    o.ranks = 6; /* 3 per host on 2 nodes */
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "per host") != NULL);
    o.oversubscribe = 1;
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(p->num_ranks, 6);
    CU_ASSERT_EQUAL(p->ranks_per_host, 3);
    CU_ASSERT_EQUAL(p->ranks_per_node, 2);
    CU_ASSERT(p->oversubscribed);
    for (int r = 3; r < 6; r++)
        CU_ASSERT_EQUAL(p->ranks[r].num_cores, p->ranks[r - 3].num_cores);
    numla_launch_plan_destroy(&p);
    o = (numla_launch_opts){.hosts = -1};
    CU_ASSERT_EQUAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_INVALID_ARG);
    numla_launch_plan_destroy(&one);
    numla_topo_destroy(&t);
}

/* The line: -n total, --host h:K for each host, NUMLA_PLAN carries hosts=H; the ranks' own
 * reading of it (job size = total) rebuilds the same plan. A wrong count of names is refused. */
static void test_two_hosts_mpirun_line(void)
{
    numla_topo *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_topo_load("numa:2 core:4 pu:2", NULL, &t), NUMLA_STATUS_OK);
    numla_launch_plan *p = NULL, *q = NULL;
    numla_launch_opts o = {.hosts = 3, .threads_per_rank = 2};
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    char *hosts[] = {"node-a", "10.0.0.2", "a-very-long-host-name-that-does-not-fit-a-word.example.org"};
    numla_launch_mpirun_opts mo = {.exe = "/opt/numla", .hosts = hosts, .num_hosts = 3};
    char *line = hosts_line(p, &mo);
    CU_ASSERT_STRING_EQUAL(line ? line : "",
                           "mpirun -n 6 --host node-a:2,10.0.0.2:2,"
                           "a-very-long-host-name-that-does-not-fit-a-word.example.org:2 "
                           "--map-by ppr:1:numa:PE=4 --bind-to core "
                           "-x NUMLA_PLAN=threads=2,hosts=3 -x OMP_NUM_THREADS=2 "
                           "-x OMP_PLACES=cores -x OMP_PROC_BIND=close /opt/numla");
    free(line);

    numla_launch_opts back = {0};
    CU_ASSERT_EQUAL(numla_launch_opts_from("threads=2,hosts=3", 6, &back), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(back.hosts, 3);
    CU_ASSERT_EQUAL(back.ranks, 6);
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &back, &q), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(q->num_ranks, p->num_ranks);
    for (int r = 0; r < q->num_ranks; r++)
        CU_ASSERT(q->ranks[r].node == p->ranks[r].node &&
                  q->ranks[r].threads == p->ranks[r].threads &&
                  !memcmp(q->ranks[r].cpus, p->ranks[r].cpus,
                          (size_t)q->ranks[r].num_cpus * sizeof(int)));
    numla_launch_plan_destroy(&q);

    char **v = NULL;
    int n = 0;
    mo.num_hosts = 2;
    CU_ASSERT_EQUAL(numla_launch_plan_mpirun(p, &mo, 0, NULL, &v, &n), NUMLA_STATUS_INVALID_ARG);
    mo.hosts = NULL;
    mo.num_hosts = 0;
    CU_ASSERT_EQUAL(numla_launch_plan_mpirun(p, &mo, 0, NULL, &v, &n), NUMLA_STATUS_INVALID_ARG);
    numla_launch_plan_destroy(&p);
    /* One host named: no hosts= item, but the --host list is still written. */
    o = (numla_launch_opts){.hosts = 1};
    CU_ASSERT_EQUAL_FATAL(numla_launch_plan_make(t, &o, &p), NUMLA_STATUS_OK);
    mo.hosts = hosts;
    mo.num_hosts = 1;
    line = hosts_line(p, &mo);
    CU_ASSERT_STRING_EQUAL(line ? line : "",
                           "mpirun -n 2 --host node-a:2 --map-by ppr:1:numa:PE=4 --bind-to core "
                           "-x OMP_NUM_THREADS=4 -x OMP_PLACES=cores -x OMP_PROC_BIND=close "
                           "/opt/numla");
    free(line);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* s, then got[n] (the caller parses first: argument order is unspecified). */
static void expect_hosts(numla_status s, char **got, int n, const char *want)
{
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "parse for '%s': %s", want, numla_error_message());
    if (s != NUMLA_STATUS_OK)
        return;
    char joined[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", i ? "," : "",
                 got[i]);
    CU_ASSERT_PTR_NULL(got[n]);
    CU_ASSERT_STRING_EQUAL(joined, want);
    free(got);
}

static void test_host_lists(void)
{
    char **h = NULL;
    int n = 0;
    numla_status s = numla_launch_hosts_parse("h1,h2,10.1.2.3", &h, &n);
    expect_hosts(s, h, n, "h1,h2,10.1.2.3");
    s = numla_launch_hosts_parse("solo", &h, &n);
    expect_hosts(s, h, n, "solo");
    const char *bad[] = {"", ",", "a,", ",a", "a,,b", "a:2,b", "a,b,a", "a, b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        h = NULL;
        NUMLA_ASSERT_MSG(numla_launch_hosts_parse(bad[i], &h, &n) == NUMLA_STATUS_INVALID_ARG,
                         "--hosts '%s' accepted", bad[i]);
        CU_ASSERT_PTR_NULL(h);
    }
    CU_ASSERT(numla_launch_hosts_parse("a,b,a", &h, &n) == NUMLA_STATUS_INVALID_ARG &&
              strstr(numla_error_message(), "'a' is named twice"));

    s = numla_launch_hostfile_parse("# cluster\n"
                                    "node1 slots=4\n"
                                    "\n"
                                    "  node2   slots=4 max_slots=8  # the second\n"
                                    "\t10.0.0.3\r\n"
                                    "#node4\n"
                                    "node5",
                                    &h, &n);
    expect_hosts(s, h, n, "node1,node2,10.0.0.3,node5");
    const char *badfile[] = {"", "# only a comment\n\n", "a\nb\na\n", "a:4\n"};
    for (size_t i = 0; i < sizeof badfile / sizeof *badfile; i++) {
        h = NULL;
        NUMLA_ASSERT_MSG(numla_launch_hostfile_parse(badfile[i], &h, &n) ==
                             NUMLA_STATUS_INVALID_ARG,
                         "hostfile '%s' accepted", badfile[i]);
        CU_ASSERT_PTR_NULL(h);
    }
    CU_ASSERT(numla_launch_hostfile_parse("x\n\ny\nz:2\n", &h, &n) == NUMLA_STATUS_INVALID_ARG &&
              strstr(numla_error_message(), "line 4"));
}

NUMLA_TEST_SUITE(plan_hosts, NULL, NULL, NUMLA_TEST(test_two_hosts_plan),
                 NUMLA_TEST(test_two_hosts_mpirun_line), NUMLA_TEST(test_host_lists))
