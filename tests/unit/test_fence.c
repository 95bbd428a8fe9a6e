/*
 * Asymmetric fences (util/fence.h): whether the heavy side works is asked
 * once and answered alike from every thread, a heavy fence succeeds in
 * every scope that said it works, and a child forked after the parent
 * registered gets working heavy fences of its own.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/fence.h"

static const chorus__fence_scope_t scopes[] = {CHORUS__FENCE_PROCESS, CHORUS__FENCE_NODE};
static const char *const scope_names[] = {"process", "node"};

static void *ask(void *arg)
{
    int *ready = arg;

    for (int s = 0; s < 2; s++)
        ready[s] = chorus__fence_ready(scopes[s]);
    return NULL;
}

Test(fence, ready_answers_alike_from_every_thread)
{
    int here[2], there[2];
    pthread_t t;

    ask(here);
    cr_assert_eq(pthread_create(&t, NULL, ask, there), 0);
    pthread_join(t, NULL);
    for (int s = 0; s < 2; s++) {
        cr_expect_eq(here[s], there[s], "%s scope: %d here, %d in another thread",
                     scope_names[s], here[s], there[s]);
        cr_expect_eq(chorus__fence_ready(scopes[s]), here[s], "%s scope changed its answer",
                     scope_names[s]);
    }
}

/* 0 when every scope that says it is ready has a heavy fence that succeeds. */
static int heavy_where_ready(void)
{
    int failed = 0;

    for (int s = 0; s < 2; s++)
        if (chorus__fence_ready(scopes[s]) && chorus__fence_heavy(scopes[s]) != 0)
            failed |= 1 << s;
    return failed;
}

Test(fence, heavy_succeeds_where_ready)
{
    cr_expect_eq(heavy_where_ready(), 0, "heavy fences failed in scopes 0x%x (1: process, "
                 "2: node) that said they work", heavy_where_ready());
    if (!chorus__fence_ready(CHORUS__FENCE_PROCESS) && !chorus__fence_ready(CHORUS__FENCE_NODE))
        cr_log_warn("this kernel has no expedited membarrier: both sides take full fences");
}

Test(fence, a_forked_child_has_its_own)
{
    int parent = heavy_where_ready(), status;
    pid_t pid;

    cr_assert_eq(parent, 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(heavy_where_ready());
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "in the child, heavy fences failed in scopes 0x%x (1: process, 2: node)",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
