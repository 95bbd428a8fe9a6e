/*
 * An MPI program that creates its chorus communicator from MPI_COMM_WORLD and
 * compares chorus's allreduce with MPI's on the same data.
 */
#include <mpi.h>
#include <stdio.h>
#include <chorus_mpi.h>

int main(int argc, char **argv)
{
    int rank, size, wrong = 0, any_wrong = 0;
    int64_t mine[513], chorus_sum[513], mpi_sum[513];
    chorus_comm_t comm;
    chorus_status_t st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    st = chorus_comm_create_mpi(MPI_COMM_WORLD, &comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_comm_create_mpi: %s\n", rank, chorus_status_string(st));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < 513; i++)
        mine[i] = (int64_t)(rank + 1) * (i + 1);
    st = chorus_allreduce(mine, chorus_sum, 513, CHORUS_INT64, CHORUS_SUM, comm, NULL);
    MPI_Allreduce(mine, mpi_sum, 513, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 513; i++)
        wrong += st != CHORUS_OK || chorus_sum[i] != mpi_sum[i];
    if (chorus_comm_rank(comm) != rank || chorus_comm_size(comm) != size)
        wrong++;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi: %d ranks, chorus allreduce %s\n", size, any_wrong ? "WRONG" : "matches MPI");
    chorus_comm_destroy(comm);
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
