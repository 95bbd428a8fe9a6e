/*
 * Sub-communicators under load, over shared memory (the default, every rank
 * on this node) and over TCP (CHORUS_SHM=0): four dups of one communicator
 * driven at once by four threads of every rank, and 64 communicators split
 * from one, which must add no thread and no TCP socket to the process and
 * leave no descriptor behind once destroyed.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lib/proc_res.h"

/* Exit codes of the rank functions; the harness keeps 100 to 102 for itself. */
enum { RC_OK = 0, RC_SPLIT = 20, RC_CALL = 24, RC_RESULT = 25, RC_DESTROY = 26,
       RC_NO_MEMORY = 27, RC_THREADS = 30, RC_SOCKETS = 31, RC_FDS = 32, RC_MAPS = 33 };

static const char *const rc_help =
    "20: split or dup failed, 24: a call failed, 25: wrong result, 26: destroy failed, "
    "27: out of memory, 30: thread count changed, 31: TCP socket count changed, "
    "32: descriptors left behind, -1: hung";

static const char *path_name(int tcp)
{
    return tcp ? "TCP" : "shared memory";
}

static void run_ranks(int nranks, harness_rank_fn fn, void *arg, int tcp, const char *what)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 30, .deadline_s = 240,
                           .kill_rank = -1};
    int status[8];

    if (tcp)
        setenv("CHORUS_SHM", "0", 1);
    cr_log_info("%s over %s, %d ranks", what, path_name(tcp), nranks);
    harness_run(&opts, fn, arg, status, NULL);
    for (int r = 0; r < nranks; r++)
        cr_expect_eq(status[r], 0, "%s over %s: rank %d exited with %d (%s)", what,
                     path_name(tcp), r, status[r], rc_help);
}

/* ---- four dups, four threads per rank ------------------------------------ */

#define THREADS 4
#define THREAD_RANKS 4
#define THREAD_CALLS 300

static const size_t thread_counts[] = {1, 7, 64, 1000, 4099, 65536, 262147};
#define NCOUNTS (sizeof(thread_counts) / sizeof(thread_counts[0]))
#define MAX_COUNT 262147

typedef struct {
    chorus_comm_t comm;
    int rank, size, which;
    int rc;
    float *a, *b;
} worker_t;

/* Sums over the ranks stay integers below 2^24: exact in float32. */
static float worker_value(int rank, int which, int call, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)call + 5 * (size_t)which) % 89 + 1));
}

static void worker_fill(const worker_t *w, float *buf, int call, size_t count)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = worker_value(w->rank, w->which, call, i);
}

static int worker_check(const worker_t *w, const float *buf, int call, size_t count)
{
    float total = (float)(w->size * (w->size + 1) / 2);

    for (size_t i = 0; i < count; i++) {
        float want = worker_value(0, w->which, call, i) * total;

        if (buf[i] != want) {
            fprintf(stderr, "rank %d thread %d call %d (%zu floats): [%zu] = %g, not %g\n",
                    w->rank, w->which, call, count, i, buf[i], want);
            return RC_RESULT;
        }
    }
    return RC_OK;
}

/*
 * Call `call` of a worker, by its number: a blocking allreduce, a
 * non-blocking one waited for at once, or two non-blocking ones in flight
 * on the same communicator (the second in place).
 */
