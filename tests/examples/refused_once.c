/*
 * A call refused on one rank for its own buffer, then called correctly: the
 * refused call returns an error on every rank (the others log which rank
 * refused it and why), and the communicator goes on with exact results.
 *
 * The last rank is the root of a broadcast and passes a NULL send buffer
 * once; then rank 0 posts a non-blocking allreduce with a NULL receive
 * buffer, which returns at once; then rank 1 names a root that does not
 * exist in a reduce to rank 0. Every following call must be exact.
 * Runs under chorus-run (or any launcher chorus_comm_create_from_env reads).
 */
#include <stdio.h>
#include <chorus.h>

#define N 1000

static int exact(const float *x, float want)
{
    for (int i = 0; i < N; i++)
        if (x[i] != want)
            return 0;
    return 1;
}

int main(void)
{
    chorus_comm_t comm;
    chorus_request_t req = NULL;
    float in[N], out[N];
    chorus_status_t first, second, third, fourth, fifth, sixth;
    int ok, rank, size, root;

    if (chorus_comm_create_from_env(&comm) != CHORUS_OK)
        return 2;
    rank = chorus_comm_rank(comm);
    size = chorus_comm_size(comm);
    root = size - 1;
    for (int i = 0; i < N; i++)
        in[i] = (float)(rank + 1);

    first = chorus_broadcast(rank == root ? NULL : in, out, N, CHORUS_FLOAT32, root, comm,
                             NULL);
    second = chorus_broadcast(in, out, N, CHORUS_FLOAT32, root, comm, NULL);
    ok = first == CHORUS_ERR_INVALID_ARG && second == CHORUS_OK && exact(out, (float)size);

    third = chorus_iallreduce(in, rank == 0 ? NULL : out, N, CHORUS_FLOAT32, CHORUS_SUM, comm,
                              NULL, &req);
    if (third == CHORUS_OK)
        third = chorus_request_free(req);
    else if (req != NULL)
        ok = 0;     /* *req_p is written only on success */
    fourth = chorus_allreduce(in, out, N, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    ok = ok && third == CHORUS_ERR_INVALID_ARG && fourth == CHORUS_OK &&
         exact(out, (float)(size * (size + 1) / 2));

    fifth = chorus_reduce(in, out, N, CHORUS_FLOAT32, CHORUS_SUM, rank == 1 ? size : 0, comm,
                          NULL);
    sixth = chorus_reduce(in, out, N, CHORUS_FLOAT32, CHORUS_SUM, 0, comm, NULL);
    /* Rank 0's result passes through rank 1; the others only send and may be done first. */
    ok = ok && (fifth == CHORUS_ERR_INVALID_ARG || (rank > 1 && fifth == CHORUS_OK)) &&
         sixth == CHORUS_OK && (rank != 0 || exact(out, (float)(size * (size + 1) / 2)));

    printf("rank %d of %d: refused %s, %s, %s; then %s, %s, %s: %s\n", rank, size,
           chorus_status_string(first), chorus_status_string(third),
           chorus_status_string(fifth), chorus_status_string(second),
           chorus_status_string(fourth), chorus_status_string(sixth), ok ? "ok" : "WRONG");
    chorus_comm_destroy(comm);
    return ok ? 0 : 1;
}
