/*
 * The training engine (chorus_engine(3)): named tensors submitted in any
 * order, reduced once every rank has submitted them, fused into buckets.
 *
 * An engine owns two communicators duplicated from the user's: one for its
 * negotiation, one for its buckets, so that neither waits behind the
 * other's calls or the user's. Its thread runs cycles; in each, every rank
 * contributes one vector to one allreduce (minimum of bytes) on the
 * negotiation communicator:
 *
 *   header   flags every rank must share for the cycle to skip a stage: no
 *            new names here, no stall check wanted, not stopping, idle;
 *   bitmap   one byte per agreed name id: 1 when this rank holds a
 *            submission of it that is ready to go.
 *
 * The minimum is the AND of every rank's bits: the names ready everywhere.
 * Recursive doubling takes ceil(log2 p) rounds, so no rank handles more
 * than about 2 ceil(log2 p) messages per cycle and no rank coordinates.
 * A cycle in which some rank holds names the others have no id for also
 * gathers every rank's new names and their descriptions; every rank merges
 * them in rank order, so all give the same ids (engine_names.c). Steady
 * cycles carry only the header and the bitmap.
 *
 * The names ready everywhere are cut into buckets in id order, grouped by
 * (kind, dtype, op, root), up to bucket_bytes each (engine_bucket.c); each
 * bucket is one call on the bucket communicator, a composite task whose
 * last step unpacks the bucket and completes the submissions' requests on
 * the progress thread.
 */
#ifndef CHORUS_ENGINE_H
#define CHORUS_ENGINE_H

#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "core/comm.h"
#include "engine/engine_config.h"
#include "tuning/autotune.h"

typedef enum {
    ENGINE_ALLREDUCE = 0,
    ENGINE_BROADCAST,
    ENGINE_ALLGATHER,
    ENGINE_KIND_COUNT
} engine_kind_t;

/* What a name stands for; every rank submits it alike. */
typedef struct {
    uint8_t kind;           /* engine_kind_t */
    uint8_t dtype;
    uint8_t op;             /* allreduce only, else 0 */
    uint8_t wire;           /* allreduce: CHORUS_FLOAT16, _BFLOAT16 compressed; else CHORUS_DTYPE_COUNT */
    int32_t root;           /* broadcast only, else 0 */
    uint64_t count;         /* allgather: elements per rank */
} engine_desc_t;

/* Longest name, in bytes. */
#define ENGINE_NAME_MAX 255
/* Most names an engine gives ids to. */
#define ENGINE_NAMES_MAX (1u << 20)

typedef struct engine_name engine_name_t;

/* One submission of a name on this rank. */
typedef struct engine_sub {
    chorus_request_t req;
    engine_name_t *name;
    engine_desc_t desc;
    const void *sendbuf;
    void *recvbuf;
    int device;                 /* a buffer is CUDA device memory: copied through the bucket */
    double submitted_at;
    int announce;               /* to be described in the next exchange of names */
    struct engine_sub *next;    /* in a bucket */
} engine_sub_t;

struct engine_name {
    char *name;
    int64_t id;                 /* agreed by every rank; -1: known only here so far */
    engine_desc_t desc;         /* as described by the first rank that did */
    int described_by;           /* that rank; -1: none yet, or a conflict undid it */
    int round_done;             /* the round so described went into a bucket on every rank:
                                   the next round may be described anew */
    uint64_t conflict_merge;    /* the merge in which it last conflicted (0: never) */
    uint64_t tune_round;        /* the autotuner's training round it last went in (0: none) */
    engine_sub_t *pending;      /* this rank's submission not yet in a bucket */
    uint32_t owed_failures;     /* submissions to come here that already failed elsewhere */
    struct engine_name *hash_next;
};

/* The names of an engine: a hash table, and the agreed ones by id. */
typedef struct {
    engine_name_t **buckets;
    size_t nbuckets;
    size_t count;               /* entries in the table */
    engine_name_t **by_id;      /* [nids] */
    size_t nids;
    size_t ids_capacity;
    uint64_t merges;            /* exchanges merged so far */
} engine_names_t;

/* Counters, printed at destroy (CHORUS_LOG_LEVEL=info). */
typedef struct {
    uint64_t submissions;
    uint64_t cycles;
    uint64_t name_exchanges;
    uint64_t stall_checks;
    uint64_t buckets;
    uint64_t bucket_bytes;      /* bytes of the buckets' collectives */
    uint64_t messages;          /* transfers of the negotiation (sends and receives) */
    uint64_t max_steady_messages;   /* most in a cycle that exchanged only the bitmap */
    uint64_t conflicts;
    coll_compress_counts_t compress;    /* buckets compressed, and fallen back to float32 */
} engine_counters_t;

typedef struct engine_bucket engine_bucket_t;

struct chorus_engine {
    chorus_comm_t comm;         /* the user's: submissions' requests belong to it */
    chorus_comm_t neg;          /* negotiation */
    chorus_comm_t data;         /* buckets */
    int rank;
    int size;
    size_t bucket_bytes;
    double cycle_s;
    double stall_warn_s;        /* 0: no stall reports */
    double timeout_s;

    pthread_t thread;
    pthread_mutex_t lock;       /* everything below */
    pthread_cond_t cond;        /* the thread's sleep between cycles */
    int stopping;               /* destroy called here */
    chorus_status_t fault;      /* the engine failed: every submission fails with it */
    engine_names_t names;
    size_t nannounce;           /* submissions waiting to be described to the other ranks */
    size_t ready_bytes;         /* bytes of submissions that could go in the next cycle */
    engine_bucket_t *in_flight; /* buckets posted and not yet reaped */
    coll_scratch_pool_t pool;   /* fusion buffers */
    double last_stall_check;
    engine_counters_t counters;

