/*
 * The training engine (chorus_engine(3)): named tensors submitted in a
 * different random order on every rank (one rank in reverse, one late),
 * allreduce of every dtype and op with odd and empty counts, in place and
 * not, broadcasts and allgathers among them, buckets of many tensors and
 * tensors larger than a bucket, names first seen in a later round, all
 * exact against expect.h; the same bits on every rank; an engine on a split
 * communicator; a name described differently on two ranks, and a name
 * described anew by every rank alike between rounds (and by one rank only,
 * in either order of submission, which fails at once on every rank); the stall
 * report; negotiation messages per cycle; bad arguments; a rank killed
 * while the others wait in a cycle.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "harness.h"

enum { RC_OK = 0, RC_SETUP = 20, RC_SUBMIT = 21, RC_RESULT = 22, RC_STATUS = 23,
       RC_LOG = 24, RC_MESSAGES = 25, RC_AFTER = 26 };

static const char *const rc_help =
    "20: setup, 21: a submission failed, 22: wrong result, 23: wrong status, 24: a message "
    "missing from the log, 25: too many negotiation messages, 26: the round after failed, "
    "-1: hung";

typedef enum { T_ALLREDUCE, T_BROADCAST, T_ALLGATHER } t_kind_t;

typedef struct {
    char name[48];
    t_kind_t kind;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    size_t count;           /* per rank for allgather */
    int in_place;
} tensor_t;

/* Tensor i of a run: the same list on every rank. */
static void tensor_of(int i, int size, tensor_t *t)
{
    memset(t, 0, sizeof(*t));
    t->kind = i % 7 == 3 ? T_BROADCAST : i % 11 == 5 ? T_ALLGATHER : T_ALLREDUCE;
    /* Half are float32 sums, so that buckets hold many; the rest go through every pair. */
    t->dtype = i % 2 == 0 ? CHORUS_FLOAT32 : (chorus_dtype_t)(i / 2 % CHORUS_DTYPE_COUNT);
    t->op = i % 2 == 0 ? CHORUS_SUM : (chorus_op_t)((i / 20) % CHORUS_OP_COUNT);
    t->root = (i / 7) % size;
    if (t->kind == T_ALLGATHER)
        t->dtype = CHORUS_INT32;
    t->count = i % 23 == 0 ? 0 : i % 13 == 1 ? 9001 : 1 + (size_t)(i * 37) % 301;
    t->in_place = i % 3 == 0;
    snprintf(t->name, sizeof(t->name), "layer%d.%s", i, i % 2 ? "weight" : "bias");
}

typedef struct {
    tensor_t t;
    char *send;
    char *recv;
    char *want;
    size_t compare;         /* elements of recv to compare */
    chorus_request_t req;
} slot_t;

/* Buffers and the expected result of t on rank; 0 when out of memory. */
static int slot_prepare(slot_t *s, const tensor_t *t, int rank, int size)
{
    size_t es = chorus_dtype_size(t->dtype), n = t->count, p = (size_t)size;
    size_t out = t->kind == T_ALLGATHER ? n * p : n;

    s->t = *t;
    s->recv = calloc(out + 1, es);
    s->want = calloc(out + 1, es);
    s->send = t->in_place ? NULL : calloc(n + 1, es);
    if (s->recv == NULL || s->want == NULL || (!t->in_place && s->send == NULL))
        return 0;
    s->compare = out;
    switch (t->kind) {
    case T_ALLREDUCE:
        expect_fill(t->op, t->dtype, rank, t->in_place ? s->recv : s->send, n, 0);
        expect_fill_reduced(t->op, t->dtype, size, s->want, n, 0);
        break;
    case T_BROADCAST:
        expect_fill(CHORUS_MAX, t->dtype, t->root + 1, s->want, n, 0);
        if (rank == t->root)
            memcpy(t->in_place ? s->recv : s->send, s->want, n * es);
        else if (!t->in_place)
            memset(s->send, 0x5a, n * es);
        break;
    case T_ALLGATHER:
        for (size_t r = 0; r < p; r++)
            expect_fill(CHORUS_MIN, t->dtype, (int)r, s->want + r * n * es, n, r);
        if (t->in_place)
            memcpy(s->recv + (size_t)rank * n * es, s->want + (size_t)rank * n * es, n * es);
        else
            memcpy(s->send, s->want + (size_t)rank * n * es, n * es);
        break;
    }
    return 1;
}

static void slot_free(slot_t *s)
{
    free(s->send);
    free(s->recv);
    free(s->want);
    memset(s, 0, sizeof(*s));
}

static chorus_status_t slot_submit(chorus_engine_t engine, slot_t *s, int rank)
{
    const tensor_t *t = &s->t;
    size_t es = chorus_dtype_size(t->dtype);
    const void *send = t->in_place ? s->recv : s->send;

    switch (t->kind) {
    case T_ALLREDUCE:
        return chorus_engine_allreduce(engine, t->name, send, s->recv, t->count, t->dtype,
                                       t->op, NULL, &s->req);
    case T_BROADCAST:
        return chorus_engine_broadcast(engine, t->name, send, s->recv, t->count, t->dtype,
                                       t->root, NULL, &s->req);
    default:
        if (t->in_place)
            send = s->recv + (size_t)rank * t->count * es;
        return chorus_engine_allgather(engine, t->name, send, s->recv, t->count, t->dtype,
                                       NULL, &s->req);
    }
}

