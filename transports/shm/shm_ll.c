/*
 * Small calls in one step (the shm_ll variant). A staging call costs two
 * cache-line transfers at least: a peer sees the step word, then reads the
 * slot. Here each rank writes its whole part on the lines of one of its
 * small-call areas (shm_internal.h), every line with its own flag: the step
 * word of the call, stored with release order after the line's data. A
 * peer polls the lines themselves, so when it sees a line's flag it has
 * that line's data in the same transfer.
 *
 * A call is one step s: wait until the area of s is free, write it, post s
 * (also to the step counter, which every other path and the sleepers
 * watch), then read the peers' areas: the lines of the parts this rank
 * needs, and the first line of every other. Area s % SHM_LL_DEPTH was
 * last written at step s - SHM_LL_DEPTH, and a peer reads a step's areas
 * before it posts its next step, so the area is free once every peer has
 * posted s - SHM_LL_DEPTH + 1: known after any small call (node->seen),
 * waited for only after calls of other kinds.
 *
 * The first line carries the call's whole fingerprint, which every rank
 * checks against every peer's before it uses any data (a broadcast's root
 * too, so that ranks that disagree on the root fail); a peer whose step
 * counter shows s while its area does not is in another kind of call,
 * also a mismatch. Allreduce, reduce, broadcast and allgather have this
 * form; reduce_scatter would write every block for one to be read.
 */
#include <string.h>

#include "reduce/reduce.h"
#include "transports/shm/shm_internal.h"
#include "util/log.h"

/* Bytes of the part each rank writes; SIZE_MAX when the call has no small-call form. */
static size_t part_bytes(const coll_args_t *a)
{
    size_t es = chorus_dtype_size(a->dtype);

    if (a->counts != NULL || es == 0 || a->count > SHM_LL_BYTES)
        return SIZE_MAX;    /* the count first: count * es cannot wrap then */
    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
    case COLL_BROADCAST:
    case COLL_ALLGATHER:
        return a->count * es;
    default:
        return SIZE_MAX;
    }
}

int shm_ll_fits(const coll_args_t *a)
{
    return part_bytes(a) <= SHM_LL_BYTES;
}

static shm_ll_line_t *area(const shm_node_t *node, int rank, uint64_t step)
{
    return (shm_ll_line_t *)((char *)node->ctrl[rank] + SHM_LL_OFFSET) +
           (size_t)(step % SHM_LL_DEPTH) * SHM_LL_LINES;
}

/* Lines that a part of bytes takes, the fingerprint's line included. */
static size_t lines_of(size_t bytes)
{
    return bytes <= SHM_LL_FIRST ? 1 : 1 + (bytes - SHM_LL_FIRST + SHM_LL_DATA - 1) / SHM_LL_DATA;
}

/* The data at byte off of an area's part, and how many bytes follow it on that line. */
static unsigned char *at(shm_ll_line_t *lines, size_t off, size_t *avail_p)
{
    if (off < SHM_LL_FIRST) {
        *avail_p = SHM_LL_FIRST - off;
        return lines[0].data + 8 + off;
    }
    off -= SHM_LL_FIRST;
    *avail_p = SHM_LL_DATA - off % SHM_LL_DATA;
    return lines[1 + off / SHM_LL_DATA].data + off % SHM_LL_DATA;
}

/* Write this rank's part and post the step. */
static void put(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    uint64_t step = op->base + 1;
    uint64_t flag = (uint64_t)(op->tag & 0xffff) << SHM_STEP_BITS | step;
    shm_ll_line_t *lines = area(node, node->me, step);
    size_t bytes = coll_args_reads_send(a) ? part_bytes(a) : 0, off = 0;
    const unsigned char *src = a->sendbuf;

    memcpy(lines[0].data, &op->fp, sizeof(op->fp));
    for (size_t k = 0, n = lines_of(bytes); k < n; k++) {
        size_t avail, len;
        unsigned char *dst = at(lines, off, &avail);

        len = bytes - off < avail ? bytes - off : avail;
        if (len == SHM_LL_DATA)
            memcpy(dst, src + off, SHM_LL_DATA);    /* a whole line: a fixed-size copy */
        else if (len > 0)
            memcpy(dst, src + off, len);
        off += len;
        atomic_store_explicit(&lines[k].flag, flag, memory_order_release);
    }
    shm_post(node, op->tag);
}

/* Whether this rank reads rank j's data (it reads every rank's first line). */
static int reads_from(const coll_args_t *a, int j)
{
    if (a->coll == COLL_BROADCAST)
        return a->rank != a->root && j == a->root;
    if (a->coll == COLL_REDUCE)
        return a->rank == a->root;
    return 1;
}

/*
 * 1 when peer j's part of this call is all there, 0 when not yet (the op
 * then waits on the line that is missing), < 0 when j is in another call.
 */
