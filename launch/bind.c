/* launch/bind.c — applying and verifying a rank's binding (see bind.h). */
#define _GNU_SOURCE
#include "launch/bind.h"

#include <dirent.h>
#include <errno.h>
#include <hwloc.h>
#include <numa.h>
#include <numaif.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static void numla_bind_process_cpus_(cpu_set_t *out);

/* The mask the process was given, once numla_bind_record_start_mask has run. */
static cpu_set_t numla_bind_start_mask_;
static int numla_bind_start_recorded_;

void numla_bind_record_start_mask(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set))
        return;
    numla_bind_start_mask_ = set;
    numla_bind_start_recorded_ = 1;
}

/* The OpenMP places count because an OpenMP runtime told OMP_PROC_BIND pins the initial thread
 * to the first place before main; its places are the mask the process started with (taskset, a
 * cgroup cpuset, mpirun's binding). */
int numla_bind_allowed_cpus(int *cpus)
{
    cpu_set_t set;
    if (numla_bind_start_recorded_)
        set = numla_bind_start_mask_;
    else
        numla_bind_process_cpus_(&set);
    for (int pl = 0; pl < omp_get_num_places(); pl++) {
        int n = omp_get_place_num_procs(pl);
        int *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (!ids)
            continue;
        omp_get_place_proc_ids(pl, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE)
                CPU_SET(ids[i], &set);
        free(ids);
    }
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

/* Parse a kernel cpulist ("0-3,8,10-11") into set; 0 when well formed. */
static int numla_bind_parse_cpulist_(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s || *s == '\n')
            break;
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1)
                return -1;
            s = end;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            if (c >= 0)
                CPU_SET((int)c, set);
        if (*s == ',')
            s++;
    }
    return 0;
}

int numla_bind_check_threads(int rank)
{
    int allowed[CPU_SETSIZE];
    int num_allowed = numla_bind_allowed_cpus(allowed);
    cpu_set_t ok;
    CPU_ZERO(&ok);
    for (int i = 0; i < num_allowed; i++)
        CPU_SET(allowed[i], &ok);
    char allowed_list[256];
    numla_topo_cpulist(allowed, num_allowed, allowed_list, sizeof allowed_list);

    DIR *dir = opendir("/proc/self/task");
    if (!dir) {
        NUMLA_ERROR("rank %d: cannot list this process's threads (/proc/self/task): %s", rank,
                    strerror(errno));
        return -1;
    }
    int escaped = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[320], line[4096], name[64] = "?", list[4096] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/status", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) /* the thread ended meanwhile */
            continue;
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "Name:", 5))
                sscanf(line + 5, " %63[^\n]", name);
            else if (!strncmp(line, "Cpus_allowed_list:", 18))
                sscanf(line + 18, " %4095[^\n]", list);
        }
        fclose(f);
        cpu_set_t mine, outside;
        if (!list[0] || numla_bind_parse_cpulist_(list, &mine)) {
            NUMLA_ERROR("rank %d: thread %s (%s): cannot read its CPUs from %s", rank,
                        de->d_name, name, path);
            escaped++;
            continue;
        }
        CPU_AND(&outside, &mine, &ok);
        if (CPU_EQUAL(&outside, &mine))
            continue;
        escaped++;
        NUMLA_ERROR("rank %d: thread %s (%s) may run on CPUs %s, outside the CPUs this process "
                    "was given: %s", rank, de->d_name, name, list, allowed_list);
    }
    closedir(dir);
    return escaped;
}

