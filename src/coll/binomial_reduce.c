/*
 * Reduce up a binomial tree toward root. A rank combines its own vector
 * with each child's partial result, children in increasing virtual rank,
 * and passes the sum to its parent, so the reduction order depends only on
 * (size, root) and is the same from call to call.
 *
 * Large vectors are cut into chunks that move up the tree independently:
 * while a rank reduces chunk k, chunk k + 1 is on the wire. Partial results
 * and received operands live in a ring of BINOMIAL_REDUCE_SLOTS chunk slots,
 * which bounds scratch memory: chunk k reuses the slot of chunk
 * k - BINOMIAL_REDUCE_SLOTS once that chunk has been reduced and sent.
 *
 * recvbuf is written on root only (it may be NULL elsewhere); the root
 * accumulates straight into it, in place when sendbuf == recvbuf, and
 * applies AVG's division there.
 */
#include "coll/coll.h"

#include "coll/tree.h"
#include "util/log.h"

enum { BINOMIAL_REDUCE_PHASE = 1 };

#define BINOMIAL_REDUCE_SLOTS 8
/* A rank has at most one child per bit of an int. */
#define BINOMIAL_REDUCE_MAX_CHILDREN 31

typedef struct {
    const coll_args_t *args;
    coll_sched_t *s;
    size_t esize;
    size_t chunk;           /* elements per chunk */
    size_t nslots;
    int is_root;
    int parent;
    int nchildren;
    char *tmp;              /* [child][slot] received operands */
    char *acc;              /* [slot] partial results (non-root ranks with children) */
    /* Steps the next user of a slot waits for. */
    long slot_reduce[BINOMIAL_REDUCE_SLOTS][BINOMIAL_REDUCE_MAX_CHILDREN];
    long slot_send[BINOMIAL_REDUCE_SLOTS];
} brd_build_t;

/* Receive and combine every child's part of chunk c into acc; returns the last step. */
static long brd_children(brd_build_t *b, size_t c, size_t off, size_t bytes, char *acc)
{
    size_t slot = c % b->nslots;
    size_t slot_bytes = b->chunk * b->esize;
    const char *cur = (const char *)b->args->sendbuf + off;
    long deps[COLL_STEP_MAX_DEPS], last = -1;

    for (int i = 0; i < b->nchildren; i++) {
        int child = coll_binomial_child(b->args->rank, b->args->root, b->args->size, i);
        char *tmp = b->tmp + ((size_t)i * b->nslots + slot) * slot_bytes;
        long rcv, red;

        rcv = coll_sched_recv(b->s, child, coll_tree_tag(BINOMIAL_REDUCE_PHASE, 0, c), tmp, bytes,
                              deps, coll_tree_deps(deps, b->slot_reduce[slot][i], -1, -1, -1));
        if (rcv < 0)
            return -1;
        /* Before the first write to an acc slot, its previous chunk must have left. */
        red = coll_sched_reduce(b->s, acc, cur, tmp, bytes, deps,
                                coll_tree_deps(deps, rcv, last,
                                               i == 0 ? b->slot_send[slot] : -1, -1));
        if (red < 0)
            return -1;
        b->slot_reduce[slot][i] = red;
        last = red;
        cur = acc;
    }
    return last;
}

