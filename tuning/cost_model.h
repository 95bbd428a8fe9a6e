/*
 * Cost model for algorithm selection: alpha-beta-gamma estimates of each
 * algorithm's time as a function of the message size and the rank count.
 *
 *   alpha  seconds per message (latency of one send/receive pair)
 *   beta   seconds per byte on the wire
 *   gamma  seconds per byte reduced
 *
 * tuning/ sits below src/coll, so it names collectives with its own enum
 * (same order as coll_type_t) and algorithms by the names the algorithm
 * entries carry ("ring", "rd", ...).
 */
#ifndef CHORUS_TUNING_COST_MODEL_H
#define CHORUS_TUNING_COST_MODEL_H

#include <stddef.h>

/* Mirrors coll_type_t: TUNE_COLL_X == COLL_X for every collective. */
typedef enum {
    TUNE_COLL_ALLREDUCE = 0,
    TUNE_COLL_ALLGATHER,
    TUNE_COLL_BROADCAST,
    TUNE_COLL_REDUCE_SCATTER,
    TUNE_COLL_REDUCE,
    TUNE_COLL_ALLTOALL,
    TUNE_COLL_BARRIER,
    TUNE_COLL_COUNT
} tune_coll_t;

/* Most candidate algorithms of any one collective. */
#define TUNE_ALGS_MAX 7

/* Defaults: TCP over loopback. */
#define TUNE_DEFAULT_ALPHA       30e-6            /* 30 us per message */
#define TUNE_DEFAULT_BETA        (1.0 / 2e9)      /* 2 GB/s on the wire */
#define TUNE_DEFAULT_GAMMA       (1.0 / 4e9)      /* 4 GB/s reduced */
#define TUNE_DEFAULT_CHUNK_BYTES ((size_t)256 << 10) /* CHORUS_CHUNK_SIZE's default */
/* Defaults of a node's network link, used when ranks span nodes: 10 Gb/s Ethernet. */
#define TUNE_DEFAULT_NET_ALPHA   50e-6            /* 50 us per message */
#define TUNE_DEFAULT_NET_BETA    (1.0 / 1.25e9)   /* 1.25 GB/s per node */

/*
 * Defaults of the node-local (shared-memory) candidates, fitted to sweeps of
 * each algorithm forced on a 2-core machine at 2 and 4 ranks (docs/PERFORMANCE.md).
 */
#define TUNE_DEFAULT_SHM_ALPHA   1.5e-6           /* one step of every rank seen by all */
#define TUNE_DEFAULT_SHM_ALPHA_OVERSUB 5e-6       /* the same with more ranks than cores */
#define TUNE_DEFAULT_SHM_BETA    (1.0 / 25e9)     /* copies through cache-sized slots */
#define TUNE_DEFAULT_SHM_GAMMA   (1.0 / 10e9)     /* reduced by one core */
#define TUNE_DEFAULT_CMA_ALPHA   4e-6             /* one process_vm_readv/writev call */
#define TUNE_DEFAULT_CMA_BETA    (1.0 / 6.5e9)    /* kernel copy, pages pinned one by one */

typedef struct {
    double alpha;           /* seconds per message */
    double beta;            /* seconds per byte sent */
    double gamma;           /* seconds per byte reduced */
    size_t chunk_bytes;     /* pipeline chunk of the chain broadcast; 0: no pipelining */
    /* Node-local candidates: priced only when every rank shares a node. */
    int node_local;         /* 1: the shm candidates exist */
    int node_cma;           /* 1: single copy works between every pair of ranks */
    size_t shm_slot;        /* bytes per staging round (CHORUS_SHM_SLOT_SIZE) */
    int node_cores;         /* cores the ranks run on; 0: as many as ranks */
    double shm_alpha;       /* seconds per step */
    double shm_alpha_oversub; /* seconds per step when ranks outnumber cores */
    double shm_beta;        /* seconds per byte copied */
    double shm_gamma;       /* seconds per byte reduced */
    double cma_alpha;       /* seconds per cross-memory call */
    double cma_beta;        /* seconds per byte moved by a cross-memory call */
    /* Ranks on several nodes (cost_hier.h): alpha and beta are then the links within a node. */
    int nnodes;             /* 0 or 1: one node, or not known */
    int local_min;          /* ranks on the emptiest node */
    int local_max;          /* ranks on the fullest node */
    int ring_crossings;     /* most ring edges leaving one node */
    double net_alpha;       /* seconds per message between nodes */
    double net_beta;        /* seconds per byte through one node's network link */
} tune_model_t;

void tune_model_default(tune_model_t *model_p);

/* "allreduce", "reduce_scatter", ...; NULL when out of range. */
const char *tune_coll_name(tune_coll_t coll);
/* TUNE_COLL_COUNT when name is not a collective (case-insensitive). */
tune_coll_t tune_coll_from_name(const char *name);

/* Candidates of coll, in order of preference; 0 when coll is out of range. */
int tune_coll_nalgs(tune_coll_t coll);
/* Name of candidate i of coll; NULL when out of range. */
const char *tune_coll_alg(tune_coll_t coll, int i);
/* 1 when candidate i of coll is hierarchical (runs on any layout; cost_hier.h). */
int tune_alg_spread(tune_coll_t coll, int i);
/* Index of the candidate called name (case-insensitive), or -1. */
int tune_alg_index(tune_coll_t coll, const char *name);

/*
 * Estimated seconds for candidate alg of coll moving bytes on p ranks.
 * bytes is the whole vector, as in nccl-tests' sizes: the vector reduced or
 * broadcast; the gathered result of allgather; the input of
 * reduce_scatter; one rank's send buffer (all peers' blocks) of alltoall;
 * ignored by barrier. Returns a negative value when coll or alg is out of
 * range or p < 1.
 */
double tune_cost(const tune_model_t *model, tune_coll_t coll, int alg, size_t bytes, int p);

#endif
