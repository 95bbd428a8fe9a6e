/*
 * The pieces of chorus_fc_weight_grad that need no ranks: the products on
 * CBLAS (when built with one) and on the blocked loop against a plain triple
 * loop, with and without accumulation, over shapes that cross the loop's
 * blocks; how rows are cut into pipeline blocks; and the cost model's
 * choice between the strategies.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll/fc.h"
#include "coll/select.h"
#include "reduce/gemm.h"

typedef void (*gemm_fn)(chorus_dtype_t, size_t, size_t, size_t, const void *, const void *,
                        int, void *);

/* c = (accumulate ? c : 0) + a^T b in double, then compared to what fn gives. */
static void check_gemm(gemm_fn fn, chorus_dtype_t dt, size_t m, size_t n, size_t k,
                       int accumulate)
{
    size_t es = chorus_dtype_size(dt);
    char *a = malloc(k * m * es + 8), *b = malloc(k * n * es + 8), *c = malloc(m * n * es + 8);
    double *ref = calloc(m * n + 1, sizeof(double));

    cr_assert(a && b && c && ref);
    for (size_t i = 0; i < k * m; i++) {
        double v = (double)((int)(i * 7 % 13) - 6) / 4;
        if (dt == CHORUS_FLOAT32) ((float *)a)[i] = (float)v; else ((double *)a)[i] = v;
    }
    for (size_t i = 0; i < k * n; i++) {
        double v = (double)((int)(i * 5 % 11) - 5) / 8;
        if (dt == CHORUS_FLOAT32) ((float *)b)[i] = (float)v; else ((double *)b)[i] = v;
    }
    for (size_t i = 0; i < m * n; i++) {
        double v = accumulate ? (double)(i % 5) : 0;
        if (dt == CHORUS_FLOAT32) ((float *)c)[i] = accumulate ? (float)v : NAN;
        else ((double *)c)[i] = accumulate ? v : NAN;
        ref[i] = v;
    }
    for (size_t p = 0; p < k; p++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                ref[i * n + j] += (dt == CHORUS_FLOAT32 ? ((float *)a)[p * m + i] : ((double *)a)[p * m + i]) *
                                  (dt == CHORUS_FLOAT32 ? ((float *)b)[p * n + j] : ((double *)b)[p * n + j]);
    fn(dt, m, n, k, a, b, accumulate, c);
    for (size_t i = 0; i < m * n; i++) {
        double got = dt == CHORUS_FLOAT32 ? ((float *)c)[i] : ((double *)c)[i];
        /* Multiples of 1/32 summed over few rows: exact in either type. */
        cr_assert_eq(got, ref[i], "%s %zux%zux%zu acc %d: c[%zu] = %g, expected %g",
                     chorus_dtype_name(dt), m, n, k, accumulate, i, got, ref[i]);
    }
    free(a);
    free(b);
    free(c);
    free(ref);
}

static void check_shapes(gemm_fn fn)
{
    static const size_t shapes[][3] = {{1, 1, 1}, {3, 5, 2}, {17, 600, 70}, {65, 9, 130},
                                       {4, 4, 0}};

    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int acc = 0; acc < 2; acc++) {
            check_gemm(fn, CHORUS_FLOAT32, shapes[s][0], shapes[s][1], shapes[s][2], acc);
            check_gemm(fn, CHORUS_FLOAT64, shapes[s][0], shapes[s][1], shapes[s][2], acc);
        }
}

Test(gemm, library)
{
    check_shapes(chorus__gemm_atb);
}

Test(gemm, blocked_loop)
{
    check_shapes(chorus__gemm_atb_blocked);
}

Test(gemm, rate_measured_once)
{
    double r32 = chorus__gemm_rate(CHORUS_FLOAT32), r64 = chorus__gemm_rate(CHORUS_FLOAT64);

    cr_assert_gt(r32, 1e6, "float32 rate %g", r32);
    cr_assert_gt(r64, 1e6, "float64 rate %g", r64);
    cr_assert_eq(chorus__gemm_rate(CHORUS_FLOAT32), r32, "cached");
    cr_assert_eq(chorus__gemm_rate(CHORUS_INT32), 0);
}

Test(fc, block_rows)
{
    /* 10 rows of the fullest rank in 4 blocks of 3: 3, 3, 3, 1; a rank of 4 rows: 3, 1, 0, 0. */
    size_t full[4], part[4], sum = 0;

    for (int k = 0; k < 4; k++) {
        full[k] = coll_fc_block_rows(10, 10, 4, k);
        part[k] = coll_fc_block_rows(4, 10, 4, k);
        sum += full[k];
    }
    cr_assert(full[0] == 3 && full[1] == 3 && full[2] == 3 && full[3] == 1);
    cr_assert(part[0] == 3 && part[1] == 1 && part[2] == 0 && part[3] == 0);
    cr_assert_eq(sum, 10);
    cr_assert_eq(coll_fc_block_rows(0, 0, 1, 0), 0);
}

Test(fc, strategy_names)
{
    cr_assert_eq(coll_fc_strategy_from_name("LATE"), COLL_FC_LATE);
    cr_assert_eq(coll_fc_strategy_from_name("allreduce"), COLL_FC_ALLREDUCE);
    cr_assert_eq(coll_fc_strategy_from_name("auto"), COLL_FC_AUTO);
    cr_assert_eq(coll_fc_strategy_from_name("ring"), COLL_FC_STRATEGY_COUNT);
    cr_assert_null(coll_fc_strategy_name(COLL_FC_STRATEGY_COUNT));
}

/* The model's environment of size ranks on one node with 1 Gb/s-like links. */
static void env_of(coll_env_t *env, tune_model_t *model, int size)
{
    memset(env, 0, sizeof(*env));
    tune_model_default(model);
    model->beta = 1.0 / 125e6;
    env->nranks = size;
    env->model = model;
    env->cores = size;
}

Test(fc, choice_follows_the_shapes)
{
    coll_env_t env;
    tune_model_t model;
    coll_fc_choice_t c;
    uint64_t few[4] = {32, 32, 32, 32}, many[4] = {65536, 65536, 65536, 65536};
    coll_fc_shape_t s = {.size = 4, .rows = few, .in = 4096, .out = 4096,
                         .dtype = CHORUS_FLOAT32, .gemm_rate = 50e9};

    env_of(&env, &model, 4);
    /* 4096 x 4096 with 32 rows per rank: gathering 1 MiB beats allreducing 64 MiB. */
    coll_fc_choose(&s, &env, &coll_ring_allreduce, COLL_FC_AUTO, 0, &c);
    cr_assert_eq(c.strategy, COLL_FC_LATE, "late %g s, allreduce %g s", c.late_s, c.allreduce_s);
    cr_assert_lt(c.late_s * 5, c.allreduce_s);
    /* A small layer over many rows: the gradient is the smaller thing to move. */
    s.rows = many;
    s.in = s.out = 64;
    coll_fc_choose(&s, &env, &coll_ring_allreduce, COLL_FC_AUTO, 0, &c);
    cr_assert_eq(c.strategy, COLL_FC_ALLREDUCE, "late %g s, allreduce %g s", c.late_s,
                 c.allreduce_s);
    /* Forced either way whatever the prices. */
    coll_fc_choose(&s, &env, &coll_ring_allreduce, COLL_FC_LATE, 0, &c);
    cr_assert_eq(c.strategy, COLL_FC_LATE);
    cr_assert(c.blocks >= 1 && c.blocks <= COLL_FC_BLOCKS_MAX);
}
