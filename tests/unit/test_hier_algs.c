/*
 * The hierarchical algorithms run through the schedule simulator over many
 * job layouts (several nodes, one node, one rank per node, uneven nodes and
 * nodes whose ranks are not consecutive), every dtype, counts from 0 to
 * large, every root, in place and out of place, with eager, rendezvous and
 * skewed progress, and are checked exactly on every rank: without node
 * teams (node-local stages through the port), with teams of a collective
 * transport that runs the v-forms, and with teams that do not (stages with
 * blocks of differing length or place fall back to the port). A second
 * check reads the schedules themselves: each byte crosses to each other
 * node exactly once, and with teams only the network stage sends at all.
 *
 * Reductions use small integers whose result is exact in every dtype and
 * independent of the order of reduction (as in test_tree_algs.c).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/ring.h"
#include "reduce/reduce.h"
#include "tests/unit/exact_vals.h"
#include "tests/unit/sched_sim.h"
#include "topology/layout.h"
#include "util/config.h"

#define GUARD_BYTES 64
#define POISON 0x5a
#define BIG_COUNT 100003

/* The algorithms under test: one line per algorithm. */
static const struct {
    const coll_alg_t *alg;
    coll_type_t coll;
} hier_algs[] = {
    {&coll_hier_allreduce, COLL_ALLREDUCE},
    {&coll_hier_allgather, COLL_ALLGATHER},
    {&coll_hier_broadcast, COLL_BROADCAST},
    {&coll_hier_reduce_scatter, COLL_REDUCE_SCATTER},
};
#define NALGS (sizeof(hier_algs) / sizeof(hier_algs[0]))

static const size_t small_counts[] = {0, 1, 7, 1023};

/* ---- layouts ---------------------------------------------------------------- */

/* Ranks per node, consecutive ranks filling nodes in order; "cyclic" is node_of[r] = r % 2. */
static const char *const layout_names[] = {"2,2", "3,2,1", "1,3", "2,1,1,2", "4", "1,1,1",
                                           "cyclic"};
#define NLAYOUTS (sizeof(layout_names) / sizeof(layout_names[0]))
#define CYCLIC_RANKS 5

static topo_layout_t *make_layout(size_t k)
{
    topo_layout_t *l = NULL;

    if (strcmp(layout_names[k], "cyclic") == 0) {
        int node_of[CYCLIC_RANKS];

        for (int r = 0; r < CYCLIC_RANKS; r++)
            node_of[r] = r % 2;
        cr_assert_eq(topo_layout_from_nodes(node_of, CYCLIC_RANKS, &l), CHORUS_OK);
    } else {
        cr_assert_eq(topo_layout_parse(layout_names[k], &l), CHORUS_OK, "%s", layout_names[k]);
    }
    cr_assert_leq(l->size, SCHED_SIM_MAX_RANKS);
    return l;
}

/* ---- values in every dtype ---------------------------------------------------- */

/* Data that differs per rank and per element, so a block from the wrong rank or place shows. */
static double rank_val(chorus_dtype_t dt, int r, size_t i)
{
    long v = (long)((r * 5 + i) % 13);

    return exact_is_unsigned(dt) ? (double)v : (double)(v - 6);
}

/* ---- one call ------------------------------------------------------------------ */

/* How the simulator drives the ranks. */
enum { MODE_EAGER = 0, MODE_RENDEZVOUS, MODE_SKEW, MODE_COUNT };
static const char *const mode_names[] = {"eager", "rendezvous", "skew"};
/* How the nodes are served: by index SCHED_SIM_TEAMS_NONE, _VFORMS, _PLAIN. */
static const char *const team_names[] = {"no teams", "teams", "teams without v-forms"};
/* Each mode its own chunk size, so that small counts are cut into several chunks too. */
static const size_t mode_chunk_bytes[] = {4096, 256, 1000};