/* A random order of n, seeded by rank and round; rank 1 goes in reverse. */
static void order_of(int *order, int n, int rank, int round)
{
    unsigned seed = (unsigned)(rank * 7919 + round * 104729 + 1);

    for (int i = 0; i < n; i++)
        order[i] = rank == 1 ? n - 1 - i : i;
    for (int i = n - 1; i > 0 && rank != 1; i--) {
        int j = (int)(rand_r(&seed) % (unsigned)(i + 1)), tmp = order[i];

        order[i] = order[j];
        order[j] = tmp;
    }
}

typedef struct {
    int ntensors;           /* in the first round; the second adds as many new names again */
    size_t bucket_bytes;
    int late_rank;          /* submits 100 ms after the others, or -1 */
} shuffle_arg_t;

/* One round: tensors first .. first + n - 1 in this rank's order, then check every result. */
static int run_round(chorus_engine_t engine, int rank, int size, int first, int n, int round,
                     int late)
{
    slot_t *slots = calloc((size_t)n, sizeof(*slots));
    int *order = calloc((size_t)n, sizeof(int)), rc = RC_OK;

    if (slots == NULL || order == NULL)
        rc = RC_SETUP;
    order_of(order, n, rank, round);
    if (late)
        usleep(100000);
    for (int k = 0; k < n && rc == RC_OK; k++) {
        slot_t *s = &slots[order[k]];
        tensor_t t;

        tensor_of(first + order[k], size, &t);
        if (!slot_prepare(s, &t, rank, size))
            rc = RC_SETUP;
        else if (slot_submit(engine, s, rank) != CHORUS_OK)
            rc = RC_SUBMIT;
        if (k % 16 == 5)
            usleep(500);    /* some tensors arrive while earlier ones are on the wire */
    }
    for (int i = 0; i < n && slots != NULL; i++) {
        char label[96];
        chorus_status_t status;

        if (slots[i].req == NULL)
            continue;
        status = chorus_request_free(slots[i].req);
        if (status != CHORUS_OK) {
            fprintf(stderr, "rank %d: tensor %s: %s\n", rank, slots[i].t.name,
                    chorus_status_string(status));
            rc = rc ? rc : RC_STATUS;
            continue;
        }
        snprintf(label, sizeof(label), "rank %d round %d %s", rank, round, slots[i].t.name);
        if (expect_compare(slots[i].t.dtype, slots[i].recv, slots[i].want, slots[i].compare,
                           label) != 0)
            rc = rc ? rc : RC_RESULT;
    }
    for (int i = 0; i < n && slots != NULL; i++)
        slot_free(&slots[i]);
    free(slots);
    free(order);
    return rc;
}

static int engine_with(chorus_comm_t comm, size_t bucket_bytes, chorus_engine_t *engine_p)
{
    chorus_engine_opts_t opts = CHORUS_ENGINE_OPTS_INIT;

    opts.bucket_bytes = bucket_bytes;
    return chorus_engine_create(comm, &opts, engine_p) == CHORUS_OK ? RC_OK : RC_SETUP;
}

static int shuffle_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const shuffle_arg_t *a = arg;
    chorus_engine_t engine;
    int rc = engine_with(comm, a->bucket_bytes, &engine);

    /* Round 0: the first names; round 1: the same names again and as many new ones. */
    if (rc == RC_OK)
        rc = run_round(engine, rank, size, 0, a->ntensors, 0, rank == a->late_rank);
    if (rc == RC_OK)
        rc = run_round(engine, rank, size, 0, 2 * a->ntensors, 1, 0);
    if (engine != NULL && chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

static void run_ranks(int nranks, harness_rank_fn fn, void *arg, double deadline_s,
                      const char *what)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 20, .deadline_s = deadline_s,
                           .kill_rank = -1};
    int status[8] = {0};

    cr_expect_eq(harness_run(&opts, fn, arg, status, NULL), 0,
                 "%s at %d ranks: exit codes %d %d %d %d %d %d %d %d (%s)", what, nranks,
                 status[0], status[1], status[2], status[3], status[4], status[5], status[6],
                 status[7], rc_help);
}

ParameterizedTestParameters(engine, shuffled)
{
    static int n[] = {1, 2, 3, 4, 5, 6, 7, 8};

    return cr_make_param_array(int, n, sizeof(n) / sizeof(n[0]));
}

/* Every rank count: 64 names, then 128 (64 new), in a different order on each rank. */
ParameterizedTest(int *nranks, engine, shuffled, .timeout = 240)
{
    shuffle_arg_t a = {.ntensors = 64, .bucket_bytes = 64 << 10, .late_rank = *nranks - 1};

    run_ranks(*nranks, shuffle_rank, &a, 200, "shuffled submissions");
}

