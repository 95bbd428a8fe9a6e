/*
 * Buckets: the submissions ready on every rank, cut in id order into
 * groups of one kind, dtype, op and root, of at most bucket_bytes each (a
 * larger tensor goes alone), and run as one collective per bucket on the
 * engine's bucket communicator. A bucket of one tensor runs on the tensor's
 * own buffers; a larger one is packed into a buffer of the engine's (from
 * its pool, so that pages are not faulted in again every step), and
 * the last step of its task unpacks it and completes the submissions'
 * requests on the progress thread, as soon as the data is there.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "reduce/device.h"
#include "util/log.h"

struct engine_bucket {
    chorus_engine_t engine;
    int device;                 /* a tensor in it is on a CUDA device */
    engine_desc_t key;          /* kind, dtype, op, root of every tensor in it */
    engine_sub_t *subs;         /* in id order; NULL once unpacked */
    engine_sub_t *tail;
    size_t nsubs;
    size_t elems;               /* elements: of the vector, or of one rank's block (allgather) */
    size_t bytes;               /* what it counts against bucket_bytes */
    coll_pool_buf_t fused;      /* packed tensors; no memory when one runs on its buffers */
    coll_pool_buf_t gathered;   /* allgather: every rank's packed block */
    coll_args_t args;
    chorus_request_t req;
    engine_bucket_t *next;
};

/*
 * A tensor of at least 1/ENGINE_ALONE_FRACTION of bucket_bytes goes alone on
 * its own buffers: its call's fixed cost is small beside its bytes, and
 * packing it would copy them twice.
 */
#define ENGINE_ALONE_FRACTION 4

static const char *const bucket_call[ENGINE_KIND_COUNT] = {
    "engine_allreduce", "engine_broadcast", "engine_allgather",
};

static const coll_type_t bucket_coll[ENGINE_KIND_COUNT] = {
    COLL_ALLREDUCE, COLL_BROADCAST, COLL_ALLGATHER,
};

/*
 * Copy len bytes between a tensor and the bucket's buffer: through the
 * device for a device tensor (a synchronous copy in the thread that packs
 * or unpacks), else memcpy.
 */
static chorus_status_t sub_copy(const engine_sub_t *sub, void *dst, const void *src, size_t len)
{
    if (sub->device)
        return chorus__device_copy(dst, src, len);
    memcpy(dst, src, len);
    return CHORUS_OK;
}

static size_t sub_bytes(const engine_sub_t *sub)
{
    return (size_t)sub->desc.count * chorus_dtype_size((chorus_dtype_t)sub->desc.dtype);
}

static void bucket_free(engine_bucket_t *b)
{
    if (b->fused.mem != NULL)
        coll_pool_put(&b->engine->pool, b->fused);
    if (b->gathered.mem != NULL)
        coll_pool_put(&b->engine->pool, b->gathered);
    free(b);
}

/*
 * The progress thread, once the bucket's collective is over: results out,
 * requests done. A tensor whose device copy failed fails alone (the log has
 * the CUDA error); the others complete.
 */
static chorus_status_t bucket_unpack(void *arg)
{
    engine_bucket_t *b = arg;
    size_t esize = chorus_dtype_size((chorus_dtype_t)b->key.dtype);
    size_t block = b->elems * esize, off = 0;
    engine_sub_t *sub, *next;

    for (sub = b->subs; sub != NULL; sub = next) {
        size_t len = sub_bytes(sub);
        chorus_status_t status = CHORUS_OK;

        next = sub->next;
        if (b->fused.mem != NULL && len > 0 && b->key.kind != ENGINE_ALLGATHER) {
            status = sub_copy(sub, sub->recvbuf, (char *)b->fused.mem + off, len);
        } else if (b->fused.mem != NULL && len > 0) {
            for (int r = 0; r < b->args.size && status == CHORUS_OK; r++)
                status = sub_copy(sub, (char *)sub->recvbuf + (size_t)r * len,
                                  (char *)b->gathered.mem + (size_t)r * block + off, len);
        }
        off += len;
        engine_sub_finish(sub, status);
    }
    b->subs = NULL;
    return CHORUS_OK;
}

