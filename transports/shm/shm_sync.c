/*
 * Step counters and waiting. A post is one release store to the poster's
 * own cache line; a waiter reads each peer's line. Waiters spin briefly,
 * then yield, then sleep on the lagging peer's futex word, so that more
 * ranks than cores still make progress: a sleeper registers itself before
 * its last check, and a poster rings the bell only when someone sleeps.
 * Each side stores, then loads the other's word, so each needs a full
 * barrier between the two; posts are many and sleeps few, so where every
 * local rank registered for membarrier(2) (node->fence_ready) the sleeper
 * makes every local rank's CPU pass one, and a post is a plain store.
 *
 * How long to spin is learnt, within CHORUS_SHM_SPIN: twice what recent
 * waits took, growing at once after a long wait and shrinking by an eighth
 * after a short one (one short wait says little of the next). A peer that
 * is running posts soon, and a waiter that sleeps instead costs both sides
 * a wake-up through the kernel, which makes the next waits longer still;
 * so a wait that ended soon after the spin gave up lengthens the next spin
 * to cover it. A peer that is not running (the
 * machine has more work than cores, or the peer shares this rank's core)
 * posts late, or only once this rank yields, and spinning for it takes
 * the core it may need: a wait that ended late, or not at all, or after a
 * yield that let another task run, halves the next spin.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "transports/shm/shm_internal.h"
#include "util/log.h"
#include "util/fence.h"
#include "util/spinlock.h"
#include "util/time.h"

/* The shortest learnt spin: polls that cost less than a yield. */
#define SHM_SPIN_MIN 32
/* A peer that posts later than this after a spin gave up was not running. */
#define SHM_SPIN_WORTH_S 50e-6
/* A yield that takes longer than this let another task run on this core. */
#define SHM_YIELD_SWITCHED_S 5e-6

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static void ring(shm_ctrl_t *c)
{
    if (atomic_load_explicit(&c->sleepers, memory_order_relaxed) != 0) {
        atomic_fetch_add(&c->bell, 1);
        futex(&c->bell, FUTEX_WAKE, INT_MAX, NULL);
    }
}

void shm_post(shm_node_t *node, uint32_t tag)
{
    shm_ctrl_t *c = node->ctrl[node->me];

    node->step++;
    atomic_store_explicit(&c->step, ((uint64_t)(tag & 0xffff) << SHM_STEP_BITS) | node->step,
                          memory_order_release);
    /* The store before the look at the sleepers: a sleeper's barrier where it makes one. */
    chorus__fence_light(node->fence_ready);
    ring(c);
}

void shm_node_fail(shm_node_t *node, chorus_status_t status)
{
    shm_ctrl_t *c;
    int32_t expected = 0;

    if (node == NULL)
        return;
    c = node->ctrl[node->me];
    atomic_store(&node->broken, 1);
    atomic_compare_exchange_strong(&c->failed, &expected, (int32_t)status);
    ring(c);    /* after a locked compare-and-swap: a full barrier either way */
}

/* A peer that gave up, or whose process is gone: every waiter stops at once. */
int shm_any_failed(shm_node_t *node)
{
    if (node->dead_peer >= 0) {
        chorus_error("local rank %d (pid %d) is gone", node->dead_peer,
                     (int)node->pids[node->dead_peer]);
        return CHORUS_ERR_PEER_FAILED;
    }
    for (int j = 0; j < node->n; j++) {
        int32_t failed = atomic_load_explicit(&node->ctrl[j]->failed, memory_order_relaxed);

        if (j != node->me && failed != 0) {
            chorus_error("local rank %d gave up (%s)", j,
                         chorus_status_string((chorus_status_t)failed));
            return CHORUS_ERR_PEER_FAILED;
        }
    }
    return 0;
}

int shm_reached(shm_node_t *node, uint64_t step, uint64_t base, uint32_t tag, int *peer_p)
{
    int rc = shm_any_failed(node);

    if (rc < 0)
        return rc;
    for (int j = 0; j < node->n; j++) {
        shm_ctrl_t *c = node->ctrl[j];
        uint64_t v = atomic_load_explicit(&c->step, memory_order_acquire);
        uint64_t s = v & SHM_STEP_MASK;
        if (s > base && s <= step && (v >> SHM_STEP_BITS) != (tag & 0xffff)) {
            chorus_error("local rank %d is in a different collective call (its call's "
                         "fingerprint %04x, this rank's %04x, at step %llu): the ranks called "
                         "collectives in different orders or with different arguments"
                         SHM_MISMATCH_HINT, j,
                         (unsigned)(v >> SHM_STEP_BITS), tag & 0xffff, (unsigned long long)s);
            return CHORUS_ERR_INVALID_ARG;
        }
        if (s < step) {
            *peer_p = j;
            return 0;
        }
    }
    if (step > node->seen)
        node->seen = step;
    return 1;
}

/*
 * Whether word reached step, or the peer's counter did (a peer stores its
 * counter after any other step word, and the counter is what orders the
 * sleepers with the bell), or the peer gave up.
 */
static int peer_moved(shm_ctrl_t *c, const _Atomic uint64_t *word, uint64_t step)
{
    return (atomic_load(word) & SHM_STEP_MASK) >= step ||
           (word != &c->step && (atomic_load(&c->step) & SHM_STEP_MASK) >= step) ||
           atomic_load(&c->failed) != 0;
}

