/*
 * The job's layout: which ranks share a node, each rank's position on its
 * node, the nodes' leaders, and the class of the link between two ranks.
 * Every rank builds the same layout from the same node identities, so
 * algorithms that split work by node agree without talking.
 *
 * Nodes are numbered in the order of their lowest rank; a node's ranks are
 * listed in ascending order and its leader is the first of them.
 */
#ifndef CHORUS_TOPOLOGY_LAYOUT_H
#define CHORUS_TOPOLOGY_LAYOUT_H

#include <stdio.h>
#include "chorus.h"

/* How two ranks reach each other. */
typedef enum {
    TOPO_LINK_SELF = 0,     /* the same rank */
    TOPO_LINK_NODE,         /* the same node: shared memory or loopback */
    TOPO_LINK_NETWORK       /* different nodes */
} topo_link_t;

typedef struct {
    int size;               /* ranks */
    int nnodes;
    int local_min;          /* ranks on the emptiest node */
    int local_max;          /* ranks on the fullest node */
    int ring_crossings;     /* most ring edges (rank r -> r + 1 mod size) leaving one node */
    int *node_of;           /* [size]: node of each rank */
    int *local_index;       /* [size]: position of each rank among its node's ranks */
    int *node_first;        /* [nnodes + 1]: node n's ranks are by_node[node_first[n] ..] */
    int *by_node;           /* [size]: ranks grouped by node, ascending within a node */
} topo_layout_t;

/* From ids[r], rank r's node identity (chorus__node_identity). */
chorus_status_t topo_layout_build(const char *const *ids, int size, topo_layout_t **layout_p);

/* From node_of[r], any integers naming rank r's node (equal integers: the same node). */
chorus_status_t topo_layout_from_nodes(const int *node_of, int size, topo_layout_t **layout_p);

/*
 * From a list of ranks per node, "2,2" or "3,2,1": consecutive ranks fill
 * the nodes in order. A bad list is logged and gives CHORUS_ERR_INVALID_ARG.
 */
chorus_status_t topo_layout_parse(const char *ranks_per_node, topo_layout_t **layout_p);

void topo_layout_free(topo_layout_t *layout);

static inline int topo_layout_node_size(const topo_layout_t *l, int node)
{
    return l->node_first[node + 1] - l->node_first[node];
}

/* Rank number i (0-based) of node `node`. */
static inline int topo_layout_rank(const topo_layout_t *l, int node, int i)
{
    return l->by_node[l->node_first[node] + i];
}

static inline int topo_layout_leader(const topo_layout_t *l, int node)
{
    return l->by_node[l->node_first[node]];
}

static inline topo_link_t topo_layout_link(const topo_layout_t *l, int a, int b)
{
    if (a == b)
        return TOPO_LINK_SELF;
    return l->node_of[a] == l->node_of[b] ? TOPO_LINK_NODE : TOPO_LINK_NETWORK;
}

/* "2,2"-style ranks per node, written into buf (always terminated). */
void topo_layout_shape(const topo_layout_t *l, char *buf, size_t len);

/*
 * One line per node: its number, leader, ranks (ranges like 0-3,8) and,
 * when ids is not NULL, its identity. prefix starts every line.
 */
void topo_layout_print(FILE *out, const topo_layout_t *l, const char *const *ids,
                       const char *prefix);

#endif
