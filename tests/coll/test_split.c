/*
 * Sub-communicators (chorus_comm_split, chorus_comm_dup) at 6 ranks: the
 * collective matrix (every collective, dtype and op, counts 0, 1, 7 and
 * 1023, in place and out of place, checked exactly) on communicators of 1,
 * 2 and 3 ranks in reversed order, on the ranks a split leaves out and then
 * their parent, on a dup and on a split of a split, over shared memory (the
 * default: every rank is on this node) and over TCP (CHORUS_SHM=0). Then
 * calls on a parent and its children interleaved, destroying a parent
 * before or after its children, bad arguments, and a fault shared by every
 * communicator of a context.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll_matrix.h"
#include "harness.h"
#include "lib/proc_res.h"
#include "core/comm.h"

#define SPLIT_RANKS 6

/* Exit codes of the rank functions; the harness keeps 100 to 102 for itself. */
enum { RC_OK = 0, RC_SPLIT = 20, RC_SIZE = 21, RC_ORDER = 22, RC_PATH = 23, RC_CALL = 24,
       RC_RESULT = 25, RC_DESTROY = 26, RC_NOT_NULL = 27, RC_MATRIX = 28, RC_STATUS = 29,
       RC_THREADS = 30, RC_CREATE = 31 };

static const char *const rc_help =
    "20: split or dup failed, 21: wrong size, 22: wrong members or order, 23: not on the "
    "expected path (shared memory or TCP), 24: a call failed, 25: wrong result, 26: destroy "
    "failed, 27: an undefined color did not give NULL, 28: the matrix found wrong results, "
    "29: wrong status, 30: threads left behind, 31: creation failed, -1: hung";

static const size_t small_counts[] = {0, 1, 7, 1023};
static const coll_matrix_t small_matrix = {small_counts, 4, 0};

static int shm_on(void)
{
    const char *v = getenv("CHORUS_SHM");

    return v == NULL || strcmp(v, "0") != 0;
}

/*
 * Every rank is on this node: with shared memory on, a communicator of two
 * or more ranks runs its node-local stages on a team of all its ranks; with
 * it off, on no team at all (TCP only).
 */
static int check_path(chorus_comm_t comm)
{
    int team = comm->env.node_team != NULL;

    if (shm_on() && comm->size > 1)
        return team && comm->node_team.desc.size == comm->size ? RC_OK : RC_PATH;
    return team ? RC_PATH : RC_OK;
}

/* comm holds the parent ranks want[0 .. n) in that order; parent_rank is this rank's. */
static int check_members(chorus_comm_t comm, int parent_rank, const int *want, int n)
{
    int32_t mine = parent_rank, got[SPLIT_RANKS];
    int rank = chorus_comm_rank(comm);

    if (chorus_comm_size(comm) != n || rank < 0 || rank >= n) {
        fprintf(stderr, "rank %d: communicator of %d ranks (rank %d), expected %d\n",
                parent_rank, chorus_comm_size(comm), rank, n);
        return RC_SIZE;
    }
    if (want[rank] != parent_rank || chorus_comm_local_size(comm) != n ||
        chorus_comm_local_rank(comm) != rank || chorus_comm_node_count(comm) != 1) {
        fprintf(stderr, "rank %d: rank %d (local %d of %d, %d nodes), expected rank of %d\n",
                parent_rank, rank, chorus_comm_local_rank(comm), chorus_comm_local_size(comm),
                chorus_comm_node_count(comm), want[rank]);
        return RC_ORDER;
    }
    if (chorus_allgather(&mine, got, 1, CHORUS_INT32, comm, NULL) != CHORUS_OK)
        return RC_CALL;
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "rank %d: member %d is parent rank %d, expected %d\n", parent_rank,
                    i, got[i], want[i]);
            return RC_ORDER;
        }
    }
    return check_path(comm);
}

/* The whole small matrix on comm, which must be on the expected path. */
static int run_matrix(chorus_comm_t comm)
{
    int rc = check_path(comm);

    if (rc == RC_OK && coll_matrix_rank(comm, chorus_comm_rank(comm), chorus_comm_size(comm),
                                        (void *)&small_matrix) != 0)
        rc = RC_MATRIX;
    return rc;
}

static int destroy_checked(chorus_comm_t comm, int rc)
{
    chorus_status_t status = chorus_comm_destroy(comm);

    if (status != CHORUS_OK)
        fprintf(stderr, "chorus_comm_destroy: %s\n", chorus_status_string(status));
    return rc == RC_OK && status != CHORUS_OK ? RC_DESTROY : rc;
}