/* The kernel's flag of a process that has begun to exit (include/linux/sched.h). */
#define SHM_PF_EXITING 0x4

int shm_pid_gone(pid_t pid)
{
    char path[64], buf[512], state;
    unsigned long flags;
    const char *end;
    FILE *f;
    size_t n;

    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    /* A killed process stays visible until it is reaped, and its memory is gone before
     * that: its state (zombie, dead) or its exiting flag says so. */
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (f == NULL)
        return errno == ENOENT;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* pid (comm) state ppid pgrp session tty_nr tpgid flags: comm may hold spaces. */
    end = strrchr(buf, ')');
    if (end == NULL ||
        sscanf(end + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
        return 0;
    return state == 'Z' || state == 'X' || (flags & SHM_PF_EXITING) != 0;
}

static void spin_set(shm_node_t *node, double polls)
{
    if (polls < SHM_SPIN_MIN)
        polls = SHM_SPIN_MIN;
    node->spin = polls < (double)node->spin_max ? (size_t)polls : node->spin_max;
}

/*
 * The peer moved late_s after a spin gave up (or not at all: late_s is
 * infinite); shared: a yield in between let another task run on this core.
 */
static void spin_learn_late(shm_node_t *node, double late_s, int shared)
{
    if (late_s < SHM_SPIN_WORTH_S && !shared)
        spin_set(node, 2.0 * ((double)node->spin + late_s / node->poll_s));
    else
        spin_set(node, (double)node->spin / 2);
}

void shm_spin_calibrate(shm_node_t *node)
{
    double start = chorus__now();

    for (int i = 0; i < 256; i++) {
        (void)atomic_load(&node->ctrl[node->me]->step);
        chorus__cpu_relax();
    }
    node->poll_s = (chorus__now() - start) / 256;
    if (node->poll_s <= 0)
        node->poll_s = 1e-9;
}

/* The spin; 1 when the peer moved during it. */
static int spin(shm_node_t *node, shm_ctrl_t *c, const _Atomic uint64_t *word, uint64_t step)
{
    for (size_t i = 0; i < node->spin; i++) {
        /* The word alone while spinning (a peer that gave up is seen once the spin is
         * over): every other line polled here is one more that the peer must take back. */
        if ((atomic_load(word) & SHM_STEP_MASK) >= step) {
            /* Grow at once, shrink slowly: one short wait says little of the next. */
            spin_set(node, fmax(2.0 * (double)i, 0.875 * (double)node->spin));
            return 1;
        }
        chorus__cpu_relax();
    }
    return 0;
}

/*
 * Yield a few times; 1 when the peer moved. With learn set, *shared_p
 * says whether a yield let another task run on this core.
 */
static int yield(shm_node_t *node, shm_ctrl_t *c, const _Atomic uint64_t *word,
                 uint64_t step, int learn, int *shared_p)
{
    double now = learn ? chorus__now() : 0;

    for (int i = 0; i < node->yields; i++) {
        double before = now;

        if (peer_moved(c, word, step))
            return 1;
        sched_yield();
        if (learn) {
            now = chorus__now();
            *shared_p |= now - before > SHM_YIELD_SWITCHED_S;
        }
    }
    return peer_moved(c, word, step);
}

void shm_sleep(shm_node_t *node, int peer, const _Atomic uint64_t *word, uint64_t step,
               unsigned max_us)
{
    shm_ctrl_t *c = node->ctrl[peer];
    struct timespec ts = {.tv_sec = max_us / 1000000, .tv_nsec = (long)(max_us % 1000000) * 1000};
    int learn = node->spin_max > 0, shared = 0;
    double gave_up;
    uint32_t bell;

    if (word == NULL)
        word = &c->step;
    if (spin(node, c, word, step))
        return;
    gave_up = learn ? chorus__now() : 0;
    if (!yield(node, c, word, step, learn, &shared)) {
        atomic_fetch_add(&c->sleepers, 1);
        /* The peer's post skipped its barrier: this one stands for it. Without it, do not
         * sleep (a post may have missed this sleeper); the caller polls again. */
        if (node->fence_ready && chorus__fence_heavy(CHORUS__FENCE_NODE) != 0) {
            atomic_fetch_sub(&c->sleepers, 1);
            sched_yield();
            return;
        }
        bell = atomic_load(&c->bell);
        /* Gone, and without the step: a peer may post it and leave while the futex times out. */
        if (!peer_moved(c, word, step) && futex(&c->bell, FUTEX_WAIT, bell, &ts) != 0 &&
            errno == ETIMEDOUT && shm_pid_gone(node->pids[peer]) && !peer_moved(c, word, step))
            node->dead_peer = peer;     /* killed: it will never post again */
        atomic_fetch_sub(&c->sleepers, 1);
    }
    if (learn)
        spin_learn_late(node, peer_moved(c, word, step) ? chorus__now() - gave_up : INFINITY,
                        shared);
}

void shm_part(size_t m, size_t unit, int n, int j, size_t *lo, size_t *hi)
{
    size_t units = (m + unit - 1) / unit;
    size_t a = units * (size_t)j / (size_t)n * unit;
    size_t b = units * (size_t)(j + 1) / (size_t)n * unit;

    *lo = a < m ? a : m;
    *hi = b < m ? b : m;
}
