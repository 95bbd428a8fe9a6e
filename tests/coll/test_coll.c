/*
 * Every collective over TCP loopback at 1 to 8 ranks: every dtype and op,
 * counts 0, 1, 7, 1023 and above a million, in place and out of place,
 * checked exactly on every rank.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>

#include "coll_matrix.h"
#include "harness.h"

static const size_t small_counts[] = {0, 1, 7, 1023};

static void run_matrix(int nranks, size_t big)
{
    coll_matrix_t m = {small_counts, 4, big};
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 60, .deadline_s = 600,
                           .kill_rank = -1};
    int status[64];

    cr_assert_eq(harness_run(&opts, coll_matrix_rank, &m, status, NULL), 0,
                 "some rank of %d failed (see its messages above)", nranks);
    for (int r = 0; r < nranks; r++)
        cr_expect_eq(status[r], 0, "rank %d of %d exited with %d", r, nranks, status[r]);
}

ParameterizedTestParameters(coll, small_counts_all_ranks)
{
    static int ranks[] = {1, 2, 3, 4, 5, 6, 7, 8};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, coll, small_counts_all_ranks, .timeout = 600)
{
    run_matrix(*nranks, 0);
}

/* Above a million elements: pipelined, every algorithm's large-message path. */
ParameterizedTestParameters(coll, million_elements)
{
    static int ranks[] = {2, 3, 5, 8};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, coll, million_elements, .timeout = 900)
{
    run_matrix(*nranks, 1048583);
}
