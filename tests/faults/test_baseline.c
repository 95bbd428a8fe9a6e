/*
 * Resources after faults, in one process. This process is rank 0 of a
 * series of two-rank communicators (rank 1 is a forked child each time).
 * Before the first communicator it counts its open descriptors and threads
 * and lists /dev/shm; after each fault (peer killed, abort from another
 * thread, timeout) and chorus_comm_destroy, the counts must be back to that
 * baseline. Abort from another thread must make the blocked call return
 * CHORUS_ERR_ABORTED within 1 s, and a new communicator created afterwards
 * in the same process must work.
 *
 * Children are forked only while this process has no thread of its own, so
 * the test also runs under ThreadSanitizer.
 *
 * Exit: 0 passed, 1 failed.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_case.h"
#include "coll/harness.h"
#include "lib/dev_shm.h"
#include "lib/proc_res.h"

#define BL_TIMEOUT_S 2.0
#define BL_ABORT_BOUND_S 1.0
#define BL_CHILD_DEADLINE_S 20.0

typedef enum { BL_OK, BL_PEER_KILLED, BL_ABORT, BL_TIMEOUT } bl_fault_t;
static const char *const bl_names[] = {"no fault", "peer killed", "abort from a thread",
                                       "timeout"};

typedef struct {
    int fds, threads;
    dev_shm_list_t shm;
} bl_snapshot_t;

static void bl_snapshot(bl_snapshot_t *s)
{
    s->fds = proc_dir_entries("/proc/self/fd");
    s->threads = proc_dir_entries("/proc/self/task");
    dev_shm_list(&s->shm);
}

/*
 * Back to the baseline? /dev/shm is shared with every process of the
 * machine, so a new entry fails the test only when it is chorus's.
 */
static int bl_compare(const bl_snapshot_t *base, const char *when)
{
    bl_snapshot_t now;
    int ok = 1;

    bl_snapshot(&now);
    if (now.fds != base->fds || now.threads != base->threads) {
        printf("  FAIL after %s: %d fds and %d threads, baseline %d and %d\n", when, now.fds,
               now.threads, base->fds, base->threads);
        ok = 0;
    }
    for (int i = 0; i < now.shm.n; i++) {
        const char *name = now.shm.names[i];

        if (dev_shm_listed(&base->shm, name))
            continue;
        if (strstr(name, "chorus") != NULL) {
            printf("  FAIL after %s: /dev/shm/%s was left behind\n", when, name);
            ok = 0;
        } else {
            printf("  note: /dev/shm/%s appeared (not chorus's name)\n", name);
        }
    }
    return ok;
}

/*
 * The fault-free call: two non-blocking collectives in flight at once, one
 * polled with chorus_request_test, so that the user thread and the progress
 * thread share requests the way they do under load. x becomes the sum.
 */
static chorus_status_t bl_nonblocking(chorus_comm_t comm, int32_t x[4])
{
    int32_t b[3] = {7, 7, 7};
    chorus_request_t ra, rb;
    chorus_status_t status;
    int done = 0;

    if (chorus_comm_rank(comm) != 0)
        b[0] = b[1] = b[2] = -1;
    status = chorus_iallreduce(x, x, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL, &ra);
    if (status != CHORUS_OK)
        return status;
    status = chorus_ibroadcast(b, b, 3, CHORUS_INT32, 0, comm, NULL, &rb);
    if (status != CHORUS_OK) {
        chorus_request_free(ra);
        return status;
    }
    for (int spins = 0; !done && status == CHORUS_OK && spins < 100000; spins++) {
        status = chorus_request_test(ra, &done);
        if (!done)
            usleep(100);
    }
    if (status == CHORUS_OK)
        status = chorus_request_free(ra);
    else
        chorus_request_free(ra);
    if (chorus_request_free(rb) != CHORUS_OK || b[0] != 7 || b[2] != 7)
        status = CHORUS_ERR_INTERNAL;
    return status;
}

/* Rank 1: what the child does for each fault. */
static int bl_child(bl_fault_t fault, const char *addr, const char *secret)
{
    chorus_comm_t comm;
    int32_t x[4] = {1, 2, 3, 4};
    chorus_status_t status;

    if (chorus_comm_create(1, 2, addr, secret, BL_TIMEOUT_S, &comm) != CHORUS_OK)
        return 100;
    switch (fault) {
    case BL_OK:
        status = bl_nonblocking(comm, x);
        break;
    case BL_PEER_KILLED:
        /* Loops until the parent kills it. */
        do
            status = chorus_allreduce(x, x, 4, CHORUS_INT32, CHORUS_MAX, comm, NULL);
        while (status == CHORUS_OK);
        break;
    default:
        /* Joins no collective: rank 0 blocks until its abort or its timeout. */
        usleep((useconds_t)((BL_TIMEOUT_S + 1.5) * 1e6));
        status = CHORUS_OK;
        break;
    }
    chorus_comm_destroy(comm);
    return status == CHORUS_OK ? 0 : 1;
}

typedef struct {
    chorus_comm_t comm;
    double abort_t;
} bl_abort_t;

static void *bl_abort_later(void *arg)
{
    bl_abort_t *a = arg;

    usleep(300 * 1000);
    a->abort_t = fault_now();
    chorus_comm_abort(a->comm);
    return NULL;
}

