/* comm/comm.c — the communicator object, checked MPI collectives and the job-abort policy
 * (see comm.h). The shared-memory allreduce lives in allreduce_shm.c. */
#include "comm/comm.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "common/log.h"

numla_status numla_comm_mpi_error_(int rc, const char *what, const char *file, int line,
                                   const char *func)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", rc);
    return numla_error_set(NUMLA_STATUS_MPI, file, line, func, "%s failed: %s", what, text);
}

const char *numla_comm_allreduce_path_name(numla_comm_allreduce_path p)
{
    switch (p) {
    case NUMLA_COMM_ALLREDUCE_PATH_AUTO: return "auto";
    case NUMLA_COMM_ALLREDUCE_PATH_MPI: return "mpi";
    case NUMLA_COMM_ALLREDUCE_PATH_SHM: return "shm";
    }
    return "unknown";
}

numla_status numla_comm_create(MPI_Comm parent, const numla_comm_options *opts, numla_comm **out)
{
    const numla_comm_options o = opts ? *opts : (numla_comm_options){0};
    if (!out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_comm_create: out is NULL");
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        NUMLA_FAIL(NUMLA_STATUS_MPI, "numla_comm_create: MPI is not initialised");

    const numla_comm_allreduce_path want = o.allreduce;
    if ((unsigned)want > NUMLA_COMM_ALLREDUCE_PATH_SHM)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_comm_create: allreduce path %d unknown",
                   (int)want);

    numla_comm *c = calloc(1, sizeof *c);
    if (!c)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "numla_comm_create: out of memory");
    c->comm = MPI_COMM_NULL;
    c->machines = 1;
    numla_status s = NUMLA_STATUS_OK;
    int rc = MPI_Comm_dup(parent, &c->comm);
    if (rc != MPI_SUCCESS) {
        s = numla_comm_mpi_error_(rc, "MPI_Comm_dup", __FILE__, __LINE__, __func__);
        goto fail;
    }
    rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        s = numla_comm_mpi_error_(rc, "MPI_Comm_set_errhandler/rank/size", __FILE__, __LINE__,
                                  __func__);
        goto fail;
    }
    numla_log_set_rank(c->rank);

    /* Every rank computes the same availability (node communicator size == world size), so
     * the path decision below is identical everywhere without extra communication. */
    numla_status shm_s = numla_comm_shm_create(c, &o);
    char shm_msg[256];
    snprintf(shm_msg, sizeof shm_msg, "%s", numla_error_message());
    int ok = shm_s == NUMLA_STATUS_OK, all_ok = 0, any_ok = 0;
    rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&ok, &any_ok, 1, MPI_INT, MPI_MAX, c->comm);
    if (rc != MPI_SUCCESS) {
        s = numla_comm_mpi_error_(rc, "MPI_Allreduce(shm setup status)", __FILE__, __LINE__,
                                  __func__);
        goto fail;
    }
    if (!all_ok) {
        /* The window could not be set up (e.g. a small /dev/shm in a container). When every
         * rank failed, MPI_Allreduce is still a correct path; a partial failure leaves a
         * window some ranks hold, which cannot be freed collectively: give up. */
        if (c->shm)
            c->shm->win = MPI_WIN_NULL; /* never MPI_Win_free a window not all ranks hold */
        numla_comm_shm_destroy(c);
        if (any_ok || want == NUMLA_COMM_ALLREDUCE_PATH_SHM) {
            s = numla_error_set(NUMLA_STATUS_MPI, __FILE__, __LINE__, __func__,
                                "shared-memory allreduce setup failed%s: %s",
                                ok ? " on another rank" : "", ok ? "see its log" : shm_msg);
            goto fail;
        }
        NUMLA_WARN("shared-memory allreduce unavailable (%s); using MPI_Allreduce", shm_msg);
    }
    if (want == NUMLA_COMM_ALLREDUCE_PATH_SHM && !c->shm) {
        s = numla_error_set(NUMLA_STATUS_UNSUPPORTED, __FILE__, __LINE__, __func__,
                            "allreduce path shm (NUMLA_ALLREDUCE) but the %d ranks are not all on "
                            "one machine nor the same number (> 1) on each of %d machines "
                            "(%d to %d ranks per machine; use mpi or auto)", c->size,
                            c->machines, c->machine_ranks_min, c->machine_ranks_max);
        goto fail;
    }
    c->path = (want != NUMLA_COMM_ALLREDUCE_PATH_MPI && c->shm) ? NUMLA_COMM_ALLREDUCE_PATH_SHM
                                                                : NUMLA_COMM_ALLREDUCE_PATH_MPI;
    /* Info on a multi-machine job (which path crosses the network matters there); debug else. */
    if (c->rank == 0)
        numla_log(c->machines > 1 ? NUMLA_LOG_LEVEL_INFO : NUMLA_LOG_LEVEL_DEBUG,
                  "comm: %d ranks on %d machine%s (%d to %d per machine), allreduce path %s",
                  c->size, c->machines, c->machines == 1 ? "" : "s", c->machine_ranks_min,
                  c->machine_ranks_max, numla_comm_allreduce_route(c));
    *out = c;
    return NUMLA_STATUS_OK;

