/*
 * chorus_fc_weight_grad: both strategies (forced by flag, by CHORUS_TUNE,
 * and chosen by the cost model) at 1-8 ranks, every dtype, uneven rows per
 * rank with 0 rows on some, against a reference every rank computes in
 * float64; the same bits on every rank; two non-blocking calls in flight;
 * the node team's allreduce without sleeps; ranks that disagree on the call,
 * bad arguments, a call refused on one rank, and a rank killed during the
 * gathers.
 *
 * Values are multiples of 1/8 in [-1, 1], exact in every dtype, so that
 * every product and sum is exact in float32: float32 and float64 results
 * must equal the reference, 16-bit results its rounding to their type. One
 * test with random values checks the documented tolerance instead
 * (chorus_fc_weight_grad(3)): each element within (K + p) u sum |e_ki x_kj|,
 * K the rows of all ranks, p the ranks, u the unit roundoff of float32.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "reduce/reduce.h"

enum { RC_OK = 0, RC_SETUP = 20, RC_CALL = 21, RC_RESULT = 22, RC_BITS = 23, RC_STATUS = 24,
       RC_STRATEGY = 25, RC_AFTER = 26 };

static const char *const rc_help =
    "20: setup, 21: a call failed, 22: wrong result, 23: ranks differ in bits, 24: wrong "
    "status, 25: wrong strategy, 26: the call after failed, -1: hung";

/* Rows of rank r: uneven, and 0 on every third rank. */
static size_t rows_of(int r, size_t base)
{
    return r % 3 == 2 ? 0 : base + (size_t)r * 3;
}

/* Element i of rank r's matrix m (0: x, 1: e), a multiple of 1/8 in [-1, 1]. */
static double value(int r, int m, size_t i, int random)
{
    uint64_t h = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)m * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)i * 0x165667B19E3779F9ull;

    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    if (random)
        return (double)(h % 2000001) / 1000000.0 - 1.0;
    return (double)((int)(h % 17) - 8) / 8.0;
}

static void store(chorus_dtype_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case CHORUS_FLOAT64: ((double *)buf)[i] = v; break;
    case CHORUS_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case CHORUS_FLOAT16: ((uint16_t *)buf)[i] = chorus__float_to_half((float)v); break;
    default: ((uint16_t *)buf)[i] = chorus__float_to_bf16((float)v); break;
    }
}

static double load(chorus_dtype_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case CHORUS_FLOAT64: return ((const double *)buf)[i];
    case CHORUS_FLOAT32: return ((const float *)buf)[i];
    case CHORUS_FLOAT16: return chorus__half_to_float(((const uint16_t *)buf)[i]);
    default: return chorus__bf16_to_float(((const uint16_t *)buf)[i]);
    }
}

/* What the result must be for a reference value: itself, or its rounding to a 16-bit type. */
static double rounded(chorus_dtype_t dt, double v)
{
    if (dt == CHORUS_FLOAT16)
        return chorus__half_to_float(chorus__float_to_half((float)v));
    if (dt == CHORUS_BFLOAT16)
        return chorus__bf16_to_float(chorus__float_to_bf16((float)v));
    return v;
}

typedef struct {
    size_t base_rows, in, out;
    chorus_dtype_t dtype;
    unsigned flags;             /* opts->flags */
    const char *expect;         /* the strategy chorus_request_algorithm must name, or NULL */
    int random;                 /* random values: the tolerance, not equality */
    int calls;                  /* 1, or 2 non-blocking calls in flight */
} fc_case_t;

/* This rank's x and e in dtype; NULL where it has no rows (the API allows it). */
static int make_inputs(const fc_case_t *c, int rank, void **x_p, void **e_p)
{
    size_t rows = rows_of(rank, c->base_rows), es = chorus_dtype_size(c->dtype);

    *x_p = *e_p = NULL;
    if (rows == 0)
        return 0;
    *x_p = malloc(rows * c->in * es + 1);
    *e_p = malloc(rows * c->out * es + 1);
    if (*x_p == NULL || *e_p == NULL)
        return -1;
    for (size_t i = 0; i < rows * c->in; i++)
        store(c->dtype, *x_p, i, value(rank, 0, i, c->random));
    for (size_t i = 0; i < rows * c->out; i++)
        store(c->dtype, *e_p, i, value(rank, 1, i, c->random));
    return 0;
}

