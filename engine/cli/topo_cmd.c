/* engine/cli/topo_cmd.c — `numla topo`: the machine's NUMA topology, the binding plan numla would
 * use on it, the mpirun line that starts that plan (what launch/numla-launch runs), and a
 * check of the binding a rank really got. The logic is in launch/; this file only parses
 * options and prints. (It lives in engine/ because only engine objects are linked whole into
 * build/numla, which a constructor-registered command needs.) */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/strbuf.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "launch/bind.h"
#include "launch/plan.h"
#include "launch/topo.h"

static const char numla_topo_usage_[] =
    "usage: numla topo [--json] [--ranks auto|N] [--threads-per-rank N] [--oversubscribe]\n"
    "                  [--hyperthreads] [--synthetic STR | --xml FILE] [--verbose]\n"
    "                  [--hosts H1,H2,... | --hostfile FILE] [--ranks-per-host N]\n"
    "       numla topo --plan-mpirun [--print0] [--exe PATH] [--mpirun PATH] [plan options]\n"
    "                  [-- numla arguments]\n"
    "       numla topo --bind-check [--strict-memory] [plan options]\n"
    "  default        print the topology and the plan (one rank per NUMA node with cores)\n"
    "  --plan-mpirun  print the mpirun line for the plan (--print0: NUL-separated argv)\n"
    "  --bind-check   apply this rank's part of the plan (rank from OMPI_COMM_WORLD_RANK,\n"
    "                 PMI_RANK or SLURM_PROCID) and report what the process really got\n"
    "  --hosts, --hostfile  plan a job over these machines, each assumed to have this one's\n"
    "                 topology: --ranks is the job's total, --ranks-per-host each host's\n"
    "                 (default: one per NUMA node with cores); mpirun gets --host H1:K,H2:K\n"
    "HWLOC_XMLFILE / HWLOC_SYNTHETIC select another machine, as --xml / --synthetic do.\n";

/* Read an Open MPI hostfile into host names (numla_launch_hostfile_parse). */
static numla_status numla_topo_read_hostfile_(const char *path, char ***hosts, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        NUMLA_FAIL(NUMLA_STATUS_IO, "--hostfile %s: cannot open", path);
    numla_strbuf text = {0};
    char chunk[4096];
    size_t got;
    numla_status s = NUMLA_STATUS_OK;
    while (s == NUMLA_STATUS_OK && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        s = numla_strbuf_append(&text, chunk, got);
    int err = ferror(f);
    fclose(f);
    if (s == NUMLA_STATUS_OK && err)
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "--hostfile %s: read error", path);
    if (s == NUMLA_STATUS_OK)
        s = numla_launch_hostfile_parse(numla_strbuf_str(&text), hosts, n);
    numla_strbuf_free(&text);
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    return s;
}

static void numla_topo_node_cpus_(const numla_topo_node *n, int *cpus, int *count)
{
    *count = 0;
    for (int c = 0; c < n->num_cores; c++)
        for (int u = 0; u < n->cores[c].num_pus; u++)
            cpus[(*count)++] = n->cores[c].pus[u];
}

