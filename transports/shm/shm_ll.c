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
 * watch), then read the lines of the parts this rank needs.
 *
 * The first line carries the call's whole fingerprint, which a rank checks
 * against every peer's: against a peer whose part it reads, before it uses
 * the data; a peer whose step counter shows s while its area does not is
 * in another kind of call, also a mismatch. A rank that reads nothing from
 * some peers (a broadcast's root reads nobody, a non-root only the root; a
 * reduce's contributors read nobody) returns without waiting for them and
 * checks their fingerprints of s later (shm_ll_settle): before it posts
 * step s + SHM_LL_AHEAD, or before any call on the node that is not a small
 * one. So a rank that only writes runs up to SHM_LL_AHEAD calls ahead of
 * its peers instead of waiting for them at every call, and a mismatch it
 * could not see in the call fails one of its next ones, as over the network
 * a rank that only sends learns of it later. Allreduce, reduce, broadcast,
 * allgather and reduce_scatter have this form; a reduce_scatter's part is
 * its whole vector, of which each peer reads and reduces its own block, so
 * only vectors of up to SHM_LL_REDUCE_BYTES have it.
 *
 * Area s % SHM_LL_DEPTH was last written at step s - SHM_LL_DEPTH. A peer
 * reads a step's area before it posts its next step, or checks it before
 * it posts SHM_LL_AHEAD steps later, so the area is free once every peer
 * has posted s - SHM_LL_DEPTH + SHM_LL_AHEAD: known after a call that saw
 * or checked every peer's part (node->seen), else waited for.
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
    case COLL_REDUCE_SCATTER:
        /* Every block, for one of them to be read by each peer: small vectors only. */
        return a->size <= (int)SHM_LL_BYTES ? a->count * es * (size_t)a->size : SIZE_MAX;
    default:
        return SIZE_MAX;
    }
}

