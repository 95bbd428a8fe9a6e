/*
 * Faults and concurrency on the node-local shared-memory path: a rank
 * killed mid-allreduce, two communicators driven by two threads of every
 * rank, and ranks that disagree on the count. Each must end in an exact
 * result or an error, never a hang, and leave nothing in /dev/shm.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll/harness.h"
#include "lib/dev_shm.h"
#include "core/comm.h"

#define CRASH_COUNT (1u << 20)      /* 1M float32 per allreduce */
#define CRASH_RANKS 4
#define CRASH_VICTIM 2
#define CRASH_AFTER_S 0.5           /* after every rank finished its first call */
#define FAULT_TIMEOUT_S 5.0

/* Exit codes of the rank functions: 0 = saw the expected outcome. */
enum { RC_OK = 0, RC_UNEXPECTED_OK = 10, RC_WRONG_STATUS = 11, RC_NO_MEMORY = 12,
       RC_NOT_SHM = 13, RC_WRONG_RESULT = 14, RC_SETUP = 15, RC_DEV_SHM_MAPPED = 16 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * The /dev/shm files this process maps, as one string. The test runner maps
 * one of its own; a rank must map nothing beyond what the parent mapped
 * before forking it, since the shm path uses memfds only.
 */
static char dev_shm_maps_before[4096];

static void dev_shm_maps(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    size_t used = 0;

    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *p = strstr(line, "/dev/shm/");

        if (p != NULL && strstr(out, p) == NULL && used + strlen(p) < len) {
            strcpy(out + used, p);
            used += strlen(p);
        }
    }
    fclose(f);
}

static int maps_new_dev_shm(void)
{
    char now[4096];

    dev_shm_maps(now, sizeof(now));
    if (strcmp(now, dev_shm_maps_before) == 0)
        return 0;
    fprintf(stderr, "maps under /dev/shm before the ranks:\n%snow:\n%s", dev_shm_maps_before,
            now);
    return 1;
}

/* Every rank shares this node and its team is the communicator's. */
static int on_shm_path(chorus_comm_t comm)
{
    return comm->env.node_team != NULL && comm->node_team.desc.size == comm->size;
}

/* ---- (a) a rank SIGKILLed while every rank loops over large allreduces ---- */

typedef struct {
    volatile int *started;      /* shared with the ranks: 1 once rank r finished a call */
    double all_started_s;       /* when the parent saw every rank started, or 0 */
    double killed_at_s;         /* when the victim was killed, or 0 */
} crash_state_t;

static int allreduce_until_error(chorus_comm_t comm, int rank, int size, void *arg)
{
    crash_state_t *cs = arg;
    float *buf = malloc(CRASH_COUNT * sizeof(float));
    chorus_status_t status = CHORUS_OK;
    double start = now_s();
    int calls = 0;

    (void)size;
    if (buf == NULL)
        return RC_NO_MEMORY;
    if (!on_shm_path(comm) || maps_new_dev_shm())
        return on_shm_path(comm) ? RC_DEV_SHM_MAPPED : RC_NOT_SHM;
    for (size_t i = 0; i < CRASH_COUNT; i++)
        buf[i] = 1.0f;
    /* Bounded by time: the kill makes a call fail long before. */
    while (status == CHORUS_OK && now_s() - start < 40.0) {
        status = chorus_allreduce(buf, buf, CRASH_COUNT, CHORUS_FLOAT32, CHORUS_MAX, comm,
                                  NULL);
        if (status == CHORUS_OK && calls++ == 0)
            cs->started[rank] = 1;
    }
    free(buf);
    fprintf(stderr, "rank %d: %d calls, then %s; communicator error %s\n", rank, calls,
            chorus_status_string(status), chorus_status_string(chorus_comm_get_error(comm)));
    if (status == CHORUS_OK)
        return RC_UNEXPECTED_OK;
    /*
     * A rank that reads the dead rank's memory (cross-memory attach) or sees
     * a survivor give up gets PEER_FAILED; one waiting on the dead rank's
     * step counter learns nothing until its deadline and gets TIMEOUT.
     */
    if (status != CHORUS_ERR_PEER_FAILED && status != CHORUS_ERR_TIMEOUT)
        return RC_WRONG_STATUS;
    return chorus_comm_get_error(comm) == status ? RC_OK : RC_WRONG_STATUS;
}

