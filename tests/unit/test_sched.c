/*
 * Schedules, the executor and the ring/pairwise/dissemination algorithms,
 * run through the in-memory simulator (sched_sim) for every rank at once.
 * Results are checked element by element on every rank against values
 * that are exact whatever the reduction order.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "reduce/reduce.h"
#include "tests/unit/sched_sim.h"
#include "util/config.h"

#define SMALL_CHUNK 4096
#define GARBAGE 0xcd

static const size_t small_counts[] = {0, 1, 7, 1023};

typedef struct {
    int p;
    size_t count;
    chorus_dtype_t dt;
    chorus_op_t op;
    int inplace;
    const sched_sim_opts_t *opts;
} case_t;

static int dt_signed(chorus_dtype_t dt)
{
    return dt != CHORUS_UINT8 && dt != CHORUS_UINT32 && dt != CHORUS_UINT64;
}

static void encode(chorus_dtype_t dt, long v, void *dst)
{
    switch (dt) {
    case CHORUS_INT8:    *(int8_t *)dst = (int8_t)v; break;
    case CHORUS_UINT8:   *(uint8_t *)dst = (uint8_t)v; break;
    case CHORUS_INT32:   *(int32_t *)dst = (int32_t)v; break;
    case CHORUS_UINT32:  *(uint32_t *)dst = (uint32_t)v; break;
    case CHORUS_INT64:   *(int64_t *)dst = (int64_t)v; break;
    case CHORUS_UINT64:  *(uint64_t *)dst = (uint64_t)v; break;
    case CHORUS_FLOAT16: *(uint16_t *)dst = chorus__float_to_half((float)v); break;
    case CHORUS_BFLOAT16: *(uint16_t *)dst = chorus__float_to_bf16((float)v); break;
    case CHORUS_FLOAT32: *(float *)dst = (float)v; break;
    case CHORUS_FLOAT64: *(double *)dst = (double)v; break;
    default: cr_assert_fail("bad dtype %d", (int)dt);
    }
}

/*
 * Rank r's element i. Sums of 8 ranks stay below 105 (int8, bfloat16 exact);
 * products are of 1, 2 and -1 with at most two 2s; min/max mix ranks.
 */
static long input_value(chorus_op_t op, chorus_dtype_t dt, int r, size_t i)
{
    switch (op) {
    case CHORUS_PROD:
        if ((i + (size_t)r) % 5 == 0)
            return 2;
        return dt_signed(dt) && (i + 2 * (size_t)r) % 7 == 0 ? -1 : 1;
    case CHORUS_MIN:
    case CHORUS_MAX:
        return (long)((i * 5 + (size_t)r * 11) % 23) - (dt_signed(dt) ? 11 : 0);
    default:
        return (long)((i * 3 + (size_t)r * 5) % 13) + 1;
    }
}

