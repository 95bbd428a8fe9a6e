/*
 * The hierarchical algorithms run through the schedule simulator over many
 * job layouts (several nodes, one node, one rank per node, uneven nodes and
 * nodes whose ranks are not consecutive), every dtype, counts from 0 to
 * large, every root, in place and out of place, with eager, rendezvous and
 * skewed progress, and are checked exactly on every rank. A second check
 * reads the schedules themselves: each byte crosses to each other node
 * exactly once.
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
/* Each mode its own chunk size, so that small counts are cut into several chunks too. */
static const size_t mode_chunk_bytes[] = {4096, 256, 1000};

typedef struct {
    const coll_alg_t *alg;
    coll_type_t coll;
    const topo_layout_t *l;
    const char *lname;
    int p, root, inplace, mode;
    size_t count, esize, send_bytes, recv_bytes;
    chorus_dtype_t dt;
    chorus_op_t op;
    unsigned char *send[SCHED_SIM_MAX_RANKS];   /* NULL where the call passes none */
    unsigned char *recv[SCHED_SIM_MAX_RANKS];
    unsigned char *orig[SCHED_SIM_MAX_RANKS];   /* separate sendbuf with guards, as given */
    coll_args_t args[SCHED_SIM_MAX_RANKS];
} world_t;

#define CASE_FMT "%s %s layout %s count=%zu %s %s root=%d %s %s"
#define CASE_ARGS(w)                                                                       \
    coll_type_name((w)->coll), (w)->alg->name, (w)->lname, (w)->count,                      \
        chorus_dtype_name((w)->dt), chorus_op_name((w)->op), (w)->root,                     \
        (w)->inplace ? "in-place" : "out-of-place", mode_names[(w)->mode]

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
    if (w->mode != MODE_EAGER) {
        /* Rendezvous sends and late completions: nothing may rely on buffering. */
        opts.eager = 0;
        opts.deferred = 1;
        opts.seed = seed;
    }
    if (w->mode == MODE_SKEW)
        opts.skew = 1;
    return sched_sim_run_opts(w->alg, w->args, w->p, &opts, NULL);
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

