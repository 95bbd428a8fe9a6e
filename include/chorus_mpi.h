/*
 * chorus from MPI programs: a communicator over the ranks of an MPI
 * communicator. Header-only, so chorus itself does not depend on any MPI:
 * include it after mpi.h in a program built with that MPI's compiler.
 */
#ifndef CHORUS_MPI_H
#define CHORUS_MPI_H

#include <mpi.h>
#include <string.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over mpi_comm: its rank 0 creates a unique id (which starts a
 * rendezvous store on this host) and broadcasts it together with its status,
 * then every rank joins. Ranks keep their MPI rank numbers. When rank 0
 * fails to create the id, every rank returns that status.
 */
static inline chorus_status_t chorus_comm_create_mpi(MPI_Comm mpi_comm, chorus_comm_t *comm_p)
{
    struct {
        int status;
        chorus_unique_id_t id;
    } msg;
    int rank, size;

    if (comm_p == NULL)
        return CHORUS_ERR_INVALID_ARG;
    if (MPI_Comm_rank(mpi_comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(mpi_comm, &size) != MPI_SUCCESS)
        return CHORUS_ERR_INVALID_ARG;
    memset(&msg, 0, sizeof(msg));
    if (rank == 0)
        msg.status = (int)chorus_unique_id_create(&msg.id);
    if (MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, mpi_comm) != MPI_SUCCESS)
        return CHORUS_ERR_SYSTEM;
    if (msg.status != CHORUS_OK)
        return (chorus_status_t)msg.status;
    return chorus_comm_create_from_id(rank, size, &msg.id, 0, comm_p);
}

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_MPI_H */