static long reduced_value(chorus_op_t op, chorus_dtype_t dt, int p, size_t i)
{
    long acc = input_value(op, dt, 0, i);
    for (int r = 1; r < p; r++) {
        long v = input_value(op, dt, r, i);
        switch (op) {
        case CHORUS_PROD: acc *= v; break;
        case CHORUS_MIN: acc = v < acc ? v : acc; break;
        case CHORUS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    return acc;
}

/* n expected elements starting at global index first; AVG divided by the kernel's rule. */
static void *expected_reduction(const case_t *c, size_t first, size_t n)
{
    size_t es = chorus_dtype_size(c->dt);
    char *buf = malloc(n * es + 1);
    cr_assert_not_null(buf);
    for (size_t i = 0; i < n; i++)
        encode(c->dt, reduced_value(c->op, c->dt, c->p, first + i), buf + i * es);
    chorus__reduce_finalize(c->dt, c->op, buf, n, c->p);
    return buf;
}

static void fill_input(const case_t *c, int r, char *buf, size_t n)
{
    size_t es = chorus_dtype_size(c->dt);
    for (size_t i = 0; i < n; i++)
        encode(c->dt, input_value(c->op, c->dt, r, i), buf + i * es);
}

/* Arbitrary bytes, distinct per (a, b, element, byte), for the data-movement collectives. */
static void fill_pattern(char *buf, size_t bytes, int a, int b)
{
    unsigned char base = (unsigned char)(a * 37 + b * 101 + 1);
    for (size_t k = 0; k < bytes; k++)
        buf[k] = (char)(base + k * 11 + (k >> 8));
}

static void check_bytes(const char *what, const case_t *c, int r, const char *got,
                        const char *want, size_t n)
{
    size_t es = chorus_dtype_size(c->dt);
    if (memcmp(got, want, n * es) == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(got + i * es, want + i * es, es) != 0) {
            unsigned long long g = 0, w = 0;
            memcpy(&g, got + i * es, es);
            memcpy(&w, want + i * es, es);
            cr_assert_fail("%s p=%d count=%zu %s %s %s: rank %d element %zu is 0x%llx, "
                           "expected 0x%llx", what, c->p, c->count, chorus_dtype_name(c->dt),
                           chorus_op_name(c->op), c->inplace ? "in-place" : "out-of-place",
                           r, i, g, w);
        }
    }
}

static void run_sim(const coll_alg_t *alg, const case_t *c, const coll_args_t *args)
{
    int rc = sched_sim_run_opts(alg, args, c->p, c->opts, NULL);
    cr_assert_eq(rc, 0, "%s/%s p=%d count=%zu %s %s %s: simulation failed",
                 coll_type_name(alg->coll), alg->name, c->p, c->count,
                 chorus_dtype_name(c->dt), chorus_op_name(c->op),
                 c->inplace ? "in-place" : "out-of-place");
}

static coll_args_t base_args(coll_type_t coll, const case_t *c, int r)
{
    return (coll_args_t){.coll = coll, .count = c->count, .dtype = c->dt, .op = c->op,
                         .rank = r, .size = c->p, .chunk_bytes = SMALL_CHUNK};
}

/* ---- collective checkers ------------------------------------------------ */

static void check_allreduce(const coll_alg_t *alg, const case_t *c)
{
    size_t bytes = c->count * chorus_dtype_size(c->dt);
    coll_args_t args[SCHED_SIM_MAX_RANKS];
    char *in[SCHED_SIM_MAX_RANKS], *out[SCHED_SIM_MAX_RANKS];
    char *want = expected_reduction(c, 0, c->count);

    for (int r = 0; r < c->p; r++) {
        in[r] = malloc(bytes + 1);
        out[r] = malloc(bytes + 1);
        fill_input(c, r, in[r], c->count);
        if (c->inplace)
            memcpy(out[r], in[r], bytes);
        else
            memset(out[r], GARBAGE, bytes);
        args[r] = base_args(COLL_ALLREDUCE, c, r);
        args[r].sendbuf = c->inplace ? out[r] : in[r];
        args[r].recvbuf = out[r];
    }
    run_sim(alg, c, args);
    for (int r = 0; r < c->p; r++) {
        check_bytes(alg->name, c, r, out[r], want, c->count);
        if (!c->inplace) {
            char *orig = malloc(bytes + 1);
            fill_input(c, r, orig, c->count);
            check_bytes("allreduce input changed:", c, r, in[r], orig, c->count);
            free(orig);
        }
        free(in[r]);
        free(out[r]);
    }
    free(want);
}

static void check_reduce_scatter(const coll_alg_t *alg, const case_t *c)
{
    size_t es = chorus_dtype_size(c->dt), bytes = c->count * es;
    size_t total = c->count * (size_t)c->p;
    coll_args_t args[SCHED_SIM_MAX_RANKS];
    char *in[SCHED_SIM_MAX_RANKS], *out[SCHED_SIM_MAX_RANKS];
    char *want = expected_reduction(c, 0, total);
    char *orig = malloc(total * es + 1);

    for (int r = 0; r < c->p; r++) {
        in[r] = malloc(total * es + 1);
        fill_input(c, r, in[r], total);
        out[r] = c->inplace ? in[r] + (size_t)r * bytes : malloc(bytes + 1);
        if (!c->inplace)
            memset(out[r], GARBAGE, bytes);
        args[r] = base_args(COLL_REDUCE_SCATTER, c, r);
        args[r].sendbuf = in[r];
        args[r].recvbuf = out[r];
    }
    run_sim(alg, c, args);
    for (int r = 0; r < c->p; r++) {
        check_bytes(alg->name, c, r, out[r], want + (size_t)r * bytes, c->count);
        if (!c->inplace) {
            fill_input(c, r, orig, total);
            check_bytes("reduce_scatter input changed:", c, r, in[r], orig, total);
            free(out[r]);
        }
        free(in[r]);
    }
    free(orig);
    free(want);
}

static void check_allgather(const coll_alg_t *alg, const case_t *c)
{
    size_t bytes = c->count * chorus_dtype_size(c->dt), total = bytes * (size_t)c->p;
    coll_args_t args[SCHED_SIM_MAX_RANKS];
    char *in[SCHED_SIM_MAX_RANKS], *out[SCHED_SIM_MAX_RANKS];
    char *want = malloc(total + 1);

    for (int r = 0; r < c->p; r++)
        fill_pattern(want + (size_t)r * bytes, bytes, r, 0);
    for (int r = 0; r < c->p; r++) {
        out[r] = malloc(total + 1);
        memset(out[r], GARBAGE, total);
        in[r] = c->inplace ? out[r] + (size_t)r * bytes : malloc(bytes + 1);
        fill_pattern(in[r], bytes, r, 0);
        args[r] = base_args(COLL_ALLGATHER, c, r);
        args[r].sendbuf = in[r];
        args[r].recvbuf = out[r];
    }
    run_sim(alg, c, args);
    for (int r = 0; r < c->p; r++) {
        check_bytes(alg->name, c, r, out[r], want, c->count * (size_t)c->p);
        if (!c->inplace) {
            check_bytes("allgather input changed:", c, r, in[r], want + (size_t)r * bytes,
                        c->count);
            free(in[r]);
        }
        free(out[r]);
    }
    free(want);
}

static void check_alltoall(const coll_alg_t *alg, const case_t *c)
{
    size_t bytes = c->count * chorus_dtype_size(c->dt), total = bytes * (size_t)c->p;
    coll_args_t args[SCHED_SIM_MAX_RANKS];
    char *in[SCHED_SIM_MAX_RANKS], *out[SCHED_SIM_MAX_RANKS];
    char *want = malloc(total + 1);

    for (int r = 0; r < c->p; r++) {
        in[r] = malloc(total + 1);
        for (int j = 0; j < c->p; j++)    /* block j of rank r goes to rank j */
            fill_pattern(in[r] + (size_t)j * bytes, bytes, r, j);
        out[r] = c->inplace ? in[r] : malloc(total + 1);
        if (!c->inplace)
            memset(out[r], GARBAGE, total);
        args[r] = base_args(COLL_ALLTOALL, c, r);
        args[r].sendbuf = in[r];
        args[r].recvbuf = out[r];
    }
    run_sim(alg, c, args);
    for (int r = 0; r < c->p; r++) {
        for (int i = 0; i < c->p; i++)
            fill_pattern(want + (size_t)i * bytes, bytes, i, r);
        check_bytes(alg->name, c, r, out[r], want, c->count * (size_t)c->p);
        if (!c->inplace) {
            for (int j = 0; j < c->p; j++)
                fill_pattern(want + (size_t)j * bytes, bytes, r, j);
            check_bytes("alltoall input changed:", c, r, in[r], want, c->count * (size_t)c->p);
            free(out[r]);
        }
        free(in[r]);
    }
    free(want);
}

typedef void (*checker_fn)(const coll_alg_t *alg, const case_t *c);

/* Every rank count 1..8, the given counts, every op (or one), both buffer modes. */
static void sweep(const coll_alg_t *alg, checker_fn check, chorus_dtype_t dt,
                  const size_t *counts, size_t ncounts, int all_ops,
                  const sched_sim_opts_t *opts)
{
    for (int p = 1; p <= 8; p++)
        for (size_t k = 0; k < ncounts; k++)
            for (int op = 0; op < (all_ops ? CHORUS_OP_COUNT : 1); op++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    case_t c = {p, counts[k], dt, (chorus_op_t)op, inplace, opts};
                    check(alg, &c);
                }
}

/* ---- every algorithm x dtype x op x rank count x count x buffer mode ---- */

static chorus_dtype_t all_dtypes[CHORUS_DTYPE_COUNT];

#define DTYPE_PARAMS(name)                                                  \
    ParameterizedTestParameters(sched, name)                                \
    {                                                                       \
        for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)                        \
            all_dtypes[d] = (chorus_dtype_t)d;                              \
        return cr_make_param_array(chorus_dtype_t, all_dtypes, CHORUS_DTYPE_COUNT); \
    }

