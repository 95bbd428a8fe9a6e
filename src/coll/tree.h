/*
 * Tree and recursive-doubling arithmetic, kept pure so it can be tested
 * exhaustively without a schedule.
 *
 * Binomial trees are built on virtual ranks relative to the root:
 * vrank = (rank - root) mod size, so the root is vrank 0. The parent of
 * vrank v > 0 is v with its lowest set bit cleared; the children of v are
 * v + m for every power of two m below v's lowest set bit (every m < size for
 * the root) with v + m < size. Child i (i = 0, 1, ...) uses m = 2^i and
 * heads a subtree of 2^i ranks (the last child's may be cut short by size),
 * so children come roughly smallest subtree first.
 *
 * Recursive doubling and halving need a power of two of ranks. With size
 * ranks and p2 the largest power of two <= size, the first 2 * (size - p2)
 * ranks pair up (2k, 2k + 1): the odd one folds its data into the even one
 * and sits out, and the even one survives as new rank k. Ranks from
 * 2 * (size - p2) on survive as new rank rank - (size - p2). The p2
 * survivors exchange with partner newrank ^ mask.
 *
 * Recursive halving cuts a vector of count elements into p2 blocks whose
 * lengths differ by at most one. Before the halving step with mask m a
 * survivor holds blocks [v & ~(2m - 1), +2m); it keeps the half selected by
 * bit m of v and hands the other half to its partner. After the step with
 * mask 1 survivor v holds block v. The allgather by doubling walks back up:
 * before its step with mask m a survivor holds blocks [v & ~(m - 1), +m).
 */
#ifndef CHORUS_COLL_TREE_H
#define CHORUS_COLL_TREE_H

#include <stddef.h>
#include <stdint.h>
#include "coll/coll.h"
#include "util/log.h"

/* ---- binomial tree ------------------------------------------------------ */

static inline int coll_tree_vrank(int rank, int root, int size)
{
    return (rank - root + size) % size;
}

static inline int coll_tree_rank(int vrank, int root, int size)
{
    return (vrank + root) % size;
}

/*
 * The lowest set bit of v, which bounds v's subtree; for the root (v == 0)
 * size itself, as the root's subtree is everything.
 */
static inline long coll_tree_lowbit(int v, int size)
{
    return v != 0 ? (long)(v & -v) : (long)size;
}

/* Parent rank of rank in the binomial tree rooted at root, or -1 for the root. */
static inline int coll_binomial_parent(int rank, int root, int size)
{
    int v = coll_tree_vrank(rank, root, size);

    if (v == 0)
        return -1;
    return coll_tree_rank(v & (v - 1), root, size);
}

static inline int coll_binomial_nchildren(int rank, int root, int size)
{
    int v = coll_tree_vrank(rank, root, size);
    long low = coll_tree_lowbit(v, size);
    int n = 0;

    for (long m = 1; m < low && v + m < size; m <<= 1)
        n++;
    return n;
}

/* Child i (0 <= i < nchildren) of rank: the one at vrank + 2^i. */
static inline int coll_binomial_child(int rank, int root, int size, int i)
{
    int v = coll_tree_vrank(rank, root, size);

    return coll_tree_rank(v + (1 << i), root, size);
}

/* Ranks in the subtree rooted at rank, rank included. */
static inline int coll_binomial_subtree_size(int rank, int root, int size)
{
    int v = coll_tree_vrank(rank, root, size);
    long low = coll_tree_lowbit(v, size);

    return (size - v < low) ? size - v : (int)low;
}

/* ---- recursive doubling with folding ----------------------------------- */

/* The largest power of two <= size (size >= 1). */
static inline int coll_rd_pow2(int size)
{
    int p2 = 1;

    while (p2 <= size / 2)
        p2 <<= 1;
    return p2;
}

/* Rank's new rank among the p2 survivors, or -1 when it folds into rank - 1. */
static inline int coll_rd_newrank(int rank, int size)
{
    int rem = size - coll_rd_pow2(size);

    if (rank < 2 * rem)
        return (rank % 2 == 0) ? rank / 2 : -1;
    return rank - rem;
}

/* The rank of survivor newrank. */
static inline int coll_rd_oldrank(int newrank, int size)
{
    int rem = size - coll_rd_pow2(size);

    return (newrank < rem) ? 2 * newrank : newrank + rem;
}

/* The rank's fold partner (rank ^ 1 among the first 2 * (size - p2)), or -1. */
static inline int coll_rd_fold_peer(int rank, int size)
{
    int rem = size - coll_rd_pow2(size);

    return (rank < 2 * rem) ? (rank ^ 1) : -1;
}

/* Rank of the survivor's partner at the step with mask (a power of two < p2). */
static inline int coll_rd_partner(int newrank, int mask, int size)
{
    return coll_rd_oldrank(newrank ^ mask, size);
}

/* ---- blocks for halving ------------------------------------------------- */