/* Check grad against the float64 reference over every rank's rows. */
static int check_grad(const fc_case_t *c, int size, const void *grad, int call)
{
    size_t total = 0;
    int rc = RC_OK;

    for (int r = 0; r < size; r++)
        total += rows_of(r, c->base_rows);
    for (size_t o = 0; o < c->out && rc == RC_OK; o++) {
        for (size_t i = 0; i < c->in && rc == RC_OK; i++) {
            double ref = 0, mag = 0, got = load(c->dtype, grad, o * c->in + i);

            for (int r = 0; r < size; r++) {
                for (size_t k = 0; k < rows_of(r, c->base_rows); k++) {
                    double ev = rounded(c->dtype, value(r, 1, k * c->out + o, c->random));
                    double xv = rounded(c->dtype, value(r, 0, k * c->in + i, c->random));

                    ref += ev * xv;
                    mag += fabs(ev * xv);
                }
            }
            if (c->random ? fabs(got - ref) > (double)(total + (size_t)size) * 0x1p-24 * mag +
                                                  (c->dtype == CHORUS_FLOAT32 ? 0 : fabs(ref) * 0x1p-7)
                          : got != rounded(c->dtype, ref)) {
                fprintf(stderr, "call %d grad[%zu][%zu] = %.17g, reference %.17g\n", call, o, i,
                        got, ref);
                rc = RC_RESULT;
            }
        }
    }
    return rc;
}

/* FNV-1a of the gradient's bytes: gathered, they must all be equal. */
static int same_bits(chorus_comm_t comm, int size, const void *grad, size_t bytes)
{
    uint64_t h = 0xcbf29ce484222325ull, *all = calloc((size_t)size, sizeof(*all));
    int rc = RC_OK;

    if (all == NULL)
        return RC_SETUP;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)grad)[i]) * 0x100000001b3ull;
    if (chorus_allgather(&h, all, 1, CHORUS_UINT64, comm, NULL) != CHORUS_OK)
        rc = RC_CALL;
    for (int r = 1; r < size && rc == RC_OK; r++)
        rc = all[r] == all[0] ? RC_OK : RC_BITS;
    free(all);
    return rc;
}

static int run_case(chorus_comm_t comm, int rank, int size, void *arg)
{
    const fc_case_t *c = arg;
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    size_t gbytes = c->in * c->out * chorus_dtype_size(c->dtype);
    chorus_request_t req[2] = {NULL, NULL};
    void *x, *e, *grad[2];
    int rc = RC_OK;

    opts.flags = c->flags;
    if (make_inputs(c, rank, &x, &e) != 0)
        return RC_SETUP;
    for (int k = 0; k < c->calls; k++) {
        grad[k] = malloc(gbytes);
        if (grad[k] == NULL)
            return RC_SETUP;
        memset(grad[k], 0x7f, gbytes);
        if (chorus_ifc_weight_grad(x, e, rows_of(rank, c->base_rows), c->in, c->out, c->dtype,
                                   grad[k], comm, &opts, &req[k]) != CHORUS_OK)
            return RC_CALL;
    }
    for (int k = 0; k < c->calls && rc == RC_OK; k++) {
        const char *alg;

        if (chorus_request_wait(req[k]) != CHORUS_OK)
            return RC_CALL;
        alg = chorus_request_algorithm(req[k]);
        if (alg == NULL || (strcmp(alg, "late") != 0 && strcmp(alg, "allreduce") != 0) ||
            (c->expect != NULL && strcmp(alg, c->expect) != 0)) {
            fprintf(stderr, "rank %d: served by %s\n", rank, alg ? alg : "(null)");
            return RC_STRATEGY;
        }
        chorus_request_free(req[k]);
        rc = check_grad(c, size, grad[k], k);
        if (rc == RC_OK)
            rc = same_bits(comm, size, grad[k], gbytes);
    }
    return rc;
}

static void run_ranks(int nranks, fc_case_t *c, double deadline_s)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 20, .deadline_s = deadline_s,
                           .kill_rank = -1};
    int status[8];

    cr_expect_eq(harness_run(&opts, run_case, c, status, NULL), 0,
                 "%d ranks, %zu rows, %zu x %zu %s, flags %u: exit codes %d %d %d %d %d %d %d "
                 "%d (%s)", nranks, c->base_rows, c->out, c->in, chorus_dtype_name(c->dtype),
                 c->flags, status[0], nranks > 1 ? status[1] : 0, nranks > 2 ? status[2] : 0,
                 nranks > 3 ? status[3] : 0, nranks > 4 ? status[4] : 0,
                 nranks > 5 ? status[5] : 0, nranks > 6 ? status[6] : 0,
                 nranks > 7 ? status[7] : 0, rc_help);
}

