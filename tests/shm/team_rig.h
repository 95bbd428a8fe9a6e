/*
 * A rig for testing a collective transport's teams without the core: fork
 * processes on this machine, let them make teams with the transport's own
 * three steps (team_card, team_create, team_seal), exchanging cards and
 * flags through a board in shared memory that the parent maps before
 * forking, and drive calls as tasks (task_create, post, progress) with a
 * deadline. Used by the Criterion suite test_shm_team and by the plain
 * program shm_team_threads (which ThreadSanitizer can run).
 */
#ifndef CHORUS_TEST_TEAM_RIG_H
#define CHORUS_TEST_TEAM_RIG_H

#include <stddef.h>
#include <stdint.h>

#include "transports/base/team.h"

#define RIG_MAX_PROCS 8
#define RIG_MAX_TEAMS 16
/* Longest a single call may take before the rig fails it. */
#define RIG_CALL_DEADLINE_S 20.0

typedef struct rig rig_t;

/* One process's membership of one team. */
typedef struct {
    const tl_coll_ops_t *ops;
    tl_coll_ctx_t *ctx;
    tl_team_t *team;
    uint32_t flags;             /* agreed by every member */
    int me, size;
} rig_member_t;

/* The board, mapped shared; destroyed by the parent after the processes are gone. */
rig_t *rig_create(void);
void rig_destroy(rig_t *rig);

/*
 * Fork nprocs processes, each running fn(rig, proc, arg) and exiting with
 * its result (0 = passed); kill them all after deadline_s. status[p]: the
 * exit code, 128 + signal when killed, -1 at the deadline. Returns 0 when
 * every process exited 0.
 */
int rig_run(rig_t *rig, int nprocs, double deadline_s,
            int (*fn)(rig_t *rig, int proc, void *arg), void *arg, int *status);

/* In a forked process: the transport's context for this process (proc of nprocs). */
int rig_ctx(const tl_coll_ops_t *ops, int proc, int nprocs, tl_coll_ctx_t **ctx_p);

/*
 * Team t (a board index, the same on every member) of size members, this
 * process being member me: card, wait for every card, create, wait for
 * every member's flags, seal with their AND. 0, or -1 with a message.
 */
int rig_team_make(rig_t *rig, int t, const tl_coll_ops_t *ops, tl_coll_ctx_t *ctx, int size,
                  int me, rig_member_t *m);
void rig_team_destroy(rig_member_t *m);

/* Every member of team t has arrived (a barrier on the board); -1 after the deadline. */
int rig_barrier(rig_t *rig, int t, int size);

/* A call on the team, run to its end here: its status (or TIMEOUT after the deadline). */
chorus_status_t rig_call(const rig_member_t *m, const coll_args_t *a, int variant);
/* Drive a created task to its end: its status. */
chorus_status_t rig_drive(chorus__task_t *task);

/* A word per (team, process) of the board for results the parent reads after rig_run. */
int *rig_note(rig_t *rig, int t, int proc);

/* The variant of ops named name, or -1. */
int rig_variant(const tl_coll_ops_t *ops, const char *name);

#endif