numla_status numla_bind_apply(const numla_topo *t, numla_launch_plan *p, int rank,
                              int strict_memory)
{
    if (!t || !p)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_bind_apply: NULL argument");
    if (!t->this_system)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "cannot bind: the topology (%s) is not this machine",
                   t->source);
    if (rank < 0 || rank >= p->num_ranks)
        NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "cannot bind rank %d: the plan has %d ranks", rank,
                   p->num_ranks);
    const numla_launch_rank *rk = &p->ranks[rank];

    /* Stay inside the CPUs the process was given (batch system cpuset, taskset, launcher). */
    int allowed[CPU_SETSIZE];
    int num_allowed = numla_bind_allowed_cpus(allowed), changed = 0;
    char plan_list[256], allowed_list[256], list[256];
    numla_topo_cpulist(rk->cpus, rk->num_cpus, plan_list, sizeof plan_list);
    numla_topo_cpulist(allowed, num_allowed, allowed_list, sizeof allowed_list);
    if (num_allowed > 0)
        NUMLA_CHECK(numla_launch_plan_restrict(t, p, rank, allowed, num_allowed, &changed));
    numla_topo_cpulist(rk->cpus, rk->num_cpus, list, sizeof list);
    if (changed)
        NUMLA_INFO("rank %d: binding to CPUs %s (node %d, threads %d): the plan's CPUs %s kept "
                   "inside the CPUs this process may use, %d: %s", rank, list, rk->node,
                   rk->threads, plan_list, num_allowed, allowed_list);
    else
        NUMLA_DEBUG("rank %d: binding to CPUs %s (node %d, threads %d), inside the CPUs this "
                    "process may use, %d: %s", rank, list, rk->node, rk->threads, num_allowed,
                    allowed_list);

    if (numa_available() >= 0) {
        if (strict_memory) {
            struct bitmask *bm = numa_allocate_nodemask();
            numa_bitmask_setbit(bm, (unsigned)rk->node);
            numa_set_membind(bm);
            numa_free_nodemask(bm);
        } else {
            numa_set_preferred(rk->node);
        }
    }

    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bind: out of memory");
    for (int i = 0; i < rk->num_cpus; i++)
        hwloc_bitmap_set(set, (unsigned)rk->cpus[i]);
    int rc = hwloc_set_cpubind(t->hw, set, HWLOC_CPUBIND_PROCESS);
    int err = errno;
    hwloc_bitmap_free(set);
    if (rc) {
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "binding rank %d to CPUs %s failed: %s", rank,
                   numla_topo_cpulist(rk->cpus, rk->num_cpus, list, sizeof list), strerror(err));
    }

    omp_set_num_threads(rk->threads);
    /* Pin by hand even when OMP_PLACES is set: the runtime computed its places from the mask
     * the process started with, before the binding above, and the process bind just unpinned
     * the initial thread. Thread i gets CPU i of the plan, which is what OMP_PLACES=cores
     * OMP_PROC_BIND=close gives under a launcher-made mask. libgomp keeps these threads (and
     * their affinity) for later regions of the same size. */
    int failed = 0;
#pragma omp parallel num_threads(rk->threads) reduction(+ : failed)
    {
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(rk->cpus[omp_get_thread_num() % rk->num_cpus], &cs);
        failed += sched_setaffinity(0, sizeof cs, &cs) != 0;
    }
    if (failed)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "pinning %d OpenMP threads of rank %d failed", failed,
                   rank);
    return NUMLA_STATUS_OK;
}

/* Union of the affinity masks of the threads numla runs: this one and its OpenMP team. Other
 * threads of the process (MPI's progress thread, a sanitizer's) are neither bound nor counted. */
static void numla_bind_process_cpus_(cpu_set_t *out)
{
    CPU_ZERO(out);
    cpu_set_t mine;
    if (!sched_getaffinity(0, sizeof mine, &mine))
        CPU_OR(out, out, &mine);
#pragma omp parallel
    {
        cpu_set_t cs;
        if (!sched_getaffinity(0, sizeof cs, &cs)) {
#pragma omp critical(numla_bind_process_cpus)
            CPU_OR(out, out, &cs);
        }
    }
}

static void numla_bind_mempolicy_(char *buf, size_t cap)
{
    int mode = 0;
    unsigned long mask[16] = {0};
    if (get_mempolicy(&mode, mask, 8 * sizeof mask, NULL, 0)) {
        snprintf(buf, cap, "unknown (%s)", strerror(errno));
        return;
    }
    int nodes[64], n = 0;
    for (int i = 0; i < 64 && i < (int)(8 * sizeof mask); i++)
        if (mask[i / (8 * sizeof mask[0])] & (1UL << (i % (8 * sizeof mask[0]))))
            nodes[n++] = i;
    char list[48];
    numla_topo_cpulist(nodes, n, list, sizeof list);
    const char *name = mode == MPOL_DEFAULT      ? "default"
                       : mode == MPOL_PREFERRED  ? "preferred"
                       : mode == MPOL_BIND       ? "bind"
                       : mode == MPOL_INTERLEAVE ? "interleave"
                       : mode == MPOL_LOCAL      ? "local"
                                                 : "other";
    if (mode == MPOL_DEFAULT || mode == MPOL_LOCAL)
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "%s %s", name, list);
}