typedef struct {
    const coll_alg_t *alg;
    coll_type_t coll;
    const topo_layout_t *l;
    const char *lname;
    int p, root, inplace, mode, teams;
    size_t count, esize, send_bytes, recv_bytes;
    chorus_dtype_t dt;
    chorus_op_t op;
    unsigned char *send[SCHED_SIM_MAX_RANKS];   /* NULL where the call passes none */
    unsigned char *recv[SCHED_SIM_MAX_RANKS];
    unsigned char *orig[SCHED_SIM_MAX_RANKS];   /* separate sendbuf with guards, as given */
    coll_args_t args[SCHED_SIM_MAX_RANKS];
    sched_sim_stats_t stats;
} world_t;

#define CASE_FMT "%s %s layout %s count=%zu %s %s root=%d %s %s %s"
#define CASE_ARGS(w)                                                                       \
    coll_type_name((w)->coll), (w)->alg->name, (w)->lname, (w)->count,                      \
        chorus_dtype_name((w)->dt), chorus_op_name((w)->op), (w)->root,                     \
        (w)->inplace ? "in-place" : "out-of-place", mode_names[(w)->mode],                  \
        team_names[(w)->teams]

/* A buffer with GUARD_BYTES of poison on each side; everything starts poisoned. */
static unsigned char *guarded_alloc(size_t bytes)
{
    unsigned char *b = malloc(bytes + 2 * GUARD_BYTES);

    cr_assert_not_null(b);
    memset(b, POISON, bytes + 2 * GUARD_BYTES);
    return b + GUARD_BYTES;
}

static void guarded_free(unsigned char *buf)
{
    if (buf != NULL)
        free(buf - GUARD_BYTES);
}

static int guards_intact(const unsigned char *buf, size_t bytes)
{
    for (size_t k = 0; k < GUARD_BYTES; k++)
        if (buf[-1 - (long)k] != POISON || buf[bytes + k] != POISON)
            return 0;
    return 1;
}

static int reduces(coll_type_t coll)
{
    return coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER;
}

/* Rank r's input element i (asked only of ranks that have input). */
static double input_of(const world_t *w, int r, size_t i)
{
    if (reduces(w->coll))
        return exact_input(w->op, w->dt, w->p, r, i);
    return rank_val(w->dt, r, i);
}

/* Element k of rank r's recvbuf after the call. */
static double expected_of(const world_t *w, int r, size_t k)
{
    switch (w->coll) {
    case COLL_ALLGATHER: return rank_val(w->dt, (int)(k / w->count), k % w->count);
    case COLL_BROADCAST: return rank_val(w->dt, w->root, k);
    case COLL_ALLREDUCE: return exact_expected(w->op, w->dt, w->p, k);
    /* Block r of the reduction of every rank's p blocks. */
    case COLL_REDUCE_SCATTER: return exact_expected(w->op, w->dt, w->p, (size_t)r * w->count + k);
    default: cr_assert_fail("no expectation for %s", coll_type_name(w->coll));
    }
    return 0;
}

/* reduce_scatter in place: recvbuf is block r of sendbuf, which holds all p blocks. */
static int rs_in_place(const world_t *w)
{
    return w->inplace && w->coll == COLL_REDUCE_SCATTER;
}

/* Rank r's buffers as the call passes them: sets recv[r], returns sendbuf (NULL: none). */
static unsigned char *world_buffers(world_t *w, int r, int has_input)
{
    unsigned char *send;

    if (rs_in_place(w)) {
        send = guarded_alloc(w->send_bytes);
        w->recv[r] = send + (size_t)r * w->recv_bytes;
        return send;
    }
    w->recv[r] = guarded_alloc(w->recv_bytes);
    if (w->inplace)     /* allgather in place: sendbuf is this rank's block of recvbuf */
        return w->recv[r] + (w->coll == COLL_ALLGATHER ? (size_t)r * w->send_bytes : 0);
    /* Out of place, ranks without input pass no sendbuf. */
    return has_input ? guarded_alloc(w->send_bytes) : NULL;
}

