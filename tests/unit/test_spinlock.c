/*
 * Spin locks (util/spinlock.h): one holder at a time under contention, what
 * a holder wrote seen by the next, and waiters that yield get through while
 * the holder sleeps (as a holder preempted on a shared core would).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "util/spinlock.h"
#include "util/time.h"

#define THREADS 4
#define ROUNDS 200000

typedef struct {
    chorus__spinlock_t lock;
    uint64_t count;             /* plain: only ever touched under the lock */
    int inside;                 /* holders at once, seen from inside */
    int overlap;                /* times a holder found another inside */
} shared_t;

static void *hammer(void *arg)
{
    shared_t *s = arg;

    for (int i = 0; i < ROUNDS; i++) {
        chorus__spin_lock(&s->lock);
        if (s->inside++ != 0)
            s->overlap++;
        s->count++;
        s->inside--;
        chorus__spin_unlock(&s->lock);
    }
    return NULL;
}

Test(spinlock, one_holder_at_a_time_and_no_update_lost)
{
    shared_t s = {.lock = CHORUS__SPINLOCK_INIT};
    pthread_t t[THREADS];

    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, hammer, &s), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(s.count, (uint64_t)THREADS * ROUNDS, "count %llu, want %llu",
                 (unsigned long long)s.count, (unsigned long long)THREADS * ROUNDS);
    cr_assert_eq(s.overlap, 0, "%d times two threads held the lock at once", s.overlap);
}

typedef struct {
    chorus__spinlock_t *lock;
    double got_at;
} waiter_t;

static void *wait_for_lock(void *arg)
{
    waiter_t *w = arg;

    chorus__spin_lock(w->lock);
    w->got_at = chorus__now();
    chorus__spin_unlock(w->lock);
    return NULL;
}

/* Waiters on a lock whose holder sleeps 50 ms get it once it is given back, not before. */
Test(spinlock, waiters_get_it_after_a_sleeping_holder)
{
    chorus__spinlock_t lock = CHORUS__SPINLOCK_INIT;
    struct timespec nap = {.tv_nsec = 50 * 1000 * 1000};
    waiter_t w[THREADS];
    pthread_t t[THREADS];
    double released;

    chorus__spin_lock(&lock);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (waiter_t){.lock = &lock};
        cr_assert_eq(pthread_create(&t[i], NULL, wait_for_lock, &w[i]), 0);
    }
    nanosleep(&nap, NULL);
    released = chorus__now();
    chorus__spin_unlock(&lock);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        cr_assert_geq(w[i].got_at, released, "waiter %d took the lock while it was held", i);
    }
    /* Free again once every waiter gave it back. */
    chorus__spin_lock(&lock);
    chorus__spin_unlock(&lock);
}