/* The bucket's task: the selection's algorithm, then the unpacking (under the post lock). */
static chorus_status_t bucket_make(chorus_comm_t comm, void *arg, uint64_t tag_base,
                                   chorus__task_t **task_p)
{
    engine_bucket_t *b = arg;
    const coll_alg_t *alg = coll_select_call(comm->select, b->args.coll, COLL_MEM_HOST,
                                             coll_args_bytes(&b->args), comm->rank);
    chorus__task_t *coll = NULL, *task = NULL;
    chorus_status_t status;

    if (b->key.wire != CHORUS_DTYPE_COUNT) {
        status = coll_compressed_task(&b->args, (chorus_dtype_t)b->key.wire,
                                                &comm->env, &comm->port.port, tag_base,
                                                &comm->ctx->scratch_pool,
                                                &b->engine->counters.compress, &coll);
    } else if (alg == NULL) {
        chorus_error("rank %d: no algorithm runs a %s bucket of %zu bytes", comm->rank,
                     coll_type_name(b->args.coll), coll_args_bytes(&b->args));
        return CHORUS_ERR_UNSUPPORTED;
    } else {
        status = coll_alg_task(alg, &b->args, &comm->env, &comm->port.port, tag_base,
                               &comm->ctx->scratch_pool, &coll);
    }
    if (status == CHORUS_OK)
        status = chorus__composite_create(&task);
    if (status != CHORUS_OK) {
        chorus__task_finalize(coll);
        return status;
    }
    if ((status = chorus__composite_add_task(task, coll)) != CHORUS_OK ||
        (status = chorus__composite_add_fn(task, bucket_unpack, b)) != CHORUS_OK) {
        chorus__task_finalize(task);
        return status;
    }
    *task_p = task;
    return CHORUS_OK;
}

/* Pack the tensors of a bucket of several into its buffers, and describe its call. */
static chorus_status_t bucket_pack(engine_bucket_t *b, int rank, int size)
{
    size_t esize = chorus_dtype_size((chorus_dtype_t)b->key.dtype), off = 0;
    int sends = b->key.kind != ENGINE_BROADCAST || b->key.root == rank;

    b->fused = coll_pool_get(&b->engine->pool, b->elems * esize + 1);
    if (b->fused.mem == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (b->key.kind == ENGINE_ALLGATHER) {
        b->gathered = coll_pool_get(&b->engine->pool, b->elems * esize * (size_t)size + 1);
        if (b->gathered.mem == NULL)
            return CHORUS_ERR_NO_MEMORY;
    }
    for (engine_sub_t *sub = b->subs; sends && sub != NULL; sub = sub->next) {
        size_t len = sub_bytes(sub);
        chorus_status_t status = len > 0 ? sub_copy(sub, (char *)b->fused.mem + off,
                                                     sub->sendbuf, len)
                                         : CHORUS_OK;

        if (status != CHORUS_OK)
            return status;
        off += len;
    }
    b->args.sendbuf = b->fused.mem;
    b->args.recvbuf = b->key.kind == ENGINE_ALLGATHER ? b->gathered.mem : b->fused.mem;
    return CHORUS_OK;
}

static void bucket_fail(engine_bucket_t *b, chorus_status_t status)
{
    engine_sub_t *sub, *next;

    for (sub = b->subs; sub != NULL; sub = next) {
        next = sub->next;
        engine_sub_finish(sub, status);
    }
    b->subs = NULL;
}

/* Post b on the bucket communicator; on failure its submissions fail and b is freed. */
static chorus_status_t bucket_launch(chorus_engine_t engine, engine_bucket_t *b)
{
    chorus_comm_t data = engine->data;
    chorus_status_t status = CHORUS_OK;

    b->args = (coll_args_t){.coll = bucket_coll[b->key.kind],
                            .count = b->elems,
                            .dtype = (chorus_dtype_t)b->key.dtype,
                            .op = (chorus_op_t)b->key.op,
                            .root = b->key.root,
                            .rank = data->rank,
                            .size = data->size,
                            .chunk_bytes = data->ctx->cfg.chunk_bytes,
                            .mem = COLL_MEM_HOST};
    /* A lone tensor runs on its own buffers, unless they are on a device. */
    if (b->nsubs == 1 && !b->device) {
        b->args.sendbuf = b->subs->sendbuf;
        b->args.recvbuf = b->subs->recvbuf;
    } else {
        status = bucket_pack(b, data->rank, data->size);
    }
    if (status == CHORUS_OK)
        status = chorus__call_made(data, bucket_call[b->key.kind], &b->args, bucket_make, b,
                                   &b->req);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: cannot post a bucket of %zu tensors: %s", engine->rank,
                     b->nsubs, chorus_status_string(status));
        bucket_fail(b, status);
        bucket_free(b);
        return status;
    }
    engine->counters.buckets++;
    engine->counters.bucket_bytes += b->bytes;
    b->next = engine->in_flight;
    engine->in_flight = b;
    return CHORUS_OK;
}