static void world_setup_rank(world_t *w, int r)
{
    int has_input = w->coll != COLL_BROADCAST || r == w->root;
    unsigned char *send = world_buffers(w, r, has_input);

    for (size_t i = 0; has_input && i < w->send_bytes / w->esize; i++)
        exact_put(w->dt, send, i, input_of(w, r, i));
    /* Kept to check that sendbuf (reduce_scatter in place: but for block r) stays as given. */
    if ((!w->inplace && has_input) || rs_in_place(w)) {
        w->orig[r] = malloc(w->send_bytes + 2 * GUARD_BYTES);
        cr_assert_not_null(w->orig[r]);
        memcpy(w->orig[r], send - GUARD_BYTES, w->send_bytes + 2 * GUARD_BYTES);
    }
    w->send[r] = send;
    w->args[r] = (coll_args_t){.coll = w->coll, .sendbuf = send, .recvbuf = w->recv[r],
                               .count = w->count, .dtype = w->dt, .op = w->op,
                               .root = w->root, .rank = r, .size = w->p,
                               .chunk_bytes = mode_chunk_bytes[w->mode]};
}

static void world_free(world_t *w)
{
    for (int r = 0; r < w->p; r++) {
        if (w->orig[r] != NULL)
            guarded_free(w->send[r]);
        free(w->orig[r]);
        if (!rs_in_place(w))    /* else part of sendbuf */
            guarded_free(w->recv[r]);
    }
}

static int world_run(world_t *w)
{
    sched_sim_opts_t opts = SCHED_SIM_OPTS_DEFAULT;
    unsigned seed = (unsigned)(w->p * 7919 + w->root * 31 + (int)w->count + w->mode);

    opts.layout = w->l;
    opts.teams = w->teams;
    if (w->mode != MODE_EAGER) {
        /* Rendezvous sends and late completions: nothing may rely on buffering. */
        opts.eager = 0;
        opts.deferred = 1;
        opts.seed = seed;
    }
    if (w->mode == MODE_SKEW)
        opts.skew = 1;
    return sched_sim_run_opts(w->alg, w->args, w->p, &opts, &w->stats);
}

/* sendbuf and its guards are as given, but for block r when it is recvbuf (in place). */
static int send_intact(const world_t *w, int r)
{
    const unsigned char *now = w->send[r] - GUARD_BYTES, *was = w->orig[r];
    size_t total = w->send_bytes + 2 * GUARD_BYTES;
    size_t head = rs_in_place(w) ? GUARD_BYTES + (size_t)r * w->recv_bytes : total;
    size_t tail = rs_in_place(w) ? head + w->recv_bytes : total;

    return memcmp(now, was, head) == 0 && memcmp(now + tail, was + tail, total - tail) == 0;
}

static void world_check(const world_t *w)
{
    size_t nrecv = w->recv_bytes / w->esize;

    for (int r = 0; r < w->p; r++) {
        for (size_t k = 0; k < nrecv; k++) {
            double got = exact_get(w->dt, w->recv[r], k), want = expected_of(w, r, k);

            if (got != want)
                cr_assert_fail(CASE_FMT ": rank %d element %zu is %g, expected %g",
                               CASE_ARGS(w), r, k, got, want);
        }
        /* In place, reduce_scatter's recvbuf lies inside sendbuf, whose guards are checked. */
        cr_assert(rs_in_place(w) || guards_intact(w->recv[r], w->recv_bytes),
                  CASE_FMT ": guard bytes around recvbuf of rank %d changed", CASE_ARGS(w), r);
        if (w->orig[r] != NULL)
            cr_assert(send_intact(w, r),
                      CASE_FMT ": sendbuf of rank %d or its guards changed", CASE_ARGS(w), r);
    }
}