/* Buckets of the default size: all the small tensors of a round in one or two buckets. */
Test(engine, default_buckets, .timeout = 120)
{
    shuffle_arg_t a = {.ntensors = 150, .bucket_bytes = 0, .late_rank = 0};

    run_ranks(3, shuffle_rank, &a, 100, "default bucket size");
}

/* ---- the autotuner ----------------------------------------------------------- */

#define AUTOTUNE_LOG_MAX 4096

typedef struct {
    char log[64];               /* CHORUS_AUTOTUNE_LOG */
    char trace[64];             /* CHORUS_TRACE's prefix */
    int streams;                /* CHORUS_TCP_STREAMS: the most the tuner may use */
    size_t bucket_bytes;        /* chorus_engine_opts_t.bucket_bytes on every rank (0: none) */
    int cycle_rank;             /* the rank that sets CHORUS_CYCLE_MS (-1: none) */
} autotuned_arg_t;

/* CHORUS_CYCLE_MS where autotuned_arg_t.cycle_rank sets it: off the tuner's grid. */
#define KEPT_CYCLE_MS 3.0

/* Moves of the autotuner in each of nranks' traces (removed after): the fewest any has. */
static int trace_autotune_moves(const char *prefix, int nranks)
{
    int fewest = INT_MAX;

    for (int r = 0; r < nranks; r++) {
        char path[96], line[1024];
        int moves = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s.%d.json", prefix, r);
        f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL)
            moves += strstr(line, "\"cat\":\"autotune\"") != NULL &&
                     strstr(line, "buckets of ") != NULL;
        if (f != NULL)
            fclose(f);
        unlink(path);
        fewest = moves < fewest ? moves : fewest;
    }
    return fewest;
}

/*
 * CHORUS_AUTOTUNE with short windows: 40 rounds of 64 names, exact every
 * time while the bucket size, cycle time and streams change under them;
 * rank 0's log has a header, samples, more than one bucket size tried,
 * stream counts from 1 to the most opened, more than one of them when that
 * is more than one, and samples that began and ended with a round (the same
 * names submitted again); every rank's trace shows the moves. A bucket size
 * the ranks set, and a cycle time one rank sets, stay as set in every
 * sample (rank 0's own cycle time, when another rank set its).
 */
static int autotuned_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const autotuned_arg_t *a = arg;
    const char *log = a->log;
    chorus_engine_t engine;
    int rc;
    char line[256], header[256];
    size_t sizes[AUTOTUNE_LOG_MAX];
    int nsizes = 0, rows = 0, streams_seen = 0, round_rows = 0;
    FILE *f;

    if (rank == a->cycle_rank)
        setenv("CHORUS_CYCLE_MS", "3", 1);
    rc = engine_with(comm, a->bucket_bytes, &engine);
    for (int round = 0; round < 40 && rc == RC_OK; round++)
        rc = run_round(engine, rank, size, 0, 64, round, 0);
    if (engine != NULL && chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    if (rc != RC_OK || rank != 0)
        return rc;
    f = fopen(log, "r");
    if (f == NULL || fgets(header, sizeof(header), f) == NULL ||
        strcmp(header, "cycle,seconds,bucket_bytes,cycle_ms,streams,rate,phase,rounds\n") != 0) {
        fprintf(stderr, "rank 0: no autotune log, or not its header\n");
        rc = RC_RESULT;
    }
    while (rc == RC_OK && fgets(line, sizeof(line), f) != NULL && rows < AUTOTUNE_LOG_MAX) {
        unsigned long long cycle, bucket, rounds;
        double seconds, cycle_ms, rate;
        int streams, known = 0;
        char phase[16];

        if (sscanf(line, "%llu,%lf,%llu,%lf,%d,%lf,%15[a-z],%llu", &cycle, &seconds, &bucket,
                   &cycle_ms, &streams, &rate, phase, &rounds) != 8 || bucket < (1u << 20) ||
            bucket > (64u << 20) || rounds > 40 ||
            !(cycle_ms >= 0.5 && cycle_ms <= 8) || streams < 1 || streams > a->streams ||
            !(rate > 0) ||
            (strcmp(phase, "search") != 0 && strcmp(phase, "watch") != 0)) {
            fprintf(stderr, "rank 0: autotune log line %d malformed: %s", rows + 2, line);
            rc = RC_RESULT;
        } else if ((a->bucket_bytes != 0 && bucket != a->bucket_bytes) ||
                   (a->cycle_rank >= 0 &&
                    cycle_ms != (a->cycle_rank == 0 ? KEPT_CYCLE_MS : 1.0))) {
            fprintf(stderr, "rank 0: autotune log line %d: a setting the user chose was "
                    "tuned: %s", rows + 2, line);
            rc = RC_RESULT;
        }
        for (int i = 0; i < nsizes; i++)
            known |= sizes[i] == bucket;
        if (!known)
            sizes[nsizes++] = (size_t)bucket;
        if (rc == RC_OK) {
            streams_seen |= 1 << (streams - 1);
            round_rows += rounds > 0;
        }
        rows++;
    }
    if (rc == RC_OK && (rows < 3 || (a->bucket_bytes == 0 && nsizes < 2) || round_rows == 0 ||
                        (a->streams > 1 && (streams_seen & (streams_seen - 1)) == 0))) {
        fprintf(stderr, "rank 0: autotune log: %d samples (%d of whole rounds), %d bucket "
                "sizes, streams seen %#x\n", rows, round_rows, nsizes, streams_seen);
        rc = RC_RESULT;
    }

    if (f != NULL)
        fclose(f);
    return rc;
}

