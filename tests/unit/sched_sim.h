/*
 * sched_sim: runs one collective call of p ranks inside one process.
 *
 * Each rank gets its own schedule (built by alg->build from its own
 * coll_args_t) and its own port to an in-memory network that matches
 * messages by (source, destination, tag). The ranks'
 * executors (coll_sched_progress) are driven round-robin until every rank
 * has finished; a round in which no rank moves, or more rounds than
 * max_rounds, is reported as stuck, which is how deadlocks show up.
 *
 * Typical use in a Criterion test:
 *
 *     coll_args_t args[8];
 *     for (int r = 0; r < p; r++)
 *         args[r] = (coll_args_t){ .coll = COLL_ALLREDUCE, .sendbuf = in[r],
 *                                  .recvbuf = out[r], .count = n, .dtype = dt,
 *                                  .op = op, .rank = r, .size = p,
 *                                  .chunk_bytes = 4096 };
 *     cr_assert_eq(sched_sim_run(&coll_ring_allreduce, args, p), 0);
 *     ... check out[r] element by element ...
 *
 * With a layout, every node of more than one rank can get a team of an
 * in-memory collective transport (opts.teams), as a node served by shared
 * memory has: a team call completes once every member has posted its call
 * of the same turn, computed by a plain reference implementation of the
 * collective (reductions in member order, AVG divided by the team's size);
 * members whose calls of one turn differ fail it and are counted.
 */
#ifndef CHORUS_TESTS_SCHED_SIM_H
#define CHORUS_TESTS_SCHED_SIM_H

#include <stddef.h>
#include "coll/coll.h"

#define SCHED_SIM_MAX_RANKS 64

typedef struct {
    /*
     * 1: a send completes as soon as it is posted (its data is copied into
     * the fake network), like a transport with unlimited eager buffering.
     * 0: a send completes only once the matching receive is posted
     * (rendezvous), which exposes schedules that rely on buffering.
     */
    int eager;
    /*
     * 1: a matched request becomes done only on a later progress call of
     * the owning rank's context, so the executor sees requests that stay
     * posted for a while. 0: done at match time (inside send_nb/recv_nb).
     */
    int deferred;
    /* 0: ranks are progressed in order 0..p-1; otherwise a per-round shuffle seeded by it. */
    unsigned seed;
    /* Bound on rounds (one progress call per unfinished rank); 0 picks 1,000,000. */
    long max_rounds;
    /*
     * A rank that is dead from the start (-1: none): its schedule is built
     * but never progressed, and every request to or from it fails with
     * CHORUS_ERR_PEER_FAILED at post time.
     */
    int dead_rank;
    /*
     * 1: each round skips each rank with probability 1/2 (seeded by seed),
     * so ranks drift apart, as real ones do.
     */
    int skew;
    /*
     * A rank that arrives late (-1: none): it is not progressed before
     * round late_rounds. A barrier must keep everybody else waiting.
     */
    int late_rank;
    long late_rounds;
    /* The ranks' layout, for algorithms that split work by node (NULL: none). */
    const topo_layout_t *layout;
    /*
     * Node teams (needs layout): SCHED_SIM_TEAMS_NONE, or a team on every
     * node of more than one rank whose transport runs every collective, with
     * the v-forms of allgather and reduce_scatter (SCHED_SIM_TEAMS_VFORMS) or
     * without them (SCHED_SIM_TEAMS_PLAIN). With deferred, a team call that
     * is over completes only on a later progress of its rank, as a transfer.
     */
    int teams;
    /* Where every rank's schedule records its waits (NULL: nowhere); rank r's track is r. */
    chorus__trace_t *trace;
} sched_sim_opts_t;

enum { SCHED_SIM_TEAMS_NONE = 0, SCHED_SIM_TEAMS_VFORMS, SCHED_SIM_TEAMS_PLAIN };

/*
 * Defaults used by sched_sim_run: eager sends, immediate completion, in
 * order, no dead rank, no layout, no teams, no trace.
 */
#define SCHED_SIM_OPTS_DEFAULT { 1, 0, 0, 0, -1, 0, -1, 0, NULL, SCHED_SIM_TEAMS_NONE, NULL }

typedef struct {
    long rounds;                /* rounds run */
    long messages;              /* sends posted */
    size_t bytes;               /* bytes sent */
    long zero_byte_posts;       /* send_nb/recv_nb calls with 0 bytes (should stay 0) */
    long size_mismatches;       /* matched messages whose length differs from the receive size */
    long unmatched;             /* sends or receives left unmatched at the end */
    long send_buffer_changed;   /* sends whose buffer changed between post and completion */
    long team_calls;            /* team calls completed, each counted once for all members */
    long team_mismatches;       /* team calls whose members' arguments differed */
    int stuck;                  /* 1: ranks remained unfinished and nobody moved */
    /* Per rank: 1 complete, 0 unfinished, or the negative status its executor returned. */
    int result[SCHED_SIM_MAX_RANKS];
    int failed_peer[SCHED_SIM_MAX_RANKS];   /* sched.failed_peer of each rank at the end */
    long finish_round[SCHED_SIM_MAX_RANKS]; /* round in which each rank finished, or -1 */
} sched_sim_stats_t;

/*
 * Build and run alg for p ranks (1 <= p <= SCHED_SIM_MAX_RANKS);
 * args_per_rank[r] is rank r's call and must have rank == r and size == p.
 * Returns 0 when every rank completed, no zero-byte transfer was posted,
 * every message matched a receive of exactly its size, nothing was left
 * unmatched, every tag carried the call's tag base, no send buffer changed
 * while its send was in flight (checked when completion is not immediate)
 * and every team call's members agreed; nonzero otherwise, with a one-line
 * reason on stderr.
 */
int sched_sim_run(const coll_alg_t *alg, const coll_args_t *args_per_rank, int p);

/*
 * The same with options (NULL: defaults) and statistics (NULL: not wanted).
 * With a dead rank the return value is nonzero by design; read stats_p.
 */
int sched_sim_run_opts(const coll_alg_t *alg, const coll_args_t *args_per_rank, int p,
                       const sched_sim_opts_t *opts, sched_sim_stats_t *stats_p);

/*
 * Teams of the in-memory collective transport for the nodes of layout (as
 * opts.teams), for building schedules without running them; their calls
 * never complete. Destroy them after the schedules built with them.
 */
typedef struct sched_sim_teams sched_sim_teams_t;

int sched_sim_teams_create(const topo_layout_t *layout, int teams, sched_sim_teams_t **teams_p);
/* rank's environment: layout, its node team (NULL alone on its node), the transport's pricing. */
void sched_sim_teams_env(sched_sim_teams_t *teams, int rank, coll_env_t *env);
void sched_sim_teams_destroy(sched_sim_teams_t *teams);

#endif
