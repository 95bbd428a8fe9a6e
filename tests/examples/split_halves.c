/*
 * Split a job in two: ranks with the same rank % 2 form a communicator, and
 * each half sums rank + 1 over its own ranks. Under chorus-run -n 5, the
 * even half (ranks 0, 2, 4) gets 1 + 3 + 5 = 9 and the odd half (ranks 1,
 * 3) gets 2 + 4 = 6. Each rank prints its half, its place in it and the sum.
 */
#include <stdio.h>
#include <chorus.h>

int main(void)
{
    chorus_comm_t world, half;
    int32_t x[100];
    chorus_status_t st = chorus_comm_create_from_env(&world);

    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    int rank = chorus_comm_rank(world), size = chorus_comm_size(world);
    st = chorus_comm_split(world, rank % 2, rank, &half);
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: split: %s\n", rank, chorus_status_string(st));
        chorus_comm_destroy(world);
        return 1;
    }
    /* The sum every member of this half must get: rank + 1 over its ranks. */
    int32_t want = 0;
    for (int r = rank % 2; r < size; r += 2)
        want += r + 1;
    for (int i = 0; i < 100; i++)
        x[i] = rank + 1;
    st = chorus_allreduce(x, x, 100, CHORUS_INT32, CHORUS_SUM, half, NULL);
    int ok = st == CHORUS_OK && x[0] == want && x[99] == want;
    printf("rank %d of %d: half %d, rank %d of %d, sum %d: %s\n", rank, size, rank % 2,
           chorus_comm_rank(half), chorus_comm_size(half), (int)x[99], ok ? "ok" : "WRONG");
    chorus_comm_destroy(half);
    chorus_comm_destroy(world);
    return ok ? 0 : 1;
}