    /* CHORUS_AUTOTUNE (engine_tune.c): the engine thread's only */
    tune_search_t *tune;        /* NULL: off */
    unsigned tune_keep;         /* ENGINE_KEEP_*: settings chosen by the user on some rank */
    double tune_window_s;       /* seconds per sample, at least */
    uint64_t tune_round;        /* training rounds begun: a name taken again starts one */
    uint64_t tune_round_seen;   /* tune_round at the last look */
    uint64_t tune_mark_round;   /* tune_round at the last sample */
    uint64_t tune_taken_bytes;  /* bytes of every name taken into a bucket */
    uint64_t tune_round_bytes;  /* tune_taken_bytes when this round began */
    uint64_t tune_mark_bytes;   /* the bytes the last sample counted to */
    double tune_mark_t;
    double tune_t0;
    FILE *tune_log;             /* rank 0, CHORUS_AUTOTUNE_LOG */
};

/* ---- names (engine_names.c) ---------------------------------------------- */

void engine_names_init(engine_names_t *names);
void engine_names_free(engine_names_t *names);
engine_name_t *engine_names_find(const engine_names_t *names, const char *name);
/* A new entry without id; NULL when out of memory. */
engine_name_t *engine_names_add(engine_names_t *names, const char *name);
/* Give entry the next id; CHORUS_ERR_NO_MEMORY, or INVALID_ARG past ENGINE_NAMES_MAX. */
chorus_status_t engine_names_agree(engine_names_t *names, engine_name_t *entry);

int engine_desc_equal(const engine_desc_t *a, const engine_desc_t *b);
/* "1000 x float32 sum", "64 x int8 broadcast from 2", "16 x float64 allgather". */
void engine_desc_format(const engine_desc_t *d, char *buf, size_t len);
/* Bytes the call of d moves into recvbuf on each rank, for bucket sizes. */
size_t engine_desc_bytes(const engine_desc_t *d, int size);

/*
 * The announcements of this rank: each submission flagged announce, as
 * (name, description) records, into a buffer of *len_p bytes (malloc'd;
 * NULL and 0 when there are none). Returns CHORUS_ERR_NO_MEMORY on failure.
 */
chorus_status_t engine_names_pack(chorus_engine_t engine, void **buf_p, size_t *len_p);
/*
 * Merge every rank's announcements (size blocks of stride bytes, rank r's
 * lens[r] of them used), in rank order: names without an id get the next
 * one, and names without a description the first rank's that announced
 * them; a name announced with another description is a conflict: the
 * current submission of it fails on every rank (logged with both ranks and
 * descriptions), and the name's next submissions describe it afresh. Same
 * arguments on every rank, same outcome. Engine lock held.
 * CHORUS_ERR_PROTOCOL for a malformed record.
 */
chorus_status_t engine_names_merge(chorus_engine_t engine, const uint8_t *all, size_t stride,
                                   const uint64_t *lens);

/* ---- buckets (engine_bucket.c) ------------------------------------------- */

/*
 * Cut the submissions in ready (n of them, in id order) into buckets and
 * post them on the bucket communicator, in the same order on every rank.
 * On failure the submissions not posted are failed with the status.
 */
chorus_status_t engine_buckets_post(chorus_engine_t engine, engine_sub_t **ready, size_t n);
/*
 * Reap the buckets that are over: free them, and fail the submissions of
 * one that failed. With wait set, wait for every bucket first. Returns the
 * first failure, or CHORUS_OK.
 */
chorus_status_t engine_buckets_reap(chorus_engine_t engine, int wait);

/* ---- submissions (engine_api.c) ------------------------------------------ */

/* Complete sub's request with status and free sub (any thread, engine lock not needed). */
void engine_sub_finish(engine_sub_t *sub, chorus_status_t status);

/* ---- the autotuner (engine_tune.c) ----------------------------------------- */

/* A setting the user chose (in opts or the environment), which the autotuner keeps. */
#define ENGINE_KEEP_BUCKET 1u
#define ENGINE_KEEP_CYCLE 2u

/* Ready tuning when cfg asks for it (its settings checked, its log opened). */
chorus_status_t engine_tune_init(chorus_engine_t engine, const engine_config_t *cfg);
/*
 * Start the search, once the ranks agreed on the fewest network streams any
 * opens and on the settings to keep (engine->tune_keep, chosen on any
 * rank): the others move to the grid's point nearest them. With nothing
 * left to tune, the autotuner stops here.
 */
void engine_tune_start(chorus_engine_t engine, int streams);
/* e, of bytes, goes into a bucket on every rank in this cycle (engine lock held). */
void engine_tune_taken(chorus_engine_t engine, engine_name_t *e, size_t bytes);
/* After each cycle, on the engine thread: a sample once every rank's window is over. */
chorus_status_t engine_tune_cycle(chorus_engine_t engine);
void engine_tune_free(chorus_engine_t engine);

/* ---- cycles (engine_cycle.c) --------------------------------------------- */

void *engine_thread_main(void *arg);
/* Fail every submission waiting on this rank with status (engine lock held). */
void engine_fail_pending(chorus_engine_t engine, chorus_status_t status, const char *why);

#endif