fail:
    numla_comm_destroy(&c);
    return s;
}

void numla_comm_destroy(numla_comm **pc)
{
    if (!pc || !*pc)
        return;
    numla_comm *c = *pc;
    numla_comm_shm_destroy(c);
    if (c->comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->comm);
    free(c);
    *pc = NULL;
}

int numla_comm_rank(const numla_comm *c) { return c->rank; }
int numla_comm_size(const numla_comm *c) { return c->size; }
MPI_Comm numla_comm_mpi(const numla_comm *c) { return c->comm; }
int numla_comm_shm_available(const numla_comm *c) { return c->shm != NULL; }
numla_comm_allreduce_path numla_comm_allreduce_path_get(const numla_comm *c) { return c->path; }
int numla_comm_machines(const numla_comm *c) { return c->machines; }

const char *numla_comm_allreduce_route(const numla_comm *c)
{
    if (c->path == NUMLA_COMM_ALLREDUCE_PATH_MPI)
        return c->machines > 1 ? "mpi (across machines)" : "mpi";
    return c->machines > 1 ? "shm+mpi (shared memory inside each machine, MPI between them)"
                           : "shm";
}

/* MPI counts are int: split large messages into pieces of at most this many elements. */
enum { NUMLA_COMM_MPI_CHUNK = 1 << 30 };

static numla_status numla_comm_mpi_allreduce_(numla_comm *c, float *buf, size_t n)
{
    for (size_t off = 0; off < n; off += NUMLA_COMM_MPI_CHUNK) {
        size_t len = n - off < NUMLA_COMM_MPI_CHUNK ? n - off : NUMLA_COMM_MPI_CHUNK;
        NUMLA_MPI_CHECK(
            MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)len, MPI_FLOAT, MPI_SUM, c->comm));
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_allreduce_sum_f32_path(numla_comm *c, float *buf, size_t n,
                                               numla_comm_allreduce_path path)
{
    if (!c || (!buf && n))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "allreduce: NULL communicator or buffer");
    if (path == NUMLA_COMM_ALLREDUCE_PATH_AUTO)
        path = c->path;
    if (n == 0 || c->size == 1)
        return NUMLA_STATUS_OK;
    if (path == NUMLA_COMM_ALLREDUCE_PATH_SHM) {
        if (!c->shm)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "allreduce: shm path requested but ranks are not all on one machine");
        NUMLA_CHECK(numla_comm_shm_allreduce_sum_f32(c, buf, n));
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(numla_comm_mpi_allreduce_(c, buf, n));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_allreduce_sum_f32(numla_comm *c, float *buf, size_t n)
{
    NUMLA_CHECK(numla_comm_allreduce_sum_f32_path(c, buf, n, NUMLA_COMM_ALLREDUCE_PATH_AUTO));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_bcast(numla_comm *c, void *buf, size_t bytes, int root)
{
    if (!c || (!buf && bytes))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "bcast: NULL communicator or buffer");
    /* Root is not range-checked here on purpose: MPI does it and the caller gets its message. */
    size_t off = 0;
    do {
        size_t len = bytes - off < NUMLA_COMM_MPI_CHUNK ? bytes - off : NUMLA_COMM_MPI_CHUNK;
        NUMLA_MPI_CHECK(MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, c->comm));
        off += len;
    } while (off < bytes);
    return NUMLA_STATUS_OK;
}