int shm_ll_fits(const coll_args_t *a)
{
    return part_bytes(a) <= shm_ll_limit(a->coll);
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
    int sends = coll_args_reads_send(a);
    size_t bytes = sends ? op->ll_part : 0, off = 0;
    const unsigned char *src = a->sendbuf;

    memcpy(lines[0].data, &op->fp, sizeof(op->fp));
    for (size_t k = 0, n = sends ? op->ll_lines : 1; k < n; k++) {
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

/* Whether this rank reads rank j's part (and so waits for it in the call). */
static int reads_from(const coll_args_t *a, int j)
{
    if (a->coll == COLL_BROADCAST)
        return a->rank != a->root && j == a->root;
    if (a->coll == COLL_REDUCE)
        return a->rank == a->root;
    return 1;
}

/* Whether this rank reads the part of every other one of the n local ranks. */
static int reads_all(const coll_args_t *a, int n)
{
    for (int j = 0; j < n; j++)
        if (j != a->rank && !reads_from(a, j))
            return 0;
    return 1;
}

void shm_ll_init(shm_op_t *op)
{
    op->ll_part = part_bytes(&op->args);
    op->ll_lines = lines_of(op->ll_part);
    op->ll_reads_all = reads_all(&op->args, op->node->n);
}

/* A small call of this rank: which one, for the messages. */
typedef struct {
    uint64_t step;
    uint64_t fp;
    uint32_t tag;               /* shm_fp_tag(fp) */
    coll_type_t coll;
    int earlier;                /* it returned already (shm_ll_settle checks it) */
} ll_call_t;

/*
 * 1 when the first n lines of peer j's area of call k are there and carry
 * k's fingerprint, 0 when not yet (op then waits on the line that is
 * missing), < 0 when j is in another call.
 */
static int lines_arrived(shm_op_t *op, int j, const ll_call_t *k, size_t n)
{
    shm_node_t *node = op->node;
    shm_ll_line_t *lines = area(node, j, k->step);
    const char *which;
    uint64_t fp;

    /*
     * The last line first: a peer writes its lines in order, each flag with
     * release order, so once the last line's flag is there every line is,
     * and a waiter polls only that line while the peer writes the others.
     */
    for (size_t i = 0; i < n; i++) {
        size_t l = i == 0 ? n - 1 : i - 1;
        uint64_t v = atomic_load_explicit(&lines[l].flag, memory_order_acquire);

        if ((v & SHM_STEP_MASK) != k->step) {
            /* The counter, then the line again: a peer posts its counter after its lines,
             * so a counter at this step beside a line short of it is another call. */
            uint64_t counter = atomic_load_explicit(&node->ctrl[j]->step, memory_order_acquire);

            v = atomic_load_explicit(&lines[l].flag, memory_order_acquire);
            if ((v & SHM_STEP_MASK) != k->step) {
                if ((counter & SHM_STEP_MASK) < k->step) {
                    op->wait_peer = j;
                    op->wait_word = &lines[l].flag;
                    op->wait_step = k->step;
                    return 0;
                }
                which = k->earlier ? "an earlier call of this rank, a " : "this rank's ";
                chorus_error("local rank %d is in a different collective call at step %llu "
                             "(not a small call like %s%s): the ranks called collectives in "
                             "different orders or with different arguments" SHM_MISMATCH_HINT,
                             j, (unsigned long long)k->step, which, coll_type_name(k->coll));
                return CHORUS_ERR_INVALID_ARG;
            }
        }
        if ((v >> SHM_STEP_BITS) != (k->tag & 0xffff))
            goto differs;
        if (l == 0) {
            memcpy(&fp, lines[0].data, sizeof(fp));
            if (fp != k->fp)
                goto differs;
        }
    }
    return 1;

differs:
    which = k->earlier ? "an earlier call of this rank, a " : "this rank's ";
    memcpy(&fp, lines[0].data, sizeof(fp));
    chorus_error("local rank %d called with other arguments than %s%s (call fingerprint "
                 "%016llx, this rank's %016llx): a different collective, count, type, op or "
                 "root" SHM_MISMATCH_HINT, j, which, coll_type_name(k->coll),
                 (unsigned long long)fp, (unsigned long long)k->fp);
    return CHORUS_ERR_INVALID_ARG;
}

/* This call as lines_arrived names it. */
static ll_call_t this_call(const shm_op_t *op)
{
    return (ll_call_t){.step = op->base + 1, .fp = op->fp, .tag = op->tag,
                       .coll = op->args.coll, .earlier = 0};
}

int shm_ll_owed(const shm_op_t *op)
{
    const shm_node_t *node = op->node;

    if (node->defer_count == 0)
        return 0;
    /* op->base + 1 is a small call's step; it may post once the calls AHEAD older are
       checked (it takes one step only, so the later ones wait for the calls after it). */
    return op->kind != SHM_LL ||
           node->defer[node->defer_head].step + SHM_LL_AHEAD <= op->base + 1;
}

int shm_ll_settle(shm_op_t *op)
{
    shm_node_t *node = op->node;
    int rc;

    while (shm_ll_owed(op)) {
        unsigned h = node->defer_head;
        ll_call_t k = {.step = node->defer[h].step, .fp = node->defer[h].fp,
                       .tag = shm_fp_tag(node->defer[h].fp), .coll = node->defer[h].coll,
                       .earlier = 1};

        for (; node->defer_next < node->n; node->defer_next++) {
            if (node->defer_next != node->me &&
                (rc = lines_arrived(op, node->defer_next, &k, 1)) <= 0)
                return rc == 0 && (rc = shm_any_failed(node)) == 0 ? 0 : rc;
        }
        if (k.step > node->seen)
            node->seen = k.step;
        node->defer_head = (h + 1) % SHM_LL_AHEAD;
        node->defer_count--;
        node->defer_next = 0;
    }
    return 1;
}

/* This call returned before it saw every peer's part: a later one checks them. */
static void defer(shm_op_t *op)
{
    shm_node_t *node = op->node;
    unsigned at = (node->defer_head + node->defer_count) % SHM_LL_AHEAD;

    /* At most AHEAD - 1 are left before this call's step (shm_ll_owed). */
    node->defer[at].step = op->base + 1;
    node->defer[at].fp = op->fp;
    node->defer[at].coll = op->args.coll;
    node->defer_count++;
}

/* dst = bytes [lo, hi) of rank j's part. */
static void copy_range(shm_op_t *op, int j, unsigned char *dst, size_t lo, size_t hi)
{
    shm_ll_line_t *lines = area(op->node, j, op->base + 1);

    if (hi <= SHM_LL_FIRST) {
        memcpy(dst, lines[0].data + 8 + lo, hi - lo);
        return;
    }
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
    case COLL_REDUCE_SCATTER:
        /* This rank's block of every part; in place, recv lies in the send buffer, which the
         * part on the lines was copied from already. */
        if (block == 0)
            break;
        reduce_range(op, recv, (size_t)a->rank * block, (size_t)(a->rank + 1) * block);
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
    ll_call_t k;
    int rc;

    if (!op->ll_posted) {
        /* The area of this step is free once every peer has posted AHEAD steps past the
         * one that wrote it last. */
        uint64_t free_at =
            step > SHM_LL_DEPTH - SHM_LL_AHEAD ? step - (SHM_LL_DEPTH - SHM_LL_AHEAD) : 0;

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
    /*
     * The parts this rank reads. The fingerprints of the peers it reads
     * nothing from are checked by a later call (shm_ll_settle): a rank that
     * only writes (a broadcast's root, a reduce's contributor) returns
     * without waiting for ranks it needs nothing from.
     */
    k = this_call(op);
    for (; op->ll_ready < node->n; op->ll_ready++) {
        int j = op->ll_ready;

        if (j != node->me && reads_from(&op->args, j) &&
            (rc = lines_arrived(op, j, &k, op->ll_lines)) <= 0)
            goto waiting;
    }
    take(op);
    if (op->ll_reads_all) {
        node->seen = step;
        return 1;
    }
    defer(op);
    return 1;

waiting:
    /* Not there yet: a peer that gave up will not post. */
    if (rc == 0 && (rc = shm_any_failed(node)) == 0)
        return 0;
    return rc;
}