/* Kill the victim a fixed time after every rank is known to be inside the loop. */
static void crash_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    crash_state_t *cs = arg;
    int all = 1;

    if (cs->killed_at_s > 0)
        return;
    if (cs->all_started_s == 0) {
        for (int r = 0; r < nranks; r++)
            all &= cs->started[r];
        if (all)
            cs->all_started_s = elapsed_s;
        return;
    }
    if (elapsed_s - cs->all_started_s >= CRASH_AFTER_S && pids[CRASH_VICTIM] > 0) {
        kill(pids[CRASH_VICTIM], SIGKILL);
        cs->killed_at_s = elapsed_s;
    }
}

static dev_shm_list_t shm_before, shm_after;

Test(shm_faults, killed_rank_survivors_fail_and_dev_shm_clean, .timeout = 120)
{
    crash_state_t cs = {0};
    harness_opts_t opts = {.nranks = CRASH_RANKS, .timeout_s = FAULT_TIMEOUT_S,
                           .deadline_s = 60, .kill_rank = CRASH_VICTIM, .kill_after_s = 1e9,
                           .tick = crash_tick, .tick_arg = &cs};
    int status[CRASH_RANKS];
    double elapsed[CRASH_RANKS];

    /* Anonymous shared memory: visible to the forked ranks, never a file in /dev/shm. */
    cs.started = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(cs.started, MAP_FAILED);
    dev_shm_maps(dev_shm_maps_before, sizeof(dev_shm_maps_before));
    cr_assert_eq(dev_shm_list(&shm_before), 0, "cannot list /dev/shm");
    cr_assert_eq(harness_run(&opts, allreduce_until_error, &cs, status, elapsed), 0,
                 "a rank failed or hung: statuses %d %d %d %d", status[0], status[1],
                 status[2], status[3]);
    cr_assert_gt(cs.killed_at_s, 0, "the ranks never all finished a first call");
    cr_assert_eq(status[CRASH_VICTIM], 128 + SIGKILL, "rank %d was not killed (%d)",
                 CRASH_VICTIM, status[CRASH_VICTIM]);
    for (int r = 0; r < CRASH_RANKS; r++) {
        if (r == CRASH_VICTIM)
            continue;
        cr_expect_eq(status[r], RC_OK, "survivor %d exited with %d", r, status[r]);
        cr_expect_lt(elapsed[r], cs.killed_at_s + FAULT_TIMEOUT_S + 3.0,
                     "survivor %d ended %.1f s after the kill", r,
                     elapsed[r] - cs.killed_at_s);
    }
    cr_assert_eq(dev_shm_list(&shm_after), 0, "cannot list /dev/shm");
    cr_expect_eq(dev_shm_new_entries(&shm_before, &shm_after, ""), 0, "/dev/shm has new entries");
    munmap((void *)cs.started, 4096);
}

/* ---- (b) two communicators per rank, one thread each, at the same time ---- */

#define CONC_RANKS 3
#define CONC_CALLS 200

typedef struct {
    char addr[64];              /* the second communicator's rendezvous */
    char secret[33];
} conc_arg_t;

typedef struct {
    chorus_comm_t comm;
    int rank, size, which;
    int bad;                    /* RC_* of the first failure, or 0 */
} conc_thread_t;

static const size_t conc_counts[] = {1, 7, 64, 1000, 4099, 65536, 262147, 1u << 20};

/* Every element's sum over the ranks is an integer below 2^24: exact in float32. */
static float conc_value(int rank, int which, int call, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)call + (size_t)which) % 97 + 1));
}

static void *conc_thread(void *p)
{
    conc_thread_t *t = p;
    float *buf = malloc(((size_t)1 << 20) * sizeof(float));
    int total = t->size * (t->size + 1) / 2;

    if (buf == NULL) {
        t->bad = RC_NO_MEMORY;
        return NULL;
    }
    for (int call = 0; call < CONC_CALLS && t->bad == 0; call++) {
        /* The two threads walk the counts out of step: different sizes run together. */
        size_t count = conc_counts[(call + 3 * t->which) % 8];
        chorus_status_t status;

        for (size_t i = 0; i < count; i++)
            buf[i] = conc_value(t->rank, t->which, call, i);
        status = chorus_allreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, t->comm, NULL);
        if (status != CHORUS_OK) {
            fprintf(stderr, "rank %d comm %d call %d (%zu floats): %s\n", t->rank, t->which,
                    call, count, chorus_status_string(status));
            t->bad = RC_WRONG_STATUS;
            break;
        }
        for (size_t i = 0; i < count && t->bad == 0; i++) {
            float want = conc_value(0, t->which, call, i) * (float)total;

            if (buf[i] != want) {
                fprintf(stderr, "rank %d comm %d call %d (%zu floats): [%zu] = %g, not %g\n",
                        t->rank, t->which, call, count, i, buf[i], want);
                t->bad = RC_WRONG_RESULT;
            }
        }
    }
    free(buf);
    return NULL;
}