/* Every rank count 1-8, each strategy and the automatic choice, every dtype. */
ParameterizedTestParameters(fc, ranks)
{
    static int n[] = {1, 2, 3, 4, 5, 6, 7, 8};

    return cr_make_param_array(int, n, sizeof(n) / sizeof(n[0]));
}

ParameterizedTest(int *nranks, fc, ranks, .timeout = 300)
{
    static const chorus_dtype_t dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_FLOAT16,
                                            CHORUS_BFLOAT16};
    static const struct { unsigned flags; const char *expect; } ways[] = {
        {CHORUS_FLAG_FC_LATE, "late"}, {CHORUS_FLAG_FC_ALLREDUCE, "allreduce"}, {0, NULL}};

    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
        for (size_t w = 0; w < sizeof(ways) / sizeof(ways[0]); w++) {
            fc_case_t c = {.base_rows = 5, .in = 13, .out = 7, .dtype = dtypes[d],
                           .flags = ways[w].flags, .expect = ways[w].expect, .calls = 1};

            run_ranks(*nranks, &c, 120);
        }
        /* Late in 3 and in 64 pipeline blocks: ranks with no rows in some of them. */
        for (int b = 0; b < 2; b++) {
            fc_case_t c = {.base_rows = 5, .in = 13, .out = 7, .dtype = dtypes[d],
                           .flags = CHORUS_FLAG_FC_LATE, .expect = "late", .calls = 1};

            setenv("CHORUS_FC_BLOCKS", b ? "64" : "3", 1);
            run_ranks(*nranks, &c, 120);
            unsetenv("CHORUS_FC_BLOCKS");
        }
    }
}

/* Random values: the tolerance; rows enough for several pipeline blocks. */
Test(fc, tolerance_random_values, .timeout = 120)
{
    setenv("CHORUS_FC_BLOCKS", "4", 1);
    fc_case_t late = {.base_rows = 40, .in = 64, .out = 48, .dtype = CHORUS_FLOAT32,
                      .flags = CHORUS_FLAG_FC_LATE, .expect = "late", .random = 1, .calls = 1};
    fc_case_t ar = late;

    ar.flags = CHORUS_FLAG_FC_ALLREDUCE;
    ar.expect = "allreduce";
    run_ranks(4, &late, 60);
    run_ranks(4, &ar, 60);
    unsetenv("CHORUS_FC_BLOCKS");
}

/* CHORUS_TUNE forces the strategy when opts do not. */
Test(fc, chorus_tune_forces, .timeout = 120)
{
    fc_case_t c = {.base_rows = 3, .in = 9, .out = 5, .dtype = CHORUS_FLOAT32, .calls = 1};

    setenv("CHORUS_TUNE", "fc_weight_grad=late", 1);
    c.expect = "late";
    run_ranks(3, &c, 60);
    setenv("CHORUS_TUNE", "fc_weight_grad=allreduce", 1);
    c.expect = "allreduce";
    run_ranks(3, &c, 60);
    unsetenv("CHORUS_TUNE");
}

/* Two non-blocking calls in flight, one of each strategy, then a third with the model's choice. */
Test(fc, two_in_flight, .timeout = 120)
{
    fc_case_t c = {.base_rows = 33, .in = 40, .out = 24, .dtype = CHORUS_FLOAT64, .calls = 2};

    run_ranks(4, &c, 60);
    c.flags = CHORUS_FLAG_FC_LATE;
    c.expect = "late";
    run_ranks(3, &c, 60);
}

/*
 * The allreduce of the gradient runs on the node's shared-memory team, whose
 * task polls memory: the progress thread must poll it too, not sleep on the
 * sockets until its longest sleep (100 ms) ends. 40 calls take well under
 * a second unless each sleeps.
 */
static int allreduce_promptly(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4 * 16], e[4 * 8], grad[8 * 16];
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    struct timespec t0, t1;

    (void)rank;
    (void)size;
    (void)arg;
    memset(x, 0, sizeof(x));
    memset(e, 0, sizeof(e));
    opts.flags = CHORUS_FLAG_FC_ALLREDUCE;
    if (chorus_barrier(comm, NULL) != CHORUS_OK)
        return RC_CALL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 40; i++) {
        /* A barrier first, so that no rank finds the team's turn already taken. */
        if (chorus_barrier(comm, NULL) != CHORUS_OK ||
            chorus_fc_weight_grad(x, e, 4, 16, 8, CHORUS_FLOAT32, grad, comm, &opts) !=
                CHORUS_OK)
            return RC_CALL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (s > 2.0) {
        fprintf(stderr, "40 calls took %.2f s\n", s);
        return RC_RESULT;
    }
    return RC_OK;
}