static const size_t large_count[] = {100003};

DTYPE_PARAMS(ring_allreduce)
ParameterizedTest(chorus_dtype_t *dt, sched, ring_allreduce)
{
    sweep(&coll_ring_allreduce, check_allreduce, *dt, small_counts, 4, 1, NULL);
}

DTYPE_PARAMS(ring_allreduce_large)
ParameterizedTest(chorus_dtype_t *dt, sched, ring_allreduce_large)
{
    sweep(&coll_ring_allreduce, check_allreduce, *dt, large_count, 1, 0, NULL);
    case_t c = {5, 100003, *dt, CHORUS_AVG, 0, NULL};
    check_allreduce(&coll_ring_allreduce, &c);
}

DTYPE_PARAMS(ring_reduce_scatter)
ParameterizedTest(chorus_dtype_t *dt, sched, ring_reduce_scatter)
{
    sweep(&coll_ring_reduce_scatter, check_reduce_scatter, *dt, small_counts, 4, 1, NULL);
}

DTYPE_PARAMS(ring_reduce_scatter_large)
ParameterizedTest(chorus_dtype_t *dt, sched, ring_reduce_scatter_large)
{
    /* 100003 per rank: the input is size times that. */
    for (int p = 1; p <= 8; p += 3) {
        case_t c = {p, 100003, *dt, p == 4 ? CHORUS_AVG : CHORUS_SUM, p == 7, NULL};
        check_reduce_scatter(&coll_ring_reduce_scatter, &c);
    }
}

