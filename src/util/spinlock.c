#include "util/spinlock.h"

#include <sched.h>

/* Polls of a taken lock before the thread yields its core. */
#define SPINLOCK_POLLS 128

void chorus__spin_lock_wait(chorus__spinlock_t *l)
{
    for (;;) {
        for (int i = 0; i < SPINLOCK_POLLS; i++) {
            /* Read until it looks free: an exchange on every poll would pull the line from
             * the holder each time. */
            if (atomic_load_explicit(&l->taken, memory_order_relaxed) == 0 &&
                atomic_exchange_explicit(&l->taken, 1, memory_order_acquire) == 0)
                return;
            chorus__cpu_relax();
        }
        sched_yield();
    }
}
