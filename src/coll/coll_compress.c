/*
 * Compressed allreduce and reduce-scatter (CHORUS_COMPRESS_FP16, _BF16) of
 * float32: one task, a composite of
 *
 *   1. this rank's largest |value|;
 *   2. the maximum of it over the ranks (recursive doubling, one float64);
 *   3. the scale every rank derives from it alike (reduce/wire.h): the
 *      largest power of two that keeps the sum of every rank's values in
 *      the wire format's range, or no compression when a value is not
 *      finite;
 *   4. the ring allreduce or reduce-scatter, or the hierarchical one where it
 *      prices lower, with its transfers on the 16-bit wire: every hop widens
 *      what it receives, adds in float32 and narrows only what it sends on.
 *      The hierarchical algorithms' node-local stages on a node team are not
 *      transfers: they add in float32 and copy exactly, so only the bytes
 *      between nodes are compressed;
 *   5. allreduce: every rank's result rounded through the wire once, so that
 *      the rank that finished a chunk in float32 holds the same bits as the
 *      ranks that received it (a reduce-scatter's block lives on one rank).
 *
 * Both algorithms keep each chunk's sum on one rank before it is passed
 * around (the hierarchical one: its shard's owner, then copies over the
 * node), which is what makes 5 give every rank the same bits.
 */
#include <math.h>
#include <string.h>

#include "coll/coll.h"
#include "reduce/wire.h"
#include "util/log.h"

/* Tags of the scale's exchange, above every tag of either algorithm. */
#define COMPRESS_TAG_SCALE (1u << 31)

typedef struct {
    coll_args_t args;
    chorus_dtype_t wire;
    coll_sched_t *net;      /* the algorithm whose transfers carry the wire format */
    coll_compress_counts_t *counts;
    double local;
    double global;
} compress_state_t;

static chorus_status_t compress_local_max(void *arg)
{
    compress_state_t *st = arg;
    size_t n = st->args.coll == COLL_REDUCE_SCATTER ? st->args.count * (size_t)st->args.size
                                                   : st->args.count;

    st->local = chorus__wire_maxabs(st->args.sendbuf, n);
    return CHORUS_OK;
}

static chorus_status_t compress_decide(void *arg)
{
    compress_state_t *st = arg;
    float scale = chorus__wire_scale(st->wire, st->global, st->args.size);

    if (scale == 0) {
        chorus_info("rank %d: a compressed %s of %zu values goes uncompressed: a value is "
                    "not finite", st->args.rank, coll_type_name(st->args.coll),
                    st->args.count);
        st->net->wire = CHORUS_DTYPE_COUNT;
        if (st->counts != NULL)
            atomic_fetch_add(&st->counts->fallbacks, 1);
        return CHORUS_OK;
    }
    st->net->wire = st->wire;
    st->net->wire_scale = scale;
    if (st->counts != NULL)
        atomic_fetch_add(&st->counts->compressed, 1);
    return CHORUS_OK;
}

static chorus_status_t compress_round(void *arg)
{
    compress_state_t *st = arg;

    if (st->args.coll == COLL_ALLREDUCE && st->net->wire != CHORUS_DTYPE_COUNT &&
        st->args.size > 1)
        chorus__wire_round(st->wire, st->args.recvbuf, st->args.count, st->net->wire_scale);
    return CHORUS_OK;
}

/*
 * The algorithm under the wire: the hierarchical one where the ranks span
 * nodes with several on one and it prices lower, as the uncompressed call's
 * selection would find (it sends each byte across a node link once, already
 * reduced over the node), else the ring.
 */
static const coll_alg_t *compress_alg(const coll_args_t *args, const coll_env_t *env)
{
    int ar = args->coll == COLL_ALLREDUCE;
    const coll_alg_t *ring = ar ? &coll_ring_allreduce : &coll_ring_reduce_scatter;
    const coll_alg_t *hier = ar ? &coll_hier_allreduce : &coll_hier_reduce_scatter;
    size_t bytes = coll_args_bytes(args);

    return coll_alg_price(hier, env, bytes) < coll_alg_price(ring, env, bytes) ? hier : ring;
}

chorus_status_t coll_compressed_task(const coll_args_t *args, chorus_dtype_t wire,
                                               const coll_env_t *env, tl_port_t *port,
                                               uint64_t tag_base, coll_scratch_pool_t *pool,
                                               coll_compress_counts_t *counts,
                                               chorus__task_t **task_p)
{
    chorus__task_t *task = NULL, *net = NULL, *scale = NULL;
    compress_state_t *st;
    coll_args_t max_args;
    chorus_status_t status;

    if (args->dtype != CHORUS_FLOAT32 || (wire != CHORUS_FLOAT16 && wire != CHORUS_BFLOAT16) ||
        (args->coll != COLL_ALLREDUCE && args->coll != COLL_REDUCE_SCATTER))
        return CHORUS_ERR_INVALID_ARG;
    status = coll_alg_task(compress_alg(args, env), args, env, port, tag_base, pool, &net);
    if (status != CHORUS_OK)
        return status;
    /* The state lives in the algorithm's scratch: it goes when the composite does. */
    st = coll_sched_alloc((coll_sched_t *)net, sizeof(*st));
    if (st == NULL) {
        chorus__task_finalize(net);
        return CHORUS_ERR_NO_MEMORY;
    }
    memset(st, 0, sizeof(*st));
    st->args = *args;
    st->wire = wire;
    st->net = (coll_sched_t *)net;
    st->counts = counts;
    max_args = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = &st->local,
                             .recvbuf = &st->global, .count = 1, .dtype = CHORUS_FLOAT64,
                             .op = CHORUS_MAX, .rank = args->rank, .size = args->size,
                             .chunk_bytes = args->chunk_bytes, .mem = args->mem};
    status = coll_alg_task(&coll_rd_allreduce, &max_args, env, port,
                           tag_base | COMPRESS_TAG_SCALE, pool, &scale);
    if (status == CHORUS_OK)
        status = chorus__composite_create(&task);
    if (status != CHORUS_OK) {
        chorus__task_finalize(scale);
        chorus__task_finalize(net);
        return status;
    }
    /* add_task finalizes the sub-task it cannot take; the composite owns those it took. */
    status = chorus__composite_add_fn(task, compress_local_max, st);
    if (status != CHORUS_OK)
        chorus__task_finalize(scale);
    else
        status = chorus__composite_add_task(task, scale);
    if (status == CHORUS_OK)
        status = chorus__composite_add_fn(task, compress_decide, st);
    if (status != CHORUS_OK)
        chorus__task_finalize(net);
    else
        status = chorus__composite_add_task(task, net);
    if (status == CHORUS_OK)
        status = chorus__composite_add_fn(task, compress_round, st);
    if (status != CHORUS_OK) {
        chorus__task_finalize(task);
        return status;
    }
    *task_p = task;
    return CHORUS_OK;
}