static void run_case(size_t a, const topo_layout_t *l, const char *lname, size_t count,
                     chorus_dtype_t dt, chorus_op_t op, int root, int inplace, int mode)
{
    world_t w = {.alg = hier_algs[a].alg, .coll = hier_algs[a].coll, .l = l, .lname = lname,
                 .p = l->size, .root = root, .inplace = inplace, .mode = mode, .count = count,
                 .dt = dt, .op = op};

    w.esize = chorus_dtype_size(dt);
    w.send_bytes = count * w.esize * (w.coll == COLL_REDUCE_SCATTER ? (size_t)w.p : 1);
    w.recv_bytes = count * w.esize * (w.coll == COLL_ALLGATHER ? (size_t)w.p : 1);
    for (int r = 0; r < w.p; r++)
        world_setup_rank(&w, r);
    cr_assert_eq(world_run(&w), 0, CASE_FMT ": the simulation failed", CASE_ARGS(&w));
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

static void sweep_layout(size_t a, size_t k, int big)
{
    topo_layout_t *l = make_layout(k);

    for (int root = 0; root < nroots(a, l->size); root++)
        for (int ip = 0; ip < 2; ip++)
            for (int mode = 0; mode < MODE_COUNT; mode++) {
                if (big) {
                    run_case(a, l, layout_names[k], BIG_COUNT, CHORUS_FLOAT32, CHORUS_SUM,
                             root, ip, mode);
                    continue;
                }
                for (size_t c = 0; c < sizeof(small_counts) / sizeof(small_counts[0]); c++)
                    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
                        for (int op = 0; op < nops(a); op++)
                            run_case(a, l, layout_names[k], small_counts[c],
                                     (chorus_dtype_t)dt, (chorus_op_t)op, root, ip, mode);
            }
    topo_layout_free(l);
}

Test(hier_algs, small_counts_every_dtype)
{
    for (size_t a = 0; a < NALGS; a++)
        for (size_t k = 0; k < NLAYOUTS; k++)
            sweep_layout(a, k, 0);
}

Test(hier_algs, large_count_float32)
{
    for (size_t a = 0; a < NALGS; a++)
        for (size_t k = 0; k < NLAYOUTS; k++)
            sweep_layout(a, k, 1);
}

/* ---- bytes that cross nodes --------------------------------------------------------- */

/* 1 when one of the call's buffers holds a block per rank (then both are made that large). */
static int blocks_per_rank(size_t a)
{
    return hier_algs[a].coll == COLL_ALLGATHER || hier_algs[a].coll == COLL_REDUCE_SCATTER;
}

/* Sum over every rank's schedule of the bytes it sends to ranks on other nodes. */
static size_t cross_node_bytes(size_t a, const topo_layout_t *l, size_t count,
                               chorus_dtype_t dt, int root, size_t chunk_bytes)
{
    size_t esize = chorus_dtype_size(dt), total = 0;
    size_t bytes = count * esize * (blocks_per_rank(a) ? (size_t)l->size : 1);
    unsigned char *send = calloc(1, bytes + 1), *recv = calloc(1, bytes + 1);

    cr_assert(send != NULL && recv != NULL);
    for (int r = 0; r < l->size; r++) {
        coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                            .count = count, .dtype = dt, .op = CHORUS_SUM, .root = root,
                            .rank = r, .size = l->size, .chunk_bytes = chunk_bytes};
        coll_env_t env = {.nranks = l->size, .layout = l};
        coll_sched_t s;

        coll_sched_init(&s, dt, CHORUS_SUM, l->size);
        cr_assert_eq(hier_algs[a].alg->build(&args, &env, &s), CHORUS_OK, "rank %d", r);
        for (size_t i = 0; i < s.nsteps; i++) {
            const coll_step_t *st = &s.steps[i];

            if (st->kind != COLL_STEP_SEND)
                continue;
            cr_assert(st->peer >= 0 && st->peer < l->size && st->peer != r,
                      "rank %d sends to %d", r, st->peer);
            if (l->node_of[st->peer] != l->node_of[r])
                total += st->bytes;
        }
        coll_sched_finalize(&s);
    }
    free(send);
    free(recv);
    return total;
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
                    for (int root = 0; root < nroots(a, l->size); root++) {
                        size_t want = cross_node_expected(a, l, counts[c],
                                                          chorus_dtype_size(dts[d]));
                        size_t got;

                        if (want == SIZE_MAX)
                            continue;
                        got = cross_node_bytes(a, l, counts[c], dts[d], root, 512);
                        cr_assert_eq(got, want, "%s %s layout %s count %zu %s root %d: "
                                     "%zu bytes cross nodes, expected %zu",
                                     coll_type_name(hier_algs[a].coll), hier_algs[a].alg->name,
                                     layout_names[k], counts[c], chorus_dtype_name(dts[d]),
                                     root, got, want);
                        checked++;
                    }
            topo_layout_free(l);
        }
    /* allgather, broadcast and reduce_scatter always have a rule. */
    cr_assert_geq(checked, 3);
}

/*
 * Bytes each rank receives from other nodes (in[r]) and sends to them
 * (out[r]), summed over every rank's schedule. The receiving side of the
 * spread is the part a leader-based scheme would get wrong for allgather and
 * broadcast, the sending side for reduce_scatter.
 */