/* by_default: CHORUS_AUTOTUNE left unset. */
static void autotuned_run(int streams, size_t bucket_bytes, int cycle_rank, int by_default,
                          const char *what)
{
    autotuned_arg_t a = {.log = "/tmp/chorus-autotune-XXXXXX", .streams = streams,
                         .bucket_bytes = bucket_bytes, .cycle_rank = cycle_rank};
    char streams_s[8];
    int fd = mkstemp(a.log);

    cr_assert_geq(fd, 0);
    close(fd);
    unlink(a.log);
    snprintf(a.trace, sizeof(a.trace), "%s-trace", a.log);
    snprintf(streams_s, sizeof(streams_s), "%d", streams);
    if (!by_default)
        setenv("CHORUS_AUTOTUNE", "1", 1);
    setenv("CHORUS_AUTOTUNE_WINDOW_MS", "5", 1);
    setenv("CHORUS_AUTOTUNE_LOG", a.log, 1);
    setenv("CHORUS_TCP_STREAMS", streams_s, 1);
    setenv("CHORUS_TRACE", a.trace, 1);
    run_ranks(3, autotuned_rank, &a, 100, what);
    unsetenv("CHORUS_TRACE");
    cr_expect_gt(trace_autotune_moves(a.trace, 3), 0, "%s: a rank's trace shows no autotuner "
                 "move", what);
    unsetenv("CHORUS_AUTOTUNE");
    unsetenv("CHORUS_AUTOTUNE_WINDOW_MS");
    unsetenv("CHORUS_AUTOTUNE_LOG");
    unsetenv("CHORUS_TCP_STREAMS");
    unlink(a.log);
}

Test(engine, autotuned, .timeout = 120)
{
    autotuned_run(1, 0, -1, 0, "autotuned");
}

/* Three TCP streams per peer opened: the tuner tries more than one count of them. */
Test(engine, autotuned_streams, .timeout = 120)
{
    autotuned_run(3, 0, -1, 0, "autotuned over streams");
}

/*
 * On by default, it keeps what the user set: the bucket size given to every
 * rank, and the cycle time that one rank's environment sets (so that the
 * search has the same dimensions on every rank); it tunes the streams.
 */
Test(engine, autotune_keeps_user_settings, .timeout = 120)
{
    autotuned_run(3, 3u << 20, 2, 1, "autotuned, keeping the bucket and rank 2's cycle");
    autotuned_run(3, 3u << 20, 0, 1, "autotuned, keeping the bucket and rank 0's cycle");
}

/* Bucket size and cycle time set, one stream: nothing to tune, no sample taken. */
static int nothing_to_tune_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const char *log = arg;
    chorus_engine_opts_t opts = CHORUS_ENGINE_OPTS_INIT;
    chorus_engine_t engine = NULL;
    char line[256];
    int rc = RC_OK, rows = 0;
    FILE *f;

    opts.bucket_bytes = 1u << 20;
    opts.cycle_ms = 2;
    if (chorus_engine_create(comm, &opts, &engine) != CHORUS_OK)
        return RC_SETUP;
    for (int round = 0; round < 10 && rc == RC_OK; round++)
        rc = run_round(engine, rank, size, 0, 16, round, 0);
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    if (rc != RC_OK || rank != 0)
        return rc;
    f = fopen(log, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        rows++;
    if (f != NULL)
        fclose(f);
    if (rows > 1) {
        fprintf(stderr, "rank 0: %d samples with nothing to tune\n", rows - 1);
        rc = RC_RESULT;
    }
    return rc;
}

Test(engine, autotune_with_nothing_to_tune, .timeout = 60)
{
    char log[64] = "/tmp/chorus-autotune-XXXXXX";
    int fd = mkstemp(log);

    cr_assert_geq(fd, 0);
    close(fd);
    unlink(log);
    setenv("CHORUS_AUTOTUNE_WINDOW_MS", "1", 1);
    setenv("CHORUS_AUTOTUNE_LOG", log, 1);
    setenv("CHORUS_TCP_STREAMS", "1", 1);
    run_ranks(3, nothing_to_tune_rank, log, 50, "the autotuner with nothing to tune");
    unsetenv("CHORUS_AUTOTUNE_WINDOW_MS");
    unsetenv("CHORUS_AUTOTUNE_LOG");
    unsetenv("CHORUS_TCP_STREAMS");
    unlink(log);
}

