/*
 * Asymmetric fences. A few pairs of threads order a store before a load on
 * both sides (each stores its own word, then reads the other's, so that at
 * least one of them sees the other): a call that ends in the calling thread
 * against a refusal notice's handler, a rank posting a step against a peer
 * going to sleep. One side runs on every call, the other rarely. With
 * membarrier(2) the rare side pays: it makes every CPU that runs a thread
 * of the process (CHORUS__FENCE_PROCESS), or of every process on the
 * machine that registered (CHORUS__FENCE_NODE), execute a full barrier, and
 * the frequent side needs only a compiler barrier instead of a locked
 * instruction.
 *
 * Both sides must agree on whether the heavy side is available: the light
 * side may skip its fence only where chorus__fence_ready said so, for every
 * process whose threads take the other side.
 */
#ifndef CHORUS_UTIL_FENCE_H
#define CHORUS_UTIL_FENCE_H

#include <stdatomic.h>

typedef enum {
    CHORUS__FENCE_PROCESS,      /* threads of this process */
    CHORUS__FENCE_NODE,         /* threads of the processes on this machine that registered */
} chorus__fence_scope_t;

/*
 * Register this process for scope's heavy fences (once per process; any
 * thread): 1 when they work here, 0 when the kernel has no membarrier or
 * refuses it. Not for a hot path (it takes a lock and asks for the pid).
 */
int chorus__fence_ready(chorus__fence_scope_t scope);

/* The frequent side, after its store and before its load. ready: chorus__fence_ready. */
static inline void chorus__fence_light(int ready)
{
    if (ready)
        atomic_signal_fence(memory_order_seq_cst);
    else
        atomic_thread_fence(memory_order_seq_cst);
}

/*
 * The rare side, after its store and before its load, where scope is ready:
 * 0 when every thread in scope has passed a full barrier, -1 when the call
 * failed (then the light sides' missing fences are not made up for).
 */
int chorus__fence_heavy(chorus__fence_scope_t scope);

#endif