static int split_checked(chorus_comm_t comm, int color, int key, chorus_comm_t *out)
{
    chorus_status_t status = chorus_comm_split(comm, color, key, out);

    if (status != CHORUS_OK)
        fprintf(stderr, "chorus_comm_split(color %d, key %d): %s\n", color, key,
                chorus_status_string(status));
    return status == CHORUS_OK ? RC_OK : RC_SPLIT;
}

/* ---- the matrix on split and dup communicators ---------------------------- */

/* Colors giving communicators of 1, 2 and 3 ranks; key = -rank reverses each. */
static const int color_of[SPLIT_RANKS] = {0, 1, 1, 2, 2, 2};
static const int color_members[3][3] = {{0}, {2, 1}, {5, 4, 3}};

static int scenario_colors(chorus_comm_t parent, int rank)
{
    chorus_comm_t child;
    int color = color_of[rank];
    int rc = split_checked(parent, color, -rank, &child);

    if (rc != RC_OK)
        return rc;
    rc = check_members(child, rank, color_members[color], color + 1);
    if (rc == RC_OK)
        rc = run_matrix(child);
    return destroy_checked(child, rc);
}

/* Ranks 1 and 4 pass CHORUS_UNDEFINED; the others form one communicator, in rank order. */
static int scenario_undefined(chorus_comm_t parent, int rank)
{
    static const int members[] = {0, 2, 3, 5};
    static int sentinel;
    chorus_comm_t child = (chorus_comm_t)&sentinel;
    int left_out = rank == 1 || rank == 4;
    int rc = split_checked(parent, left_out ? CHORUS_UNDEFINED : 7, rank, &child);

    if (rc != RC_OK)
        return rc;
    if (left_out && child != NULL) {
        fprintf(stderr, "rank %d: CHORUS_UNDEFINED gave %p, not NULL\n", rank, (void *)child);
        return RC_NOT_NULL;
    }
    if (!left_out) {
        rc = check_members(child, rank, members, 4);
        if (rc == RC_OK)
            rc = run_matrix(child);
        rc = destroy_checked(child, rc);
    }
    /* Every rank, left out or not, still uses the parent. */
    return rc == RC_OK ? run_matrix(parent) : rc;
}

static int scenario_dup(chorus_comm_t parent, int rank)
{
    static const int members[] = {0, 1, 2, 3, 4, 5};
    chorus_comm_t dup;
    chorus_status_t status = chorus_comm_dup(parent, &dup);
    int rc;

    if (status != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_comm_dup: %s\n", rank, chorus_status_string(status));
        return RC_SPLIT;
    }
    rc = check_members(dup, rank, members, SPLIT_RANKS);
    if (rc == RC_OK && dup->space == parent->space)
        rc = RC_ORDER;      /* a dup has its own sequence of calls, so its own space */
    if (rc == RC_OK)
        rc = run_matrix(dup);
    return destroy_checked(dup, rc);
}

/*
 * Ranks 0..4 split in reversed order (rank 5 is left out), then that split
 * splits by even and odd position: parent ranks 4, 2, 0 and 3, 1.
 */
static int scenario_split_of_split(chorus_comm_t parent, int rank)
{
    static const int even[] = {4, 2, 0}, odd[] = {3, 1};
    chorus_comm_t child, grand;
    int rc = split_checked(parent, rank < 5 ? 0 : CHORUS_UNDEFINED, -rank, &child);
    int crank;

    if (rc != RC_OK)
        return rc;
    if (rank == 5)
        return child == NULL ? RC_OK : RC_NOT_NULL;
    crank = chorus_comm_rank(child);
    rc = split_checked(child, crank % 2, crank, &grand);
    if (rc == RC_OK) {
        rc = check_members(grand, rank, crank % 2 ? odd : even, crank % 2 ? 2 : 3);
        if (rc == RC_OK)
            rc = run_matrix(grand);
        rc = destroy_checked(grand, rc);
    }
    return destroy_checked(child, rc);
}

typedef int (*scenario_fn)(chorus_comm_t parent, int rank);

