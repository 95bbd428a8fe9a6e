/*
 * chorus_mem_alloc memory as collective buffers: the matrix with such
 * buffers on every rank (the node-local calls then read and write them
 * where they are), on some ranks only, on split communicators and under
 * each node-local variant; the path taken; freeing memory a pending call
 * uses; bad arguments; a rank killed while its peers read its memory.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_matrix.h"
#include "harness.h"
#include "lib/proc_res.h"
#include "transports/shm/shm_internal.h"

static const size_t small_counts[] = {0, 1, 7, 1023};

enum { RC_OK = 0, RC_FAIL = 1, RC_SETUP = 2, RC_PATH = 3, RC_STATUS = 4, RC_LEFT = 5 };

static void run(int nranks, void *arg, harness_rank_fn fn)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 60, .deadline_s = 600,
                           .kill_rank = -1};
    int status[16];
    int rc = harness_run(&opts, fn, arg, status, NULL);

    for (int r = 0; r < nranks && rc != 0; r++)
        cr_log_error("rank %d of %d exited with %d", r, nranks, status[r]);
    cr_assert_eq(rc, 0, "some rank of %d failed (see its messages above)", nranks);
}

static void run_matrix(int nranks, int mem, size_t big)
{
    coll_matrix_t m = {small_counts, 4, big, mem, NULL};

    run(nranks, &m, coll_matrix_rank);
}

ParameterizedTestParameters(mem, every_rank)
{
    static int ranks[] = {1, 2, 3, 4, 5, 8};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, mem, every_rank, .timeout = 600)
{
    run_matrix(*nranks, COLL_MATRIX_CHORUS, *nranks <= 3 ? 1048583 : 0);
}

ParameterizedTestParameters(mem, some_ranks)
{
    static int ranks[] = {2, 3, 4};
    return cr_make_param_array(int, ranks, sizeof(ranks) / sizeof(ranks[0]));
}

ParameterizedTest(int *nranks, mem, some_ranks, .timeout = 600)
{
    run_matrix(*nranks, COLL_MATRIX_MIXED, *nranks == 3 ? 1048583 : 0);
}

/* Parameters cross into Criterion's test process by value: indexes into this table. */
typedef struct {
    const char *tune;           /* CHORUS_TUNE */
    const char *cma;            /* CHORUS_SHM_CMA */
    int mem;
    int nranks;
} variant_case_t;

#define SHM_ALL(kind) "allreduce=" kind ",reduce=" kind ",reduce_scatter=" kind \
                      ",allgather=" kind ",broadcast=" kind
static const variant_case_t variant_cases[] = {
    {SHM_ALL("shm"), "1", COLL_MATRIX_CHORUS, 3},
    {SHM_ALL("shm"), "0", COLL_MATRIX_MIXED, 3},
    {"allreduce=shm_slice,reduce=shm_slice", "0", COLL_MATRIX_CHORUS, 4},
    {"allreduce=shm_slice,reduce=shm_slice", "1", COLL_MATRIX_MIXED, 3},
    {SHM_ALL("shm_cma"), "1", COLL_MATRIX_CHORUS, 3},
    {SHM_ALL("shm_cma"), "1", COLL_MATRIX_MIXED, 4},
};

ParameterizedTestParameters(mem, variants)
{
    static int idx[] = {0, 1, 2, 3, 4, 5};
    return cr_make_param_array(int, idx, sizeof(idx) / sizeof(idx[0]));
}

/* Small slots, so that the calls that stage take several rounds. */
ParameterizedTest(int *i, mem, variants, .timeout = 600)
{
    const variant_case_t *c = &variant_cases[*i];

    setenv("CHORUS_TUNE", c->tune, 1);
    setenv("CHORUS_SHM_CMA", c->cma, 1);
    setenv("CHORUS_SHM_SLOT_SIZE", "4096", 1);
    run_matrix(c->nranks, c->mem, 5003);
}

