/*
 * The engine's public calls: creation and destruction (collective), and
 * submissions, which check their arguments as the direct collectives do,
 * file the submission under its name and return; the engine's thread does
 * the rest (engine_cycle.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/refusal.h"
#include "engine/engine.h"
#include "util/log.h"
#include "util/mem_bound.h"
#include "util/time.h"

/* Longest cycle, in milliseconds. */
#define ENGINE_CYCLE_MS_MAX 10000.0

void engine_sub_finish(engine_sub_t *sub, chorus_status_t status)
{
    chorus__request_complete(sub->req, status);
    free(sub);
}

/* ---- creation ------------------------------------------------------------ */

/* This rank's settings from opts and the variables; why says what is wrong. */
static int engine_settings(chorus_engine_t engine, const chorus_engine_opts_t *opts,
                           char *why, size_t why_len)
{
    engine_config_t cfg;
    size_t covered = opts ? opts->struct_size : 0;

    if (chorus__config_read(&engine_config_table, &cfg) != CHORUS_OK) {
        snprintf(why, why_len, "an engine variable has an invalid value (logged above)");
        return -1;
    }
    if (opts != NULL && opts->struct_size < sizeof(size_t)) {
        snprintf(why, why_len, "invalid argument opts->struct_size=%zu (use "
                 "CHORUS_ENGINE_OPTS_INIT)", opts->struct_size);
        return -1;
    }
    engine->bucket_bytes = cfg.bucket_bytes;
    engine->cycle_s = cfg.cycle_ms / 1000.0;
    if (chorus__config_given(&engine_config_table, offsetof(engine_config_t, bucket_bytes)))
        engine->tune_keep |= ENGINE_KEEP_BUCKET;
    if (chorus__config_given(&engine_config_table, offsetof(engine_config_t, cycle_ms)))
        engine->tune_keep |= ENGINE_KEEP_CYCLE;
    if (covered >= offsetof(chorus_engine_opts_t, bucket_bytes) + sizeof(size_t) &&
        opts->bucket_bytes != 0) {
        engine->bucket_bytes = opts->bucket_bytes;
        engine->tune_keep |= ENGINE_KEEP_BUCKET;
    }
    if (covered >= offsetof(chorus_engine_opts_t, cycle_ms) + sizeof(double) &&
        opts->cycle_ms != 0) {
        engine->cycle_s = opts->cycle_ms / 1000.0;
        engine->tune_keep |= ENGINE_KEEP_CYCLE;
    }
    if (!chorus__mem_fits(NULL, engine->bucket_bytes) ||
        !chorus__mem_under_limit(engine->bucket_bytes)) {
        snprintf(why, why_len, "bucket_bytes=%zu does not fit in this process's memory",
                 engine->bucket_bytes);
        return -1;
    }
    if (!(engine->cycle_s > 0 && engine->cycle_s * 1000.0 <= ENGINE_CYCLE_MS_MAX)) {
        snprintf(why, why_len, "cycle_ms=%g: must be in (0, %g]", engine->cycle_s * 1000.0,
                 ENGINE_CYCLE_MS_MAX);
        return -1;
    }
    if (engine_tune_init(engine, &cfg) != CHORUS_OK) {
        snprintf(why, why_len, "the autotuner could not start (logged above)");
        return -1;
    }
    return 0;
}

/*
 * Every rank's word on the engine: whether its arguments were good, its
 * bucket size, which must be the same everywhere (buckets are cut alike),
 * its autotuner's window (0: off), which must be too (samples are
 * collectives of their own), the network streams per peer it opens, of
 * which the autotuner may use as many as the rank that opens fewest, and
 * the settings its user chose: one rank's choice keeps a setting on every
 * rank, so that the search has the same dimensions everywhere.
 */