DTYPE_PARAMS(ring_allgather)
ParameterizedTest(chorus_dtype_t *dt, sched, ring_allgather)
{
    static const size_t counts[] = {0, 1, 7, 1023, 100003};
    sweep(&coll_ring_allgather, check_allgather, *dt, counts, 5, 0, NULL);
}

DTYPE_PARAMS(pairwise_alltoall)
ParameterizedTest(chorus_dtype_t *dt, sched, pairwise_alltoall)
{
    static const size_t counts[] = {0, 1, 7, 1023, 100003};
    sweep(&coll_pairwise_alltoall, check_alltoall, *dt, counts, 5, 0, NULL);
}

/*
 * Transport behaviours other than eager, immediate completion: rendezvous
 * sends (no buffering), completion only on a later progress call, and ranks
 * progressed in shuffled order.
 */
static const sched_sim_opts_t strict_modes[] = {
    {.eager = 0, .deferred = 0, .seed = 0, .dead_rank = -1},
    {.eager = 0, .deferred = 1, .seed = 7, .dead_rank = -1, .skew = 1},
    {.eager = 1, .deferred = 1, .seed = 12345, .dead_rank = -1, .skew = 1},
};

Test(sched, transport_modes)
{
    static const size_t counts[] = {1, 7, 1023, 5000};
    static const chorus_dtype_t dts[] = {CHORUS_INT8, CHORUS_FLOAT16, CHORUS_FLOAT64};
    for (size_t m = 0; m < 3; m++) {
        for (size_t d = 0; d < 3; d++) {
            sweep(&coll_ring_allreduce, check_allreduce, dts[d], counts, 4, 1, &strict_modes[m]);
            sweep(&coll_ring_reduce_scatter, check_reduce_scatter, dts[d], counts, 4, 1,
                  &strict_modes[m]);
            sweep(&coll_ring_allgather, check_allgather, dts[d], counts, 4, 0, &strict_modes[m]);
            sweep(&coll_pairwise_alltoall, check_alltoall, dts[d], counts, 4, 0,
                  &strict_modes[m]);
        }
    }
}

/* No chunking (chunk_bytes 0) and chunks smaller than one element. */
Test(sched, chunk_extremes)
{
    static const size_t chunks[] = {0, 1, 3, 4, 5};
    for (size_t k = 0; k < 5; k++) {
        for (int p = 1; p <= 6; p++) {
            coll_args_t args[8];
            int32_t in[8][37], out[8][37];
            for (int r = 0; r < p; r++) {
                for (int i = 0; i < 37; i++)
                    in[r][i] = r * 100 + i;
                args[r] = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = in[r],
                                        .recvbuf = out[r], .count = 37, .dtype = CHORUS_INT32,
                                        .op = CHORUS_MAX, .rank = r, .size = p,
                                        .chunk_bytes = chunks[k]};
            }
            cr_assert_eq(sched_sim_run(&coll_ring_allreduce, args, p), 0);
            for (int r = 0; r < p; r++)
                for (int i = 0; i < 37; i++)
                    cr_assert_eq(out[r][i], (p - 1) * 100 + i, "chunk %zu p=%d", chunks[k], p);
        }
    }
}

/* ---- barrier ------------------------------------------------------------ */

static coll_args_t barrier_args(int r, int p)
{
    return (coll_args_t){.coll = COLL_BARRIER, .rank = r, .size = p};
}