/* The autotuner on some ranks only: every rank's create fails, none hangs. */
static int autotune_mismatch_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    chorus_engine_t engine = NULL;

    (void)size;
    (void)arg;
    setenv("CHORUS_AUTOTUNE", rank == 1 ? "1" : "0", 1);
    if (chorus_engine_create(comm, NULL, &engine) != CHORUS_ERR_INVALID_ARG) {
        fprintf(stderr, "rank %d: an engine with the autotuner on one rank only\n", rank);
        if (engine != NULL)
            chorus_engine_destroy(engine);
        return RC_STATUS;
    }
    /* A bad window is refused too. */
    setenv("CHORUS_AUTOTUNE", "1", 1);
    setenv("CHORUS_AUTOTUNE_WINDOW_MS", "0", 1);
    if (chorus_engine_create(comm, NULL, &engine) != CHORUS_ERR_INVALID_ARG)
        return RC_STATUS;
    return RC_OK;
}

Test(engine, autotune_on_some_ranks, .timeout = 60)
{
    run_ranks(3, autotune_mismatch_rank, NULL, 50, "the autotuner on one rank only");
}

/* ---- the same bits on every rank ------------------------------------------ */

static uint64_t fnv(const void *buf, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ULL;
    return h;
}

/* Random float32 sums in a shuffled order: every rank must hold the same bits. */
static int bits_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    enum { N = 40, COUNT = 1000 };
    static float x[N][COUNT];
    chorus_request_t req[N];
    chorus_engine_t engine;
    uint64_t h[2] = {0, 0}, *all;
    int order[N], rc = engine_with(comm, 16 << 10, &engine);
    unsigned seed = (unsigned)rank + 11;

    (void)arg;
    order_of(order, N, rank, 3);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < COUNT; j++)
            x[i][j] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
    for (int k = 0; k < N && rc == RC_OK; k++) {
        char name[16];

        snprintf(name, sizeof(name), "g%d", order[k]);
        if (chorus_engine_allreduce(engine, name, x[order[k]], x[order[k]], COUNT,
                                    CHORUS_FLOAT32, CHORUS_SUM, NULL, &req[order[k]]) !=
            CHORUS_OK)
            rc = RC_SUBMIT;
    }
    for (int i = 0; i < N && rc == RC_OK; i++)
        if (chorus_request_free(req[i]) != CHORUS_OK)
            rc = RC_STATUS;
    if (rc == RC_OK)
        h[0] = fnv(x, sizeof(x));
    all = calloc((size_t)size, sizeof(h));
    if (rc == RC_OK && (all == NULL || chorus_allgather(h, all, 2, CHORUS_UINT64, comm, NULL) !=
                                           CHORUS_OK))
        rc = RC_SETUP;
    for (int r = 0; rc == RC_OK && r < size; r++)
        if (all[2 * r] != h[0]) {
            fprintf(stderr, "rank %d: rank %d holds other bits\n", rank, r);
            rc = RC_RESULT;
        }
    free(all);
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, same_bits, .timeout = 120)
{
    run_ranks(5, bits_rank, NULL, 100, "the same bits");
}

/* ---- a split communicator ---------------------------------------------------- */

static int split_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    shuffle_arg_t a = {.ntensors = 30, .bucket_bytes = 8 << 10, .late_rank = -1};
    chorus_comm_t half;
    int rc;

    (void)size;
    (void)arg;
    if (chorus_comm_split(comm, rank % 2, rank, &half) != CHORUS_OK)
        return RC_SETUP;
    rc = shuffle_rank(half, chorus_comm_rank(half), chorus_comm_size(half), &a);
    if (chorus_comm_destroy(half) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, split_communicator, .timeout = 120)
{
    run_ranks(5, split_rank, NULL, 100, "an engine on each half");
}

/* ---- logs ------------------------------------------------------------------------ */

/* From here on this rank's messages go to a file; returns the file's descriptor. */
static int stderr_to_file(char *path, size_t len, int rank)
{
    int fd;

    snprintf(path, len, "/tmp/chorus-test-engine.%d.%d.err", (int)getppid(), rank);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        return -1;
    return fd;
}

/* Whether the file at path holds every one of texts (NULL-ended); the file is removed. */
static int log_has(const char *path, const char *const *texts)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    unlink(path);
    for (; *texts != NULL; texts++)
        if (strstr(buf, *texts) == NULL) {
            fprintf(stdout, "log lacks '%s':\n%s\n", *texts, buf);
            return 0;
        }
    return 1;
}

