/*
 * The engine's thread: one negotiation cycle after another (engine.h says
 * what a cycle agrees on), each started by the cycle time or by a full
 * bucket's worth of submissions here, until every rank has asked to stop
 * or the engine fails.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "util/log.h"
#include "util/time.h"

/* The header of a cycle's vector; the minimum over ranks of each byte is what counts. */
enum {
    HDR_NO_NEW = 0,     /* 0 somewhere: some rank announces names */
    HDR_NO_STALL,       /* 0 somewhere: some rank wants a stall check */
    HDR_STOPPING,       /* 1 everywhere: every rank destroys the engine */
    HDR_IDLE,           /* 1 everywhere: nothing waits anywhere */
    HDR_BYTES
};

/* Idle cycles stretch up to this many cycle times. */
#define ENGINE_IDLE_STRETCH 8

/* Stall bytes: what this rank holds of each id. */
enum { STALL_NONE = 0, STALL_YOUNG, STALL_OLD };

typedef struct {
    uint8_t *vec;           /* header + bitmap */
    size_t nids;            /* ids agreed at the start of the cycle */
    uint8_t *stall;         /* [nids] when this rank wants a stall check */
    void *names;            /* this rank's announcements */
    size_t names_len;
} cycle_t;

void engine_fail_pending(chorus_engine_t engine, chorus_status_t status, const char *why)
{
    engine_names_t *names = &engine->names;

    for (size_t b = 0; b < names->nbuckets; b++)
        for (engine_name_t *e = names->buckets[b]; e != NULL; e = e->hash_next) {
            engine_sub_t *sub = e->pending;

            if (sub == NULL)
                continue;
            chorus_error("rank %d: tensor '%s' fails: %s", engine->rank, e->name, why);
            e->pending = NULL;
            engine_sub_finish(sub, status);
        }
    engine->nannounce = 0;
    engine->ready_bytes = 0;
}

/* A submission here older than the timeout: the engine fails (engine lock held). */
static int timed_out(chorus_engine_t engine, double now)
{
    engine_names_t *names = &engine->names;

    for (size_t b = 0; b < names->nbuckets; b++)
        for (engine_name_t *e = names->buckets[b]; e != NULL; e = e->hash_next)
            if (e->pending != NULL && now - e->pending->submitted_at > engine->timeout_s) {
                chorus_error("rank %d: tensor '%s' waited %.0f s for the other ranks "
                             "(CHORUS_TIMEOUT)", engine->rank, e->name,
                             now - e->pending->submitted_at);
                return 1;
            }
    return 0;
}

/* This rank's part of the cycle (engine lock held). */
static chorus_status_t cycle_snapshot(chorus_engine_t engine, cycle_t *c, double now)
{
    size_t nids = engine->names.nids;
    int old = 0, waiting = engine->nannounce > 0;

    c->nids = nids;
    c->vec = calloc(HDR_BYTES + nids, 1);
    if (c->vec == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (size_t id = 0; id < nids; id++) {
        const engine_sub_t *sub = engine->names.by_id[id]->pending;

        if (sub == NULL)
            continue;
        waiting = 1;
        c->vec[HDR_BYTES + id] = !sub->announce;
        old |= engine->stall_warn_s > 0 && now - sub->submitted_at >= engine->stall_warn_s;
    }
    c->vec[HDR_NO_NEW] = engine->nannounce == 0;
    c->vec[HDR_STOPPING] = (uint8_t)engine->stopping;
    c->vec[HDR_IDLE] = !waiting && engine->in_flight == NULL;
    c->vec[HDR_NO_STALL] = 1;
    if (old && now - engine->last_stall_check >= engine->stall_warn_s) {
        c->vec[HDR_NO_STALL] = 0;
        c->stall = malloc(nids > 0 ? nids : 1);
        if (c->stall == NULL)
            return CHORUS_ERR_NO_MEMORY;
        for (size_t id = 0; id < nids; id++) {
            const engine_sub_t *sub = engine->names.by_id[id]->pending;

            c->stall[id] = sub == NULL || sub->announce ? STALL_NONE
                           : now - sub->submitted_at >= engine->stall_warn_s ? STALL_OLD
                                                                            : STALL_YOUNG;
        }
    }
    if (engine->nannounce > 0)
        return engine_names_pack(engine, &c->names, &c->names_len);
    return CHORUS_OK;
}

static void cycle_free(cycle_t *c)
{
    free(c->vec);
    free(c->stall);
    free(c->names);
    memset(c, 0, sizeof(*c));
}

/* Append the ranks r whose byte of id in all (size rows of stride) is want, to buf. */
static void ranks_with(const uint8_t *all, size_t stride, int size, size_t id, uint8_t want,
                       int negate, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int r = 0; r < size && used + 12 < len; r++)
        if ((all[(size_t)r * stride + id] == want) != negate)
            used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? " " : "", r);
}

