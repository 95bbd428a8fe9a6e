/*
 * Step counters and waiting. A post is one release store to the poster's
 * own cache line; a waiter reads each peer's line. Waiters spin briefly,
 * then yield, then sleep on the lagging peer's futex word, so that more
 * ranks than cores still make progress: a sleeper registers itself before
 * its last check, and a poster rings the bell only when someone sleeps.
 *
 * How long to spin is learnt: twice the polls that recent waits needed,
 * within CHORUS_SHM_SPIN. A peer that is running posts within a few
 * hundred polls; one that is not (the machine has more work than cores,
 * or the peer is busy copying) makes every spin a waste of the core it may
 * need, so a spin that fails halves the next one.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define shm_pause() _mm_pause()
#else
#define shm_pause() ((void)0)
#endif

#include "transports/shm/shm_internal.h"
#include "util/log.h"

/* Yields between the spin and the first sleep. */
#define SHM_YIELDS 8
/* The shortest learnt spin: polls that cost less than a yield. */
#define SHM_SPIN_MIN 32

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static void ring(shm_ctrl_t *c)
{
    if (atomic_load(&c->sleepers) != 0) {
        atomic_fetch_add(&c->bell, 1);
        futex(&c->bell, FUTEX_WAKE, INT_MAX, NULL);
    }
}

void shm_post(shm_node_t *node, uint32_t tag)
{
    shm_ctrl_t *c = node->ctrl[node->me];

    node->step++;
    atomic_store(&c->step, ((uint64_t)(tag & 0xffff) << SHM_STEP_BITS) | node->step);
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
    ring(c);
}

/* A peer that gave up, or whose process is gone: every waiter stops at once. */
static int any_failed(shm_node_t *node)
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
    int rc = any_failed(node);

    if (rc < 0)
        return rc;
    for (int j = 0; j < node->n; j++) {
        shm_ctrl_t *c = node->ctrl[j];
        uint64_t v = atomic_load_explicit(&c->step, memory_order_acquire);
        uint64_t s = v & SHM_STEP_MASK;
        if (s > base && s <= step && (v >> SHM_STEP_BITS) != (tag & 0xffff)) {
            chorus_error("local rank %d is in a different collective call (its call's "
                         "fingerprint %04x, this rank's %04x, at step %llu): the ranks called "
                         "collectives in different orders or with different arguments", j,
                         (unsigned)(v >> SHM_STEP_BITS), tag & 0xffff, (unsigned long long)s);
            return CHORUS_ERR_INVALID_ARG;
        }
        if (s < step) {
            *peer_p = j;
            return 0;
        }
    }
    return 1;
}

static int peer_moved(shm_ctrl_t *c, uint64_t step)
{
    return (atomic_load(&c->step) & SHM_STEP_MASK) >= step || atomic_load(&c->failed) != 0;
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

/* A spin that ended after polls: a hit when the peer moved. */
static void spin_learn(shm_node_t *node, size_t polls, int hit)
{
    size_t next = hit ? 2 * polls : node->spin / 2;

    if (next < SHM_SPIN_MIN)
        next = SHM_SPIN_MIN;
    node->spin = next < node->spin_max ? next : node->spin_max;
}

void shm_sleep(shm_node_t *node, int peer, uint64_t step, unsigned max_us)
{
    shm_ctrl_t *c = node->ctrl[peer];
    struct timespec ts = {.tv_sec = max_us / 1000000, .tv_nsec = (long)(max_us % 1000000) * 1000};
    uint32_t bell;

    for (size_t i = 0; i < node->spin; i++) {
        if (peer_moved(c, step)) {
            spin_learn(node, i, 1);
            return;
        }
        shm_pause();
    }
    spin_learn(node, node->spin, 0);
    for (int i = 0; i < SHM_YIELDS; i++) {
        if (peer_moved(c, step))
            return;
        sched_yield();
    }
    atomic_fetch_add(&c->sleepers, 1);
    bell = atomic_load(&c->bell);
    if (!peer_moved(c, step) && futex(&c->bell, FUTEX_WAIT, bell, &ts) != 0 &&
        errno == ETIMEDOUT && shm_pid_gone(node->pids[peer]))
        node->dead_peer = peer;     /* killed: it will never post again */
    atomic_fetch_sub(&c->sleepers, 1);
}

void shm_part(size_t m, size_t unit, int n, int j, size_t *lo, size_t *hi)
{
    size_t units = (m + unit - 1) / unit;
    size_t a = units * (size_t)j / (size_t)n * unit, b = units * (size_t)(j + 1) / (size_t)n * unit;

    *lo = a < m ? a : m;
    *hi = b < m ? b : m;
}