Test(sched, dissemination_barrier)
{
    for (int p = 1; p <= 8; p++) {
        coll_args_t args[8];
        sched_sim_stats_t st;
        for (int r = 0; r < p; r++)
            args[r] = barrier_args(r, p);
        for (size_t m = 0; m < 3; m++)
            cr_assert_eq(sched_sim_run_opts(&coll_dissemination_barrier, args, p,
                                            &strict_modes[m], NULL), 0, "p=%d mode %zu", p, m);
        cr_assert_eq(sched_sim_run_opts(&coll_dissemination_barrier, args, p, NULL, &st), 0);
        /* ceil(log2 p) one-byte signals per rank. */
        int rounds = 0;
        while ((1 << rounds) < p)
            rounds++;
        cr_assert_eq(st.messages, (long)p * rounds, "p=%d", p);
    }
}

/* A rank that never arrives: no other rank may leave the barrier. */
Test(sched, barrier_waits_for_every_rank)
{
    for (int p = 2; p <= 8; p++) {
        for (int dead = 0; dead < p; dead++) {
            coll_args_t args[8];
            sched_sim_opts_t o = SCHED_SIM_OPTS_DEFAULT;
            sched_sim_stats_t st;
            o.dead_rank = dead;
            for (int r = 0; r < p; r++)
                args[r] = barrier_args(r, p);
            cr_assert_neq(sched_sim_run_opts(&coll_dissemination_barrier, args, p, &o, &st), 0);
            for (int r = 0; r < p; r++)
                cr_assert_neq(st.result[r], 1, "p=%d dead %d: rank %d passed", p, dead, r);
        }
    }
}

/* A rank that arrives late: nobody leaves before it has arrived. */
Test(sched, barrier_waits_for_late_rank)
{
    for (int p = 2; p <= 8; p++) {
        for (int late = 0; late < p; late++) {
            coll_args_t args[8];
            sched_sim_opts_t o = SCHED_SIM_OPTS_DEFAULT;
            sched_sim_stats_t st;
            o.late_rank = late;
            o.late_rounds = 10;
            for (int r = 0; r < p; r++)
                args[r] = barrier_args(r, p);
            cr_assert_eq(sched_sim_run_opts(&coll_dissemination_barrier, args, p, &o, &st), 0);
            for (int r = 0; r < p; r++)
                cr_assert_geq(st.finish_round[r], 10, "p=%d late %d: rank %d left in round %ld",
                              p, late, r, st.finish_round[r]);
        }
    }
}

/* ---- executor ------------------------------------------------------------ */

/* A failed peer fails the schedules of its neighbours with its rank; nobody completes. */
Test(sched, dead_peer_fails_neighbours)
{
    int32_t in[4][100], out[4][100];
    coll_args_t args[4];
    sched_sim_opts_t o = SCHED_SIM_OPTS_DEFAULT;
    sched_sim_stats_t st;

    for (int r = 0; r < 4; r++) {
        memset(in[r], 0, sizeof(in[r]));
        args[r] = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = in[r], .recvbuf = out[r],
                                .count = 100, .dtype = CHORUS_INT32, .op = CHORUS_SUM,
                                .rank = r, .size = 4, .chunk_bytes = 64};
    }
    o.dead_rank = 2;
    cr_assert_neq(sched_sim_run_opts(&coll_ring_allreduce, args, 4, &o, &st), 0);
    cr_assert_eq(st.result[1], CHORUS_ERR_PEER_FAILED);
    cr_assert_eq(st.failed_peer[1], 2);
    cr_assert_eq(st.result[3], CHORUS_ERR_PEER_FAILED);
    cr_assert_eq(st.failed_peer[3], 2);
    cr_assert_eq(st.result[0], 0, "rank 0 cannot finish without rank 2's data");
    cr_assert(st.stuck);
}

/* Hand-written two-rank schedules: rank 0 sends send_bytes, rank 1 expects recv_bytes. */
static size_t hand_send_bytes, hand_recv_bytes;
static char hand_buf[2][64];

