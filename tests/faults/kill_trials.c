/*
 * Randomized kill trials. Each trial draws (from a printed seed) a rank
 * count of 2 to 4, a size from 0 B to 64 MiB (log-uniform, 0 included), a
 * collective, dtype, op, root and in-place flag; every rank loops that call
 * checking each result exactly, and the parent SIGKILLs a random rank at a
 * random moment. Every survivor must end each call with exact data or
 * CHORUS_ERR_PEER_FAILED, every call running at or after the kill must
 * return within KT_BOUND_S (of the kill, or of its start when later), and
 * no rank may outlive the harness deadline.
 *
 * A survivor may go on completing calls after the kill: in one-directional
 * collectives (reduce, broadcast) a rank runs ahead of its peers, and data
 * the victim sent before dying is still exact. A survivor that has not
 * failed KT_BOUND_S after the kill therefore ends with a barrier, which
 * needs the dead rank and must fail with CHORUS_ERR_PEER_FAILED in time.
 *
 * Usage: kill_trials N [SEED [FIRST]]; trial i uses a seed derived from
 * (SEED, i), so one trial is replayed with "kill_trials 1 SEED i".
 * Exit: 0 all passed, 1 a trial failed, 2 bad usage.
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fault_case.h"
#include "coll/harness.h"

/*
 * The detection bound. A killed rank's sockets are closed by its kernel, so
 * its neighbours read end-of-stream at once and fail the communicator, which
 * closes their connections in turn; CHORUS_TIMEOUT is the documented bound
 * for reporting a dead peer in any case ("a silent or dead peer is reported
 * within this bound"), so it is the detection time, and survivors must
 * return within twice that.
 */
#define KT_TIMEOUT_S 5.0
#define KT_BOUND_S (2.0 * KT_TIMEOUT_S)
#define KT_DEADLINE_S 90.0
#define KT_MAX_RANKS 4
#define KT_MAX_LOG2 26          /* 64 MiB */
#define KT_MAX_KILL_DELAY_S 1.0

/* Exit codes of a rank. */
enum { KT_RC_OK = 0, KT_RC_WRONG_DATA = 20, KT_RC_WRONG_STATUS = 21, KT_RC_SLOW_CALL = 22,
       KT_RC_NO_MEMORY = 23, KT_RC_COMM_ERROR = 24 };

/* Written by the ranks, read by the parent: a MAP_SHARED page survives fork. */
typedef struct {
    volatile int in_loop;
    volatile int calls_ok;
    volatile int calls_after_kill;  /* exact calls that ended after the kill */
    volatile int closing_barrier;   /* ended by the barrier, not by its own call */
    volatile int final_status;
    volatile double final_post_t, final_t;
} kt_rank_state_t;

typedef struct {
    kt_rank_state_t rank[KT_MAX_RANKS];
    volatile double kill_t;
} kt_shared_t;

typedef struct {
    fault_case_t c;
    size_t bytes;
    int nranks, victim;
    double kill_delay_s, ready_t;
    int fired;
    kt_shared_t *sh;
} kt_trial_t;

static uint64_t kt_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double kt_unit(uint64_t *s)
{
    return (double)(kt_mix(s) >> 11) * 0x1.0p-53;
}

static void kt_draw(uint64_t seed, kt_trial_t *t)
{
    uint64_t s = seed;
    fault_case_t *c = &t->c;

    memset(t, 0, sizeof(*t));
    t->nranks = 2 + (int)(kt_mix(&s) % 3);
    t->bytes = kt_mix(&s) % 16 == 0 ? 0 : (size_t)exp2(kt_unit(&s) * KT_MAX_LOG2);
    c->coll = (fault_coll_t)(kt_mix(&s) % FC_COUNT);
    c->dtype = (chorus_dtype_t)(kt_mix(&s) % CHORUS_DTYPE_COUNT);
    c->op = fault_coll_reduces(c->coll) ? (chorus_op_t)(kt_mix(&s) % CHORUS_OP_COUNT)
                                       : CHORUS_SUM;
    c->root = (int)(kt_mix(&s) % (uint64_t)t->nranks);
    c->in_place = (int)(kt_mix(&s) % 2);
    c->count = fault_case_count(c->coll, c->dtype, t->nranks, t->bytes);
    t->victim = (int)(kt_mix(&s) % (uint64_t)t->nranks);
    t->kill_delay_s = kt_mix(&s) % 8 == 0 ? 0.0 : kt_unit(&s) * KT_MAX_KILL_DELAY_S;
}

