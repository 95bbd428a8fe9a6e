/*
 * chorus_mem_alloc as a user would call it: 256 MiB of float32 (or the
 * count given as the first argument) on every rank, allreduced in place,
 * every element checked exactly against 1 + 2 + ... + size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <chorus.h>

int main(int argc, char **argv)
{
    size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : ((size_t)64 << 20);
    chorus_comm_t comm;
    float *x = NULL;
    size_t wrong = 0;
    chorus_status_t st = chorus_comm_create_from_env(&comm);

    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    int rank = chorus_comm_rank(comm), size = chorus_comm_size(comm);
    st = chorus_mem_alloc(comm, count * sizeof(float), (void **)&x);
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_mem_alloc: %s\n", rank, chorus_status_string(st));
        chorus_comm_destroy(comm);
        return 1;
    }
    for (size_t i = 0; i < count; i++)
        x[i] = (float)(rank + 1 + (int)(i % 7));
    st = chorus_allreduce(x, x, count, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    for (size_t i = 0; st == CHORUS_OK && i < count; i++)
        wrong += x[i] != (float)(size * (size + 1) / 2 + size * (int)(i % 7));
    printf("rank %d of %d: %zu floats in chorus memory: %s (%zu wrong)\n", rank, size, count,
           st == CHORUS_OK && wrong == 0 ? "ok" : "WRONG", wrong);
    if (chorus_mem_free(comm, x) != CHORUS_OK)
        wrong++;
    chorus_comm_destroy(comm);
    return st == CHORUS_OK && wrong == 0 ? 0 : 1;
}