static chorus_status_t hand_build(const coll_args_t *args, const coll_env_t *env,
                                  coll_sched_t *sched)
{
    long i = args->rank == 0
                 ? coll_sched_send(sched, 1, 3, hand_buf[0], hand_send_bytes, NULL, 0)
                 : coll_sched_recv(sched, 0, 3, hand_buf[1], hand_recv_bytes, NULL, 0);
    return i < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

static const coll_alg_t hand_alg = {.name = "hand", .coll = COLL_BARRIER, .build = hand_build};

static int run_hand(size_t send_bytes, size_t recv_bytes, sched_sim_stats_t *st)
{
    coll_args_t args[2] = {barrier_args(0, 2), barrier_args(1, 2)};
    hand_send_bytes = send_bytes;
    hand_recv_bytes = recv_bytes;
    return sched_sim_run_opts(&hand_alg, args, 2, NULL, st);
}

Test(sched, receive_size_is_checked)
{
    sched_sim_stats_t st;

    memset(hand_buf, 0, sizeof(hand_buf));
    strcpy(hand_buf[0], "sixteen bytes!!");
    cr_assert_eq(run_hand(16, 16, &st), 0);
    cr_assert_str_eq(hand_buf[1], "sixteen bytes!!");
    cr_assert_eq(st.messages, 1);
    cr_assert_eq(st.bytes, 16);

    cr_assert_neq(run_hand(16, 8, &st), 0);
    cr_assert_eq(st.result[1], CHORUS_ERR_TRUNCATED);
    cr_assert_eq(st.failed_peer[1], 0);

    cr_assert_neq(run_hand(8, 16, &st), 0);
    cr_assert_eq(st.result[1], CHORUS_ERR_PROTOCOL);
}

Test(sched, zero_byte_transfers_never_posted)
{
    sched_sim_stats_t st;
    cr_assert_eq(run_hand(0, 0, &st), 0);
    cr_assert_eq(st.messages, 0);
    cr_assert_eq(st.zero_byte_posts, 0);
}

/* A transport that accepts posts and completes nothing until told to. */
static int stall_posts;
static chorus_status_t stall_status;

static chorus_status_t stall_send(tl_port_t *port, int peer, uint64_t tag, const void *buf,
                                  size_t len, tl_req_t *req)
{
    (void)port, (void)peer, (void)buf, (void)len, (void)tag, (void)req;
    stall_posts++;
    return stall_status;
}

static chorus_status_t stall_recv(tl_port_t *port, int peer, uint64_t tag, void *buf,
                                  size_t cap, tl_req_t *req)
{
    (void)port, (void)peer, (void)buf, (void)cap, (void)tag, (void)req;
    stall_posts++;
    return stall_status;
}

static tl_port_t stall_port = {.send_nb = stall_send, .recv_nb = stall_recv};

/* One executor call of s through the stalling port. */
static int stall_progress(coll_sched_t *s)
{
    coll_sched_bind(s, &stall_port, 0);
    return coll_sched_progress(s);
}

/* The environment of builders that do not split work by node. */
static const coll_env_t no_env = {.nranks = 2};

static size_t count_done(const coll_sched_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nsteps; i++)
        n += s->steps[i].state == 2;
    return n;
}

/* Work per call is bounded: steps far past a stalled one wait for it to complete. */
Test(sched, window_is_bounded)
{
    coll_sched_t s;
    static char a[8], b[8];
    long r, prev = -1;

    coll_sched_init(&s, CHORUS_UINT8, CHORUS_SUM, 2);
    stall_posts = 0;
    stall_status = CHORUS_OK;
    r = coll_sched_recv(&s, 1, 0, a, 8, NULL, 0);
    cr_assert_eq(r, 0);
    for (int i = 0; i < 5000; i++)
        cr_assert_geq(coll_sched_copy(&s, b, a, 0, NULL, 0), 1);
    cr_assert_eq(stall_progress(&s), 0);
    size_t done = count_done(&s);
    cr_assert(done > 0 && done < 1000, "%zu steps ran past a stalled receive", done);
    cr_assert_eq(stall_posts, 1);
    /* Appending to a running schedule would move requests the transport holds. */
    cr_assert_eq(coll_sched_copy(&s, b, a, 1, NULL, 0), -1);
    s.steps[r].req.length = 8;
    s.steps[r].req.status = CHORUS_OK;
    s.steps[r].req.done = 1;
    cr_assert_eq(stall_progress(&s), 1);
    cr_assert_eq(count_done(&s), s.nsteps);
    coll_sched_finalize(&s);

    /* A long dependency chain crosses many windows within one call. */
    coll_sched_init(&s, CHORUS_INT32, CHORUS_SUM, 1);
    int32_t v[2] = {0, 1};
    for (int i = 0; i < 3000; i++) {
        prev = coll_sched_reduce(&s, &v[0], &v[0], &v[1], sizeof(int32_t), &prev, 1);
        cr_assert_geq(prev, 0);
    }
    cr_assert_eq(stall_progress(&s), 1);
    cr_assert_eq(v[0], 3000);
    coll_sched_finalize(&s);
}

