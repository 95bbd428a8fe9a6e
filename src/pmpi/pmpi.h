/*
 * The MPI interposer: unmodified MPI programs, with this library in
 * LD_PRELOAD, have their collectives on intracommunicators served by chorus.
 * The same sources build once per MPI ABI (libchorus_pmpi_openmpi.so,
 * libchorus_pmpi_mpich.so); every call chorus does not serve goes to the MPI
 * library's PMPI_ entry point unchanged.
 *
 * pmpi_comm.c: MPI_Init and MPI_Finalize, the chorus communicator of each MPI
 * communicator, the report. pmpi_coll.c: the collectives. pmpi_request.c: the
 * requests of non-blocking calls and the MPI_Wait and MPI_Test families.
 */
#ifndef CHORUS_PMPI_H
#define CHORUS_PMPI_H

#include <mpi.h>

#include "chorus.h"

/* Every function the interposer serves, for the report: its id and MPI name. */
#define PMPI_FUNCTIONS(X)                                                  \
    X(PMPI_FN_ALLREDUCE, "MPI_Allreduce")                                  \
    X(PMPI_FN_IALLREDUCE, "MPI_Iallreduce")                                \
    X(PMPI_FN_ALLGATHER, "MPI_Allgather")                                  \
    X(PMPI_FN_IALLGATHER, "MPI_Iallgather")                                \
    X(PMPI_FN_BCAST, "MPI_Bcast")                                          \
    X(PMPI_FN_IBCAST, "MPI_Ibcast")                                        \
    X(PMPI_FN_REDUCE, "MPI_Reduce")                                        \
    X(PMPI_FN_IREDUCE, "MPI_Ireduce")                                      \
    X(PMPI_FN_REDUCE_SCATTER_BLOCK, "MPI_Reduce_scatter_block")            \
    X(PMPI_FN_IREDUCE_SCATTER_BLOCK, "MPI_Ireduce_scatter_block")          \
    X(PMPI_FN_ALLTOALL, "MPI_Alltoall")                                    \
    X(PMPI_FN_IALLTOALL, "MPI_Ialltoall")                                  \
    X(PMPI_FN_BARRIER, "MPI_Barrier")                                      \
    X(PMPI_FN_IBARRIER, "MPI_Ibarrier")

#define PMPI_FN_ENUM(id, name) id,
typedef enum { PMPI_FUNCTIONS(PMPI_FN_ENUM) PMPI_FN_COUNT } pmpi_fn_t;
#undef PMPI_FN_ENUM

/* Counts one call of fn: served by chorus, or passed to the MPI library. */
void pmpi_count(pmpi_fn_t fn, int served);
const char *pmpi_fn_name(pmpi_fn_t fn);

/* CHORUS_PMPI: which calls chorus serves. */
typedef enum { PMPI_SERVE_NONE, PMPI_SERVE_AUTO, PMPI_SERVE_ALL } pmpi_serve_t;
pmpi_serve_t pmpi_serve_mode(void);

/*
 * The chorus communicator that serves comm, or NULL when chorus does not
 * serve it (an intercommunicator, one rank, the interposer off, or a
 * creation that failed). may_create: comm has none yet and every rank of
 * comm is in a blocking collective on it, so one may be created now.
 */
chorus_comm_t pmpi_chorus_comm(MPI_Comm comm, int may_create);

/* A failed chorus call, as the MPI error comm's error handler sees. */
int pmpi_error(MPI_Comm comm, const char *fn, chorus_status_t status);

/*
 * A non-blocking call chorus serves: *request becomes a generalized MPI
 * request that completes with creq (pmpi_request.c). copy_bytes (0 for none)
 * move from copy_from to copy_to once creq is done (an in-place
 * reduce-scatter's block).
 */
int pmpi_request_start(chorus_request_t creq, void *copy_to, const void *copy_from,
                       size_t copy_bytes, MPI_Request *request);
/*
 * Keeps the MPI library progressing: chorus runs it now and then while a
 * thread waits in it (core/wait_hook.h), as MPI's own collectives progress
 * MPI while they wait, so that a peer that must first receive this rank's
 * earlier MPI_Isend can reach the same collective.
 */
void pmpi_progress(void);

#endif
