/*
 * A small cache of scratch buffers per communicator. Schedules of large
 * collectives need scratch as large as the message; allocating it per call
 * makes the kernel fault in every page again (and, for buffers freed by the
 * progress thread's malloc arena, hand them back with madvise), which costs
 * more than the copy it serves. The pool keeps the few largest recent
 * buffers for the next call.
 */
#ifndef CHORUS_COLL_SCRATCH_POOL_H
#define CHORUS_COLL_SCRATCH_POOL_H

#include <pthread.h>
#include <stddef.h>

#define COLL_POOL_SLOTS 8

typedef struct {
    void *mem;
    size_t size;
} coll_pool_buf_t;

typedef struct coll_scratch_pool {
    pthread_mutex_t lock;
    coll_pool_buf_t slots[COLL_POOL_SLOTS];
    int shared;                 /* buffers are chorus_mem_alloc memory (util/shared_mem.h) */
} coll_scratch_pool_t;

void coll_pool_init(coll_scratch_pool_t *pool);
/* A pool whose buffers local peers can map, so that node-local calls use them in place. */
void coll_pool_init_shared(coll_scratch_pool_t *pool);
/* Frees every cached buffer. */
void coll_pool_destroy(coll_scratch_pool_t *pool);
/*
 * A buffer of at least bytes: the smallest cached one that fits and is not
 * wastefully large, else a new allocation. pool may be NULL (plain malloc).
 */
coll_pool_buf_t coll_pool_get(coll_scratch_pool_t *pool, size_t bytes);
/* Give a buffer back: cached if it is among the largest, freed otherwise. */
void coll_pool_put(coll_scratch_pool_t *pool, coll_pool_buf_t buf);

#endif