static int worker_call(worker_t *w, int call)
{
    size_t count = thread_counts[(size_t)(call + 2 * w->which) % NCOUNTS];
    chorus_request_t r1, r2;
    chorus_status_t s1, s2 = CHORUS_OK;
    int rc;

    worker_fill(w, w->a, call, count);
    switch (call % 3) {
    case 0:
        s1 = chorus_allreduce(w->a, w->a, count, CHORUS_FLOAT32, CHORUS_SUM, w->comm, NULL);
        break;
    case 1:
        s1 = chorus_iallreduce(w->a, w->a, count, CHORUS_FLOAT32, CHORUS_SUM, w->comm, NULL,
                               &r1);
        if (s1 == CHORUS_OK)
            s1 = chorus_request_free(r1);
        break;
    default:
        worker_fill(w, w->b, call + 1, count);
        s1 = chorus_iallreduce(w->a, w->a, count, CHORUS_FLOAT32, CHORUS_SUM, w->comm, NULL,
                               &r1);
        if (s1 != CHORUS_OK)
            break;
        s2 = chorus_iallreduce(w->b, w->b, count, CHORUS_FLOAT32, CHORUS_SUM, w->comm, NULL,
                               &r2);
        s1 = chorus_request_free(r1);
        if (s2 == CHORUS_OK)
            s2 = chorus_request_free(r2);
        break;
    }
    if (s1 != CHORUS_OK || s2 != CHORUS_OK) {
        fprintf(stderr, "rank %d thread %d call %d (%zu floats): %s\n", w->rank, w->which,
                call, count, chorus_status_string(s1 != CHORUS_OK ? s1 : s2));
        return RC_CALL;
    }
    rc = worker_check(w, w->a, call, count);
    if (rc == RC_OK && call % 3 == 2)
        rc = worker_check(w, w->b, call + 1, count);
    return rc;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;

    for (int call = 0; call < THREAD_CALLS && w->rc == RC_OK; call++)
        w->rc = worker_call(w, call);
    return NULL;
}

static int threads_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    worker_t w[THREADS];
    pthread_t th[THREADS];
    int rc = RC_OK, made = 0;

    (void)arg;
    memset(w, 0, sizeof(w));
    /* The dups are made by this thread, in the same order on every rank. */
    for (; made < THREADS && rc == RC_OK; made++) {
        w[made] = (worker_t){.rank = rank, .size = size, .which = made};
        w[made].a = malloc(MAX_COUNT * sizeof(float));
        w[made].b = malloc(MAX_COUNT * sizeof(float));
        if (w[made].a == NULL || w[made].b == NULL)
            rc = RC_NO_MEMORY;
        else if (chorus_comm_dup(comm, &w[made].comm) != CHORUS_OK)
            rc = RC_SPLIT;
    }
    for (int i = 0; i < THREADS && rc == RC_OK; i++)
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    for (int i = 0; i < THREADS && rc == RC_OK; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < made; i++) {
        if (rc == RC_OK)
            rc = w[i].rc;
        if (w[i].comm != NULL && chorus_comm_destroy(w[i].comm) != CHORUS_OK && rc == RC_OK)
            rc = RC_DESTROY;
        free(w[i].a);
        free(w[i].b);
    }
    return rc;
}

ParameterizedTestParameters(split_load, four_threads_four_dups)
{
    static int tcp[] = {0, 1};
    return cr_make_param_array(int, tcp, 2);
}

ParameterizedTest(int *tcp, split_load, four_threads_four_dups, .timeout = 300)
{
    run_ranks(THREAD_RANKS, threads_rank, NULL, *tcp,
              "4 threads, each with its own dup, many allreduces");
}

/* ---- 64 splits: no thread, no connection of their own -------------------- */

#define NSPLITS 64
/*
 * At 4 ranks the parent's own creation exchanges (a ring allgather and a
 * recursive-doubling allreduce) already reach every pair of ranks, so even
 * a transport that connects on first use has every connection the splits
 * could need before the count is taken.
 */
#define SPLIT_RANKS 4

#define RES_MAX_SOCKS 64

/* What a node team maps: the members' shared-memory regions (memfds named so). */
#define RES_SHM_NAME "memfd:chorus-shm"

typedef struct {
    int threads, tcp, fds, maps;
    proc_tcp_sock_t socks[RES_MAX_SOCKS];
} res_t;

static void res_take(res_t *r)
{
    r->threads = proc_thread_count();
    r->tcp = proc_tcp_sockets(r->socks, RES_MAX_SOCKS);
    r->fds = proc_dir_entries("/proc/self/fd");
    r->maps = proc_mappings_named(RES_SHM_NAME);
}

static void res_print_socks(const res_t *r, int rank, const char *when)
{
    for (int i = 0; i < r->tcp && i < RES_MAX_SOCKS; i++)
        fprintf(stderr, "rank %d %s: TCP port %u to %u, state %d\n", rank, when,
                r->socks[i].local_port, r->socks[i].remote_port, r->socks[i].state);
}

