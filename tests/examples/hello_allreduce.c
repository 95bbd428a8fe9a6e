/*
 * The README's example: every rank contributes rank+1 to each element and
 * checks that it got 1 + 2 + ... + size. Created from the environment, so it
 * runs under chorus-run, torchrun-style variables, or any launcher that sets
 * CHORUS_RANK/CHORUS_SIZE/CHORUS_ADDR.
 */
#include <stdio.h>
#include <chorus.h>

int main(void)
{
    chorus_comm_t comm;
    float x[1000];
    chorus_status_t st = chorus_comm_create_from_env(&comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    int rank = chorus_comm_rank(comm), size = chorus_comm_size(comm);
    for (int i = 0; i < 1000; i++)
        x[i] = (float)(rank + 1);
    st = chorus_allreduce(x, x, 1000, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    int ok = st == CHORUS_OK && x[999] == (float)(size * (size + 1) / 2);
    printf("rank %d of %d: %s (x[999] = %g)\n", rank, size, ok ? "ok" : "WRONG", x[999]);
    chorus_comm_destroy(comm);
    return ok ? 0 : 1;
}
