/*
 * A rank SIGKILLed in the middle of a multi-node job's hierarchical allreduce
 * (run under "testbed.sh --harness"): NRANKS ranks placed on the listed
 * namespaces loop over allreduces of COUNT int32 with the hierarchical
 * algorithm forced, every result checked exactly. Once every rank is past its
 * warm-up, the parent kills rank VICTIM PERCENT % of the way into one of its
 * calls (by the length of its previous call), so that runs with different
 * percentages catch the node-local stages (on the node's shared-memory team)
 * and the network stage at different points. Every survivor must get
 * CHORUS_ERR_PEER_FAILED, CHORUS_ERR_TIMEOUT or CHORUS_ERR_ABORTED, and exit,
 * within TIMEOUT_S (the communicators' timeout, as CHORUS_TIMEOUT would set
 * it) plus MARGIN_S of the kill; no call may succeed with wrong data.
 *
 * Before the loop each rank checks that its node-local stages really run on
 * the team: a warm-up call may move at most NETNS_KILL_LO_MAX bytes over its
 * namespace's loopback, where the same stages over TCP move half the vector.
 *
 * usage: netns_kill NRANKS VICTIM PERCENT TIMEOUT_S MARGIN_S [COUNT]
 * Prints one line per rank; exits 0 when all of the above held, 1 when not,
 * 2 for bad arguments, 77 without CHORUS_TEST_NETNS.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll/harness.h"

#define NETNS_KILL_MAX_RANKS 16
#define NETNS_KILL_WARM_CALLS 2         /* calls every rank finishes before the kill */
#define NETNS_KILL_LO_MAX ((uint64_t)1 << 20)
#define NETNS_KILL_RUN_S 20.0           /* a rank that never sees an error stops here */

/* A survivor's exit codes (the harness adds 100 to 102 and 128 + signal). */
enum { RC_OK = 0, RC_NO_ERROR = 10, RC_WRONG_STATUS = 11, RC_WRONG_DATA = 12,
       RC_LOCAL_TCP = 13, RC_SETUP = 14 };

/* What ranks and parent share (a MAP_SHARED mapping made before the fork). */
typedef struct {
    _Atomic int calls[NETNS_KILL_MAX_RANKS];    /* calls finished, each exact */
    _Atomic int in_call[NETNS_KILL_MAX_RANKS];
    _Atomic double call_start[NETNS_KILL_MAX_RANKS];
    _Atomic double last_call_s[NETNS_KILL_MAX_RANKS];   /* how long the previous call took */
    _Atomic double failed_at[NETNS_KILL_MAX_RANKS];  /* when the failing call returned */
    _Atomic double killed_at;
    int victim;
    double fraction;        /* of a call, at which the victim is killed */
    size_t count;
    int killed_in_call;     /* the victim's call the kill landed in */
} shared_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes received on this namespace's loopback so far (0 when it cannot be read). */
static uint64_t lo_bytes(void)
{
    char line[512];
    unsigned long long rx = 0;
    FILE *f = fopen("/proc/thread-self/net/dev", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, " lo: %llu", &rx) == 1)
            break;
    }
    if (f != NULL)
        fclose(f);
    return rx;
}

/* Rank r's element i of call k: small enough that every sum of 16 ranks is exact. */
static int32_t value(int r, size_t i, int k)
{
    return (int32_t)((r + 1) * (int)((i + (size_t)k) % 1021));
}

static void fill(int32_t *send, size_t count, int rank, int k)
{
    for (size_t i = 0; i < count; i++)
        send[i] = value(rank, i, k);
}

/* Whether every element of call k's sum is exact (a call's data differs from the last's). */
static int check(const int32_t *recv, size_t count, int size, int k, int rank)
{
    for (size_t i = 0; i < count; i++) {
        int32_t want = value(0, i, k) * (size * (size + 1) / 2);    /* the sum over r of r + 1 */

        if (recv[i] != want) {
            fprintf(stderr, "netns_kill: rank %d: call %d returned success, element %zu is "
                    "%d, expected %d\n", rank, k, i, recv[i], want);
            return 1;
        }
    }
    return 0;
}

