/*
 * Allreduce as a reduce-scatter by recursive halving followed by an
 * allgather by recursive doubling (Rabenseifner's algorithm): each rank
 * sends and receives about 2 * count elements in 2 * log2(p2) steps, so it
 * suits vectors too large for recursive doubling on rank counts where a
 * ring's p steps cost too much latency. Other rank counts fold first, as in
 * recursive doubling (see tree.h).
 *
 * Every block is reduced by exactly one survivor, which applies AVG's
 * division once and hands the finished block to everyone, so all ranks end
 * with the same bits.
 *
 * Each exchange is one message: the halving already shrinks them, and the
 * exchanges of one step must finish before the next step's data exists.
 */
#include "coll/coll.h"

#include "coll/tree.h"
#include "util/log.h"

enum {
    RAB_PHASE_FOLD_IN = 1,
    RAB_PHASE_HALVING = 2,
    RAB_PHASE_DOUBLING = 3,
    RAB_PHASE_FOLD_OUT = 4
};

typedef struct {
    const coll_args_t *args;
    coll_sched_t *s;
    size_t esize;
    int newrank;
    int fold_peer;
    int p2;
    char *tmp;              /* received operands, laid out like recvbuf */
    const char *cur;        /* where this rank's partial results live */
    /* Steps every later step waits for (-1: none); together they cover all earlier ones. */
    long last[2];
} rab_build_t;

/* Byte offset and length of blocks [lo, hi). */
static void rab_range(const rab_build_t *b, int lo, int hi, size_t *off_p, size_t *bytes_p)
{
    size_t first = coll_tree_block_offset(b->args->count, b->p2, lo);

    *off_p = first * b->esize;
    *bytes_p = (coll_tree_block_offset(b->args->count, b->p2, hi) - first) * b->esize;
}

static void rab_advance(rab_build_t *b, long x, long y)
{
    if (x < 0 && y < 0)
        return;
    b->last[0] = x;
    b->last[1] = y;
}

