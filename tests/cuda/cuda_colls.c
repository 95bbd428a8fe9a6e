/*
 * Every collective with CUDA device buffers, checked bit for bit against the
 * same call on host buffers (the host path is checked exactly elsewhere):
 * every dtype and op, odd counts, in place, blocking and non-blocking,
 * device buffers on every rank, on some ranks only, and for one side of a
 * call only; each call staged (mem_type AUTO), then declared a device call
 * on every rank (CHORUS_MEM_CUDA: the node team's kernels run it, folding
 * in rank order, float16 and bfloat16 in float32, so that floating-point
 * results may differ from the host algorithm's in the last places). Then
 * stream ordering (staged and declared), a
 * sub-communicator, wire compression, the training engine with device
 * tensors, and the refusals.
 * Run under chorus-run; every rank uses device rank % devices, so several
 * ranks share one GPU. Exits 77 on every rank when there is no device.
 *
 *   chorus-run -n 4 tests/cuda/cuda_colls [--quick]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <chorus.h>
#include <cuda_runtime_api.h>

static int rank, size, failures, checks;
/* Device memory of the matrix, allocated once: the in-place buffer, the send and receive ones. */
static char *dev_region[3];
#define MAX_COUNT 65537

#define CUDA_OK(call)                                                                    \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call, \
                    cudaGetErrorString(err_));                                           \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static void fail(const char *fmt, const char *what, chorus_dtype_t dt, chorus_op_t op,
                 size_t count, const char *how)
{
    failures++;
    if (failures <= 20) {
        fprintf(stderr, "rank %d: FAIL %s %s %s count=%zu %s: ", rank, what,
                chorus_dtype_name(dt), chorus_op_name(op), count, how);
        fprintf(stderr, "%s\n", fmt);
    }
}

/* A float16 or bfloat16 value as a float. */
static float half_value(uint16_t h, chorus_dtype_t dt)
{
    union { uint32_t u; float f; } v;
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

    if (dt == CHORUS_BFLOAT16) {
        v.u = (uint32_t)h << 16;
        return v.f;
    }
    if (e == 0) {
        v.f = (float)m / 16777216.0f;   /* subnormal: m * 2^-24 */
        v.u |= sign;
        return v.f;
    }
    v.u = sign | (e == 31 ? 0xffu << 23 | m << 13 : (e + 112) << 23 | m << 13);
    return v.f;
}

/* Element i of a floating-point buffer as a double, and its type's epsilon; 0 for others. */
static int float_value(const char *buf, size_t i, chorus_dtype_t dt, double *v, double *eps)
{
    switch (dt) {
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16:
        *v = half_value(((const uint16_t *)buf)[i], dt);
        *eps = dt == CHORUS_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
        return 1;
    case CHORUS_FLOAT32:
        *v = ((const float *)buf)[i];
        *eps = 1.0 / 8388608;
        return 1;
    case CHORUS_FLOAT64:
        *v = ((const double *)buf)[i];
        *eps = 1.0 / 4503599627370496.0;
        return 1;
    default:
        return 0;
    }
}

/*
 * Whether got matches ref: bit for bit, or, where loose, floating-point
 * values within the roundings of a reduction in another order (the device
 * folds in rank order, float16 and bfloat16 in float32; the host algorithm
 * that made ref may fold otherwise): size roundings of the type's precision.
 */
static int matches(const char *got, const char *ref, size_t bytes, chorus_dtype_t dt,
                   int loose, size_t *at_p)
{
    size_t es = chorus_dtype_size(dt);

    for (size_t i = 0; i < bytes; i++) {
        double g, r, eps;

        if (got[i] == ref[i])
            continue;
        if (loose && float_value(got, i / es, dt, &g, &eps)) {
            (void)float_value(ref, i / es, dt, &r, &eps);
            if (fabs(g - r) <= 4.0 * eps * (double)size * (fabs(r) > 1.0 ? fabs(r) : 1.0)) {
                i = (i / es + 1) * es - 1;
                continue;
            }
        }
        *at_p = i;
        return 0;
    }
    return 1;
}

