/*
 * Wire compression (CHORUS_COMPRESS_FP16, _BF16) of float32 allreduce, direct
 * and through the engine, and of reduce-scatter: random inputs at 1-8 ranks, sum and avg, in place
 * and not, odd counts, against the bound of chorus_allreduce(3) computed in
 * float64 from every rank's inputs (each rank makes them all from the same
 * seeds); the same bits on every rank; inputs near float16's largest value
 * (the scale keeps them finite); a value that is not finite (the call goes
 * uncompressed); arguments compression does not take.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reduce/reduce.h"

enum { RC_OK = 0, RC_SETUP = 20, RC_CALL = 21, RC_BOUND = 22, RC_BITS = 23, RC_STATUS = 24 };

static const char *const rc_help =
    "20: setup, 21: a call failed, 22: outside the bound, 23: ranks differ in bits, "
    "24: wrong status, -1: hung";

/* Rank r's element i of case k: uniform in [-amp, amp]. */
static float input(int r, int k, size_t i, double amp)
{
    uint64_t h = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(i + 1) * 0x165667B19E3779F9ull;

    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)(((double)(h % 2000001) / 1000000.0 - 1.0) * amp);
}

typedef struct {
    uint32_t flag;          /* CHORUS_COMPRESS_FP16 or _BF16 */
    chorus_op_t op;
    size_t count;
    int in_place;
    double amp;             /* inputs in [-amp, amp] */
    int engine;             /* through chorus_engine_allreduce, several tensors at once */
    int k;                  /* case number, for the inputs */
    int rs;                 /* chorus_reduce_scatter: count per rank, blocks of every rank */
} cmp_case_t;

/*
 * The documented bound for element i (chorus_allreduce(3)): to first order,
 * (u + 2^-24) p (p + 1) / 2 M + p d / s, M the largest |input| of any rank,
 * u the wire's unit roundoff, d half its smallest subnormal step, s the
 * scale; divided by p for avg. s is at least the largest power of two with
 * s p M <= the wire's largest value (bfloat16: at most 1).
 */
/* The scale chorus derives (chorus_allreduce(3)). */
static double scale_of(const cmp_case_t *c, int p, double most)
{
    int fp16 = c->flag == CHORUS_COMPRESS_FP16;
    double top = fp16 ? 65504.0 : 3.3895313892515355e38, s = 1;

    if (most > 0) {
        s = ldexp(1, (int)floor(log2(top / (p * most))));
        if (!fp16 && s > 1)
            s = 1;
        if (fp16 && s > ldexp(1, 64))
            s = ldexp(1, 64);
    }
    return s;
}

static double bound_of(const cmp_case_t *c, int p, double most)
{
    int fp16 = c->flag == CHORUS_COMPRESS_FP16;
    double u = fp16 ? ldexp(1, -11) : ldexp(1, -8), d = fp16 ? ldexp(1, -25) : ldexp(1, -134);
    double s = scale_of(c, p, most), b;

    b = (u + ldexp(1, -24)) * p * (p + 1) / 2.0 * most + p * d / s;
    return (c->op == CHORUS_AVG ? b / p : b) * 1.001 + 1e-30;
}

static uint64_t fnv(const void *buf, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ULL;
    return h;
}

/* Every element of got within the bound of the exact result; the same bits on every rank. */
static int check_result(chorus_comm_t comm, const cmp_case_t *c, int k, const float *got,
                        int rank, int size)
{
    double most = 0, worst = 0;
    uint64_t h = fnv(got, c->count * sizeof(float)), *all = calloc((size_t)size, 8);
    size_t bad = 0, sent = c->rs ? c->count * (size_t)size : c->count;
    size_t first = c->rs ? c->count * (size_t)rank : 0;
    int rc = RC_OK;

    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < sent; i++)
            most = fmax(most, fabs(input(r, k, i, c->amp)));
    for (size_t i = 0; i < c->count; i++) {
        double exact = 0, err;

        for (int r = 0; r < size; r++)
            exact += input(r, k, first + i, c->amp);
        if (c->op == CHORUS_AVG)
            exact /= size;
        err = fabs((double)got[i] - exact);
        worst = fmax(worst, err);
        bad += !(err <= bound_of(c, size, most));
    }
    if (bad > 0) {
        fprintf(stderr, "rank %d: %zu of %zu elements outside the bound %g (worst error %g, "
                "max |x| %g)\n", rank, bad, c->count, bound_of(c, size, most), worst, most);
        rc = RC_BOUND;
    }
    /*
     * It went over the wire. A reduce-scatter's block ends in float32: its error
     * is far above what float32 alone makes (2^-16 M, against p 2^-24 M).
     */
    if (rc == RC_OK && c->rs && size > 1 && c->count >= 100 && !(worst > ldexp(most, -16))) {
        fprintf(stderr, "rank %d: worst error %g with max |x| %g: not compressed\n", rank,
                worst, most);
        rc = RC_BOUND;
    }
    /* An allreduce's result is a 16-bit value at the scale. */
    for (size_t i = 0; rc == RC_OK && !c->rs && size > 1 && i < c->count; i++) {
        double s = scale_of(c, size, most);
        float v = (float)((double)got[i] * s);
        float back = c->flag == CHORUS_COMPRESS_FP16
                         ? chorus__half_to_float(chorus__float_to_half(v))
                         : chorus__bf16_to_float(chorus__float_to_bf16(v));

        if (back != v) {
            fprintf(stderr, "rank %d: element %zu (%g) is no 16-bit value at scale %g: not "
                    "compressed\n", rank, i, (double)got[i], s);
            rc = RC_BOUND;
        }
    }
    if (c->rs) {
        free(all);      /* every rank holds a block of its own */
        return rc;
    }
    if (all == NULL || chorus_allgather(&h, all, 1, CHORUS_UINT64, comm, NULL) != CHORUS_OK)
        rc = rc ? rc : RC_SETUP;
    for (int r = 0; rc == RC_OK && r < size; r++)
        if (all[r] != h) {
            fprintf(stderr, "rank %d: rank %d holds other bits\n", rank, r);
            rc = RC_BITS;
        }
    free(all);
    return rc;
}