static const struct {
    const char *name;
    scenario_fn fn;
} scenarios[] = {
    {"colors 0,1,1,2,2,2 with key -rank", scenario_colors},
    {"undefined color on ranks 1 and 4, then the parent", scenario_undefined},
    {"dup", scenario_dup},
    {"split of a split", scenario_split_of_split},
};
#define NSCENARIOS ((int)(sizeof(scenarios) / sizeof(scenarios[0])))

static int scenario_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    (void)size;
    return scenarios[*(int *)arg].fn(comm, rank);
}

static void run_ranks(int nranks, harness_rank_fn fn, void *arg, double timeout_s,
                      const char *what)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = timeout_s, .deadline_s = 300,
                           .kill_rank = -1};
    int status[SPLIT_RANKS];

    cr_log_info("%s over %s, %d ranks", what, shm_on() ? "shared memory" : "TCP", nranks);
    harness_run(&opts, fn, arg, status, NULL);
    for (int r = 0; r < nranks; r++)
        cr_expect_eq(status[r], 0, "%s over %s: rank %d exited with %d (%s)", what,
                     shm_on() ? "shared memory" : "TCP", r, status[r], rc_help);
}

/* Index 2 * scenario + tcp: parameters cross into the test process by value. */
ParameterizedTestParameters(split, matrix)
{
    static int index[2 * NSCENARIOS];

    for (int i = 0; i < 2 * NSCENARIOS; i++)
        index[i] = i;
    return cr_make_param_array(int, index, 2 * NSCENARIOS);
}

ParameterizedTest(int *index, split, matrix, .timeout = 600)
{
    int scenario = *index / 2;

    if (*index % 2)
        setenv("CHORUS_SHM", "0", 1);
    run_ranks(SPLIT_RANKS, scenario_rank, &scenario, 60, scenarios[scenario].name);
}

/* ---- a parent and its children, called in the same order on every rank ---- */

#define INTERLEAVE_ROUNDS 40
#define INTERLEAVE_MAX 4099

/* Parent rank p's element i in round it; sums over six ranks stay small integers. */
static int32_t il_value(int p, int it, size_t i)
{
    return (p + 1) * (int32_t)((i + (size_t)it) % 13 + 1);
}

static void il_fill(int32_t *buf, int p, int it, size_t count)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = il_value(p, it, i);
}

/* buf[i] == scale * il_value(0, it, i) for i < count? */
static int il_check(const int32_t *buf, int32_t scale, int it, size_t count, const char *what,
                    int rank)
{
    for (size_t i = 0; i < count; i++) {
        if (buf[i] != scale * il_value(0, it, i)) {
            fprintf(stderr, "rank %d round %d: %s [%zu] = %d, expected %d\n", rank, it, what,
                    i, buf[i], scale * il_value(0, it, i));
            return RC_RESULT;
        }
    }
    return RC_OK;
}

typedef struct {
    chorus_comm_t parent, child, dup, sub;     /* sub is NULL on ranks 1 and 4 */
    int rank;
    int32_t *a, *b, *c, *d;
} il_state_t;

/* The sum of (p + 1) over the parent ranks of this rank's child. */
static int32_t il_child_scale(int rank)
{
    int32_t s = 0;

    for (int i = 0; i <= color_of[rank]; i++)
        s += color_members[color_of[rank]][i] + 1;
    return s;
}

/*
 * One round: a non-blocking allreduce on the child and broadcast on the
 * dup are posted, then blocking calls on the parent and on the sub-split
 * run while they are in flight, then the two are waited for, then a
 * blocking reduce on the child.
 */