/* What a sweep runs: one layout, and how its nodes are served. */
typedef struct {
    const topo_layout_t *l;
    const char *lname;
    int teams;
} sweep_t;

static void run_case(size_t a, const sweep_t *sw, size_t count, chorus_dtype_t dt,
                     chorus_op_t op, int root, int inplace, int mode)
{
    world_t w = {.alg = hier_algs[a].alg, .coll = hier_algs[a].coll, .l = sw->l,
                 .lname = sw->lname, .p = sw->l->size, .root = root, .inplace = inplace,
                 .mode = mode, .teams = sw->teams, .count = count, .dt = dt, .op = op};

    w.esize = chorus_dtype_size(dt);
    w.send_bytes = count * w.esize * (w.coll == COLL_REDUCE_SCATTER ? (size_t)w.p : 1);
    w.recv_bytes = count * w.esize * (w.coll == COLL_ALLGATHER ? (size_t)w.p : 1);
    for (int r = 0; r < w.p; r++)
        world_setup_rank(&w, r);
    cr_assert_eq(world_run(&w), 0, CASE_FMT ": the simulation failed", CASE_ARGS(&w));
    /* With teams that run every stage, a node of several ranks has some to run; without, none. */
    if (w.teams != SCHED_SIM_TEAMS_PLAIN)
        cr_assert_eq(w.stats.team_calls > 0,
                     w.teams == SCHED_SIM_TEAMS_VFORMS && count > 0 && sw->l->local_max > 1,
                     CASE_FMT ": %ld team calls", CASE_ARGS(&w), w.stats.team_calls);
    world_check(&w);
    world_free(&w);
}

/* ---- sweeps ---------------------------------------------------------------------- */

static int nroots(size_t a, int p)
{
    return hier_algs[a].coll == COLL_BROADCAST ? p : 1;
}

static int nops(size_t a)
{
    return reduces(hier_algs[a].coll) ? CHORUS_OP_COUNT : 1;
}

static void sweep_layout(size_t a, size_t k, int big, int teams)
{
    topo_layout_t *l = make_layout(k);
    sweep_t sw = {.l = l, .lname = layout_names[k], .teams = teams};

    for (int root = 0; root < nroots(a, l->size); root++)
        for (int ip = 0; ip < 2; ip++)
            for (int mode = 0; mode < MODE_COUNT; mode++) {
                if (big) {
                    run_case(a, &sw, BIG_COUNT, CHORUS_FLOAT32, CHORUS_SUM, root, ip, mode);
                    continue;
                }
                for (size_t c = 0; c < sizeof(small_counts) / sizeof(small_counts[0]); c++)
                    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
                        for (int op = 0; op < nops(a); op++)
                            run_case(a, &sw, small_counts[c], (chorus_dtype_t)dt,
                                     (chorus_op_t)op, root, ip, mode);
            }
    topo_layout_free(l);
}

static void sweep(int big, int teams)
{
    for (size_t a = 0; a < NALGS; a++)
        for (size_t k = 0; k < NLAYOUTS; k++)
            sweep_layout(a, k, big, teams);
}

Test(hier_algs, small_counts_every_dtype)
{
    sweep(0, SCHED_SIM_TEAMS_NONE);
}

Test(hier_algs, small_counts_every_dtype_teams)
{
    sweep(0, SCHED_SIM_TEAMS_VFORMS);
}

Test(hier_algs, small_counts_every_dtype_teams_without_vforms)
{
    sweep(0, SCHED_SIM_TEAMS_PLAIN);
}

Test(hier_algs, large_count_float32)
{
    sweep(1, SCHED_SIM_TEAMS_NONE);
}

Test(hier_algs, large_count_float32_teams)
{
    sweep(1, SCHED_SIM_TEAMS_VFORMS);
}

Test(hier_algs, large_count_float32_teams_without_vforms)
{
    sweep(1, SCHED_SIM_TEAMS_PLAIN);
}

