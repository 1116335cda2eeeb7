/* comm/comm_world.c — the MPI bootstrap every numla process uses (see comm.h,
 * numla_comm_world_init): start MPI when nobody has, remember whether this process owns it, and
 * create the world communicator. */
#include "comm/comm.h"

#include "common/status.h"

numla_status numla_comm_world_init(numla_comm_session *s, const numla_comm_options *opts)
{
    s->comm = NULL;
    s->owns_mpi = 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            NUMLA_FAIL(NUMLA_STATUS_MPI, "MPI_Init_thread failed");
        s->owns_mpi = 1;
    }
    numla_status st = numla_comm_create(MPI_COMM_WORLD, opts, &s->comm);
    if (st != NUMLA_STATUS_OK)
        numla_comm_world_finalize(s);
    return st;
}

void numla_comm_world_finalize(numla_comm_session *s)
{
    if (!s)
        return;
    numla_comm_destroy(&s->comm);
    if (s->owns_mpi)
        MPI_Finalize();
    s->owns_mpi = 0;
}
