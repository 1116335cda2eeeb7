/* launch/bind.h — each rank applies and checks its own part of a binding plan (docs/design.md §1):
 * memory policy preferring its node (libnuma), the process CPU set (hwloc), and its OpenMP
 * team pinned one thread per CPU of the plan. mpirun's --map-by/--bind-to normally did the
 * CPU part already; applying it again is harmless and makes a plain `mpirun -n N` (or srun
 * without --cpu-bind) correct too. Never touches models or MPI.
 */
#ifndef NUMLA_LAUNCH_BIND_H
#define NUMLA_LAUNCH_BIND_H

#include "common/status.h"
#include "launch/plan.h"
#include "launch/topo.h"

/* Apply rank `rank` of plan p (computed from t, which must be this machine):
 *  - first, the rank's entry of p is kept inside the CPUs this process may use
 *    (numla_launch_plan_restrict with the union of its threads' affinity and its OpenMP
 *    places): a cpuset from the batch system, taskset or mpirun is never widened. A narrowed
 *    plan is logged at info level (rank, CPUs, the plan's and the allowed CPUs), an unchanged
 *    one at debug level (NUMLA_LOG=debug);
 *  - memory: numa_set_preferred(node) (numa_set_membind when strict_memory) so pages this
 *    process touches first land on its node;
 *  - CPUs: hwloc_set_cpubind(the plan's cpus, whole process);
 *  - OpenMP: omp_set_num_threads(threads), and thread i of a parallel region pinned to CPU i
 *    of the plan (the same assignment OMP_PLACES=cores OMP_PROC_BIND=close gives; done by hand
 *    because the runtime read its places before this binding). The initial thread ends up on
 *    the plan's first CPU, so threads created later outside OpenMP inherit only that CPU.
 * Local (each rank calls it for itself). */
numla_status numla_bind_apply(const numla_topo *t, numla_launch_plan *p, int rank,
                              int strict_memory);

typedef struct numla_bind_info {
    int node;             /* the plan's node */
    int num_cpus;         /* CPUs in this process's affinity mask */
    char cpus[256];       /* that mask as a cpulist */
    int nodes_spanned;    /* NUMA nodes those CPUs belong to (> 1: warning) */
    char mempolicy[64];   /* "preferred 0", "bind 0-1", "default", ... */
    int threads;          /* OpenMP threads in a parallel region */
    int threads_outside;  /* threads whose affinity is not inside the plan's cpus */
    int threads_shared;   /* threads whose affinity overlaps another thread's (not pinned) */
    int cpus_outside;     /* process CPUs that are not in the plan */
} numla_bind_info;

/* Measure what the process really runs with (sched_getaffinity of the process and of every
 * OpenMP thread, get_mempolicy) and compare with rank `rank` of p: returns the number of
 * problems found (each also logged as a warning: CPUs spanning several nodes, CPUs or threads
 * outside the plan, unpinned threads). With verbose, prints one line per rank:
 *   rank 0: node 0 cpus 0-15 (16) mempolicy preferred 0 threads 16 pinned ok
 * Local. */
int numla_bind_report(const numla_launch_plan *p, int rank, int verbose, numla_bind_info *out);

#endif
