/* Scratch buffer cache: see scratch_pool.h. */
#include "coll/scratch_pool.h"

#include <string.h>

#include "util/log.h"
#include "util/pages.h"
#include "util/shared_mem.h"

/* A cached buffer serves a request at most this many times its size. */
#define POOL_MAX_WASTE 4
/* The pool holds at most this much: beyond it, returned buffers are freed. */
#define POOL_MAX_BYTES ((size_t)256 << 20)

static size_t pool_bytes(const coll_scratch_pool_t *pool)
{
    size_t total = 0;

    for (int i = 0; i < COLL_POOL_SLOTS; i++)
        total += pool->slots[i].mem ? pool->slots[i].size : 0;
    return total;
}

/* A new buffer: shareable memory in a shared pool (mapped pages where it cannot be had). */
static void *pool_alloc(const coll_scratch_pool_t *pool, size_t bytes)
{
    void *mem;

    if (pool != NULL && pool->shared && chorus__shared_alloc(bytes, &mem) == CHORUS_OK)
        return mem;
    return chorus__pages_alloc(bytes);
}

static void pool_free(const coll_scratch_pool_t *pool, void *mem, size_t bytes)
{
    chorus_status_t status;

    if (mem == NULL)
        return;
    if (pool != NULL && pool->shared &&
        (status = chorus__shared_free(mem)) != CHORUS_ERR_INVALID_ARG) {
        if (status != CHORUS_OK)
            chorus_error("a fusion buffer was returned while a call still used it: kept");
        return;
    }
    chorus__pages_free(mem, bytes);
}

void coll_pool_init(coll_scratch_pool_t *pool)
{
    memset(pool, 0, sizeof(*pool));
    pthread_mutex_init(&pool->lock, NULL);
}

void coll_pool_init_shared(coll_scratch_pool_t *pool)
{
    coll_pool_init(pool);
    pool->shared = 1;
}

void coll_pool_destroy(coll_scratch_pool_t *pool)
{
    for (int i = 0; i < COLL_POOL_SLOTS; i++)
        pool_free(pool, pool->slots[i].mem, pool->slots[i].size);
    pthread_mutex_destroy(&pool->lock);
    memset(pool, 0, sizeof(*pool));
}

coll_pool_buf_t coll_pool_get(coll_scratch_pool_t *pool, size_t bytes)
{
    coll_pool_buf_t buf = {NULL, bytes > 0 ? bytes : 1};
    int best = -1;

    if (pool != NULL) {
        pthread_mutex_lock(&pool->lock);
        for (int i = 0; i < COLL_POOL_SLOTS; i++) {
            size_t size = pool->slots[i].size;
            if (pool->slots[i].mem == NULL || size < buf.size ||
                size / POOL_MAX_WASTE > buf.size)
                continue;
            if (best < 0 || size < pool->slots[best].size)
                best = i;
        }
        if (best >= 0) {
            buf = pool->slots[best];
            pool->slots[best].mem = NULL;
            pool->slots[best].size = 0;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    if (buf.mem == NULL)
        buf.mem = pool_alloc(pool, buf.size);
    return buf;
}

void coll_pool_put(coll_scratch_pool_t *pool, coll_pool_buf_t buf)
{
    int victim = -1;

    if (buf.mem == NULL)
        return;
    if (pool != NULL) {
        pthread_mutex_lock(&pool->lock);
        for (int i = 0; i < COLL_POOL_SLOTS; i++) {
            if (pool->slots[i].mem == NULL) {
                victim = i;
                break;
            }
            if (pool->slots[i].size < buf.size &&
                (victim < 0 || pool->slots[i].size < pool->slots[victim].size))
                victim = i;
        }
        if (victim >= 0 &&
            pool_bytes(pool) - pool->slots[victim].size + buf.size > POOL_MAX_BYTES)
            victim = -1;
        if (victim >= 0) {
            coll_pool_buf_t old = pool->slots[victim];
            pool->slots[victim] = buf;
            buf = old;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    pool_free(pool, buf.mem, buf.size);
}
