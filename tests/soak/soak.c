/*
 * soak: one rank of a long random run of collectives, started by chorus-run.
 *
 * Until its deadline every rank draws the same random case from (seed,
 * iteration): collective, dtype, op, size (0..SOAK_MAX_BYTES bytes,
 * log-uniform), root, in or out of place, blocking or not. It runs the case
 * and checks every element exactly (tests/coll/expect.h), and the bytes just
 * past the result must be left alone. Every SOAK_SAMPLE_S seconds it samples
 * its resident set (/proc/self/statm) and its open descriptors (/proc/self/fd).
 *
 * RSS drift compares high-water levels: split the time after the warmup
 * (SOAK_WARMUP_S) into thirds; warm is the largest RSS sampled in the first
 * third, last the largest in the last third, drift = (last - warm) / warm.
 * The warmup lets the caches that are meant to fill (the scratch pool of
 * each communicator, malloc's arenas) reach their working size. Single
 * samples are not compared because the RSS of a healthy rank moves by a few
 * per cent from one sample to the next (scratch buffers allocated and freed
 * around the pool, malloc trimming its heaps); a leak raises the high-water
 * level, noise does not. The buffers of the test itself are allocated at
 * their largest size and touched before the first sample, so they do not
 * count.
 *
 * Environment (all optional): SOAK_SECONDS (or the first argument; default
 * 60), SOAK_SEED (default 1; every rank must have the same), SOAK_MAX_BYTES
 * (default 4 MiB), SOAK_SAMPLE_S (default 2), SOAK_WARMUP_S (default a fifth
 * of the run, 5..120 s), SOAK_DRIFT_PCT (default 1; "off" reports drift
 * without failing on it), SOAK_TRACE=1 (print every sample), SOAK_LIST_FDS=1
 * (list the descriptors at the start; they are listed anyway when the count
 * changes).
 *
 * Exit code: 0 when every element was right, every call returned CHORUS_OK,
 * the descriptor count never changed and the drift is within the limit; 1
 * otherwise; 2 on bad usage. The last line of every rank is a "soak-result"
 * line of key=value pairs that soak.sh reads.
 */
#include <dirent.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "coll/expect.h"

/* Bytes after a result that must keep their fill pattern. */
#define SOAK_CANARY 64
#define SOAK_FILL   0xa5

typedef enum { S_ALLREDUCE, S_REDUCE_SCATTER, S_REDUCE, S_ALLGATHER, S_BROADCAST, S_ALLTOALL,
               S_BARRIER, S_COUNT } s_coll_t;
static const char *const s_names[] = {"allreduce", "reduce_scatter", "reduce", "allgather",
                                      "broadcast", "alltoall", "barrier"};

typedef struct {
    double seconds, sample_s, warmup_s, drift_pct;   /* drift_pct < 0: not checked */
    int trace;              /* print every sample */
    uint64_t seed;
    size_t max_bytes;
} soak_opts_t;

typedef struct {
    s_coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op;
    size_t count;           /* per rank for allgather, reduce_scatter, alltoall */
    int root, in_place, nonblocking;
} soak_case_t;

typedef struct {
    int rank, size;
    char *send, *recv, *want;
    size_t cap;             /* bytes of each buffer */
    uint64_t calls, per_coll[S_COUNT], nonblocking, in_place, bytes, wrong, errors;
    long rss_first, rss_end;        /* KiB, at the start and at the last sample */
    double *t;                      /* sample times (s since the start) and RSS (KiB) */
    long *rss;
    size_t nsamples, cap_samples;
    int fds_first, fds_last, fds_changed;
} soak_t;