Test(fc, allreduce_on_node_team_promptly, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 10, .deadline_s = 60, .kill_rank = -1};
    int status[3];

    cr_expect_eq(harness_run(&opts, allreduce_promptly, NULL, status, NULL), 0,
                 "exit codes %d %d %d (%s)", status[0], status[1], status[2], rc_help);
}

/* ---- ranks that disagree, bad arguments ---------------------------------- */

/* A call every rank must refuse alike, or fail alike, then an allreduce that must work. */
static int after_ok(chorus_comm_t comm, int size)
{
    int32_t one = 1, sum = 0;

    if (chorus_allreduce(&one, &sum, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL) != CHORUS_OK)
        return RC_AFTER;
    return sum == size ? RC_OK : RC_AFTER;
}

static int disagree(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4 * 8] = {0}, e[4 * 8] = {0}, grad[64];
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    int which = *(int *)arg;
    size_t in = 8;

    if (which == 0 && rank == size - 1)
        in = 7;     /* another shape */
    if (which == 1)
        opts.flags = rank == 0 ? CHORUS_FLAG_FC_LATE : CHORUS_FLAG_FC_ALLREDUCE;
    if (chorus_fc_weight_grad(x, e, 4, in, 8, CHORUS_FLOAT32, grad, comm, &opts) !=
        CHORUS_ERR_INVALID_ARG)
        return RC_STATUS;
    return after_ok(comm, size);
}

Test(fc, ranks_disagree, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 10, .deadline_s = 40, .kill_rank = -1};
    int status[3];

    for (int which = 0; which < 2; which++)
        cr_expect_eq(harness_run(&opts, disagree, &which, status, NULL), 0,
                     "%s: exit codes %d %d %d (%s)", which ? "strategies" : "shapes",
                     status[0], status[1], status[2], rc_help);
}

/*
 * A variable set differently on one rank is a disagreement too, not a hang:
 * a communicator reads its variables when created, so rank 1 sets another
 * CHORUS_FC_BLOCKS before a dup.
 */
static int disagree_blocks(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4 * 8] = {0}, e[4 * 8] = {0}, grad[64];
    chorus_comm_t dup = NULL;
    int rc;

    (void)arg;
    setenv("CHORUS_FC_BLOCKS", rank == 1 ? "2" : "0", 1);
    if (chorus_comm_dup(comm, &dup) != CHORUS_OK)
        return RC_SETUP;
    rc = chorus_fc_weight_grad(x, e, 4, 8, 8, CHORUS_FLOAT32, grad, dup, NULL) ==
                 CHORUS_ERR_INVALID_ARG
             ? after_ok(dup, size)
             : RC_STATUS;
    chorus_comm_destroy(dup);
    return rc;
}

Test(fc, ranks_disagree_on_blocks, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 10, .deadline_s = 40, .kill_rank = -1};
    int status[2];

    cr_expect_eq(harness_run(&opts, disagree_blocks, NULL, status, NULL), 0,
                 "exit codes %d %d (%s)", status[0], status[1], rc_help);
}

