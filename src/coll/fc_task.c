/*
 * The task of chorus_fc_weight_grad (fc.h): the shape exchange, the choice,
 * then one of the two strategies, with the products on a thread of the task.
 *
 * Tags, within the call's sequence number: the allreduce of the gradient
 * uses the algorithm's own tags (below FC_TAG_LATE), the late gathers
 * FC_TAG_LATE and up, the shape exchange FC_TAG_META and up.
 */
#include "coll/fc.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coll/ring.h"
#include "reduce/gemm.h"
#include "topology/node.h"
#include "util/log.h"

#define FC_TAG_LATE (1u << 30)
#define FC_TAG_META (1u << 31)

#define FC_META_MAGIC 0x63686663u   /* "chfc" */
#define FC_META_VERSION 1u

/* What each rank tells the others about its call; little-endian. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    uint64_t rows;
    uint64_t in;
    uint64_t out;
    uint32_t dtype;
    uint32_t force;
    uint32_t blocks;
    uint32_t cores;             /* its node's ranks run on at once (coll_fc_args_t.cores) */
    uint64_t rate_bits;
    uint64_t machine;           /* chorus__machine_id() */         /* the double flop/s of its products */
} fc_meta_t;

typedef enum {
    FC_META = 0,        /* shapes on the wire */
    FC_AR_PRODUCT,      /* allreduce: this rank's product */
    FC_AR_REDUCE,       /* allreduce: the gradients' allreduce */
    FC_AR_NARROW,       /* allreduce, 16-bit: float32 back to dtype */
    FC_LATE,            /* late: gathers and products */
    FC_OVER
} fc_phase_t;

typedef struct {
    chorus__task_t head;
    coll_fc_args_t a;
    const coll_env_t *env;
    const coll_alg_t *allreduce_alg;
    tl_port_t *port;
    uint64_t tag_base;
    coll_scratch_pool_t *pool;
    void (*wake)(void *);
    void *wake_arg;

    chorus_dtype_t acc;         /* what products and the allreduce use */
    size_t wire_es, acc_es;
    void *acc_buf;              /* out x in of acc: grad, or acc_mem (16-bit) */
    int acc_owned;
    coll_pool_buf_t acc_mem;    /* 16-bit: the float32 gradient, from the pool */
    float *wide;                /* 16-bit: rows widened for a product (wide_mem) */
    coll_pool_buf_t wide_mem;

    fc_meta_t mine;
    fc_meta_t *metas;           /* [size] */
    uint64_t *rows;             /* [size] */
    uint64_t max_rows;
    size_t *piece_first;        /* late: [size + 1] scratch of fc_late_block */
    chorus__task_t *meta;       /* ring allgather of the metas */
    chorus__task_t *allreduce;  /* skipped when late is chosen */
    coll_sched_t *late;
    int late_over;
    coll_fc_choice_t choice;
    size_t *block_first;        /* late: [blocks + 1] first gathered row of each block */
    long *block_join;           /* late: [blocks] the step that completes each block */
    char *xall, *eall;          /* late: every rank's rows, block by block, rank by rank */
    fc_phase_t phase;

    /* The product thread: runs jobs 0 .. jobs - 1 in order, each once ready. */
    pthread_t thread;
    int threaded;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int jobs, ready, done, stop;    /* under lock */
} fc_task_t;

static fc_task_t *fc_of(chorus__task_t *task)
{
    return (fc_task_t *)task;
}

/* ---- products ------------------------------------------------------------ */

/* grad_acc (+)= e^T x over k rows in dtype; 16-bit rows widened first. */
static void fc_product(fc_task_t *t, const void *e, const void *x, size_t k, int accumulate)
{
    const void *a = e, *b = x;

    if (t->acc_es != t->wire_es && k > 0) {
        chorus__widen_n(t->a.dtype, t->wide, e, k * t->a.out);
        chorus__widen_n(t->a.dtype, t->wide + k * t->a.out, x, k * t->a.in);
        a = t->wide;
        b = t->wide + k * t->a.out;
    }
    chorus__gemm_atb(t->acc, t->a.out, t->a.in, k, a, b, accumulate, t->acc_buf);
}

static void fc_narrow(fc_task_t *t)
{
    if (t->acc_owned)
        chorus__narrow_n(t->a.dtype, t->a.grad, t->acc_buf, t->a.in * t->a.out);
}