/*
 * Stall check: every rank's byte per id. A name submitted long ago on some
 * rank and not at all on another is reported, alike from every rank.
 */
static chorus_status_t cycle_stall_check(chorus_engine_t engine, cycle_t *c, double now)
{
    size_t nids = c->nids, stride = nids > 0 ? nids : 1;
    uint8_t *mine = c->stall, none[1] = {STALL_NONE}, *all;
    chorus_status_t status;

    all = malloc(stride * (size_t)engine->size);
    if (all == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (mine == NULL) {
        /* Wanted elsewhere only: take part with what this rank holds. */
        mine = calloc(stride, 1);
        pthread_mutex_lock(&engine->lock);
        for (size_t id = 0; mine != NULL && id < nids; id++) {
            const engine_sub_t *sub = engine->names.by_id[id]->pending;

            mine[id] = sub == NULL || sub->announce ? STALL_NONE : STALL_YOUNG;
        }
        pthread_mutex_unlock(&engine->lock);
        if (mine == NULL) {
            free(all);
            return CHORUS_ERR_NO_MEMORY;
        }
    }
    status = chorus_allgather(nids > 0 ? mine : none, all, stride, CHORUS_UINT8, engine->neg,
                              NULL);
    for (size_t id = 0; status == CHORUS_OK && id < nids; id++) {
        int old = 0, missing = 0;
        char have[256], lack[256];

        for (int r = 0; r < engine->size; r++) {
            old |= all[(size_t)r * stride + id] == STALL_OLD;
            missing |= all[(size_t)r * stride + id] == STALL_NONE;
        }
        if (!old || !missing)
            continue;
        ranks_with(all, stride, engine->size, id, STALL_NONE, 1, have, sizeof(have));
        ranks_with(all, stride, engine->size, id, STALL_NONE, 0, lack, sizeof(lack));
        chorus_warn("rank %d: tensor '%s' submitted on ranks %s waits for ranks %s "
                    "(for more than %.0f s)", engine->rank, engine->names.by_id[id]->name,
                    have, lack, engine->stall_warn_s);
    }
    if (mine != c->stall)
        free(mine);
    free(all);
    engine->last_stall_check = now;
    engine->counters.stall_checks++;
    return status;
}

/* Exchange of new names: lengths, then every rank's records padded to the longest. */
static chorus_status_t cycle_names(chorus_engine_t engine, cycle_t *c)
{
    uint64_t len = c->names_len, *lens, longest = 0;
    uint8_t *mine = NULL, *all = NULL;
    chorus_status_t status;

    lens = malloc((size_t)engine->size * sizeof(*lens));
    if (lens == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = chorus_allgather(&len, lens, 1, CHORUS_UINT64, engine->neg, NULL);
    for (int r = 0; status == CHORUS_OK && r < engine->size; r++)
        longest = lens[r] > longest ? lens[r] : longest;
    if (status == CHORUS_OK && longest > (uint64_t)engine->size * (ENGINE_NAME_MAX + 18) *
                                             (uint64_t)ENGINE_NAMES_MAX)
        status = CHORUS_ERR_PROTOCOL;
    if (status == CHORUS_OK) {
        mine = calloc(longest, 1);
        all = malloc(longest * (size_t)engine->size);
        if (mine == NULL || all == NULL)
            status = CHORUS_ERR_NO_MEMORY;
    }
    if (status == CHORUS_OK) {
        if (c->names_len > 0)
            memcpy(mine, c->names, c->names_len);
        status = chorus_allgather(mine, all, longest, CHORUS_UINT8, engine->neg, NULL);
    }
    if (status == CHORUS_OK) {
        pthread_mutex_lock(&engine->lock);
        status = engine_names_merge(engine, all, longest, lens);
        pthread_mutex_unlock(&engine->lock);
    }
    engine->counters.name_exchanges++;
    free(lens);
    free(mine);
    free(all);
    return status;
}

/* Take the submissions every rank holds ready, in id order (engine lock held). */
static chorus_status_t cycle_take_ready(chorus_engine_t engine, const cycle_t *c,
                                        const uint8_t *and, engine_sub_t ***ready_p,
                                        size_t *n_p)
{
    size_t n = 0;
    engine_sub_t **ready;

    *ready_p = NULL;
    *n_p = 0;
    for (size_t id = 0; id < c->nids; id++) {
        const engine_sub_t *sub = engine->names.by_id[id]->pending;

        if (!and[id])
            continue;
        /* Held here when the cycle began, and nothing but a bucket takes it away. */
        if (sub == NULL || sub->announce) {
            chorus_error("rank %d: tensor '%s' is ready everywhere but not held here",
                         engine->rank, engine->names.by_id[id]->name);
            return CHORUS_ERR_INTERNAL;
        }
        n++;
    }
    if (n == 0)
        return CHORUS_OK;
    ready = malloc(n * sizeof(*ready));
    if (ready == NULL)
        return CHORUS_ERR_NO_MEMORY;
    n = 0;
    for (size_t id = 0; id < c->nids; id++) {
        engine_name_t *e = engine->names.by_id[id];
        size_t bytes;

        if (!and[id])
            continue;
        ready[n++] = e->pending;
        bytes = engine_desc_bytes(&e->pending->desc, engine->size);
        engine->ready_bytes -= bytes;
        e->pending = NULL;
        e->round_done = 1;      /* every rank takes it in this cycle */
        engine_tune_taken(engine, e, bytes);
    }
    *ready_p = ready;
    *n_p = n;
    return CHORUS_OK;
}

/* One cycle; *all_stop_p = 1 when every rank has asked to stop, *idle_p when all are idle. */
static chorus_status_t cycle_run(chorus_engine_t engine, int *all_stop_p, int *idle_p)
{
    chorus__port_t *port = &engine->neg->port;
    uint64_t before = atomic_load(&port->sends) + atomic_load(&port->recvs), msgs;
    cycle_t c = {0};
    engine_sub_t **ready = NULL;
    size_t nready = 0;
    double now = chorus__now();
    chorus_status_t status;

    pthread_mutex_lock(&engine->lock);
    status = timed_out(engine, now) ? CHORUS_ERR_TIMEOUT : cycle_snapshot(engine, &c, now);
    pthread_mutex_unlock(&engine->lock);
    if (status == CHORUS_OK)
        status = chorus_allreduce(c.vec, c.vec, HDR_BYTES + c.nids,
                                  CHORUS_UINT8, CHORUS_MIN, engine->neg, NULL);
    if (status == CHORUS_OK && !c.vec[HDR_NO_STALL])
        status = cycle_stall_check(engine, &c, now);
    if (status == CHORUS_OK && !c.vec[HDR_NO_NEW])
        status = cycle_names(engine, &c);
    if (status == CHORUS_OK) {
        pthread_mutex_lock(&engine->lock);
        status = cycle_take_ready(engine, &c, c.vec + HDR_BYTES, &ready, &nready);
        pthread_mutex_unlock(&engine->lock);
    }
    msgs = atomic_load(&port->sends) + atomic_load(&port->recvs) - before;
    engine->counters.cycles++;
    engine->counters.messages += msgs;
    if (status == CHORUS_OK && c.vec[HDR_NO_STALL] && c.vec[HDR_NO_NEW] &&
        msgs > engine->counters.max_steady_messages)
        engine->counters.max_steady_messages = msgs;
    if (status == CHORUS_OK && nready > 0)
        status = engine_buckets_post(engine, ready, nready);
    *all_stop_p = status == CHORUS_OK && c.vec[HDR_STOPPING];
    *idle_p = status == CHORUS_OK && c.vec[HDR_IDLE];
    free(ready);
    cycle_free(&c);
    return status;
}

/* Sleep until the next cycle is due, a bucket is full here, or destroy is called. */
static void cycle_sleep(chorus_engine_t engine, double until)
{
    struct timespec ts;
    double left;

    pthread_mutex_lock(&engine->lock);
    while (!engine->stopping && engine->ready_bytes < engine->bucket_bytes &&
           (left = until - chorus__now()) > 0) {
        ts = chorus__timespec_in(CLOCK_MONOTONIC, left);
        if (pthread_cond_timedwait(&engine->cond, &engine->lock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&engine->lock);
}

void *engine_thread_main(void *arg)
{
    chorus_engine_t engine = arg;
    chorus_status_t status = CHORUS_OK;
    int idle_cycles = 0;

    for (;;) {
        double started = chorus__now(), stretch;
        int all_stop = 0, idle = 0;

        status = engine_buckets_reap(engine, 0);
        if (status == CHORUS_OK)
            status = cycle_run(engine, &all_stop, &idle);
        if (status == CHORUS_OK && !all_stop)
            status = engine_tune_cycle(engine);
        if (status != CHORUS_OK || all_stop)
            break;
        idle_cycles = idle ? idle_cycles + 1 : 0;
        stretch = idle_cycles < 3 ? 1 : idle_cycles < 6 ? 2 : ENGINE_IDLE_STRETCH;
        cycle_sleep(engine, started + engine->cycle_s * stretch);
    }
    pthread_mutex_lock(&engine->lock);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: stopped by a fault: %s", engine->rank,
                     chorus_status_string(status));
        engine->fault = status;
        engine_fail_pending(engine, status, "the engine failed");
    } else {
        engine_fail_pending(engine, CHORUS_ERR_ABORTED,
                            "the engine was destroyed before every rank submitted it");
    }
    pthread_mutex_unlock(&engine->lock);
    status = engine_buckets_reap(engine, 1);
    pthread_mutex_lock(&engine->lock);
    if (engine->fault == CHORUS_OK)
        engine->fault = status;
    pthread_mutex_unlock(&engine->lock);
    return NULL;
}
