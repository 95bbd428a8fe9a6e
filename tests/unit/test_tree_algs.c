/*
 * The tree and recursive algorithms (recursive doubling and Rabenseifner
 * allreduce, binomial and chain broadcast, binomial reduce) run through the
 * schedule simulator for every rank count 1..8, every dtype and op, several
 * roots, in place and out of place, and checked exactly on every rank.
 *
 * Inputs are small integers chosen so the exact answer is representable in
 * every dtype and does not depend on the reduction order: sums of values in
 * [-2, 3], products of ones with a single 2 or -1 (3 for unsigned), distinct
 * values for min and max, and for AVG vectors whose sum is a multiple of the
 * rank count.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/tree.h"
#include "reduce/reduce.h"
#include "tests/unit/exact_vals.h"
#include "tests/unit/sched_sim.h"
#include "util/config.h"

#define MAX_P 8
#define GUARD_BYTES 64
#define POISON 0x5a
#define CHUNK_BYTES 4096
#define BIG_COUNT 100003

static const size_t small_counts[] = {0, 1, 7, 1023};

/* The large count runs for a few (dtype, op) pairs only, to keep the run short. */
static const struct {
    chorus_dtype_t dtype;
    chorus_op_t op;
} big_pairs[] = {
    {CHORUS_FLOAT32, CHORUS_SUM},
    {CHORUS_INT8, CHORUS_MAX},
    {CHORUS_FLOAT16, CHORUS_AVG},
    {CHORUS_BFLOAT16, CHORUS_PROD},
    {CHORUS_UINT64, CHORUS_MIN},
};

/* ---- values in every dtype ---------------------------------------------- */

/* Broadcast data: differs per rank so a wrong source shows. */
static double bcast_val(chorus_dtype_t dt, int r, size_t i)
{
    long v = (long)((r * 3 + i) % 11);

    return exact_is_unsigned(dt) ? (double)v : (double)(v - 5);
}

/* ---- per-rank buffers --------------------------------------------------- */

typedef struct {
    int p;
    size_t count, bytes;
    chorus_dtype_t dt;
    chorus_op_t op;
    int root, inplace;
    /* count elements + guard; NULL where the call passes NULL */
    unsigned char *send[SCHED_SIM_MAX_RANKS];
    unsigned char *recv[SCHED_SIM_MAX_RANKS];
    unsigned char *orig[SCHED_SIM_MAX_RANKS];   /* pristine copy of send: it must not change */
    coll_args_t args[SCHED_SIM_MAX_RANKS];
} world_t;

static unsigned char *alloc_poisoned(size_t bytes)
{
    unsigned char *b = malloc(bytes + GUARD_BYTES);

    cr_assert_not_null(b);
    memset(b, POISON, bytes + GUARD_BYTES);
    return b;
}

static void world_free(world_t *w)
{
    for (int r = 0; r < w->p; r++) {
        if (w->recv[r] != w->send[r])
            free(w->recv[r]);
        free(w->send[r]);
        free(w->orig[r]);
    }
}

/* Index of the first byte that is not POISON, or SIZE_MAX. */
static size_t first_unpoisoned(const unsigned char *buf, size_t bytes)
{
    for (size_t k = 0; k < bytes; k++)
        if (buf[k] != POISON)
            return k;
    return SIZE_MAX;
}

static void guard_intact(const unsigned char *buf, size_t bytes, const char *what, int r)
{
    cr_assert_eq(first_unpoisoned(buf + bytes, GUARD_BYTES), SIZE_MAX,
                 "%s of rank %d written past its end", what, r);
}

static int run_world(const coll_alg_t *alg, world_t *w, int strict, unsigned seed)
{
    sched_sim_opts_t opts = SCHED_SIM_OPTS_DEFAULT;

    if (strict) {
        /* Rendezvous sends and late completions: nothing may rely on buffering. */
        opts.eager = 0;
        opts.deferred = 1;
        opts.seed = seed;
    }
    return sched_sim_run_opts(alg, w->args, w->p, &opts, NULL);
}

#define CASE_FMT "%s p=%d count=%zu %s %s root=%d %s %s"
#define CASE_ARGS(alg, w, strict)                                                        \
    (alg)->name, (w)->p, (w)->count, chorus_dtype_name((w)->dt), chorus_op_name((w)->op), \
        (w)->root, (w)->inplace ? "in-place" : "out-of-place", (strict) ? "rendezvous" : "eager"

