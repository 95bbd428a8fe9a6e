/*
 * The wait hook: a function that a thread waiting in chorus for its own call
 * (a blocking collective, chorus_request_wait) runs now and then. The MPI
 * interposer keeps the MPI library progressing with it, as MPI's own
 * collectives do while they wait, so that a peer that must first receive this
 * rank's MPI messages can reach the same collective. One per process.
 */
#ifndef CHORUS_CORE_WAIT_HOOK_H
#define CHORUS_CORE_WAIT_HOOK_H

/*
 * How long a wait lasts before it runs the hook, and the time between two runs
 * in one wait: the first gap, doubled after every run up to the last. A long
 * wait (a large collective) pays for a few runs, not thousands: each one, and
 * each wake-up for it, takes a core from the ranks that share it.
 */
#define CHORUS__WAIT_HOOK_AFTER_S 200e-6
#define CHORUS__WAIT_HOOK_GAP_S 50e-6
#define CHORUS__WAIT_HOOK_MAX_GAP_S 2e-3

typedef void (*chorus__wait_hook_fn)(void);

/* Sets the hook (NULL: none). */
void chorus__wait_hook_set(chorus__wait_hook_fn hook);
/* Whether a hook is set. */
int chorus__wait_hook_on(void);
/*
 * Runs the hook when one is set, the wait that began at waiting_since (on
 * chorus__now's clock) has lasted CHORUS__WAIT_HOOK_AFTER_S, and this wait's
 * gap has passed since this thread last ran it: calls that finish quickly
 * never pay for it.
 */
void chorus__wait_hook_run(double waiting_since);
/*
 * When the hook is next due in the wait that began at waiting_since (on
 * chorus__now's clock), for a waiter that sleeps until then.
 */
double chorus__wait_hook_due(double waiting_since);

#endif
