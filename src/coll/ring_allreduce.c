/*
 * Ring allreduce: a ring reduce-scatter followed by a ring allgather, each
 * block cut into pipeline chunks. Steps are appended ring step by ring
 * step, chunk by chunk, so chunk k+1 travels while chunk k is reduced.
 *
 * Reduce-scatter: received chunk c lands in scratch slot c (one block of
 * scratch, so every receive of a ring step can be posted before its data
 * arrives instead of being buffered as unexpected by the transport) and
 * is reduced with this rank's own data straight into recvbuf, which then
 * holds the partial that the next ring step sends. The owned block (block
 * rank) is finalized (AVG's division) before the allgather passes it on,
 * so every element is divided exactly once. Allgather receives go straight
 * into recvbuf.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/ring.h"
#include "util/log.h"

typedef struct {
    coll_sched_t *sched;
    chorus_op_t op;
    int me;                 /* position on the ring */
    int n;                  /* ranks on the ring */
    const int *ranks;       /* comm rank of each position; NULL: position i is rank i */
    size_t count;
    uint32_t tag0;
    size_t esize;
    size_t chunk;           /* elements per chunk */
    size_t nchunks;         /* chunks of the largest block: the tag stride */
    char *send;             /* sendbuf (== recv when in place) */
    char *recv;
    char *slots;            /* nchunks chunk-sized receive buffers: slot c for chunk c */
    long *slot_user;        /* per slot: last step that read it */
    long *prev;             /* per chunk: last step producing that chunk of the block in hand */
    long *rs_send;          /* per (step, chunk): reduce-scatter sends, read by allgather receives */
} ring_ar_t;

static size_t chunk_len(size_t n, size_t chunk, size_t c)
{
    size_t left = n - c * chunk;
    return left < chunk ? left : chunk;
}

static int ring_peer(const ring_ar_t *st, int pos)
{
    return st->ranks != NULL ? st->ranks[pos] : pos;
}

/* Reduce-scatter ring step s. Returns CHORUS_OK or a negative status. */
static chorus_status_t ring_ar_rs_step(ring_ar_t *st, int s)
{
    int right = ring_peer(st, coll_ring_right(st->me, st->n));
    int left = ring_peer(st, coll_ring_left(st->me, st->n));
    int sb = coll_ring_rs_send_block(st->me, st->n, s);
    int rb = coll_ring_rs_recv_block(st->me, st->n, s);
    size_t sn = coll_ring_block_count(st->count, st->n, sb);
    size_t rn = coll_ring_block_count(st->count, st->n, rb);
    size_t soff = coll_ring_block_offset(st->count, st->n, sb) * st->esize;
    size_t roff = coll_ring_block_offset(st->count, st->n, rb) * st->esize;
    /* The first step sends this rank's own data; later ones the partial in recvbuf. */
    const char *sbase = (s == 0 ? st->send : st->recv) + soff;
    size_t nc = coll_chunk_count(sn > rn ? sn : rn, st->chunk);
    uint32_t tag = st->tag0 + (uint32_t)((size_t)s * st->nchunks);

    for (size_t c = 0; c < nc; c++) {
        size_t off = c * st->chunk * st->esize;
        long idx;

        if (c * st->chunk < sn) {
            size_t bytes = chunk_len(sn, st->chunk, c) * st->esize;
            idx = coll_sched_send(st->sched, right, tag + (uint32_t)c, sbase + off, bytes,
                                  &st->prev[c], 1);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
            st->rs_send[(size_t)s * st->nchunks + c] = idx;
        }
        if (c * st->chunk < rn) {
            size_t bytes = chunk_len(rn, st->chunk, c) * st->esize;
            char *buf = st->slots + off;
            long r = coll_sched_recv(st->sched, left, tag + (uint32_t)c, buf, bytes,
                                     &st->slot_user[c], 1);
            if (r < 0)
                return CHORUS_ERR_NO_MEMORY;
            idx = coll_sched_reduce(st->sched, st->recv + roff + off, buf,
                                    st->send + roff + off, bytes, &r, 1);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
            st->slot_user[c] = idx;
            st->prev[c] = idx;
        }
    }
    return CHORUS_OK;
}

/* AVG: divide the owned block once, chunk by chunk, before the allgather sends it. */
static chorus_status_t ring_ar_finalize(ring_ar_t *st)
{
    size_t n = coll_ring_block_count(st->count, st->n, st->me);
    char *base = st->recv + coll_ring_block_offset(st->count, st->n, st->me) * st->esize;

    if (st->op != CHORUS_AVG)
        return CHORUS_OK;
    for (size_t c = 0; c * st->chunk < n; c++) {
        long idx = coll_sched_finalize_op(st->sched, base + c * st->chunk * st->esize,
                                          chunk_len(n, st->chunk, c) * st->esize,
                                          &st->prev[c], 1);
        if (idx < 0)
            return CHORUS_ERR_NO_MEMORY;
        st->prev[c] = idx;
    }
    return CHORUS_OK;
}

