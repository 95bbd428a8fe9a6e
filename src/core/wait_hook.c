/* The wait hook (wait_hook.h). */
#include "core/wait_hook.h"

#include <stdatomic.h>

#include "util/time.h"

static _Atomic(chorus__wait_hook_fn) wait_hook;

/* This thread's wait that last ran the hook: its start, the last run and the gap after it. */
static _Thread_local double run_wait = -1, last_run, gap;

void chorus__wait_hook_set(chorus__wait_hook_fn hook)
{
    atomic_store(&wait_hook, hook);
}

int chorus__wait_hook_on(void)
{
    return atomic_load(&wait_hook) != NULL;
}

double chorus__wait_hook_due(double waiting_since)
{
    if (waiting_since != run_wait)
        return waiting_since + CHORUS__WAIT_HOOK_AFTER_S;
    return last_run + gap;
}

void chorus__wait_hook_run(double waiting_since)
{
    chorus__wait_hook_fn hook = atomic_load(&wait_hook);
    double now;

    if (hook == NULL)
        return;
    now = chorus__now();
    if (now < chorus__wait_hook_due(waiting_since))
        return;
    if (waiting_since != run_wait) {
        run_wait = waiting_since;
        gap = CHORUS__WAIT_HOOK_GAP_S;
    } else {
        gap *= 2;
        if (gap > CHORUS__WAIT_HOOK_MAX_GAP_S)
            gap = CHORUS__WAIT_HOOK_MAX_GAP_S;
    }
    last_run = now;
    hook();
}