/* ---- bytes that cross nodes --------------------------------------------------------- */

/* 1 when one of the call's buffers holds a block per rank (then both are made that large). */
static int blocks_per_rank(size_t a)
{
    return hier_algs[a].coll == COLL_ALLGATHER || hier_algs[a].coll == COLL_REDUCE_SCATTER;
}

/* What every rank's schedule of one call sends, read from the steps without running them. */
typedef struct {
    size_t cross;                       /* bytes sent to ranks on other nodes */
    size_t local;                       /* bytes sent to ranks on the same node */
    long team_steps;
    size_t in[SCHED_SIM_MAX_RANKS];     /* per rank: bytes it receives from other nodes */
    size_t out[SCHED_SIM_MAX_RANKS];    /* and sends to them */
} census_t;

/* The environment of rank r: the layout, and the node teams of set (NULL: none). */
static coll_env_t env_of(const topo_layout_t *l, sched_sim_teams_t *set, int r)
{
    coll_env_t env = {.nranks = l != NULL ? l->size : 0, .layout = l};

    if (set != NULL && r >= 0 && r < l->size)
        sched_sim_teams_env(set, r, &env);
    return env;
}

static void census_steps(const coll_sched_t *s, const topo_layout_t *l, int r, census_t *c)
{
    for (size_t i = 0; i < s->nsteps; i++) {
        const coll_step_t *st = &s->steps[i];

        c->team_steps += st->kind == COLL_STEP_TEAM;
        if (st->kind != COLL_STEP_SEND)
            continue;
        cr_assert(st->peer >= 0 && st->peer < l->size && st->peer != r, "rank %d sends to %d",
                  r, st->peer);
        if (l->node_of[st->peer] == l->node_of[r]) {
            c->local += st->bytes;
            continue;
        }
        c->cross += st->bytes;
        c->in[st->peer] += st->bytes;
        c->out[r] += st->bytes;
    }
}

static void census(size_t a, const topo_layout_t *l, int teams, size_t count, chorus_dtype_t dt,
                   int root, size_t chunk_bytes, census_t *c)
{
    size_t bytes = count * chorus_dtype_size(dt) * (blocks_per_rank(a) ? (size_t)l->size : 1);
    unsigned char *send = calloc(1, bytes + 1), *recv = calloc(1, bytes + 1);
    sched_sim_teams_t *set = NULL;

    cr_assert(send != NULL && recv != NULL);
    memset(c, 0, sizeof(*c));
    if (teams != SCHED_SIM_TEAMS_NONE)
        cr_assert_eq(sched_sim_teams_create(l, teams, &set), 0);
    for (int r = 0; r < l->size; r++) {
        coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                            .count = count, .dtype = dt, .op = CHORUS_SUM, .root = root,
                            .rank = r, .size = l->size, .chunk_bytes = chunk_bytes};
        coll_env_t env = env_of(l, set, r);
        coll_sched_t s;

        coll_sched_init(&s, dt, CHORUS_SUM, l->size);
        cr_assert_eq(hier_algs[a].alg->build(&args, &env, &s), CHORUS_OK, "rank %d", r);
        census_steps(&s, l, r, c);
        coll_sched_finalize(&s);
    }
    sched_sim_teams_destroy(set);
    free(send);
    free(recv);
}

/* What each algorithm must send across nodes; SIZE_MAX where no rule is written down yet. */
static size_t cross_node_expected(size_t a, const topo_layout_t *l, size_t count, size_t esize)
{
    size_t others = (size_t)l->nnodes - 1, foreign = 0;

    switch (hier_algs[a].coll) {
    /* One ring per shard among the nodes: each sends and receives 2 (N-1)/N of it. */
    case COLL_ALLREDUCE: return 2 * others * count * esize;
    case COLL_ALLGATHER: return others * (size_t)l->size * count * esize;
    case COLL_BROADCAST: return others * count * esize;
    /* Each node sends each block of a rank on another node once, reduced over the node. */
    case COLL_REDUCE_SCATTER:
        for (int n = 0; n < l->nnodes; n++)
            foreign += (size_t)(l->size - topo_layout_node_size(l, n));
        return foreign * count * esize;
    default: return SIZE_MAX;
    }
}

