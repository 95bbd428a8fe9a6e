/* The team rig: see team_rig.h. */
#include "team_rig.h"

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Longest wait of rig_barrier. */
#define RIG_BARRIER_DEADLINE_S 30.0

struct rig {
    _Atomic int arrived[RIG_MAX_TEAMS];
    _Atomic int generation[RIG_MAX_TEAMS];
    unsigned char cards[RIG_MAX_TEAMS][RIG_MAX_PROCS][TL_TEAM_CARD_MAX];
    uint32_t flags[RIG_MAX_TEAMS][RIG_MAX_PROCS];
    int note[RIG_MAX_TEAMS][RIG_MAX_PROCS];
};

static double rig_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

rig_t *rig_create(void)
{
    rig_t *rig = mmap(NULL, sizeof(*rig), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);

    return rig == MAP_FAILED ? NULL : rig;
}

void rig_destroy(rig_t *rig)
{
    if (rig != NULL)
        munmap(rig, sizeof(*rig));
}

static void rig_reap(const pid_t *pids, int nprocs, double deadline_s, int *status)
{
    double start = rig_now();
    int left = nprocs;

    for (int p = 0; p < nprocs; p++)
        status[p] = -1;
    while (left > 0 && rig_now() - start < deadline_s) {
        for (int p = 0; p < nprocs; p++) {
            int ws;

            if (status[p] != -1 || waitpid(pids[p], &ws, WNOHANG) != pids[p])
                continue;
            status[p] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            left--;
        }
        usleep(2000);
    }
    for (int p = 0; p < nprocs; p++) {
        if (status[p] != -1)
            continue;
        fprintf(stderr, "rig: process %d still runs after %.0f s: killed\n", p, deadline_s);
        kill(pids[p], SIGKILL);
        waitpid(pids[p], NULL, 0);
    }
}

int rig_run(rig_t *rig, int nprocs, double deadline_s,
            int (*fn)(rig_t *rig, int proc, void *arg), void *arg, int *status)
{
    pid_t pids[RIG_MAX_PROCS];

    if (nprocs < 1 || nprocs > RIG_MAX_PROCS)
        return -1;
    memset(rig, 0, sizeof(*rig));
    fflush(NULL);
    for (int p = 0; p < nprocs; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            int rc = fn(rig, p, arg);

            fflush(NULL);
            _exit(rc);
        }
        if (pids[p] < 0) {
            perror("rig: fork");
            for (int q = 0; q < p; q++)
                kill(pids[q], SIGKILL);
            nprocs = p;
            rig_reap(pids, nprocs, deadline_s, status);
            return -1;
        }
    }
    rig_reap(pids, nprocs, deadline_s, status);
    for (int p = 0; p < nprocs; p++) {
        if (status[p] != 0)
            return -1;
    }
    return 0;
}

int rig_ctx(const tl_coll_ops_t *ops, int proc, int nprocs, tl_coll_ctx_t **ctx_p)
{
    /* A transport turns itself off in a context of one process; a team of one is still made. */
    tl_coll_ctx_params_t params = {.rank = proc, .size = nprocs > 1 ? nprocs : 2};

    if (ops->ctx_create(&params, ctx_p) != CHORUS_OK || *ctx_p == NULL) {
        fprintf(stderr, "rig: process %d: %s context not created\n", proc, ops->name);
        return -1;
    }
    return 0;
}

int rig_barrier(rig_t *rig, int t, int size)
{
    int gen = atomic_load(&rig->generation[t]);
    double start = rig_now();

    if (atomic_fetch_add(&rig->arrived[t], 1) == size - 1) {
        atomic_store(&rig->arrived[t], 0);
        atomic_fetch_add(&rig->generation[t], 1);
        return 0;
    }
    while (atomic_load(&rig->generation[t]) == gen) {
        if (rig_now() - start > RIG_BARRIER_DEADLINE_S) {
            fprintf(stderr, "rig: barrier of team %d (%d members) timed out\n", t, size);
            return -1;
        }
        sched_yield();
    }
    return 0;
}

int rig_team_make(rig_t *rig, int t, const tl_coll_ops_t *ops, tl_coll_ctx_t *ctx, int size,
                  int me, rig_member_t *m)
{
    unsigned char cards[RIG_MAX_PROCS * TL_TEAM_CARD_MAX];
    uint32_t agreed = ~0u;
    void *pending = NULL;
    size_t len = 0;

    memset(m, 0, sizeof(*m));
    if (ops->team_card(ctx, size, me, rig->cards[t][me], &len, &pending) != CHORUS_OK ||
        rig_barrier(rig, t, size) != 0)
        return -1;
    for (int j = 0; j < size; j++)
        memcpy(cards + (size_t)j * TL_TEAM_CARD_MAX, rig->cards[t][j], TL_TEAM_CARD_MAX);
    if (ops->team_create(ctx, pending, cards, size, me, &m->team, &rig->flags[t][me]) !=
        CHORUS_OK || rig_barrier(rig, t, size) != 0)
        return -1;
    for (int j = 0; j < size; j++)
        agreed &= rig->flags[t][j];
    /* Every member has read the flags before the board's entry is used again. */
    if (rig_barrier(rig, t, size) != 0 || m->team == NULL || !(agreed & TL_TEAM_OK)) {
        fprintf(stderr, "rig: team %d, member %d of %d: no team (flags 0x%x)\n", t, me, size,
                (unsigned)agreed);
        if (m->team != NULL)
            ops->team_destroy(m->team);
        m->team = NULL;
        return -1;
    }
    ops->team_seal(m->team, agreed, 0);
    *m = (rig_member_t){.ops = ops, .ctx = ctx, .team = m->team, .flags = agreed, .me = me,
                        .size = size};
    return 0;
}

void rig_team_destroy(rig_member_t *m)
{
    if (m->team != NULL)
        m->ops->team_destroy(m->team);
    m->team = NULL;
}

chorus_status_t rig_drive(chorus__task_t *task)
{
    double start = rig_now();
    chorus_status_t status = chorus__task_post(task);

    while (status == CHORUS_OK) {
        int rc = chorus__task_progress(task);

        if (rc == 1)
            return task->status;
        if (rc < 0) {
            chorus__task_fail(task, (chorus_status_t)rc);
            return (chorus_status_t)rc;
        }
        if (rig_now() - start > RIG_CALL_DEADLINE_S) {
            fprintf(stderr, "rig: a %s call took more than %.0f s\n", task->ops->name,
                    RIG_CALL_DEADLINE_S);
            chorus__task_fail(task, CHORUS_ERR_TIMEOUT);
            return CHORUS_ERR_TIMEOUT;
        }
        chorus__task_wait(task, 1000);
    }
    return status;
}

chorus_status_t rig_call(const rig_member_t *m, const coll_args_t *a, int variant)
{
    chorus__task_t *task;
    chorus_status_t status = m->ops->task_create(m->team, a, variant, &task);

    if (status != CHORUS_OK)
        return status;
    status = rig_drive(task);
    chorus__task_finalize(task);
    return status;
}

int *rig_note(rig_t *rig, int t, int proc)
{
    return &rig->note[t][proc];
}

int rig_variant(const tl_coll_ops_t *ops, const char *name)
{
    for (int v = 0; v < ops->nvariants; v++) {
        if (strcmp(ops->variants[v].name, name) == 0)
            return v;
    }
    return -1;
}