/* ---- Environment and sampling --------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double env_double(const char *name, double dflt)
{
    const char *text = getenv(name);
    char *end;
    double v;

    if (text == NULL || *text == '\0')
        return dflt;
    v = strtod(text, &end);
    if (*end != '\0' || !isfinite(v) || v < 0) {
        fprintf(stderr, "soak: %s='%s' is not a non-negative number\n", name, text);
        exit(2);
    }
    return v;
}

static void read_opts(int argc, char **argv, soak_opts_t *o)
{
    const char *drift = getenv("SOAK_DRIFT_PCT");

    if (argc > 1)
        setenv("SOAK_SECONDS", argv[1], 1);
    o->seconds = env_double("SOAK_SECONDS", 60);
    o->seed = (uint64_t)env_double("SOAK_SEED", 1);
    o->max_bytes = (size_t)env_double("SOAK_MAX_BYTES", 4 << 20);
    o->sample_s = env_double("SOAK_SAMPLE_S", 2);
    o->warmup_s = env_double("SOAK_WARMUP_S", fmin(120, fmax(5, o->seconds / 5)));
    o->drift_pct = drift && strcmp(drift, "off") == 0 ? -1 : env_double("SOAK_DRIFT_PCT", 1);
    o->trace = getenv("SOAK_TRACE") != NULL && strcmp(getenv("SOAK_TRACE"), "0") != 0;
    if (o->sample_s <= 0)
        o->sample_s = 2;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;

    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Open descriptors, not counting the one that reads the directory. */
static int fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* Prints what each descriptor is, to tell which one came or went. */
static void fd_list(int rank)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], target[128];

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        ssize_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        n = readlink(path, target, sizeof(target) - 1);
        target[n < 0 ? 0 : n] = '\0';
        fprintf(stderr, "soak: rank %d: fd %s -> %s\n", rank, e->d_name, target);
    }
    closedir(d);
}

/*
 * One sample line; with glibc also malloc's view: bytes in use (what the
 * program holds) against bytes taken from the system (what RSS can include),
 * to tell retention from fragmentation when RSS grows.
 */
static void trace_sample(int rank, double elapsed, long rss, int fds)
{
    printf("soak-sample rank=%d t=%.1f rss_kib=%ld fds=%d", rank, elapsed, rss, fds);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    {
        struct mallinfo2 mi = mallinfo2();
        printf(" malloc_in_use_kib=%zu malloc_heap_kib=%zu malloc_mmap_kib=%zu",
               mi.uordblks / 1024, mi.arena / 1024, mi.hblkhd / 1024);
    }
#endif
    printf("\n");
    fflush(stdout);
}

static void sample(soak_t *s, double elapsed, const soak_opts_t *o)
{
    long rss = rss_kib();
    int fds = fd_count();

    if (fds != s->fds_first && !s->fds_changed) {
        fprintf(stderr, "soak: rank %d: %d descriptors open after %.0f s, %d at the start\n",
                s->rank, fds, elapsed, s->fds_first);
        s->fds_changed = 1;
        fd_list(s->rank);
    }
    s->fds_last = fds;
    s->rss_end = rss;
    if (o->trace)
        trace_sample(s->rank, elapsed, rss, fds);
    if (s->nsamples == s->cap_samples) {
        size_t cap = s->cap_samples ? 2 * s->cap_samples : 256;
        double *t = realloc(s->t, cap * sizeof(*t));
        long *r = t ? realloc(s->rss, cap * sizeof(*r)) : NULL;
        if (t)
            s->t = t;
        if (r == NULL)
            return;   /* keeps the samples so far; the windows still have some */
        s->rss = r;
        s->cap_samples = cap;
    }
    s->t[s->nsamples] = elapsed;
    s->rss[s->nsamples++] = rss;
}

/* Largest RSS sampled in [from, to], or -1 when no sample falls there. */
static long rss_high(const soak_t *s, double from, double to)
{
    long high = -1;

    for (size_t i = 0; i < s->nsamples; i++) {
        if (s->t[i] >= from && s->t[i] <= to && s->rss[i] > high)
            high = s->rss[i];
    }
    return high;
}

