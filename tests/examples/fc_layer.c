/*
 * A fully-connected layer of 1024 inputs and 1024 outputs: each rank holds
 * 48 + 16 * rank rows of random inputs x and errors e, and
 * chorus_fc_weight_grad gives every rank sum over ranks of e^T x. Each rank
 * also makes every rank's rows itself (from the same seeds) and computes the
 * gradient in a single process, in double, to check the result against the
 * tolerance of chorus_fc_weight_grad(3). Prints the strategy chorus chose,
 * the largest error relative to the bound, and ok or WRONG.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <chorus.h>

#define IN 1024
#define OUT 1024

static size_t rows_of(int rank)
{
    return 48 + 16 * (size_t)rank;
}

/* Rank r's matrix m (0: x, 1: e), element i: uniform in [-1, 1) from a small generator. */
static float value(int r, int m, size_t i)
{
    unsigned long long h = ((unsigned long long)r << 40) ^ ((unsigned long long)m << 36) ^ i;

    h = (h ^ (h >> 31)) * 0x7fb5d329728ea185ull;
    h = (h ^ (h >> 27)) * 0x81dadef4bc2dd44dull;
    h ^= h >> 33;
    return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *matrix(int r, int m, size_t rows, size_t cols)
{
    float *a = malloc(rows * cols * sizeof(float) + 1);

    for (size_t i = 0; a != NULL && i < rows * cols; i++)
        a[i] = value(r, m, i);
    return a;
}

int main(void)
{
    chorus_comm_t comm;
    chorus_request_t req;
    chorus_status_t st = chorus_comm_create_from_env(&comm);

    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    int rank = chorus_comm_rank(comm), size = chorus_comm_size(comm);
    float *x = matrix(rank, 0, rows_of(rank), IN), *e = matrix(rank, 1, rows_of(rank), OUT);
    float *grad = malloc(sizeof(float) * IN * OUT);
    double *ref = calloc(IN * OUT, sizeof(double)), *mag = calloc(IN * OUT, sizeof(double));
    size_t total = 0;

    if (x == NULL || e == NULL || grad == NULL || ref == NULL || mag == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    st = chorus_ifc_weight_grad(x, e, rows_of(rank), IN, OUT, CHORUS_FLOAT32, grad, comm, NULL,
                                &req);
    if (st == CHORUS_OK)
        st = chorus_request_wait(req);
    const char *strategy = st == CHORUS_OK ? chorus_request_algorithm(req) : "none";
    if (st == CHORUS_OK)
        chorus_request_free(req);
    /* The single-process reference, every rank's rows in double. */
    for (int r = 0; r < size; r++) {
        float *xr = matrix(r, 0, rows_of(r), IN), *er = matrix(r, 1, rows_of(r), OUT);

        for (size_t k = 0; xr != NULL && er != NULL && k < rows_of(r); k++)
            for (size_t o = 0; o < OUT; o++)
                for (size_t i = 0; i < IN; i++) {
                    double p = (double)er[k * OUT + o] * xr[k * IN + i];
                    ref[o * IN + i] += p;
                    mag[o * IN + i] += fabs(p);
                }
        total += rows_of(r);
        free(xr);
        free(er);
    }
    /* chorus_fc_weight_grad(3): within (K + p) u sum |e x|, u = 2^-24 for float32. */
    double worst = 0;
    for (size_t j = 0; st == CHORUS_OK && j < (size_t)IN * OUT; j++) {
        double bound = (double)(total + (size_t)size) * 0x1p-24 * mag[j];
        double rel = fabs(grad[j] - ref[j]) / (bound > 0 ? bound : 1e-300);
        worst = rel > worst ? rel : worst;
    }
    int ok = st == CHORUS_OK && worst <= 1.0;
    printf("rank %d of %d: %zu rows, %s, largest error %.3f of the bound: %s\n", rank, size,
           rows_of(rank), st == CHORUS_OK ? strategy : chorus_status_string(st), worst,
           ok ? "ok" : "WRONG");
    free(x);
    free(e);
    free(grad);
    free(ref);
    free(mag);
    chorus_comm_destroy(comm);
    return ok ? 0 : 1;
}
