/* comm/comm_internal.h — the numla_comm struct and helpers shared by comm.c and
 * allreduce_shm.c. Private to comm/. */
#ifndef NUMLA_COMM_COMM_INTERNAL_H
#define NUMLA_COMM_COMM_INTERNAL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* The shm allreduce state (allreduce_shm.c): a window over the ranks of this machine, and
 * when the job spans machines, the communicator that joins this rank's host sums across them. */
typedef struct numla_comm_shm {
    MPI_Comm node;            /* the ranks on this machine (MPI_COMM_TYPE_SHARED), rank order */
    int rank, size;           /* this rank's index in node, and node's size */
    int *world;               /* (size) each node rank's rank in the communicator (messages) */
    MPI_Comm cross;           /* the ranks with this node rank on every machine, machines in the
                                 order of their first rank; MPI_COMM_NULL on one machine */
    int machines;             /* cross's size (1 on one machine) */
    float *gather;            /* (machines, gather_cap / machines) scratch of the cross step */
    size_t gather_cap;        /* floats allocated in gather */
    const float **host_srcs;  /* (machines) scratch: the host sums of one cross step */
    MPI_Win win;              /* MPI_Win_allocate_shared window, one segment per node rank */
    unsigned char **segs;     /* (size) base of every node rank's segment, mapped here */
    size_t buf_bytes;         /* bytes of each of the two data buffers in a segment */
    size_t rs_bytes;          /* chunks larger than this use reduce-scatter + all-gather */
    size_t par_bytes;         /* steps this large use the caller's OpenMP team */
    uint64_t step;            /* allreduce steps done (one per chunk); parity picks the buffer set */
    uint64_t spin_limit;      /* _mm_pause spins before a wait starts to sched_yield */
    double timeout_s;         /* give up waiting for a peer after this long */
    const float **srcs;       /* (size) scratch: per-node-rank source pointers of one step */
} numla_comm_shm;

struct numla_comm {
    MPI_Comm comm;            /* our duplicate of the parent */
    int rank, size;
    numla_comm_allreduce_path path; /* MPI or SHM, never AUTO */
    numla_comm_shm *shm;      /* NULL when the shm path is unavailable */
    int machines;             /* machines the ranks span (test_fake_machines: the fake ones) */
    int machine_ranks_min, machine_ranks_max; /* fewest and most ranks on one machine */
};

/* Check an MPI return code: on failure record NUMLA_STATUS_MPI with MPI_Error_string's text
 * and the call's name, and return from the calling function. */
#define NUMLA_MPI_CHECK(call)                                                             \
    do {                                                                                  \
        int numla_mpi_rc_ = (call);                                                       \
        if (numla_mpi_rc_ != MPI_SUCCESS)                                                 \
            return numla_comm_mpi_error_(numla_mpi_rc_, #call, __FILE__, __LINE__, __func__); \
    } while (0)

numla_status numla_comm_mpi_error_(int rc, const char *what, const char *file, int line,
                                   const char *func);

/* Count the machines (c->machines, c->machine_ranks_*) and set up the shm window over the
 * ranks of each machine (sized by o), plus the cross-machine communicator when there are several
 * machines with the same number of ranks each (more than one). Otherwise leaves c->shm NULL
 * (MPI path) and returns OK. Collective over c->comm. */
numla_status numla_comm_shm_create(numla_comm *c, const numla_comm_options *o);
/* Collective over c->comm. */
void numla_comm_shm_destroy(numla_comm *c);
/* Collective over c->comm; c->shm must be set. */
numla_status numla_comm_shm_allreduce_sum_f32(numla_comm *c, float *buf, size_t n);
/* Raise the shared "aborted" flag (rank + 1) so peers spinning on flags stop. Local. */
void numla_comm_shm_mark_aborted(numla_comm *c);

#endif