/*
 * Compare with base; once the splits are destroyed (gone set), also the
 * descriptors and the shared-memory mappings their teams held.
 */
static int res_compare(const res_t *base, int rank, const char *when, int gone)
{
    res_t now;

    res_take(&now);
    if (now.threads != base->threads || now.tcp != base->tcp ||
        (gone && (now.fds != base->fds || now.maps != base->maps))) {
        fprintf(stderr, "rank %d %s: %d threads, %d TCP sockets, %d descriptors, %d "
                "shared-memory mappings; before the splits %d, %d, %d and %d\n", rank, when,
                now.threads, now.tcp, now.fds, now.maps, base->threads, base->tcp, base->fds,
                base->maps);
        res_print_socks(base, rank, "before");
        res_print_socks(&now, rank, "now");
        return now.threads != base->threads ? RC_THREADS : now.tcp != base->tcp ? RC_SOCKETS
               : now.fds != base->fds ? RC_FDS : RC_MAPS;
    }
    return RC_OK;
}

/* Split i: colors rank % k for k = 1, 2, 3 in turn (k = 1: every rank); odd i reverse the keys. */
static int split_color(int i, int rank)
{
    return rank % (i % 3 + 1);
}

/* The sum of (parent rank + 1) over the members of this rank's split i. */
static int32_t split_sum(int i, int rank, int size)
{
    int32_t s = 0;

    for (int p = 0; p < size; p++)
        s += split_color(i, p) == split_color(i, rank) ? p + 1 : 0;
    return s;
}

static int use_all(chorus_comm_t *comms, int n, int rank, int size)
{
    for (int i = 0; i < n; i++) {
        int32_t x = rank + 1;

        if (chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, comms[i], NULL) != CHORUS_OK)
            return RC_CALL;
        if (x != split_sum(i, rank, size)) {
            fprintf(stderr, "rank %d: split %d summed to %d, not %d\n", rank, i, x,
                    split_sum(i, rank, size));
            return RC_RESULT;
        }
    }
    return RC_OK;
}

static int splits_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    chorus_comm_t comms[NSPLITS];
    int32_t x = 1;
    res_t base;
    int rc = RC_OK, made = 0;

    (void)arg;
    /* Every collective once on the parent first, as a job would before it splits. */
    if (chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL) != CHORUS_OK ||
        chorus_barrier(comm, NULL) != CHORUS_OK)
        return RC_CALL;
    res_take(&base);
    for (; made < NSPLITS && rc == RC_OK; made++) {
        chorus_status_t status = chorus_comm_split(comm, split_color(made, rank),
                                                   made % 2 ? -rank : rank, &comms[made]);
        if (status != CHORUS_OK) {
            fprintf(stderr, "rank %d: split %d: %s\n", rank, made,
                    chorus_status_string(status));
            rc = RC_SPLIT;
            break;
        }
    }
    if (rc == RC_OK)
        rc = res_compare(&base, rank, "with 64 splits", 0);
    if (rc == RC_OK)
        rc = use_all(comms, made, rank, size);
    if (rc == RC_OK)
        rc = res_compare(&base, rank, "after a call on each of 64 splits", 0);
    for (int i = 0; i < made; i++) {
        if (chorus_comm_destroy(comms[i]) != CHORUS_OK && rc == RC_OK)
            rc = RC_DESTROY;
    }
    if (rc == RC_OK)
        rc = res_compare(&base, rank, "after destroying 64 splits", 1);
    /*
     * No rank may leave before every rank has counted: a peer that destroys
     * the parent closes its connections, and this rank's then close too.
     */
    if (chorus_barrier(comm, NULL) != CHORUS_OK && rc == RC_OK)
        rc = RC_CALL;
    return rc;
}

ParameterizedTestParameters(split_load, sixty_four_splits_add_no_thread_or_socket)
{
    static int tcp[] = {0, 1};
    return cr_make_param_array(int, tcp, 2);
}

ParameterizedTest(int *tcp, split_load, sixty_four_splits_add_no_thread_or_socket,
                  .timeout = 300)
{
    run_ranks(SPLIT_RANKS, splits_rank, NULL, *tcp, "64 splits of one communicator");
}