/*
 * One call's census against the rules: the bytes that cross nodes, and how
 * the node-local stages go: through the port without teams, only on the
 * teams when they run the v-forms (no send stays on a node).
 */
static int check_census(size_t a, const topo_layout_t *l, const char *lname, int teams,
                        size_t count, chorus_dtype_t dt, int root)
{
    size_t want = cross_node_expected(a, l, count, chorus_dtype_size(dt));
    census_t c;

    if (want == SIZE_MAX)
        return 0;
    census(a, l, teams, count, dt, root, 512, &c);
    cr_assert_eq(c.cross, want, "%s %s layout %s count %zu %s root %d %s: %zu bytes cross "
                 "nodes, expected %zu", coll_type_name(hier_algs[a].coll),
                 hier_algs[a].alg->name, lname, count, chorus_dtype_name(dt), root,
                 team_names[teams], c.cross, want);
    if (teams == SCHED_SIM_TEAMS_NONE)
        cr_assert_eq(c.team_steps, 0, "%s layout %s: team steps without teams",
                     coll_type_name(hier_algs[a].coll), lname);
    if (teams == SCHED_SIM_TEAMS_VFORMS) {
        cr_assert_eq(c.local, 0, "%s layout %s count %zu root %d with teams: %zu bytes sent "
                     "within nodes", coll_type_name(hier_algs[a].coll), lname, count, root,
                     c.local);
        cr_assert_eq(c.team_steps > 0, l->local_max > 1, "%s layout %s count %zu with teams: "
                     "%ld team steps", coll_type_name(hier_algs[a].coll), lname, count,
                     c.team_steps);
    }
    return 1;
}

Test(hier_algs, each_byte_crosses_to_each_node_once)
{
    static const size_t counts[] = {1, 3, 1023, BIG_COUNT};
    static const chorus_dtype_t dts[] = {CHORUS_INT8, CHORUS_FLOAT32, CHORUS_FLOAT64};
    int checked = 0;

    for (size_t a = 0; a < NALGS; a++)
        for (size_t k = 0; k < NLAYOUTS; k++) {
            topo_layout_t *l = make_layout(k);

            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
                    for (int root = 0; root < nroots(a, l->size); root++)
                        for (int teams = 0; teams < 3; teams++)
                            checked += check_census(a, l, layout_names[k], teams, counts[c],
                                                    dts[d], root);
            topo_layout_free(l);
        }
    /* allgather, broadcast and reduce_scatter always have a rule. */
    cr_assert_geq(checked, 3);
}

/*
 * Teams whose transport lacks the v-forms take the stages whose blocks are
 * of one length in member order (a single chunk of allgather here), and
 * leave the others to the port, instead of failing the build.
 */
Test(hier_algs, teams_without_vforms_fall_back_to_the_port)
{
    topo_layout_t *l = make_layout(0);     /* "2,2" */
    census_t c;

    census(1, l, SCHED_SIM_TEAMS_PLAIN, 100, CHORUS_FLOAT32, 0, 4096, &c);
    cr_assert(c.team_steps > 0 && c.local == 0, "one chunk: %ld team steps, %zu bytes sent "
              "within nodes", c.team_steps, c.local);
    census(1, l, SCHED_SIM_TEAMS_PLAIN, 1023, CHORUS_FLOAT32, 0, 512, &c);
    cr_assert(c.team_steps == 0 && c.local > 0, "several chunks: %ld team steps, %zu bytes "
              "sent within nodes", c.team_steps, c.local);
    census(1, l, SCHED_SIM_TEAMS_VFORMS, 1023, CHORUS_FLOAT32, 0, 512, &c);
    cr_assert(c.team_steps > 0 && c.local == 0, "with v-forms: %ld team steps, %zu bytes "
              "sent within nodes", c.team_steps, c.local);
    topo_layout_free(l);
}