/* ---- Random cases, the same on every rank ------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void draw_case(uint64_t seed, uint64_t iter, int size, size_t max_bytes, soak_case_t *c)
{
    uint64_t st = seed * 0x2545f4914f6cdd1dull + iter;
    double u;
    size_t bytes, count, es;

    memset(c, 0, sizeof(*c));
    c->coll = (s_coll_t)(splitmix64(&st) % S_COUNT);
    c->dtype = (chorus_dtype_t)(splitmix64(&st) % CHORUS_DTYPE_COUNT);
    c->op = (chorus_op_t)(splitmix64(&st) % CHORUS_OP_COUNT);
    c->root = (int)(splitmix64(&st) % (uint64_t)size);
    c->in_place = (int)(splitmix64(&st) & 1);
    c->nonblocking = (int)(splitmix64(&st) & 1);
    /* Log-uniform in [0, max_bytes]: as many cases of 1..2 KiB as of 1..2 MiB; ~5 % are 0. */
    u = (double)(splitmix64(&st) >> 11) / 9007199254740992.0;
    bytes = (size_t)exp(u * log((double)max_bytes + 1)) - 1;
    es = chorus_dtype_size(c->dtype);
    count = bytes / es;
    if (c->coll == S_ALLGATHER || c->coll == S_REDUCE_SCATTER || c->coll == S_ALLTOALL)
        count /= (size_t)size;
    c->count = c->coll == S_BARRIER ? 0 : count;
}

static int reducing(s_coll_t coll)
{
    return coll == S_ALLREDUCE || coll == S_REDUCE_SCATTER || coll == S_REDUCE;
}

static void case_label(const soak_t *s, const soak_case_t *c, uint64_t iter, char *buf,
                       size_t len)
{
    snprintf(buf, len, "rank %d/%d iteration %" PRIu64 ": %s %s %s count %zu root %d %s %s",
             s->rank, s->size, iter, s_names[c->coll], chorus_dtype_name(c->dtype),
             reducing(c->coll) ? chorus_op_name(c->op) : "-", c->count, c->root,
             c->in_place ? "in-place" : "out-of-place",
             c->nonblocking ? "non-blocking" : "blocking");
}

/* ---- One case ------------------------------------------------------------------------ */

/* Fills send and the expected result (as coll_matrix.c does); returns elements to compare. */
static size_t prepare(const soak_t *s, const soak_case_t *c)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count, p = (size_t)s->size;

    switch (c->coll) {
    case S_ALLREDUCE:
    case S_REDUCE:
        expect_fill(c->op, c->dtype, s->rank, s->send, n, 0);
        expect_fill_reduced(c->op, c->dtype, s->size, s->want, n, 0);
        return c->coll == S_REDUCE && s->rank != c->root ? 0 : n;
    case S_REDUCE_SCATTER:
        expect_fill(c->op, c->dtype, s->rank, s->send, n * p, 0);
        expect_fill_reduced(c->op, c->dtype, s->size, s->want, n, n * (size_t)s->rank);
        return n;
    case S_ALLGATHER:
        for (size_t r = 0; r < p; r++)
            expect_fill(CHORUS_MIN, c->dtype, (int)r, s->want + r * n * es, n, r);
        memcpy(s->send, s->want + (size_t)s->rank * n * es, n * es);
        return n * p;
    case S_BROADCAST:
        expect_fill(CHORUS_MAX, c->dtype, c->root + 1, s->want, n, 0);
        if (s->rank == c->root)
            memcpy(s->send, s->want, n * es);
        else
            memset(s->send, 0x5a, n * es);
        return n;
    case S_ALLTOALL:
        for (size_t j = 0; j < p; j++)
            expect_fill(CHORUS_MIN, c->dtype, (int)((size_t)s->rank * 31 + j),
                        s->send + j * n * es, n, j);
        for (size_t i = 0; i < p; i++)
            expect_fill(CHORUS_MIN, c->dtype, (int)(i * 31 + (size_t)s->rank),
                        s->want + i * n * es, n, (size_t)s->rank);
        return n * p;
    default:
        return 0;
    }
}

/* Bytes of recv the call may write, from its start: the canary lies just past them. */
static size_t span(const soak_t *s, const soak_case_t *c)
{
    size_t bytes = c->count * chorus_dtype_size(c->dtype), p = (size_t)s->size;

    switch (c->coll) {
    case S_REDUCE:
        return c->in_place || s->rank == c->root ? bytes : 0;
    case S_REDUCE_SCATTER:
        return c->in_place ? bytes * p : bytes;
    case S_ALLGATHER:
    case S_ALLTOALL:
        return bytes * p;
    case S_BARRIER:
        return 0;
    default:
        return bytes;
    }
}