/* The matrix on each half of a split, in memory allocated on the parent. */
static int split_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    coll_matrix_t m = *(const coll_matrix_t *)arg;
    chorus_comm_t half;
    int failures;

    (void)size;
    if (chorus_comm_split(comm, rank % 2, -rank, &half) != CHORUS_OK)
        return RC_SETUP;
    m.mem_comm = comm;
    failures = coll_matrix_rank(half, chorus_comm_rank(half), chorus_comm_size(half), &m);
    if (chorus_comm_destroy(half) != CHORUS_OK)
        failures++;
    return failures ? RC_FAIL : RC_OK;
}

Test(mem, split_halves, .timeout = 600)
{
    coll_matrix_t m = {small_counts, 4, 70001, COLL_MATRIX_CHORUS, NULL};

    run(5, &m, split_rank);
}

/*
 * Which path ran: with chorus memory on every rank a node-local call that
 * would stage runs on the buffers directly ("shm_mem"); with it on some
 * ranks only, it stages as usual. Small calls take the one-step path
 * ("shm_ll") whatever the memory. Every rank decides alike.
 */
static int path_is(const char *alg, size_t bytes, int direct)
{
    if (bytes <= SHM_LL_BYTES)
        return strcmp(alg, "shm_ll") == 0;
    return (strcmp(alg, "shm_mem") == 0) == direct;
}

static int path_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static const size_t counts[] = {1, 1000, 1 << 20};
    int mixed = *(const int *)arg, bad = 0;

    (void)size;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k], bytes = n * sizeof(float);
        int chorus_mem = !mixed || rank == 0;
        float *buf = NULL;
        chorus_request_t req;
        const char *alg;

        if (chorus_mem && chorus_mem_alloc(comm, bytes, (void **)&buf) != CHORUS_OK)
            return RC_SETUP;
        if (!chorus_mem && (buf = malloc(bytes)) == NULL)
            return RC_SETUP;
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(rank + 1);
        if (chorus_iallreduce(buf, buf, n, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL, &req) !=
                CHORUS_OK || chorus_request_wait(req) != CHORUS_OK)
            return RC_STATUS;
        alg = chorus_request_algorithm(req);
        chorus_request_free(req);
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != (float)(size * (size + 1) / 2) && bad++ == 0)
                fprintf(stderr, "rank %d: %zu floats: element %zu is %g, not %d\n", rank, n,
                        i, (double)buf[i], size * (size + 1) / 2);
        }
        if (!path_is(alg, bytes, !mixed)) {
            fprintf(stderr, "rank %d: %zu floats, chorus memory on %s: served by %s\n", rank,
                    n, mixed ? "rank 0 only" : "every rank", alg);
            return RC_PATH;
        }
        if (chorus_mem)
            chorus_mem_free(comm, buf);
        else
            free(buf);
    }
    return bad ? RC_FAIL : RC_OK;
}

Test(mem, path_every_rank)
{
    int mixed = 0;

    run(3, &mixed, path_rank);
}

Test(mem, path_some_ranks)
{
    int mixed = 1;

    run(3, &mixed, path_rank);
}

/* A broadcast from chorus memory on the root alone runs in place too: the others read it. */
static int bcast_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static const size_t counts[] = {1, 1000, 1 << 20};
    const int root = 1;

    (void)size;
    (void)arg;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k], bytes = n * sizeof(float), wrong = 0;
        float *buf = NULL;
        chorus_request_t req;
        const char *alg;

        if (rank == root ? chorus_mem_alloc(comm, bytes, (void **)&buf) != CHORUS_OK
                         : (buf = calloc(n, sizeof(float))) == NULL)
            return RC_SETUP;
        for (size_t i = 0; rank == root && i < n; i++)
            buf[i] = (float)(i % 13 + 1);
        if (chorus_ibroadcast(buf, buf, n, CHORUS_FLOAT32, root, comm, NULL, &req) !=
                CHORUS_OK || chorus_request_wait(req) != CHORUS_OK)
            return RC_STATUS;
        alg = chorus_request_algorithm(req);
        chorus_request_free(req);
        for (size_t i = 0; i < n; i++)
            wrong += buf[i] != (float)(i % 13 + 1);
        if (wrong || !path_is(alg, bytes, 1)) {
            fprintf(stderr, "rank %d: broadcast of %zu floats from chorus memory on the root: "
                    "%zu wrong, served by %s\n", rank, n, wrong, alg);
            return wrong ? RC_FAIL : RC_PATH;
        }
        if (rank == root)
            chorus_mem_free(comm, buf);
        else
            free(buf);
    }
    return RC_OK;
}

