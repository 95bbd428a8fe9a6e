/*
 * Collective transports. A team is a group of ranks of a communicator that
 * one collective transport serves as a whole: shared memory serves ranks
 * that share a node. The transport runs a collective on a team as a task
 * (task.h) and prices each collective it offers, so the selection can weigh
 * it against the algorithms and the hierarchical algorithms can run their
 * node-local stages on it.
 *
 * A team is made collectively by its members, in three steps that the core
 * drives, exchanging what the transport writes over the communicator:
 *
 *   1. team_card: every member prepares its part and writes a card
 *      (at most TL_TEAM_CARD_MAX bytes), for instance where its memory is;
 *   2. team_create: from every member's card, in member order, it joins
 *      the others' parts; *flags_p says what worked (TL_TEAM_OK and the
 *      transport's own bits);
 *   3. team_seal: with the flags every member of every team of the
 *      communicator agreed on (a bitwise AND) and the cores the members of
 *      a node run on at once, fewest of any node; a team whose agreed
 *      flags lack TL_TEAM_OK is destroyed instead.
 *
 * Members are numbered 0 .. size-1; a collective's coll_args_t uses these
 * positions. Calls on one team run one at a time in the order their tasks
 * were created, so every member must create them in the same order; a task
 * may be driven by any one thread at a time, and the next one by another.
 */
#ifndef CHORUS_TL_TEAM_H
#define CHORUS_TL_TEAM_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "transports/base/coll_args.h"
#include "transports/base/task.h"
#include "util/config.h"

#define TL_TEAM_CARD_MAX 64

/* Team flags: bit 0 is common, the rest the transport's own. */
#define TL_TEAM_OK 1u

typedef struct tl_coll_ctx tl_coll_ctx_t;
typedef struct tl_team tl_team_t;

/* Parameters of a collective transport's context: one per process context. */
typedef struct {
    int rank;                   /* in the process context */
    int size;
} tl_coll_ctx_params_t;

/* What pricing needs to know of a team, also of one that does not exist (chorus-info). */
typedef struct {
    int size;                   /* members */
    int cores;                  /* cores the members run on at once; 0: as many as members */
    uint32_t flags;             /* agreed team flags */
} tl_team_desc_t;

/* tl_coll_variant_t.mems: the bit of a memory type. */
#define TL_MEM(mem) (1u << (mem))

/* One way a transport runs collectives, under the name selection and CHORUS_TUNE use. */
typedef struct {
    const char *name;           /* "shm", "shm_slice", ... */
    uint32_t colls;             /* bit (1 << coll_type_t) of every collective it runs */
    uint32_t needs;             /* team flags it needs besides TL_TEAM_OK */
    int vforms;                 /* runs the v-forms of allgather and reduce_scatter */
    uint32_t mems;              /* TL_MEM of every memory type it runs on; 0: host only */
} tl_coll_variant_t;

typedef struct {
    const char *name;
    /* This transport's variables (NULL: none). */
    const chorus__config_table_t *config;

    /* The process's context; CHORUS_OK with *ctx_p NULL when turned off or unavailable. */
    chorus_status_t (*ctx_create)(const tl_coll_ctx_params_t *params, tl_coll_ctx_t **ctx_p);
    void (*ctx_destroy)(tl_coll_ctx_t *ctx);

    /* Step 1. *pending_p is handed to team_create, or to team_abandon. */
    chorus_status_t (*team_card)(tl_coll_ctx_t *ctx, int size, int me, void *card,
                                 size_t *len_p, void **pending_p);
    /* Drop what team_card prepared, when the team will not be created. */
    void (*team_abandon)(tl_coll_ctx_t *ctx, void *pending);
    /* Step 2: cards + j * TL_TEAM_CARD_MAX is member j's card. Takes pending over. */
    chorus_status_t (*team_create)(tl_coll_ctx_t *ctx, void *pending, const void *cards,
                                   int size, int me, tl_team_t **team_p, uint32_t *flags_p);
    /* Step 3. */
    void (*team_seal)(tl_team_t *team, uint32_t flags, int cores);
    void (*team_destroy)(tl_team_t *team);
    /* A fault elsewhere: members waiting on this rank stop waiting (their calls fail). */
    void (*team_fail)(tl_team_t *team, chorus_status_t status);

    /* The variants, and what a call of bytes (coll_args_bytes) costs with one, in seconds. */
    const tl_coll_variant_t *variants;
    int nvariants;
    double (*price)(const tl_coll_ctx_t *ctx, const tl_team_desc_t *team, int variant,
                    coll_type_t coll, size_t bytes);

    /* The task of one call; takes the team's next turn. */
    chorus_status_t (*task_create)(tl_team_t *team, const coll_args_t *args, int variant,
                                   chorus__task_t **task_p);
} tl_coll_ops_t;

/* Every collective transport built in, NULL-terminated. */
extern const tl_coll_ops_t *const tl_coll_all[];

/* Whether variant v of ops runs coll on a team with these flags (and the v-form when vform).
   Inline, as the next: every call on a team asks both. */
static inline int tl_coll_variant_runs(const tl_coll_ops_t *ops, int v, coll_type_t coll,
                                       uint32_t flags, int vform)
{
    const tl_coll_variant_t *var;

    if (ops == NULL || v < 0 || v >= ops->nvariants || (unsigned)coll >= COLL_TYPE_COUNT)
        return 0;
    var = &ops->variants[v];
    if (!(var->colls & (1u << coll)) || (flags & (TL_TEAM_OK | var->needs)) !=
                                             (TL_TEAM_OK | var->needs))
        return 0;
    return !vform || var->vforms;
}

/* Whether variant v of ops runs on buffers in mem. */
static inline int tl_coll_variant_serves(const tl_coll_ops_t *ops, int v, coll_mem_t mem)
{
    uint32_t mems;

    if (ops == NULL || v < 0 || v >= ops->nvariants || (unsigned)mem >= COLL_MEM_TYPE_COUNT)
        return 0;
    mems = ops->variants[v].mems ? ops->variants[v].mems : TL_MEM(COLL_MEM_HOST);
    return (mems & TL_MEM(mem)) != 0;
}

#endif
