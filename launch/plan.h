/* launch/plan.h — where ranks and threads run (docs/design.md §1): one rank per NUMA node that has
 * cores, its OpenMP team on that node's physical cores (one PU per core unless hyper-threads
 * are asked for), and the mpirun line that starts such a job. Pure computation over a
 * numla_topo, so plans for any machine are testable here; launch/bind.h applies a plan.
 *
 *   ranks auto (0)  one rank per node with cores, nodes in hwloc logical order
 *   ranks N < nodes the first N nodes with cores
 *   ranks N > nodes an error unless oversubscribe: ranks then go round-robin over the nodes
 *                   and ranks sharing a node split its cores (each gets at least one)
 *   threads         one per CPU of the rank; --threads-per-rank T fewer is allowed, more only
 *                   with oversubscribe
 *   hosts H > 1     a job over H machines, each assumed to have this topology: ranks is the
 *                   job's total (a multiple of H; auto: nodes x H), every host gets ranks / H
 *                   ranks planned as above, and rank r runs on host r / (ranks / H) as local
 *                   rank r % (ranks / H) (Open MPI's ppr mapping fills one host, then the next)
 */
#ifndef NUMLA_LAUNCH_PLAN_H
#define NUMLA_LAUNCH_PLAN_H

#include <stddef.h>

#include "common/status.h"
#include "launch/topo.h"

typedef struct numla_launch_opts {
    int ranks;            /* 0: auto (one per node with cores) */
    int threads_per_rank; /* 0: one per CPU of the rank */
    int oversubscribe;    /* allow more ranks than nodes / threads than CPUs */
    int hyperthreads;     /* bind to (and run threads on) every PU of each core */
    int hosts;            /* machines the job spans (0 or 1: one); see the rules above */
} numla_launch_opts;

/* The options a rank needs to recompute the launcher's plan: plan, the value of NUMLA_PLAN
 * (set by the mpirun line when an option differs from the default:
 * "threads=4,oversubscribe=1,hyperthreads=1,hosts=2"; NULL or "": none), and job_size, the job size
 * the launcher announced (> 0: the rank count; 0: unknown). Both are read from the environment
 * once, by the settings (engine/cli/settings.h), and passed here. Leaves fields neither
 * mentions alone. A malformed plan is NUMLA_STATUS_INVALID_ARG naming NUMLA_PLAN. Local. */
numla_status numla_launch_opts_from(const char *plan, int job_size, numla_launch_opts *o);

typedef struct numla_launch_rank {
    int node;             /* NUMA node OS index */
    int node_slot;        /* index into numla_topo.nodes */
    int num_cores;        /* physical cores given to this rank */
    int num_cpus;         /* PUs the rank is bound to */
    int *cpus;            /* (num_cpus) PU OS indices, ascending */
    int threads;          /* OpenMP threads of the rank */
} numla_launch_rank;

typedef struct numla_launch_plan {
    int num_ranks;        /* the whole job's: num_hosts x ranks_per_host */
    numla_launch_rank *ranks; /* (num_ranks) rank r runs on ranks[r] (of its own host) */
    int num_hosts;        /* 1, or opts.hosts */
    int ranks_per_host;   /* num_ranks / num_hosts; rank r is local rank r % ranks_per_host */
    int ranks_per_node;   /* most ranks on one node (1 unless oversubscribed) */
    int cores_per_rank;   /* fewest cores of any rank: the PE= of the mpirun line */
    int threads_per_rank; /* fewest threads of any rank: OMP_NUM_THREADS */
    int uniform;          /* every rank has the same cores and threads */
    int oversubscribed;   /* ranks share nodes or threads outnumber CPUs */
    numla_launch_opts opts; /* what the plan was made from */
} numla_launch_plan;

/* Compute a plan. Errors name the limit (nodes with cores, cores of a node). Local. */
numla_status numla_launch_plan_make(const numla_topo *t, const numla_launch_opts *o,
                                    numla_launch_plan **out);
/* Keep rank `rank` of p inside `allowed` (num_allowed PU OS indices, any order): the CPUs the
 * process may run on, as a batch system's cpuset, taskset or the launcher's binding gave them.
 * The rank's CPUs become those of the plan that are allowed; when none is (the launcher placed
 * the rank elsewhere, and its placement wins), the allowed CPUs of t's cores themselves, one
 * PU per core unless the plan uses hyper-threads, and the node of the first of them. Its
 * threads follow its CPU count unless the options fixed them. The plan-wide fields (the mpirun
 * line's) are left alone. *changed (may be NULL) is set to 1 when the rank's CPUs changed, else
 * 0. No allowed CPU on any core of t is NUMLA_STATUS_INVALID_ARG and leaves the rank alone.
 * Local. */
numla_status numla_launch_plan_restrict(const numla_topo *t, numla_launch_plan *p, int rank,
                                        const int *allowed, int num_allowed, int *changed);
/* Sets *p to NULL; NULL is a no-op. */
void numla_launch_plan_destroy(numla_launch_plan **p);

typedef struct numla_launch_mpirun_opts {
    const char *mpirun;   /* launcher program; NULL: "mpirun" */
    char *const *hosts;   /* (num_hosts) host names for --host; NULL: this machine only */
    int num_hosts;        /* must equal the plan's num_hosts when hosts is set */
    const char *exe;      /* program each rank runs (the numla binary) */
    int as_root;          /* add --allow-run-as-root */
    int keep_omp_places;  /* OMP_PLACES/OMP_PROC_BIND already set by the user: pass them on */
    int report_bindings;  /* add --report-bindings */
} numla_launch_mpirun_opts;

/* The mpirun argv for a plan followed by exe and args: a NULL-terminated array of malloc'd
 * strings in one allocation (free(*out_argv) frees all), *out_argc its length. E.g.
 *   mpirun -n 4 --map-by ppr:1:numa:PE=16 --bind-to core -x OMP_NUM_THREADS=16
 *          -x OMP_PLACES=cores -x OMP_PROC_BIND=close <exe> <args...>
 * plus -x NUMLA_PLAN=... when the plan's options differ from the defaults, so every rank
 * recomputes the same plan (numla_launch_opts_from). With hosts, `--host h1:K,h2:K` (K ranks
 * per host) follows -n. Local. */
numla_status numla_launch_plan_mpirun(const numla_launch_plan *p,
                                      const numla_launch_mpirun_opts *mo, int argc,
                                      char *const *argv, char ***out_argv, int *out_argc);

/* Host names from a comma-separated list ("h1,h2,h3"; a name may not be empty, repeat or carry a
 * ":slots" suffix: --ranks-per-host says how many ranks each gets) or from the text of an Open
 * MPI hostfile (one host per line, "name [slots=N] [max_slots=N]", '#' comments, blank lines;
 * the slot counts are ignored for the same reason). *out_hosts is a NULL-terminated array of
 * strings in one allocation (free(*out_hosts) frees all), *out_n its length (>= 1). Errors name
 * the bad entry (and line). Local. */
numla_status numla_launch_hosts_parse(const char *list, char ***out_hosts, int *out_n);
numla_status numla_launch_hostfile_parse(const char *text, char ***out_hosts, int *out_n);

/* Join argv into one shell-quoted line (words quoted only when needed). Returns a malloc'd
 * string or NULL on out of memory. */
char *numla_launch_shell_join(int argc, char *const *argv);

#endif