static int run_direct(chorus_comm_t comm, const cmp_case_t *c, int rank, int size)
{
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    size_t sent = c->rs ? c->count * (size_t)size : c->count;
    float *send = malloc(sent * sizeof(float) + 4);
    float *recv = malloc(c->count * sizeof(float) + 4);
    int rc = RC_OK;
    chorus_status_t status = CHORUS_OK;

    if (send == NULL || recv == NULL)
        rc = RC_SETUP;
    for (size_t i = 0; rc == RC_OK && i < sent; i++)
        send[i] = input(rank, c->k, i, c->amp);
    for (size_t i = 0; rc == RC_OK && !c->rs && i < c->count; i++)
        recv[i] = send[i];
    opts.flags = c->flag;
    if (rc == RC_OK && c->rs)
        status = chorus_reduce_scatter(send, recv, c->count, CHORUS_FLOAT32, c->op, comm, &opts);
    else if (rc == RC_OK)
        status = chorus_allreduce(c->in_place ? recv : send, recv, c->count, CHORUS_FLOAT32,
                                  c->op, comm, &opts);
    if (status != CHORUS_OK)
        rc = RC_CALL;
    if (rc == RC_OK)
        rc = check_result(comm, c, c->k, recv, rank, size);
    free(send);
    free(recv);
    return rc;
}

/* Three tensors of the case, submitted in a rank's own order, one bucket when they fit. */
static int run_engine(chorus_comm_t comm, const cmp_case_t *c, int rank, int size)
{
    enum { T = 3 };
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_engine_t engine;
    chorus_request_t req[T];
    float *buf[T];
    int rc = chorus_engine_create(comm, NULL, &engine) == CHORUS_OK ? RC_OK : RC_SETUP;

    opts.flags = c->flag;
    for (int t = 0; t < T; t++) {
        buf[t] = malloc(c->count * sizeof(float) + 4);
        if (buf[t] == NULL)
            rc = RC_SETUP;
        for (size_t i = 0; rc == RC_OK && i < c->count; i++)
            buf[t][i] = input(rank, c->k + t, i, c->amp);
    }
    for (int j = 0; rc == RC_OK && j < T; j++) {
        int t = (j + rank) % T;
        char name[16];

        snprintf(name, sizeof(name), "c%d", t);
        if (chorus_engine_allreduce(engine, name, buf[t], buf[t], c->count, CHORUS_FLOAT32,
                                    c->op, &opts, &req[t]) != CHORUS_OK)
            rc = RC_CALL;
    }
    for (int t = 0; rc == RC_OK && t < T; t++)
        if (chorus_request_free(req[t]) != CHORUS_OK)
            rc = RC_CALL;
    for (int t = 0; rc == RC_OK && t < T; t++)
        rc = check_result(comm, c, c->k + t, buf[t], rank, size);
    for (int t = 0; t < T; t++)
        free(buf[t]);
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

static int cases_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const cmp_case_t *cases = arg;
    int rc = RC_OK;

    for (int k = 0; rc == RC_OK && cases[k].flag != 0; k++)
        rc = cases[k].engine ? run_engine(comm, &cases[k], rank, size)
                             : run_direct(comm, &cases[k], rank, size);
    return rc;
}

static void run_ranks(int nranks, harness_rank_fn fn, void *arg, const char *what)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 20, .deadline_s = 100,
                           .kill_rank = -1};
    int status[8] = {0};

    cr_expect_eq(harness_run(&opts, fn, arg, status, NULL), 0,
                 "%s at %d ranks: exit codes %d %d %d %d %d %d %d %d (%s)", what, nranks,
                 status[0], status[1], status[2], status[3], status[4], status[5], status[6],
                 status[7], rc_help);
}

ParameterizedTestParameters(compress, random)
{
    static int n[] = {1, 2, 3, 4, 5, 8};

    return cr_make_param_array(int, n, sizeof(n) / sizeof(n[0]));
}