/* Allgather ring step s: forward the block in hand, receive the next into recvbuf. */
static chorus_status_t ring_ar_ag_step(ring_ar_t *st, int s)
{
    int right = ring_peer(st, coll_ring_right(st->me, st->n));
    int left = ring_peer(st, coll_ring_left(st->me, st->n));
    int sb = coll_ring_ag_send_block(st->me, st->n, s);
    int rb = coll_ring_ag_recv_block(st->me, st->n, s);
    size_t sn = coll_ring_block_count(st->count, st->n, sb);
    size_t rn = coll_ring_block_count(st->count, st->n, rb);
    char *sbase = st->recv + coll_ring_block_offset(st->count, st->n, sb) * st->esize;
    char *rbase = st->recv + coll_ring_block_offset(st->count, st->n, rb) * st->esize;
    size_t nc = coll_chunk_count(sn > rn ? sn : rn, st->chunk);
    uint32_t tag = st->tag0 + (uint32_t)((size_t)(st->n - 1 + s) * st->nchunks);

    for (size_t c = 0; c < nc; c++) {
        size_t off = c * st->chunk * st->esize;

        if (c * st->chunk < sn) {
            long idx = coll_sched_send(st->sched, right, tag + (uint32_t)c, sbase + off,
                                       chunk_len(sn, st->chunk, c) * st->esize,
                                       &st->prev[c], 1);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
        }
        if (c * st->chunk < rn) {
            /*
             * Block rb was sent by reduce-scatter step s (from recvbuf, or
             * from sendbuf == recvbuf in place): overwrite it only after.
             */
            long dep = st->rs_send[(size_t)s * st->nchunks + c];
            long idx = coll_sched_recv(st->sched, left, tag + (uint32_t)c, rbase + off,
                                       chunk_len(rn, st->chunk, c) * st->esize, &dep, 1);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
            st->prev[c] = idx;
        }
    }
    return CHORUS_OK;
}

static chorus_status_t ring_ar_phases(ring_ar_t *st)
{
    chorus_status_t status = CHORUS_OK;

    for (int s = 0; s < st->n - 1 && status == CHORUS_OK; s++)
        status = ring_ar_rs_step(st, s);
    if (status == CHORUS_OK)
        status = ring_ar_finalize(st);
    for (int s = 0; s < st->n - 1 && status == CHORUS_OK; s++)
        status = ring_ar_ag_step(st, s);
    return status;
}

/* The ring over st's positions; st->chunk and st->nchunks set. */
static chorus_status_t ring_ar_run(ring_ar_t *st, long after)
{
    size_t nsteps = (size_t)(st->n - 1);
    chorus_status_t status;

    st->slots = coll_sched_alloc(st->sched, st->nchunks * st->chunk * st->esize);
    st->slot_user = malloc(st->nchunks * sizeof(*st->slot_user));
    st->prev = malloc(st->nchunks * sizeof(*st->prev));
    st->rs_send = malloc(nsteps * st->nchunks * sizeof(*st->rs_send));
    if (st->slots == NULL || st->slot_user == NULL || st->prev == NULL || st->rs_send == NULL) {
        status = CHORUS_ERR_NO_MEMORY;
        goto out;
    }
    /* Nothing reads or overwrites this rank's data before `after`. */
    for (size_t c = 0; c < st->nchunks; c++)
        st->prev[c] = st->slot_user[c] = after;
    for (size_t i = 0; i < nsteps * st->nchunks; i++)
        st->rs_send[i] = -1;
    status = ring_ar_phases(st);
out:
    free(st->slot_user);
    free(st->prev);
    free(st->rs_send);
    return status;
}

size_t coll_ring_allreduce_tags(size_t count, int n, size_t chunk)
{
    if (n < 2 || count == 0)
        return 0;
    return 2 * (size_t)(n - 1) * coll_chunk_count(coll_ring_block_count(count, n, 0), chunk);
}

chorus_status_t coll_ring_allreduce_part(coll_sched_t *sched, const coll_ring_part_t *part,
                                         chorus_op_t op, size_t esize)
{
    ring_ar_t st = {
        .sched = sched, .op = op, .me = part->group.me, .n = part->group.size,
        .ranks = part->group.ranks, .count = part->count, .tag0 = part->tag0,
        .esize = esize, .chunk = part->chunk, .send = (char *)part->send, .recv = part->recv,
    };

    if (part->count == 0 || part->group.size < 2)
        return CHORUS_OK;
    st.nchunks = coll_chunk_count(coll_ring_block_count(st.count, st.n, 0), st.chunk);
    return ring_ar_run(&st, part->after);
}

static chorus_status_t ring_allreduce_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    ring_ar_t st = {.sched = sched, .op = args->op, .me = args->rank, .n = args->size,
                    .count = args->count};
    size_t max_block;
    chorus_status_t status = coll_check_blocks(args, "ring allreduce", 1, 0, &st.esize);

    if (status != CHORUS_OK)
        return status;
    st.send = (char *)args->sendbuf;
    st.recv = args->recvbuf;
    if (args->count == 0)
        return CHORUS_OK;
    if (args->size == 1) {
        /* One rank: AVG divides by one, so the result is the input. */
        return coll_sched_copy(sched, st.recv, st.send, args->count * st.esize, NULL, 0) < 0
                   ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
    }
    max_block = coll_ring_block_count(args->count, args->size, 0);
    st.chunk = coll_chunk_elems(args->chunk_bytes, st.esize, max_block, 2L * (args->size - 1));
    st.nchunks = coll_chunk_count(max_block, st.chunk);
    return ring_ar_run(&st, -1);
}

/* Reduce-scatter then allgather around the ring, n/p bytes per step. */
static double ring_allreduce_cost(const tune_model_t *m, double n, int p)
{
    double frac = (double)(p - 1) / p;

    return 2.0 * (p - 1) * m->alpha + 2.0 * frac * n * m->beta + frac * n * m->gamma;
}

static double ring_allreduce_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, ring_allreduce_cost, COLL_FLOWS_RING, bytes);
}

const coll_alg_t coll_ring_allreduce = {
    .name = "ring",
    .coll = COLL_ALLREDUCE,
    .build = ring_allreduce_build,
    .price = ring_allreduce_price,
};
