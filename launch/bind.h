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

/* Record the CPU mask the process was given (the calling thread's affinity): the CPUs every
 * later check and binding stays inside. engine/cli calls it first thing in numla_cli_main,
 * before MPI_Init, hwloc or a library constructor could move a thread; calling it again
 * records again. Until it is called, the CPUs the process may use are read from its threads
 * when needed. Local, not thread-safe (call it while the process has one thread). */
void numla_bind_record_start_mask(void);

/* The CPUs this process may use, ascending, into cpus (capacity CPU_SETSIZE, 1024); returns
 * their count: the recorded start mask (else the union of this thread's and its OpenMP team's
 * affinity) united with the OpenMP places, which an OpenMP runtime told OMP_PROC_BIND computed
 * from the start mask before pinning the initial thread to the first place. Local. */
int numla_bind_allowed_cpus(int *cpus);

/* Check every thread of this process (/proc/self/task/<tid>/status, Cpus_allowed_list)
 * against the CPUs it may use (numla_bind_allowed_cpus). Returns the number of threads allowed
 * on a CPU outside them (-1 if /proc cannot be read); each is logged as an error naming the
 * rank, the thread (id and name) and the CPUs, e.g.
 *   rank 0: thread 4242 (numla) may run on CPUs 0-1, outside the CPUs this process was given: 1
 * Local. */
int numla_bind_check_threads(int rank);

/* Apply rank `rank` of plan p (computed from t, which must be this machine):
 *  - first, the rank's entry of p is kept inside the CPUs this process may use
 *    (numla_launch_plan_restrict with numla_bind_allowed_cpus): a cpuset from the batch
 *    system, taskset or mpirun is never widened. A narrowed
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
    int threads_escaped;  /* threads of the process (any, not only OpenMP's) allowed on a CPU
                           * outside the mask it was given (numla_bind_check_threads) */
} numla_bind_info;

/* Measure what the process really runs with (sched_getaffinity of the process and of every
 * OpenMP thread, get_mempolicy, every thread's mask in /proc) and compare with rank `rank` of
 * p: returns the number of problems found (each also logged: CPUs spanning several nodes, CPUs
 * or threads outside the plan, unpinned threads as warnings; any thread of the process allowed
 * outside the mask it was given, numla_bind_check_threads, as an error). With verbose, prints
 * one line per rank, "pinned ok" only without problems:
 *   rank 0: node 0 cpus 0-15 (16) mempolicy preferred 0 threads 16 pinned ok
 * Local. */
int numla_bind_report(const numla_launch_plan *p, int rank, int verbose, numla_bind_info *out);

#endif