/* ---- allreduce ----------------------------------------------------------- */

static void allreduce_case(const coll_alg_t *alg, int p, size_t count, chorus_dtype_t dt,
                           chorus_op_t op, int inplace, int strict)
{
    world_t w = {.p = p, .count = count, .dt = dt, .op = op, .inplace = inplace};
    size_t esize = chorus_dtype_size(dt);

    w.bytes = count * esize;
    for (int r = 0; r < p; r++) {
        w.send[r] = alloc_poisoned(w.bytes);
        for (size_t i = 0; i < count; i++)
            exact_put(dt, w.send[r], i, exact_input(op, dt, p, r, i));
        w.orig[r] = alloc_poisoned(w.bytes);
        memcpy(w.orig[r], w.send[r], w.bytes);
        w.recv[r] = inplace ? w.send[r] : alloc_poisoned(w.bytes);
        w.args[r] = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = w.send[r],
                                  .recvbuf = w.recv[r], .count = count, .dtype = dt, .op = op,
                                  .rank = r, .size = p, .chunk_bytes = CHUNK_BYTES};
    }
    cr_assert_eq(run_world(alg, &w, strict, (unsigned)(p * 7919 + count)), 0, CASE_FMT,
                 CASE_ARGS(alg, &w, strict));
    for (int r = 0; r < p; r++) {
        for (size_t i = 0; i < count; i++) {
            double got = exact_get(dt, w.recv[r], i), want = exact_expected(op, dt, p, i);

            if (got != want)
                cr_assert_fail(CASE_FMT ": rank %d element %zu is %g, expected %g",
                               CASE_ARGS(alg, &w, strict), r, i, got, want);
        }
        guard_intact(w.recv[r], w.bytes, "recvbuf", r);
        if (!inplace)
            cr_assert(memcmp(w.send[r], w.orig[r], w.bytes + GUARD_BYTES) == 0,
                      CASE_FMT ": sendbuf of rank %d changed", CASE_ARGS(alg, &w, strict), r);
        cr_assert(memcmp(w.recv[r], w.recv[0], w.bytes) == 0,
                  CASE_FMT ": rank %d differs bitwise from rank 0", CASE_ARGS(alg, &w, strict), r);
    }
    world_free(&w);
}

static void allreduce_sweep_small(const coll_alg_t *alg)
{
    for (int p = 1; p <= MAX_P; p++)
        for (size_t ci = 0; ci < sizeof(small_counts) / sizeof(small_counts[0]); ci++)
            for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
                for (int op = 0; op < CHORUS_OP_COUNT; op++)
                    for (int ip = 0; ip < 2; ip++)
                        for (int strict = 0; strict < 2; strict++)
                            allreduce_case(alg, p, small_counts[ci], (chorus_dtype_t)dt,
                                           (chorus_op_t)op, ip, strict);
}

static void allreduce_sweep_big(const coll_alg_t *alg)
{
    for (int p = 1; p <= MAX_P; p++)
        for (size_t k = 0; k < sizeof(big_pairs) / sizeof(big_pairs[0]); k++)
            for (int ip = 0; ip < 2; ip++)
                allreduce_case(alg, p, BIG_COUNT, big_pairs[k].dtype, big_pairs[k].op, ip,
                               (int)((p + k + ip) % 2));
}

Test(tree_algs, rd_allreduce_small) { allreduce_sweep_small(&coll_rd_allreduce); }
Test(tree_algs, rd_allreduce_big) { allreduce_sweep_big(&coll_rd_allreduce); }
Test(tree_algs, rabenseifner_allreduce_small)
{
    allreduce_sweep_small(&coll_rabenseifner_allreduce);
}
Test(tree_algs, rabenseifner_allreduce_big) { allreduce_sweep_big(&coll_rabenseifner_allreduce); }

/* ---- broadcast ------------------------------------------------------------ */