static int two_comms(chorus_comm_t comm, int rank, int size, void *arg)
{
    const conc_arg_t *ca = arg;
    conc_thread_t t[2] = {{.comm = comm, .rank = rank, .size = size, .which = 0},
                          {.rank = rank, .size = size, .which = 1}};
    pthread_t th[2];
    int rc = RC_OK;

    if (chorus_comm_create(rank, size, ca->addr, ca->secret, 20.0, &t[1].comm) != CHORUS_OK)
        return RC_SETUP;
    if (!on_shm_path(t[0].comm) || !on_shm_path(t[1].comm)) {
        chorus_comm_destroy(t[1].comm);
        return RC_NOT_SHM;
    }
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, conc_thread, &t[i]);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        if (rc == RC_OK)
            rc = t[i].bad;
    }
    if (chorus_comm_destroy(t[1].comm) != CHORUS_OK && rc == RC_OK)
        rc = RC_WRONG_STATUS;
    return rc;
}

Test(shm_faults, two_communicators_two_threads_exact, .timeout = 300)
{
    harness_opts_t opts = {.nranks = CONC_RANKS, .timeout_s = 20, .deadline_s = 240,
                           .kill_rank = -1};
    conc_arg_t ca;
    int status[CONC_RANKS];

    snprintf(ca.addr, sizeof(ca.addr), "127.0.0.1:%d", harness_free_port());
    snprintf(ca.secret, sizeof(ca.secret), "%08x%08x", (unsigned)getpid(),
             (unsigned)(now_s() * 1e6));
    cr_assert_eq(harness_run(&opts, two_comms, &ca, status, NULL), 0,
                 "rank statuses %d %d %d (11: call failed, 13: not on shm, 14: wrong result, "
                 "15: second communicator not created)", status[0], status[1], status[2]);
}

/* ---- (c) ranks disagree on the count; no CHORUS_DEBUG_CHECK ---- */

#define MISMATCH_RANKS 3
#define MISMATCH_TIMEOUT_S 5.0

/*
 * A rank that sees a peer's step tagged with another call's fingerprint
 * returns INVALID_ARG and marks itself failed; a rank that sees that mark
 * first returns PEER_FAILED. Which rank looks first is a race, so each rank
 * reports which of the two it got.
 */
enum { RC_MISMATCH = 20, RC_PEER_GAVE_UP = 21 };

static int mismatched_count(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[12] = {0};
    size_t count = rank == 0 ? 10 : 12;
    chorus_status_t status;

    (void)size; (void)arg;
    if (!on_shm_path(comm) || comm->ctx->cfg.debug_check)
        return RC_NOT_SHM;
    status = chorus_allreduce(x, x, count, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    fprintf(stderr, "rank %d: allreduce of %zu floats: %s\n", rank, count,
            chorus_status_string(status));
    if (status == CHORUS_OK)
        return RC_UNEXPECTED_OK;
    if (chorus_comm_get_error(comm) != status)
        return RC_WRONG_STATUS;
    if (status == CHORUS_ERR_INVALID_ARG)
        return RC_MISMATCH;
    return status == CHORUS_ERR_PEER_FAILED ? RC_PEER_GAVE_UP : RC_WRONG_STATUS;
}

Test(shm_faults, mismatched_count_fails_every_rank, .timeout = 60)
{
    harness_opts_t opts = {.nranks = MISMATCH_RANKS, .timeout_s = MISMATCH_TIMEOUT_S,
                           .deadline_s = 30, .kill_rank = -1};
    int status[MISMATCH_RANKS], detected = 0;
    double elapsed[MISMATCH_RANKS];

    unsetenv("CHORUS_DEBUG_CHECK");
    /* Every rank exits non-zero by design: the statuses say how. */
    harness_run(&opts, mismatched_count, NULL, status, elapsed);
    for (int r = 0; r < MISMATCH_RANKS; r++) {
        cr_expect(status[r] == RC_MISMATCH || status[r] == RC_PEER_GAVE_UP,
                  "rank %d exited with %d (10: succeeded, 11: another status, or the "
                  "communicator's error differs, 13: not on shm, -1: hung)", r, status[r]);
        cr_expect_lt(elapsed[r], MISMATCH_TIMEOUT_S + 3.0, "rank %d took %.1f s", r,
                     elapsed[r]);
        detected += status[r] == RC_MISMATCH;
    }
    cr_expect_geq(detected, 1, "no rank reported the mismatch as INVALID_ARG");
}
