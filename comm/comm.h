/* comm/comm.h — numla's communicator: the only place the engine talks MPI (docs/design.md §1, §6).
 *
 * A numla_comm owns an MPI_Comm_dup of its parent, with MPI_ERRORS_RETURN set, so library
 * traffic never collides with the caller's and an MPI failure comes back as NUMLA_STATUS_MPI
 * with MPI_Error_string's text instead of killing the process silently.
 *
 * Allreduce has two paths (numla_comm_allreduce_path):
 *   mpi  MPI_Allreduce; always correct.
 *   shm  a symmetric shared-memory allreduce over a window whose per-rank segments live on each
 *        rank's own node (comm/allreduce_shm.c); available when every rank is on one machine,
 *        or when the ranks span several machines with the same number (> 1) on each: then it
 *        is hierarchical ("shm+mpi"): shared memory inside each machine, and for each range of
 *        the message the ranks holding it on every machine exchange their machines' sums with
 *        MPI (an allgather) and add them in machine order.
 * The default picks shm when it is available; numla_comm_options.allreduce forces one (shm when
 * it is not available is an error at create time). The shm side sums in rank order (machine
 * order, then rank order inside each machine, across machines) and its result is bitwise
 * identical on every rank; numla_comm_allreduce_route says which ran.
 *
 * Failure policy: a rank that meets an unrecoverable error — on any rank, in any module — calls
 * numla_comm_abort(), which logs rank and reason and MPI_Aborts the whole job, so mpirun tears
 * every rank down within seconds instead of leaving peers blocked in a collective. A rank that
 * dies abnormally (signal) is handled by mpirun itself (it kills the job); the shm path, which
 * spins on flags rather than blocking in MPI, additionally gives up after
 * numla_comm_options.timeout_s seconds (default 60) and watches a shared "aborted" flag that numla_comm_abort raises.
 *
 * Collective calls must be made by every rank of the communicator in the same order with
 * matching sizes; each function below says whether it is collective.
 */
#ifndef NUMLA_COMM_COMM_H
#define NUMLA_COMM_COMM_H

#include <mpi.h>
#include <stddef.h>

#include "common/status.h"

typedef struct numla_comm numla_comm;

typedef enum numla_comm_allreduce_path {
    NUMLA_COMM_ALLREDUCE_PATH_AUTO = 0, /* shm when available, else mpi */
    NUMLA_COMM_ALLREDUCE_PATH_MPI,
    NUMLA_COMM_ALLREDUCE_PATH_SHM,
} numla_comm_allreduce_path;

/* Name of a path ("auto", "mpi", "shm"). */
const char *numla_comm_allreduce_path_name(numla_comm_allreduce_path p);

/* How a communicator runs (the settings fill it from NUMLA_ALLREDUCE, NUMLA_COMM_TIMEOUT,
 * NUMLA_COMM_SHM_BYTES, NUMLA_COMM_SHM_RS_BYTES and NUMLA_COMM_SHM_PAR_BYTES,
 * engine/cli/settings.h). Zero fields take the defaults. */
typedef struct numla_comm_options {
    numla_comm_allreduce_path allreduce; /* auto (default), mpi or shm */
    double timeout_s;       /* shm path: give up waiting for a peer after this long (60 s) */
    size_t shm_bytes;       /* shm path: per-rank buffer bytes (4 MiB, at most 1 GiB) */
    size_t shm_rs_bytes;    /* shm path: chunks above this use reduce-scatter + all-gather (1 MiB) */
    size_t shm_par_bytes;   /* shm path: steps from this size use the caller's OpenMP team
                               (256 KiB) */
    int test_fake_machines; /* tests only: > 1 splits the ranks into that many contiguous
                               groups that behave as separate machines */
} numla_comm_options;

/* Duplicate `parent` (MPI_COMM_WORLD in the engine) into a new communicator; set up the shm
 * allreduce window when all ranks share a machine. MPI must be initialised. opts: NULL for the
 * defaults; every rank must pass the same. Collective over `parent`. */
numla_status numla_comm_create(MPI_Comm parent, const numla_comm_options *opts, numla_comm **out);

/* The process's MPI session: MPI started (when the caller had not) and the world communicator.
 * Front ends (numla run, the benchmarks) open one with numla_comm_world_init and close it with
 * numla_comm_world_finalize, so no other code calls MPI_Init or MPI_Finalize. */
typedef struct numla_comm_session {
    numla_comm *comm;  /* a numla_comm over MPI_COMM_WORLD */
    int owns_mpi;      /* 1: MPI was initialised here and numla_comm_world_finalize ends it */
} numla_comm_session;