static int arrived(shm_op_t *op, int j)
{
    shm_node_t *node = op->node;
    uint64_t step = op->base + 1, fp;
    shm_ll_line_t *lines = area(node, j, step);
    size_t n = lines_of(reads_from(&op->args, j) ? part_bytes(&op->args) : 0);

    /*
     * The last line first: a peer writes its lines in order, each flag with
     * release order, so once the last line's flag is there every line is,
     * and a waiter polls only that line while the peer writes the others.
     */
    for (size_t i = 0; i < n; i++) {
        size_t k = i == 0 ? n - 1 : i - 1;
        uint64_t v = atomic_load_explicit(&lines[k].flag, memory_order_acquire);

        if ((v & SHM_STEP_MASK) != step) {
            /* The counter, then the line again: a peer posts its counter after its lines,
             * so a counter at this step beside a line short of it is another call. */
            uint64_t counter = atomic_load_explicit(&node->ctrl[j]->step, memory_order_acquire);

            v = atomic_load_explicit(&lines[k].flag, memory_order_acquire);
            if ((v & SHM_STEP_MASK) != step) {
                if ((counter & SHM_STEP_MASK) < step) {
                    op->wait_peer = j;
                    op->wait_word = &lines[k].flag;
                    op->wait_step = step;
                    return 0;
                }
                chorus_error("local rank %d is in a different collective call at step %llu "
                             "(not a small call like this rank's %s of %zu elements): the "
                             "ranks called collectives in different orders or with "
                             "different arguments" SHM_MISMATCH_HINT, j,
                             (unsigned long long)step, coll_type_name(op->args.coll),
                             op->args.count);
                return CHORUS_ERR_INVALID_ARG;
            }
        }
        if ((v >> SHM_STEP_BITS) != (op->tag & 0xffff))
            goto differs;
        if (k == 0) {
            memcpy(&fp, lines[0].data, sizeof(fp));
            if (fp != op->fp)
                goto differs;
        }
    }
    return 1;

differs:
    memcpy(&fp, lines[0].data, sizeof(fp));
    chorus_error("local rank %d called with other arguments (call fingerprint %016llx, this "
                 "rank's %016llx): a different collective, count, type, op or root"
                 SHM_MISMATCH_HINT, j, (unsigned long long)fp, (unsigned long long)op->fp);
    return CHORUS_ERR_INVALID_ARG;
}

/* dst = bytes [lo, hi) of rank j's part. */
static void copy_range(shm_op_t *op, int j, unsigned char *dst, size_t lo, size_t hi)
{
    shm_ll_line_t *lines = area(op->node, j, op->base + 1);

    while (lo < hi) {
        size_t avail, len;
        const unsigned char *src = at(lines, lo, &avail);

        len = hi - lo < avail ? hi - lo : avail;
        if (len == SHM_LL_DATA)
            memcpy(dst, src, SHM_LL_DATA);
        else
            memcpy(dst, src, len);
        dst += len;
        lo += len;
    }
}

/*
 * dst = the reduction of bytes [lo, hi) of every rank's part, in rank
 * order. Each part is first gathered from its lines into one run, so the
 * kernel runs once per rank rather than once per line.
 */
static void reduce_range(shm_op_t *op, unsigned char *dst, size_t lo, size_t hi)
{
    shm_node_t *node = op->node;
    chorus__reduce_fn fn = chorus__reduce_kernel(op->args.dtype, op->args.op);

    copy_range(op, 0, dst, lo, hi);
    for (int j = 1; j < node->n; j++) {
        copy_range(op, j, node->tmp, lo, hi);
        fn(dst, dst, node->tmp, (hi - lo) / op->esize);
    }
}

/* Every part this rank needs is there: its results. */
static void take(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, block = a->count * es;
    unsigned char *recv = a->recvbuf;

    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        if (!coll_args_writes_recv(a) || block == 0)
            break;
        reduce_range(op, recv, 0, block);
        chorus__reduce_finalize(a->dtype, a->op, recv, a->count, node->n);
        break;
    case COLL_ALLGATHER:
        for (int j = 0; j < node->n && block > 0; j++) {
            unsigned char *dst = recv + (size_t)j * block;

            if (j != node->me)
                copy_range(op, j, dst, 0, block);
            else if (dst != (const unsigned char *)a->sendbuf)
                memcpy(dst, a->sendbuf, block);
        }
        break;
    case COLL_BROADCAST:
        if (a->rank != a->root)
            copy_range(op, a->root, recv, 0, block);
        else if (block > 0 && recv != (const unsigned char *)a->sendbuf)
            memcpy(recv, a->sendbuf, block);
        break;
    default:
        break;
    }
}

int shm_ll_progress(shm_op_t *op)
{
    shm_node_t *node = op->node;
    uint64_t step = op->base + 1;
    int rc;

    if (!op->ll_posted) {
        /* The area of this step is free once every peer has posted the step after the
         * one that wrote it last. */
        uint64_t free_at = step > SHM_LL_DEPTH - 1 ? step - (SHM_LL_DEPTH - 1) : 0;

        if (node->seen < free_at) {
            op->wait_word = NULL;
            rc = shm_reached(node, free_at, op->base, op->tag, &op->wait_peer);
            if (rc <= 0) {
                op->wait_step = free_at;
                return rc;
            }
        }
        put(op);
        op->ll_posted = 1;
    }
    /* Every peer's first line at least: its fingerprint is checked by every rank. */
    for (; op->ll_ready < node->n; op->ll_ready++) {
        if (op->ll_ready != node->me && (rc = arrived(op, op->ll_ready)) <= 0)
            goto waiting;
    }
    node->seen = step;
    take(op);
    return 1;

waiting:
    /* Not there yet: a peer that gave up will not post. */
    if (rc == 0 && (rc = shm_any_failed(node)) == 0)
        return 0;
    return rc;
}