static int il_round(il_state_t *s, int it)
{
    static const int sub_members[] = {0, 2, 3, 5};
    size_t count = (size_t[]){1, 7, 1023, INTERLEAVE_MAX}[it % 4];
    int root = it % SPLIT_RANKS, rank = s->rank, rc = RC_OK;
    chorus_request_t creq, dreq;

    il_fill(s->a, rank, it, count);
    il_fill(s->b, root, it, count);
    if (chorus_iallreduce(s->a, s->a, count, CHORUS_INT32, CHORUS_SUM, s->child, NULL,
                          &creq) != CHORUS_OK)
        return RC_CALL;
    if (chorus_ibroadcast(s->b, s->b, count, CHORUS_INT32, root, s->dup, NULL, &dreq) !=
        CHORUS_OK) {
        chorus_request_free(creq);
        return RC_CALL;
    }
    il_fill(s->c, rank, it, count);
    if (chorus_allreduce(s->c, s->c, count, CHORUS_INT32, CHORUS_MAX, s->parent, NULL) !=
        CHORUS_OK)
        rc = RC_CALL;
    if (rc == RC_OK)
        rc = il_check(s->c, SPLIT_RANKS, it, count, "parent allreduce max", rank);
    if (rc == RC_OK && s->sub != NULL) {
        il_fill(s->c, rank, it, count);
        if (chorus_allgather(s->c, s->d, count, CHORUS_INT32, s->sub, NULL) != CHORUS_OK)
            rc = RC_CALL;
        for (int j = 0; j < 4 && rc == RC_OK; j++)
            rc = il_check(s->d + (size_t)j * count, sub_members[j] + 1, it, count,
                          "sub-split allgather", rank);
    }
    if (chorus_request_free(dreq) != CHORUS_OK && rc == RC_OK)
        rc = RC_CALL;
    if (chorus_request_free(creq) != CHORUS_OK && rc == RC_OK)
        rc = RC_CALL;
    if (rc == RC_OK)
        rc = il_check(s->b, root + 1, it, count, "dup broadcast", rank);
    if (rc == RC_OK)
        rc = il_check(s->a, il_child_scale(rank), it, count, "child iallreduce", rank);
    if (rc == RC_OK) {
        int croot = it % chorus_comm_size(s->child);

        il_fill(s->c, rank, it, count);
        if (chorus_reduce(s->c, s->a, count, CHORUS_INT32, CHORUS_SUM, croot, s->child,
                          NULL) != CHORUS_OK)
            rc = RC_CALL;
        else if (chorus_comm_rank(s->child) == croot)
            rc = il_check(s->a, il_child_scale(rank), it, count, "child reduce", rank);
    }
    return rc;
}

static int interleave_rank(chorus_comm_t parent, int rank, int size, void *arg)
{
    il_state_t s = {.parent = parent, .rank = rank};
    int rc;

    (void)size;
    (void)arg;
    rc = split_checked(parent, color_of[rank], -rank, &s.child);
    if (rc != RC_OK)
        return rc;
    rc = chorus_comm_dup(parent, &s.dup) == CHORUS_OK ? RC_OK : RC_SPLIT;
    if (rc == RC_OK)
        rc = split_checked(parent, rank == 1 || rank == 4 ? CHORUS_UNDEFINED : 0, rank, &s.sub);
    s.a = malloc(4 * INTERLEAVE_MAX * sizeof(int32_t));
    s.b = malloc(4 * INTERLEAVE_MAX * sizeof(int32_t));
    s.c = malloc(4 * INTERLEAVE_MAX * sizeof(int32_t));
    s.d = malloc(4 * INTERLEAVE_MAX * sizeof(int32_t));
    if (!s.a || !s.b || !s.c || !s.d)
        rc = RC_CALL;
    for (int it = 0; it < INTERLEAVE_ROUNDS && rc == RC_OK; it++)
        rc = il_round(&s, it);
    free(s.a);
    free(s.b);
    free(s.c);
    free(s.d);
    if (s.sub != NULL)
        rc = destroy_checked(s.sub, rc);
    if (s.dup != NULL)
        rc = destroy_checked(s.dup, rc);
    return destroy_checked(s.child, rc);
}

ParameterizedTestParameters(split, interleaved_with_parent)
{
    static int tcp[] = {0, 1};
    return cr_make_param_array(int, tcp, 2);
}

ParameterizedTest(int *tcp, split, interleaved_with_parent, .timeout = 300)
{
    if (*tcp)
        setenv("CHORUS_SHM", "0", 1);
    run_ranks(SPLIT_RANKS, interleave_rank, NULL, 60,
              "parent, child, dup and sub-split interleaved");
}

/* ---- destroying a parent before or after its children -------------------- */

/*
 * Each rank opens its own world communicator (its own context, beside the
 * harness's) so that the world can go first. Destroying the last
 * communicator of a context ends its progress thread: the thread count
 * comes back to what it was before the world was created.
 */
typedef struct {
    char addr[64];
    char secret[33];
    int parent_first;
} order_arg_t;

/* An allreduce of (parent rank + 1) over comm must give want. */
static int sum_check(chorus_comm_t comm, int32_t mine, int32_t want, const char *what)
{
    int32_t x[3] = {mine, mine, mine};

    if (chorus_allreduce(x, x, 3, CHORUS_INT32, CHORUS_SUM, comm, NULL) != CHORUS_OK) {
        fprintf(stderr, "%s: allreduce failed\n", what);
        return RC_CALL;
    }
    if (x[0] != want || x[2] != want) {
        fprintf(stderr, "%s: allreduce gave %d, expected %d\n", what, x[0], want);
        return RC_RESULT;
    }
    return RC_OK;
}