static numla_status numla_comm_gatherv_typed_(numla_comm *c, const void *send, size_t n,
                                              void *recv, const size_t *counts,
                                              const size_t *displs, int root, MPI_Datatype type)
{
    if (!c || (!send && n))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gatherv: NULL communicator or send buffer");
    if (n > INT_MAX)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gatherv: %zu elements from one rank exceed INT_MAX",
                   n);
    int *icounts = NULL, *idispls = NULL;
    if (c->rank == root) {
        if (!recv || !counts || !displs)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gatherv: root needs recv, counts and displs");
        icounts = malloc(2 * (size_t)c->size * sizeof *icounts);
        if (!icounts)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gatherv: out of memory");
        idispls = icounts + c->size;
        for (int q = 0; q < c->size; q++) {
            if (counts[q] > INT_MAX || displs[q] > INT_MAX) {
                free(icounts);
                NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                           "gatherv: count/displacement of rank %d exceeds INT_MAX", q);
            }
            icounts[q] = (int)counts[q];
            idispls[q] = (int)displs[q];
        }
    }
    int rc = MPI_Gatherv(send, (int)n, type, recv, icounts, idispls, type, root, c->comm);
    free(icounts);
    if (rc != MPI_SUCCESS)
        return numla_comm_mpi_error_(rc, "MPI_Gatherv", __FILE__, __LINE__, __func__);
    return NUMLA_STATUS_OK;
}

static numla_status numla_comm_gather_typed_(numla_comm *c, const void *send, size_t n,
                                             void *recv, int root, MPI_Datatype type)
{
    if (!c || (!send && n))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gather: NULL communicator or send buffer");
    if (n > INT_MAX)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gather: %zu elements per rank exceed INT_MAX", n);
    NUMLA_MPI_CHECK(MPI_Gather(send, (int)n, type, recv, (int)n, type, root, c->comm));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_gather(numla_comm *c, const void *send, size_t bytes, void *recv,
                               int root)
{
    NUMLA_CHECK(numla_comm_gather_typed_(c, send, bytes, recv, root, MPI_BYTE));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_gatherv(numla_comm *c, const void *send, size_t bytes, void *recv,
                                const size_t *counts, const size_t *displs, int root)
{
    NUMLA_CHECK(numla_comm_gatherv_typed_(c, send, bytes, recv, counts, displs, root, MPI_BYTE));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_gather_f32(numla_comm *c, const float *send, size_t n, float *recv,
                                   int root)
{
    NUMLA_CHECK(numla_comm_gather_typed_(c, send, n, recv, root, MPI_FLOAT));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_gatherv_f32(numla_comm *c, const float *send, size_t n, float *recv,
                                    const size_t *counts, const size_t *displs, int root)
{
    NUMLA_CHECK(numla_comm_gatherv_typed_(c, send, n, recv, counts, displs, root, MPI_FLOAT));
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_barrier(numla_comm *c)
{
    if (!c)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "barrier: NULL communicator");
    NUMLA_MPI_CHECK(MPI_Barrier(c->comm));
    return NUMLA_STATUS_OK;
}

_Noreturn void numla_comm_abort(numla_comm *c, numla_status status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    int rank = c ? c->rank : -1;
    if (!c && inited && !finalized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int code = 1 + (int)status;
    if (c)
        numla_comm_shm_mark_aborted(c);
    const char *trace = numla_error_trace();
    /* One fprintf per line: lines of several ranks do not interleave mid-line. */
    fprintf(stderr, "numla[%d] error: rank %d aborting the job: %s: %s\n", rank, rank,
            numla_status_name(status), msg);
    if (trace[0])
        fprintf(stderr, "numla[%d] error: traceback:\n%s", rank, trace);
    fflush(stderr);
    fflush(stdout);
    if (inited && !finalized)
        MPI_Abort(c ? c->comm : MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort should not return; if it does, still stop this rank */
}
