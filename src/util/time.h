/* Monotonic time and deadlines. */
#ifndef CHORUS_UTIL_TIME_H
#define CHORUS_UTIL_TIME_H

#include <time.h>

static inline double chorus__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds left until deadline (seconds on chorus__now's clock), >= 0. */
static inline int chorus__ms_left(double deadline)
{
    double left = deadline - chorus__now();
    if (left <= 0)
        return 0;
    if (left > 2e6)
        return 2000000000;
    return (int)(left * 1000.0) + 1;
}

/* The moment left seconds (negative: none) from now on clock, as the pthread waits take it. */
static inline struct timespec chorus__timespec_in(clockid_t clock, double left)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    if (left < 0)
        left = 0;
    ts.tv_sec += (time_t)left;
    ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
