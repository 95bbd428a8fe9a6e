/* The threaded scenarios of the team tests: see team_threads.h. */
#include "team_threads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "team_cases.h"
#include "transports/shm/shm.h"

static const tl_coll_ops_t *ops = &tl_shm_coll_ops;

/* ---- teams over subsets, two teams per process, one thread each ---------- */

#define SUBSET_TEAMS 4
#define SUBSET_ROUNDS 12

/* Members of each team, as processes, in member order; -1 ends the list. */
static const int subset_teams[SUBSET_TEAMS][THREADS_SUBSET_PROCS + 1] = {
    {0, 2, 4, -1}, {1, 3, 4, -1}, {3, 0, -1}, {2, -1},
};

typedef struct {
    rig_t *rig;
    tl_coll_ctx_t *ctx;
    int team, proc, size, me;
    int rc;
} subset_thread_t;

/* A mix of every collective, each variant in turn, the v-forms with uneven blocks. */
static int mixed_calls(const rig_member_t *m, unsigned *salt, int rounds, const char *who)
{
    static const coll_type_t colls[] = {COLL_ALLREDUCE, COLL_ALLTOALL, COLL_ALLGATHER,
                                        COLL_REDUCE_SCATTER, COLL_BROADCAST, COLL_REDUCE,
                                        COLL_BARRIER};
    case_layout_t l;
    int rc = 0;

    case_layout(LAYOUT_UNEVEN, m->size, case_long(CHORUS_INT32), &l);
    for (int r = 0; r < rounds && rc == 0; r++) {
        for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]) && rc == 0; i++) {
            int vform = (colls[i] == COLL_ALLGATHER || colls[i] == COLL_REDUCE_SCATTER) && r % 2;
            int v = (r + (int)i) % m->ops->nvariants;
            case_t c = {.coll = colls[i], .in_place = r % 3 == 0, .dtype = CHORUS_INT32,
                        .op = CHORUS_SUM, .root = r % m->size,
                        .count = r % 2 ? 7 : case_long(CHORUS_INT32),
                        .layout = vform ? &l : NULL, .salt = (*salt)++};

            while (!case_runs(m, v, c.coll, vform))
                v = (v + 1) % m->ops->nvariants;
            c.variant = v;
            rc = case_run(m, &c, who);
        }
    }
    return rc;
}

static void *subset_thread(void *p)
{
    subset_thread_t *t = p;
    rig_member_t m;
    unsigned salt = (unsigned)t->team * 1000;
    char who[64];

    snprintf(who, sizeof(who), "team %d, process %d", t->team, t->proc);
    t->rc = rig_team_make(t->rig, t->team, ops, t->ctx, t->size, t->me, &m);
    if (t->rc == 0) {
        t->rc = mixed_calls(&m, &salt, SUBSET_ROUNDS, who);
        rig_team_destroy(&m);
    }
    return NULL;
}

int threads_subset_proc(rig_t *rig, int proc, void *arg)
{
    subset_thread_t t[SUBSET_TEAMS];
    pthread_t th[SUBSET_TEAMS];
    tl_coll_ctx_t *ctx;
    int nt = 0, rc = 0;

    (void)arg;
    if (rig_ctx(ops, proc, THREADS_SUBSET_PROCS, &ctx) != 0)
        return 2;
    for (int team = 0; team < SUBSET_TEAMS; team++) {
        int size = 0, me = -1;

        for (; subset_teams[team][size] >= 0; size++)
            me = subset_teams[team][size] == proc ? size : me;
        if (me < 0)
            continue;
        t[nt] = (subset_thread_t){.rig = rig, .ctx = ctx, .team = team, .proc = proc,
                                  .size = size, .me = me};
        if (pthread_create(&th[nt], NULL, subset_thread, &t[nt]) != 0)
            return 3;
        nt++;
    }
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        rc |= t[i].rc;
    }
    ops->ctx_destroy(ctx);
    return rc == 0 ? 0 : 1;
}

/* ---- one team's calls driven by two threads, skipped from a third -------- */

#define HANDOFF_CALLS 84

typedef enum { CALL_RUN_EVEN, CALL_RUN_ODD, CALL_SKIP, CALL_DROP } handoff_role_t;

/* Who takes call i: the even and odd drivers, or the skipper (skip, or finalize unrun). */
static handoff_role_t handoff_role(int i)
{
    if (i % 7 == 3)
        return CALL_SKIP;
    if (i % 11 == 5)
        return CALL_DROP;
    return i % 2 ? CALL_RUN_ODD : CALL_RUN_EVEN;
}