static chorus_status_t start(const soak_case_t *c, chorus_comm_t comm, const void *sb,
                             void *rb, chorus_request_t *req)
{
    size_t n = c->count;
    chorus_dtype_t d = c->dtype;

    switch (c->coll) {
    case S_ALLREDUCE:
        return req ? chorus_iallreduce(sb, rb, n, d, c->op, comm, NULL, req)
                   : chorus_allreduce(sb, rb, n, d, c->op, comm, NULL);
    case S_REDUCE:
        return req ? chorus_ireduce(sb, rb, n, d, c->op, c->root, comm, NULL, req)
                   : chorus_reduce(sb, rb, n, d, c->op, c->root, comm, NULL);
    case S_REDUCE_SCATTER:
        return req ? chorus_ireduce_scatter(sb, rb, n, d, c->op, comm, NULL, req)
                   : chorus_reduce_scatter(sb, rb, n, d, c->op, comm, NULL);
    case S_ALLGATHER:
        return req ? chorus_iallgather(sb, rb, n, d, comm, NULL, req)
                   : chorus_allgather(sb, rb, n, d, comm, NULL);
    case S_BROADCAST:
        return req ? chorus_ibroadcast(sb, rb, n, d, c->root, comm, NULL, req)
                   : chorus_broadcast(sb, rb, n, d, c->root, comm, NULL);
    case S_ALLTOALL:
        return req ? chorus_ialltoall(sb, rb, n, d, comm, NULL, req)
                   : chorus_alltoall(sb, rb, n, d, comm, NULL);
    default:
        return req ? chorus_ibarrier(comm, NULL, req) : chorus_barrier(comm, NULL);
    }
}

/* Runs the call, blocking or through a request polled a little before the wait. */
static chorus_status_t call(const soak_case_t *c, chorus_comm_t comm, const void *sb, void *rb)
{
    chorus_request_t req = NULL;
    chorus_status_t status;
    int done = 0;

    if (!c->nonblocking)
        return start(c, comm, sb, rb, NULL);
    status = start(c, comm, sb, rb, &req);
    if (status != CHORUS_OK)
        return status;
    for (int i = 0; i < 3 && !done && status == CHORUS_OK; i++)
        status = chorus_request_test(req, &done);
    if (status == CHORUS_OK && !done)
        status = chorus_request_wait(req);
    if (chorus_request_free(req) != CHORUS_OK && status == CHORUS_OK)
        status = CHORUS_ERR_INTERNAL;
    return status;
}

/* Returns 0, or -1 on a failed call (the communicator is then unusable). */
static int run_case(soak_t *s, const soak_case_t *c, chorus_comm_t comm, uint64_t iter)
{
    size_t es = chorus_dtype_size(c->dtype), p = (size_t)s->size, n = c->count;
    size_t ncmp = prepare(s, c), sp = span(s, c), wrong;
    char *sb = s->send, *rb = s->recv, *cmp = s->recv, label[200];
    chorus_status_t status;

    memset(s->recv, SOAK_FILL, sp + SOAK_CANARY);
    if (c->in_place) {
        /* The in-place layouts of the public API. */
        if (c->coll == S_ALLGATHER) {
            sb = s->recv + (size_t)s->rank * n * es;
            memcpy(sb, s->send, n * es);
        } else if (c->coll == S_REDUCE_SCATTER) {
            memcpy(s->recv, s->send, n * p * es);
            sb = s->recv;
            rb = cmp = s->recv + (size_t)s->rank * n * es;
        } else {
            memcpy(s->recv, s->send, (c->coll == S_ALLTOALL ? n * p : n) * es);
            sb = s->recv;
        }
    }
    status = call(c, comm, sb, rb);
    s->calls++;
    s->per_coll[c->coll]++;
    s->nonblocking += (uint64_t)c->nonblocking;
    s->in_place += (uint64_t)c->in_place;
    s->bytes += sp;
    if (status != CHORUS_OK) {
        case_label(s, c, iter, label, sizeof(label));
        fprintf(stderr, "soak: %s: %s\n", label, chorus_status_string(status));
        s->errors++;
        return -1;
    }
    case_label(s, c, iter, label, sizeof(label));
    wrong = expect_compare(c->dtype, cmp, s->want, ncmp, label);
    for (size_t i = 0; i < SOAK_CANARY; i++) {
        if ((unsigned char)s->recv[sp + i] != SOAK_FILL) {
            fprintf(stderr, "soak: %s: byte %zu past the result overwritten\n", label, i);
            wrong++;
            break;
        }
    }
    if (wrong)
        fprintf(stderr, "soak: %s: %zu of %zu elements wrong\n", label, wrong, ncmp);
    s->wrong += wrong;
    return 0;
}