static chorus_status_t engine_agree(chorus_engine_t engine, int valid, int *streams_p)
{
    enum { WORDS = 5 };
    uint64_t mine[WORDS] = {(uint64_t)valid, engine->bucket_bytes,
                            engine->tune != NULL ? (uint64_t)(engine->tune_window_s * 1e6) : 0,
                            (uint64_t)chorus__ctx_net_streams(engine->comm->ctx, 0),
                            engine->tune_keep},
             *all;
    uint64_t fewest = UINT64_MAX, keep = 0;
    chorus_status_t status;

    all = malloc((size_t)engine->size * sizeof(mine));
    if (all == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = chorus_allgather(mine, all, WORDS, CHORUS_UINT64, engine->neg, NULL);
    for (int r = 0; r < engine->size && status == CHORUS_OK; r++) {
        const uint64_t *theirs = all + WORDS * r;

        if (theirs[0] == 0) {
            chorus_error("rank %d: chorus_engine_create: rank %d refused its arguments",
                         engine->rank, r);
            status = CHORUS_ERR_INVALID_ARG;
        } else if (theirs[1] != all[1]) {
            chorus_error("rank %d: chorus_engine_create: bucket_bytes differs between ranks: "
                         "%llu on rank 0, %llu on rank %d", engine->rank,
                         (unsigned long long)all[1], (unsigned long long)theirs[1], r);
            status = CHORUS_ERR_INVALID_ARG;
        } else if (theirs[2] != all[2]) {
            chorus_error("rank %d: chorus_engine_create: CHORUS_AUTOTUNE and "
                         "CHORUS_AUTOTUNE_WINDOW_MS differ between ranks: windows of %llu us "
                         "on rank 0, %llu on rank %d (0: off)", engine->rank,
                         (unsigned long long)all[2], (unsigned long long)theirs[2], r);
            status = CHORUS_ERR_INVALID_ARG;
        }
        if (theirs[3] < fewest)
            fewest = theirs[3];
        keep |= theirs[4];
    }
    free(all);
    engine->tune_keep = (unsigned)keep;
    *streams_p = fewest >= 1 && fewest <= TUNE_VALUES_MAX ? (int)fewest : 1;
    return status;
}

static void engine_free(chorus_engine_t engine)
{
    engine_tune_free(engine);
    coll_pool_destroy(&engine->pool);
    engine_names_free(&engine->names);
    if (engine->data != NULL)
        (void)chorus_comm_destroy(engine->data);
    if (engine->neg != NULL)
        (void)chorus_comm_destroy(engine->neg);
    free(engine);
}

static int engine_sync_init(chorus_engine_t engine)
{
    pthread_condattr_t attr;
    int rc;

    if (pthread_condattr_init(&attr) != 0)
        return -1;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&engine->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return -1;
    if (pthread_mutex_init(&engine->lock, NULL) != 0) {
        pthread_cond_destroy(&engine->cond);
        return -1;
    }
    return 0;
}

chorus_status_t chorus_engine_create(chorus_comm_t comm, const chorus_engine_opts_t *opts,
                                     chorus_engine_t *engine_p)
{
    chorus_engine_t engine;
    chorus_status_t status;
    char why[160] = "";
    int valid, streams = 1;

    if (comm == NULL) {
        chorus_error("chorus_engine_create: invalid argument comm=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    engine = calloc(1, sizeof(*engine));
    if (engine == NULL)
        return CHORUS_ERR_NO_MEMORY;
    engine->comm = comm;
    engine->rank = chorus_comm_rank(comm);
    engine->size = chorus_comm_size(comm);
    engine->fault = CHORUS_OK;
    engine_names_init(&engine->names);
    coll_pool_init_shared(&engine->pool);   /* fusion buffers peers on the node read in place */
    valid = engine_settings(engine, opts, why, sizeof(why)) == 0;
    if (valid && engine_p == NULL) {
        snprintf(why, sizeof(why), "invalid argument engine_p=NULL");
        valid = 0;
    }
    if (!valid)
        chorus_error("chorus_engine_create: %s", why);
    /* The other ranks learn of a refusal here from the agreement, after the dups. */
    status = chorus_comm_dup(comm, &engine->neg);
    if (status == CHORUS_OK)
        status = chorus_comm_dup(comm, &engine->data);
    if (status == CHORUS_OK)
        status = engine_agree(engine, valid, &streams);
    if (status == CHORUS_OK)
        engine_tune_start(engine, streams);
    if (status == CHORUS_OK && engine_sync_init(engine) != 0)
        status = CHORUS_ERR_SYSTEM;
    if (status != CHORUS_OK) {
        engine_free(engine);
        return status;
    }
    engine->stall_warn_s = comm->ctx->cfg.stall_warn_s;
    engine->timeout_s = comm->ctx->cfg.timeout_s;
    engine->last_stall_check = chorus__now();
    if (pthread_create(&engine->thread, NULL, engine_thread_main, engine) != 0) {
        chorus_error("rank %d: chorus_engine_create: cannot start the engine's thread",
                     engine->rank);
        pthread_cond_destroy(&engine->cond);
        pthread_mutex_destroy(&engine->lock);
        engine_free(engine);
        return CHORUS_ERR_SYSTEM;
    }
    *engine_p = engine;
    return CHORUS_OK;
}

/* ---- destruction ----------------------------------------------------------- */

static void engine_log_counters(const chorus_engine_t engine)
{
    const engine_counters_t *c = &engine->counters;

    chorus_info("rank %d: %llu submissions, %llu buckets (%llu bytes), %llu cycles "
                "(%llu with new names, %llu stall checks), %llu negotiation messages (at most "
                "%llu in a steady cycle), %llu conflicts, %llu buckets compressed and %llu "
                "sent in float32 for a value that is not finite",
                engine->rank, (unsigned long long)c->submissions,
                (unsigned long long)c->buckets, (unsigned long long)c->bucket_bytes,
                (unsigned long long)c->cycles, (unsigned long long)c->name_exchanges,
                (unsigned long long)c->stall_checks, (unsigned long long)c->messages,
                (unsigned long long)c->max_steady_messages, (unsigned long long)c->conflicts,
                (unsigned long long)atomic_load(&c->compress.compressed),
                (unsigned long long)atomic_load(&c->compress.fallbacks));
}

chorus_status_t chorus_engine_destroy(chorus_engine_t engine)
{
    chorus_status_t status;

    if (engine == NULL)
        return CHORUS_OK;
    pthread_mutex_lock(&engine->lock);
    engine->stopping = 1;
    pthread_cond_signal(&engine->cond);
    pthread_mutex_unlock(&engine->lock);
    pthread_join(engine->thread, NULL);
    status = engine->fault;
    engine_log_counters(engine);
    pthread_cond_destroy(&engine->cond);
    pthread_mutex_destroy(&engine->lock);
    engine_free(engine);
    return status;
}

/* ---- submissions ------------------------------------------------------------ */

static const char *const kind_call[ENGINE_KIND_COUNT] = {
    "engine_allreduce", "engine_broadcast", "engine_allgather",
};

static const coll_type_t kind_coll[ENGINE_KIND_COUNT] = {
    COLL_ALLREDUCE, COLL_BROADCAST, COLL_ALLGATHER,
};

/* The checks of a submission; why says what is wrong. */
static chorus_status_t submit_check(chorus_engine_t engine, const char *name, coll_args_t *args,
                                    const chorus_opts_t *opts, chorus_request_t *req_p,
                                    char *why, size_t why_len)
{
    chorus_status_t status;

    if (engine == NULL) {
        snprintf(why, why_len, "invalid argument engine=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (req_p == NULL) {
        snprintf(why, why_len, "invalid argument req_p=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (name == NULL || name[0] == '\0' || strnlen(name, ENGINE_NAME_MAX + 1) > ENGINE_NAME_MAX) {
        snprintf(why, why_len, "invalid argument name=%s: must be 1 to %d bytes",
                 name == NULL ? "NULL" : name[0] == '\0' ? "\"\"" : "(too long)",
                 ENGINE_NAME_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    status = chorus__check_call(engine->comm, args, opts, why, why_len);
    if (status == CHORUS_OK && args->stream != NULL) {
        snprintf(why, why_len, "tensor '%s': the engine's calls take no stream (synchronize "
                 "the stream that writes the tensor before submitting it)", name);
        return CHORUS_ERR_UNSUPPORTED;
    }
    return status;
}

/* File sub under its name (engine lock held); a status other than OK when it cannot go. */
static chorus_status_t submit_locked(chorus_engine_t engine, const char *name, engine_sub_t *sub,
                                     char *why, size_t why_len)
{
    engine_name_t *e;

    if (engine->fault != CHORUS_OK) {
        snprintf(why, why_len, "the engine failed earlier: %s",
                 chorus_status_string(engine->fault));
        return engine->fault;
    }
    if (engine->stopping) {
        snprintf(why, why_len, "the engine is being destroyed");
        return CHORUS_ERR_INVALID_ARG;
    }
    e = engine_names_find(&engine->names, name);
    if (e == NULL && (e = engine_names_add(&engine->names, name)) == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (e->pending != NULL) {
        snprintf(why, why_len, "tensor '%s' is already submitted and not yet in a bucket",
                 name);
        return CHORUS_ERR_INVALID_ARG;
    }
    sub->name = e;
    engine->counters.submissions++;
    if (e->owed_failures > 0) {
        /* Its round failed on the other ranks already (a description that differed). */
        e->owed_failures--;
        chorus_error("rank %d: tensor '%s' fails: its description differed between "
                     "ranks in this round (logged above)", engine->rank, name);
        engine_sub_finish(sub, CHORUS_ERR_INVALID_ARG);
        return CHORUS_OK;
    }
    e->pending = sub;
    sub->announce = e->id < 0 || e->described_by < 0 || !engine_desc_equal(&e->desc, &sub->desc);
    if (sub->announce) {
        engine->nannounce++;
    } else {
        engine->ready_bytes += engine_desc_bytes(&sub->desc, engine->size);
        if (engine->ready_bytes >= engine->bucket_bytes)
            pthread_cond_signal(&engine->cond);
    }
    return CHORUS_OK;
}

static chorus_status_t engine_submit(const char *fn, chorus_engine_t engine, const char *name,
                                     engine_kind_t kind, coll_args_t *args,
                                     const chorus_opts_t *opts, chorus_request_t *req_p)
{
    char why[CHORUS__REFUSAL_WHY_MAX] = "out of memory";
    engine_sub_t *sub = NULL;
    chorus_request_t req = NULL;
    chorus_status_t status;

    args->coll = kind_coll[kind];
    status = submit_check(engine, name, args, opts, req_p, why, sizeof(why));
    if (status == CHORUS_OK && (sub = calloc(1, sizeof(*sub))) == NULL)
        status = CHORUS_ERR_NO_MEMORY;
    if (status == CHORUS_OK) {
        /* Waiters wait as long as the engine may take to fail it: a cycle's calls and more. */
        status = chorus__request_detached(engine->comm, kind_call[kind], args,
                                          3 * engine->timeout_s, &req);
    }
    if (status == CHORUS_OK) {
        sub->req = req;
        sub->desc = (engine_desc_t){.kind = (uint8_t)kind, .dtype = (uint8_t)args->dtype,
                                    .op = kind == ENGINE_ALLREDUCE ? (uint8_t)args->op : 0,
                                    .wire = (uint8_t)chorus__opts_wire(opts),
                                    .root = kind == ENGINE_BROADCAST ? args->root : 0,
                                    .count = args->count};
        sub->sendbuf = args->sendbuf;
        sub->recvbuf = args->recvbuf;
        sub->device = args->dev_bufs != 0;
        sub->submitted_at = chorus__now();
        pthread_mutex_lock(&engine->lock);
        status = submit_locked(engine, name, sub, why, sizeof(why));
        pthread_mutex_unlock(&engine->lock);
        if (status != CHORUS_OK) {
            chorus__request_complete(req, status);
            free(req);
            free(sub);
        }
    } else {
        free(sub);
    }
    if (status != CHORUS_OK) {
        chorus_error("%s: %s", fn, why);
        return status;
    }
    *req_p = req;
    return CHORUS_OK;
}

chorus_status_t chorus_engine_allreduce(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t count,
                                        chorus_dtype_t dtype, chorus_op_t op,
                                        const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = {.sendbuf = sendbuf, .recvbuf = recvbuf, .count = count, .dtype = dtype,
                     .op = op};

    return engine_submit(__func__, engine, name, ENGINE_ALLREDUCE, &a, opts, req_p);
}

chorus_status_t chorus_engine_broadcast(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t count,
                                        chorus_dtype_t dtype, int root,
                                        const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = {.sendbuf = sendbuf, .recvbuf = recvbuf, .count = count, .dtype = dtype,
                     .root = root};

    return engine_submit(__func__, engine, name, ENGINE_BROADCAST, &a, opts, req_p);
}

chorus_status_t chorus_engine_allgather(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t sendcount,
                                        chorus_dtype_t dtype, const chorus_opts_t *opts,
                                        chorus_request_t *req_p)
{
    coll_args_t a = {.sendbuf = sendbuf, .recvbuf = recvbuf, .count = sendcount,
                     .dtype = dtype};

    return engine_submit(__func__, engine, name, ENGINE_ALLGATHER, &a, opts, req_p);
}