/* Rank 1 describes 'w' with another count: 'w' fails on every rank, then a round works. */
static int mismatch_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float w[16] = {0}, b[4] = {0};
    chorus_request_t rw, rb;
    chorus_engine_t engine;
    static const char *const expect[] = {"tensor 'w' differs between ranks",
                                         "16 x float32 sum", "12 x float32 sum", NULL};
    char path[96];
    int fd = stderr_to_file(path, sizeof(path), rank);
    int rc = fd < 0 ? RC_SETUP : engine_with(comm, 0, &engine);

    (void)arg;
    if (rc == RC_OK &&
        (chorus_engine_allreduce(engine, "w", w, w, rank == 1 ? 12 : 16, CHORUS_FLOAT32,
                                 CHORUS_SUM, NULL, &rw) != CHORUS_OK ||
         chorus_engine_allreduce(engine, "b", b, b, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &rb) !=
             CHORUS_OK))
        rc = RC_SUBMIT;
    if (rc == RC_OK && chorus_request_free(rw) != CHORUS_ERR_INVALID_ARG)
        rc = RC_STATUS;
    if (rc == RC_OK && chorus_request_free(rb) != CHORUS_OK)
        rc = RC_STATUS;
    /* The next round of 'w', alike everywhere, works. */
    for (int i = 0; i < 16; i++)
        w[i] = (float)rank;
    if (rc == RC_OK && (chorus_engine_allreduce(engine, "w", w, w, 16, CHORUS_FLOAT32,
                                                CHORUS_SUM, NULL, &rw) != CHORUS_OK ||
                        chorus_request_free(rw) != CHORUS_OK ||
                        w[15] != (float)(size * (size - 1) / 2)))
        rc = RC_AFTER;
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    if (fd >= 0 && !log_has(path, expect) && rc == RC_OK)
        rc = RC_LOG;
    return rc;
}

Test(engine, description_mismatch, .timeout = 120)
{
    run_ranks(3, mismatch_rank, NULL, 100, "a name described differently");
}

/*
 * One round of 'w': count x float32 (or float64 with wide) on this rank, the
 * values of rank r being r; late: this rank submits 100 ms after the others,
 * so that theirs are in the engine before its own (under the old or the new
 * description). RC_OK with the sum, or want_fail and CHORUS_ERR_INVALID_ARG.
 */
static int redescribe_round(chorus_engine_t engine, int rank, int size, size_t count,
                            int wide, int late, int want_fail)
{
    double v[24];
    chorus_request_t req;
    chorus_status_t status;

    for (size_t i = 0; i < count; i++)
        if (wide)
            v[i] = (double)rank;
        else
            ((float *)v)[i] = (float)rank;
    if (late)
        usleep(100000);
    if (chorus_engine_allreduce(engine, "w", v, v, count,
                                wide ? CHORUS_FLOAT64 : CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                &req) != CHORUS_OK)
        return RC_SUBMIT;
    status = chorus_request_free(req);
    if (want_fail)
        return status == CHORUS_ERR_INVALID_ARG ? RC_OK : RC_STATUS;
    if (status != CHORUS_OK)
        return RC_STATUS;
    for (size_t i = 0; i < count; i++)
        if ((wide ? v[i] : (double)((float *)v)[i]) != (double)(size * (size - 1) / 2))
            return RC_RESULT;
    return RC_OK;
}

/*
 * 'w' described anew by every rank alike between rounds (16, then 12 float32,
 * then 24 float64) works; then rank 1 alone changes it (8), once submitting
 * after the others, once before them: the round fails at once on every rank
 * (no rank waits for the timeout), and the next round, alike again, works.
 */
static int redescribe_rank(chorus_engine_t engine, int rank, int size)
{
    int rc = RC_OK, odd = rank == 1;
    double t0;

    rc = redescribe_round(engine, rank, size, 16, 0, 0, 0);
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, 12, 0, rank == 0, 0);
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, 24, 1, rank == 2, 0);
    t0 = harness_now();
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, odd ? 8 : 24, 1, odd, 1);
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, 24, 1, 0, 0);
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, odd ? 8 : 24, 1, !odd, 1);
    if (rc == RC_OK)
        rc = redescribe_round(engine, rank, size, 24, 1, 0, 0);
    if (rc == RC_OK && harness_now() - t0 > 10.0)
        rc = RC_AFTER;      /* a failed round waited for a timeout */
    return rc;
}

static int redescribe_ranks(chorus_comm_t comm, int rank, int size, void *arg)
{
    chorus_engine_t engine;
    int rc = engine_with(comm, 0, &engine);

    (void)arg;
    if (rc == RC_OK)
        rc = redescribe_rank(engine, rank, size);
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, description_changes_between_rounds, .timeout = 120)
{
    run_ranks(3, redescribe_ranks, NULL, 100, "a name described anew between rounds");
}

/* Rank 2 submits 'late' 2.5 s after the others: every rank reports it waiting for rank 2. */
static int stall_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    double x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    chorus_request_t req;
    chorus_engine_t engine;
    char path[96];
    int fd = stderr_to_file(path, sizeof(path), rank);
    int rc = fd < 0 ? RC_SETUP : engine_with(comm, 0, &engine);

    (void)arg;
    (void)size;
    if (rank == 2)
        usleep(2500000);
    if (rc == RC_OK && chorus_engine_allreduce(engine, "late", x, x, 8, CHORUS_FLOAT64,
                                               CHORUS_MAX, NULL, &req) != CHORUS_OK)
        rc = RC_SUBMIT;
    if (rc == RC_OK && (chorus_request_free(req) != CHORUS_OK || x[7] != 8))
        rc = RC_STATUS;
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    static const char *const expect[] = {
        "tensor 'late' submitted on ranks 0 1 3 waits for ranks 2", NULL};

    if (fd >= 0 && !log_has(path, expect) && rc == RC_OK)
        rc = RC_LOG;
    return rc;
}