Test(mem, path_broadcast_from_root_only)
{
    run(3, NULL, bcast_rank);
}

/*
 * Memory under a pending call cannot be freed: rank 1 joins late, so rank
 * 0's call is pending when it frees. Then the ordinary refusals.
 */
static int free_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    size_t n = 1 << 16;
    float *buf, *other;
    chorus_request_t req;
    int bad = 0, local;

    (void)size;
    (void)arg;
    if (chorus_mem_alloc(comm, n * sizeof(float), (void **)&buf) != CHORUS_OK ||
        chorus_mem_alloc(comm, 100, (void **)&other) != CHORUS_OK)
        return RC_SETUP;
    for (size_t i = 0; i < n; i++)
        bad += buf[i] != 0.0f;     /* zeroed */
    if (rank == 1)
        usleep(300000);
    if (chorus_iallreduce(buf, buf, n, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL, &req) !=
        CHORUS_OK)
        return RC_STATUS;
    if (rank == 0) {
        bad += harness_expect_status(chorus_mem_free(comm, buf), CHORUS_ERR_IN_USE,
                                     "free under a pending call", rank);
        /* A part of it, and another allocation, are no allocation to free either way. */
        bad += harness_expect_status(chorus_mem_free(comm, buf + 1), CHORUS_ERR_INVALID_ARG,
                                     "free of an inner address", rank);
    }
    bad += harness_expect_status(chorus_request_wait(req), CHORUS_OK, "the call", rank);
    chorus_request_free(req);
    bad += harness_expect_status(chorus_mem_free(comm, buf), CHORUS_OK, "free after it", rank);
    bad += harness_expect_status(chorus_mem_free(comm, buf), CHORUS_ERR_INVALID_ARG,
                                 "a second free", rank);
    bad += harness_expect_status(chorus_mem_free(comm, &local), CHORUS_ERR_INVALID_ARG,
                                 "free of a stack address", rank);
    bad += harness_expect_status(chorus_mem_free(comm, NULL), CHORUS_OK, "free of NULL", rank);
    bad += harness_expect_status(chorus_mem_free(NULL, other), CHORUS_ERR_INVALID_ARG,
                                 "free with no communicator", rank);
    bad += harness_expect_status(chorus_mem_free(comm, other), CHORUS_OK, "free", rank);
    bad += harness_expect_status(chorus_mem_alloc(comm, 64, NULL), CHORUS_ERR_INVALID_ARG,
                                 "an allocation with no pointer to set", rank);
    bad += harness_expect_status(chorus_mem_alloc(comm, 0, (void **)&other),
                                 CHORUS_ERR_INVALID_ARG, "an allocation of 0 bytes", rank);
    bad += other != NULL;       /* a refused allocation leaves *ptr_p NULL */
    bad += harness_expect_status(chorus_mem_alloc(comm, SIZE_MAX, (void **)&other),
                                 CHORUS_ERR_INVALID_ARG, "an allocation of SIZE_MAX bytes",
                                 rank);
    return bad ? RC_FAIL : RC_OK;
}

Test(mem, free_in_use_and_bad_arguments)
{
    void *p = (void *)1;

    run(2, NULL, free_rank);
    cr_expect_eq(chorus_mem_alloc(NULL, 64, &p), CHORUS_ERR_INVALID_ARG);
    cr_expect_null(p, "a refused allocation leaves *ptr_p NULL");
}