/* A call that moves no bytes never meets the dead peer: end with a barrier, which must. */
static int kt_moves_nothing(const fault_case_t *c)
{
    return c->coll != FC_BARRIER && c->count == 0;
}

/* Did a call from post to now take longer than the bound since the kill? */
static int kt_too_slow(const kt_shared_t *sh, double post)
{
    double kill_t = sh->kill_t, since = post > kill_t ? post : kill_t;

    return kill_t > 0 && fault_now() - since > KT_BOUND_S;
}

static int kt_end(chorus_comm_t comm, kt_rank_state_t *st, chorus_status_t status, double post)
{
    st->final_post_t = post;
    st->final_t = fault_now();
    st->final_status = status;
    if (status != CHORUS_ERR_PEER_FAILED)
        return KT_RC_WRONG_STATUS;
    /* The fault is recorded on the communicator too. */
    return chorus_comm_get_error(comm) == status ? KT_RC_OK : KT_RC_COMM_ERROR;
}

static int kt_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const kt_trial_t *t = arg;
    kt_rank_state_t *st = &t->sh->rank[rank];
    fault_case_t c = t->c;
    fault_bufs_t b;
    char label[96];
    int rc = KT_RC_OK;

    c.rank = rank;
    c.size = size;
    snprintf(label, sizeof(label), "rank %d/%d: %s %s", rank, size, fault_coll_name(c.coll),
             chorus_dtype_name(c.dtype));
    if (fault_case_setup(&c, &b) != 0)
        return KT_RC_NO_MEMORY;
    st->in_loop = 1;
    for (;;) {
        double post = fault_now(), kill_t;
        chorus_status_t status = fault_case_call(&c, comm, &b);

        if (status != CHORUS_OK) {
            rc = kt_end(comm, st, status, post);
            break;
        }
        if (kt_too_slow(t->sh, post)) {
            rc = KT_RC_SLOW_CALL;
            break;
        }
        if (fault_case_check(&c, &b, label) != 0) {
            rc = KT_RC_WRONG_DATA;
            break;
        }
        st->calls_ok++;
        kill_t = t->sh->kill_t;
        st->calls_after_kill += kill_t > 0;
        if (kill_t > 0 && fault_now() > kill_t + (kt_moves_nothing(&c) ? 0.2 : KT_BOUND_S)) {
            st->closing_barrier = 1;
            post = fault_now();
            rc = kt_end(comm, st, chorus_barrier(comm, NULL), post);
            break;
        }
    }
    fault_case_free(&b);
    return rc;
}

static void kt_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    kt_trial_t *t = arg;
    double now = fault_now();

    (void)elapsed_s;
    if (t->fired)
        return;
    if (t->ready_t == 0) {
        for (int r = 0; r < nranks; r++)
            if (!t->sh->rank[r].in_loop)
                return;
        t->ready_t = now;
    }
    if (now - t->ready_t < t->kill_delay_s || pids[t->victim] <= 0)
        return;
    kill(pids[t->victim], SIGKILL);
    t->sh->kill_t = fault_now();
    t->fired = 1;
}

static const char *kt_rc_name(int rc)
{
    switch (rc) {
    case KT_RC_OK: return "ok";
    case KT_RC_WRONG_DATA: return "wrong data";
    case KT_RC_WRONG_STATUS: return "wrong status";
    case KT_RC_SLOW_CALL: return "a call took longer than the bound after the kill";
    case KT_RC_NO_MEMORY: return "no memory";
    case KT_RC_COMM_ERROR: return "chorus_comm_get_error disagrees";
    case -1: return "HUNG (killed at the harness deadline)";
    default: return "exited abnormally";
    }
}

typedef struct {
    int passed, failed, hung;
    double worst_s;
} kt_summary_t;