/* Wait up to 5 s for this process to be back to `want` threads. */
static int threads_back_to(int want, int rank)
{
    int now = proc_thread_count();

    for (int i = 0; i < 500 && now != want; i++) {
        usleep(10000);
        now = proc_thread_count();
    }
    if (now != want)
        fprintf(stderr, "rank %d: %d threads after destroying everything, %d before\n", rank,
                now, want);
    return now == want ? RC_OK : RC_THREADS;
}

static int order_rank(chorus_comm_t unused, int rank, int size, void *arg)
{
    const order_arg_t *oa = arg;
    int threads = proc_thread_count(), rc;
    /* Colors by parity, reversed: {4, 2, 0} and {5, 3, 1}; sums of p + 1: 9 and 12. */
    int32_t half = rank % 2 ? 12 : 9, all = size * (size + 1) / 2;
    chorus_comm_t world, child, grand;

    (void)unused;
    if (chorus_comm_create(rank, size, oa->addr, oa->secret, 30.0, &world) != CHORUS_OK)
        return RC_CREATE;
    rc = split_checked(world, rank % 2, -rank, &child);
    if (rc == RC_OK && chorus_comm_dup(child, &grand) != CHORUS_OK)
        rc = RC_SPLIT;
    if (rc != RC_OK)
        return rc;
    if (oa->parent_first) {
        rc = destroy_checked(world, sum_check(world, rank + 1, all, "world"));
        if (rc == RC_OK)
            rc = sum_check(child, rank + 1, half, "child after the world's destroy");
        rc = destroy_checked(child, rc);
        if (rc == RC_OK)
            rc = sum_check(grand, rank + 1, half, "dup of the child after both destroys");
        rc = destroy_checked(grand, rc);
    } else {
        rc = destroy_checked(grand, sum_check(grand, rank + 1, half, "dup of the child"));
        rc = destroy_checked(child, rc);
        if (rc == RC_OK)
            rc = sum_check(world, rank + 1, all, "world after its children's destroy");
        rc = destroy_checked(world, rc);
    }
    return rc == RC_OK ? threads_back_to(threads, rank) : rc;
}

static void run_order(int parent_first)
{
    order_arg_t oa = {.parent_first = parent_first};
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(oa.addr, sizeof(oa.addr), "127.0.0.1:%d", harness_free_port());
    snprintf(oa.secret, sizeof(oa.secret), "%08x%08lx", (unsigned)getpid(),
             (unsigned long)ts.tv_nsec);
    run_ranks(SPLIT_RANKS, order_rank, &oa, 30,
              parent_first ? "parent destroyed before its children"
                           : "children destroyed before their parent");
}

Test(split, destroy_children_first, .timeout = 120)
{
    run_order(0);
}

Test(split, destroy_parent_first, .timeout = 120)
{
    run_order(1);
}

/* ---- bad arguments ------------------------------------------------------- */

static int expect_invalid(chorus_status_t status, const char *what, int rank)
{
    return harness_expect_status(status, CHORUS_ERR_INVALID_ARG, what, rank) ? RC_STATUS
                                                                             : RC_OK;
}

/* Every rank makes the same bad calls, so no rank waits in an exchange. */
static int bad_args_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static int sentinel;
    chorus_comm_t untouched = (chorus_comm_t)&sentinel, out = untouched;
    int rc = RC_OK;

    (void)arg;
    rc |= expect_invalid(chorus_comm_split(NULL, 0, 0, &out), "split of NULL", rank);
    rc |= expect_invalid(chorus_comm_split(comm, 0, 0, NULL), "split into NULL", rank);
    rc |= expect_invalid(chorus_comm_split(comm, -2, 0, &out), "split with color -2", rank);
    rc |= expect_invalid(chorus_comm_split(comm, INT_MIN, rank, &out),
                         "split with color INT_MIN", rank);
    rc |= expect_invalid(chorus_comm_dup(NULL, &out), "dup of NULL", rank);
    rc |= expect_invalid(chorus_comm_dup(comm, NULL), "dup into NULL", rank);
    if (out != untouched) {
        fprintf(stderr, "rank %d: a failed split wrote its output\n", rank);
        rc = RC_STATUS;
    }
    /* The communicator is as good as before, and so is its next split. */
    if (rc == RC_OK)
        rc = sum_check(comm, rank + 1, size * (size + 1) / 2, "after the bad calls");
    if (rc == RC_OK && (rc = split_checked(comm, 0, INT_MAX - rank, &out)) == RC_OK) {
        rc = sum_check(out, rank + 1, size * (size + 1) / 2, "split after the bad calls");
        if (rc == RC_OK && chorus_comm_rank(out) != size - 1 - rank)
            rc = RC_ORDER;
        rc = destroy_checked(out, rc);
    }
    return rc;
}