static int bad_args(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[16] = {0}, e[16] = {0}, grad[16];
    chorus_opts_t both = CHORUS_OPTS_INIT, other = CHORUS_OPTS_INIT;
    chorus_request_t req = (chorus_request_t)&req;
    struct {
        const void *x, *e;
        size_t rows, in, out;
        chorus_dtype_t dt;
        void *grad;
        const chorus_opts_t *opts;
    } bad[] = {
        {x, e, 2, 4, 4, CHORUS_FLOAT32, NULL, NULL},
        {NULL, e, 2, 4, 4, CHORUS_FLOAT32, grad, NULL},
        {x, NULL, 2, 4, 4, CHORUS_FLOAT32, grad, NULL},
        {x, e, 2, 4, 4, CHORUS_INT32, grad, NULL},
        {x, e, 2, 0, 4, CHORUS_FLOAT32, grad, NULL},
        {x, e, SIZE_MAX / 2, 4, 4, CHORUS_FLOAT32, grad, NULL},
        {x, e, 2, (size_t)1 << 40, (size_t)1 << 40, CHORUS_FLOAT32, grad, NULL},
        {x, e, 2, 4, 4, CHORUS_FLOAT32, x, NULL},
        {x, e, 2, 4, 4, CHORUS_FLOAT32, grad, &both},
        {x, e, 2, 4, 4, CHORUS_FLOAT32, grad, &other},
    };

    (void)rank;
    (void)arg;
    both.flags = CHORUS_FLAG_FC_LATE | CHORUS_FLAG_FC_ALLREDUCE;
    other.flags = 0x100;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (chorus_fc_weight_grad(bad[i].x, bad[i].e, bad[i].rows, bad[i].in, bad[i].out,
                                  bad[i].dt, bad[i].grad, comm, bad[i].opts) !=
            CHORUS_ERR_INVALID_ARG)
            return RC_STATUS;
        if (chorus_ifc_weight_grad(bad[i].x, bad[i].e, bad[i].rows, bad[i].in, bad[i].out,
                                   bad[i].dt, bad[i].grad, comm, bad[i].opts, &req) !=
                CHORUS_ERR_INVALID_ARG ||
            req != (chorus_request_t)&req)
            return RC_STATUS;
    }
    if (chorus_ifc_weight_grad(x, e, 2, 4, 4, CHORUS_FLOAT32, grad, comm, NULL, NULL) !=
            CHORUS_ERR_INVALID_ARG ||
        chorus_fc_weight_grad(x, e, 2, 4, 4, CHORUS_FLOAT32, grad, NULL, NULL) !=
            CHORUS_ERR_INVALID_ARG)
        return RC_STATUS;
    /* A collective flag is refused: the flags are fc_weight_grad's alone. */
    if (chorus_allreduce(x, grad, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, &both) !=
        CHORUS_ERR_INVALID_ARG)
        return RC_STATUS;
    return after_ok(comm, size);
}

Test(fc, bad_arguments, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 10, .deadline_s = 60, .kill_rank = -1};
    int status[2];

    cr_expect_eq(harness_run(&opts, bad_args, NULL, status, NULL), 0, "exit codes %d %d (%s)",
                 status[0], status[1], rc_help);
}

/*
 * A call refused on one rank only (its grad is NULL): every rank returns an
 * error (the refusal notice fails the others' communicator, whose fault the
 * refusing rank then sees too: chorus_allreduce(3)), never success and never
 * a hang.
 */
static int refused_on_rank0(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4 * 8] = {0}, e[4 * 8] = {0}, grad[64];
    chorus_status_t st;

    (void)size;
    (void)arg;
    st = chorus_fc_weight_grad(x, e, 4, 8, 8, CHORUS_FLOAT32, rank == 0 ? NULL : grad, comm,
                               NULL);
    (void)rank;
    return st != CHORUS_OK ? RC_OK : RC_STATUS;
}

Test(fc, refused_on_one_rank, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 10, .deadline_s = 40, .kill_rank = -1};
    int status[3];

    cr_expect_eq(harness_run(&opts, refused_on_rank0, NULL, status, NULL), 0,
                 "exit codes %d %d %d (%s)", status[0], status[1], status[2], rc_help);
}

/* ---- a rank killed during the gathers ------------------------------------ */

static int gather_until_killed(chorus_comm_t comm, int rank, int size, void *arg)
{
    size_t rows = 512, in = 1024, out = 1024;
    float *x = calloc(rows * in, sizeof(float)), *e = calloc(rows * out, sizeof(float));
    float *grad = malloc(in * out * sizeof(float));
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_status_t st = CHORUS_OK;

    (void)rank;
    (void)size;
    (void)arg;
    if (x == NULL || e == NULL || grad == NULL)
        return RC_SETUP;
    opts.flags = CHORUS_FLAG_FC_LATE;
    /* Calls until the kill: one of them must fail, none may hang. */
    for (int i = 0; i < 400 && st == CHORUS_OK; i++)
        st = chorus_fc_weight_grad(x, e, rows, in, out, CHORUS_FLOAT32, grad, comm, &opts);
    return st != CHORUS_OK ? RC_OK : RC_STATUS;
}

Test(fc, rank_killed_during_gather, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 10, .deadline_s = 60, .kill_rank = 1,
                           .kill_after_s = 1.5};
    int status[3];

    cr_expect_eq(harness_run(&opts, gather_until_killed, NULL, status, NULL), 0,
                 "exit codes %d %d %d (%s)", status[0], status[1], status[2], rc_help);
}
