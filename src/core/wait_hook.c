/* The wait hook (wait_hook.h). */
#include "core/wait_hook.h"

#include <stdatomic.h>

#include "util/time.h"

static _Atomic(chorus__wait_hook_fn) wait_hook;
static _Thread_local double last_run;

void chorus__wait_hook_set(chorus__wait_hook_fn hook)
{
    atomic_store(&wait_hook, hook);
}

int chorus__wait_hook_on(void)
{
    return atomic_load(&wait_hook) != NULL;
}

void chorus__wait_hook_run(double waiting_since)
{
    chorus__wait_hook_fn hook = atomic_load(&wait_hook);
    double now;

    if (hook == NULL)
        return;
    now = chorus__now();
    if (now - waiting_since < CHORUS__WAIT_HOOK_AFTER_S || now - last_run < CHORUS__WAIT_HOOK_GAP_S)
        return;
    last_run = now;
    hook();
}