/* ---- The run ------------------------------------------------------------------------- */

/* Every rank stops at the same iteration: as soon as any rank's clock passes the deadline. */
static int agree_stop(soak_t *s, chorus_comm_t comm, int mine)
{
    int32_t flag = mine;

    if (chorus_allreduce(&flag, &flag, 1, CHORUS_INT32, CHORUS_MAX, comm, NULL) != CHORUS_OK) {
        fprintf(stderr, "soak: rank %d: allreduce of the stop flag failed\n", s->rank);
        s->errors++;
        return -1;
    }
    if (flag != 0 && flag != 1) {
        fprintf(stderr, "soak: rank %d: stop flag reduced to %d\n", s->rank, (int)flag);
        s->wrong++;
        return 1;
    }
    return flag;
}

static void soak_loop(soak_t *s, chorus_comm_t comm, const soak_opts_t *o)
{
    double start = now_s(), next_sample = start + o->sample_s;
    soak_case_t c;
    int stop = 0;

    for (uint64_t iter = 0; stop == 0; iter++) {
        double now;

        draw_case(o->seed, iter, s->size, o->max_bytes, &c);
        if (run_case(s, &c, comm, iter) != 0)
            return;
        now = now_s();
        if (now >= next_sample) {
            sample(s, now - start, o);
            next_sample = now + o->sample_s;
        }
        stop = agree_stop(s, comm, now - start >= o->seconds);
    }
    if (stop < 0)
        return;
    /* Sample before the barrier: a rank that finished may close its connections. */
    sample(s, now_s() - start, o);
    if (chorus_barrier(comm, NULL) != CHORUS_OK) {
        fprintf(stderr, "soak: rank %d: final barrier failed\n", s->rank);
        s->errors++;
    }
}

/* Prints the human summary and the soak-result line; returns the exit code. */
static int report(const soak_t *s, const soak_opts_t *o)
{
    double end = s->nsamples ? s->t[s->nsamples - 1] : 0, third = (end - o->warmup_s) / 3;
    long warm = third > 0 ? rss_high(s, o->warmup_s, o->warmup_s + third) : -1;
    long last = third > 0 ? rss_high(s, end - third, end) : -1;
    int measured = warm > 0 && last > 0;
    double drift = measured ? 100.0 * (double)(last - warm) / (double)warm : 0.0;
    int checked = o->drift_pct >= 0;
    int drift_bad = checked && (!measured || drift > o->drift_pct);
    int fail = s->wrong || s->errors || s->fds_changed || drift_bad;

    printf("soak: rank %d/%d: %" PRIu64 " calls (", s->rank, s->size, s->calls);
    for (int k = 0; k < S_COUNT; k++)
        printf("%s%s %" PRIu64, k ? ", " : "", s_names[k], s->per_coll[k]);
    printf("; %" PRIu64 " non-blocking, %" PRIu64 " in place), %.1f MiB, %" PRIu64
           " wrong, %" PRIu64 " errors\n", s->nonblocking, s->in_place,
           (double)s->bytes / 1048576.0, s->wrong, s->errors);
    printf("soak: rank %d/%d: rss %ld KiB at start, high %ld KiB after the %.0f s warmup, "
           "high %ld KiB at the end, %ld KiB last (drift %+.2f %%%s); fds %d -> %d\n",
           s->rank, s->size, s->rss_first, warm, o->warmup_s, last, s->rss_end, drift,
           !measured ? ", not measured: run too short" : checked ? "" : ", not checked",
           s->fds_first, s->fds_last);
    if (checked && !measured)
        fprintf(stderr, "soak: rank %d: %.0f s is too short to measure drift after a %.0f s "
                "warmup\n", s->rank, end, o->warmup_s);
    if (drift_bad && measured)
        fprintf(stderr, "soak: rank %d: rss high-water grew %+.2f %% after warmup (limit "
                "%.2f %%)\n", s->rank, drift, o->drift_pct);
    printf("soak-result rank=%d size=%d seed=%" PRIu64 " calls=%" PRIu64 " wrong=%" PRIu64
           " errors=%" PRIu64 " rss_first_kib=%ld rss_warm_kib=%ld rss_last_kib=%ld "
           "drift_pct=%.3f drift_measured=%d drift_checked=%d fds_first=%d fds_last=%d "
           "verdict=%s\n", s->rank, s->size, o->seed, s->calls, s->wrong, s->errors,
           s->rss_first, warm, last, drift, measured, checked, s->fds_first, s->fds_last,
           fail ? "FAIL" : "PASS");
    fflush(stdout);
    return fail ? 1 : 0;
}

