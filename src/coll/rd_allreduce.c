/*
 * Allreduce by recursive doubling: log2(p2) exchanges of the whole vector
 * with partner newrank ^ mask, the latency-optimal choice for small
 * messages. Other rank counts fold first (see tree.h): odd ranks among the
 * first 2 * (p - p2) send their vector to the even neighbour, which reduces
 * it and takes part in the doubling, then sends the result back.
 *
 * Both partners of an exchange combine the same two operands in the same
 * order (the lower rank's first), so every rank ends with the same bits even
 * where floating-point reduction order matters.
 *
 * The vector is cut into chunks that run through the whole exchange
 * independently, so the executor overlaps one chunk's transfer with
 * another's reduction. A chunk's steps come together in the schedule, which
 * keeps every step a peer waits for within the executor's window.
 */
#include "coll/coll.h"

#include "coll/tree.h"
#include "util/log.h"

enum {
    RD_PHASE_FOLD_IN = 1,   /* odd folded rank -> even neighbour */
    RD_PHASE_DOUBLING = 2,
    RD_PHASE_FOLD_OUT = 3   /* result back to the folded rank */
};

typedef struct {
    const coll_args_t *args;
    coll_sched_t *s;
    size_t esize;
    int newrank;            /* -1: this rank folds into its neighbour */
    int fold_peer;          /* -1: none */
    int p2;
    char *tmp;              /* received operands, laid out like recvbuf */
} rd_build_t;