/* Halving step with mask: hand over the partner's half, reduce ours. */
static chorus_status_t rab_halving(rab_build_t *b, int mask, int step)
{
    int partner = b->newrank ^ mask;
    int peer = coll_rd_oldrank(partner, b->args->size);
    uint32_t tag = coll_tree_tag(RAB_PHASE_HALVING, (unsigned)step, 0);
    char *out = b->args->recvbuf;
    long deps[COLL_STEP_MAX_DEPS], snd = -1, rcv, red = -1;
    int nd = coll_tree_deps(deps, b->last[0], b->last[1], -1, -1);
    size_t koff, kbytes, soff, sbytes;
    int lo, hi;

    coll_halving_kept(b->newrank, mask, &lo, &hi);
    rab_range(b, lo, hi, &koff, &kbytes);
    coll_halving_kept(partner, mask, &lo, &hi);
    rab_range(b, lo, hi, &soff, &sbytes);
    /* Both sides compute the same ranges, so an empty half is skipped on both. */
    if (sbytes > 0 && (snd = coll_sched_send(b->s, peer, tag, b->cur + soff, sbytes, deps, nd)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (kbytes > 0) {
        rcv = coll_sched_recv(b->s, peer, tag, b->tmp + koff, kbytes, deps, nd);
        if (rcv < 0)
            return CHORUS_ERR_NO_MEMORY;
        /* Waiting for the send keeps the whole step ordered before the next. */
        nd = coll_tree_deps(deps, snd, rcv, -1, -1);
        if (b->newrank < partner)
            red = coll_sched_reduce(b->s, out + koff, b->cur + koff, b->tmp + koff, kbytes, deps,
                                    nd);
        else
            red = coll_sched_reduce(b->s, out + koff, b->tmp + koff, b->cur + koff, kbytes, deps,
                                    nd);
        if (red < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    /* From here on, whatever this rank still holds is in recvbuf. */
    b->cur = out;
    rab_advance(b, snd, red);
    return CHORUS_OK;
}

/* Doubling step with mask: swap the blocks each side holds. */
static chorus_status_t rab_doubling(rab_build_t *b, int mask, int step)
{
    int partner = b->newrank ^ mask;
    int peer = coll_rd_oldrank(partner, b->args->size);
    uint32_t tag = coll_tree_tag(RAB_PHASE_DOUBLING, (unsigned)step, 0);
    char *out = b->args->recvbuf;
    long deps[COLL_STEP_MAX_DEPS], snd = -1, rcv = -1;
    int nd = coll_tree_deps(deps, b->last[0], b->last[1], -1, -1);
    size_t off, bytes;
    int lo, hi;

    coll_halving_kept(b->newrank, mask, &lo, &hi);
    rab_range(b, lo, hi, &off, &bytes);
    if (bytes > 0 && (snd = coll_sched_send(b->s, peer, tag, out + off, bytes, deps, nd)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    coll_halving_kept(partner, mask, &lo, &hi);
    rab_range(b, lo, hi, &off, &bytes);
    if (bytes > 0 && (rcv = coll_sched_recv(b->s, peer, tag, out + off, bytes, deps, nd)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    rab_advance(b, snd, rcv);
    return CHORUS_OK;
}

/* The even rank of a folded pair takes the odd one's vector into its own. */
static chorus_status_t rab_fold_in(rab_build_t *b)
{
    size_t bytes = b->args->count * b->esize;
    long deps[COLL_STEP_MAX_DEPS];
    long rcv, red;

    rcv = coll_sched_recv(b->s, b->fold_peer, coll_tree_tag(RAB_PHASE_FOLD_IN, 0, 0), b->tmp,
                          bytes, NULL, 0);
    if (rcv < 0)
        return CHORUS_ERR_NO_MEMORY;
    red = coll_sched_reduce(b->s, b->args->recvbuf, b->cur, b->tmp, bytes, deps,
                            coll_tree_deps(deps, rcv, -1, -1, -1));
    if (red < 0)
        return CHORUS_ERR_NO_MEMORY;
    b->cur = b->args->recvbuf;
    rab_advance(b, red, -1);
    return CHORUS_OK;
}

/* A survivor's schedule: fold in, halve, finish its block, double, fold out. */
static chorus_status_t rab_survivor(rab_build_t *b)
{
    size_t bytes = b->args->count * b->esize;
    long deps[COLL_STEP_MAX_DEPS];
    chorus_status_t st;
    size_t off, len;
    int step = 0;

    if (b->fold_peer >= 0 && (st = rab_fold_in(b)) != CHORUS_OK)
        return st;
    for (int mask = b->p2 / 2; mask >= 1; mask >>= 1, step++) {
        if ((st = rab_halving(b, mask, step)) != CHORUS_OK)
            return st;
    }
    rab_range(b, b->newrank, b->newrank + 1, &off, &len);
    if (b->args->op == CHORUS_AVG && len > 0) {
        long fin = coll_sched_finalize_op(b->s, (char *)b->args->recvbuf + off, len, deps,
                                          coll_tree_deps(deps, b->last[0], b->last[1], -1, -1));
        if (fin < 0)
            return CHORUS_ERR_NO_MEMORY;
        rab_advance(b, fin, -1);
    }
    step = 0;
    for (int mask = 1; mask < b->p2; mask <<= 1, step++) {
        if ((st = rab_doubling(b, mask, step)) != CHORUS_OK)
            return st;
    }
    if (b->fold_peer >= 0 &&
        coll_sched_send(b->s, b->fold_peer, coll_tree_tag(RAB_PHASE_FOLD_OUT, 0, 0),
                        b->args->recvbuf, bytes, deps,
                        coll_tree_deps(deps, b->last[0], b->last[1], -1, -1)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

/* A folded rank hands its vector to its neighbour and gets the result back. */
static chorus_status_t rab_folded(rab_build_t *b)
{
    size_t bytes = b->args->count * b->esize;
    long deps[COLL_STEP_MAX_DEPS];
    long snd;

    snd = coll_sched_send(b->s, b->fold_peer, coll_tree_tag(RAB_PHASE_FOLD_IN, 0, 0),
                          b->args->sendbuf, bytes, NULL, 0);
    if (snd < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (coll_sched_recv(b->s, b->fold_peer, coll_tree_tag(RAB_PHASE_FOLD_OUT, 0, 0),
                        b->args->recvbuf, bytes, deps, coll_tree_deps(deps, snd, -1, -1, -1)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

/* One rank alone: its vector is the result. */
static chorus_status_t rab_single(rab_build_t *b)
{
    size_t bytes = b->args->count * b->esize;
    long deps[COLL_STEP_MAX_DEPS];
    long last;

    last = coll_sched_copy(b->s, b->args->recvbuf, b->args->sendbuf, bytes, NULL, 0);
    if (last < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (b->args->op == CHORUS_AVG &&
        coll_sched_finalize_op(b->s, b->args->recvbuf, bytes, deps,
                               coll_tree_deps(deps, last, -1, -1, -1)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

static chorus_status_t rabenseifner_allreduce_build(const coll_args_t *args,
                                                    const coll_env_t *env, coll_sched_t *sched)
{
    rab_build_t b = {.args = args, .s = sched, .last = {-1, -1}};

    if (coll_tree_check(args, "rabenseifner allreduce", 0, 1, COLL_TREE_SEND | COLL_TREE_RECV))
        return CHORUS_ERR_INVALID_ARG;
    if (args->count == 0)
        return CHORUS_OK;
    b.esize = chorus_dtype_size(args->dtype);
    b.newrank = coll_rd_newrank(args->rank, args->size);
    b.fold_peer = coll_rd_fold_peer(args->rank, args->size);
    b.p2 = coll_rd_pow2(args->size);
    b.cur = args->sendbuf;
    if (args->size == 1)
        return rab_single(&b);
    if (b.newrank < 0)
        return rab_folded(&b);
    b.tmp = coll_sched_alloc(sched, args->count * b.esize);
    if (b.tmp == NULL)
        return CHORUS_ERR_NO_MEMORY;
    return rab_survivor(&b);
}

/* Recursive halving reduce-scatter, recursive doubling allgather. */
static double rabenseifner_allreduce_cost(const tune_model_t *m, double n, int p)
{
    int p2 = 1 << tune_log2_floor(p);
    double frac = (double)(p2 - 1) / p2;

    return 2.0 * tune_log2_floor(p) * m->alpha + 2.0 * frac * n * m->beta + frac * n * m->gamma
           + tune_fold_cost(m, n, p);
}

static double rabenseifner_allreduce_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, rabenseifner_allreduce_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_rabenseifner_allreduce = {
    .name = "rabenseifner",
    .coll = COLL_ALLREDUCE,
    .build = rabenseifner_allreduce_build,
    .price = rabenseifner_allreduce_price,
};
