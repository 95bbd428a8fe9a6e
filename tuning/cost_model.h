/*
 * The cost model: alpha-beta-gamma estimates from which every algorithm
 * prices itself (src/coll), and the primitives those prices share.
 *
 *   alpha  seconds per message (latency of one send/receive pair)
 *   beta   seconds per byte on the wire
 *   gamma  seconds per byte reduced
 *
 * With ranks on several nodes there are two links: alpha/beta between
 * ranks of one node and net_alpha/net_beta of each node's network link,
 * which every flow leaving the node shares.
 *
 * tuning/ knows no collective and no algorithm: sizes are bytes, rank
 * counts and shapes are plain numbers.
 */
#ifndef CHORUS_TUNING_COST_MODEL_H
#define CHORUS_TUNING_COST_MODEL_H

#include <stddef.h>

/* Defaults: TCP over loopback. */
#define TUNE_DEFAULT_ALPHA       30e-6            /* 30 us per message */
#define TUNE_DEFAULT_BETA        (1.0 / 2e9)      /* 2 GB/s on the wire */
#define TUNE_DEFAULT_GAMMA       (1.0 / 4e9)      /* 4 GB/s reduced */
#define TUNE_DEFAULT_CHUNK_BYTES ((size_t)256 << 10) /* CHORUS_CHUNK_SIZE's default */
/* Defaults of a node's network link, used when ranks span nodes: 10 Gb/s Ethernet. */
#define TUNE_DEFAULT_NET_ALPHA   50e-6            /* 50 us per message */
#define TUNE_DEFAULT_NET_BETA    (1.0 / 1.25e9)   /* 1.25 GB/s per node */

typedef struct {
    double alpha;           /* seconds per message */
    double beta;            /* seconds per byte sent */
    double gamma;           /* seconds per byte reduced */
    size_t chunk_bytes;     /* pipeline chunk; 0: no pipelining */
    double net_alpha;       /* seconds per message between nodes */
    double net_beta;        /* seconds per byte through one node's network link */
} tune_model_t;

void tune_model_default(tune_model_t *model_p);

/* 1 when alpha, beta and gamma are finite and not negative. */
int tune_model_valid(const tune_model_t *model);

/* How the ranks lie on nodes, as the model needs it (from the job's layout). */
typedef struct {
    int nnodes;             /* 0 or 1: one node, or not known */
    int local_min;          /* ranks on the emptiest node */
    int local_max;          /* ranks on the fullest node */
    int ring_crossings;     /* most ring edges (rank r -> r + 1) leaving one node */
} tune_shape_t;

/*
 * The estimated seconds of a flat algorithm moving n bytes on p ranks
 * that every pair reaches over one link of the model.
 */
typedef double (*tune_cost_fn_t)(const tune_model_t *m, double n, int p);

/* Rounds of a binomial tree or of dissemination: ceil(log2 p). */
int tune_log2_ceil(int p);
/* log2 of the largest power of two not above p (p >= 1). */
int tune_log2_floor(int p);

/*
 * Non-power-of-two rank counts are folded onto the largest power of two p2:
 * each extra rank sends its vector to a partner, which reduces it, and gets
 * the result back at the end. That costs two messages of n bytes and one
 * reduction of n bytes on top of the power-of-two algorithm.
 */
double tune_fold_cost(const tune_model_t *m, double n, int p);

/*
 * The model as a flat algorithm sees it on several nodes: every step waits
 * for its slowest link. A ring-shaped algorithm (ring, chain) sends
 * shape->ring_crossings flows through a node link, the others (recursive
 * doubling, trees, pairwise) up to local_max. With one rank per node every
 * flow is a network one: the node's link (alpha, beta) plays no part.
 */
void tune_flat_model(const tune_model_t *m, const tune_shape_t *shape, int ring_shaped,
                     tune_model_t *out);

/*
 * Ranks on one node with fewer cores than ranks share the cores' time:
 * the factor on every rank's work, 1 when each has a core (or cores is 0).
 */
double tune_share(int p, int cores);

/* Two stages running at once: the longer one, plus the shorter one's first `frac` of it. */
double tune_overlap(double a, double b, double frac);

/* The cores this process may run on (its affinity mask), at least 1. */
int tune_usable_cores(void);

#endif