static int numla_topo_env_rank_(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

static void numla_topo_print_text_(const numla_topo *t, const numla_launch_plan *p, int *cpus)
{
    int n;
    printf("topology: %s: %d package%s, %d NUMA node%s (%d with cores), %d cores, %d PUs\n",
           t->source, t->num_packages, t->num_packages == 1 ? "" : "s", t->num_nodes,
           t->num_nodes == 1 ? "" : "s", numla_topo_compute_nodes(t), t->num_cores, t->num_pus);
    for (int i = 0; i < t->num_nodes; i++) {
        const numla_topo_node *nd = &t->nodes[i];
        char list[512];
        numla_topo_node_cpus_(nd, cpus, &n);
        double gib = (double)nd->memory_bytes / (double)(1ull << 30);
        if (nd->num_cores)
            printf("  node %d (package %d%s%s): %d cores, cpus %s, memory %.1f GiB\n",
                   nd->os_index, nd->package, nd->subtype[0] ? ", " : "", nd->subtype,
                   nd->num_cores, numla_topo_cpulist(cpus, n, list, sizeof list), gib);
        else
            printf("  node %d%s%s: memory-only, %.1f GiB (no rank)\n", nd->os_index,
                   nd->subtype[0] ? " " : "", nd->subtype, gib);
    }
    if (!p)
        return;
    printf("plan: %d rank%s%s", p->num_ranks, p->num_ranks == 1 ? "" : "s",
           p->oversubscribed ? " (oversubscribed)" : "");
    if (p->num_hosts > 1)
        printf(" over %d hosts, %d per host (every host assumed to have this topology)",
               p->num_hosts, p->ranks_per_host);
    printf("\n");
    for (int r = 0; r < p->num_ranks; r++) {
        char list[512];
        const numla_launch_rank *rk = &p->ranks[r];
        if (p->num_hosts > 1)
            printf("  rank %d -> host %d, node %d: %d cores, cpus %s, %d threads\n", r,
                   r / p->ranks_per_host, rk->node, rk->num_cores,
                   numla_topo_cpulist(rk->cpus, rk->num_cpus, list, sizeof list), rk->threads);
        else
            printf("  rank %d -> node %d: %d cores, cpus %s, %d threads\n", r, rk->node,
                   rk->num_cores, numla_topo_cpulist(rk->cpus, rk->num_cpus, list, sizeof list),
                   rk->threads);
    }
    if (!p->uniform)
        printf("  note: ranks differ in cores; mpirun gets PE=%d and OMP_NUM_THREADS=%d (the "
               "smallest), numla_bind_apply gives each rank its own\n",
               p->cores_per_rank, p->threads_per_rank);
}

static void numla_topo_print_json_(const numla_topo *t, const numla_launch_plan *p, int *cpus,
                                   const char *mpirun_line)
{
    json_t *nodes = json_array(), *ranks = json_array();
    for (int i = 0; i < t->num_nodes; i++) {
        const numla_topo_node *nd = &t->nodes[i];
        int n;
        numla_topo_node_cpus_(nd, cpus, &n);
        json_t *cl = json_array();
        for (int k = 0; k < n; k++)
            json_array_append_new(cl, json_integer(cpus[k]));
        json_array_append_new(nodes, json_pack("{s:i, s:i, s:I, s:s, s:i, s:o}", "node",
                                               nd->os_index, "package", nd->package, "memory_bytes",
                                               (json_int_t)nd->memory_bytes, "subtype", nd->subtype,
                                               "cores", nd->num_cores, "cpus", cl));
    }
    for (int r = 0; p && r < p->num_ranks; r++) {
        const numla_launch_rank *rk = &p->ranks[r];
        json_t *cl = json_array();
        for (int k = 0; k < rk->num_cpus; k++)
            json_array_append_new(cl, json_integer(rk->cpus[k]));
        json_array_append_new(ranks, json_pack("{s:i, s:i, s:i, s:i, s:o}", "rank", r, "node",
                                               rk->node, "cores", rk->num_cores, "threads",
                                               rk->threads, "cpus", cl));
    }
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:b, s:i, s:i, s:s?}", "source",
                             t->source, "packages", t->num_packages, "cores", t->num_cores, "pus",
                             t->num_pus, "nodes", nodes, "plan", ranks, "oversubscribed",
                             p ? p->oversubscribed : 0, "hosts", p ? p->num_hosts : 1,
                             "ranks_per_host", p ? p->ranks_per_host : 0, "mpirun", mpirun_line);
    char *s = json_dumps(root, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(root);
}

