/* chorus-perf collectives: sizes, in-place layouts, inputs and checks. */
#include "perf/perf_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf_data.h"

static const perf_coll_info_t coll_infos[PERF_COLL_COUNT] = {
    [PERF_ALLREDUCE] = {"allreduce", 1, 0, 0},
    [PERF_ALLGATHER] = {"allgather", 0, 0, 1},
    [PERF_BROADCAST] = {"broadcast", 0, 1, 0},
    [PERF_REDUCE_SCATTER] = {"reduce_scatter", 1, 0, 1},
    [PERF_REDUCE] = {"reduce", 1, 1, 0},
    [PERF_ALLTOALL] = {"alltoall", 0, 0, 1},
    [PERF_BARRIER] = {"barrier", 0, 0, 0},
};

const perf_coll_info_t *perf_coll_info(perf_coll_t coll)
{
    if ((int)coll < 0 || coll >= PERF_COLL_COUNT)
        return NULL;
    return &coll_infos[coll];
}

int perf_coll_parse(const char *text)
{
    for (int i = 0; i < PERF_COLL_COUNT; i++) {
        if (strcmp(text, coll_infos[i].name) == 0)
            return i;
    }
    return -1;
}

static size_t esize(chorus_dtype_t dtype)
{
    const perf_dtype_info_t *info = perf_dtype_info(dtype);
    return info != NULL ? info->size : 1;
}

size_t perf_count_for_bytes(perf_coll_t coll, chorus_dtype_t dtype, int nranks,
                            size_t bytes)
{
    size_t count = bytes / esize(dtype);

    if (coll == PERF_BARRIER)
        return 0;
    return coll_infos[coll].blocks ? count / (size_t)nranks : count;
}

size_t perf_msg_elems(const perf_args_t *a)
{
    if (a->coll == PERF_BARRIER)
        return 0;
    return coll_infos[a->coll].blocks ? a->count * (size_t)a->nranks : a->count;
}

size_t perf_msg_bytes(const perf_args_t *a)
{
    return perf_msg_elems(a) * esize(a->dtype);
}

double perf_busbw_factor(perf_coll_t coll, int nranks)
{
    double n = nranks;

    switch (coll) {
    case PERF_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PERF_ALLGATHER:
    case PERF_REDUCE_SCATTER:
    case PERF_ALLTOALL: return (n - 1) / n;
    case PERF_BROADCAST:
    case PERF_REDUCE: return 1.0;
    default: return 0.0;
    }
}

size_t perf_send_elems(const perf_args_t *a)
{
    size_t n = (size_t)a->nranks;

    switch (a->coll) {
    case PERF_REDUCE_SCATTER:
    case PERF_ALLTOALL: return n * a->count;
    case PERF_BARRIER: return 0;
    default: return a->count;
    }
}

size_t perf_recv_elems(const perf_args_t *a)
{
    size_t n = (size_t)a->nranks;

    switch (a->coll) {
    case PERF_ALLGATHER:
    case PERF_REDUCE_SCATTER: /* in place, the whole input lives here */
    case PERF_ALLTOALL: return n * a->count;
    case PERF_BARRIER: return 0;
    default: return a->count;
    }
}

void perf_buffers(const perf_args_t *a, int in_place, void *send_base, void *recv_base,
                  void **send_p, void **recv_p)
{
    size_t own_block = (size_t)a->rank * a->count * esize(a->dtype);

    *send_p = send_base;
    *recv_p = recv_base;
    if (!in_place)
        return;
    *send_p = recv_base;
    if (a->coll == PERF_ALLGATHER)
        *send_p = (char *)recv_base + own_block;
    else if (a->coll == PERF_REDUCE_SCATTER)
        *recv_p = (char *)recv_base + own_block;
}

/*
 * The check values repeat along the buffer with a short period, so filling
 * copies the first period and checking looks expected values up in a table:
 * large buffers stay cheap even with many ranks.
 */
#define COPY_PERIOD PERF_COPY_PERIOD

static size_t reduce_period(const perf_args_t *a)
{
    return perf_reduce_period(a->op, a->nranks);
}

/* Repeats the first period elements of buf over its first n elements. */
static void replicate(const perf_args_t *a, void *buf, size_t period, size_t n)
{
    size_t es = esize(a->dtype);

    for (size_t done = period; done < n;) {
        size_t chunk = done < n - done ? done : n - done;
        memcpy((char *)buf + done * es, buf, chunk * es);
        done += chunk;
    }
}

static void fill_reduce_values(const perf_args_t *a, void *buf, size_t n)
{
    size_t period = reduce_period(a);

    for (size_t i = 0; i < n && i < period; i++)
        perf_store(a->dtype, buf, i, perf_reduce_value(a->dtype, a->op, a->rank,
                                                       a->nranks, i));
    replicate(a, buf, period, n);
}

static void fill_copy_values(const perf_args_t *a, int rank, void *buf, size_t n)
{
    for (size_t i = 0; i < n && i < COPY_PERIOD; i++)
        perf_store(a->dtype, buf, i, perf_copy_value(a->dtype, rank, i));
    replicate(a, buf, COPY_PERIOD, n);
}

