/*
 * What a node-local call costs, for the selection and for choosing the
 * variant of a team step. A staging call moves in rounds of one slot; a
 * round costs the steps where a rank waits for all others (the flat
 * variant waits once a round: the wait for a slot to be free overlaps the
 * next round), plus the copies and reductions of one core. A single-copy
 * call waits twice and moves each byte once, through the kernel, which pins
 * the pages it copies: dearer per byte than copies through cache-sized
 * slots. With more ranks than cores, every wait costs a trip through the
 * scheduler and the ranks share the cores' time.
 *
 * The figures were fitted to sweeps of each variant forced on a 2-core
 * machine at 2 and 4 ranks (docs/PERFORMANCE.md).
 */
#include <math.h>

#include "transports/shm/shm_internal.h"
#include "transports/shm/shm_team.h"

#define SHM_PRICE_STEP          1.5e-6          /* one step of every rank seen by all */
#define SHM_PRICE_STEP_OVERSUB  5e-6            /* the same with more ranks than cores */
#define SHM_PRICE_COPY          (1.0 / 25e9)    /* seconds per byte copied through slots */
#define SHM_PRICE_REDUCE        (1.0 / 10e9)    /* seconds per byte reduced by one core */
#define SHM_PRICE_CMA_CALL      4e-6            /* one process_vm_readv/writev call */
#define SHM_PRICE_CMA_BYTE      (1.0 / 6.5e9)   /* kernel copy, pages pinned one by one */
/* Device calls are the only ones on device memory, so these figures rank nothing yet. */
#define SHM_PRICE_DEVICE_CALL   30e-6           /* launches and event polls of one call */
#define SHM_PRICE_DEVICE_BYTE   (1.0 / 1e12)    /* a byte read or written by a kernel */

typedef struct {
    int p;
    double share;           /* how many ranks share a core (1 when each has one) */
    double step;            /* seconds per wait for every rank */
    double slot;            /* bytes per staging round */
} shm_price_t;

static double rounds(const shm_price_t *t, double n)
{
    return n > 0 ? ceil(n / t->slot) : 1.0;
}

static double flat(const shm_price_t *t, coll_type_t coll, double n)
{
    int p = t->p;

    switch (coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        /* Every rank copies its vector in, then reduces the whole vector from every slot. */
        return rounds(t, n) * t->step +
               t->share * (n * SHM_PRICE_COPY + (p - 1) * n * SHM_PRICE_REDUCE);
    case COLL_REDUCE_SCATTER:
        /* n is the whole input; each rank reduces its block from every slot. */
        return rounds(t, n) * t->step +
               t->share * (n * SHM_PRICE_COPY + (p - 1) * n / p * SHM_PRICE_REDUCE);
    case COLL_ALLGATHER:
        /* n is the gathered result: each rank copies its block in and the whole result out. */
        return rounds(t, n / p) * t->step + t->share * (n / p + n) * SHM_PRICE_COPY;
    case COLL_BROADCAST:
        return rounds(t, n) * t->step + t->share * 2 * n * SHM_PRICE_COPY;
    case COLL_ALLTOALL:
        /* n is one rank's send buffer: a round moves a slot of its blocks for the peers,
         * copied in and out again; its own block is copied across once. */
        return rounds(t, n * (p - 1) / p) * t->step +
               t->share * (2.0 * (p - 1) + 1) / p * n * SHM_PRICE_COPY;
    case COLL_BARRIER:
        return t->step;
    default:
        return INFINITY;
    }
}

/*
 * Copy in, reduce one slice of every slot, copy every slice out: two waits a
 * round, and each waits for every rank's turn on the cores when ranks
 * outnumber them.
 */
static double slice(const shm_price_t *t, double n)
{
    double work = 2 * n * SHM_PRICE_COPY + (t->p - 1) * n / t->p * SHM_PRICE_REDUCE;

    return rounds(t, n) * 2 * t->step * t->share + t->share * work;
}

static double cma(const shm_price_t *t, coll_type_t coll, double n)
{
    int p = t->p;
    double work;

    switch (coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE: {
        /* Read one slice from every peer, reduce it, write it to every peer. */
        double part = n / p;
        work = 2.0 * (p - 1) * (rounds(t, part) * SHM_PRICE_CMA_CALL + part * SHM_PRICE_CMA_BYTE)
               + (p - 1) * part * SHM_PRICE_REDUCE;
        break;
    }
    case COLL_REDUCE_SCATTER:
        work = (p - 1) * (rounds(t, n / p) * SHM_PRICE_CMA_CALL +
                          n / p * (SHM_PRICE_CMA_BYTE + SHM_PRICE_REDUCE));
        break;
    case COLL_ALLGATHER:
        work = (p - 1) * (rounds(t, n / p) * SHM_PRICE_CMA_CALL + n / p * SHM_PRICE_CMA_BYTE);
        break;
    case COLL_BROADCAST:
        work = rounds(t, n) * SHM_PRICE_CMA_CALL + n * SHM_PRICE_CMA_BYTE;
        break;
    case COLL_ALLTOALL:
        /* n is one rank's send buffer: one read of its block from every peer, its own copied. */
        work = (p - 1) * (SHM_PRICE_CMA_CALL + n / p * SHM_PRICE_CMA_BYTE) +
               n / p * SHM_PRICE_COPY;
        break;
    default:
        return INFINITY;
    }
    return 2 * t->step + t->share * work;
}

/*
 * A small call: one step, whose data comes with the flags the waiters read,
 * so half the wait of a staging round; the copies and reductions are a
 * staging call's. Only parts that fit the small-call area.
 */
static double ll(const shm_price_t *t, coll_type_t coll, double n)
{
    shm_price_t once = *t;

    if ((coll == COLL_ALLGATHER ? n / t->p : n) > (double)shm_ll_limit(coll))
        return INFINITY;
    once.step = t->step / 2;
    once.slot = n > 1 ? n : 1;      /* one round */
    return flat(&once, coll, n);
}

/* Device kernels: two waits, and each byte of the vector read once and written once. */
static double device(const shm_price_t *t, double n)
{
    return 2 * t->step + SHM_PRICE_DEVICE_CALL + 2 * n * SHM_PRICE_DEVICE_BYTE;
}

double shm_price(const tl_coll_ctx_t *ctx, const tl_team_desc_t *team, int variant,
                 coll_type_t coll, size_t bytes)
{
    shm_price_t t = {.p = team->size, .share = 1.0, .step = SHM_PRICE_STEP};
    double n = (double)bytes;

    if (!tl_coll_variant_runs(&tl_shm_coll_ops, variant, coll, team->flags, 0))
        return INFINITY;
    if (t.p <= 1)
        return 0.0;     /* a lone rank has nothing to exchange */
    if (team->cores > 0 && t.p > team->cores) {
        t.share = (double)t.p / team->cores;
        t.step = SHM_PRICE_STEP_OVERSUB;
    }
    t.slot = ctx != NULL ? (double)shm_ctx_config(ctx)->slot_bytes : 262144.0;
    switch ((shm_kind_t)variant) {
    case SHM_FLAT:
        return flat(&t, coll, n);
    case SHM_SLICE:
        return slice(&t, n);
    case SHM_CMA:
        return cma(&t, coll, n);
    case SHM_CUDA:
        return device(&t, n);
    case SHM_LL:
        return ll(&t, coll, n);
    default:
        return INFINITY;
    }
}