static void fc_job(fc_task_t *t, int j)
{
    if (t->choice.strategy == COLL_FC_ALLREDUCE) {
        if (j == 0)
            fc_product(t, t->a.e, t->a.x, t->a.rows, 0);
        else
            fc_narrow(t);
        return;
    }
    size_t first = t->block_first[j], k = t->block_first[j + 1] - first;

    fc_product(t, t->eall + first * t->a.out * t->wire_es, t->xall + first * t->a.in * t->wire_es,
               k, j > 0);
    if (j == t->jobs - 1)
        fc_narrow(t);
}

static void *fc_thread(void *arg)
{
    fc_task_t *t = arg;

    pthread_mutex_lock(&t->lock);
    while (t->done < t->jobs) {
        int j;

        while (!t->stop && t->ready <= t->done)
            pthread_cond_wait(&t->cond, &t->lock);
        if (t->stop)
            break;
        j = t->done;
        pthread_mutex_unlock(&t->lock);
        fc_job(t, j);
        pthread_mutex_lock(&t->lock);
        t->done++;
        pthread_mutex_unlock(&t->lock);
        t->wake(t->wake_arg);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Start jobs products; without a thread, fc_jobs_done runs them. */
static void fc_jobs_start(fc_task_t *t, int jobs)
{
    t->jobs = jobs;
    if (pthread_create(&t->thread, NULL, fc_thread, t) == 0)
        t->threaded = 1;
    else
        chorus_warn("rank %d: no thread for fc_weight_grad's products (%s); the progress "
                    "thread runs them", t->a.rank, strerror(errno));
}

/* Jobs up to ready may run. */
static void fc_jobs_ready(fc_task_t *t, int ready)
{
    pthread_mutex_lock(&t->lock);
    if (ready > t->ready) {
        t->ready = ready;
        pthread_cond_signal(&t->cond);
    }
    pthread_mutex_unlock(&t->lock);
}

/* Jobs done so far (running the ready ones here when there is no thread). */
static int fc_jobs_done(fc_task_t *t)
{
    int done;

    if (!t->threaded) {
        while (t->done < t->ready)
            fc_job(t, t->done++);
        return t->done;
    }
    pthread_mutex_lock(&t->lock);
    done = t->done;
    pthread_mutex_unlock(&t->lock);
    return done;
}

/* Stop the thread after its current job: a product never outlives the task. */
static void fc_jobs_stop(fc_task_t *t)
{
    if (!t->threaded)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    t->threaded = 0;
}

/* ---- the choice ---------------------------------------------------------- */

static void fc_meta_fill(fc_task_t *t)
{
    double rate = chorus__gemm_rate(t->acc);
    uint64_t bits;

    memcpy(&bits, &rate, sizeof(bits));
    t->mine.magic = htole32(FC_META_MAGIC);
    t->mine.version = htole32(FC_META_VERSION);
    t->mine.rows = htole64(t->a.rows);
    t->mine.in = htole64(t->a.in);
    t->mine.out = htole64(t->a.out);
    t->mine.dtype = htole32((uint32_t)t->a.dtype);
    t->mine.force = htole32((uint32_t)t->a.force);
    t->mine.blocks = htole32((uint32_t)t->a.blocks);
    t->mine.rate_bits = htole64(bits);
    t->mine.cores = htole32((uint32_t)t->a.cores);
    t->mine.machine = htole64(chorus__machine_id());
}

/*
 * Every rank checks every shape alike, so every rank fails a call that
 * differs alike; and reads the same rates, cores and machines from them.
 */
static chorus_status_t fc_agree(fc_task_t *t, coll_fc_shape_t *shape)
{
    double rate = 0;
    int cores = 0, most = 0;

    for (int j = 0; j < t->a.size; j++) {
        const fc_meta_t *m = &t->metas[j];
        uint64_t bits = le64toh(m->rate_bits);
        double r;

        if (le32toh(m->magic) != FC_META_MAGIC || le32toh(m->version) != FC_META_VERSION) {
            chorus_error("rank %d: fc_weight_grad: rank %d's call is not an fc_weight_grad "
                         "(another call of the communicator in its place?)", t->a.rank, j);
            return CHORUS_ERR_INVALID_ARG;
        }
        if (le64toh(m->in) != t->a.in || le64toh(m->out) != t->a.out ||
            le32toh(m->dtype) != (uint32_t)t->a.dtype ||
            le32toh(m->force) != (uint32_t)t->a.force ||
            le32toh(m->blocks) != (uint32_t)t->a.blocks) {
            const char *fs = coll_fc_strategy_name((coll_fc_strategy_t)le32toh(m->force));

            chorus_error("rank %d: fc_weight_grad: rank %d called with in_features=%llu "
                         "out_features=%llu dtype=%s strategy=%s blocks=%u, rank %d with %zu "
                         "%zu %s %s %d: every rank must pass the same (CHORUS_TUNE and "
                         "CHORUS_FC_BLOCKS included)", t->a.rank, j,
                         (unsigned long long)le64toh(m->in), (unsigned long long)le64toh(m->out),
                         chorus_dtype_name((chorus_dtype_t)le32toh(m->dtype)),
                         fs ? fs : "?", le32toh(m->blocks), t->a.rank, t->a.in, t->a.out,
                         chorus_dtype_name(t->a.dtype), coll_fc_strategy_name(t->a.force),
                         t->a.blocks);
            return CHORUS_ERR_INVALID_ARG;
        }
        t->rows[j] = le64toh(m->rows);
        memcpy(&r, &bits, sizeof(r));
        if (r > 0 && (rate == 0 || r < rate))
            rate = r;
        if (cores == 0 || (int)le32toh(m->cores) < cores)
            cores = (int)le32toh(m->cores);
    }
    for (int j = 0; j < t->a.size; j++) {
        int same = 0;

        for (int k = 0; k < t->a.size; k++)
            same += t->metas[k].machine == t->metas[j].machine;
        most = same > most ? same : most;
    }
    *shape = (coll_fc_shape_t){.size = t->a.size, .rows = t->rows, .in = t->a.in,
                               .out = t->a.out, .dtype = t->a.dtype, .gemm_rate = rate,
                               .machine_ranks = most, .cores = cores};
    return CHORUS_OK;
}

/* 16-bit: room to widen rows of x and e to float32 for a product. */
static chorus_status_t fc_widen_room(fc_task_t *t, size_t rows)
{
    if (rows == 0)
        return CHORUS_OK;
    t->wide_mem = coll_pool_get(t->pool, rows * (t->a.in + t->a.out) * sizeof(float));
    t->wide = t->wide_mem.mem;
    return t->wide != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
}

/* ---- late: the gathers --------------------------------------------------- */

/* Rows of rank j in block k. */
static size_t fc_piece_rows(const fc_task_t *t, int j, int k)
{
    return coll_fc_block_rows(t->rows[j], t->max_rows, t->choice.blocks, k);
}

/*
 * Block k of every rank: ring allgathers of the x rows and of the e rows.
 * Step s sends piece rank - s to the right and receives piece rank - s - 1
 * from the left; pieces of no rows are not sent, as every rank knows. The
 * block's rows lie in xall and eall from row block_first[k], rank by rank.
 */
static chorus_status_t fc_late_block(fc_task_t *t, int k)
{
    coll_sched_t *s = t->late;
    int p = t->a.size, me = t->a.rank;
    int right = coll_ring_right(me, p), left = coll_ring_left(me, p);
    size_t width[2] = {t->a.in * t->wire_es, t->a.out * t->wire_es};
    const char *own[2] = {t->a.x, t->a.e};
    char *all[2] = {t->xall, t->eall};
    size_t per = (size_t)((t->max_rows + (uint64_t)t->choice.blocks - 1) /
                          (uint64_t)t->choice.blocks);
    size_t *first = t->piece_first;
    long first_step = (long)s->nsteps, join;

    first[0] = t->block_first[k];
    for (int j = 0; j < p; j++)
        first[j + 1] = first[j] + fc_piece_rows(t, j, k);
    for (int w = 0; w < 2; w++) {
        size_t mine = first[me + 1] - first[me];
        long prev = -1;

        if (mine > 0 && coll_sched_copy(s, all[w] + first[me] * width[w],
                                        own[w] + (size_t)k * per * width[w], mine * width[w],
                                        NULL, 0) < 0)
            return CHORUS_ERR_NO_MEMORY;
        for (int step = 0; step < p - 1; step++) {
            int sb = coll_ring_ag_send_block(me, p, step);
            int rb = coll_ring_ag_recv_block(me, p, step);
            uint32_t tag = (uint32_t)(((size_t)k * (size_t)(p - 1) + (size_t)step) * 2 +
                                      (size_t)w);
            size_t sbytes = (first[sb + 1] - first[sb]) * width[w];
            size_t rbytes = (first[rb + 1] - first[rb]) * width[w];

            /* A rank of no rows may pass NULL x and e: no address is formed from them then. */
            if (sbytes > 0 &&
                coll_sched_send(s, right, tag,
                                step == 0 ? own[w] + (size_t)k * per * width[w]
                                          : all[w] + first[sb] * width[w],
                                sbytes, &prev, 1) < 0)
                return CHORUS_ERR_NO_MEMORY;
            prev = -1;
            if (rbytes > 0 &&
                (prev = coll_sched_recv(s, left, tag, all[w] + first[rb] * width[w], rbytes,
                                        NULL, 0)) < 0)
                return CHORUS_ERR_NO_MEMORY;
        }
    }
    join = coll_sched_join_since(s, first_step);
    if (join == -2)
        return CHORUS_ERR_NO_MEMORY;
    t->block_join[k] = join;   /* -1: nothing to wait for */
    return CHORUS_OK;
}

/* The late schedule: every block's gathers, posted at once; blocks complete in order. */
static chorus_status_t fc_late_build(fc_task_t *t)
{
    int blocks = t->choice.blocks;
    size_t total, biggest = 0;
    chorus_status_t status;

    t->block_first = calloc((size_t)blocks + 1, sizeof(*t->block_first));
    t->block_join = calloc((size_t)blocks, sizeof(*t->block_join));
    if (t->block_first == NULL || t->block_join == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int k = 0; k < blocks; k++) {
        size_t rows = 0;

        for (int j = 0; j < t->a.size; j++)
            rows += fc_piece_rows(t, j, k);
        t->block_first[k + 1] = t->block_first[k] + rows;
        biggest = rows > biggest ? rows : biggest;
    }
    total = t->block_first[blocks];
    status = coll_sched_create(t->pool, t->acc, CHORUS_SUM, t->a.size, &t->late);
    if (status != CHORUS_OK)
        return status;
    if (total > 0) {
        t->xall = coll_sched_alloc(t->late, total * t->a.in * t->wire_es);
        t->eall = coll_sched_alloc(t->late, total * t->a.out * t->wire_es);
        if (t->xall == NULL || t->eall == NULL)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (t->acc_es != t->wire_es && fc_widen_room(t, biggest) != CHORUS_OK)
        return CHORUS_ERR_NO_MEMORY;
    for (int k = 0; k < blocks; k++) {
        if ((status = fc_late_block(t, k)) != CHORUS_OK)
            return status;
    }
    status = coll_sched_bind(t->late, t->port, t->tag_base | FC_TAG_LATE);
    if (status == CHORUS_OK)
        status = chorus__task_post(&t->late->head);
    return status;
}

/* ---- the task ------------------------------------------------------------ */

/* Over with status; the allreduce's turns are given up if it never ran. */
static int fc_end(fc_task_t *t, chorus_status_t status)
{
    fc_jobs_stop(t);
    if (t->allreduce != NULL && t->allreduce->state == CHORUS__TASK_NEW)
        chorus__task_skip(t->allreduce, status);
    t->phase = FC_OVER;
    t->head.status = status;
    return 1;
}

/*
 * A sub-task's progress: 1 over with OK, 0 running, -1 over with an error
 * (its status says which), or a fault in *fault_p (then the return is -1 too).
 */
static int fc_sub(fc_task_t *t, chorus__task_t *sub, int *fault_p)
{
    int rc = chorus__task_progress(sub);

    *fault_p = 0;
    if (rc < 0) {
        t->head.failed_peer = sub->failed_peer;
        *fault_p = rc;
        return -1;
    }
    if (rc == 0)
        return 0;
    return sub->status == CHORUS_OK ? 1 : -1;
}

static chorus_status_t fc_decide(fc_task_t *t)
{
    coll_fc_shape_t shape;
    chorus_status_t status = fc_agree(t, &shape);

    if (status != CHORUS_OK)
        return status;
    for (int j = 0; j < t->a.size; j++)
        t->max_rows = t->rows[j] > t->max_rows ? t->rows[j] : t->max_rows;
    coll_fc_choose(&shape, t->env, t->allreduce_alg, t->a.force, t->a.blocks, &t->choice);
    chorus_debug("rank %d: fc_weight_grad %zu x %zu: %s (late %.3g s in %d blocks, allreduce "
                 "%.3g s)", t->a.rank, t->a.out, t->a.in,
                 coll_fc_strategy_name(t->choice.strategy), t->choice.late_s,
                 t->choice.blocks, t->choice.allreduce_s);
    if (t->choice.strategy == COLL_FC_ALLREDUCE) {
        if (t->acc_es != t->wire_es && fc_widen_room(t, t->a.rows) != CHORUS_OK)
            return CHORUS_ERR_NO_MEMORY;
        fc_jobs_start(t, t->acc_owned ? 2 : 1);
        fc_jobs_ready(t, 1);
        t->phase = FC_AR_PRODUCT;
        return CHORUS_OK;
    }
    chorus__task_skip(t->allreduce, CHORUS_OK);
    status = fc_late_build(t);
    if (status != CHORUS_OK)
        return status;
    fc_jobs_start(t, t->choice.blocks);
    t->phase = FC_LATE;
    return CHORUS_OK;
}

static chorus_status_t fc_post(chorus__task_t *task)
{
    return chorus__task_post(fc_of(task)->meta);
}

static int fc_progress(chorus__task_t *task)
{
    fc_task_t *t = fc_of(task);
    chorus_status_t status;
    int rc, fault;

    switch (t->phase) {
    case FC_META:
        rc = fc_sub(t, t->meta, &fault);
        if (fault)
            return fault;
        if (rc == 0)
            return 0;
        if (rc < 0)
            return fc_end(t, t->meta->status);
        if ((status = fc_decide(t)) != CHORUS_OK)
            return fc_end(t, status);
        return fc_progress(task);
    case FC_AR_PRODUCT:
        if (fc_jobs_done(t) < 1)
            return 0;
        if ((status = chorus__task_post(t->allreduce)) != CHORUS_OK)
            return fc_end(t, status);
        t->phase = FC_AR_REDUCE;
        /* fall through */
    case FC_AR_REDUCE:
        rc = fc_sub(t, t->allreduce, &fault);
        if (fault)
            return fault;
        if (rc == 0)
            return 0;
        if (rc < 0 || !t->acc_owned)
            return fc_end(t, rc < 0 ? t->allreduce->status : CHORUS_OK);
        fc_jobs_ready(t, 2);
        t->phase = FC_AR_NARROW;
        /* fall through */
    case FC_AR_NARROW:
        return fc_jobs_done(t) < 2 ? 0 : fc_end(t, CHORUS_OK);
    case FC_LATE: {
        int ready = 0;

        if (!t->late_over) {
            rc = fc_sub(t, &t->late->head, &fault);
            if (fault)
                return fault;
            if (rc < 0)
                return fc_end(t, t->late->head.status);
            t->late_over = rc == 1;
        }
        while (ready < t->choice.blocks && coll_sched_step_done(t->late, t->block_join[ready]))
            ready++;
        fc_jobs_ready(t, ready);
        return t->late_over && fc_jobs_done(t) == t->choice.blocks ? fc_end(t, CHORUS_OK) : 0;
    }
    case FC_OVER:
        break;
    }
    return 1;
}

/*
 * The allreduce may run on a node team, whose task polls shared memory: the
 * progress thread must sleep on that, not on the transports. The other
 * phases wait for transfers, or for the product thread, which wakes it.
 */
static int fc_wait(chorus__task_t *task, unsigned max_us)
{
    fc_task_t *t = fc_of(task);

    return t->phase == FC_AR_REDUCE ? chorus__task_wait(t->allreduce, max_us) : 0;
}

static void fc_skip(chorus__task_t *task, chorus_status_t status)
{
    fc_end(fc_of(task), status);
}

static void fc_fail(chorus__task_t *task, chorus_status_t status)
{
    fc_task_t *t = fc_of(task);

    chorus__task_fail(t->meta, status);
    chorus__task_fail(t->allreduce, status);
    if (t->late != NULL)
        chorus__task_fail(&t->late->head, status);
}

static void fc_finalize(chorus__task_t *task)
{
    fc_task_t *t = fc_of(task);

    fc_jobs_stop(t);
    chorus__task_finalize(t->meta);
    chorus__task_finalize(t->allreduce);
    if (t->late != NULL)
        coll_sched_finalize(t->late);
    coll_pool_put(t->pool, t->acc_mem);
    coll_pool_put(t->pool, t->wide_mem);
    free(t->metas);
    free(t->rows);
    free(t->piece_first);
    free(t->block_first);
    free(t->block_join);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

static const char *fc_served_by(const chorus__task_t *task)
{
    const fc_task_t *t = (const fc_task_t *)task;

    return t->phase == FC_OVER && t->choice.strategy != COLL_FC_AUTO
               ? coll_fc_strategy_name(t->choice.strategy)
               : NULL;
}

static const chorus__task_ops_t fc_task_ops = {
    .name = "fc_weight_grad",
    .post = fc_post,
    .progress = fc_progress,
    .wait = fc_wait,
    .skip = fc_skip,
    .fail = fc_fail,
    .finalize = fc_finalize,
    .served_by = fc_served_by,
};

chorus_status_t coll_fc_task_create(const coll_fc_args_t *args, const coll_env_t *env,
                                    const coll_alg_t *allreduce_alg, tl_port_t *port,
                                    uint64_t tag_base, coll_scratch_pool_t *pool,
                                    void (*wake)(void *), void *wake_arg,
                                    chorus__task_t **task_p)
{
    fc_task_t *t;
    coll_args_t meta, reduce;
    chorus_status_t status;

    if (args->size < 1 || allreduce_alg == NULL)
        return CHORUS_ERR_INVALID_ARG;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    chorus__task_init(&t->head, &fc_task_ops, 0);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    t->a = *args;
    t->env = env;
    t->allreduce_alg = allreduce_alg;
    t->port = port;
    t->tag_base = tag_base;
    t->pool = pool;
    t->wake = wake;
    t->wake_arg = wake_arg;
    t->acc = coll_fc_acc_dtype(args->dtype);
    t->wire_es = chorus_dtype_size(args->dtype);
    t->acc_es = chorus_dtype_size(t->acc);
    t->acc_buf = args->grad;
    t->choice.strategy = COLL_FC_AUTO;
    status = CHORUS_ERR_NO_MEMORY;
    t->metas = calloc((size_t)args->size, sizeof(*t->metas));
    t->rows = calloc((size_t)args->size, sizeof(*t->rows));
    t->piece_first = calloc((size_t)args->size + 1, sizeof(*t->piece_first));
    if (t->metas == NULL || t->rows == NULL || t->piece_first == NULL)
        goto fail;
    if (t->acc_es != t->wire_es) {
        t->acc_mem = coll_pool_get(pool, args->in * args->out * t->acc_es);
        t->acc_buf = t->acc_mem.mem;
        if (t->acc_buf == NULL)
            goto fail;
        t->acc_owned = 1;
    }
    fc_meta_fill(t);
    meta = (coll_args_t){.coll = COLL_ALLGATHER, .sendbuf = &t->mine, .recvbuf = t->metas,
                         .count = sizeof(fc_meta_t), .dtype = CHORUS_UINT8, .op = CHORUS_SUM,
                         .rank = args->rank, .size = args->size,
                         .chunk_bytes = args->chunk_bytes, .mem = COLL_MEM_HOST};
    status = coll_alg_task(&coll_ring_allgather, &meta, env, port, tag_base | FC_TAG_META, pool,
                           &t->meta);
    if (status != CHORUS_OK)
        goto fail;
    reduce = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = t->acc_buf, .recvbuf = t->acc_buf,
                           .count = args->in * args->out, .dtype = t->acc, .op = CHORUS_SUM,
                           .rank = args->rank, .size = args->size,
                           .chunk_bytes = args->chunk_bytes, .mem = COLL_MEM_HOST};
    status = coll_alg_task(allreduce_alg, &reduce, env, port, tag_base, pool, &t->allreduce);
    if (status != CHORUS_OK)
        goto fail;
    *task_p = &t->head;
    return CHORUS_OK;
fail:
    fc_finalize(&t->head);
    return status;
}