/*
 * With nodes of equal size every rank of a node takes an equal share of what
 * enters the node: in allgather one block from each other node, in
 * broadcast (outside the root's node) the piece of its local index. In
 * reduce_scatter each rank gets one partial from each other node and sends
 * as many: the partials of the nnodes - 1 blocks it reduces for its node.
 */
Test(hier_algs, every_local_rank_carries_a_share)
{
    static const char *const even[] = {"2,2", "3,3,3", "4,4", "1,1,1"};
    const size_t count = 1001;

    for (size_t k = 0; k < sizeof(even) / sizeof(even[0]); k++) {
        topo_layout_t *l = NULL;
        int L;

        cr_assert_eq(topo_layout_parse(even[k], &l), CHORUS_OK);
        L = l->local_max;
        for (size_t a = 0; a < NALGS; a++)
            for (int root = 0; root < l->size; root++) {
                int rs = hier_algs[a].coll == COLL_REDUCE_SCATTER;

                /* allreduce's rings are checked by each_byte_crosses_to_each_node_once. */
                if (hier_algs[a].coll == COLL_ALLREDUCE)
                    continue;
                for (int teams = 0; teams < 3; teams++) {
                    census_t c;

                    census(a, l, teams, count, CHORUS_FLOAT32, root, 1024, &c);
                    for (int r = 0; r < l->size; r++) {
                        size_t want;

                        cr_assert(!rs || c.out[r] == (size_t)(l->nnodes - 1) * count * 4,
                                  "reduce_scatter layout %s %s: rank %d sends %zu bytes to "
                                  "other nodes", even[k], team_names[teams], r, c.out[r]);
                        if (hier_algs[a].coll == COLL_ALLGATHER || rs)
                            want = (size_t)(l->nnodes - 1) * count * 4;
                        else if (l->node_of[r] == l->node_of[root])
                            want = 0;
                        else
                            want = coll_ring_block_count(count, L, l->local_index[r]) * 4;
                        cr_assert_eq(c.in[r], want, "%s layout %s root %d %s: rank %d receives "
                                     "%zu bytes from other nodes, expected %zu",
                                     coll_type_name(hier_algs[a].coll), even[k], root,
                                     team_names[teams], r, c.in[r], want);
                    }
                }
                if (hier_algs[a].coll != COLL_BROADCAST)
                    break;  /* no root */
            }
        topo_layout_free(l);
    }
}

/* ---- arguments ----------------------------------------------------------------------- */

/* Build rank args->rank's schedule in layout (with its node teams when teams); its status. */
static chorus_status_t build_status(size_t a, const coll_args_t *args,
                                    const topo_layout_t *layout, int teams, size_t *nsteps_p)
{
    sched_sim_teams_t *set = NULL;
    coll_env_t env;
    coll_sched_t s;
    chorus_status_t st;

    if (teams != SCHED_SIM_TEAMS_NONE && layout != NULL)
        cr_assert_eq(sched_sim_teams_create(layout, teams, &set), 0);
    env = env_of(layout, set, args->rank);
    env.nranks = args->size;
    coll_sched_init(&s, args->dtype, args->op, args->size);
    st = hier_algs[a].alg->build(args, &env, &s);
    *nsteps_p = s.nsteps;
    coll_sched_finalize(&s);
    sched_sim_teams_destroy(set);
    return st;
}