Test(split, bad_arguments, .timeout = 60)
{
    run_ranks(3, bad_args_rank, NULL, 20, "bad arguments");
}

/*
 * One rank refuses a split (a NULL newcomm_p, a bad color, a dup into NULL)
 * while the others call it correctly: every rank's call fails at once,
 * well before the 20 s timeout, no output is written, and the next split
 * works.
 */
static int refused_on_one_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static int sentinel;
    chorus_comm_t untouched = (chorus_comm_t)&sentinel, out = untouched;
    struct timespec t0, t1;
    double took;
    int rc = RC_OK;

    (void)arg;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc |= expect_invalid(chorus_comm_split(comm, 0, rank, rank == size - 1 ? NULL : &out),
                         "split into NULL on the last rank", rank);
    rc |= expect_invalid(chorus_comm_split(comm, rank == 0 ? -2 : 1, rank, &out),
                         "split with color -2 on rank 0", rank);
    rc |= expect_invalid(chorus_comm_dup(comm, rank == 1 ? NULL : &out),
                         "dup into NULL on rank 1", rank);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (took > 6.0) {
        fprintf(stderr, "rank %d: the refused splits took %.1f s\n", rank, took);
        rc = RC_STATUS;
    }
    if (out != untouched) {
        fprintf(stderr, "rank %d: a failed split wrote its output\n", rank);
        rc = RC_STATUS;
    }
    if (rc == RC_OK && (rc = split_checked(comm, rank % 2, rank, &out)) == RC_OK) {
        int n = (size + 1 - rank % 2) / 2;

        rc = sum_check(out, 1, n, "split after the refused ones");
        rc = destroy_checked(out, rc);
    }
    return rc;
}

Test(split, refused_on_one_rank_fails_every_rank_at_once, .timeout = 120)
{
    for (int nranks = 2; nranks <= 4; nranks++)
        run_ranks(nranks, refused_on_one_rank, NULL, 20, "a split refused on one rank");
}

/* ---- one fault fails every communicator of the context ------------------- */

#define FAULT_TIMEOUT_S 5.0

/*
 * Rank 0 aborts a child: its parent, the child and a dup fail with
 * CHORUS_ERR_ABORTED, and so do new splits. The other ranks see rank 0 go
 * in a call on their dup, and their parent and child report the same fault.
 */
static int shared_fault_rank(chorus_comm_t parent, int rank, int size, void *arg)
{
    chorus_comm_t child, dup, more = NULL;
    chorus_status_t status, want;
    int32_t x = 1;
    int rc;

    (void)size;
    (void)arg;
    rc = split_checked(parent, 0, rank, &child);
    if (rc != RC_OK || chorus_comm_dup(parent, &dup) != CHORUS_OK)
        return RC_SPLIT;
    if (rank == 0)
        chorus_comm_abort(child);
    status = chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, dup, NULL);
    want = rank == 0 ? CHORUS_ERR_ABORTED : status;
    fprintf(stderr, "rank %d: allreduce on the dup: %s\n", rank, chorus_status_string(status));
    if (status == CHORUS_OK || status != want || chorus_comm_get_error(parent) != want ||
        chorus_comm_get_error(child) != want || chorus_comm_get_error(dup) != want)
        rc = RC_STATUS;
    if (rc == RC_OK && (chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, parent, NULL) !=
                            want ||
                        chorus_comm_split(parent, 0, 0, &more) != want ||
                        chorus_comm_dup(child, &more) != want || more != NULL))
        rc = RC_STATUS;
    rc = destroy_checked(dup, rc);
    return destroy_checked(child, rc);
}

Test(split, one_fault_fails_every_communicator, .timeout = 60)
{
    run_ranks(3, shared_fault_rank, NULL, FAULT_TIMEOUT_S, "abort on a child");
}