/* Deterministic input: small values so that prod and sum stay exact in every dtype. */
static void fill(void *buf, size_t n, chorus_dtype_t dt, int seed)
{
    for (size_t i = 0; i < n; i++) {
        int v = (int)((i * 7 + (size_t)seed * 13) % 5) + 1 - (int)(i % 3 == 0) * 2;
        switch (dt) {
        case CHORUS_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
        case CHORUS_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(v + 2); break;
        case CHORUS_INT32: ((int32_t *)buf)[i] = v * 1000; break;
        case CHORUS_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(v + 2) * 1000u; break;
        case CHORUS_INT64: ((int64_t *)buf)[i] = (int64_t)v * ((int64_t)1 << 33); break;
        case CHORUS_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(v + 2) << 33; break;
        case CHORUS_FLOAT16:
            ((uint16_t *)buf)[i] = (uint16_t)(0x3C00 + v * 0x40 + (int)i % 7);
            break;
        case CHORUS_BFLOAT16: ((uint16_t *)buf)[i] = (uint16_t)(0x3F80 + v * 8 + (int)i % 5); break;
        case CHORUS_FLOAT32: ((float *)buf)[i] = (float)v * 0.37f + (float)i * 1e-3f; break;
        case CHORUS_FLOAT64: ((double *)buf)[i] = (double)v * 0.37 + (double)i * 1e-7; break;
        default: break;
        }
    }
}

enum { COLL_AR, COLL_AG, COLL_BC, COLL_RS, COLL_RD, COLL_A2A, COLL_BAR, COLL_N };
static const char *const coll_names[COLL_N] = {"allreduce", "allgather", "broadcast",
                                               "reduce_scatter", "reduce", "alltoall",
                                               "barrier"};

/* Elements of the send and receive buffers of coll at count. */
static void sizes(int coll, size_t count, size_t *send, size_t *recv)
{
    size_t n = (size_t)size;

    *send = *recv = count;
    if (coll == COLL_AG)
        *recv = count * n;
    if (coll == COLL_RS)
        *send = count * n;
    if (coll == COLL_A2A)
        *send = *recv = count * n;
}

static chorus_status_t run(int coll, const void *s, void *r, size_t count, chorus_dtype_t dt,
                           chorus_op_t op, int root, chorus_comm_t comm,
                           const chorus_opts_t *opts, int nonblocking)
{
    chorus_request_t req = NULL;
    chorus_status_t st;

    switch (coll) {
    case COLL_AR:
        st = nonblocking ? chorus_iallreduce(s, r, count, dt, op, comm, opts, &req)
                         : chorus_allreduce(s, r, count, dt, op, comm, opts);
        break;
    case COLL_AG:
        st = nonblocking ? chorus_iallgather(s, r, count, dt, comm, opts, &req)
                         : chorus_allgather(s, r, count, dt, comm, opts);
        break;
    case COLL_BC:
        st = nonblocking ? chorus_ibroadcast(s, r, count, dt, root, comm, opts, &req)
                         : chorus_broadcast(s, r, count, dt, root, comm, opts);
        break;
    case COLL_RS:
        st = nonblocking ? chorus_ireduce_scatter(s, r, count, dt, op, comm, opts, &req)
                         : chorus_reduce_scatter(s, r, count, dt, op, comm, opts);
        break;
    case COLL_RD:
        st = nonblocking ? chorus_ireduce(s, r, count, dt, op, root, comm, opts, &req)
                         : chorus_reduce(s, r, count, dt, op, root, comm, opts);
        break;
    case COLL_A2A:
        st = nonblocking ? chorus_ialltoall(s, r, count, dt, comm, opts, &req)
                         : chorus_alltoall(s, r, count, dt, comm, opts);
        break;
    default:
        st = nonblocking ? chorus_ibarrier(comm, opts, &req) : chorus_barrier(comm, opts);
        break;
    }
    if (st == CHORUS_OK && req != NULL)
        st = chorus_request_wait(req);
    if (req != NULL)
        chorus_request_free(req);
    return st;
}

/*
 * One case: the call on host buffers, then on buffers where this rank's
 * side is on the device when dev_send/dev_recv say so, declared a device
 * call when declared; the results must be the same bits (see matches).
 */
