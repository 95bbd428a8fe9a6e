/*
 * The wait hook (core/wait_hook.h): a wait shorter than the delay never runs
 * it; a long wait runs it after the delay and then with gaps that double up
 * to the last one, so a wait of tens of milliseconds runs it tens of times,
 * not hundreds; a new wait starts over from the first gap.
 */
#include <criterion/criterion.h>

#include "core/wait_hook.h"
#include "util/time.h"

/* How much later than a run's start the hook may read the clock. */
#define SLACK_S 20e-6

/* The runs the hook saw: how many, and the shortest and longest gap between two. */
static int runs;
static double last, least_gap, most_gap;

static void count_run(void)
{
    double now = chorus__now();

    if (runs > 0) {
        double gap = now - last;

        least_gap = runs == 1 || gap < least_gap ? gap : least_gap;
        most_gap = gap > most_gap ? gap : most_gap;
    }
    last = now;
    runs++;
}

static void reset(void)
{
    runs = 0;
    last = least_gap = most_gap = 0;
    chorus__wait_hook_set(count_run);
}

static void unset(void)
{
    chorus__wait_hook_set(NULL);
}

/* Poll the hook as a waiter would, without a pause, for seconds from since. */
static void wait_for(double since, double seconds)
{
    while (chorus__now() - since < seconds)
        chorus__wait_hook_run(since);
}

TestSuite(wait_hook, .init = reset, .fini = unset);

Test(wait_hook, none_set_runs_nothing)
{
    double since = chorus__now();

    chorus__wait_hook_set(NULL);
    cr_assert(!chorus__wait_hook_on());
    wait_for(since, 2e-3);
    cr_assert_eq(runs, 0);
    cr_assert_float_eq(chorus__wait_hook_due(since), since + CHORUS__WAIT_HOOK_AFTER_S, 1e-12);
}

Test(wait_hook, short_wait_never_runs_it)
{
    double since = chorus__now();

    cr_assert(chorus__wait_hook_on());
    wait_for(since, CHORUS__WAIT_HOOK_AFTER_S / 2);
    cr_assert_eq(runs, 0, "a wait of %.0f us ran the hook %d times",
                 CHORUS__WAIT_HOOK_AFTER_S / 2 * 1e6, runs);
}

Test(wait_hook, long_wait_backs_off)
{
    const double wait_s = 40e-3;
    double since = chorus__now();

    wait_for(since, wait_s);
    /* After the delay: 50, 100, ..., 1600 us, then 2 ms apart: about 25 runs in 40 ms.
     * Every 50 us (the gap that never grew) would be about 800. */
    cr_assert(runs >= 2, "the hook ran %d times in a %.0f ms wait", runs, wait_s * 1e3);
    cr_assert(runs <= 40, "the hook ran %d times in a %.0f ms wait (no back-off?)", runs,
              wait_s * 1e3);
    cr_assert(least_gap >= CHORUS__WAIT_HOOK_GAP_S - SLACK_S, "two runs %.1f us apart", least_gap * 1e6);
    cr_assert(most_gap >= CHORUS__WAIT_HOOK_MAX_GAP_S, "the longest gap was %.0f us",
              most_gap * 1e6);
    /* The next run is due at most the last gap after the last run. */
    cr_assert(chorus__wait_hook_due(since) <= last + CHORUS__WAIT_HOOK_MAX_GAP_S + 1e-9);
}

Test(wait_hook, new_wait_starts_over)
{
    double first = chorus__now(), second;

    wait_for(first, 10e-3);
    cr_assert(chorus__wait_hook_due(first) - last > CHORUS__WAIT_HOOK_GAP_S * 2,
              "the gap did not grow in the first wait");
    second = chorus__now();
    cr_assert_float_eq(chorus__wait_hook_due(second), second + CHORUS__WAIT_HOOK_AFTER_S, 1e-12);
    runs = 0;
    while (runs == 0 && chorus__now() - second < 1.0)
        chorus__wait_hook_run(second);
    cr_assert_eq(runs, 1, "the new wait never ran the hook");
    cr_assert(last - second >= CHORUS__WAIT_HOOK_AFTER_S, "the new wait ran it after %.0f us",
              (last - second) * 1e6);
    /* The first gap from the run (which the hook saw a moment after it began). */
    cr_assert_float_eq(chorus__wait_hook_due(second) - last, CHORUS__WAIT_HOOK_GAP_S, SLACK_S);
}
