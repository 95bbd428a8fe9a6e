/*
 * The public fully-connected gradient calls: check every argument, then
 * post the task of src/coll/fc_task.c. A call refused for its arguments on
 * a communicator keeps its place in the sequence, as every collective does
 * (refusal.h).
 */
#include <stdint.h>
#include <stdio.h>

#include "coll/fc.h"
#include "core/comm.h"
#include "core/refusal.h"
#include "reduce/device.h"
#include "util/log.h"
#include "util/mem_bound.h"

#define FC_FLAGS (CHORUS_FLAG_FC_LATE | CHORUS_FLAG_FC_ALLREDUCE)

/* [a, a+alen) and [b, b+blen) share a byte. */
static int ranges_overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;

    if (a == NULL || b == NULL || alen == 0 || blen == 0)
        return 0;
    return pa < pb + blen && pb < pa + alen;
}

/* a * b, or 0 with *overflow set when it does not fit in size_t. */
static size_t mul(size_t a, size_t b, int *overflow)
{
    if (b != 0 && a > SIZE_MAX / b) {
        *overflow = 1;
        return 0;
    }
    return a * b;
}

static chorus_status_t fc_check(chorus_comm_t comm, const coll_fc_args_t *a,
                                const chorus_opts_t *opts, char *why, size_t len)
{
    size_t es = chorus_dtype_size(a->dtype), acc_es;
    size_t xbytes, ebytes, gbytes, accbytes;
    int overflow = 0;
    chorus_status_t status;

    if (comm == NULL) {
        snprintf(why, len, "invalid argument comm=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->dtype != CHORUS_FLOAT16 && a->dtype != CHORUS_BFLOAT16 &&
        a->dtype != CHORUS_FLOAT32 && a->dtype != CHORUS_FLOAT64) {
        snprintf(why, len, "invalid argument dtype=%d: fc_weight_grad takes float16, bfloat16, "
                 "float32 or float64", (int)a->dtype);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->in == 0 || a->out == 0) {
        snprintf(why, len, "invalid argument in_features=%zu out_features=%zu: both must be "
                 "at least 1", a->in, a->out);
        return CHORUS_ERR_INVALID_ARG;
    }
    acc_es = chorus_dtype_size(coll_fc_acc_dtype(a->dtype));
    xbytes = mul(mul(a->rows, a->in, &overflow), es, &overflow);
    ebytes = mul(mul(a->rows, a->out, &overflow), es, &overflow);
    gbytes = mul(mul(a->in, a->out, &overflow), es, &overflow);
    accbytes = mul(mul(a->in, a->out, &overflow), acc_es, &overflow);
    if (overflow || !chorus__mem_fits(a->x, xbytes) || !chorus__mem_fits(a->e, ebytes) ||
        !chorus__mem_fits(a->grad, gbytes) ||
        !chorus__mem_under_limit(accbytes > xbytes + ebytes ? accbytes : xbytes + ebytes)) {
        snprintf(why, len, "invalid argument rows=%zu in_features=%zu out_features=%zu: the "
                 "matrices do not fit in this process's memory (address space, PTRDIFF_MAX, "
                 "RLIMIT_AS)", a->rows, a->in, a->out);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->rows > 0 && (a->x == NULL || a->e == NULL)) {
        snprintf(why, len, "invalid argument %s=NULL with rows=%zu", a->x == NULL ? "x" : "e",
                 a->rows);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->grad == NULL) {
        snprintf(why, len, "invalid argument grad=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (ranges_overlap(a->grad, gbytes, a->x, xbytes) ||
        ranges_overlap(a->grad, gbytes, a->e, ebytes)) {
        snprintf(why, len, "invalid argument: grad=%p overlaps %s", a->grad,
                 ranges_overlap(a->grad, gbytes, a->x, xbytes) ? "x" : "e");
        return CHORUS_ERR_INVALID_ARG;
    }
    status = chorus__check_opts(opts, FC_FLAGS, why, len);
    if (status == CHORUS_OK && (chorus__opts_flags(opts) & FC_FLAGS) == FC_FLAGS) {
        snprintf(why, len, "invalid argument opts->flags=0x%x: CHORUS_FLAG_FC_LATE and "
                 "CHORUS_FLAG_FC_ALLREDUCE exclude each other", opts->flags);
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status == CHORUS_OK &&
        (chorus__opts_mem(opts) == CHORUS_MEM_CUDA || chorus__opts_stream(opts) != NULL ||
         chorus__device_ptr(a->x) || chorus__device_ptr(a->e) || chorus__device_ptr(a->grad))) {
        snprintf(why, len, "chorus_fc_weight_grad takes host buffers only, without a stream");
        status = CHORUS_ERR_UNSUPPORTED;
    }
    return status;
}

/* The strategy opts force, else CHORUS_TUNE's (the communicator's selection). */
static coll_fc_strategy_t fc_force(chorus_comm_t comm, const chorus_opts_t *opts)
{
    uint32_t flags = chorus__opts_flags(opts);

    if (flags & CHORUS_FLAG_FC_LATE)
        return COLL_FC_LATE;
    if (flags & CHORUS_FLAG_FC_ALLREDUCE)
        return COLL_FC_ALLREDUCE;
    return comm->select->fc;
}

static void fc_wake(void *ctx)
{
    chorus__progress_wake(ctx);
}

static chorus_status_t fc_make(chorus_comm_t comm, void *arg, uint64_t tag_base,
                               chorus__task_t **task_p)
{
    const coll_fc_args_t *a = arg;
    chorus_dtype_t acc = coll_fc_acc_dtype(a->dtype);
    size_t bytes = a->in * a->out * chorus_dtype_size(acc);
    const coll_alg_t *alg = coll_select_call(comm->select, COLL_ALLREDUCE, COLL_MEM_HOST, bytes,
                                             comm->rank);

    if (alg == NULL) {
        chorus_error("rank %d: no algorithm runs the allreduce of fc_weight_grad's %zu bytes",
                     comm->rank, bytes);
        return CHORUS_ERR_UNSUPPORTED;
    }
    return coll_fc_task_create(a, &comm->env, alg, &comm->port.port, tag_base,
                               &comm->ctx->scratch_pool, fc_wake, comm->ctx, task_p);
}

static chorus_status_t fc_start(const char *fn, const void *x, const void *e, size_t rows,
                                size_t in, size_t out, chorus_dtype_t dtype, void *grad,
                                chorus_comm_t comm, const chorus_opts_t *opts,
                                chorus_request_t *req_p)
{
    coll_fc_args_t a = {.x = x, .e = e, .rows = rows, .in = in, .out = out, .dtype = dtype,
                        .grad = grad};
    /* How the call appears in reports: the gradient it produces. */
    coll_args_t report = {.coll = COLL_ALLREDUCE, .recvbuf = grad, .dtype = dtype,
                          .op = CHORUS_SUM};
    char why[CHORUS__REFUSAL_WHY_MAX], named[CHORUS__REFUSAL_WHY_MAX];
    chorus_request_t req = NULL;
    chorus_status_t status, refused;

    if (req_p == NULL) {
        snprintf(why, sizeof(why), "invalid argument req_p=NULL");
        status = CHORUS_ERR_INVALID_ARG;
    } else {
        status = fc_check(comm, &a, opts, why, sizeof(why));
    }
    if (status != CHORUS_OK) {
        chorus_error("%s: %s", fn, why);
        if (comm == NULL)
            return status;
        /* The notice names no collective (peers log "call"): the reason names the call. */
        report.coll = COLL_TYPE_COUNT;
        snprintf(named, sizeof(named), "fc_weight_grad: %.*s", (int)sizeof(named) - 17, why);
        refused = chorus__call_refused(comm, "fc_weight_grad", &report, named, NULL);
        /* Over as a refused call: the reason here is this rank's own (an unsupported one too). */
        return refused == CHORUS_ERR_INVALID_ARG ? status : refused;
    }
    a.force = fc_force(comm, opts);
    a.blocks = comm->select->fc_blocks;
    a.rank = comm->rank;
    a.size = comm->size;
    a.chunk_bytes = comm->ctx->cfg.chunk_bytes;
    a.cores = comm->cores;
    report.count = in * out;
    status = chorus__call_made(comm, "fc_weight_grad", &report, fc_make, &a, &req);
    if (status == CHORUS_OK)
        *req_p = req;
    return status;
}

chorus_status_t chorus_fc_weight_grad(const void *x, const void *e, size_t rows,
                                      size_t in_features, size_t out_features,
                                      chorus_dtype_t dtype, void *grad, chorus_comm_t comm,
                                      const chorus_opts_t *opts)
{
    chorus_request_t req = NULL;
    chorus_status_t status = fc_start(__func__, x, e, rows, in_features, out_features, dtype,
                                      grad, comm, opts, &req);

    return status == CHORUS_OK ? chorus_request_free(req) : status;
}

chorus_status_t chorus_ifc_weight_grad(const void *x, const void *e, size_t rows,
                                       size_t in_features, size_t out_features,
                                       chorus_dtype_t dtype, void *grad, chorus_comm_t comm,
                                       const chorus_opts_t *opts, chorus_request_t *req_p)
{
    return fc_start(__func__, x, e, rows, in_features, out_features, dtype, grad, comm, opts,
                    req_p);
}