static int numla_topo_main(int argc, char **argv)
{
    int json = 0, plan_mpirun = 0, print0 = 0, bind_check = 0, verbose = 0, strict = 0;
    const char *synthetic = NULL, *xml = NULL, *exe = NULL, *mpirun = NULL;
    const char *hosts_list = NULL, *hostfile = NULL;
    int ranks_per_host = 0;
    numla_launch_opts o = {0};
    numla_settings set;
    if (numla_settings_load(&set) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla topo: %s\n", numla_error_message());
        return 2;
    }
    /* --bind-check runs inside a launched rank: start from the launcher's plan options (the
     * settings parsed NUMLA_PLAN and the job size). */
    for (int k = 1; k < argc && strcmp(argv[k], "--"); k++)
        if (!strcmp(argv[k], "--bind-check"))
            o = set.launch;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--plan-mpirun")) plan_mpirun = 1;
        else if (!strcmp(a, "--print0")) print0 = 1;
        else if (!strcmp(a, "--bind-check")) bind_check = 1;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) verbose = 1;
        else if (!strcmp(a, "--strict-memory")) strict = 1;
        else if (!strcmp(a, "--oversubscribe")) o.oversubscribe = 1;
        else if (!strcmp(a, "--hyperthreads")) o.hyperthreads = 1;
        else if (!strcmp(a, "--ranks") && more) {
            const char *v = argv[++i];
            char *end;
            o.ranks = !strcmp(v, "auto") ? 0 : (int)strtol(v, &end, 10);
            if (strcmp(v, "auto") && (*end || o.ranks <= 0)) {
                fprintf(stderr, "numla topo: --ranks '%s': expected auto or a positive count\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--threads-per-rank") && more) {
            char *end;
            o.threads_per_rank = (int)strtol(argv[++i], &end, 10);
            if (*end || o.threads_per_rank <= 0) {
                fprintf(stderr, "numla topo: --threads-per-rank '%s': expected a positive count\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--ranks-per-host") && more) {
            char *end;
            ranks_per_host = (int)strtol(argv[++i], &end, 10);
            if (*end || ranks_per_host <= 0) {
                fprintf(stderr, "numla topo: --ranks-per-host '%s': expected a positive count\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--hosts") && more) hosts_list = argv[++i];
        else if (!strcmp(a, "--hostfile") && more) hostfile = argv[++i];
        else if (!strcmp(a, "--synthetic") && more) synthetic = argv[++i];
        else if (!strcmp(a, "--xml") && more) xml = argv[++i];
        else if (!strcmp(a, "--exe") && more) exe = argv[++i];
        else if (!strcmp(a, "--mpirun") && more) mpirun = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(numla_topo_usage_, stdout);
            return 0;
        } else {
            fprintf(stderr, "numla topo: unknown option '%s'\n%s", a, numla_topo_usage_);
            return 2;
        }
    }

    /* Several hosts: every one gets this machine's plan; --ranks is the job's total. */
    char **hosts = NULL;
    int num_hosts = 0;
    if (hosts_list && hostfile) {
        fprintf(stderr, "numla topo: --hosts and --hostfile: give one of them\n");
        return 2;
    }
    if ((hosts_list && numla_launch_hosts_parse(hosts_list, &hosts, &num_hosts)) ||
        (hostfile && numla_topo_read_hostfile_(hostfile, &hosts, &num_hosts))) {
        fprintf(stderr, "numla topo: %s\n", numla_error_message());
        return 2;
    }
    if (hosts)
        o.hosts = num_hosts;
    if (ranks_per_host) {
        int h = num_hosts ? num_hosts : 1;
        if (o.ranks && o.ranks != ranks_per_host * h) {
            fprintf(stderr, "numla topo: --ranks %d and --ranks-per-host %d over %d host%s "
                    "disagree (the total is ranks per host x hosts)\n", o.ranks, ranks_per_host,
                    h, h == 1 ? "" : "s");
            free(hosts);
            return 2;
        }
        o.ranks = ranks_per_host * h;
    }

    if (!synthetic && !xml) {
        /* hwloc reads these itself when it loads the topology; naming them makes a plan
         * printed for another machine say so */
        const char *env_xml = getenv("HWLOC_XMLFILE"), *env_syn = getenv("HWLOC_SYNTHETIC");
        if (env_xml && *env_xml)
            xml = env_xml;
        else if (env_syn && *env_syn)
            synthetic = env_syn;
    }
    numla_topo *t = NULL;
    numla_launch_plan *p = NULL;
    int rc = 0;
    if (numla_topo_load(synthetic, xml, &t) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla topo: %s\n", numla_error_message());
        free(hosts);
        return 1;
    }
    int *cpus = malloc(((size_t)t->num_pus + 1) * sizeof *cpus);
    if (numla_launch_plan_make(t, &o, &p) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla topo: %s\n", numla_error_message());
        rc = 1;
        goto done;
    }

    char *line = NULL;
    if (plan_mpirun || json) {
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        self[len > 0 ? len : 0] = '\0';
        numla_launch_mpirun_opts mo = {
            .mpirun = mpirun,
            .exe = exe ? exe : len > 0 ? self : "numla",
            .as_root = geteuid() == 0,
            .keep_omp_places = getenv("OMP_PLACES") != NULL,
            .report_bindings = verbose,
            .hosts = hosts,
            .num_hosts = num_hosts,
        };
        char **mv = NULL;
        int mc = 0;
        if (numla_launch_plan_mpirun(p, &mo, argc - i, argv + i, &mv, &mc) != NUMLA_STATUS_OK) {
            fprintf(stderr, "numla topo: %s\n", numla_error_message());
            rc = 1;
            goto done;
        }
        if (plan_mpirun && print0) {
            for (int k = 0; k < mc; k++)
                fwrite(mv[k], 1, strlen(mv[k]) + 1, stdout);
        }
        line = numla_launch_shell_join(mc, mv);
        free(mv);
        if (plan_mpirun && !print0) {
            if (verbose)
                numla_topo_print_text_(t, p, cpus);
            printf("%s\n", line ? line : "");
        }
    }
    if (bind_check) {
        int rank = numla_topo_env_rank_();
        if (numla_bind_apply(t, p, rank, strict) != NUMLA_STATUS_OK) {
            fprintf(stderr, "numla topo: %s\n", numla_error_message());
            rc = 1;
        } else {
            rc = numla_bind_report(p, rank, 1, NULL) ? 3 : 0;
        }
    } else if (json) {
        numla_topo_print_json_(t, p, cpus, line);
    } else if (!plan_mpirun) {
        numla_topo_print_text_(t, p, cpus);
    }
    free(line);

done:
    free(hosts);
    free(cpus);
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
    return rc;
}

NUMLA_CLI_COMMAND("topo", numla_topo_main,
                  "NUMA topology, binding plan and mpirun line (--json, --plan-mpirun, --bind-check)")