static void one_case(chorus_comm_t comm, int coll, chorus_dtype_t dt, chorus_op_t op,
                     size_t count, int in_place, int dev_send, int dev_recv, int nonblocking,
                     int declared)
{
    chorus_opts_t device_opts = CHORUS_OPTS_INIT;
    size_t es = chorus_dtype_size(dt), ns, nr, sb, rb, total;
    int root = (int)(count % (size_t)size);
    char how[96];
    char *hs, *hr, *ref, *got, *dbuf_s = NULL, *dbuf_r = NULL, *dev_one = NULL;
    const void *s;
    void *r;
    chorus_status_t st;
    size_t at = 0;

    sizes(coll, count, &ns, &nr);
    sb = ns * es;
    rb = nr * es;
    total = sb > rb ? sb : rb;
    snprintf(how, sizeof(how), "%s%s%s dev_send=%d dev_recv=%d", declared ? "declared " : "",
             in_place ? "in-place " : "", nonblocking ? "non-blocking" : "blocking", dev_send,
             dev_recv);
    device_opts.mem_type = CHORUS_MEM_CUDA;
    hs = malloc(total + 1);
    hr = malloc(total + 1);
    ref = malloc(total + 1);
    got = malloc(total + 1);
    fill(hs, total / es, dt, rank);
    memset(hr, 0x5A, total);

    /* The reference on the host. */
    if (in_place) {
        memcpy(ref, hs, total);
        if (coll == COLL_AG)
            memcpy(ref + (size_t)rank * sb, hs, sb);
        s = coll == COLL_AG ? ref + (size_t)rank * sb : ref;
        r = coll == COLL_RS ? ref + (size_t)rank * rb : ref;
    } else {
        memcpy(ref, hr, total);
        s = hs;
        r = ref;
    }
    st = run(coll, s, r, count, dt, op, root, comm, NULL, nonblocking);
    checks++;
    if (st != CHORUS_OK) {
        fail(chorus_status_string(st), coll_names[coll], dt, op, count, "host reference");
        goto out;
    }

    /* The same call with this rank's buffers on the device as asked. */
    if (in_place) {
        /* One buffer holds both sides: it is on the device when either side is. */
        char *one = got;

        memcpy(got, hs, total);
        if (coll == COLL_AG)
            memcpy(got + (size_t)rank * sb, hs, sb);
        if (dev_send || dev_recv) {
            dev_one = one = dev_region[0];
            CUDA_OK(cudaMemcpy(dev_one, got, total, cudaMemcpyHostToDevice));
        }
        s = coll == COLL_AG ? one + (size_t)rank * sb : one;
        r = coll == COLL_RS ? one + (size_t)rank * rb : one;
    } else {
        if (dev_send) {
            dbuf_s = dev_region[1];
            CUDA_OK(cudaMemcpy(dbuf_s, hs, sb, cudaMemcpyHostToDevice));
        }
        if (dev_recv) {
            dbuf_r = dev_region[2];
            CUDA_OK(cudaMemcpy(dbuf_r, hr, rb, cudaMemcpyHostToDevice));
        }
        memcpy(got, hr, total);
        s = dev_send ? dbuf_s : hs;
        r = dev_recv ? dbuf_r : got;
    }
    st = run(coll, s, r, count, dt, op, root, comm, declared ? &device_opts : NULL, nonblocking);
    checks++;
    if (st != CHORUS_OK) {
        fail(chorus_status_string(st), coll_names[coll], dt, op, count, how);
        goto out;
    }
    if (dev_one != NULL)
        CUDA_OK(cudaMemcpy(got, dev_one, total, cudaMemcpyDeviceToHost));
    else if (dev_recv)
        CUDA_OK(cudaMemcpy(got, dbuf_r, rb, cudaMemcpyDeviceToHost));
    /* A reduce's non-root receives nothing: its buffer must be untouched either way. */
    if (!matches(got, ref, in_place ? total : rb, dt,
                 declared && (coll == COLL_AR || coll == COLL_RS || coll == COLL_RD), &at)) {
        char why[96];

        snprintf(why, sizeof(why), "differs from the host call from byte %zu (0x%02x, not 0x%02x)",
                 at, (unsigned char)got[at], (unsigned char)ref[at]);
        fail(why, coll_names[coll], dt, op, count, how);
    }
out:
    free(hs);
    free(hr);
    free(ref);
    free(got);
}

static double seconds(void);