typedef struct {
    case_call_t calls[HANDOFF_CALLS];
    chorus__task_t *tasks[HANDOFF_CALLS];
    chorus_status_t status[HANDOFF_CALLS];
} handoff_t;

typedef struct {
    handoff_t *h;
    handoff_role_t role;
} handoff_thread_t;

static void *handoff_thread(void *p)
{
    handoff_thread_t *t = p;
    handoff_t *h = t->h;

    for (int i = 0; i < HANDOFF_CALLS; i++) {
        handoff_role_t role = handoff_role(i);

        if (t->role != CALL_SKIP && role == t->role) {
            h->status[i] = rig_drive(h->tasks[i]);
        } else if (t->role == CALL_SKIP && role == CALL_SKIP) {
            chorus__task_skip(h->tasks[i], CHORUS_ERR_INVALID_ARG);
        } else if (t->role == CALL_SKIP && role == CALL_DROP) {
            chorus__task_finalize(h->tasks[i]);
            h->tasks[i] = NULL;
        }
    }
    return NULL;
}

/* Create every call's task in order, as the core does under its post lock. */
static int handoff_create(const rig_member_t *m, handoff_t *h)
{
    static const coll_type_t colls[] = {COLL_ALLREDUCE, COLL_ALLTOALL, COLL_ALLGATHER,
                                        COLL_REDUCE_SCATTER, COLL_BROADCAST, COLL_BARRIER};

    for (int i = 0; i < HANDOFF_CALLS; i++) {
        case_t c = {.coll = colls[i % 6], .variant = (i / 6) % 2 ? rig_variant(ops, "shm_cma")
                                                                  : rig_variant(ops, "shm"),
                    .in_place = i % 4 == 1, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                    .root = i % m->size, .count = i % 3 ? 7 : case_long(CHORUS_FLOAT32),
                    .salt = (unsigned)i};

        if (!case_runs(m, c.variant, c.coll, 0))
            c.variant = rig_variant(ops, "shm");
        if (case_prepare(&c, m->me, m->size, &h->calls[i]) != 0 ||
            ops->task_create(m->team, &h->calls[i].a, c.variant, &h->tasks[i]) != CHORUS_OK)
            return -1;
        if (handoff_role(i) >= CALL_SKIP)
            case_expect_untouched(&h->calls[i]);
    }
    return 0;
}

static int handoff_check(const rig_member_t *m, handoff_t *h)
{
    int rc = 0;

    for (int i = 0; i < HANDOFF_CALLS; i++) {
        char name[200];

        case_name(&h->calls[i].c, m, name, sizeof(name));
        if (handoff_role(i) < CALL_SKIP && h->status[i] != CHORUS_OK) {
            fprintf(stderr, "handoff: call %d (%s): %s\n", i, name,
                    chorus_status_string(h->status[i]));
            rc = -1;
        } else if (handoff_role(i) == CALL_SKIP &&
                   (h->tasks[i]->state != CHORUS__TASK_DONE ||
                    h->tasks[i]->status != CHORUS_ERR_INVALID_ARG)) {
            fprintf(stderr, "handoff: skipped call %d is not over with its status\n", i);
            rc = -1;
        }
        if (rc == 0 && case_check(&h->calls[i], name) != 0)
            rc = -1;
    }
    return rc;
}

int threads_handoff_proc(rig_t *rig, int proc, void *arg)
{
    handoff_t *h = calloc(1, sizeof(*h));
    handoff_thread_t t[3] = {{h, CALL_RUN_EVEN}, {h, CALL_RUN_ODD}, {h, CALL_SKIP}};
    pthread_t th[3];
    tl_coll_ctx_t *ctx;
    rig_member_t m;
    int rc;

    (void)arg;
    if (h == NULL || rig_ctx(ops, proc, THREADS_HANDOFF_PROCS, &ctx) != 0 ||
        rig_team_make(rig, 0, ops, ctx, THREADS_HANDOFF_PROCS, proc, &m) != 0 ||
        handoff_create(&m, h) != 0)
        return 2;
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, handoff_thread, &t[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    rc = handoff_check(&m, h);
    for (int i = 0; i < HANDOFF_CALLS; i++) {
        chorus__task_finalize(h->tasks[i]);
        case_release(&h->calls[i]);
    }
    free(h);
    rig_team_destroy(&m);
    ops->ctx_destroy(ctx);
    return rc == 0 ? 0 : 1;
}
