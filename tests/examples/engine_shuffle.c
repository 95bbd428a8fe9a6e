/*
 * The training engine as a backward pass uses it: 300 named gradients of
 * float32, from 1 to 4000 elements, submitted in a different random order
 * on each rank, three steps in a row with the same names. Every rank's
 * gradient i holds (rank + 1) * (i % 7 + 1) in each element, so the sum over
 * p ranks is p (p + 1) / 2 * (i % 7 + 1) exactly. Prints, per rank, the
 * steps, tensors and elements checked, and ok or WRONG.
 */
#include <stdio.h>
#include <stdlib.h>
#include <chorus.h>

#define TENSORS 300
#define STEPS 3

static size_t count_of(int i)
{
    return 1 + (size_t)(i * 7919) % 4000;
}

int main(void)
{
    chorus_comm_t comm;
    chorus_engine_t engine;
    float *grad[TENSORS];
    chorus_request_t req[TENSORS];
    int order[TENSORS], rank, size, wrong = 0;
    size_t checked = 0;
    unsigned seed;

    if (chorus_comm_create_from_env(&comm) != CHORUS_OK)
        return 1;
    rank = chorus_comm_rank(comm);
    size = chorus_comm_size(comm);
    if (chorus_engine_create(comm, NULL, &engine) != CHORUS_OK)
        return 2;
    seed = (unsigned)rank * 2654435761u + 1;
    for (int i = 0; i < TENSORS; i++) {
        grad[i] = malloc(count_of(i) * sizeof(float));
        if (grad[i] == NULL)
            return 3;
    }
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < TENSORS; i++) {
            order[i] = i;
            for (size_t k = 0; k < count_of(i); k++)
                grad[i][k] = (float)((rank + 1) * (i % 7 + 1));
        }
        for (int i = TENSORS - 1; i > 0; i--) {
            int j = rand_r(&seed) % (i + 1), t = order[i];

            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < TENSORS; k++) {
            int i = order[k];
            char name[32];

            snprintf(name, sizeof(name), "grad.%d", i);
            if (chorus_engine_allreduce(engine, name, grad[i], grad[i], count_of(i),
                                        CHORUS_FLOAT32, CHORUS_SUM, NULL, &req[i]) != CHORUS_OK)
                return 4;
        }
        for (int i = 0; i < TENSORS; i++) {
            float want = (float)(size * (size + 1) / 2 * (i % 7 + 1));

            if (chorus_request_free(req[i]) != CHORUS_OK)
                return 5;
            for (size_t k = 0; k < count_of(i); k++, checked++)
                wrong += grad[i][k] != want;
        }
    }
    printf("rank %d of %d: %d steps of %d tensors, %zu elements: %s\n", rank, size, STEPS,
           TENSORS, checked, wrong ? "WRONG" : "ok");
    for (int i = 0; i < TENSORS; i++)
        free(grad[i]);
    if (chorus_engine_destroy(engine) != CHORUS_OK || chorus_comm_destroy(comm) != CHORUS_OK)
        return 6;
    return wrong ? 7 : 0;
}
