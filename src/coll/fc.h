/*
 * The weight gradient of a fully-connected layer, grad = sum over ranks of
 * e_r^T x_r (chorus_fc_weight_grad(3)), as one task with two strategies:
 *
 *   allreduce  each rank multiplies its own rows (grad_r = e_r^T x_r), then
 *              the gradients are allreduced (out * in values per rank);
 *   late       the ranks gather every rank's rows of x and e, in row blocks
 *              pipelined with the products (block k is multiplied while
 *              block k + 1 is on the wire), and each rank multiplies all of
 *              them (rows * (in + out) values per rank).
 *
 * The task starts with an exchange of every rank's shape (rows, features,
 * dtype, forced strategy, measured product rate): from the same numbers
 * every rank reaches the same choice, and ranks that disagree on what the
 * call is fail it together. Late multiplies the rows block by block, in
 * rank order within a block, on every rank alike, so that every rank holds
 * the same bits. float16 and bfloat16 are multiplied and reduced in float32.
 * Products run on a thread of the task, so that transfers (this call's and
 * others') keep moving meanwhile.
 */
#ifndef CHORUS_COLL_FC_H
#define CHORUS_COLL_FC_H

#include <stddef.h>
#include <stdint.h>

#include "coll/coll.h"

typedef enum {
    COLL_FC_AUTO = 0,
    COLL_FC_LATE,
    COLL_FC_ALLREDUCE,
    COLL_FC_STRATEGY_COUNT
} coll_fc_strategy_t;

/* "auto", "late", "allreduce"; NULL when out of range. */
const char *coll_fc_strategy_name(coll_fc_strategy_t s);
/* COLL_FC_STRATEGY_COUNT when name is none of them (case-insensitive). */
coll_fc_strategy_t coll_fc_strategy_from_name(const char *name);

/* The call, as chorus_fc_weight_grad takes it (arguments already checked). */
typedef struct {
    const void *x;              /* rows x in */
    const void *e;              /* rows x out */
    size_t rows;
    size_t in;
    size_t out;
    chorus_dtype_t dtype;       /* float16, bfloat16, float32, float64 */
    void *grad;                 /* out x in */
    coll_fc_strategy_t force;   /* COLL_FC_AUTO: the cost model chooses */
    int blocks;                 /* late's row blocks; 0: the cost model chooses */
    int rank;
    int size;
    size_t chunk_bytes;
    int cores;                  /* the communicator's: cores a node's ranks run on at once */
} coll_fc_args_t;

/* float32 for the 16-bit types and float32, float64 for float64: what products use. */
chorus_dtype_t coll_fc_acc_dtype(chorus_dtype_t dtype);

/* ---- the choice (fc_price.c) --------------------------------------------- */

/* What every rank knows once shapes are exchanged. */
typedef struct {
    int size;
    const uint64_t *rows;       /* [size] */
    size_t in;
    size_t out;
    chorus_dtype_t dtype;
    double gemm_rate;           /* flop/s of the products on one core, the slowest rank's */
    int machine_ranks;          /* most ranks on one machine instance (sharing its cores) */
    int cores;                  /* cores a node's ranks run on at once, fewest of any node */
} coll_fc_shape_t;

/* Most row blocks the cost model gives late-multiply. */
#define COLL_FC_BLOCKS_MAX 8

typedef struct {
    coll_fc_strategy_t strategy;    /* COLL_FC_LATE or COLL_FC_ALLREDUCE */
    int blocks;                     /* late: row blocks, 1 .. COLL_FC_BLOCKS_MAX */
    double late_s;                  /* estimated seconds of each strategy */
    double allreduce_s;
} coll_fc_choice_t;

/*
 * The estimates of both strategies in env, the allreduce of the gradient
 * priced as allreduce_alg (the selection's choice for its size), and the
 * cheaper one (force, unless COLL_FC_AUTO, overrides it), with late's row
 * blocks (blocks, unless 0, overrides them; never more than the rows of the
 * fullest rank). A function of its arguments only: ranks with the same
 * shape choose alike.
 */
void coll_fc_choose(const coll_fc_shape_t *shape, const coll_env_t *env,
                    const coll_alg_t *allreduce_alg, coll_fc_strategy_t force, int blocks,
                    coll_fc_choice_t *choice);

/* Rows of rank j in block k of blocks (each rank's rows cut into blocks alike). */
size_t coll_fc_block_rows(uint64_t rows, uint64_t max_rows, int blocks, int k);

/* ---- the task (fc_task.c) ------------------------------------------------ */

/*
 * The task of a call. allreduce_alg: the selection's algorithm for the
 * allreduce of the gradient (out * in elements of coll_fc_acc_dtype), whose
 * task is created now to take its team turns in call order and skipped
 * when late is chosen. Transfers go to port with tag_base. wake(wake_arg)
 * is called from the product thread when a product is done, so that
 * whoever drives the task looks again.
 */
chorus_status_t coll_fc_task_create(const coll_fc_args_t *args, const coll_env_t *env,
                                    const coll_alg_t *allreduce_alg, tl_port_t *port,
                                    uint64_t tag_base, coll_scratch_pool_t *pool,
                                    void (*wake)(void *), void *wake_arg,
                                    chorus__task_t **task_p);

#endif