Test(sched, post_failure_fails_schedule)
{
    coll_sched_t s;
    static char a[8];

    coll_sched_init(&s, CHORUS_UINT8, CHORUS_SUM, 4);
    stall_status = CHORUS_ERR_PEER_FAILED;
    cr_assert_eq(coll_sched_send(&s, 3, 0, a, 8, NULL, 0), 0);
    cr_assert_eq(stall_progress(&s), CHORUS_ERR_PEER_FAILED);
    cr_assert_eq(s.failed_peer, 3);
    cr_assert_eq(s.status, CHORUS_ERR_PEER_FAILED);
    cr_assert_eq(stall_progress(&s), CHORUS_ERR_PEER_FAILED);
    stall_status = CHORUS_OK;
    coll_sched_finalize(&s);
}

Test(sched, dependencies_are_checked)
{
    coll_sched_t s;
    static char a[4], b[4];
    long deps[5];

    coll_sched_init(&s, CHORUS_UINT8, CHORUS_SUM, 1);
    for (int i = 0; i < 5; i++)
        deps[i] = coll_sched_copy(&s, b, a, 4, NULL, 0);
    cr_assert_eq(deps[4], 4);
    cr_assert_eq(coll_sched_copy(&s, b, a, 4, deps, 5), -1, "more than 4 dependencies");
    long fwd = 9;
    cr_assert_eq(coll_sched_copy(&s, b, a, 4, &fwd, 1), -1, "forward dependency");
    long none[3] = {-1, (long)COLL_NO_DEP, 2};
    long i = coll_sched_copy(&s, b, a, 4, none, 3);
    cr_assert_eq(i, 5);
    cr_assert_eq(s.steps[i].ndeps, 1);
    cr_assert_eq(coll_sched_copy(&s, b, a, 4, deps, -3), 6);
    cr_assert_eq(s.steps[6].ndeps, 0);
    coll_sched_finalize(&s);
}

/* Steps of a schedule run in dependency order, FINALIZE dividing for AVG. */
Test(sched, local_steps)
{
    coll_sched_t s;
    float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40}, z[4];
    long c, r;

    coll_sched_init(&s, CHORUS_FLOAT32, CHORUS_AVG, 2);
    c = coll_sched_copy(&s, z, x, sizeof(z), NULL, 0);
    r = coll_sched_reduce(&s, z, z, y, sizeof(z), &c, 1);
    cr_assert_geq(coll_sched_finalize_op(&s, z, sizeof(z), &r, 1), 0);
    cr_assert_eq(stall_progress(&s), 1);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(z[i], (x[i] + y[i]) / 2, 0, "element %d", i);
    coll_sched_finalize(&s);

    /* An empty schedule is complete at once. */
    coll_sched_init(&s, CHORUS_FLOAT32, CHORUS_SUM, 2);
    cr_assert_eq(stall_progress(&s), 1);
    coll_sched_finalize(&s);
}

/*
 * A call on one rank moves nothing over the network: its schedule needs no
 * transport's progress, so the calling thread may run it (request.c). A
 * schedule with a transfer does.
 */
Test(sched, local_schedules_run_inline)
{
    const coll_alg_t *const flat[] = {
        &coll_ring_allreduce, &coll_rd_allreduce, &coll_rabenseifner_allreduce,
        &coll_ring_allgather, &coll_ring_reduce_scatter, &coll_binomial_broadcast,
        &coll_chain_broadcast, &coll_binomial_reduce, &coll_pairwise_alltoall,
        &coll_dissemination_barrier};
    static const coll_env_t one = {.nranks = 1};
    float in[7] = {1, 2, 3, 4, 5, 6, 7}, out[7];
    coll_sched_t s;
    static char a[8];

    for (size_t i = 0; i < sizeof(flat) / sizeof(flat[0]); i++) {
        coll_args_t args = {.coll = flat[i]->coll, .sendbuf = in, .recvbuf = out, .count = 7,
                            .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM, .rank = 0, .size = 1,
                            .chunk_bytes = SMALL_CHUNK};

        memset(out, 0, sizeof(out));
        coll_sched_init(&s, args.dtype, args.op, 1);
        cr_assert_eq(flat[i]->build(&args, &one, &s), CHORUS_OK, "%s", flat[i]->name);
        cr_assert_eq(stall_progress(&s), 1, "%s %s", coll_type_name(args.coll), flat[i]->name);
        cr_assert(s.head.flags & CHORUS__TASK_INLINE, "%s %s on one rank is not inline",
                  coll_type_name(args.coll), flat[i]->name);
        if (args.coll != COLL_BARRIER)
            cr_assert_eq(memcmp(out, in, sizeof(in)), 0, "%s", flat[i]->name);
        coll_sched_finalize(&s);
    }

    stall_status = CHORUS_OK;
    coll_sched_init(&s, CHORUS_UINT8, CHORUS_SUM, 2);
    cr_assert_eq(coll_sched_send(&s, 1, 0, a, 8, NULL, 0), 0);
    coll_sched_bind(&s, &stall_port, 0);
    cr_assert_not(s.head.flags & CHORUS__TASK_INLINE);
    coll_sched_finalize(&s);
}