static void broadcast_case(const coll_alg_t *alg, int p, size_t count, chorus_dtype_t dt,
                           int root, int inplace, int strict)
{
    world_t w = {.p = p, .count = count, .dt = dt, .op = CHORUS_SUM, .root = root,
                 .inplace = inplace};
    size_t esize = chorus_dtype_size(dt);

    w.bytes = count * esize;
    for (int r = 0; r < p; r++) {
        w.recv[r] = alloc_poisoned(w.bytes);
        if (r == root) {
            for (size_t i = 0; i < count; i++)
                exact_put(dt, w.recv[r], i, bcast_val(dt, r, i));
            if (!inplace) {
                /* Out of place, the root's data is in sendbuf and recvbuf starts poisoned. */
                w.send[r] = w.recv[r];
                w.recv[r] = alloc_poisoned(w.bytes);
                w.orig[r] = alloc_poisoned(w.bytes);
                memcpy(w.orig[r], w.send[r], w.bytes);
            }
        }
        if (inplace)
            w.send[r] = w.recv[r];
        /* Out of place, other ranks pass no sendbuf: it must not be read there. */
        w.args[r] = (coll_args_t){.coll = COLL_BROADCAST, .sendbuf = w.send[r],
                                  .recvbuf = w.recv[r], .count = count, .dtype = dt,
                                  .root = root, .rank = r, .size = p,
                                  .chunk_bytes = CHUNK_BYTES};
    }
    cr_assert_eq(run_world(alg, &w, strict, (unsigned)(p * 31 + root + 1)), 0, CASE_FMT,
                 CASE_ARGS(alg, &w, strict));
    for (int r = 0; r < p; r++) {
        for (size_t i = 0; i < count; i++) {
            double got = exact_get(dt, w.recv[r], i), want = bcast_val(dt, root, i);

            if (got != want)
                cr_assert_fail(CASE_FMT ": rank %d element %zu is %g, expected %g",
                               CASE_ARGS(alg, &w, strict), r, i, got, want);
        }
        guard_intact(w.recv[r], w.bytes, "recvbuf", r);
    }
    if (!inplace)
        cr_assert(memcmp(w.send[root], w.orig[root], w.bytes + GUARD_BYTES) == 0,
                  CASE_FMT ": root's sendbuf changed", CASE_ARGS(alg, &w, strict));
    world_free(&w);
}

static int roots_of(int p, int roots[3])
{
    int n = 0, cand[3] = {0, p - 1, p / 2};

    for (int k = 0; k < 3; k++) {
        int dup = 0;

        for (int j = 0; j < n; j++)
            dup |= roots[j] == cand[k];
        if (!dup)
            roots[n++] = cand[k];
    }
    return n;
}

static void broadcast_sweep(const coll_alg_t *alg)
{
    static const chorus_dtype_t big_dtypes[] = {CHORUS_INT8, CHORUS_FLOAT16, CHORUS_FLOAT64};
    int roots[3];

    for (int p = 1; p <= MAX_P; p++) {
        int nroots = roots_of(p, roots);

        for (int k = 0; k < nroots; k++) {
            for (int ip = 0; ip < 2; ip++) {
                for (size_t ci = 0; ci < sizeof(small_counts) / sizeof(small_counts[0]); ci++)
                    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
                        for (int strict = 0; strict < 2; strict++)
                            broadcast_case(alg, p, small_counts[ci], (chorus_dtype_t)dt,
                                           roots[k], ip, strict);
                for (size_t d = 0; d < sizeof(big_dtypes) / sizeof(big_dtypes[0]); d++)
                    broadcast_case(alg, p, BIG_COUNT, big_dtypes[d], roots[k], ip,
                                   (int)((p + d + ip) % 2));
            }
        }
    }
}

Test(tree_algs, binomial_broadcast) { broadcast_sweep(&coll_binomial_broadcast); }
Test(tree_algs, chain_broadcast) { broadcast_sweep(&coll_chain_broadcast); }

/* ---- reduce --------------------------------------------------------------- */