/* The folded rank's part for one chunk: hand over the data, get the result. */
static chorus_status_t rd_chunk_folded(rd_build_t *b, size_t off, size_t bytes, size_t chunk)
{
    const char *in = (const char *)b->args->sendbuf + off;
    char *out = (char *)b->args->recvbuf + off;
    long deps[COLL_STEP_MAX_DEPS];
    long snd, rcv;

    snd = coll_sched_send(b->s, b->fold_peer, coll_tree_tag(RD_PHASE_FOLD_IN, 0, chunk), in,
                          bytes, NULL, 0);
    if (snd < 0)
        return CHORUS_ERR_NO_MEMORY;
    /* In place, the result lands where the send reads from. */
    rcv = coll_sched_recv(b->s, b->fold_peer, coll_tree_tag(RD_PHASE_FOLD_OUT, 0, chunk), out,
                          bytes, deps, coll_tree_deps(deps, snd, -1, -1, -1));
    return rcv < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

/* One doubling exchange of a chunk; *cur_p and *last_p move to the result. */
static chorus_status_t rd_exchange(rd_build_t *b, int mask, int step, size_t off, size_t bytes,
                                   size_t chunk, const char **cur_p, long *last_p)
{
    int peer = coll_rd_partner(b->newrank, mask, b->args->size);
    uint32_t tag = coll_tree_tag(RD_PHASE_DOUBLING, (unsigned)step, chunk);
    char *out = (char *)b->args->recvbuf + off;
    char *tmp = b->tmp + off;
    long deps[COLL_STEP_MAX_DEPS];
    int nd = coll_tree_deps(deps, *last_p, -1, -1, -1);
    long snd, rcv, red;

    snd = coll_sched_send(b->s, peer, tag, *cur_p, bytes, deps, nd);
    /* tmp is free again once the previous reduction has read it. */
    rcv = coll_sched_recv(b->s, peer, tag, tmp, bytes, deps, nd);
    if (snd < 0 || rcv < 0)
        return CHORUS_ERR_NO_MEMORY;
    /* The result may overwrite what the send still reads (in place). */
    nd = coll_tree_deps(deps, snd, rcv, -1, -1);
    if (b->newrank < (b->newrank ^ mask))
        red = coll_sched_reduce(b->s, out, *cur_p, tmp, bytes, deps, nd);
    else
        red = coll_sched_reduce(b->s, out, tmp, *cur_p, bytes, deps, nd);
    if (red < 0)
        return CHORUS_ERR_NO_MEMORY;
    *cur_p = out;
    *last_p = red;
    return CHORUS_OK;
}

/* A surviving rank's part for one chunk of bytes at byte offset off. */
static chorus_status_t rd_chunk(rd_build_t *b, size_t off, size_t bytes, size_t chunk)
{
    const char *cur = (const char *)b->args->sendbuf + off;
    char *out = (char *)b->args->recvbuf + off;
    long deps[COLL_STEP_MAX_DEPS];
    long last = -1, rcv;
    chorus_status_t st;
    int step = 0;

    if (b->fold_peer >= 0) {
        rcv = coll_sched_recv(b->s, b->fold_peer, coll_tree_tag(RD_PHASE_FOLD_IN, 0, chunk),
                              b->tmp + off, bytes, NULL, 0);
        if (rcv < 0)
            return CHORUS_ERR_NO_MEMORY;
        /* The even rank is the lower one: its operand goes first. */
        last = coll_sched_reduce(b->s, out, cur, b->tmp + off, bytes, deps,
                                 coll_tree_deps(deps, rcv, -1, -1, -1));
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
        cur = out;
    }
    for (int mask = 1; mask < b->p2; mask <<= 1, step++) {
        st = rd_exchange(b, mask, step, off, bytes, chunk, &cur, &last);
        if (st != CHORUS_OK)
            return st;
    }
    if (cur != out) {
        /* Only a lone rank gets here: nothing was reduced into recvbuf. */
        last = coll_sched_copy(b->s, out, cur, bytes, deps, coll_tree_deps(deps, last, -1, -1, -1));
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (b->args->op == CHORUS_AVG) {
        last = coll_sched_finalize_op(b->s, out, bytes, deps,
                                      coll_tree_deps(deps, last, -1, -1, -1));
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (b->fold_peer >= 0 &&
        coll_sched_send(b->s, b->fold_peer, coll_tree_tag(RD_PHASE_FOLD_OUT, 0, chunk), out,
                        bytes, deps, coll_tree_deps(deps, last, -1, -1, -1)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

static chorus_status_t rd_allreduce_build(const coll_args_t *args,
                                          const coll_env_t *env, coll_sched_t *sched)
{
    rd_build_t b = {.args = args, .s = sched};
    size_t ce, nchunks;
    chorus_status_t st;

    if (coll_tree_check(args, "recursive doubling allreduce", 0, 1,
                        COLL_TREE_SEND | COLL_TREE_RECV))
        return CHORUS_ERR_INVALID_ARG;
    if (args->count == 0)
        return CHORUS_OK;
    b.esize = chorus_dtype_size(args->dtype);
    b.newrank = coll_rd_newrank(args->rank, args->size);
    b.fold_peer = coll_rd_fold_peer(args->rank, args->size);
    b.p2 = coll_rd_pow2(args->size);
    if (b.newrank >= 0 && args->size > 1) {
        b.tmp = coll_sched_alloc(sched, args->count * b.esize);
        if (b.tmp == NULL)
            return CHORUS_ERR_NO_MEMORY;
    }
    ce = coll_tree_chunk_elems(args->count, b.esize, args->chunk_bytes);
    nchunks = (args->count + ce - 1) / ce;
    for (size_t c = 0; c < nchunks; c++) {
        size_t first = c * ce;
        size_t n = (args->count - first < ce) ? args->count - first : ce;

        if (b.newrank < 0)
            st = rd_chunk_folded(&b, first * b.esize, n * b.esize, c);
        else
            st = rd_chunk(&b, first * b.esize, n * b.esize, c);
        if (st != CHORUS_OK)
            return st;
    }
    return CHORUS_OK;
}

/* log2(p2) exchanges of the whole vector, each followed by a reduction. */
static double rd_allreduce_cost(const tune_model_t *m, double n, int p)
{
    int steps = tune_log2_floor(p);

    return steps * (m->alpha + n * m->beta + n * m->gamma) + tune_fold_cost(m, n, p);
}

static double rd_allreduce_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, rd_allreduce_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_rd_allreduce = {
    .name = "rd",
    .coll = COLL_ALLREDUCE,
    .build = rd_allreduce_build,
    .price = rd_allreduce_price,
};
