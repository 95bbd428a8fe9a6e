/*
 * Ring reduce-scatter: size - 1 ring steps, each block cut into pipeline
 * chunks. At step s a rank receives the left neighbour's partial of block
 * rank - s - 2 into a block-sized scratch buffer, reduces its own data into
 * it there, and sends it on at step s + 1. Two such buffers alternate, so a
 * partial is still being sent while the next one arrives. The last step
 * reduces into recvbuf, which ends with block rank of the reduction.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/ring.h"
#include "util/log.h"

typedef struct {
    const coll_args_t *args;
    coll_sched_t *sched;
    size_t esize;
    size_t chunk;
    size_t nchunks;
    char *acc[2];           /* partials of even and odd steps */
    long *prev;             /* per chunk: the reduce that produced the partial in hand */
    long *last_send;        /* per chunk: the send of the previous step */
} ring_rs_t;

static size_t chunk_len(size_t n, size_t chunk, size_t c)
{
    size_t left = n - c * chunk;
    return left < chunk ? left : chunk;
}

static chorus_status_t ring_rs_step(ring_rs_t *st, int s)
{
    const coll_args_t *a = st->args;
    int right = coll_ring_right(a->rank, a->size), left = coll_ring_left(a->rank, a->size);
    int sb = coll_ring_rs_send_block(a->rank, a->size, s);
    int rb = coll_ring_rs_recv_block(a->rank, a->size, s);
    size_t block = a->count * st->esize;
    const char *send = a->sendbuf;
    const char *src = s == 0 ? send + (size_t)sb * block : st->acc[(s - 1) % 2];
    char *buf = st->acc[s % 2];
    /* The last step's result is this rank's block: reduce it into recvbuf. */
    char *dst = s == a->size - 2 ? (char *)a->recvbuf : buf;
    uint32_t tag = (uint32_t)((size_t)s * st->nchunks);

    for (size_t c = 0; c < st->nchunks; c++) {
        size_t off = c * st->chunk * st->esize;
        size_t bytes = chunk_len(a->count, st->chunk, c) * st->esize;
        long snd, rcv, red;

        snd = coll_sched_send(st->sched, right, tag + (uint32_t)c, src + off, bytes,
                              &st->prev[c], 1);
        /* buf held the partial that the previous step's send read. */
        rcv = coll_sched_recv(st->sched, left, tag + (uint32_t)c, buf + off, bytes,
                              &st->last_send[c], 1);
        if (snd < 0 || rcv < 0)
            return CHORUS_ERR_NO_MEMORY;
        red = coll_sched_reduce(st->sched, dst + off, buf + off, send + (size_t)rb * block + off,
                                bytes, &rcv, 1);
        if (red < 0)
            return CHORUS_ERR_NO_MEMORY;
        st->prev[c] = red;
        st->last_send[c] = snd;
    }
    return CHORUS_OK;
}

static chorus_status_t ring_rs_finalize(ring_rs_t *st)
{
    char *recv = st->args->recvbuf;

    if (st->args->op != CHORUS_AVG)
        return CHORUS_OK;
    for (size_t c = 0; c < st->nchunks; c++) {
        if (coll_sched_finalize_op(st->sched, recv + c * st->chunk * st->esize,
                                   chunk_len(st->args->count, st->chunk, c) * st->esize,
                                   &st->prev[c], 1) < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

static chorus_status_t ring_rs_steps(ring_rs_t *st)
{
    chorus_status_t status = CHORUS_OK;

    for (size_t c = 0; c < st->nchunks; c++)
        st->prev[c] = st->last_send[c] = -1;
    for (int s = 0; s < st->args->size - 1 && status == CHORUS_OK; s++)
        status = ring_rs_step(st, s);
    if (status == CHORUS_OK)
        status = ring_rs_finalize(st);
    return status;
}

static chorus_status_t ring_reduce_scatter_build(const coll_args_t *args,
                                                 const coll_env_t *env, coll_sched_t *sched)
{
    ring_rs_t st = {.args = args, .sched = sched};
    size_t block;
    chorus_status_t status = coll_check_blocks(args, "ring reduce_scatter", 1, 1,
                                                &st.esize);

    if (status != CHORUS_OK || args->count == 0)
        return status;
    block = args->count * st.esize;
    if (args->size == 1) {
        /* In place the copy is a no-op (recvbuf == sendbuf); AVG divides by one. */
        return coll_sched_copy(sched, args->recvbuf, args->sendbuf, block, NULL, 0) < 0
                   ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
    }
    st.chunk = coll_chunk_elems(args->chunk_bytes, st.esize, args->count, args->size - 1);
    st.nchunks = coll_chunk_count(args->count, st.chunk);
    st.acc[0] = coll_sched_alloc(sched, block);
    st.acc[1] = args->size > 2 ? coll_sched_alloc(sched, block) : st.acc[0];
    st.prev = malloc(st.nchunks * sizeof(*st.prev));
    st.last_send = malloc(st.nchunks * sizeof(*st.last_send));
    if (st.acc[0] == NULL || st.acc[1] == NULL || st.prev == NULL || st.last_send == NULL)
        status = CHORUS_ERR_NO_MEMORY;
    else
        status = ring_rs_steps(&st);
    free(st.prev);
    free(st.last_send);
    return status;
}

/* n is the whole input: p-1 steps, each receiving and reducing one block. */
static double ring_reduce_scatter_cost(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * (m->beta + m->gamma));
}

static double ring_reduce_scatter_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, ring_reduce_scatter_cost, COLL_FLOWS_RING, bytes);
}

const coll_alg_t coll_ring_reduce_scatter = {
    .name = "ring",
    .coll = COLL_REDUCE_SCATTER,
    .build = ring_reduce_scatter_build,
    .price = ring_reduce_scatter_price,
};