static void matrix(chorus_comm_t comm, int quick, int declared)
{
    static const size_t counts[] = {1, 7, 1000, MAX_COUNT};
    static const chorus_op_t ops[] = {CHORUS_SUM, CHORUS_PROD, CHORUS_MIN, CHORUS_MAX,
                                      CHORUS_AVG};
    int ncounts = quick ? 2 : 4;

    for (int coll = 0; coll < COLL_N; coll++) {
        int reduces = coll == COLL_AR || coll == COLL_RS || coll == COLL_RD;
        double started = seconds();

        for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
            for (int o = 0; o < (reduces ? 5 : 1); o++) {
                for (int c = 0; c < (coll == COLL_BAR ? 1 : ncounts); c++) {
                    for (int mix = 0; mix < 4; mix++) {
                        /* 0: both sides on the device; 1, 2: one side; 3: even ranks only. */
                        int ds = mix == 0 || mix == 1 || (mix == 3 && rank % 2 == 0);
                        int dr = mix == 0 || mix == 2 || (mix == 3 && rank % 2 == 0);

                        one_case(comm, coll, (chorus_dtype_t)dt, ops[o], counts[c], 0, ds, dr,
                                 (c + mix) % 2, declared);
                        if (mix == 0 || mix == 3)
                            one_case(comm, coll, (chorus_dtype_t)dt, ops[o], counts[c], 1, ds,
                                     dr, (c + mix + 1) % 2, declared);
                    }
                }
            }
        }
        if (rank == 0)
            fprintf(stderr, "cuda_colls: %s%s at %d ranks: %.1f s\n",
                    declared ? "declared " : "", coll_names[coll], size, seconds() - started);
    }
}

static double seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_ms(void *arg)
{
    usleep((useconds_t)(uintptr_t)arg * 1000u);
}

/*
 * The input is written on a stream behind 200 ms of other work; a call
 * ordered on that stream must see it, not what the buffer held before, and
 * a blocking call with its result on the device returns without waiting:
 * the stream's later work sees the result. Then the same non-blocking, and
 * with host buffers, where the call waits for the stream. declared: every
 * call is a device call (CHORUS_MEM_CUDA).
 */
