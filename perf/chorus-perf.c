/*
 * chorus-perf: bandwidth and correctness of chorus collectives over a sweep
 * of message sizes, in the style of nccl-tests. Uses the public API only.
 *
 * With -np N it starts N local ranks of itself through the launcher that
 * chorus-run uses; otherwise it runs as one rank of whatever job started it
 * and builds its communicator with chorus_comm_create_from_env(), so it runs
 * under every launcher that function reads the variables of (chorus-run's
 * CHORUS_*, torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT).
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "config.h"
#include "perf/perf_check.h"
#include "perf/perf_data.h"
#include "perf/perf_opts.h"
#include "perf/perf_report.h"
#include "tools/launch.h"
#include "tools/tool_version.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Set in the ranks chorus-perf -np starts, so that they never start more. */
#define PERF_LAUNCHED_VAR "CHORUS_PERF_LAUNCHED"

/* Buffer pairs rotated through by the timed loop, and the memory they may take per rank. */
#define PERF_MAX_SETS 4
#define PERF_ROTATE_BYTES (1024UL << 20)

typedef struct {
    const perf_opts_t *opts;
    chorus_comm_t comm;
    int rank, nranks;
    void *send, *recv;     /* opts->maxbytes each: enough for any row, in place too */
    size_t bytes;          /* of each buffer */
    /*
     * Timed iterations rotate over nsets buffer pairs (set 0 is send/recv) so
     * that large sizes are not measured cache-warm.
     */
    void *set_send[PERF_MAX_SETS], *set_recv[PERF_MAX_SETS];
    int nsets;
    void *fc_x, *fc_e, *fc_grad; /* fc_weight_grad: for its largest shape, in place of those */
    perf_run_info_t run;   /* version, host, cores, ranks: rank 0's view */
    char host[256], nodes[256];
    FILE *json_f;          /* rank 0 with --json only */
    perf_json_t json;
    long long wrong_total;
    double busbw_sum;
    long busbw_n;
    int fc_shapes, fc_faster; /* fc_weight_grad's rows, and those where auto chose the faster */
} perf_ctx_t;

static double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * A failed call leaves the other ranks blocked in the same collective:
 * aborting makes their calls fail too instead of waiting for the timeout.
 * The caller has said what failed.
 */
static void perf_abort(perf_ctx_t *c)
{
    chorus_comm_abort(c->comm);
    chorus_comm_destroy(c->comm);
    exit(1);
}

static void perf_die(perf_ctx_t *c, const perf_args_t *a, chorus_status_t st)
{
    const perf_dtype_info_t *info = perf_dtype_info(a->dtype);

    fprintf(stderr, "chorus-perf: rank %d: %s of %zu bytes (%s, %s, root %d) failed: %s\n",
            c->rank, perf_coll_info(a->coll)->name, perf_msg_bytes(a),
            info ? info->name : "?", perf_coll_info(a->coll)->reduces ?
            perf_op_name(a->op) : "none", perf_coll_info(a->coll)->rooted ? a->root : -1,
            chorus_status_string(st));
    perf_abort(c);
}

/*
 * A zeroed buffer of bytes: host memory (every page touched now), with
 * --mem chorus from chorus_mem_alloc, or with --mem cuda device memory.
 */
static int perf_buf_alloc(const perf_ctx_t *c, void **p, size_t bytes)
{
    if (c->opts->mem_chorus) {
        if (chorus_mem_alloc(c->comm, bytes, p) != CHORUS_OK)
            return -1;
        memset(*p, 0, bytes);
        return 0;
    }
#ifdef HAVE_CUDA
    if (c->opts->mem_cuda) {
        if (cudaMalloc(p, bytes) != cudaSuccess || cudaMemset(*p, 0, bytes) != cudaSuccess) {
            *p = NULL;
            return -1;
        }
        return 0;
    }
#endif
    if (posix_memalign(p, 4096, bytes) != 0)
        return -1;
    memset(*p, 0, bytes);
    return 0;
}