/* The warm-up: exact, and its node-local stages off TCP. */
static int warm_up(chorus_comm_t comm, int32_t *send, int32_t *recv, int rank, int size,
                   const shared_t *sh)
{
    uint64_t before;

    for (int k = 0; k < NETNS_KILL_WARM_CALLS; k++) {
        fill(send, sh->count, rank, k);
        before = lo_bytes();
        if (chorus_allreduce(send, recv, sh->count, CHORUS_INT32, CHORUS_SUM, comm, NULL) !=
            CHORUS_OK)
            return RC_SETUP;
        if (check(recv, sh->count, size, k, rank) != 0)
            return RC_WRONG_DATA;
        if (chorus_comm_local_size(comm) > 1 && lo_bytes() - before > NETNS_KILL_LO_MAX) {
            fprintf(stderr, "netns_kill: rank %d: warm-up call %d moved %llu bytes over "
                    "loopback: its node-local stages ran over TCP\n", rank, k,
                    (unsigned long long)(lo_bytes() - before));
            return RC_LOCAL_TCP;
        }
    }
    return RC_OK;
}

/* Calls until one fails: the survivors' outcome. */
static int loop(chorus_comm_t comm, int32_t *send, int32_t *recv, int rank, int size,
                shared_t *sh)
{
    double stop = now_s() + NETNS_KILL_RUN_S;
    chorus_status_t status = CHORUS_OK;
    int k;

    for (k = NETNS_KILL_WARM_CALLS; now_s() < stop; k++) {
        fill(send, sh->count, rank, k);
        atomic_store(&sh->call_start[rank], now_s());
        atomic_store(&sh->in_call[rank], 1);
        status = chorus_allreduce(send, recv, sh->count, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        atomic_store(&sh->in_call[rank], 0);
        if (status != CHORUS_OK)
            break;
        atomic_store(&sh->last_call_s[rank], now_s() - atomic_load(&sh->call_start[rank]));
        if (check(recv, sh->count, size, k, rank) != 0)
            return RC_WRONG_DATA;
        atomic_fetch_add(&sh->calls[rank], 1);
    }
    atomic_store(&sh->failed_at[rank], now_s());
    /* The harness ends a rank with _exit: nothing buffered would be written. */
    printf("netns_kill: rank %d: call %d returned %s\n", rank, k, chorus_status_string(status));
    fflush(stdout);
    if (status == CHORUS_OK)
        return RC_NO_ERROR;
    if (status != CHORUS_ERR_PEER_FAILED && status != CHORUS_ERR_TIMEOUT &&
        status != CHORUS_ERR_ABORTED)
        return RC_WRONG_STATUS;
    return RC_OK;
}

static int kill_rank_fn(chorus_comm_t comm, int rank, int size, void *arg)
{
    shared_t *sh = arg;
    int32_t *send = malloc(sh->count * sizeof(*send)), *recv = malloc(sh->count * sizeof(*recv));
    int rc = send != NULL && recv != NULL ? RC_OK : RC_SETUP;

    if (rc == RC_OK)
        rc = warm_up(comm, send, recv, rank, size, sh);
    if (rc == RC_OK) {
        atomic_fetch_add(&sh->calls[rank], NETNS_KILL_WARM_CALLS);
        rc = loop(comm, send, recv, rank, size, sh);
    }
    free(send);
    free(recv);
    return rc;
}

/* The parent, every 2 ms: kill the victim PERCENT into a call once all are warm. */
static void kill_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    shared_t *sh = arg;
    int v = sh->victim;

    (void)elapsed_s;
    if (atomic_load(&sh->killed_at) > 0 || pids[v] <= 0)
        return;
    for (int r = 0; r < nranks; r++) {
        if (atomic_load(&sh->calls[r]) < NETNS_KILL_WARM_CALLS + 1)
            return;
    }
    if (!atomic_load(&sh->in_call[v]) || now_s() - atomic_load(&sh->call_start[v]) <
                                              sh->fraction * atomic_load(&sh->last_call_s[v]))
        return;
    sh->killed_in_call = atomic_load(&sh->calls[v]);
    kill(pids[v], SIGKILL);
    atomic_store(&sh->killed_at, now_s());
}

