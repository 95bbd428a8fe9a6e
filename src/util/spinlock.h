/*
 * A lock for short sections that another thread almost never enters at the
 * same time: a call's numbering, a node team's turns, the refusal records.
 * Taking it is one atomic exchange and giving it back one release store,
 * both inline, where a pthread mutex costs two locked operations and two
 * calls through the PLT, on every call of every collective. A thread that
 * finds it taken spins a little, then yields its core, so a holder that was
 * preempted (more ranks than cores) gets to run.
 *
 * Nobody sleeps on this lock: a section that waits for something else (a
 * condition variable, a peer) while another thread may want the lock would
 * keep that thread spinning and yielding meanwhile.
 */
#ifndef CHORUS_UTIL_SPINLOCK_H
#define CHORUS_UTIL_SPINLOCK_H

#include <stdatomic.h>

typedef struct {
    atomic_int taken;
} chorus__spinlock_t;

/* The CPU's hint that this thread polls memory in a loop (a pause on x86). */
static inline void chorus__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Zeroed memory (calloc) is a free lock too. */
#define CHORUS__SPINLOCK_INIT {0}

/* The contended path: spin, then yield until the lock is free. */
void chorus__spin_lock_wait(chorus__spinlock_t *l);

static inline void chorus__spin_lock(chorus__spinlock_t *l)
{
    if (atomic_exchange_explicit(&l->taken, 1, memory_order_acquire) != 0)
        chorus__spin_lock_wait(l);
}

static inline void chorus__spin_unlock(chorus__spinlock_t *l)
{
    atomic_store_explicit(&l->taken, 0, memory_order_release);
}

#endif