Test(engine, stall_report, .timeout = 120)
{
    setenv("CHORUS_STALL_WARN", "1", 1);
    run_ranks(4, stall_rank, NULL, 100, "a name submitted late on one rank");
    unsetenv("CHORUS_STALL_WARN");
}

/* ---- negotiation messages (P11) ------------------------------------------------- */

static int ceil_log2(int p)
{
    int k = 0;

    while ((1 << k) < p)
        k++;
    return k;
}

/* Steady cycles handle at most 2 ceil(log2 p) messages per rank, read from the counters. */
static int messages_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    shuffle_arg_t a = {.ntensors = 40, .bucket_bytes = 32 << 10, .late_rank = -1};
    char path[96], *at;
    static char buf[1 << 16];
    int fd = stderr_to_file(path, sizeof(path), rank), rc;
    unsigned long long most = ~0ULL;
    FILE *f;
    size_t n;

    (void)arg;
    if (fd < 0)
        return RC_SETUP;
    rc = shuffle_rank(comm, rank, size, &a);
    f = fopen(path, "r");
    n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    unlink(path);
    at = strstr(buf, "at most ");
    if (at == NULL || sscanf(at, "at most %llu in a steady cycle", &most) != 1) {
        printf("rank %d: no counters in the log:\n%s\n", rank, buf);
        return rc ? rc : RC_LOG;
    }
    if (most > 2ULL * (unsigned long long)ceil_log2(size)) {
        printf("rank %d of %d: %llu negotiation messages in a steady cycle, more than %d\n",
               rank, size, most, 2 * ceil_log2(size));
        return rc ? rc : RC_MESSAGES;
    }
    return rc;
}

ParameterizedTestParameters(engine, messages_per_cycle)
{
    static int n[] = {2, 3, 5, 8};

    return cr_make_param_array(int, n, sizeof(n) / sizeof(n[0]));
}

ParameterizedTest(int *nranks, engine, messages_per_cycle, .timeout = 120)
{
    /* Over TCP: on one node a shared-memory team would carry no messages at all. */
    setenv("CHORUS_SHM", "0", 1);
    setenv("CHORUS_LOG_LEVEL", "warn,engine=info", 1);
    run_ranks(*nranks, messages_rank, NULL, 100, "negotiation messages");
    unsetenv("CHORUS_LOG_LEVEL");
    unsetenv("CHORUS_SHM");
}

/* ---- bad arguments ------------------------------------------------------------ */

static int expect_invalid(chorus_status_t status, const char *what, int rank)
{
    return harness_expect_status(status, CHORUS_ERR_INVALID_ARG, what, rank) ? RC_STATUS
                                                                             : RC_OK;
}

static int bad_args_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static char long_name[300];
    float x[4] = {1, 1, 1, 1};
    chorus_request_t req = NULL, first;
    chorus_engine_t engine = NULL;
    chorus_opts_t flags = CHORUS_OPTS_INIT;
    chorus_engine_opts_t bad = CHORUS_ENGINE_OPTS_INIT;
    int rc = RC_OK;

    (void)arg;
    memset(long_name, 'n', sizeof(long_name) - 1);
    flags.flags = 0x80;
    rc |= expect_invalid(chorus_engine_create(NULL, NULL, &engine), "create on NULL", rank);
    /* Refused on one rank only: every rank's creation fails. */
    bad.cycle_ms = rank == size - 1 ? -1 : 0;
    rc |= expect_invalid(chorus_engine_create(comm, &bad, &engine), "create, bad cycle on one",
                         rank);
    bad.cycle_ms = 0;
    bad.bucket_bytes = 4096 + (size_t)rank;
    if (size > 1)
        rc |= expect_invalid(chorus_engine_create(comm, &bad, &engine),
                             "create, bucket_bytes differ", rank);
    if (rc != RC_OK || chorus_engine_create(comm, NULL, &engine) != CHORUS_OK)
        return rc ? rc : RC_SETUP;
    rc |= expect_invalid(chorus_engine_allreduce(NULL, "a", x, x, 4, CHORUS_FLOAT32, CHORUS_SUM,
                                                 NULL, &req), "NULL engine", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, NULL, x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, NULL, &req), "NULL name", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "", x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, NULL, &req), "empty name", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, long_name, x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, NULL, &req), "long name", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, NULL, NULL), "NULL req_p", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, x, 4, CHORUS_DTYPE_COUNT,
                                                 CHORUS_SUM, NULL, &req), "bad dtype", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_OP_COUNT, NULL, &req), "bad op", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, NULL, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, NULL, &req), "NULL recvbuf", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, x, SIZE_MAX / 2,
                                                 CHORUS_FLOAT32, CHORUS_SUM, NULL, &req),
                         "absurd count", rank);
    rc |= expect_invalid(chorus_engine_allreduce(engine, "a", x, x, 4, CHORUS_FLOAT32,
                                                 CHORUS_SUM, &flags, &req), "a flag", rank);
    rc |= expect_invalid(chorus_engine_broadcast(engine, "a", x, x, 4, CHORUS_FLOAT32, size,
                                                 NULL, &req), "root out of range", rank);
    if (req != NULL) {
        fprintf(stderr, "rank %d: a refused submission wrote its request\n", rank);
        rc = RC_STATUS;
    }
    /* A name submitted again before its first submission went. */
    if (rc == RC_OK && chorus_engine_allreduce(engine, "twice", x, x, 4, CHORUS_FLOAT32,
                                               CHORUS_SUM, NULL, &first) != CHORUS_OK)
        rc = RC_SUBMIT;
    if (rc == RC_OK) {
        chorus_status_t again = chorus_engine_allreduce(engine, "twice", x, x, 4,
                                                        CHORUS_FLOAT32, CHORUS_SUM, NULL, &req);

        /* It may have gone already: then the second is the next round, and it goes too. */
        if (again == CHORUS_OK)
            (void)chorus_request_free(req);
        else
            rc |= expect_invalid(again, "the same name twice", rank);
        if (chorus_request_free(first) != CHORUS_OK)
            rc = RC_STATUS;
    }
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, bad_arguments, .timeout = 120)
{
    run_ranks(3, bad_args_rank, NULL, 100, "bad arguments");
}