/* Rank 0's part; returns 1 when the call ended as the fault requires. */
static int bl_parent(bl_fault_t fault, chorus_comm_t comm, pid_t child)
{
    int32_t x[4] = {1, 2, 3, 4};
    chorus_status_t status = CHORUS_OK;
    bl_abort_t ab = {comm, 0};
    pthread_t thread;
    double start = fault_now(), end;

    switch (fault) {
    case BL_OK:
        return bl_nonblocking(comm, x) == CHORUS_OK && x[0] == 2 && x[3] == 8;
    case BL_PEER_KILLED:
        if (chorus_allreduce(x, x, 4, CHORUS_INT32, CHORUS_MAX, comm, NULL) != CHORUS_OK)
            return 0;
        kill(child, SIGKILL);
        start = fault_now();
        while (status == CHORUS_OK && fault_now() - start < 2 * BL_TIMEOUT_S)
            status = chorus_allreduce(x, x, 4, CHORUS_INT32, CHORUS_MAX, comm, NULL);
        end = fault_now();
        printf("  %s %.3f s after the kill\n", chorus_status_string(status), end - start);
        return status == CHORUS_ERR_PEER_FAILED && end - start <= 2 * BL_TIMEOUT_S;
    case BL_ABORT:
        if (pthread_create(&thread, NULL, bl_abort_later, &ab) != 0)
            return 0;
        status = chorus_allreduce(x, x, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        end = fault_now();
        pthread_join(thread, NULL);
        printf("  %s %.3f s after the abort\n", chorus_status_string(status), end - ab.abort_t);
        return status == CHORUS_ERR_ABORTED && end - ab.abort_t <= BL_ABORT_BOUND_S;
    case BL_TIMEOUT:
        status = chorus_allreduce(x, x, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        end = fault_now();
        printf("  %s after %.3f s\n", chorus_status_string(status), end - start);
        return status == CHORUS_ERR_TIMEOUT && end - start >= BL_TIMEOUT_S - 0.05 &&
               end - start <= BL_TIMEOUT_S + 1.0;
    }
    return 0;
}

/* Wait for the child, killing it at the deadline; returns its exit status or -1. */
static int bl_reap(pid_t child)
{
    double start = fault_now();
    int st;

    while (waitpid(child, &st, WNOHANG) == 0) {
        if (fault_now() - start > BL_CHILD_DEADLINE_S) {
            printf("  FAIL: rank 1 still running after %.0f s: killed\n", BL_CHILD_DEADLINE_S);
            kill(child, SIGKILL);
            waitpid(child, &st, 0);
            return -1;
        }
        usleep(10 * 1000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int bl_scenario(bl_fault_t fault, const bl_snapshot_t *base)
{
    char addr[64], secret[40];
    chorus_comm_t comm;
    chorus_status_t status;
    pid_t child;
    int ok, child_rc, want_rc;

    printf("%s:\n", bl_names[fault]);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
    snprintf(secret, sizeof(secret), "baseline-%d-%d", (int)getpid(), (int)fault);
    fflush(stdout);
    child = fork();
    if (child == 0)
        _exit(bl_child(fault, addr, secret));
    status = chorus_comm_create(0, 2, addr, secret, BL_TIMEOUT_S, &comm);
    if (status != CHORUS_OK) {
        printf("  FAIL: chorus_comm_create: %s\n", chorus_status_string(status));
        kill(child, SIGKILL);
        bl_reap(child);
        return 0;
    }
    ok = bl_parent(fault, comm, child);
    status = chorus_comm_destroy(comm);
    if (status != CHORUS_OK) {
        printf("  FAIL: chorus_comm_destroy: %s\n", chorus_status_string(status));
        ok = 0;
    }
    child_rc = bl_reap(child);
    want_rc = fault == BL_PEER_KILLED ? 128 + SIGKILL : 0;
    if (child_rc != want_rc) {
        printf("  FAIL: rank 1 exited with %d, expected %d\n", child_rc, want_rc);
        ok = 0;
    }
    ok &= bl_compare(base, bl_names[fault]);
    printf("  %s\n", ok ? "PASS" : "FAIL");
    return ok;
}

static void *bl_nothing(void *arg)
{
    return arg;
}

static void bl_fork_warmup(void)
{
    pid_t child = fork();

    if (child == 0)
        _exit(0);
    if (child > 0)
        waitpid(child, NULL, 0);
}

int main(void)
{
    static const bl_fault_t order[] = {BL_OK, BL_PEER_KILLED, BL_ABORT, BL_OK, BL_TIMEOUT,
                                       BL_OK};
    bl_snapshot_t base;

    /* The TCP path's baseline; the shm path's faults are tests/shm/test_shm_faults. */
    setenv("CHORUS_SHM", "0", 1);
    pthread_t warmup;
    int pass = 1;

    /*
     * Sanitizer runtimes (ThreadSanitizer) start a helper thread of their own
     * at the first pthread_create: one throwaway thread first puts it in the
     * baseline.
     */
    if (pthread_create(&warmup, NULL, bl_nothing, NULL) == 0)
        pthread_join(warmup, NULL);
    /*
     * A library may start threads when it is loaded and stop them before a
     * fork (OpenBLAS's pool, which chorus_fc_weight_grad's products use, does
     * both): one throwaway child first, so that the baseline is what every
     * scenario, each of which forks, comes back to.
     */
    bl_fork_warmup();
    bl_snapshot(&base);
    printf("baseline: %d fds, %d threads, %d entries in /dev/shm\n", base.fds, base.threads,
           base.shm.n);
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        pass &= bl_scenario(order[i], &base);
    return pass ? 0 : 1;
}