static void stream_order(chorus_comm_t comm, int declared)
{
    const char *how = declared ? "declared, stream" : "stream";
    const size_t n = 1 << 20;
    float *host, *dev;
    cudaStream_t stream;
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_request_t req = NULL;
    chorus_status_t st;
    double started, took;
    int bad = 0;

    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMallocHost((void **)&host, n * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&dev, n * sizeof(float)));
    CUDA_OK(cudaMemset(dev, 0, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(rank + 1);
    CUDA_OK(cudaLaunchHostFunc(stream, pause_ms, (void *)(uintptr_t)200));
    CUDA_OK(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    opts.stream = stream;
    if (declared)
        opts.mem_type = CHORUS_MEM_CUDA;
    started = seconds();
    st = chorus_allreduce(dev, dev, n, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts);
    took = seconds() - started;
    /* The stream's next work sees the result, with no other wait on the host. */
    CUDA_OK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; i++)
        bad += host[i] != (float)(size * (size + 1) / 2);
    checks++;
    if (st != CHORUS_OK || bad)
        fail(st != CHORUS_OK ? chorus_status_string(st) : "result not ordered on the stream",
             "allreduce", CHORUS_FLOAT32, CHORUS_SUM, n, how);
    /* Its input was 200 ms away on the stream: a call that waited for it took as long. */
    checks++;
    if (took > 0.1) {
        char why[80];

        snprintf(why, sizeof(why), "the blocking call took %.0f ms: it waited for the stream",
                 took * 1e3);
        fail(why, "allreduce", CHORUS_FLOAT32, CHORUS_SUM, n, how);
    }

    /* Non-blocking on the stream: complete once the result is on the device. */
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(rank + 1);
    CUDA_OK(cudaLaunchHostFunc(stream, pause_ms, (void *)(uintptr_t)50));
    CUDA_OK(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    st = chorus_iallreduce(dev, dev, n, CHORUS_FLOAT32, CHORUS_MAX, comm, &opts, &req);
    if (st == CHORUS_OK)
        st = chorus_request_wait(req);
    if (req != NULL)
        chorus_request_free(req);
    CUDA_OK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != (float)size;
    checks++;
    if (st != CHORUS_OK || bad)
        fail(st != CHORUS_OK ? chorus_status_string(st) : "result not there once complete",
             "iallreduce", CHORUS_FLOAT32, CHORUS_MAX, n, how);
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(size * (size + 1) / 2);
    CUDA_OK(cudaMemcpy(dev, host, n * sizeof(float), cudaMemcpyHostToDevice));

    /* Host buffers with a stream: the call waits for the stream too. */
    for (size_t i = 0; i < n; i++)
        host[i] = -1.0f;
    CUDA_OK(cudaLaunchHostFunc(stream, pause_ms, (void *)(uintptr_t)200));
    CUDA_OK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    st = chorus_allreduce(host, host, n, CHORUS_FLOAT32, CHORUS_MAX, comm, &opts);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != (float)(size * (size + 1) / 2);
    checks++;
    if (st != CHORUS_OK || bad)
        fail(st != CHORUS_OK ? chorus_status_string(st) : "host call not ordered after stream",
             "allreduce", CHORUS_FLOAT32, CHORUS_MAX, n,
             declared ? "declared, stream, host buffers" : "stream, host buffers");
    cudaFree(dev);
    cudaFreeHost(host);
    cudaStreamDestroy(stream);
}

/* Halves of the ranks, each allreducing device buffers on its own communicator. */
static void split(chorus_comm_t comm)
{
    chorus_comm_t half = NULL;
    const size_t n = 4099;
    double *host = malloc(n * sizeof(double)), *dev;
    int hsize, expect = 0;
    chorus_status_t st = chorus_comm_split(comm, rank % 2, rank, &half);

    checks++;
    if (st != CHORUS_OK) {
        fail(chorus_status_string(st), "split", CHORUS_FLOAT64, CHORUS_SUM, 0, "");
        free(host);
        return;
    }
    hsize = chorus_comm_size(half);
    for (int r = rank % 2; r < size; r += 2)
        expect += r;
    for (size_t i = 0; i < n; i++)
        host[i] = (double)rank;
    CUDA_OK(cudaMalloc((void **)&dev, n * sizeof(double)));
    CUDA_OK(cudaMemcpy(dev, host, n * sizeof(double), cudaMemcpyHostToDevice));
    st = chorus_allreduce(dev, dev, n, CHORUS_FLOAT64, CHORUS_SUM, half, NULL);
    CUDA_OK(cudaMemcpy(host, dev, n * sizeof(double), cudaMemcpyDeviceToHost));
    checks++;
    if (st != CHORUS_OK || host[0] != (double)expect || host[n - 1] != (double)expect)
        fail("wrong sum on the half communicator", "allreduce", CHORUS_FLOAT64, CHORUS_SUM, n,
             hsize > 0 ? "split" : "split (empty)");
    cudaFree(dev);
    free(host);
    chorus_comm_destroy(half);
}

/* Refusals: a bad mem_type, and a stream on an engine call. */
static void refusals(chorus_comm_t comm, chorus_engine_t engine)
{
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_request_t req = NULL;
    cudaStream_t stream;
    float x = 1.0f;
    chorus_status_t st;

    opts.mem_type = 7;
    st = chorus_allreduce(&x, &x, 1, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts);
    checks++;
    if (st != CHORUS_ERR_INVALID_ARG)
        fail(chorus_status_string(st), "allreduce", CHORUS_FLOAT32, CHORUS_SUM, 1,
             "mem_type=7 must be refused");
    CUDA_OK(cudaStreamCreate(&stream));
    opts = (chorus_opts_t)CHORUS_OPTS_INIT;
    opts.stream = stream;
    st = chorus_engine_allreduce(engine, "streamed", &x, &x, 1, CHORUS_FLOAT32, CHORUS_SUM,
                                 &opts, &req);
    checks++;
    if (st != CHORUS_ERR_UNSUPPORTED)
        fail(chorus_status_string(st), "engine_allreduce", CHORUS_FLOAT32, CHORUS_SUM, 1,
             "a stream must be refused");
    if (st == CHORUS_OK && req != NULL)
        chorus_request_free(req);
    cudaStreamDestroy(stream);
}

/*
 * The training engine with device tensors: allreduce of tensors on the
 * device and on the host, fused in one bucket, a lone device tensor, then a
 * broadcast and an allgather of device tensors.
 */
#define ENGINE_TENSORS 6
static void engine_tensors(chorus_engine_t engine)
{
    static const size_t counts[ENGINE_TENSORS] = {1, 1000, 7, 65537, 33, 4096};
    chorus_request_t reqs[ENGINE_TENSORS + 2] = {NULL};
    float *host[ENGINE_TENSORS], *dev[ENGINE_TENSORS], *bc_dev, *ag_dev;
    const size_t bc_n = 5000, ag_n = 777;
    float *bc_host = malloc(bc_n * sizeof(float)), *ag_host = malloc(ag_n * size * sizeof(float));
    chorus_status_t st;
    char name[32];

    for (int t = 0; t < ENGINE_TENSORS; t++) {
        host[t] = malloc(counts[t] * sizeof(float));
        for (size_t i = 0; i < counts[t]; i++)
            host[t][i] = (float)(rank + 1) * (float)(t + 1);
        dev[t] = NULL;
        /* Even tensors on the device, odd ones on the host. */
        if (t % 2 == 0) {
            CUDA_OK(cudaMalloc((void **)&dev[t], counts[t] * sizeof(float)));
            CUDA_OK(cudaMemcpy(dev[t], host[t], counts[t] * sizeof(float),
                               cudaMemcpyHostToDevice));
        }
    }
    /* Submitted in a different order on each rank: the engine pairs them by name. */
    for (int k = 0; k < ENGINE_TENSORS; k++) {
        int t = (k + rank) % ENGINE_TENSORS;
        float *buf = dev[t] != NULL ? dev[t] : host[t];

        snprintf(name, sizeof(name), "grad%d", t);
        st = chorus_engine_allreduce(engine, name, buf, buf, counts[t], CHORUS_FLOAT32,
                                     CHORUS_SUM, NULL, &reqs[t]);
        checks++;
        if (st != CHORUS_OK)
            fail(chorus_status_string(st), "engine_allreduce", CHORUS_FLOAT32, CHORUS_SUM,
                 counts[t], "submit");
    }
    CUDA_OK(cudaMalloc((void **)&bc_dev, bc_n * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&ag_dev, ag_n * size * sizeof(float)));
    for (size_t i = 0; i < bc_n; i++)
        bc_host[i] = rank == size - 1 ? (float)i : -1.0f;
    CUDA_OK(cudaMemcpy(bc_dev, bc_host, bc_n * sizeof(float), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < ag_n; i++)
        ag_host[i] = (float)(rank * 1000 + (int)i % 1000);
    CUDA_OK(cudaMemcpy(ag_dev + (size_t)rank * ag_n, ag_host, ag_n * sizeof(float),
                       cudaMemcpyHostToDevice));
    st = chorus_engine_broadcast(engine, "bcast", bc_dev, bc_dev, bc_n, CHORUS_FLOAT32, size - 1,
                                 NULL, &reqs[ENGINE_TENSORS]);
    checks++;
    if (st != CHORUS_OK)
        fail(chorus_status_string(st), "engine_broadcast", CHORUS_FLOAT32, CHORUS_SUM, bc_n,
             "submit");
    st = chorus_engine_allgather(engine, "gather", ag_dev + (size_t)rank * ag_n, ag_dev, ag_n,
                                 CHORUS_FLOAT32, NULL, &reqs[ENGINE_TENSORS + 1]);
    checks++;
    if (st != CHORUS_OK)
        fail(chorus_status_string(st), "engine_allgather", CHORUS_FLOAT32, CHORUS_SUM, ag_n,
             "submit");
    for (int t = 0; t < ENGINE_TENSORS + 2; t++) {
        if (reqs[t] == NULL)
            continue;
        st = chorus_request_wait(reqs[t]);
        chorus_request_free(reqs[t]);
        checks++;
        if (st != CHORUS_OK)
            fail(chorus_status_string(st), "engine", CHORUS_FLOAT32, CHORUS_SUM, 0, "wait");
    }
    for (int t = 0; t < ENGINE_TENSORS; t++) {
        float want = (float)(size * (size + 1) / 2) * (float)(t + 1);
        int bad = 0;

        if (dev[t] != NULL)
            CUDA_OK(cudaMemcpy(host[t], dev[t], counts[t] * sizeof(float),
                               cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < counts[t]; i++)
            bad += host[t][i] != want;
        checks++;
        if (bad)
            fail("wrong sum", "engine_allreduce", CHORUS_FLOAT32, CHORUS_SUM, counts[t],
                 dev[t] != NULL ? "device tensor" : "host tensor beside device ones");
        cudaFree(dev[t]);
        free(host[t]);
    }
    CUDA_OK(cudaMemcpy(bc_host, bc_dev, bc_n * sizeof(float), cudaMemcpyDeviceToHost));
    checks++;
    for (size_t i = 0; i < bc_n; i++) {
        if (bc_host[i] != (float)i) {
            fail("wrong value", "engine_broadcast", CHORUS_FLOAT32, CHORUS_SUM, bc_n, "device");
            break;
        }
    }
    CUDA_OK(cudaMemcpy(ag_host, ag_dev, ag_n * size * sizeof(float), cudaMemcpyDeviceToHost));
    checks++;
    for (size_t i = 0; i < ag_n * (size_t)size; i++) {
        if (ag_host[i] != (float)((int)(i / ag_n) * 1000 + (int)(i % ag_n) % 1000)) {
            fail("wrong value", "engine_allgather", CHORUS_FLOAT32, CHORUS_SUM, ag_n, "device");
            break;
        }
    }
    cudaFree(bc_dev);
    cudaFree(ag_dev);
    free(bc_host);
    free(ag_host);
}

/*
 * Wire compression on device buffers: the same bits as the compressed call
 * on host buffers.
 */
static void compressed(chorus_comm_t comm)
{
    const size_t n = 100003;
    float *in = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    float *got = malloc(n * sizeof(float)), *dev;
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_status_t st;

    for (size_t i = 0; i < n; i++)
        in[i] = (float)((int)(i % 977) - 488) * 0.013f + (float)rank;
    opts.flags = CHORUS_COMPRESS_BF16;
    st = chorus_allreduce(in, ref, n, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts);
    CUDA_OK(cudaMalloc((void **)&dev, n * sizeof(float)));
    CUDA_OK(cudaMemcpy(dev, in, n * sizeof(float), cudaMemcpyHostToDevice));
    if (st == CHORUS_OK)
        st = chorus_allreduce(dev, dev, n, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts);
    CUDA_OK(cudaMemcpy(got, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    checks++;
    if (st != CHORUS_OK || memcmp(got, ref, n * sizeof(float)) != 0)
        fail(st != CHORUS_OK ? chorus_status_string(st) : "differs from the host call",
             "allreduce", CHORUS_FLOAT32, CHORUS_SUM, n, "bfloat16 wire, device in place");
    cudaFree(dev);
    free(in);
    free(ref);
    free(got);
}

int main(int argc, char **argv)
{
    chorus_comm_t comm;
    chorus_engine_t engine;
    int devices = 0, quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    chorus_status_t st;

    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("cuda_colls: no CUDA device, skipped\n");
        return 77;
    }
    st = chorus_comm_create_from_env(&comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    rank = chorus_comm_rank(comm);
    size = chorus_comm_size(comm);
    CUDA_OK(cudaSetDevice(rank % devices));
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaMalloc((void **)&dev_region[i], (size_t)MAX_COUNT * 8 * (size_t)size));
    matrix(comm, quick, 0);
    matrix(comm, quick, 1);
    for (int i = 0; i < 3; i++)
        cudaFree(dev_region[i]);
    stream_order(comm, 0);
    stream_order(comm, 1);
    split(comm);
    compressed(comm);
    st = chorus_engine_create(comm, NULL, &engine);
    checks++;
    if (st != CHORUS_OK) {
        fail(chorus_status_string(st), "engine_create", CHORUS_FLOAT32, CHORUS_SUM, 0, "");
    } else {
        engine_tensors(engine);
        refusals(comm, engine);
        chorus_engine_destroy(engine);
    }
    printf("cuda_colls: rank %d of %d: %d checks, %d failed\n", rank, size, checks, failures);
    chorus_comm_destroy(comm);
    return failures ? 1 : 0;
}