void perf_fill(const perf_args_t *a, int in_place, void *send_base, void *recv_base)
{
    size_t nblk = (size_t)a->nranks * a->count;
    void *send, *recv;

    perf_buffers(a, in_place, send_base, recv_base, &send, &recv);
    switch (a->coll) {
    case PERF_ALLREDUCE:
        perf_fill_sentinel(a->dtype, recv, a->count);
        fill_reduce_values(a, send, a->count);
        break;
    case PERF_ALLGATHER:
        perf_fill_sentinel(a->dtype, recv, nblk);
        fill_copy_values(a, a->rank, send, a->count);
        break;
    case PERF_BROADCAST:
        perf_fill_sentinel(a->dtype, recv, a->count);
        if (a->rank == a->root)
            fill_copy_values(a, a->root, send, a->count);
        break;
    case PERF_REDUCE_SCATTER:
        if (!in_place) /* in place, the output block is part of the input */
            perf_fill_sentinel(a->dtype, recv, a->count);
        fill_reduce_values(a, send, nblk);
        break;
    case PERF_REDUCE:
        perf_fill_sentinel(a->dtype, recv, a->count);
        fill_reduce_values(a, send, a->count);
        break;
    case PERF_ALLTOALL:
        perf_fill_sentinel(a->dtype, recv, nblk);
        fill_copy_values(a, a->rank, send, nblk);
        break;
    default:
        break;
    }
}

/* Counts elements of out[0..n) that differ from want[(first + i) % period]. */
static size_t count_wrong(const perf_args_t *a, const void *out, const double *want,
                          size_t period, size_t first, size_t n)
{
    size_t wrong = 0, j = first % period;

    for (size_t i = 0; i < n; i++) {
        wrong += perf_load(a->dtype, out, i) != want[j];
        j = j + 1 == period ? 0 : j + 1;
    }
    return wrong;
}

double perf_compress_bound(uint32_t compress, chorus_op_t op, int nranks, double maxabs)
{
    int fp16 = compress == CHORUS_COMPRESS_FP16;
    double u = ldexp(1, fp16 ? -11 : -8), d = fp16 ? ldexp(1, -25) : 0;
    double top = fp16 ? 65504.0 : 3.3895313892515355e38, s = 1, p = nranks, b;

    if (maxabs > 0) {
        s = ldexp(1, (int)floor(log2(top / (p * maxabs))));
        s = fp16 ? fmin(s, ldexp(1, 64)) : fmin(s, 1);
    }
    b = (u + ldexp(1, -24)) * p * (p + 1) / 2 * maxabs + p * d / s;
    return op == CHORUS_AVG ? b / p : b;
}

/* Compressed: elements of out[0..n) farther from the reduction at first + i than the bound. */
static size_t check_compressed(const perf_args_t *a, const void *out, size_t first, size_t n)
{
    size_t period = reduce_period(a), wrong = 0;
    double most = 0, bound;

    for (int r = 0; r < a->nranks; r++)
        for (size_t k = 0; k < period; k++)
            most = fmax(most, fabs((double)perf_reduce_value(a->dtype, a->op, r, a->nranks, k)));
    bound = perf_compress_bound(a->compress, a->op, a->nranks, most);
    for (size_t i = 0; i < n; i++)
        wrong += !(fabs(perf_load(a->dtype, out, i) -
                        perf_reduce_expected(a->dtype, a->op, a->nranks,
                                             (first + i) % period)) <= bound);
    return wrong;
}

/* Counts elements of out[0..n) that differ from the reduction at first + i. */
static size_t check_reduced(const perf_args_t *a, const void *out, size_t first, size_t n)
{
    size_t period = reduce_period(a), wrong = 0;
    double *want = malloc(period * sizeof(double));

    if (want == NULL) { /* slow but still right */
        for (size_t i = 0; i < n; i++)
            wrong += perf_load(a->dtype, out, i) !=
                     perf_reduce_expected(a->dtype, a->op, a->nranks, first + i);
        return wrong;
    }
    for (size_t k = 0; k < period; k++)
        want[k] = perf_reduce_expected(a->dtype, a->op, a->nranks, k);
    wrong = count_wrong(a, out, want, period, first, n);
    free(want);
    return wrong;
}

/* Counts elements of out[0..n) that differ from rank's copy values at first + i. */
static size_t check_copied(const perf_args_t *a, int rank, const void *out, size_t first,
                           size_t n)
{
    double want[COPY_PERIOD];

    for (size_t k = 0; k < COPY_PERIOD; k++)
        want[k] = perf_as_dtype(a->dtype, perf_copy_value(a->dtype, rank, k));
    return count_wrong(a, out, want, COPY_PERIOD, first, n);
}

static const void *block(const perf_args_t *a, const void *buf, int j)
{
    return (const char *)buf + (size_t)j * a->count * esize(a->dtype);
}

size_t perf_check(const perf_args_t *a, int in_place, const void *send_base,
                  const void *recv_base)
{
    void *send, *recv;
    size_t wrong = 0;

    perf_buffers(a, in_place, (void *)send_base, (void *)recv_base, &send, &recv);
    switch (a->coll) {
    case PERF_ALLREDUCE:
        return a->compress ? check_compressed(a, recv, 0, a->count)
                           : check_reduced(a, recv, 0, a->count);
    case PERF_ALLGATHER:
        for (int j = 0; j < a->nranks; j++)
            wrong += check_copied(a, j, block(a, recv, j), 0, a->count);
        return wrong;
    case PERF_BROADCAST:
        return check_copied(a, a->root, recv, 0, a->count);
    case PERF_REDUCE_SCATTER:
        return a->compress ? check_compressed(a, recv, (size_t)a->rank * a->count, a->count)
                           : check_reduced(a, recv, (size_t)a->rank * a->count, a->count);
    case PERF_REDUCE:
        return a->rank == a->root ? check_reduced(a, recv, 0, a->count) : 0;
    case PERF_ALLTOALL:
        for (int j = 0; j < a->nranks; j++)
            wrong += check_copied(a, j, block(a, recv, j), (size_t)a->rank * a->count,
                                  a->count);
        return wrong;
    default:
        return 0;
    }
}