/* ---- a rank killed while its peers read its memory ---------------------- */

#define KILL_RANKS 3
#define KILL_VICTIM 1
#define KILL_COUNT (4u << 20)       /* 16 MiB of float32 */
#define KILL_TIMEOUT_S 5.0

/*
 * The loop runs on a duplicate, so that destroying it (its node team, and
 * with it the peers' memory mapped here) can be checked before the harness
 * destroys the communicator it made.
 */
static int kill_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    volatile int *started = arg;
    chorus_status_t status = CHORUS_OK;
    double start = harness_now();
    chorus_comm_t work;
    float *buf;
    int calls = 0, left;

    (void)size;
    if (chorus_comm_dup(comm, &work) != CHORUS_OK ||
        chorus_mem_alloc(comm, KILL_COUNT * sizeof(float), (void **)&buf) != CHORUS_OK)
        return RC_SETUP;
    while (status == CHORUS_OK && harness_now() - start < 40.0) {
        status = chorus_allreduce(buf, buf, KILL_COUNT, CHORUS_FLOAT32, CHORUS_MAX, work, NULL);
        if (status == CHORUS_OK && calls++ == 0)
            started[rank] = 1;
    }
    fprintf(stderr, "rank %d: %d calls, then %s\n", rank, calls, chorus_status_string(status));
    if (status != CHORUS_ERR_PEER_FAILED && status != CHORUS_ERR_TIMEOUT)
        return RC_STATUS;
    (void)chorus_comm_destroy(work);
    if (chorus_mem_free(comm, buf) != CHORUS_OK)
        return RC_STATUS;
    /* Its own memory is gone, and the peers' went with the team that mapped it. */
    if ((left = proc_mappings_named("memfd:chorus-mem")) != 0) {
        fprintf(stderr, "rank %d: %d chorus-mem mappings left\n", rank, left);
        return RC_LEFT;
    }
    return RC_OK;
}

typedef struct {
    volatile int *started;
    double all_started_s, killed_at_s;
} kill_state_t;

static void kill_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    kill_state_t *ks = arg;
    int all = 1;

    if (ks->killed_at_s > 0)
        return;
    if (ks->all_started_s == 0) {
        for (int r = 0; r < nranks; r++)
            all &= ks->started[r];
        if (all)
            ks->all_started_s = elapsed_s;
        return;
    }
    if (elapsed_s - ks->all_started_s >= 0.3 && pids[KILL_VICTIM] > 0) {
        kill(pids[KILL_VICTIM], SIGKILL);
        ks->killed_at_s = elapsed_s;
    }
}

Test(mem, killed_rank_while_peers_read_its_memory, .timeout = 120)
{
    kill_state_t ks = {0};
    harness_opts_t opts = {.nranks = KILL_RANKS, .timeout_s = KILL_TIMEOUT_S,
                           .deadline_s = 60, .kill_rank = KILL_VICTIM, .kill_after_s = 1e9,
                           .tick = kill_tick, .tick_arg = &ks};
    int status[KILL_RANKS];
    double elapsed[KILL_RANKS];

    ks.started = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(ks.started, MAP_FAILED);
    cr_assert_eq(harness_run(&opts, kill_rank, (void *)ks.started, status, elapsed), 0,
                 "a rank failed or hung: %d %d %d", status[0], status[1], status[2]);
    cr_assert_gt(ks.killed_at_s, 0, "the ranks never all finished a first call");
    cr_assert_eq(status[KILL_VICTIM], 128 + SIGKILL);
    for (int r = 0; r < KILL_RANKS; r++) {
        if (r == KILL_VICTIM)
            continue;
        cr_expect_eq(status[r], RC_OK, "survivor %d exited with %d", r, status[r]);
        cr_expect_lt(elapsed[r], ks.killed_at_s + KILL_TIMEOUT_S + 3.0,
                     "survivor %d ended %.1f s after the kill", r, elapsed[r] - ks.killed_at_s);
    }
    munmap((void *)ks.started, 4096);
}