static int soak_alloc(soak_t *s, size_t max_bytes)
{
    /* Room for the largest case, its rounding to whole elements per rank, and the canary. */
    s->cap = max_bytes + 64 * sizeof(double) + SOAK_CANARY;
    s->send = malloc(s->cap);
    s->recv = malloc(s->cap);
    s->want = malloc(s->cap);
    if (!s->send || !s->recv || !s->want) {
        fprintf(stderr, "soak: rank %d: cannot allocate 3 x %zu bytes\n", s->rank, s->cap);
        return -1;
    }
    /* Resident from the start, so that the first samples already hold them (not 0:
     * a compiler may turn malloc and a zeroing memset into calloc, which touches nothing). */
    memset(s->send, SOAK_FILL, s->cap);
    memset(s->recv, SOAK_FILL, s->cap);
    memset(s->want, SOAK_FILL, s->cap);
    return 0;
}

int main(int argc, char **argv)
{
    soak_opts_t o;
    soak_t s = {.rss_first = -1};
    chorus_comm_t comm;
    chorus_status_t status;
    int rc = 1;

    read_opts(argc, argv, &o);
    status = chorus_comm_create_from_env(&comm);
    if (status != CHORUS_OK) {
        fprintf(stderr, "soak: chorus_comm_create_from_env: %s\n", chorus_status_string(status));
        return 1;
    }
    s.rank = chorus_comm_rank(comm);
    s.size = chorus_comm_size(comm);
    if (s.size > 64) {
        fprintf(stderr, "soak: %d ranks; the expected values are exact for up to 64\n", s.size);
        goto out;
    }
    if (soak_alloc(&s, o.max_bytes) != 0)
        goto out;
    /*
     * Connections open on first use: one alltoall opens every one a later
     * call may use, before the descriptors are counted.
     */
    if (chorus_alltoall(s.send, s.recv, 1, CHORUS_UINT8, comm, NULL) != CHORUS_OK ||
        chorus_barrier(comm, NULL) != CHORUS_OK) {
        fprintf(stderr, "soak: rank %d: first alltoall or barrier failed\n", s.rank);
        goto out;
    }
    s.rss_first = rss_kib();
    s.fds_first = fd_count();
    if (getenv("SOAK_LIST_FDS"))
        fd_list(s.rank);
    soak_loop(&s, comm, &o);
    rc = report(&s, &o);
out:
    status = chorus_comm_destroy(comm);
    if (status != CHORUS_OK && rc == 0) {
        fprintf(stderr, "soak: rank %d: chorus_comm_destroy: %s\n", s.rank,
                chorus_status_string(status));
        rc = 1;
    }
    free(s.send);
    free(s.recv);
    free(s.want);
    free(s.t);
    free(s.rss);
    return rc;
}
