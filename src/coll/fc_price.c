/*
 * chorus_fc_weight_grad's choice between allreducing the gradient and
 * late-multiply, from the exchanged shapes and the cost model (fc.h).
 *
 * Products: 2 * rows * in * out flop at the slowest rank's measured rate,
 * plus one pass over the gradient per product (read and written, priced as
 * the model's reduction rate), the ranks of a machine sharing its cores
 * (ranks of one kernel, which the nodes of an emulated test bed are too).
 * Allreduce: the product of this rank's rows, then the selection's allreduce
 * of out * in accumulated values. Late: ring allgathers of every rank's rows
 * of x and of e (each step as long as the largest piece), overlapped with
 * the products of all rows: with b blocks only the shorter of the two is
 * hidden but for its first block, and each block adds a pass over the
 * gradient and two messages per ring step.
 */
#include "coll/fc.h"

#include <math.h>
#include <strings.h>

static const char *const strategy_names[COLL_FC_STRATEGY_COUNT] = {
    [COLL_FC_AUTO] = "auto",
    [COLL_FC_LATE] = "late",
    [COLL_FC_ALLREDUCE] = "allreduce",
};

const char *coll_fc_strategy_name(coll_fc_strategy_t s)
{
    return (unsigned)s < COLL_FC_STRATEGY_COUNT ? strategy_names[s] : NULL;
}

coll_fc_strategy_t coll_fc_strategy_from_name(const char *name)
{
    for (int s = 0; name != NULL && s < COLL_FC_STRATEGY_COUNT; s++) {
        if (strcasecmp(name, strategy_names[s]) == 0)
            return (coll_fc_strategy_t)s;
    }
    return COLL_FC_STRATEGY_COUNT;
}

chorus_dtype_t coll_fc_acc_dtype(chorus_dtype_t dtype)
{
    return dtype == CHORUS_FLOAT64 ? CHORUS_FLOAT64 : CHORUS_FLOAT32;
}

size_t coll_fc_block_rows(uint64_t rows, uint64_t max_rows, int blocks, int k)
{
    uint64_t per = (max_rows + (uint64_t)blocks - 1) / (uint64_t)blocks;
    uint64_t first = per * (uint64_t)k;

    if (first >= rows)
        return 0;
    return (size_t)(rows - first < per ? rows - first : per);
}

/* Seconds of products over k rows in total, in b passes over the gradient. */
static double product_s(const coll_fc_shape_t *s, const coll_env_t *env, double k, int b,
                        double share)
{
    double rate = s->gemm_rate > 0 ? s->gemm_rate : 1e9;
    double grad_bytes = (double)s->in * (double)s->out *
                        (double)chorus_dtype_size(coll_fc_acc_dtype(s->dtype));

    return share * (2.0 * k * (double)s->in * (double)s->out / rate +
                    b * 2.0 * grad_bytes * env->model->gamma);
}

void coll_fc_choose(const coll_fc_shape_t *s, const coll_env_t *env,
                    const coll_alg_t *allreduce_alg, coll_fc_strategy_t force, int blocks,
                    coll_fc_choice_t *c)
{
    double wire = (double)chorus_dtype_size(s->dtype);
    double acc = (double)chorus_dtype_size(coll_fc_acc_dtype(s->dtype));
    double total = 0, max_rows = 0, share, gather;
    int cap;

    for (int j = 0; j < s->size; j++) {
        total += (double)s->rows[j];
        max_rows = (double)s->rows[j] > max_rows ? (double)s->rows[j] : max_rows;
    }
    share = tune_share(s->machine_ranks > 0 ? s->machine_ranks : 1, s->cores);

    c->allreduce_s = product_s(s, env, max_rows, 1, share);
    if (s->size > 1)
        c->allreduce_s += allreduce_alg != NULL
                              ? coll_alg_price(allreduce_alg, env,
                                               (size_t)((double)s->in * (double)s->out * acc))
                              : INFINITY;

    /* Two rings, x's and e's, each with its own messages. */
    gather = s->size > 1 ? coll_alg_price(&coll_ring_allgather, env,
                                          (size_t)(s->size * max_rows * (double)s->in * wire)) +
                               coll_alg_price(&coll_ring_allgather, env,
                                              (size_t)(s->size * max_rows * (double)s->out *
                                                       wire))
                         : 0;
    c->blocks = 1;
    c->late_s = INFINITY;
    /* Blocks of no rows would be empty: never more blocks than the fullest rank has rows. */
    cap = max_rows >= 1 ? (max_rows < COLL_FC_BLOCKS_MAX ? (int)max_rows : COLL_FC_BLOCKS_MAX) : 1;
    if (blocks > 0)
        cap = blocks < max_rows ? blocks : (max_rows >= 1 ? (int)max_rows : 1);
    for (int b = blocks > 0 ? cap : 1; b <= cap; b *= 2) {
        double products = product_s(s, env, total, b, share);
        double messages = (b - 1) * 2.0 * (s->size - 1) * env->model->alpha;
        double longer = gather > products ? gather : products;
        double shorter = gather > products ? products : gather;
        double t = longer + shorter / b + messages;

        if (t < c->late_s) {
            c->late_s = t;
            c->blocks = b;
        }
    }
    if (force == COLL_FC_LATE || force == COLL_FC_ALLREDUCE)
        c->strategy = force;
    else
        c->strategy = c->late_s < c->allreduce_s ? COLL_FC_LATE : COLL_FC_ALLREDUCE;
}
