#include "util/fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Registered by process: a child forked after a registration registers itself anew. */
static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t fence_pid;
static int fence_ok[2];

static long membarrier(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

static void fence_register(void)
{
    long cmds = membarrier(MEMBARRIER_CMD_QUERY);

    fence_ok[CHORUS__FENCE_PROCESS] = fence_ok[CHORUS__FENCE_NODE] = 0;
    if (cmds < 0)
        return;
    fence_ok[CHORUS__FENCE_PROCESS] =
        (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    fence_ok[CHORUS__FENCE_NODE] =
        (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
        membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

int chorus__fence_ready(chorus__fence_scope_t scope)
{
    int ok;

    pthread_mutex_lock(&fence_lock);
    if (fence_pid != getpid()) {
        fence_register();
        fence_pid = getpid();
    }
    ok = fence_ok[scope];
    pthread_mutex_unlock(&fence_lock);
    return ok;
}

int chorus__fence_heavy(chorus__fence_scope_t scope)
{
    return membarrier(scope == CHORUS__FENCE_PROCESS ? MEMBARRIER_CMD_PRIVATE_EXPEDITED
                                                     : MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0
               ? 0
               : -1;
}
