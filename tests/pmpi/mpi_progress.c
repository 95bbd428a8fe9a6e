/*
 * A legal MPI program that needs MPI to progress during a collective: rank 0
 * starts a large MPI_Isend to rank 1 and enters MPI_Allreduce; rank 1 first
 * receives that message, then enters MPI_Allreduce. Rank 1 can only get the
 * message if rank 0's MPI progresses while it waits in the allreduce (MPICH
 * moves large messages only while the sender's library runs). Prints
 * "mpi_progress: ok" on rank 0 and exits 0 when the data and the sum are right.
 * Usage: mpi_progress [BYTES] (default 64 MiB).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : (size_t)64 << 20;
    int rank, size, bad = 0, allbad = 0;
    double one = 1.0, sum = 0.0;
    unsigned char *buf;
    MPI_Request req;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    buf = malloc(bytes);
    if (size < 2 || buf == NULL || bytes > (size_t)1 << 30) {
        fprintf(stderr, "mpi_progress: needs 2 ranks or more and at most 1 GiB\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < bytes; i++)
        buf[i] = rank == 0 ? (unsigned char)(i * 7u) : 0;
    if (rank == 0) {
        MPI_Isend(buf, (int)bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &req);
        MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        if (rank == 1) {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < bytes; i++)
                bad += buf[i] != (unsigned char)(i * 7u);
        }
        MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    bad += sum != (double)size;
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_progress: %s\n", allbad == 0 ? "ok" : "wrong values");
    free(buf);
    MPI_Finalize();
    return allbad != 0;
}