/* Building args gives want; a failed build appends nothing, a call of count > 0 something. */
static void expect_build(size_t a, const coll_args_t *args, const topo_layout_t *layout,
                         int teams, chorus_status_t want)
{
    size_t nsteps;
    chorus_status_t got = build_status(a, args, layout, teams, &nsteps);

    cr_assert_eq(got, want, "%s %s count %zu: status %d, expected %d",
                 coll_type_name(hier_algs[a].coll), team_names[teams], args->count, got, want);
    cr_assert_eq(nsteps > 0, want == CHORUS_OK && args->count > 0, "%s %s: %zu steps",
                 coll_type_name(hier_algs[a].coll), team_names[teams], nsteps);
}

static void check_arguments(size_t a, const topo_layout_t *l4, const topo_layout_t *l6,
                            int teams)
{
    static int32_t send[64], recv[64];
    coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                        .count = 16, .dtype = CHORUS_INT32, .op = CHORUS_SUM, .root = 0,
                        .rank = 1, .size = 4, .chunk_bytes = 4096};

    expect_build(a, &args, NULL, teams, CHORUS_ERR_INVALID_ARG);
    args.count = 0;     /* even a call that moves nothing needs the layout */
    expect_build(a, &args, NULL, teams, CHORUS_ERR_INVALID_ARG);
    args.count = 16;
    expect_build(a, &args, l6, teams, CHORUS_ERR_INVALID_ARG);  /* of another job size */
    expect_build(a, &args, l4, teams, CHORUS_OK);
    args.count = 0;
    expect_build(a, &args, l4, teams, CHORUS_OK);
    args.count = 16;
    args.dtype = CHORUS_DTYPE_COUNT;
    expect_build(a, &args, l4, teams, CHORUS_ERR_INVALID_ARG);
    args.dtype = CHORUS_INT32;
    args.rank = 4;
    expect_build(a, &args, l4, teams, CHORUS_ERR_INVALID_ARG);
    args.rank = 1;
    args.recvbuf = NULL;
    expect_build(a, &args, l4, teams, CHORUS_ERR_INVALID_ARG);
    if (hier_algs[a].coll == COLL_BROADCAST) {
        args.recvbuf = recv;
        args.root = 4;
        expect_build(a, &args, l4, teams, CHORUS_ERR_INVALID_ARG);
    }
}

Test(hier_algs, layout_required)
{
    topo_layout_t *l4 = make_layout(0), *l6 = make_layout(1);    /* "2,2" and "3,2,1" */

    cr_assert_eq(l4->size, 4);
    for (size_t a = 0; a < NALGS; a++) {
        check_arguments(a, l4, l6, SCHED_SIM_TEAMS_NONE);
        check_arguments(a, l4, l6, SCHED_SIM_TEAMS_VFORMS);
    }
    topo_layout_free(l4);
    topo_layout_free(l6);
}

/* A node team that is not the layout's node of the rank is an internal error, not a hang. */
Test(hier_algs, team_must_match_the_layout)
{
    static int32_t send[64], recv[64];
    topo_layout_t *l = make_layout(0);     /* "2,2" */
    sched_sim_teams_t *set = NULL;

    cr_assert_eq(sched_sim_teams_create(l, SCHED_SIM_TEAMS_VFORMS, &set), 0);
    for (size_t a = 0; a < NALGS; a++) {
        coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                            .count = 16, .dtype = CHORUS_INT32, .op = CHORUS_SUM, .root = 0,
                            .rank = 1, .size = 4, .chunk_bytes = 4096};
        coll_env_t env = env_of(l, set, 1), other = env_of(l, set, 0);
        coll_sched_t s;

        env.node_team = other.node_team;    /* rank 0's place on the node */
        coll_sched_init(&s, args.dtype, args.op, args.size);
        cr_assert_eq(hier_algs[a].alg->build(&args, &env, &s), CHORUS_ERR_INTERNAL, "%s",
                     coll_type_name(hier_algs[a].coll));
        coll_sched_finalize(&s);
    }
    sched_sim_teams_destroy(set);
    topo_layout_free(l);
}