/* Both wires, sum and avg, in place and not, counts from 1 to past a pipeline chunk. */
ParameterizedTest(int *nranks, compress, random, .timeout = 200)
{
    static cmp_case_t cases[] = {
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 1, 0, 1.0, 0, 1, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 1001, 1, 3.0, 0, 2, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_AVG, 77777, 0, 1e-3, 0, 3, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 200003, 0, 1e4, 0, 4, 0},
        {CHORUS_COMPRESS_BF16, CHORUS_SUM, 999, 0, 1.0, 0, 5, 0},
        {CHORUS_COMPRESS_BF16, CHORUS_AVG, 150001, 1, 1e20, 0, 6, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 5000, 0, 2.0, 1, 7, 0},
        {CHORUS_COMPRESS_BF16, CHORUS_AVG, 333, 1, 0.5, 1, 11, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 30011, 0, 1.0, 0, 14, 1},
        {CHORUS_COMPRESS_BF16, CHORUS_AVG, 777, 0, 1e5, 0, 15, 1},
        {0, 0, 0, 0, 0, 0, 0, 0},
    };

    run_ranks(*nranks, cases_rank, cases, "compressed allreduce");
}

/* Inputs near float16's largest value: their sum passes it, the scale keeps it finite. */
Test(compress, near_fp16_range, .timeout = 100)
{
    static cmp_case_t cases[] = {
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 4096, 0, 65000.0, 0, 21, 0},
        {CHORUS_COMPRESS_FP16, CHORUS_SUM, 4096, 0, 65000.0, 1, 22, 0},
        {0, 0, 0, 0, 0, 0, 0, 0},
    };

    run_ranks(4, cases_rank, cases, "inputs near float16's largest value");
}

/* One rank holds an infinity: the call goes uncompressed, every rank sees it exactly. */
static int nonfinite_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    float x[64];

    (void)arg;
    opts.flags = CHORUS_COMPRESS_FP16;
    for (int i = 0; i < 64; i++)
        x[i] = (float)(rank + 1) * 0.1f * (float)(i + 1);
    if (rank == size - 1)
        x[5] = INFINITY;
    if (chorus_allreduce(x, x, 64, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts) != CHORUS_OK)
        return RC_CALL;
    if (!isinf(x[5]))
        return RC_BOUND;
    /* Uncompressed: the other elements are float32 sums, not float16 roundings. */
    for (int i = 0; i < 64; i++) {
        float want = 0;

        if (i == 5)
            continue;
        for (int r = 0; r < size; r++)
            want += (float)(r + 1) * 0.1f * (float)(i + 1);
        if (fabsf(x[i] - want) > 1e-5f * fabsf(want))
            return RC_BOUND;
    }
    return RC_OK;
}

Test(compress, not_finite_goes_uncompressed, .timeout = 60)
{
    run_ranks(3, nonfinite_rank, NULL, "an infinity on one rank");
}

static int expect_invalid(chorus_status_t status, const char *what, int rank)
{
    return harness_expect_status(status, CHORUS_ERR_INVALID_ARG, what, rank) ? RC_STATUS
                                                                             : RC_OK;
}

/* Every rank makes the same refused calls, so every one fails alike. */
static int bad_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    float f[8] = {0};
    int32_t n[8] = {0};
    int rc = RC_OK;

    (void)arg;
    (void)size;
    opts.flags = CHORUS_COMPRESS_FP16 | CHORUS_COMPRESS_BF16;
    rc |= expect_invalid(chorus_allreduce(f, f, 8, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts),
                         "both wires", rank);
    opts.flags = CHORUS_COMPRESS_FP16;
    rc |= expect_invalid(chorus_allreduce(n, n, 8, CHORUS_INT32, CHORUS_SUM, comm, &opts),
                         "int32", rank);
    rc |= expect_invalid(chorus_allreduce(f, f, 8, CHORUS_FLOAT64, CHORUS_SUM, comm, &opts),
                         "float64", rank);
    rc |= expect_invalid(chorus_allreduce(f, f, 8, CHORUS_FLOAT32, CHORUS_MAX, comm, &opts),
                         "max", rank);
    rc |= expect_invalid(chorus_broadcast(f, f, 8, CHORUS_FLOAT32, 0, comm, &opts),
                         "a broadcast", rank);
    rc |= expect_invalid(chorus_allgather(f, f, 1, CHORUS_FLOAT32, comm, &opts),
                         "an allgather", rank);
    rc |= expect_invalid(chorus_reduce(f, f, 8, CHORUS_FLOAT32, CHORUS_SUM, 0, comm, &opts),
                         "a reduce", rank);
    /* The communicator is as good as before. */
    if (rc == RC_OK &&
        (chorus_allreduce(f, f, 8, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts) != CHORUS_OK ||
         f[0] != 0))
        rc = RC_CALL;
    return rc;
}

Test(compress, bad_arguments, .timeout = 60)
{
    run_ranks(3, bad_rank, NULL, "arguments compression does not take");
}