static void reduce_case(const coll_alg_t *alg, int p, size_t count, chorus_dtype_t dt,
                        chorus_op_t op, int root, int inplace, int strict)
{
    world_t w = {.p = p, .count = count, .dt = dt, .op = op, .root = root, .inplace = inplace};
    size_t esize = chorus_dtype_size(dt);

    w.bytes = count * esize;
    for (int r = 0; r < p; r++) {
        w.send[r] = alloc_poisoned(w.bytes);
        for (size_t i = 0; i < count; i++)
            exact_put(dt, w.send[r], i, exact_input(op, dt, p, r, i));
        w.orig[r] = alloc_poisoned(w.bytes);
        memcpy(w.orig[r], w.send[r], w.bytes);
        /*
         * Root: recvbuf is sendbuf in place, else a poisoned buffer. Others:
         * NULL in the in-place runs, a poisoned buffer that must stay
         * untouched otherwise.
         */
        if (r == root)
            w.recv[r] = inplace ? w.send[r] : alloc_poisoned(w.bytes);
        else
            w.recv[r] = inplace ? NULL : alloc_poisoned(w.bytes);
        w.args[r] = (coll_args_t){.coll = COLL_REDUCE, .sendbuf = w.send[r],
                                  .recvbuf = w.recv[r], .count = count, .dtype = dt, .op = op,
                                  .root = root, .rank = r, .size = p,
                                  .chunk_bytes = CHUNK_BYTES};
    }
    cr_assert_eq(run_world(alg, &w, strict, (unsigned)(p * 131 + root + count)), 0, CASE_FMT,
                 CASE_ARGS(alg, &w, strict));
    for (size_t i = 0; i < count; i++) {
        double got = exact_get(dt, w.recv[root], i), want = exact_expected(op, dt, p, i);

        if (got != want)
            cr_assert_fail(CASE_FMT ": root element %zu is %g, expected %g",
                           CASE_ARGS(alg, &w, strict), i, got, want);
    }
    guard_intact(w.recv[root], w.bytes, "recvbuf", root);
    for (int r = 0; r < p; r++) {
        if (r == root && inplace)
            continue;
        cr_assert(memcmp(w.send[r], w.orig[r], w.bytes + GUARD_BYTES) == 0,
                  CASE_FMT ": sendbuf of rank %d changed", CASE_ARGS(alg, &w, strict), r);
        if (r != root && w.recv[r] != NULL)
            cr_assert_eq(first_unpoisoned(w.recv[r], w.bytes + GUARD_BYTES), SIZE_MAX,
                         CASE_FMT ": recvbuf of non-root %d written", CASE_ARGS(alg, &w, strict),
                         r);
    }
    world_free(&w);
}

static void reduce_sweep(int big)
{
    int roots[3];

    for (int p = 1; p <= MAX_P; p++) {
        int nroots = roots_of(p, roots);

        for (int k = 0; k < nroots; k++) {
            for (int ip = 0; ip < 2; ip++) {
                if (big) {
                    for (size_t b = 0; b < sizeof(big_pairs) / sizeof(big_pairs[0]); b++)
                        reduce_case(&coll_binomial_reduce, p, BIG_COUNT, big_pairs[b].dtype,
                                    big_pairs[b].op, roots[k], ip, (int)((p + b + ip) % 2));
                    continue;
                }
                for (size_t ci = 0; ci < sizeof(small_counts) / sizeof(small_counts[0]); ci++)
                    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
                        for (int op = 0; op < CHORUS_OP_COUNT; op++)
                            for (int strict = 0; strict < 2; strict++)
                                reduce_case(&coll_binomial_reduce, p, small_counts[ci],
                                            (chorus_dtype_t)dt, (chorus_op_t)op, roots[k], ip,
                                            strict);
            }
        }
    }
}

Test(tree_algs, binomial_reduce_small) { reduce_sweep(0); }
Test(tree_algs, binomial_reduce_big) { reduce_sweep(1); }

/*
 * Deeper trees and other folds than 8 ranks give, in the dtypes whose
 * range holds the larger exact results.
 */
Test(tree_algs, larger_rank_counts)
{
    static const int ps[] = {12, 16, 17, 31, 64};
    static const chorus_dtype_t dts[] = {CHORUS_INT32, CHORUS_FLOAT16, CHORUS_BFLOAT16};
    static const size_t counts[] = {1, 1023};

    for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
        int p = ps[pi], roots[2] = {0, p / 3 + 1};

        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                for (int op = 0; op < CHORUS_OP_COUNT; op++) {
                    allreduce_case(&coll_rd_allreduce, p, counts[c], dts[d], (chorus_op_t)op,
                                   op % 2, 1);
                    allreduce_case(&coll_rabenseifner_allreduce, p, counts[c], dts[d],
                                   (chorus_op_t)op, (op + 1) % 2, 1);
                    for (int k = 0; k < 2; k++)
                        reduce_case(&coll_binomial_reduce, p, counts[c], dts[d],
                                    (chorus_op_t)op, roots[k], (op + k) % 2, 1);
                }
                for (int k = 0; k < 2; k++) {
                    broadcast_case(&coll_binomial_broadcast, p, counts[c], dts[d], roots[k],
                                   k, 1);
                    broadcast_case(&coll_chain_broadcast, p, counts[c], dts[d], roots[k],
                                   1 - k, 1);
                }
            }
    }
}