Test(sched, invalid_arguments)
{
    coll_sched_t s;
    int32_t a[4], b[4];
    coll_args_t args = {.coll = COLL_ALLREDUCE, .sendbuf = a, .recvbuf = b, .count = 4,
                        .dtype = CHORUS_DTYPE_COUNT, .op = CHORUS_SUM, .rank = 0, .size = 2};
    coll_sched_init(&s, args.dtype, args.op, 2);
    cr_assert_eq(coll_ring_allreduce.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    args.dtype = CHORUS_INT32;
    args.op = CHORUS_OP_COUNT;
    cr_assert_eq(coll_ring_allreduce.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(coll_ring_reduce_scatter.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    args.op = CHORUS_SUM;
    args.rank = 2;
    cr_assert_eq(coll_ring_allgather.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(coll_pairwise_alltoall.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(coll_dissemination_barrier.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    args.rank = 0;
    args.count = SIZE_MAX / 2;
    cr_assert_eq(coll_ring_allgather.build(&args, &no_env, &s), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(s.nsteps, 0);
    coll_sched_finalize(&s);
}

/* ---- registry ------------------------------------------------------------ */

Test(registry, names_round_trip)
{
    static const char *const names[] = {"allreduce", "allgather", "broadcast",
                                        "reduce_scatter", "reduce", "alltoall", "barrier"};
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        cr_assert_str_eq(coll_type_name((coll_type_t)c), names[c]);
        cr_assert_eq(coll_type_from_name(names[c]), (coll_type_t)c);
    }
    cr_assert_null(coll_type_name(COLL_TYPE_COUNT));
    cr_assert_eq(coll_type_from_name("allreduc"), COLL_TYPE_COUNT);
    cr_assert_eq(coll_type_from_name(NULL), COLL_TYPE_COUNT);
}

Test(registry, every_algorithm_is_listed)
{
    const coll_alg_t *const expected[] = {
        &coll_ring_allreduce, &coll_rd_allreduce, &coll_rabenseifner_allreduce,
        &coll_ring_allgather, &coll_ring_reduce_scatter, &coll_binomial_broadcast,
        &coll_chain_broadcast, &coll_binomial_reduce, &coll_pairwise_alltoall,
        &coll_dissemination_barrier, &coll_hier_allreduce, &coll_hier_allgather,
        &coll_hier_broadcast, &coll_hier_reduce_scatter};
    size_t n = 0;
    while (coll_algs[n] != NULL)
        n++;
    cr_assert_eq(n, sizeof(expected) / sizeof(expected[0]));
    for (size_t i = 0; i < n; i++) {
        const coll_alg_t *a = expected[i];
        cr_assert_not_null(a->name);
        cr_assert_not_null(a->build);
        cr_assert_eq(coll_alg_find(a->coll, a->name), a, "%s/%s", coll_type_name(a->coll),
                     a->name);
        /* Names are unique within a collective. */
        for (size_t j = 0; j < i; j++)
            cr_assert(expected[j]->coll != a->coll || strcmp(expected[j]->name, a->name) != 0);
    }
    cr_assert_eq(coll_alg_find(COLL_ALLREDUCE, "ring"), &coll_ring_allreduce);
    cr_assert_eq(coll_alg_find(COLL_ALLGATHER, "ring"), &coll_ring_allgather);
    cr_assert_null(coll_alg_find(COLL_ALLREDUCE, "pairwise"));
    cr_assert_null(coll_alg_find(COLL_ALLREDUCE, NULL));
}
