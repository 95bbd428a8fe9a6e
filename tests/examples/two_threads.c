/*
 * Two threads of each rank call at once, each on its own communicator:
 * the main thread makes blocking allreduces of 1 to 300,000 int32 on the
 * communicator (over the network these run the progress loop in the
 * calling thread), the other non-blocking ones, each waited for, on a
 * duplicate. Every result must be exact. Prints "rank R: ok" and exits 0
 * when all are. Runs under chorus-run (or any launcher
 * chorus_comm_create_from_env reads); CHORUS_SHM=0 sends every call
 * through the network transport.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <chorus.h>

#define CALLS 120
#define MAX 300000

typedef struct {
    chorus_comm_t comm;
    int rank, size, bad;
} side_t;

/* The input of rank r at element i in call k. */
static int32_t input(int r, size_t i, int k)
{
    return (int32_t)(r * 1000 + (int)(i % 89) + 3 * k);
}

/* Call k, n elements, blocking or not; 0 when exact. */
static int call(chorus_comm_t comm, int rank, int size, int32_t *send, int32_t *recv, size_t n,
                int k, int blocking)
{
    chorus_request_t req = NULL;
    chorus_status_t st;

    for (size_t i = 0; i < n; i++)
        send[i] = input(rank, i, k);
    if (blocking) {
        st = chorus_allreduce(send, recv, n, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    } else {
        st = chorus_iallreduce(send, recv, n, CHORUS_INT32, CHORUS_SUM, comm, NULL, &req);
        if (st == CHORUS_OK)
            st = chorus_request_free(req);
    }
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: %s allreduce %d of %zu failed: %s\n", rank,
                blocking ? "blocking" : "non-blocking", k, n, chorus_status_string(st));
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t want = 0;

        for (int r = 0; r < size; r++)
            want += input(r, i, k);
        if (recv[i] != want) {
            fprintf(stderr, "rank %d: %s allreduce %d of %zu: element %zu is %d, not %d\n", rank,
                    blocking ? "blocking" : "non-blocking", k, n, i, (int)recv[i], (int)want);
            return 1;
        }
    }
    return 0;
}

static void *side_main(void *arg)
{
    side_t *s = arg;
    int32_t send[21], recv[21];

    for (int k = 0; k < CALLS && !s->bad; k++)
        s->bad = call(s->comm, s->rank, s->size, send, recv, (size_t)(k % 3 + 1) * 7, k, 0);
    return NULL;
}

int main(void)
{
    static const size_t sizes[] = {1, 7, 1000, 65537, MAX};
    int32_t *send = malloc(MAX * sizeof(int32_t)), *recv = malloc(MAX * sizeof(int32_t));
    chorus_comm_t comm;
    side_t side = {0};
    pthread_t thread;
    int bad = 0;

    if (send == NULL || recv == NULL || chorus_comm_create_from_env(&comm) != CHORUS_OK)
        return 2;
    side.rank = chorus_comm_rank(comm);
    side.size = chorus_comm_size(comm);
    if (chorus_comm_dup(comm, &side.comm) != CHORUS_OK ||
        pthread_create(&thread, NULL, side_main, &side) != 0)
        return 2;
    for (int k = 0; k < CALLS && !bad; k++)
        bad = call(comm, side.rank, side.size, send, recv, sizes[k % 5], k, 1);
    pthread_join(thread, NULL);
    bad |= side.bad;
    if (!bad)
        printf("rank %d: ok\n", side.rank);
    chorus_comm_destroy(side.comm);
    chorus_comm_destroy(comm);
    free(send);
    free(recv);
    return bad;
}