/* ---- bitwise agreement with inexact floating-point sums ------------------ */

static double tolerance(chorus_dtype_t dt)
{
    switch (dt) {
    case CHORUS_FLOAT16: return 0.05;
    case CHORUS_BFLOAT16: return 0.5;
    case CHORUS_FLOAT32: return 1e-5;
    default: return 1e-12;
    }
}

/*
 * Random values in [-1, 1): sums depend on the order of additions, yet every
 * rank must end with the same bits, close to the exact sum.
 */
static void float_agreement_case(const coll_alg_t *alg, int p, chorus_dtype_t dt,
                                 chorus_op_t op)
{
    const size_t count = 1021;
    world_t w = {.p = p, .count = count, .dt = dt, .op = op};
    unsigned seed = 12345u + (unsigned)p;

    w.bytes = count * chorus_dtype_size(dt);
    for (int r = 0; r < p; r++) {
        w.send[r] = alloc_poisoned(w.bytes);
        for (size_t i = 0; i < count; i++) {
            seed = seed * 1103515245u + 12345u;
            exact_put(dt, w.send[r], i, ((double)(seed >> 8 & 0xffff) / 32768.0) - 1.0);
        }
        w.recv[r] = alloc_poisoned(w.bytes);
        w.args[r] = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = w.send[r],
                                  .recvbuf = w.recv[r], .count = count, .dtype = dt, .op = op,
                                  .rank = r, .size = p, .chunk_bytes = 256};
    }
    cr_assert_eq(run_world(alg, &w, 1, 99u + (unsigned)p), 0, "%s p=%d", alg->name, p);
    for (size_t i = 0; i < count; i++) {
        double exact = 0;

        for (int r = 0; r < p; r++)
            exact += exact_get(dt, w.send[r], i);
        if (op == CHORUS_AVG)
            exact /= p;
        cr_assert(fabs(exact_get(dt, w.recv[0], i) - exact) <= tolerance(dt) * p,
                  "%s p=%d %s element %zu: %g vs %g", alg->name, p, chorus_dtype_name(dt), i,
                  exact_get(dt, w.recv[0], i), exact);
    }
    for (int r = 1; r < p; r++)
        cr_assert(memcmp(w.recv[r], w.recv[0], w.bytes) == 0,
                  "%s p=%d %s %s: rank %d differs bitwise from rank 0", alg->name, p,
                  chorus_dtype_name(dt), chorus_op_name(op), r);
    world_free(&w);
}

Test(tree_algs, allreduce_bitwise_agreement)
{
    static const chorus_dtype_t dts[] = {CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32,
                                         CHORUS_FLOAT64};
    const coll_alg_t *algs[] = {&coll_rd_allreduce, &coll_rabenseifner_allreduce};

    for (int a = 0; a < 2; a++)
        for (int p = 2; p <= MAX_P; p++)
            for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
                float_agreement_case(algs[a], p, dts[d], CHORUS_SUM);
                float_agreement_case(algs[a], p, dts[d], CHORUS_AVG);
            }
}

/* ---- traffic: the algorithms move what their shape says ------------------- */

static sched_sim_stats_t traffic(const coll_alg_t *alg, coll_type_t coll, int p, size_t count,
                                 size_t chunk_bytes)
{
    world_t w = {.p = p, .count = count, .dt = CHORUS_FLOAT32, .op = CHORUS_SUM};
    sched_sim_stats_t st;

    w.bytes = count * 4;
    for (int r = 0; r < p; r++) {
        w.send[r] = alloc_poisoned(w.bytes);
        memset(w.send[r], 0, w.bytes);
        w.recv[r] = alloc_poisoned(w.bytes);
        w.args[r] = (coll_args_t){.coll = coll, .sendbuf = w.send[r], .recvbuf = w.recv[r],
                                  .count = count, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                                  .root = p - 1, .rank = r, .size = p,
                                  .chunk_bytes = chunk_bytes};
    }
    cr_assert_eq(sched_sim_run_opts(alg, w.args, p, NULL, &st), 0, "%s p=%d", alg->name, p);
    world_free(&w);
    return st;
}