int numla_bind_report(const numla_launch_plan *p, int rank, int verbose, numla_bind_info *out)
{
    numla_bind_info info;
    memset(&info, 0, sizeof info);
    int problems = 0;
    const numla_launch_rank *rk = p && rank >= 0 && rank < p->num_ranks ? &p->ranks[rank] : NULL;
    if (!rk) {
        NUMLA_WARN("bind report: rank %d is not in the plan", rank);
        if (out)
            *out = info;
        return 1;
    }
    info.node = rk->node;
    cpu_set_t plan;
    CPU_ZERO(&plan);
    for (int i = 0; i < rk->num_cpus; i++)
        CPU_SET(rk->cpus[i], &plan);

    cpu_set_t proc;
    numla_bind_process_cpus_(&proc);
    int cpus[CPU_SETSIZE], nodes_seen[64] = {0};
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &proc))
            continue;
        cpus[info.num_cpus++] = c;
        info.cpus_outside += !CPU_ISSET(c, &plan);
        int nd = numa_available() >= 0 ? numa_node_of_cpu(c) : 0;
        if (nd >= 0 && nd < 64 && !nodes_seen[nd]++)
            info.nodes_spanned++;
    }
    numla_topo_cpulist(cpus, info.num_cpus, info.cpus, sizeof info.cpus);
    numla_bind_mempolicy_(info.mempolicy, sizeof info.mempolicy);

    int max_threads = omp_get_max_threads();
    cpu_set_t *tmask = calloc((size_t)max_threads, sizeof *tmask);
    if (tmask) {
#pragma omp parallel
        {
            int tid = omp_get_thread_num();
            if (tid < max_threads)
                sched_getaffinity(0, sizeof tmask[tid], &tmask[tid]);
#pragma omp single
            info.threads = omp_get_num_threads();
        }
        for (int i = 0; i < info.threads && i < max_threads; i++) {
            cpu_set_t inter;
            CPU_AND(&inter, &tmask[i], &plan);
            if (!CPU_EQUAL(&inter, &tmask[i]))
                info.threads_outside++;
            for (int j = 0; j < info.threads && j < max_threads; j++) {
                CPU_AND(&inter, &tmask[i], &tmask[j]);
                if (j != i && CPU_COUNT(&inter) > 0) {
                    info.threads_shared++;
                    break;
                }
            }
        }
        free(tmask);
    }

    if (info.nodes_spanned > 1) {
        problems++;
        NUMLA_WARN("rank %d: its CPUs %s span %d NUMA nodes; memory bandwidth suffers (one rank "
                   "per node: see docs/launch.md)", rank, info.cpus, info.nodes_spanned);
    }
    if (info.cpus_outside) {
        problems++;
        NUMLA_WARN("rank %d: %d of its CPUs (%s) are outside the plan's", rank, info.cpus_outside,
                   info.cpus);
    }
    if (info.threads_outside) {
        problems++;
        NUMLA_WARN("rank %d: %d OpenMP threads may run outside the plan's CPUs", rank,
                   info.threads_outside);
    }
    /* Threads sharing CPUs is expected only when there are more threads than CPUs. */
    if (info.threads_shared && info.threads <= rk->num_cpus) {
        problems++;
        NUMLA_WARN("rank %d: %d of %d OpenMP threads are not pinned to a CPU of their own "
                   "(set OMP_PLACES=cores OMP_PROC_BIND=close, or call numla_bind_apply)",
                   rank, info.threads_shared, info.threads);
    }
    if (info.threads != rk->threads) {
        problems++;
        NUMLA_WARN("rank %d: %d OpenMP threads, the plan says %d", rank, info.threads,
                   rk->threads);
    }
    /* Every thread, MPI's and the runtime's included, inside the mask the process was given. */
    info.threads_escaped = numla_bind_check_threads(rank);
    if (info.threads_escaped)
        problems++;
    if (verbose) {
        printf("rank %d: node %d cpus %s (%d) mempolicy %s threads %d %s\n", rank, info.node,
               info.cpus, info.num_cpus, info.mempolicy, info.threads,
               problems ? "PROBLEMS (see the messages above)" : "pinned ok");
        fflush(stdout);
    }
    if (out)
        *out = info;
    return problems;
}