/* Initialise MPI with MPI_THREAD_FUNNELED unless it is already initialised (then the caller
 * keeps owning it), and create s->comm over MPI_COMM_WORLD (numla_comm_create with opts, NULL
 * for the defaults). On failure nothing is left to finalise. Collective over MPI_COMM_WORLD. */
numla_status numla_comm_world_init(numla_comm_session *s, const numla_comm_options *opts);

/* Destroy s->comm and, when numla_comm_world_init started MPI, finalise it. Idempotent; NULL
 * is a no-op. Collective over MPI_COMM_WORLD. */
void numla_comm_world_finalize(numla_comm_session *s);

/* Free the communicator and its window; sets *c to NULL; NULL or *c == NULL is a no-op.
 * Collective over the communicator. */
void numla_comm_destroy(numla_comm **c);

/* This process's rank and the number of ranks. Local. */
int numla_comm_rank(const numla_comm *c);
int numla_comm_size(const numla_comm *c);
/* The duplicated MPI communicator (for code that must call MPI directly, e.g. benchmarks). */
MPI_Comm numla_comm_mpi(const numla_comm *c);
/* Whether the shm allreduce is available (all ranks on one machine, or the same number > 1 on
 * every machine; window created). Local. */
int numla_comm_shm_available(const numla_comm *c);
/* The path numla_comm_allreduce_sum_f32 uses (never AUTO). Local. */
numla_comm_allreduce_path numla_comm_allreduce_path_get(const numla_comm *c);
/* The machines the ranks span (MPI_COMM_TYPE_SHARED groups; test_fake_machines' groups). Local. */
int numla_comm_machines(const numla_comm *c);
/* What the allreduce does, for logs and benchmarks: "shm", "mpi", "mpi (across machines)" or
 * "shm+mpi (shared memory inside each machine, MPI between them)". Local. */
const char *numla_comm_allreduce_route(const numla_comm *c);

/* In-place sum of buf[n] over all ranks: on return every rank holds the same (bitwise
 * identical) sum. Uses the communicator's chosen path. Call from one thread at a time
 * (MPI_THREAD_FUNNELED is enough); called outside a parallel region, large messages use the
 * OpenMP team (omp_get_max_threads()).
 * Collective over the communicator; every rank passes the same n. */
numla_status numla_comm_allreduce_sum_f32(numla_comm *c, float *buf, size_t n);
/* Same, forcing a path (AUTO = the communicator's choice); SHM when unavailable is
 * NUMLA_STATUS_UNSUPPORTED. For tests and benchmarks. Collective; every rank passes the same
 * n and path. */
numla_status numla_comm_allreduce_sum_f32_path(numla_comm *c, float *buf, size_t n,
                                               numla_comm_allreduce_path path);

/* Broadcast `bytes` bytes from `root` to every rank (in place). Collective. */
numla_status numla_comm_bcast(numla_comm *c, void *buf, size_t bytes, int root);

/* Gather `bytes` bytes from every rank into recv on root (recv: (size, bytes), rank order;
 * ignored elsewhere). Collective; every rank passes the same bytes. */
numla_status numla_comm_gather(numla_comm *c, const void *send, size_t bytes, void *recv,
                               int root);
/* Gather a different number of bytes per rank: rank q sends `bytes` and root stores them at
 * recv + displs[q] (counts[q] == q's bytes). counts/displs/recv are read on root only.
 * Collective. Sizes above INT_MAX are NUMLA_STATUS_UNSUPPORTED. */
numla_status numla_comm_gatherv(numla_comm *c, const void *send, size_t bytes, void *recv,
                                const size_t *counts, const size_t *displs, int root);
/* The same for floats (n, counts and displs in elements). Collective. */
numla_status numla_comm_gather_f32(numla_comm *c, const float *send, size_t n, float *recv,
                                   int root);
numla_status numla_comm_gatherv_f32(numla_comm *c, const float *send, size_t n, float *recv,
                                    const size_t *counts, const size_t *displs, int root);

/* Block until every rank has arrived. Collective. */
numla_status numla_comm_barrier(numla_comm *c);

/* Stop the whole job: log "rank R aborting job: <status>: <message>" (and the traceback of
 * this thread) to stderr, raise the shm "aborted" flag so peers spinning in the shm allreduce
 * notice at once, and MPI_Abort with a non-zero code (1 + status). Engine code calls this on
 * any unrecoverable error on any rank. c may be NULL (then MPI_COMM_WORLD, or exit() when MPI
 * is not initialised). Not collective: a single rank calls it; never returns. */
_Noreturn void numla_comm_abort(numla_comm *c, numla_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