Test(tree_algs, traffic_matches_shape)
{
    const size_t n = 1024, bytes = n * 4;

    for (int p = 1; p <= MAX_P; p++) {
        int p2 = coll_rd_pow2(p), rem = p - p2, lg = 0;
        sched_sim_stats_t st;

        while ((1 << lg) < p2)
            lg++;
        /* Recursive doubling, one chunk: p2 * log2(p2) exchanges plus 2 per folded pair. */
        st = traffic(&coll_rd_allreduce, COLL_ALLREDUCE, p, n, 0);
        cr_assert_eq(st.messages, (long)(p2 * lg + 2 * rem), "rd p=%d", p);
        cr_assert_eq(st.bytes, (size_t)(p2 * lg + 2 * rem) * bytes, "rd p=%d", p);
        /* The same in 4 chunks. */
        st = traffic(&coll_rd_allreduce, COLL_ALLREDUCE, p, n, bytes / 4);
        cr_assert_eq(st.messages, 4L * (p2 * lg + 2 * rem), "rd chunked p=%d", p);
        /* Rabenseifner: each survivor sends (p2 - 1) / p2 of the vector twice. */
        st = traffic(&coll_rabenseifner_allreduce, COLL_ALLREDUCE, p, n, 0);
        cr_assert_eq(st.messages, (long)(2 * p2 * lg + 2 * rem), "rabenseifner p=%d", p);
        cr_assert_eq(st.bytes, (size_t)(2 * (p2 - 1) + 2 * rem) * bytes, "rabenseifner p=%d", p);
        /* Trees and the chain: one message per chunk per edge. */
        st = traffic(&coll_binomial_broadcast, COLL_BROADCAST, p, n, bytes / 8);
        cr_assert_eq(st.messages, 8L * (p - 1), "binomial broadcast p=%d", p);
        cr_assert_eq(st.bytes, (size_t)(p - 1) * bytes);
        st = traffic(&coll_chain_broadcast, COLL_BROADCAST, p, n, bytes / 8);
        cr_assert_eq(st.messages, 8L * (p - 1), "chain broadcast p=%d", p);
        cr_assert_eq(st.bytes, (size_t)(p - 1) * bytes);
        st = traffic(&coll_binomial_reduce, COLL_REDUCE, p, n, bytes / 16);
        cr_assert_eq(st.messages, 16L * (p - 1), "binomial reduce p=%d", p);
        cr_assert_eq(st.bytes, (size_t)(p - 1) * bytes);
    }
}

/* ---- schedule shape -------------------------------------------------------- */

/* Flat algorithms read nothing of the environment. */
static const coll_env_t tree_env = {.nranks = 4};

static void build_one(const coll_alg_t *alg, const coll_args_t *args, coll_sched_t *s)
{
    coll_sched_init(s, args->dtype, args->op, args->size);
    cr_assert_eq(alg->build(args, &tree_env, s), CHORUS_OK, "%s rank %d", alg->name, args->rank);
}

/*
 * The chain pipelines: a middle rank can post every receive at once, and
 * each send waits only for the receive of its own chunk.
 */
Test(tree_algs, chain_broadcast_pipelines)
{
    static float buf[4096];
    coll_args_t a = {.coll = COLL_BROADCAST, .sendbuf = NULL, .recvbuf = buf, .count = 4096,
                     .dtype = CHORUS_FLOAT32, .root = 2, .rank = 5, .size = 8,
                     .chunk_bytes = 1024};
    coll_sched_t s;
    size_t nrecv = 0, nsend = 0;

    build_one(&coll_chain_broadcast, &a, &s);
    for (size_t i = 0; i < s.nsteps; i++) {
        const coll_step_t *st = &s.steps[i];

        if (st->kind == COLL_STEP_RECV) {
            cr_assert_eq(st->ndeps, 0);
            cr_assert_eq(st->peer, 4);
            nrecv++;
        } else {
            cr_assert_eq(st->kind, COLL_STEP_SEND);
            cr_assert_eq(st->peer, 6);
            cr_assert_eq(st->ndeps, 1);
            cr_assert_eq(s.steps[st->deps[0]].kind, COLL_STEP_RECV);
            cr_assert_eq(s.steps[st->deps[0]].tag, st->tag);
            cr_assert_eq(s.steps[st->deps[0]].dst, st->src);
            nsend++;
        }
    }
    cr_assert(nrecv == 16 && nsend == 16, "%zu receives, %zu sends", nrecv, nsend);
    coll_sched_finalize(&s);
}

/*
 * Binomial reduce pipelines with bounded scratch: a leaf sends every chunk
 * without waiting, and an inner rank's receive of chunk k waits at most for
 * the reduction of chunk k - 8 that used the same slot.
 */
