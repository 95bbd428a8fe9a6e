/*
 * Every collective at 1 to 8 ranks: every dtype and op, counts 0, 1, 7, 1023
 * and above a million, in place and out of place, checked exactly on every
 * rank. The ranks share this machine, so the default is the node-local
 * shared-memory team; other suites force each of its variants (with small
 * slots, so that calls take several rounds) and the TCP path, with one stream per
 * peer and with several; and, where chorus is built with UCX, the UCX transport.
 */
#include <stdlib.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>

#include "config.h"
#include "coll_matrix.h"
#include "harness.h"

static const size_t small_counts[] = {0, 1, 7, 1023};

/* Every collective's node-local algorithm of one kind, for every size. */
#define SHM_ALL(kind) "allreduce=" kind ",reduce=" kind ",reduce_scatter=" kind          \
                      ",allgather=" kind ",broadcast=" kind ",alltoall=" kind
/* The small-call variant: allreduce, reduce, broadcast and allgather (larger calls stage). */
#define SHM_LL "allreduce=shm_ll,reduce=shm_ll,broadcast=shm_ll,allgather=shm_ll"
/* The slice variant exists for the reductions to every rank and to a root. */
#define SHM_SLICE "allreduce=shm_slice,reduce=shm_slice"

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

/* Over TCP: the same matrix with the shared-memory path off. */
ParameterizedTestParameters(coll, tcp)
{
    static int ranks[] = {2, 3, 5, 8};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, coll, tcp, .timeout = 600)
{
    setenv("CHORUS_SHM", "0", 1);
    run_matrix(*nranks, *nranks == 3 ? 1048583 : 0);
}

/*
 * Over TCP with several streams per peer: payloads dealt in fragments over
 * every lane (ranks x streams: 2 x 8, 3 x 4, 5 x 2).
 */
ParameterizedTestParameters(coll, tcp_streams)
{
    static int ranks[] = {2, 3, 5};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, coll, tcp_streams, .timeout = 600)
{
    setenv("CHORUS_SHM", "0", 1);
    setenv("CHORUS_TCP_STREAMS", *nranks == 2 ? "8" : *nranks == 3 ? "4" : "2", 1);
    run_matrix(*nranks, *nranks == 5 ? 0 : 1048583);
}

#ifdef HAVE_UCX
/*
 * Over UCX (CHORUS_TRANSPORT=ucx) with the shared-memory path off; at 5
 * ranks with a small eager size and window, so that most messages go by
 * rendezvous and credit runs out and comes back. At 3 and 8 ranks large
 * messages take chorus's rendezvous (CHORUS_UCX_RNDV=chorus), at 2 and 5
 * UCX's.
 */
ParameterizedTestParameters(coll, ucx)
{
    static int ranks[] = {2, 3, 5, 8};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, coll, ucx, .timeout = 600)
{
    setenv("CHORUS_SHM", "0", 1);
    setenv("CHORUS_TRANSPORT", "ucx", 1);
    setenv("CHORUS_UCX_RNDV", *nranks == 3 || *nranks == 8 ? "chorus" : "ucx", 1);
    if (*nranks == 5) {
        setenv("CHORUS_UCX_EAGER_SIZE", "4K", 1);
        setenv("CHORUS_UCX_WINDOW", "64K", 1);
    }
    run_matrix(*nranks, *nranks == 3 ? 1048583 : 0);
}
#endif

/* Parameters cross into Criterion's test process by value: indexes, not pointers. */
typedef struct {
    const char *tune;       /* CHORUS_TUNE */
    const char *slot;       /* CHORUS_SHM_SLOT_SIZE */
    const char *cma;        /* CHORUS_SHM_CMA */
    int nranks;
} shm_case_t;

static const shm_case_t shm_cases[] = {
    {SHM_ALL("shm"), "4K", "1", 2},       {SHM_ALL("shm"), "4K", "1", 7},
    {SHM_SLICE, "4K", "1", 3},            {SHM_SLICE, "4K", "1", 8},
    {SHM_ALL("shm_cma"), "4K", "1", 2},   {SHM_ALL("shm_cma"), "4K", "1", 5},
    {"", "4K", "0", 4},                   {"", "256K", "0", 6},
    {SHM_LL, "4K", "1", 3},               {SHM_LL, "4K", "1", 8},
};

ParameterizedTestParameters(coll, shm_forced)
{
    static int index[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    return cr_make_param_array(int, index, sizeof(index) / sizeof(index[0]));
}

ParameterizedTest(int *i, coll, shm_forced, .timeout = 600)
{
    const shm_case_t *c = &shm_cases[*i];

    setenv("CHORUS_TUNE", c->tune, 1);
    setenv("CHORUS_SHM_SLOT_SIZE", c->slot, 1);
    setenv("CHORUS_SHM_CMA", c->cma, 1);
    cr_log_info("CHORUS_TUNE=%s CHORUS_SHM_SLOT_SIZE=%s CHORUS_SHM_CMA=%s, %d ranks", c->tune,
                c->slot, c->cma, c->nranks);
    run_matrix(c->nranks, c->nranks == 5 || c->nranks == 6 ? 1048583 : 0);
}
