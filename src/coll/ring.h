/*
 * Ring arithmetic, kept pure so it can be tested without a schedule.
 *
 * Ranks sit on a ring: each sends to its right neighbour (rank + 1) and
 * receives from its left (rank - 1). A vector of count elements is cut into
 * size blocks whose lengths differ by at most one element: the first
 * count % size blocks hold one element more.
 *
 * Reduce-scatter phase (steps 0 .. size-2): at step s a rank sends its
 * partial block rank - s - 1 and receives the left neighbour's partial of
 * block rank - s - 2, which it reduces with its own. After size - 1 steps
 * the rank holds the complete reduction of block rank (the block it owns).
 *
 * Allgather phase (steps 0 .. size-2): a rank starts holding block rank;
 * at step s it sends block rank - s and receives block rank - s - 1.
 * Every block index is taken modulo size.
 */
#ifndef CHORUS_COLL_RING_H
#define CHORUS_COLL_RING_H

#include <stddef.h>
#include <stdint.h>

/* x modulo size in [0, size), also for negative x. */
static inline int coll_ring_mod(long x, int size)
{
    long m = x % size;
    return (int)(m < 0 ? m + size : m);
}

static inline int coll_ring_left(int rank, int size)
{
    return coll_ring_mod((long)rank - 1, size);
}

static inline int coll_ring_right(int rank, int size)
{
    return coll_ring_mod((long)rank + 1, size);
}

static inline int coll_ring_rs_send_block(int rank, int size, int step)
{
    return coll_ring_mod((long)rank - step - 1, size);
}

static inline int coll_ring_rs_recv_block(int rank, int size, int step)
{
    return coll_ring_mod((long)rank - step - 2, size);
}

static inline int coll_ring_ag_send_block(int rank, int size, int step)
{
    return coll_ring_mod((long)rank - step, size);
}

static inline int coll_ring_ag_recv_block(int rank, int size, int step)
{
    return coll_ring_mod((long)rank - step - 1, size);
}

/* Elements in block `block` of a count-element vector cut into size blocks. */
static inline size_t coll_ring_block_count(size_t count, int size, int block)
{
    return count / (size_t)size + ((size_t)block < count % (size_t)size ? 1 : 0);
}

/* Index of the first element of block `block`. */
static inline size_t coll_ring_block_offset(size_t count, int size, int block)
{
    size_t rem = count % (size_t)size;
    size_t b = (size_t)block;
    return b * (count / (size_t)size) + (b < rem ? b : rem);
}

/*
 * Pipeline chunking. A block of up to max_block elements is sent in chunks
 * of the returned number of elements: chunk_bytes rounded down to whole
 * elements (at least one element; chunk_bytes 0 means no chunking). The
 * chunk is enlarged when needed so that nsteps * chunks-per-block tags fit
 * in 32 bits. Every rank computes the same value from the same call.
 */
static inline size_t coll_chunk_elems(size_t chunk_bytes, size_t esize, size_t max_block,
                                      long nsteps)
{
    size_t elems, nchunks;
    size_t max_chunks;

    if (max_block == 0)
        return 1;
    if (nsteps < 1)
        nsteps = 1;
    elems = (chunk_bytes == 0 || esize == 0) ? max_block : chunk_bytes / esize;
    if (elems == 0)
        elems = 1;
    if (elems > max_block)
        elems = max_block;
    max_chunks = (size_t)UINT32_MAX / (size_t)nsteps;
    nchunks = (max_block + elems - 1) / elems;
    if (nchunks > max_chunks)
        elems = (max_block + max_chunks - 1) / max_chunks;
    return elems;
}

/* Number of chunks of chunk elements in a block of n elements (0 for n == 0). */
static inline size_t coll_chunk_count(size_t n, size_t chunk)
{
    return (n + chunk - 1) / chunk;
}

#endif
