/* What the core adds to the trace (see core_trace.h). */
#include "core/core_trace.h"

#include <stdio.h>

#include "topology/node.h"
#include "util/log.h"
#include "util/time.h"

chorus_status_t chorus__trace_open(chorus__ctx_t *ctx)
{
    char node[CHORUS__TRACE_DOMAIN_MAX];

    if (ctx->cfg.trace.s[0] == '\0')
        return CHORUS_OK;
    /* The processes of one node (one boot) read one monotonic clock. */
    if (chorus__node_identity(node, sizeof(node)) != CHORUS_OK)
        node[0] = '\0';
    return chorus__trace_create(ctx->cfg.trace.s, ctx->rank, ctx->size, ctx->cfg.trace_events,
                                node, &ctx->trace);
}

void chorus__trace_comm_ready(chorus_comm_t comm)
{
    const coll_team_t *team = comm->env.node_team;

    snprintf(comm->trace_via, sizeof(comm->trace_via), "%.19s+%.19s", chorus__ctx_net_name(comm->ctx),
             team != NULL ? team->ops->name : "team");
    /* The last creation exchange of the job's communicator ends on every rank together. */
    if (comm->space == 0)
        chorus__trace_sync(comm->ctx->trace, chorus__now());
}

const char *chorus__trace_task(chorus_comm_t comm, chorus__task_t *task, const coll_alg_t *alg,
                               int setup)
{
    const char *team = coll_task_team_name(task);
    uint32_t tid = setup ? comm->space | CHORUS__SPACE_SETUP : comm->space;

    coll_task_trace(task, comm->ctx->trace, tid);
    if (alg->team_ops != NULL)
        return alg->team_ops->name;
    if (team == NULL)
        return chorus__ctx_net_name(comm->ctx);
    return comm->trace_via;
}

void chorus__trace_call(chorus_comm_t comm, const char *call, const coll_args_t *args,
                        const char *alg, const char *via, uint64_t seq, int setup, double start,
                        chorus_status_t status)
{
    char name[CHORUS__TRACE_NAME_MAX], text[CHORUS__TRACE_ARGS_MAX], root[24] = "";
    double end = chorus__now();
    int rooted = args->coll == COLL_BROADCAST || args->coll == COLL_REDUCE;
    uint32_t tid = setup ? comm->space | CHORUS__SPACE_SETUP : comm->space;

    snprintf(name, sizeof(name), "%s%s", setup ? "setup " : "", call);
    if (rooted)
        snprintf(root, sizeof(root), ",\"root\":%d", args->root);
    snprintf(text, sizeof(text), "\"seq\":%llu,\"comm\":%u,\"bytes\":%zu,\"count\":%zu,"
             "\"dtype\":\"%s\",\"op\":\"%s\"%s,\"alg\":\"%s\",\"via\":\"%s\",\"status\":\"%s\"",
             (unsigned long long)seq, comm->space, coll_args_bytes(args), args->count,
             chorus_dtype_name(args->dtype), coll_type_reduces(args->coll) ?
             chorus_op_name(args->op) : "none", root, alg, via != NULL ? via : "",
             chorus_status_string(status));
    chorus__trace_slice(comm->ctx->trace, tid, setup ? "setup" : "call", name, start, end, text);
    if (status != CHORUS_OK) {
        snprintf(text, sizeof(text), "rank %d: %s #%llu (%s) failed: %s", comm->rank, name,
                 (unsigned long long)seq, alg, chorus_status_string(status));
        chorus__trace_instant(comm->ctx->trace, tid, "error", "call failed", end, text);
        /*
         * An error of this call alone (the context carries on) is written now;
         * after a fault of the context, its own flush already was.
         */
        if (chorus__ctx_error(comm->ctx) == CHORUS_OK)
            chorus__trace_flush(comm->ctx->trace);
    }
}

void chorus__trace_fault(chorus__ctx_t *ctx, uint32_t tid, const char *what, const char *msg)
{
    chorus__trace_instant(ctx->trace, tid, "error", what, chorus__now(), msg);
    chorus__trace_flush(ctx->trace);
}

void chorus__trace_note(chorus_comm_t comm, const char *cat, const char *name,
                        const char *text)
{
    chorus__trace_instant(comm->ctx->trace, comm->space, cat, name, chorus__now(), text);
}

void chorus__trace_stall(chorus_comm_t comm, const char *text)
{
    chorus__trace_note(comm, "stall", "stall report", text);
}