static int same_group(const engine_desc_t *a, const engine_desc_t *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->wire == b->wire;
}

static engine_bucket_t *bucket_new(chorus_engine_t engine, const engine_desc_t *desc)
{
    engine_bucket_t *b = calloc(1, sizeof(*b));

    if (b != NULL) {
        b->engine = engine;
        b->key = *desc;
        b->key.count = 0;
    }
    return b;
}

static void bucket_add(engine_bucket_t *b, engine_sub_t *sub, size_t bytes)
{
    sub->next = NULL;
    if (b->tail != NULL)
        b->tail->next = sub;
    else
        b->subs = sub;
    b->tail = sub;
    b->nsubs++;
    b->device |= sub->device;
    b->elems += (size_t)sub->desc.count;
    b->bytes += bytes;
}

chorus_status_t engine_buckets_post(chorus_engine_t engine, engine_sub_t **ready, size_t n)
{
    engine_bucket_t **open = calloc(n, sizeof(*open));   /* one per group, in opening order */
    size_t nopen = 0, i = 0;
    chorus_status_t status = open != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;

    for (; status == CHORUS_OK && i < n; i++) {
        engine_sub_t *sub = ready[i];
        size_t bytes = engine_desc_bytes(&sub->desc, engine->size), g = 0;
        engine_bucket_t *b;

        if (bytes >= engine->bucket_bytes / ENGINE_ALONE_FRACTION) {
            if ((b = bucket_new(engine, &sub->desc)) == NULL)
                break;
            bucket_add(b, sub, bytes);
            status = bucket_launch(engine, b);
            continue;
        }
        while (g < nopen && !same_group(&open[g]->key, &sub->desc))
            g++;
        if (g < nopen && open[g]->bytes + bytes > engine->bucket_bytes) {
            /* Full: it goes, and a new one of its group opens in its place. */
            b = open[g];
            if ((open[g] = bucket_new(engine, &sub->desc)) == NULL) {
                open[g] = b;
                break;
            }
            if ((status = bucket_launch(engine, b)) != CHORUS_OK)
                break;  /* sub is in no bucket yet: it fails below with the rest */
        } else if (g == nopen) {
            if ((open[g] = bucket_new(engine, &sub->desc)) == NULL)
                break;
            nopen++;
        }
        bucket_add(open[g], sub, bytes);
    }
    if (status == CHORUS_OK && i < n)
        status = CHORUS_ERR_NO_MEMORY;
    /* Whatever stays open goes now, in the order the groups opened. */
    for (size_t g = 0; g < nopen; g++) {
        if (status == CHORUS_OK) {
            status = bucket_launch(engine, open[g]);
        } else {
            bucket_fail(open[g], status);
            bucket_free(open[g]);
        }
    }
    for (; i < n; i++)
        engine_sub_finish(ready[i], status);
    free(open);
    return status;
}

chorus_status_t engine_buckets_reap(chorus_engine_t engine, int wait)
{
    engine_bucket_t **link = &engine->in_flight, *b;
    chorus_status_t first = CHORUS_OK;

    while ((b = *link) != NULL) {
        chorus_status_t status;
        int done = 1;

        if (!wait)
            (void)chorus_request_test(b->req, &done);
        if (!done) {
            link = &b->next;
            continue;
        }
        status = chorus_request_free(b->req);
        if (status != CHORUS_OK) {
            bucket_fail(b, status);
            if (first == CHORUS_OK)
                first = status;
        }
        *link = b->next;
        bucket_free(b);
    }
    return first;
}