static void cross_node_in(size_t a, const topo_layout_t *l, size_t count, int root,
                          size_t in[SCHED_SIM_MAX_RANKS], size_t out[SCHED_SIM_MAX_RANKS])
{
    size_t bytes = count * 4 * (blocks_per_rank(a) ? (size_t)l->size : 1);
    unsigned char *send = calloc(1, bytes + 1), *recv = calloc(1, bytes + 1);

    cr_assert(send != NULL && recv != NULL);
    memset(in, 0, SCHED_SIM_MAX_RANKS * sizeof(*in));
    memset(out, 0, SCHED_SIM_MAX_RANKS * sizeof(*out));
    for (int r = 0; r < l->size; r++) {
        coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                            .count = count, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                            .root = root, .rank = r, .size = l->size, .chunk_bytes = 1024};
        coll_env_t env = {.nranks = l->size, .layout = l};
        coll_sched_t s;

        coll_sched_init(&s, CHORUS_FLOAT32, CHORUS_SUM, l->size);
        cr_assert_eq(hier_algs[a].alg->build(&args, &env, &s), CHORUS_OK, "rank %d", r);
        for (size_t i = 0; i < s.nsteps; i++)
            if (s.steps[i].kind == COLL_STEP_SEND &&
                l->node_of[s.steps[i].peer] != l->node_of[r]) {
                in[s.steps[i].peer] += s.steps[i].bytes;
                out[r] += s.steps[i].bytes;
            }
        coll_sched_finalize(&s);
    }
    free(send);
    free(recv);
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
                size_t in[SCHED_SIM_MAX_RANKS], out[SCHED_SIM_MAX_RANKS], want;
                int rs = hier_algs[a].coll == COLL_REDUCE_SCATTER;

                /* allreduce's rings are checked by each_byte_crosses_to_each_node_once. */
                if (hier_algs[a].coll == COLL_ALLREDUCE)
                    continue;
                cross_node_in(a, l, count, root, in, out);
                for (int r = 0; r < l->size; r++) {
                    cr_assert(!rs || out[r] == (size_t)(l->nnodes - 1) * count * 4,
                              "reduce_scatter layout %s: rank %d sends %zu bytes to other nodes",
                              even[k], r, out[r]);
                    if (hier_algs[a].coll == COLL_ALLGATHER || rs)
                        want = (size_t)(l->nnodes - 1) * count * 4;
                    else if (l->node_of[r] == l->node_of[root])
                        want = 0;
                    else
                        want = coll_ring_block_count(count, L, l->local_index[r]) * 4;
                    cr_assert_eq(in[r], want, "%s layout %s root %d: rank %d receives %zu "
                                 "bytes from other nodes, expected %zu",
                                 coll_type_name(hier_algs[a].coll), even[k], root, r, in[r],
                                 want);
                }
                if (hier_algs[a].coll != COLL_BROADCAST)
                    break;  /* no root */
            }
        topo_layout_free(l);
    }
}

/* ---- arguments ----------------------------------------------------------------------- */

static chorus_status_t build_status(size_t a, const coll_args_t *args,
                                    const topo_layout_t *layout, size_t *nsteps_p)
{
    coll_env_t env = {.nranks = args->size, .layout = layout};
    coll_sched_t s;
    chorus_status_t st;

    coll_sched_init(&s, args->dtype, args->op, args->size);
    st = hier_algs[a].alg->build(args, &env, &s);
    *nsteps_p = s.nsteps;
    coll_sched_finalize(&s);
    return st;
}

Test(hier_algs, layout_required)
{
    static int32_t send[64], recv[64];
    topo_layout_t *l4 = make_layout(0), *l6 = make_layout(1);    /* "2,2" and "3,2,1" */
    size_t nsteps;

    cr_assert_eq(l4->size, 4);
    for (size_t a = 0; a < NALGS; a++) {
        coll_args_t args = {.coll = hier_algs[a].coll, .sendbuf = send, .recvbuf = recv,
                            .count = 16, .dtype = CHORUS_INT32, .op = CHORUS_SUM, .root = 0,
                            .rank = 1, .size = 4, .chunk_bytes = 4096};
        const topo_layout_t *layout = NULL;
        const char *name = coll_type_name(hier_algs[a].coll);

        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        cr_assert_eq(nsteps, 0, "%s", name);
        args.count = 0;     /* even a call that moves nothing needs the layout */
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        args.count = 16;
        layout = l6;   /* a layout of another job size */
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        cr_assert_eq(nsteps, 0, "%s", name);
        layout = l4;
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_OK, "%s", name);
        cr_assert_gt(nsteps, 0, "%s", name);
        args.count = 0;
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_OK, "%s count 0", name);
        cr_assert_eq(nsteps, 0, "%s count 0", name);
        args.count = 16;
        args.dtype = CHORUS_DTYPE_COUNT;
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        args.dtype = CHORUS_INT32;
        args.rank = 4;
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        args.rank = 1;
        args.recvbuf = NULL;
        cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        if (hier_algs[a].coll == COLL_BROADCAST) {
            args.recvbuf = recv;
            args.root = 4;
            cr_assert_eq(build_status(a, &args, layout, &nsteps), CHORUS_ERR_INVALID_ARG, "%s", name);
        }
    }
    topo_layout_free(l4);
    topo_layout_free(l6);
}