/* First element of block b of count elements cut into nblocks (0 <= b <= nblocks). */
static inline size_t coll_tree_block_offset(size_t count, int nblocks, int b)
{
    size_t rem = count % (size_t)nblocks;
    size_t ub = (size_t)b;

    return ub * (count / (size_t)nblocks) + (ub < rem ? ub : rem);
}

/* Blocks [*lo_p, *hi_p) that survivor v holds before the halving step with mask. */
static inline void coll_halving_held(int v, int mask, int *lo_p, int *hi_p)
{
    *lo_p = v & ~(2 * mask - 1);
    *hi_p = *lo_p + 2 * mask;
}

/* Blocks [*lo_p, *hi_p) that survivor v keeps at the halving step with mask. */
static inline void coll_halving_kept(int v, int mask, int *lo_p, int *hi_p)
{
    *lo_p = v & ~(mask - 1);
    *hi_p = *lo_p + mask;
}

/* ---- chunks, tags and dependency lists ---------------------------------- */

/*
 * Algorithm tags: phase in bits 28..31, step in bits 22..27, chunk in bits
 * 0..21. Each (sender, receiver, tag) is used once per call, so matching
 * never depends on message order.
 */
#define COLL_TREE_TAG_MAX_CHUNKS ((size_t)1 << 22)

static inline uint32_t coll_tree_tag(unsigned phase, unsigned step, size_t chunk)
{
    return ((uint32_t)phase << 28) | ((uint32_t)(step & 0x3f) << 22) |
           (uint32_t)(chunk & (COLL_TREE_TAG_MAX_CHUNKS - 1));
}

/*
 * Elements per pipeline chunk for count elements: chunk_bytes in whole
 * elements, at least one (chunk_bytes 0: one chunk), enlarged so that the
 * chunk index fits its tag field. At least 1 also when count is 0.
 */
static inline size_t coll_tree_chunk_elems(size_t count, size_t esize, size_t chunk_bytes)
{
    size_t elems = (chunk_bytes == 0 || esize == 0) ? count : chunk_bytes / esize;

    if (elems == 0)
        elems = 1;
    if (count / elems >= COLL_TREE_TAG_MAX_CHUNKS)
        elems = count / (COLL_TREE_TAG_MAX_CHUNKS - 1) + 1;
    return elems;
}

/*
 * The first argument of a call that a tree builder cannot take, by name,
 * or NULL when all are usable. rooted: root must name a rank; reduces: op
 * must be valid. Buffers are the builders' to check, as each reads and
 * writes different ones.
 */
/* Buffers a tree builder reads or writes when count > 0. */
enum {
    COLL_TREE_SEND = 1,             /* sendbuf on every rank */
    COLL_TREE_RECV = 2,             /* recvbuf on every rank */
    COLL_TREE_SEND_ROOT = 4,        /* sendbuf on the root only */
    COLL_TREE_RECV_ROOT = 8         /* recvbuf on the root only */
};

/* The first argument out of range, or NULL. */
static inline const char *coll_tree_bad_arg(const coll_args_t *args, int rooted, int reduces,
                                            unsigned bufs)
{
    int is_root = args->rank == args->root;

    if (args->size < 1)
        return "size";
    if (args->rank < 0 || args->rank >= args->size)
        return "rank";
    if (rooted && (args->root < 0 || args->root >= args->size))
        return "root";
    if (chorus_dtype_size(args->dtype) == 0)
        return "dtype";
    if (reduces && (unsigned)args->op >= CHORUS_OP_COUNT)
        return "op";
    if (args->count == 0)
        return NULL;
    if (args->sendbuf == NULL &&
        ((bufs & COLL_TREE_SEND) || (is_root && (bufs & COLL_TREE_SEND_ROOT))))
        return "sendbuf";
    if (args->recvbuf == NULL &&
        ((bufs & COLL_TREE_RECV) || (is_root && (bufs & COLL_TREE_RECV_ROOT))))
        return "recvbuf";
    return NULL;
}

/*
 * Check a tree builder's arguments; logs the first bad one, named with the
 * algorithm, and returns CHORUS_ERR_INVALID_ARG for it.
 */
static inline chorus_status_t coll_tree_check(const coll_args_t *args, const char *alg,
                                              int rooted, int reduces, unsigned bufs)
{
    const char *bad = coll_tree_bad_arg(args, rooted, reduces, bufs);

    if (bad == NULL)
        return CHORUS_OK;
    chorus_error("%s: invalid %s (rank %d of %d, root %d, count %zu)", alg, bad, args->rank,
                 args->size, args->root, args->count);
    return CHORUS_ERR_INVALID_ARG;
}

/*
 * Up to COLL_STEP_MAX_DEPS step indices, where a negative index means "no
 * such step" and is left out. Returns the number packed into out.
 */
static inline int coll_tree_deps(long out[COLL_STEP_MAX_DEPS], long a, long b, long c, long d)
{
    long in[4] = {a, b, c, d};
    int n = 0;

    for (int i = 0; i < 4; i++)
        if (in[i] >= 0)
            out[n++] = in[i];
    return n;
}

#endif