/* Root: finish chunk c in recvbuf. */
static chorus_status_t brd_root_chunk(brd_build_t *b, size_t c, size_t off, size_t bytes)
{
    char *out = (char *)b->args->recvbuf + off;
    long deps[COLL_STEP_MAX_DEPS], last = -1;

    if (b->nchildren > 0) {
        last = brd_children(b, c, off, bytes, out);
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
    } else if (b->args->recvbuf != b->args->sendbuf) {
        /* A lone root: its own vector is the result. */
        last = coll_sched_copy(b->s, out, (const char *)b->args->sendbuf + off, bytes, NULL, 0);
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (b->args->op == CHORUS_AVG &&
        coll_sched_finalize_op(b->s, out, bytes, deps, coll_tree_deps(deps, last, -1, -1, -1)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

/* Non-root: combine chunk c with the children's and pass it up. */
static chorus_status_t brd_inner_chunk(brd_build_t *b, size_t c, size_t off, size_t bytes)
{
    const char *src = (const char *)b->args->sendbuf + off;
    long deps[COLL_STEP_MAX_DEPS], last = -1, snd;

    if (b->nchildren > 0) {
        char *acc = b->acc + (c % b->nslots) * b->chunk * b->esize;

        last = brd_children(b, c, off, bytes, acc);
        if (last < 0)
            return CHORUS_ERR_NO_MEMORY;
        src = acc;
    }
    snd = coll_sched_send(b->s, b->parent, coll_tree_tag(BINOMIAL_REDUCE_PHASE, 0, c), src,
                          bytes, deps, coll_tree_deps(deps, last, -1, -1, -1));
    if (snd < 0)
        return CHORUS_ERR_NO_MEMORY;
    b->slot_send[c % b->nslots] = snd;
    return CHORUS_OK;
}

static chorus_status_t brd_alloc(brd_build_t *b)
{
    size_t slot_bytes = b->chunk * b->esize;

    if (b->nchildren > 0) {
        b->tmp = coll_sched_alloc(b->s, (size_t)b->nchildren * b->nslots * slot_bytes);
        if (b->tmp == NULL)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (b->nchildren > 0 && !b->is_root) {
        b->acc = coll_sched_alloc(b->s, b->nslots * slot_bytes);
        if (b->acc == NULL)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

static chorus_status_t binomial_reduce_build(const coll_args_t *args,
                                             const coll_env_t *env, coll_sched_t *sched)
{
    brd_build_t b = {.args = args, .s = sched};
    size_t nchunks;
    chorus_status_t st;

    if (coll_tree_check(args, "binomial reduce", 1, 1, COLL_TREE_SEND | COLL_TREE_RECV_ROOT))
        return CHORUS_ERR_INVALID_ARG;
    if (args->count == 0)
        return CHORUS_OK;
    b.esize = chorus_dtype_size(args->dtype);
    b.is_root = args->rank == args->root;
    b.parent = coll_binomial_parent(args->rank, args->root, args->size);
    b.nchildren = coll_binomial_nchildren(args->rank, args->root, args->size);
    b.chunk = coll_tree_chunk_elems(args->count, b.esize, args->chunk_bytes);
    if (b.chunk > args->count)
        b.chunk = args->count;
    nchunks = (args->count + b.chunk - 1) / b.chunk;
    b.nslots = nchunks < BINOMIAL_REDUCE_SLOTS ? nchunks : BINOMIAL_REDUCE_SLOTS;
    for (int s = 0; s < BINOMIAL_REDUCE_SLOTS; s++) {
        b.slot_send[s] = -1;
        for (int i = 0; i < BINOMIAL_REDUCE_MAX_CHILDREN; i++)
            b.slot_reduce[s][i] = -1;
    }
    if ((st = brd_alloc(&b)) != CHORUS_OK)
        return st;
    for (size_t c = 0; c < nchunks; c++) {
        size_t first = c * b.chunk;
        size_t n = (args->count - first < b.chunk) ? args->count - first : b.chunk;

        if (b.is_root)
            st = brd_root_chunk(&b, c, first * b.esize, n * b.esize);
        else
            st = brd_inner_chunk(&b, c, first * b.esize, n * b.esize);
        if (st != CHORUS_OK)
            return st;
    }
    return CHORUS_OK;
}

static double binomial_reduce_cost(const tune_model_t *m, double n, int p)
{
    return tune_log2_ceil(p) * (m->alpha + n * m->beta + n * m->gamma);
}

static double binomial_reduce_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, binomial_reduce_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_binomial_reduce = {
    .name = "binomial",
    .coll = COLL_REDUCE,
    .build = binomial_reduce_build,
    .price = binomial_reduce_price,
};