/*
 * The outcome as seen from the parent: 0 when the victim died in a call and
 * every survivor failed its call and exited in time.
 */
static int report(const shared_t *sh, int n, const int *status, const double *elapsed,
                  double start, double limit)
{
    int v = sh->victim, bad = 0;
    double killed = atomic_load(&sh->killed_at);

    if (killed <= 0 || status[v] != 128 + SIGKILL || !atomic_load(&sh->in_call[v])) {
        printf("netns_kill: rank %d was not killed in a call (status %d, in a call %d)\n", v,
               status[v], atomic_load(&sh->in_call[v]));
        return 1;
    }
    printf("netns_kill: rank %d killed %.0f ms into call %d (its previous call took %.0f ms)\n",
           v, (killed - atomic_load(&sh->call_start[v])) * 1e3, sh->killed_in_call,
           atomic_load(&sh->last_call_s[v]) * 1e3);
    for (int r = 0; r < n; r++) {
        double failed = atomic_load(&sh->failed_at[r]) - killed,
               ended = start + elapsed[r] - killed;

        if (r == v)
            continue;
        printf("netns_kill: survivor %d: exit status %d, its call failed %.2f s and it "
               "exited %.2f s after the kill\n", r, status[r], failed, ended);
        bad |= status[r] != RC_OK || failed > limit || ended > limit;
    }
    return bad;
}

/* NRANKS VICTIM PERCENT TIMEOUT_S MARGIN_S [COUNT]; 0, or -1 when one is out of range. */
static int parse(int argc, char **argv, harness_opts_t *opts, shared_t *sh, double *margin_p)
{
    if (argc < 6 || argc > 7)
        return -1;
    opts->nranks = atoi(argv[1]);
    sh->victim = atoi(argv[2]);
    sh->fraction = atof(argv[3]) / 100;
    opts->timeout_s = atof(argv[4]);
    *margin_p = atof(argv[5]);
    sh->count = argc > 6 ? strtoul(argv[6], NULL, 10) : (size_t)16 << 20;
    if (opts->nranks < 2 || opts->nranks > NETNS_KILL_MAX_RANKS || sh->victim < 0 ||
        sh->victim >= opts->nranks || sh->fraction < 0 || sh->fraction >= 1 ||
        opts->timeout_s <= 0 || *margin_p < 0 || sh->count == 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    harness_opts_t opts = {.kill_rank = -1, .tick = kill_tick};
    int status[NETNS_KILL_MAX_RANKS], rc = 1;
    double elapsed[NETNS_KILL_MAX_RANKS], start, margin;
    shared_t *sh;

    if (getenv("CHORUS_TEST_NETNS") == NULL || *getenv("CHORUS_TEST_NETNS") == '\0') {
        printf("netns_kill: CHORUS_TEST_NETNS is not set (run under testbed.sh --harness)\n");
        return 77;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("netns_kill: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    if (parse(argc, argv, &opts, sh, &margin) != 0) {
        fprintf(stderr, "usage: netns_kill NRANKS VICTIM PERCENT TIMEOUT_S MARGIN_S [COUNT]\n"
                "  (2 to %d ranks, a victim among them, a percentage from 0 to 99, a timeout "
                "above 0, a margin of 0 or more, a count above 0)\n", NETNS_KILL_MAX_RANKS);
        munmap(sh, sizeof(*sh));
        return 2;
    }
    /* The node-local stages are what this test is about: the hierarchical algorithm. */
    setenv("CHORUS_TUNE", "allreduce=hier", 1);
    opts.deadline_s = 30 + opts.timeout_s + margin;
    opts.tick_arg = sh;
    start = now_s();
    if (harness_run(&opts, kill_rank_fn, sh, status, elapsed) < 0)
        fprintf(stderr, "netns_kill: the harness could not start the ranks\n");
    else
        rc = report(sh, opts.nranks, status, elapsed, start, opts.timeout_s + margin);
    munmap(sh, sizeof(*sh));
    return rc;
}