/* Submissions still waiting for a rank when every rank destroys the engine fail. */
static int destroyed_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4] = {0};
    chorus_request_t req = NULL;
    chorus_engine_t engine;
    int rc = engine_with(comm, 0, &engine);

    (void)arg;
    (void)size;
    if (rc == RC_OK && rank != 0 &&
        chorus_engine_allreduce(engine, "only_some", x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                &req) != CHORUS_OK)
        rc = RC_SUBMIT;
    if (chorus_engine_destroy(engine) != CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    if (req != NULL && chorus_request_free(req) != CHORUS_ERR_ABORTED && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, destroyed_while_waiting, .timeout = 60)
{
    run_ranks(3, destroyed_rank, NULL, 40, "destroyed with a name not submitted everywhere");
}

/* ---- a rank killed mid-cycle ------------------------------------------------------ */

static int killed_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[256];
    chorus_engine_t engine;
    int rc = engine_with(comm, 0, &engine);

    (void)arg;
    (void)size;
    for (int step = 0; rc == RC_OK && step < 100000; step++) {
        chorus_request_t req;
        chorus_status_t status;

        for (int i = 0; i < 256; i++)
            x[i] = (float)rank;
        if (chorus_engine_allreduce(engine, "x", x, x, 256, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                    &req) != CHORUS_OK)
            break;      /* the engine failed before the submission */
        status = chorus_request_free(req);
        if (status != CHORUS_OK)
            break;      /* what the survivors must see: an error, not a hang */
    }
    (void)chorus_engine_destroy(engine);
    return rc;
}

Test(engine, rank_killed, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 4, .timeout_s = 10, .deadline_s = 60, .kill_rank = 2,
                           .kill_after_s = 1.0};
    int status[4];
    double elapsed[4];

    harness_run(&opts, killed_rank, NULL, status, elapsed);
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        cr_expect_eq(status[r], 0, "rank %d exited %d after %.1f s", r, status[r], elapsed[r]);
        cr_expect_lt(elapsed[r], 30, "rank %d took %.1f s to give up", r, elapsed[r]);
    }
}

/* ---- a name one rank never submits ------------------------------------------------- */

/*
 * Rank 0 submits 'orphan' and no other rank does: past CHORUS_TIMEOUT its
 * request fails with CHORUS_ERR_TIMEOUT, and the others' engines fail soon
 * after (their cycles wait for rank 0); nobody hangs.
 */
static int orphan_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4] = {0};
    chorus_request_t req;
    chorus_engine_t engine;
    int rc = engine_with(comm, 0, &engine);

    (void)arg;
    (void)size;
    if (rc == RC_OK && rank == 0 &&
        (chorus_engine_allreduce(engine, "orphan", x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                 &req) != CHORUS_OK ||
         chorus_request_free(req) != CHORUS_ERR_TIMEOUT))
        rc = RC_STATUS;
    /* The engine failed on every rank: destroy says so. */
    if (chorus_engine_destroy(engine) == CHORUS_OK && rc == RC_OK)
        rc = RC_STATUS;
    return rc;
}

Test(engine, submitted_on_one_rank_only, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 3, .deadline_s = 40, .kill_rank = -1};
    int status[3];
    double elapsed[3];

    cr_expect_eq(harness_run(&opts, orphan_rank, NULL, status, elapsed), 0,
                 "exit codes %d %d %d (%s)", status[0], status[1], status[2], rc_help);
    for (int r = 0; r < 3; r++)
        cr_expect_lt(elapsed[r], 20, "rank %d took %.1f s", r, elapsed[r]);
}