/* Judge one survivor; returns 1 when it passed. */
static int kt_judge(const kt_trial_t *t, int r, int status, kt_summary_t *sum)
{
    const kt_rank_state_t *st = &t->sh->rank[r];
    double since = st->final_post_t > t->sh->kill_t ? st->final_post_t : t->sh->kill_t;
    double took = st->final_t - since;
    int ok = status == KT_RC_OK && took <= KT_BOUND_S;

    if (status == KT_RC_OK && took > sum->worst_s)
        sum->worst_s = took;
    printf("  rank %d: %s, %d calls exact (%d after the kill), then %s%s %.3f s after the "
           "%s%s\n", r, kt_rc_name(status), st->calls_ok, st->calls_after_kill,
           st->final_t > 0 ? chorus_status_string((chorus_status_t)st->final_status) : "-",
           st->closing_barrier ? " in the closing barrier" : "", st->final_t > 0 ? took : 0.0,
           st->final_post_t > t->sh->kill_t ? "call's start" : "kill",
           ok || status != KT_RC_OK ? "" : " (over the bound)");
    return ok;
}

static int kt_run(uint64_t seed, int index, kt_shared_t *sh, kt_summary_t *sum)
{
    kt_trial_t t;
    harness_opts_t opts;
    int status[KT_MAX_RANKS], pass = 1;

    kt_draw(seed, &t);
    t.sh = sh;
    memset(sh, 0, sizeof(*sh));
    printf("trial %d seed 0x%016" PRIx64 ": %d ranks, %s %s %s count %zu (%zu B) root %d %s, "
           "kill rank %d %.3f s into the loop\n", index, seed, t.nranks,
           fault_coll_name(t.c.coll), chorus_dtype_name(t.c.dtype),
           fault_coll_reduces(t.c.coll) ? chorus_op_name(t.c.op) : "-", t.c.count, t.bytes,
           t.c.root, t.c.in_place ? "in-place" : "out-of-place", t.victim, t.kill_delay_s);
    memset(&opts, 0, sizeof(opts));
    opts.nranks = t.nranks;
    opts.timeout_s = KT_TIMEOUT_S;
    opts.deadline_s = KT_DEADLINE_S;
    /* The harness ignores the victim's exit status; it is killed by kt_tick, not by time. */
    opts.kill_rank = t.victim;
    opts.kill_after_s = 1e9;
    opts.tick = kt_tick;
    opts.tick_arg = &t;
    harness_run(&opts, kt_rank, &t, status, NULL);
    if (!t.fired) {
        printf("  the victim was never killed: the ranks did not all reach the loop\n");
        pass = 0;
    }
    for (int r = 0; r < t.nranks && t.fired; r++) {
        if (r == t.victim) {
            if (status[r] != 128 + SIGKILL) {
                printf("  rank %d (victim) ended with %d, not SIGKILL\n", r, status[r]);
                pass = 0;
            }
            continue;
        }
        sum->hung += status[r] == -1;
        pass &= kt_judge(&t, r, status[r], sum);
    }
    printf("  trial %d: %s\n", index, pass ? "PASS" : "FAIL");
    fflush(stdout);
    return pass;
}

int main(int argc, char **argv)
{
    kt_summary_t sum = {0};
    kt_shared_t *sh;
    uint64_t seed;
    long n, first = 0;

    if (argc < 2 || argc > 4 || (n = strtol(argv[1], NULL, 0)) < 1) {
        fprintf(stderr, "usage: %s N [SEED [FIRST]]\n", argv[0]);
        return 2;
    }
    seed = argc > 2 ? strtoull(argv[2], NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    if (argc > 3)
        first = strtol(argv[3], NULL, 0);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    printf("kill_trials: %ld trials from %ld, seed %" PRIu64 ", CHORUS_TIMEOUT %.1f s, "
           "bound %.1f s after the kill\n", n, first, seed, KT_TIMEOUT_S, KT_BOUND_S);
    for (long i = first; i < first + n; i++) {
        uint64_t s = seed ^ ((uint64_t)i * 0xd1b54a32d192ed03ull);

        if (kt_run(kt_mix(&s), (int)i, sh, &sum))
            sum.passed++;
        else
            sum.failed++;
    }
    printf("kill_trials summary: %ld trials, %d passed, %d failed, %d hung ranks; seed %" PRIu64
           "; slowest failing call %.3f s (bound %.1f s)\n", n, sum.passed,
           sum.failed, sum.hung, seed, sum.worst_s, KT_BOUND_S);
    munmap(sh, sizeof(*sh));
    return sum.failed ? 1 : 0;
}