Test(tree_algs, binomial_reduce_pipelines)
{
    static float in[8192];
    coll_args_t a = {.coll = COLL_REDUCE, .sendbuf = in, .recvbuf = NULL, .count = 8192,
                     .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM, .root = 0, .rank = 7,
                     .size = 8, .chunk_bytes = 1024};
    coll_sched_t s;
    size_t ready = 0;

    build_one(&coll_binomial_reduce, &a, &s);     /* vrank 7: a leaf */
    for (size_t i = 0; i < s.nsteps; i++) {
        cr_assert_eq(s.steps[i].kind, COLL_STEP_SEND);
        cr_assert_eq(s.steps[i].ndeps, 0);
    }
    cr_assert_eq(s.nsteps, 32);
    coll_sched_finalize(&s);

    a.rank = 4;                                      /* vrank 4: children 5 and 6 */
    build_one(&coll_binomial_reduce, &a, &s);
    for (size_t i = 0; i < s.nsteps; i++)
        if (s.steps[i].kind == COLL_STEP_RECV && s.steps[i].ndeps == 0)
            ready++;
    cr_assert_eq(ready, 2 * 8, "receives ready at start: %zu", ready);
    coll_sched_finalize(&s);
}

/* ---- arguments ------------------------------------------------------------- */

/* One argument made unusable, and whether it applies to rooted collectives / reductions. */
static void spoil(coll_args_t *a, int which)
{
    switch (which) {
    case 0: a->rank = a->size; break;
    case 1: a->rank = -1; break;
    case 2: a->size = 0; break;
    case 3: a->dtype = CHORUS_DTYPE_COUNT; break;
    case 4: a->rank = a->root; a->recvbuf = NULL; break;   /* written everywhere or on root */
    case 5: a->root = a->size; break;
    case 6: a->op = CHORUS_OP_COUNT; break;
    default: break;
    }
}

Test(tree_algs, invalid_arguments)
{
    static int32_t buf[16];
    const coll_alg_t *algs[] = {&coll_rd_allreduce, &coll_rabenseifner_allreduce,
                                &coll_binomial_broadcast, &coll_chain_broadcast,
                                &coll_binomial_reduce};
    coll_args_t good = {.sendbuf = buf, .recvbuf = buf, .count = 16, .dtype = CHORUS_INT32,
                        .op = CHORUS_SUM, .root = 0, .rank = 1, .size = 4,
                        .chunk_bytes = 4096};

    for (size_t k = 0; k < sizeof(algs) / sizeof(algs[0]); k++) {
        const coll_alg_t *alg = algs[k];
        coll_args_t a;
        coll_sched_t s;

        for (int which = 0; which < 7; which++) {
            if (which == 5 && alg->coll == COLL_ALLREDUCE)
                continue;   /* allreduce ignores root */
            if (which == 6 && alg->coll == COLL_BROADCAST)
                continue;   /* broadcast ignores op */
            a = good;
            a.coll = alg->coll;
            spoil(&a, which);
            coll_sched_init(&s, a.dtype, a.op, 4);
            cr_assert_eq(alg->build(&a, &tree_env, &s), CHORUS_ERR_INVALID_ARG, "%s case %d", alg->name,
                         which);
            cr_assert_eq(s.nsteps, 0);
            coll_sched_finalize(&s);
        }
        /* count 0 is valid and moves nothing, whatever the buffers */
        a = good;
        a.coll = alg->coll;
        a.count = 0;
        a.sendbuf = NULL;
        a.recvbuf = NULL;
        coll_sched_init(&s, a.dtype, a.op, 4);
        cr_assert_eq(alg->build(&a, &tree_env, &s), CHORUS_OK, "%s count 0", alg->name);
        cr_assert_eq(s.nsteps, 0);
        coll_sched_finalize(&s);
    }
}

/* ---- no step races with another on the same memory --------------------------- */

typedef struct {
    const char *lo, *hi;
    int write;
} access_t;