static void perf_buf_free(const perf_ctx_t *c, void *p)
{
    if (c->opts->mem_chorus) {
        chorus_mem_free(c->comm, p);
        return;
    }
#ifdef HAVE_CUDA
    if (c->opts->mem_cuda) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/*
 * With --mem cuda, the host buffers send and recv hold what perf_fill writes
 * and perf_check reads; these copy them to the device buffers of set 0 and
 * back. Without it they are set 0 itself, and these do nothing.
 */
static void perf_to_device(perf_ctx_t *c)
{
#ifdef HAVE_CUDA
    if (c->opts->mem_cuda &&
        (cudaMemcpy(c->set_send[0], c->send, c->bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
         cudaMemcpy(c->set_recv[0], c->recv, c->bytes, cudaMemcpyHostToDevice) != cudaSuccess)) {
        fprintf(stderr, "chorus-perf: rank %d: copying to the device failed\n", c->rank);
        perf_abort(c);
    }
#else
    (void)c;
#endif
}

static void perf_from_device(perf_ctx_t *c)
{
#ifdef HAVE_CUDA
    if (c->opts->mem_cuda &&
        (cudaMemcpy(c->send, c->set_send[0], c->bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(c->recv, c->set_recv[0], c->bytes, cudaMemcpyDeviceToHost) != cudaSuccess)) {
        fprintf(stderr, "chorus-perf: rank %d: copying from the device failed\n", c->rank);
        perf_abort(c);
    }
#else
    (void)c;
#endif
}

/* Posts one call of a: blocking when req_p is NULL, else non-blocking into *req_p. */
static chorus_status_t perf_post(perf_ctx_t *c, const perf_args_t *a, int in_place, int set,
                                 chorus_request_t *req_p)
{
    /* Compression where the command asked for it; --mem cuda: device calls on every rank. */
    chorus_opts_t opts = CHORUS_OPTS_INIT, plain = CHORUS_OPTS_INIT;
    void *s, *r;

    plain.mem_type = c->opts->mem_cuda ? CHORUS_MEM_CUDA : CHORUS_MEM_AUTO;
    opts.mem_type = plain.mem_type;
    opts.flags = a->compress;
    perf_buffers(a, in_place, c->set_send[set], c->set_recv[set], &s, &r);
    switch (a->coll) {
    case PERF_ALLREDUCE:
        return req_p ? chorus_iallreduce(s, r, a->count, a->dtype, a->op, c->comm, &opts,
                                         req_p)
                     : chorus_allreduce(s, r, a->count, a->dtype, a->op, c->comm, &opts);
    case PERF_ALLGATHER:
        return req_p ? chorus_iallgather(s, r, a->count, a->dtype, c->comm, &plain, req_p)
                     : chorus_allgather(s, r, a->count, a->dtype, c->comm, &plain);
    case PERF_BROADCAST:
        return req_p ? chorus_ibroadcast(s, r, a->count, a->dtype, a->root, c->comm, &plain,
                                         req_p)
                     : chorus_broadcast(s, r, a->count, a->dtype, a->root, c->comm, &plain);
    case PERF_REDUCE_SCATTER:
        return req_p ? chorus_ireduce_scatter(s, r, a->count, a->dtype, a->op, c->comm, &opts,
                                              req_p)
                     : chorus_reduce_scatter(s, r, a->count, a->dtype, a->op, c->comm, &opts);
    case PERF_REDUCE:
        return req_p ? chorus_ireduce(s, r, a->count, a->dtype, a->op, a->root, c->comm, &plain,
                                      req_p)
                     : chorus_reduce(s, r, a->count, a->dtype, a->op, a->root, c->comm, &plain);
    case PERF_ALLTOALL:
        return req_p ? chorus_ialltoall(s, r, a->count, a->dtype, c->comm, &plain, req_p)
                     : chorus_alltoall(s, r, a->count, a->dtype, c->comm, &plain);
    case PERF_BARRIER:
        return req_p ? chorus_ibarrier(c->comm, NULL, req_p) : chorus_barrier(c->comm, NULL);
    default:
        return CHORUS_ERR_INVALID_ARG;
    }
}

static chorus_status_t perf_call(perf_ctx_t *c, const perf_args_t *a, int in_place, int set)
{
    return perf_post(c, a, in_place, set, NULL);
}

/*
 * The algorithm that serves a's size, as the library names it for one
 * non-blocking call: untimed, and its data is never checked (perf_verify
 * refills the buffers).
 */
static const char *perf_algorithm(perf_ctx_t *c, const perf_args_t *a)
{
    chorus_request_t req;
    const char *name;
    chorus_status_t st = perf_post(c, a, 0, 0, &req);

    if (st != CHORUS_OK)
        perf_die(c, a, st);
    name = chorus_request_algorithm(req);
    st = chorus_request_free(req);
    if (st != CHORUS_OK)
        perf_die(c, a, st);
    return name;
}

static void perf_call_or_die(perf_ctx_t *c, const perf_args_t *a, int in_place, int set)
{
    chorus_status_t st = perf_call(c, a, in_place, set);
    if (st != CHORUS_OK)
        perf_die(c, a, st);
}

/* Allreduce of one value used for the results (time, wrong count). */
static void perf_reduce_one(perf_ctx_t *c, void *val, chorus_dtype_t dtype, chorus_op_t op)
{
    chorus_status_t st = chorus_allreduce(val, val, 1, dtype, op, c->comm, NULL);
    if (st != CHORUS_OK) {
        fprintf(stderr, "chorus-perf: rank %d: allreduce of the results failed: %s\n",
                c->rank, chorus_status_string(st));
        perf_abort(c);
    }
}

/* The slowest rank's average time per call, in microseconds. */
static double perf_time(perf_ctx_t *c, const perf_args_t *a, int in_place)
{
    double t0, us;
    chorus_status_t st;

    for (int i = 0; i < c->opts->warmup; i++)
        perf_call_or_die(c, a, in_place, i % c->nsets);
    st = chorus_barrier(c->comm, NULL);
    if (st != CHORUS_OK)
        perf_die(c, a, st);
    t0 = perf_now();
    for (int i = 0; i < c->opts->iters; i++)
        perf_call_or_die(c, a, in_place, i % c->nsets);
    us = (perf_now() - t0) * 1e6 / c->opts->iters;
    perf_reduce_one(c, &us, CHORUS_FLOAT64, CHORUS_MAX);
    return us;
}

/* One untimed call on known inputs; the wrong elements of all ranks. */
static long long perf_verify(perf_ctx_t *c, const perf_args_t *a, int in_place)
{
    int64_t wrong;

    perf_fill(a, in_place, c->send, c->recv);
    perf_to_device(c);
    perf_call_or_die(c, a, in_place, 0);
    perf_from_device(c);
    wrong = (int64_t)perf_check(a, in_place, c->send, c->recv);
    perf_reduce_one(c, &wrong, CHORUS_INT64, CHORUS_SUM);
    return (long long)wrong;
}

static void perf_run_row(perf_ctx_t *c, const perf_args_t *a)
{
    const perf_coll_info_t *info = perf_coll_info(a->coll);
    perf_row_t row = {
        .coll = a->coll, .dtype = a->dtype,
        .op = info->reduces ? (int)a->op : -1,
        .root = info->rooted ? a->root : -1,
        .bytes = perf_msg_bytes(a), .elems = perf_msg_elems(a),
        .algorithm = perf_algorithm(c, a),
    };

    for (int k = 0; k < 2; k++) {
        /* Results are checked before they are timed, so a size is never timed on a
         * path that computes wrong answers unnoticed. Timed calls run on check values
         * too, so no NaN or denormal skews them. */
        row.wrong[k] = c->opts->check ? perf_verify(c, a, k) : -1;
        perf_fill(a, k, c->send, c->recv);
        perf_to_device(c);
        row.time_us[k] = perf_time(c, a, k);
        if (row.wrong[k] > 0)
            c->wrong_total += row.wrong[k];
    }
    perf_row_bandwidth(&row, c->nranks);
    if (a->coll != PERF_BARRIER) {
        c->busbw_sum += row.busbw[0] + row.busbw[1];
        c->busbw_n += 2;
    }
    if (c->rank == 0) {
        perf_print_row(stdout, &row);
        if (c->json_f != NULL)
            perf_json_row(&c->json, &row);
    }
}

/*
 * Every size of the sweep; sizes that round to the same count run once, and
 * a size that rounds to no element (of each rank's block) is skipped with a
 * note rather than timed as an empty call. Size 0, asked for, runs.
 */
static void perf_sweep(perf_ctx_t *c, perf_args_t *a)
{
    size_t bytes = c->opts->minbytes, last_count = 0;
    int done = 0, first = 1;

    while (!done) {
        a->count = perf_count_for_bytes(a->coll, a->dtype, c->nranks, bytes);
        if (a->count == 0 && bytes > 0) {
            if (c->rank == 0)
                perf_print_skipped(stdout, a, bytes);
        } else if (first || a->count != last_count) {
            perf_run_row(c, a);
            first = 0;
            last_count = a->count;
        }
        /* The largest size is announced in the heading: say where it was rounded down. */
        if (c->rank == 0 && bytes == c->opts->maxbytes && a->count > 0 &&
            perf_msg_bytes(a) != bytes)
            perf_print_rounded(stdout, a, bytes);
        bytes = perf_next_size(c->opts, bytes, &done);
    }
}

/* "2 (ranks per node 2,2)": how the job's ranks sit on nodes. */
static void perf_nodes(chorus_comm_t comm, int nranks, char *buf, size_t len)
{
    int nodes = chorus_comm_node_count(comm);
    size_t used = (size_t)snprintf(buf, len, "%d (ranks per node ", nodes);

    for (int n = 0; n < nodes && used < len; n++) {
        int k = 0;
        for (int r = 0; r < nranks; r++)
            k += chorus_comm_node(comm, r) == n;
        used += (size_t)snprintf(buf + used, len - used, "%s%d", n ? "," : "", k);
    }
    if (used < len)
        snprintf(buf + used, len - used, ")");
}

/* Loops over dtype, op and root where the options say "all". */
static void perf_run_coll(perf_ctx_t *c, perf_coll_t coll)
{
    const perf_opts_t *o = c->opts;
    const perf_coll_info_t *info = perf_coll_info(coll);
    perf_args_t a = {.coll = coll, .rank = c->rank, .nranks = c->nranks,
                     .compress = o->compress};
    int d0 = o->dtype == PERF_ALL ? 0 : o->dtype;
    int d1 = o->dtype == PERF_ALL ? CHORUS_DTYPE_COUNT - 1 : o->dtype;
    int op0 = o->op == PERF_ALL ? 0 : o->op;
    int op1 = !info->reduces ? op0 : o->op == PERF_ALL ? CHORUS_OP_COUNT - 1 : o->op;
    int r0 = o->root == PERF_ALL ? 0 : o->root;
    int r1 = !info->rooted ? r0 : o->root == PERF_ALL ? c->nranks - 1 : o->root;

    if (c->rank == 0)
        perf_print_header(stdout, o, coll, &c->run);
    if (coll == PERF_BARRIER) {
        a.dtype = CHORUS_UINT8;
        perf_run_row(c, &a);
        return;
    }
    for (int d = d0; d <= d1; d++) {
        for (int op = op0; op <= op1; op++) {
            for (int root = r0; root <= r1; root++) {
                a.dtype = (chorus_dtype_t)d;
                a.op = (chorus_op_t)op;
                a.root = root;
                perf_sweep(c, &a);
            }
        }
    }
}

/* ---- fc_weight_grad ------------------------------------------------------------- */

static const uint32_t perf_fc_flags[PERF_FC_VARIANTS] = {
    [PERF_FC_LATE] = CHORUS_FLAG_FC_LATE,
    [PERF_FC_ALLREDUCE] = CHORUS_FLAG_FC_ALLREDUCE,
    [PERF_FC_AUTO] = 0,
};

/* As perf_die, for a call of fc_weight_grad's variant v. */
static void perf_fc_die(perf_ctx_t *c, const perf_fc_args_t *a, perf_fc_variant_t v,
                        chorus_status_t st)
{
    const perf_dtype_info_t *info = perf_dtype_info(a->dtype);

    fprintf(stderr, "chorus-perf: rank %d: fc_weight_grad (%s) of rows %zu, in %zu, out %zu "
            "(%s) failed: %s\n", c->rank, perf_fc_variant_name(v), a->rows, a->in, a->out,
            info ? info->name : "?", chorus_status_string(st));
    perf_abort(c);
}

/*
 * One complete call of variant v; returns the strategy that served it. The
 * call is non-blocking and waited for, which is what the blocking call does
 * too, so that every call, timed or not, can say what it chose.
 */
static const char *perf_fc_call(perf_ctx_t *c, const perf_fc_args_t *a, perf_fc_variant_t v)
{
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_request_t req = NULL;
    const char *name;
    chorus_status_t st;

    opts.flags = perf_fc_flags[v];
    st = chorus_ifc_weight_grad(c->fc_x, c->fc_e, a->rows, a->in, a->out, a->dtype,
                                c->fc_grad, c->comm, &opts, &req);
    if (st == CHORUS_OK)
        st = chorus_request_wait(req);
    if (st != CHORUS_OK)
        perf_fc_die(c, a, v, st);
    name = chorus_request_algorithm(req);
    st = chorus_request_free(req);
    if (st != CHORUS_OK)
        perf_fc_die(c, a, v, st);
    return name;
}

/*
 * What auto's calls chose: the first one's answer, or "mixed" once another
 * differs (the choice is a function of the shapes and of rates measured once
 * per process, so it should not).
 */
static void perf_fc_note_choice(perf_fc_row_t *row, const char *name)
{
    if (row->chosen == NULL)
        row->chosen = name;
    else if (name == NULL || strcmp(row->chosen, name) != 0)
        row->chosen = "mixed";
}

/* One untimed call of v on the check values; the wrong elements of all ranks. */
static long long perf_fc_verify(perf_ctx_t *c, const perf_fc_args_t *a, perf_fc_variant_t v,
                                perf_fc_row_t *row)
{
    const char *name;
    int64_t wrong;

    perf_fc_fill(a, c->fc_x, c->fc_e, c->fc_grad);
    name = perf_fc_call(c, a, v);
    if (v == PERF_FC_AUTO)
        perf_fc_note_choice(row, name);
    wrong = (int64_t)perf_fc_check(a, c->fc_grad);
    perf_reduce_one(c, &wrong, CHORUS_INT64, CHORUS_SUM);
    return (long long)wrong;
}

/*
 * Warmup, then timed rounds of the variants in turn (late, allreduce, auto,
 * late, ...), so that drift in the machine affects all of them alike. Every
 * call starts after a barrier and is timed alone: a rank still finishing one
 * variant's call does not count against the next one's. Sets row's times to
 * the slowest rank's average of each variant.
 */
static void perf_fc_time(perf_ctx_t *c, const perf_fc_args_t *a, perf_fc_row_t *row)
{
    double sum[PERF_FC_VARIANTS] = {0};

    for (int i = -c->opts->warmup; i < c->opts->iters; i++) {
        for (int v = 0; v < PERF_FC_VARIANTS; v++) {
            chorus_status_t st = chorus_barrier(c->comm, NULL);
            const char *name;
            double t0;

            if (st != CHORUS_OK)
                perf_fc_die(c, a, (perf_fc_variant_t)v, st);
            t0 = perf_now();
            name = perf_fc_call(c, a, (perf_fc_variant_t)v);
            if (i >= 0)
                sum[v] += perf_now() - t0;
            if (v == PERF_FC_AUTO)
                perf_fc_note_choice(row, name);
        }
    }
    for (int v = 0; v < PERF_FC_VARIANTS; v++) {
        row->time_us[v] = sum[v] * 1e6 / c->opts->iters;
        perf_reduce_one(c, &row->time_us[v], CHORUS_FLOAT64, CHORUS_MAX);
    }
}

static void perf_fc_run_row(perf_ctx_t *c, const perf_fc_args_t *a)
{
    perf_fc_row_t row = {.dtype = a->dtype, .rows = a->rows, .in = a->in, .out = a->out};

    /* As for the collectives: checked before timed, and timed on check values. */
    for (int v = 0; v < PERF_FC_VARIANTS; v++) {
        row.wrong[v] = c->opts->check ? perf_fc_verify(c, a, (perf_fc_variant_t)v, &row) : -1;
        if (row.wrong[v] > 0)
            c->wrong_total += row.wrong[v];
    }
    perf_fc_fill(a, c->fc_x, c->fc_e, c->fc_grad);
    perf_fc_time(c, a, &row);
    c->fc_shapes++;
    c->fc_faster += perf_fc_chose_faster(&row) == 1;
    if (c->rank == 0) {
        perf_print_fc_row(stdout, &row);
        if (c->json_f != NULL)
            perf_json_fc_row(&c->json, &row);
    }
}

/* Every combination of rows, in and out, for each dtype asked for (all: the float ones). */
static void perf_run_fc(perf_ctx_t *c)
{
    const perf_opts_t *o = c->opts;
    perf_fc_args_t a = {.rank = c->rank, .nranks = c->nranks};
    int d0 = o->dtype == PERF_ALL ? 0 : o->dtype;
    int d1 = o->dtype == PERF_ALL ? CHORUS_DTYPE_COUNT - 1 : o->dtype;

    if (c->rank == 0)
        perf_print_fc_header(stdout, o, &c->run);
    for (int d = d0; d <= d1; d++) {
        if (!perf_dtype_info((chorus_dtype_t)d)->is_float)
            continue;
        a.dtype = (chorus_dtype_t)d;
        for (int r = 0; r < o->rows.n; r++) {
            for (int i = 0; i < o->in.n; i++) {
                for (int k = 0; k < o->out.n; k++) {
                    a.rows = o->rows.v[r];
                    a.in = o->in.v[i];
                    a.out = o->out.v[k];
                    perf_fc_run_row(c, &a);
                }
            }
        }
    }
}

/* ---- setup ------------------------------------------------------------------ */

static int perf_alloc(perf_ctx_t *c)
{
    size_t bytes = c->opts->maxbytes > 0 ? c->opts->maxbytes : 1;
    size_t fit = PERF_ROTATE_BYTES / (2 * bytes);

    c->bytes = bytes;
    c->nsets = fit < 1 ? 1 : fit > PERF_MAX_SETS ? PERF_MAX_SETS : (int)fit;
#ifdef HAVE_CUDA
    if (c->opts->mem_cuda) {
        int devices = 0;

        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 ||
            cudaSetDevice(c->rank % devices) != cudaSuccess) {
            fprintf(stderr, "chorus-perf: rank %d: --mem cuda: no CUDA device\n", c->rank);
            return -1;
        }
    }
#else
    if (c->opts->mem_cuda) {
        fprintf(stderr, "chorus-perf: --mem cuda: this chorus-perf was built without CUDA\n");
        return -1;
    }
#endif
    for (int i = 0; i < c->nsets; i++) {
        if (perf_buf_alloc(c, &c->set_send[i], bytes) != 0 ||
            perf_buf_alloc(c, &c->set_recv[i], bytes) != 0) {
            fprintf(stderr, "chorus-perf: rank %d: cannot allocate %d %s buffers of %zu bytes\n",
                    c->rank, 2 * c->nsets, c->opts->mem_cuda ? "device" : "host", bytes);
            return -1;
        }
    }
    c->send = c->set_send[0];
    c->recv = c->set_recv[0];
    if (c->opts->mem_cuda && (posix_memalign(&c->send, 4096, bytes) != 0 ||
                              posix_memalign(&c->recv, 4096, bytes) != 0)) {
        fprintf(stderr, "chorus-perf: rank %d: cannot allocate 2 host buffers of %zu bytes\n",
                c->rank, bytes);
        return -1;
    }
    return 0;
}

static size_t perf_list_max(const perf_size_list_t *list)
{
    size_t max = 0;

    for (int k = 0; k < list->n; k++)
        max = list->v[k] > max ? list->v[k] : max;
    return max;
}

/* a * b * c, or SIZE_MAX where that overflows: no allocation of it succeeds. */
static size_t perf_mul3(size_t a, size_t b, size_t c)
{
    if ((b != 0 && a > SIZE_MAX / b) || (c != 0 && a * b > SIZE_MAX / c))
        return SIZE_MAX;
    return a * b * c;
}

/*
 * fc_weight_grad's x, e and grad, for its largest shape and dtype. One set,
 * not rotated: in training, a layer's inputs and errors come warm from the
 * passes that just computed them.
 */
static int perf_alloc_fc(perf_ctx_t *c)
{
    const perf_opts_t *o = c->opts;
    size_t es = o->dtype == PERF_ALL ? sizeof(double) : chorus_dtype_size(o->dtype);
    size_t rows = perf_list_max(&o->rows), in = perf_list_max(&o->in);
    size_t out = perf_list_max(&o->out);
    size_t bytes[3] = {perf_mul3(rows, in, es), perf_mul3(rows, out, es),
                       perf_mul3(out, in, es)};
    void **bufs[3] = {&c->fc_x, &c->fc_e, &c->fc_grad};

    for (int k = 0; k < 3; k++) {
        size_t n = bytes[k] > 0 ? bytes[k] : 1;
        if (bytes[k] == SIZE_MAX || posix_memalign(bufs[k], 4096, n) != 0) {
            fprintf(stderr, "chorus-perf: rank %d: cannot allocate x, e and grad for rows %zu, "
                    "in %zu, out %zu\n", c->rank, rows, in, out);
            return -1;
        }
        memset(*bufs[k], 0, n); /* as in perf_alloc: no page faults in timed calls */
    }
    return 0;
}

/*
 * Every rank allocates its buffers and rank 0 opens the JSON file; then all
 * learn whether every rank succeeded, so that none is left waiting in a
 * call that a failed rank never makes.
 */
static int perf_setup(perf_ctx_t *c)
{
    int32_t failed = (c->opts->coll == PERF_FC_WEIGHT_GRAD ? perf_alloc_fc(c)
                                                            : perf_alloc(c)) != 0;

    if (!failed && c->rank == 0 && c->opts->json_path != NULL) {
        c->json_f = fopen(c->opts->json_path, "w");
        if (c->json_f == NULL) {
            perror(c->opts->json_path);
            failed = 1;
        } else {
            perf_json_begin(&c->json, c->json_f, c->opts, &c->run);
        }
    }
    perf_reduce_one(c, &failed, CHORUS_INT32, CHORUS_MAX);
    return failed ? -1 : 0;
}

/* The cores this process may run on (its affinity mask), as the library counts them. */
static int perf_usable_cores(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
        return 1;
    return CPU_COUNT(&set);
}

/* What rank 0 reports about the run: the library, the host, its cores and the ranks. */
static void perf_run_info(perf_ctx_t *c)
{
    if (gethostname(c->host, sizeof(c->host)) != 0)
        snprintf(c->host, sizeof(c->host), "unknown");
    c->host[sizeof(c->host) - 1] = '\0';
    perf_nodes(c->comm, c->nranks, c->nodes, sizeof(c->nodes));
    c->run = (perf_run_info_t){
        .version = chorus_version_string(), .host = c->host, .cores = perf_usable_cores(),
        .nranks = c->nranks, .local_size = chorus_comm_local_size(c->comm),
        .nodes = c->nodes,
    };
}

/*
 * With more ranks on a node than its ranks have cores, ranks wait for the
 * scheduler as much as for each other, and the times say little about the
 * library: every rank checks its own node, rank 0 prints one warning line.
 */
static void perf_warn_oversubscribed(perf_ctx_t *c)
{
    int32_t excess = c->run.local_size - c->run.cores;

    perf_reduce_one(c, &excess, CHORUS_INT32, CHORUS_MAX);
    if (c->rank != 0 || excess <= 0)
        return;
    if (c->run.local_size > c->run.cores)
        printf("# warning: %d ranks on this node share %d core%s: the times measure the "
               "scheduler as much as chorus\n", c->run.local_size, c->run.cores,
               c->run.cores == 1 ? "" : "s");
    else
        printf("# warning: a node has %d more rank%s than cores: the times measure the "
               "scheduler as much as chorus\n", excess, excess == 1 ? "" : "s");
}

static int perf_finish(perf_ctx_t *c)
{
    double avg = c->busbw_n > 0 ? c->busbw_sum / (double)c->busbw_n : 0;
    int fc = c->opts->coll == PERF_FC_WEIGHT_GRAD;

    if (c->rank != 0)
        return 0;
    if (fc)
        perf_print_fc_footer(stdout, c->wrong_total, c->fc_faster, c->fc_shapes,
                             c->opts->check);
    else
        perf_print_footer(stdout, c->wrong_total, avg, c->opts->check);
    if (c->json_f != NULL) {
        if (fc)
            perf_json_fc_end(&c->json, c->wrong_total, c->fc_faster, c->fc_shapes,
                             c->opts->check);
        else
            perf_json_end(&c->json, c->wrong_total, avg, c->opts->check);
        if (fclose(c->json_f) != 0) {
            perror(c->opts->json_path);
            return -1;
        }
        c->json_f = NULL;
    }
    return 0;
}

static int perf_main(const perf_opts_t *opts)
{
    perf_ctx_t c = {.opts = opts};
    chorus_status_t st;
    int rc = 1;

    st = chorus_comm_create_from_env(&c.comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, "chorus-perf: cannot create a communicator from the environment: "
                "%s (start it with chorus-run or another launcher, or use -np N)\n",
                chorus_status_string(st));
        return 1;
    }
    c.rank = chorus_comm_rank(c.comm);
    c.nranks = chorus_comm_size(c.comm);
    if (opts->root != PERF_ALL && opts->root >= c.nranks) {
        if (c.rank == 0)
            fprintf(stderr, "chorus-perf: invalid root %d for -r: the job has %d ranks\n",
                    opts->root, c.nranks);
        rc = 2;
        goto out_comm;
    }
    perf_run_info(&c);
    if (perf_setup(&c) != 0)
        goto out_bufs;
    if (c.rank == 0) {
        printf("# chorus %s on %s (%d cores)", c.run.version, c.run.host, c.run.cores);
        if (opts->coll != PERF_FC_WEIGHT_GRAD)
            printf(", %d rotating buffer pair%s per rank%s", c.nsets, c.nsets == 1 ? "" : "s",
                   opts->mem_cuda     ? " in CUDA device memory"
                   : opts->mem_chorus ? " from chorus_mem_alloc"
                                      : "");
        printf("\n");
    }
    perf_warn_oversubscribed(&c);
    if (opts->coll == PERF_FC_WEIGHT_GRAD)
        perf_run_fc(&c);
    for (int coll = 0; coll < PERF_COLL_COUNT; coll++) {
        if (opts->coll == PERF_ALL || opts->coll == coll)
            perf_run_coll(&c, (perf_coll_t)coll);
    }
    rc = perf_finish(&c) != 0 ? 1 : c.wrong_total > 0 ? 1 : 0;
out_bufs:
    if (c.json_f != NULL)
        fclose(c.json_f);
    for (int i = 0; i < PERF_MAX_SETS; i++) {
        perf_buf_free(&c, c.set_send[i]);
        perf_buf_free(&c, c.set_recv[i]);
    }
    if (c.send != c.set_send[0])   /* --mem cuda: the host copies */
        free(c.send);
    if (c.recv != c.set_recv[0])
        free(c.recv);
    free(c.fc_x);
    free(c.fc_e);
    free(c.fc_grad);
out_comm:
    st = chorus_comm_destroy(c.comm);
    if (st != CHORUS_OK && rc == 0) {
        fprintf(stderr, "chorus-perf: rank %d: destroying the communicator failed: %s\n",
                c.rank, chorus_status_string(st));
        rc = 1;
    }
    return rc;
}

/* -np N: this program again, N times, without -np, under the local launcher. */
static int perf_relaunch(int argc, char **argv, const perf_opts_t *opts)
{
    launch_opts_t lo = {
        .nranks = opts->nranks,
        .progname = "chorus-perf",
        .exec_path = "/proc/self/exe",
    };
    char **args;
    int rc;

    if (getenv(PERF_LAUNCHED_VAR) != NULL) {
        fprintf(stderr, "chorus-perf: -np given to a rank that chorus-perf -np started\n");
        return 2;
    }
    args = perf_opts_strip_np(argc, argv, opts);
    if (args == NULL || setenv(PERF_LAUNCHED_VAR, "1", 1) != 0) {
        fprintf(stderr, "chorus-perf: out of memory\n");
        free(args);
        return 1;
    }
    rc = launch_run(&lo, args);
    free(args);
    return rc;
}

int main(int argc, char **argv)
{
    perf_opts_t opts;
    char err[256];

    if (perf_opts_parse(argc, argv, &opts, err, sizeof(err)) != 0) {
        fprintf(stderr, "chorus-perf: %s\nTry 'chorus-perf --help'.\n", err);
        return 2;
    }
    if (opts.help) {
        fputs(perf_usage_text, stdout);
        return 0;
    }
    if (opts.version) {
        tool_version_print(stdout, "chorus-perf", chorus_version_string());
        return 0;
    }
    if (opts.nranks > 0)
        return perf_relaunch(argc, argv, &opts);
    return perf_main(&opts);
}
