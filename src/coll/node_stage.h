/*
 * Node-local stages of the hierarchical algorithms. A stage is one
 * collective among the ranks of this rank's node (allgather, reduce-scatter,
 * broadcast, with blocks of any length and place). It is appended as one
 * step on the node team when a collective transport serves the node and
 * runs that call, and otherwise as the equivalent transfers through the
 * port among the node's ranks, so each hierarchical builder has one shape
 * whichever way its node is served.
 *
 * Whether a call runs on the team depends only on the call and on what the
 * team's transport offers, which every member sees alike: the members of a
 * node always choose the same way. A call whose blocks are of one length and
 * follow each other in member order goes to the team in its plain form, so
 * that a transport without the v-forms still serves it.
 *
 * Team calls run in the order they are appended, on every member: append
 * the stages of a node in an order all its ranks walk alike.
 */
#ifndef CHORUS_COLL_NODE_STAGE_H
#define CHORUS_COLL_NODE_STAGE_H

#include "coll/coll.h"

typedef struct {
    coll_sched_t *sched;
    coll_team_t *team;          /* the node team, or NULL: every stage goes through the port */
    coll_group_t group;         /* the node's ranks in ascending order; me is this rank */
    chorus_dtype_t dtype;
    chorus_op_t op;
    size_t esize;
    size_t chunk;               /* elements per transfer through the port */
    size_t chunk_bytes;         /* handed on to the team */
    coll_mem_t mem;
    char *arena;                /* scratch carved for the stages (coll_node_alloc) */
    size_t arena_left;
    size_t arena_next;          /* size of the next block: the blocks grow geometrically */
} coll_node_t;

/*
 * One stage, in node positions; the buffers follow coll_args_t. allgather:
 * member j's counts[j] elements (at send) land at element displs[j] of every
 * member's recv. reduce_scatter: the reduction over the members of the
 * counts[j] elements at displs[j] of their send lands at member j's recv.
 * broadcast: count elements at root's send land at every member's recv.
 * In place as in coll_args_t. Through the port, a broadcast goes from root
 * to relay and from relay to the others (relay == root: root sends to
 * all), and the transfers of a stage use tags tag0 + k for the k-th chunk
 * (of node->chunk elements) of a block. counts and displs are read while
 * the stage is appended; a team call gets a copy that lives with the
 * schedule.
 */
typedef struct {
    coll_type_t coll;
    const void *send;
    void *recv;
    const size_t *counts;       /* allgather, reduce_scatter: [group.size] */
    const size_t *displs;
    size_t count;               /* broadcast */
    int root, relay;            /* broadcast */
    uint32_t tag0;
} coll_node_call_t;

/*
 * The node of args->rank in env->layout (checked by the caller), with its
 * team when env has one that matches it. Transfers through the port are cut
 * into chunks of chunk elements. CHORUS_ERR_INTERNAL when the team does not
 * match the layout.
 */
chorus_status_t coll_node_init(coll_node_t *node, coll_sched_t *sched, const coll_args_t *args,
                               const coll_env_t *env, size_t chunk);

/*
 * Append a stage that starts once the steps in deps are done. Returns a step
 * that completes once this rank's part is over (its buffers are free again),
 * -1 when there is nothing to wait for, or -2 when out of memory.
 */
long coll_node_stage(coll_node_t *node, const coll_node_call_t *call, const long *deps,
                     int ndeps);

/* Scratch that lives as long as the schedule, carved from a few allocations (NULL: none). */
void *coll_node_alloc(coll_node_t *node, size_t bytes);

#endif