static int step_accesses(const coll_step_t *st, access_t acc[3])
{
    const char *dst = st->dst, *src = st->src, *src2 = st->src2;
    int n = 0;

    if (st->bytes == 0)
        return 0;
    switch (st->kind) {
    case COLL_STEP_SEND:
        acc[n++] = (access_t){src, src + st->bytes, 0};
        break;
    case COLL_STEP_RECV:
    case COLL_STEP_FINALIZE:
        acc[n++] = (access_t){dst, dst + st->bytes, 1};
        break;
    case COLL_STEP_REDUCE:
        acc[n++] = (access_t){src, src + st->bytes, 0};
        acc[n++] = (access_t){src2, src2 + st->bytes, 0};
        acc[n++] = (access_t){dst, dst + st->bytes, 1};
        break;
    case COLL_STEP_COPY:
        if (dst != src) {
            acc[n++] = (access_t){src, src + st->bytes, 0};
            acc[n++] = (access_t){dst, dst + st->bytes, 1};
        }
        break;
    default:
        cr_assert_fail("unknown step kind %d", st->kind);
    }
    return n;
}

static int steps_conflict(const coll_step_t *x, const coll_step_t *y)
{
    access_t ax[3], ay[3];
    int nx = step_accesses(x, ax), ny = step_accesses(y, ay);

    for (int i = 0; i < nx; i++)
        for (int j = 0; j < ny; j++)
            if ((ax[i].write || ay[j].write) && ax[i].lo < ay[j].hi && ay[j].lo < ax[i].hi)
                return 1;
    return 0;
}

/*
 * Every two steps that touch overlapping memory, one of them writing, must
 * be ordered by the dependencies: the executor runs everything else at once.
 */
static void check_no_races(const coll_sched_t *s, const char *what, int rank)
{
    size_t n = s->nsteps, words = (n + 63) / 64;
    uint64_t *reach = calloc(n * words + 1, sizeof(*reach));

    cr_assert_not_null(reach);
    for (size_t j = 0; j < n; j++) {
        uint64_t *rj = reach + j * words;

        for (int d = 0; d < s->steps[j].ndeps; d++) {
            uint32_t dep = s->steps[j].deps[d];
            const uint64_t *rd = reach + (size_t)dep * words;

            cr_assert(dep < j, "%s rank %d: step %zu depends on later step %u", what, rank, j,
                      dep);
            for (size_t w = 0; w < words; w++)
                rj[w] |= rd[w];
            rj[dep / 64] |= 1ULL << (dep % 64);
        }
        for (size_t i = 0; i < j; i++) {
            if ((rj[i / 64] >> (i % 64)) & 1)
                continue;
            cr_assert(!steps_conflict(&s->steps[i], &s->steps[j]),
                      "%s rank %d: steps %zu (kind %d) and %zu (kind %d) race on memory", what,
                      rank, i, s->steps[i].kind, j, s->steps[j].kind);
        }
    }
    free(reach);
}

static void race_case(const coll_alg_t *alg, int p, size_t count, int root, int inplace)
{
    const size_t bytes = count * 4;
    char what[128];

    snprintf(what, sizeof(what), "%s p=%d count=%zu root=%d %s", alg->name, p, count, root,
             inplace ? "in-place" : "out-of-place");
    for (int r = 0; r < p; r++) {
        unsigned char *send = alloc_poisoned(bytes), *recv = inplace ? send : alloc_poisoned(bytes);
        coll_args_t a = {.coll = alg->coll, .sendbuf = send, .recvbuf = recv, .count = count,
                         .dtype = CHORUS_FLOAT32, .op = CHORUS_AVG, .root = root, .rank = r,
                         .size = p, .chunk_bytes = 512};
        coll_sched_t s;

        build_one(alg, &a, &s);
        check_no_races(&s, what, r);
        coll_sched_finalize(&s);
        if (recv != send)
            free(recv);
        free(send);
    }
}

Test(tree_algs, schedules_have_no_races)
{
    const coll_alg_t *algs[] = {&coll_rd_allreduce, &coll_rabenseifner_allreduce,
                                &coll_binomial_broadcast, &coll_chain_broadcast,
                                &coll_binomial_reduce};
    static const size_t counts[] = {1, 7, 1000, 5000};
    int roots[3];

    for (size_t k = 0; k < sizeof(algs) / sizeof(algs[0]); k++)
        for (int p = 1; p <= MAX_P; p++) {
            /* allreduce has no root */
            int nroots = algs[k]->coll == COLL_ALLREDUCE ? 1 : roots_of(p, roots);

            roots[0] = algs[k]->coll == COLL_ALLREDUCE ? 0 : roots[0];
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (int j = 0; j < nroots; j++)
                    for (int ip = 0; ip < 2; ip++)
                        race_case(algs[k], p, counts[c], roots[j], ip);
        }
}
