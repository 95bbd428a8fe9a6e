/*
 * Errors that leave every rank in step: byte counts that no buffer of the
 * process could have are refused on every rank and path without touching
 * memory or growing without end, and the next call gives the exact answer;
 * a count mismatch is never returned as success with wrong data on the
 * network path; a non-blocking call that fails leaves *req_p as it was, and
 * a refused test leaves *done_p; a call refused on one rank keeps its place,
 * so that no rank's call pairs with another, and one refused on every rank
 * leaves the communicator usable.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"
#include "reduce/device.h"

/* Exit codes of the rank functions: 0 = every outcome as expected. */
enum {
    RC_OK = 0, RC_SETUP = 10, RC_ACCEPTED = 11, RC_REQ_WRITTEN = 12, RC_AFTER = 13,
    RC_TOUCHED = 14, RC_SUCCESS_WRONG = 15
};

#define SMALL 64                    /* elements of the buffers really there */
#define HEADROOM ((size_t)1 << 30)  /* address space a rank may map beyond what it has */

typedef enum {
    CALL_ALLREDUCE, CALL_ALLGATHER, CALL_BROADCAST, CALL_REDUCE_SCATTER, CALL_REDUCE,
    CALL_ALLTOALL, CALL_KINDS
} call_kind_t;

static const char *const call_names[CALL_KINDS] = {
    "allreduce", "allgather", "broadcast", "reduce_scatter", "reduce", "alltoall"
};

/* One collective, blocking (req_p NULL) or not. */
static chorus_status_t call(call_kind_t kind, const void *s, void *r, size_t count,
                            chorus_dtype_t dt, int root, chorus_comm_t comm,
                            chorus_request_t *req_p)
{
    switch (kind) {
    case CALL_ALLREDUCE:
        return req_p ? chorus_iallreduce(s, r, count, dt, CHORUS_SUM, comm, NULL, req_p)
                     : chorus_allreduce(s, r, count, dt, CHORUS_SUM, comm, NULL);
    case CALL_ALLGATHER:
        return req_p ? chorus_iallgather(s, r, count, dt, comm, NULL, req_p)
                     : chorus_allgather(s, r, count, dt, comm, NULL);
    case CALL_BROADCAST:
        return req_p ? chorus_ibroadcast(s, r, count, dt, root, comm, NULL, req_p)
                     : chorus_broadcast(s, r, count, dt, root, comm, NULL);
    case CALL_REDUCE_SCATTER:
        return req_p ? chorus_ireduce_scatter(s, r, count, dt, CHORUS_SUM, comm, NULL, req_p)
                     : chorus_reduce_scatter(s, r, count, dt, CHORUS_SUM, comm, NULL);
    case CALL_REDUCE:
        return req_p ? chorus_ireduce(s, r, count, dt, CHORUS_SUM, root, comm, NULL, req_p)
                     : chorus_reduce(s, r, count, dt, CHORUS_SUM, root, comm, NULL);
    default:
        return req_p ? chorus_ialltoall(s, r, count, dt, comm, NULL, req_p)
                     : chorus_alltoall(s, r, count, dt, comm, NULL);
    }
}

/* Bytes of address space this process has mapped now (/proc/self/statm). */
static size_t mapped_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu", &pages) != 1)
        pages = 0;
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Limit the rank to what it has mapped plus HEADROOM, so that a runaway allocation fails. */
static int limit_memory(void)
{
    size_t now = mapped_bytes();
    struct rlimit lim = {.rlim_cur = now + HEADROOM, .rlim_max = RLIM_INFINITY};

    if (now == 0)
        return -1;
    return setrlimit(RLIMIT_AS, &lim);
}

/* An allreduce of rank + 1 over int32: every element must be size (size + 1) / 2. */
static int allreduce_exact(chorus_comm_t comm, int rank, int size)
{
    int32_t in[SMALL], out[SMALL];

    for (int i = 0; i < SMALL; i++) {
        in[i] = rank + 1;
        out[i] = -1;
    }
    if (chorus_allreduce(in, out, SMALL, CHORUS_INT32, CHORUS_SUM, comm, NULL) != CHORUS_OK)
        return RC_AFTER;
    for (int i = 0; i < SMALL; i++)
        if (out[i] != size * (size + 1) / 2)
            return RC_AFTER;
    return RC_OK;
}

/* ---- byte counts no buffer could have ----------------------------------- */

/*
 * The send and receive buffers of kind with count elements of esize bytes,
 * in place or not, over real memory of a few bytes: nothing may be touched.
 */
static void huge_buffers(call_kind_t kind, int in_place, size_t count, size_t esize, int rank,
                         unsigned char *mem, const void **s_p, void **r_p)
{
    uintptr_t base = (uintptr_t)mem, step = (uintptr_t)count * (uintptr_t)esize;

    *s_p = mem;
    *r_p = mem + 4096;
    if (!in_place)
        return;
    *r_p = mem;
    /* The in-place layouts of allgather and reduce_scatter sit this rank's block in the other. */
    if (kind == CALL_ALLGATHER)
        *s_p = (const void *)(base + step * (uintptr_t)rank);
    else if (kind == CALL_REDUCE_SCATTER)
        *r_p = (void *)(base + step * (uintptr_t)rank);
}

static int huge_counts(chorus_comm_t comm, int rank, int size, void *arg)
{
    static const size_t counts[] = {((size_t)1 << 62) / 4, SIZE_MAX / 4, SIZE_MAX};
    unsigned char *mem = calloc(1, 8192);

    (void)arg;
    if (mem == NULL || limit_memory() != 0)
        return RC_SETUP;
    for (int kind = 0; kind < CALL_KINDS; kind++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            for (int in_place = 0; in_place < 2; in_place++) {
                const void *s;
                void *r;
                chorus_request_t req = (chorus_request_t)(uintptr_t)0x5eed;
                chorus_dtype_t dt = counts[c] == SIZE_MAX ? CHORUS_UINT8 : CHORUS_INT32;

                huge_buffers(kind, in_place, counts[c], chorus_dtype_size(dt), rank, mem, &s,
                             &r);
                if (call(kind, s, r, counts[c], dt, 0, comm, NULL) != CHORUS_ERR_INVALID_ARG ||
                    call(kind, s, r, counts[c], dt, 0, comm, &req) != CHORUS_ERR_INVALID_ARG) {
                    fprintf(stderr, "rank %d: %s of %zu elements (in place %d) accepted\n",
                            rank, call_names[kind], counts[c], in_place);
                    return RC_ACCEPTED;
                }
                if (req != (chorus_request_t)(uintptr_t)0x5eed)
                    return RC_REQ_WRITTEN;
            }
        }
    }
    for (size_t i = 0; i < 8192; i++)
        if (mem[i] != 0)
            return RC_TOUCHED;
    free(mem);
    return allreduce_exact(comm, rank, size);
}

static void run_huge(int nranks, int shm)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = 10, .deadline_s = 40, .kill_rank = -1};
    int status[3];

    setenv("CHORUS_SHM", shm ? "1" : "0", 1);
    cr_expect_eq(harness_run(&opts, huge_counts, NULL, status, NULL), 0,
                 "%d ranks over %s: exit codes %d %d %d", nranks, shm ? "shm" : "tcp",
                 status[0], nranks > 1 ? status[1] : 0, nranks > 2 ? status[2] : 0);
    unsetenv("CHORUS_SHM");
}

Test(huge, one_rank, .timeout = 60)    { run_huge(1, 1); }
Test(huge, two_ranks_shm, .timeout = 60)  { run_huge(2, 1); }
Test(huge, three_ranks_shm, .timeout = 60) { run_huge(3, 1); }
Test(huge, two_ranks_tcp, .timeout = 60)  { run_huge(2, 0); }
Test(huge, three_ranks_tcp, .timeout = 60) { run_huge(3, 0); }

/* ---- output arguments on error ------------------------------------------ */

/* After an abort every non-blocking call fails and leaves *req_p as it was. */
static int req_after_abort(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t in[SMALL] = {0}, out[SMALL];
    chorus_request_t mark = (chorus_request_t)(uintptr_t)0x5eed;

    (void)rank; (void)size; (void)arg;
    if (chorus_comm_abort(comm) != CHORUS_OK)
        return RC_SETUP;
    for (int kind = 0; kind < CALL_KINDS; kind++) {
        chorus_request_t req = mark;

        if (call(kind, in, out, SMALL / 4, CHORUS_INT32, 0, comm, &req) == CHORUS_OK)
            return RC_ACCEPTED;
        if (req != mark)
            return RC_REQ_WRITTEN;
    }
    {
        chorus_request_t req = mark;

        if (chorus_ibarrier(comm, NULL, &req) == CHORUS_OK)
            return RC_ACCEPTED;
        if (req != mark)
            return RC_REQ_WRITTEN;
    }
    return RC_OK;
}

Test(request, not_written_after_abort, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 10, .deadline_s = 30, .kill_rank = -1};
    int status[2];

    cr_expect_eq(harness_run(&opts, req_after_abort, NULL, status, NULL), 0,
                 "exit codes %d %d", status[0], status[1]);
}

/* chorus_request_test writes *done_p for the operation's status, never when it is refused. */
Test(request, test_refused_leaves_done_unwritten)
{
    int done = 42;

    cr_expect_eq(chorus_request_test(NULL, &done), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(done, 42, "*done_p written by a refused test: %d", done);
}

/* ---- count mismatch without the debug check ----------------------------- */

/*
 * One rank calls broadcast or reduce (root 0) with another count or a dtype
 * of another size, over TCP with no debug check. Every rank whose result
 * depends on a call that differs from its own (a broadcast's non-root whose
 * call or the root's differs, the reduce's root) must fail; a rank whose part
 * only sends, or whose call matches the root's, may succeed, but never with
 * wrong data.
 */
typedef struct {
    call_kind_t kind;
    int nranks;
    int odd_rank;       /* the rank whose call differs */
    size_t count;       /* everyone else's, of int32 */
    size_t odd_count;   /* the odd rank's */
    chorus_dtype_t odd_dtype;
} mismatch_case_t;

static int mismatch_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const mismatch_case_t *mc = arg;
    int odd = rank == mc->odd_rank;
    size_t n = odd ? mc->odd_count : mc->count;
    chorus_dtype_t dt = odd ? mc->odd_dtype : CHORUS_INT32;
    size_t bytes = n * chorus_dtype_size(dt), cap = bytes + 4096;
    unsigned char *in = malloc(cap), *out = malloc(cap);
    int receives = mc->kind == CALL_BROADCAST ? rank != 0 : rank == 0;
    int must_fail = mc->kind == CALL_BROADCAST ? receives && (odd || mc->odd_rank == 0)
                                               : receives;
    chorus_status_t st;
    int right = 1;

    if (in == NULL || out == NULL)
        return RC_SETUP;
    for (size_t i = 0; i < cap / sizeof(int32_t); i++) {
        ((int32_t *)in)[i] = rank + 1;
        ((int32_t *)out)[i] = -1;
    }
    st = call(mc->kind, in, out, n, dt, 0, comm, NULL);
    for (size_t i = 0; receives && i < bytes / sizeof(int32_t); i++)
        if (((int32_t *)out)[i] != (mc->kind == CALL_BROADCAST ? 1 : size * (size + 1) / 2))
            right = 0;
    for (size_t i = bytes; i < cap; i++)
        if (out[i] != 0xff)
            right = 0;      /* written past the call's own count */
    free(in);
    free(out);
    if (st == CHORUS_OK && (must_fail || !right))
        return RC_SUCCESS_WRONG;
    return RC_OK;
}

static void run_mismatch(const mismatch_case_t *mc)
{
    harness_opts_t opts = {.nranks = mc->nranks, .timeout_s = 5, .deadline_s = 20,
                           .kill_rank = -1};
    int status[3] = {0, 0, 0};

    setenv("CHORUS_SHM", "0", 1);
    unsetenv("CHORUS_DEBUG_CHECK");
    cr_expect_eq(harness_run(&opts, mismatch_rank, (void *)mc, status, NULL), 0,
                 "%s at %d ranks, rank %d with %zu x %s against %zu x int32: exit codes "
                 "%d %d %d", call_names[mc->kind], mc->nranks, mc->odd_rank, mc->odd_count,
                 chorus_dtype_name(mc->odd_dtype), mc->count, status[0], status[1], status[2]);
    unsetenv("CHORUS_SHM");
}

/* Counts in one message, and in several chunks whose counts differ by whole chunks. */
static void run_mismatches(call_kind_t kind)
{
    static const size_t counts[][2] = {
        {64, 32}, {64, 128}, {1 << 18, 1 << 17}, {1 << 18, 1 << 19}
    };

    for (int nranks = 2; nranks <= 3; nranks++)
        for (int odd = 0; odd < 2; odd++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                mismatch_case_t mc = {kind, nranks, odd, counts[c][0], counts[c][1],
                                      CHORUS_INT32};
                run_mismatch(&mc);
            }
            {
                mismatch_case_t mc = {kind, nranks, odd, 1 << 18, 1 << 18, CHORUS_INT64};
                run_mismatch(&mc);
            }
        }
}

Test(mismatch, tcp_broadcast_never_succeeds_with_wrong_data, .timeout = 120)
{
    run_mismatches(CALL_BROADCAST);
}

Test(mismatch, tcp_reduce_never_succeeds_with_wrong_data, .timeout = 120)
{
    run_mismatches(CALL_REDUCE);
}

/* ---- a call refused on one rank ----------------------------------------- */

/*
 * One rank refuses a call for its own arguments; its call still takes its
 * place, the other ranks log the refusing rank and its reason, every rank's
 * call returns an error, and the next call gives the exact answer on every
 * rank. A reduce contributor may have returned before the notice came,
 * holding nothing; every other rank's result passes through the refusing
 * rank, so it fails.
 *
 * Refused for a buffer (the root's NULL send buffer of a broadcast, another
 * rank's NULL receive buffer): the refusing rank runs the call on scratch
 * buffers. Refused for its shape (a dtype, op, root or count out of range,
 * a barrier's opts): it learns the shape from the other ranks, then runs it
 * so.
 */
typedef enum { REFUSE_BUFFER, REFUSE_SHAPE } refuse_how_t;

typedef struct {
    int kind;           /* call_kind_t, or CALL_KINDS for a barrier */
    int nranks;
    int nonblocking;    /* the refused call is non-blocking; 2: refused for req_p=NULL */
    refuse_how_t how;
} refuse_case_t;

static const char *const refuse_hows[] = {"a buffer", "its shape"};

static char log_dir[64];

static int stderr_to(int rank)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/rank%d.err", log_dir, rank);
    f = freopen(path, "w", stderr);
    if (f == NULL)
        return -1;
    setvbuf(stderr, NULL, _IONBF, 0);
    return 0;
}

static char *log_of(int rank)
{
    char path[128], *text = calloc(1, 1 << 16);
    FILE *f;

    snprintf(path, sizeof(path), "%s/rank%d.err", log_dir, rank);
    f = fopen(path, "r");
    if (text != NULL && f != NULL && fread(text, 1, (1 << 16) - 1, f) == 0)
        text[0] = '\0';
    if (f != NULL)
        fclose(f);
    unlink(path);
    return text;
}

/* The rank that refuses: the last, which is also the root of the rooted calls. */
static int refuser_of(const refuse_case_t *rc)
{
    return rc->nranks - 1;
}

/* The refusing rank's call refused for its shape: one argument out of range per kind. */
static chorus_status_t refuse_shape(const refuse_case_t *rc, chorus_comm_t comm,
                                    const int32_t *in, int32_t *out, chorus_request_t *req_p)
{
    int n = rc->nranks;

    switch (rc->kind) {
    case CALL_ALLREDUCE:
        return call(CALL_ALLREDUCE, in, out, 4, CHORUS_DTYPE_COUNT, 0, comm, req_p);
    case CALL_ALLGATHER:
        return call(CALL_ALLGATHER, in, out, SIZE_MAX / 2, CHORUS_INT32, 0, comm, req_p);
    case CALL_BROADCAST:
        return call(CALL_BROADCAST, in, out, 4, CHORUS_INT32, -1, comm, req_p);
    case CALL_REDUCE_SCATTER:
        return req_p ? chorus_ireduce_scatter(in, out, 4, CHORUS_INT32, CHORUS_OP_COUNT, comm,
                                              NULL, req_p)
                     : chorus_reduce_scatter(in, out, 4, CHORUS_INT32, CHORUS_OP_COUNT, comm,
                                             NULL);
    case CALL_REDUCE:
        return call(CALL_REDUCE, in, out, 4, CHORUS_INT32, n, comm, req_p);
    case CALL_ALLTOALL:
        return call(CALL_ALLTOALL, in, out, 4, (chorus_dtype_t)-1, 0, comm, req_p);
    default: {
        chorus_opts_t opts = CHORUS_OPTS_INIT;

        opts.struct_size = 1;
        return req_p ? chorus_ibarrier(comm, &opts, req_p) : chorus_barrier(comm, &opts);
    }
    }
}

static chorus_status_t refuse_call(const refuse_case_t *rc, chorus_comm_t comm, int bad,
                                   const int32_t *in, int32_t *out)
{
    int root = rc->nranks - 1;
    chorus_request_t req = NULL, *req_p = rc->nonblocking ? &req : NULL;
    chorus_status_t st;

    if (bad && rc->how == REFUSE_SHAPE)
        st = refuse_shape(rc, comm, in, out, req_p);
    else if (bad && rc->nonblocking == 2)   /* buffers fine, req_p NULL (an allreduce) */
        st = chorus_iallreduce(in, out, 4, CHORUS_INT32, CHORUS_SUM, comm, NULL, NULL);
    else if (rc->kind == CALL_KINDS)
        st = req_p ? chorus_ibarrier(comm, NULL, req_p) : chorus_barrier(comm, NULL);
    else
        st = call(rc->kind, bad && rc->kind == CALL_BROADCAST ? NULL : in,
                  bad && rc->kind != CALL_BROADCAST ? NULL : out, 4, CHORUS_INT32, root, comm,
                  req_p);
    if (st == CHORUS_OK && req != NULL)
        st = chorus_request_free(req);
    else if (st != CHORUS_OK && req != NULL)
        st = CHORUS_ERR_INTERNAL;   /* *req_p written on error */
    return st;
}

/* The exact result of refuse_call's good call (inputs rank + 1) at rank of n. */
static int refused_then_exact(int kind, int rank, int n, const int32_t *out)
{
    int sum = n * (n + 1) / 2;

    for (int i = 0; i < 4 * n; i++) {
        int want;

        switch (kind) {
        case CALL_ALLGATHER:
        case CALL_ALLTOALL:
            want = i / 4 + 1;
            break;
        case CALL_BROADCAST:
            want = i < 4 ? n : -7;
            break;
        case CALL_REDUCE:
            want = i < 4 && rank == n - 1 ? sum : -7;
            break;
        case CALL_KINDS:
            want = -7;  /* a barrier writes nothing */
            break;
        default:
            want = i < 4 ? sum : -7;
            break;
        }
        if (out[i] != want) {
            fprintf(stderr, "test: element %d is %d, not %d\n", i, (int)out[i], want);
            return 0;
        }
    }
    return 1;
}

static int refuse_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const refuse_case_t *rc = arg;
    int32_t in[4 * 8], out[4 * 8];
    chorus_status_t first, second;

    (void)size;
    if (stderr_to(rank) != 0)
        return RC_SETUP;
    for (int i = 0; i < 4 * 8; i++) {
        in[i] = rank + 1;
        out[i] = -7;
    }
    /* At 4 ranks rank 0 comes late: the notice is there before its call is. */
    if (rc->nranks == 4 && rank == 0)
        usleep(200 * 1000);
    first = refuse_call(rc, comm, rank == refuser_of(rc), in, out);
    for (int i = 0; i < 4 * 8; i++)
        out[i] = -7;
    second = refuse_call(rc, comm, 0, in, out);
    fprintf(stderr, "test: first %d second %d\n", (int)first, (int)second);
    if (rank == refuser_of(rc) && first != CHORUS_ERR_INVALID_ARG)
        return RC_ACCEPTED;
    /*
     * The reduce's other ranks only send, eagerly: their calls may be over
     * before the notice comes, and they hold no result to be wrong.
     */
    if (first == CHORUS_OK && !(rc->kind == CALL_REDUCE && rank != refuser_of(rc)))
        return RC_SUCCESS_WRONG;
    if (second != CHORUS_OK || !refused_then_exact(rc->kind, rank, rc->nranks, out))
        return RC_AFTER;
    return allreduce_exact(comm, rank, rc->nranks);
}

static void run_refuse(const refuse_case_t *rc, int shm)
{
    harness_opts_t opts = {.nranks = rc->nranks, .timeout_s = 10, .deadline_s = 30,
                           .kill_rank = -1};
    int status[5] = {0}, named = 0, refuser = refuser_of(rc);
    double elapsed[5] = {0};
    const char *what = rc->kind == CALL_KINDS ? "barrier" : call_names[rc->kind];
    char needle[64];

    snprintf(log_dir, sizeof(log_dir), "/tmp/chorus_errors_XXXXXX");
    cr_assert_not_null(mkdtemp(log_dir));
    setenv("CHORUS_SHM", shm ? "1" : "0", 1);
    cr_expect_eq(harness_run(&opts, refuse_rank, (void *)rc, status, elapsed), 0,
                 "%s%s at %d ranks over %s refused by rank %d for %s: exit codes "
                 "%d %d %d %d %d", rc->nonblocking ? "non-blocking " : "", what, rc->nranks,
                 shm ? "shm" : "tcp", refuser, refuse_hows[rc->how], status[0], status[1],
                 status[2], status[3], status[4]);
    snprintf(needle, sizeof(needle), "rank %d refused %s #0 (invalid argument", refuser, what);
    for (int r = 0; r < rc->nranks; r++) {
        char *log = log_of(r);

        cr_assert_not_null(log);
        if (r != refuser && strstr(log, needle) != NULL)
            named++;
        if (status[r] != 0)
            cr_log_error("rank %d logged:\n%s", r, log);
        free(log);
    }
    rmdir(log_dir);
    unsetenv("CHORUS_SHM");
    /* Well under the 10 s timeout: no rank waited for its deadline to learn of it. */
    for (int r = 0; r < rc->nranks; r++)
        cr_expect_lt(elapsed[r], 6.0, "%s at %d ranks over %s: rank %d took %.1f s", what,
                     rc->nranks, shm ? "shm" : "tcp", r, elapsed[r]);
    /* Every other rank noted the notice before the refusing rank went on, and logs it. */
    cr_expect_eq(named, rc->nranks - 1, "%d ranks named the refusing rank %d (%s)", named,
                 refuser, needle);
}

static void run_refusals(refuse_how_t how, int shm)
{
    for (int kind = 0; kind <= CALL_KINDS; kind++)
        for (int nranks = 2; nranks <= 5; nranks++) {
            refuse_case_t rc = {kind, nranks, nranks == 3, how};

            if (how == REFUSE_BUFFER && kind == CALL_KINDS)
                continue;   /* a barrier has no buffer */
            run_refuse(&rc, shm);
        }
}

Test(refused, for_a_buffer_on_one_rank_fails_that_call_only_shm, .timeout = 180)
{
    run_refusals(REFUSE_BUFFER, 1);
}

Test(refused, for_a_buffer_on_one_rank_fails_that_call_only_tcp, .timeout = 180)
{
    run_refusals(REFUSE_BUFFER, 0);
}

Test(refused, for_its_shape_on_one_rank_fails_that_call_only_shm, .timeout = 180)
{
    run_refusals(REFUSE_SHAPE, 1);
}

Test(refused, for_its_shape_on_one_rank_fails_that_call_only_tcp, .timeout = 180)
{
    run_refusals(REFUSE_SHAPE, 0);
}

/* A non-blocking call refused for req_p=NULL alone runs too, and returns at once. */
Test(refused, for_req_p_on_one_rank_fails_that_call_only, .timeout = 60)
{
    for (int shm = 0; shm < 2; shm++) {
        refuse_case_t rc = {CALL_ALLREDUCE, 3, 2, REFUSE_BUFFER};

        run_refuse(&rc, shm);
    }
}

/*
 * A compressed allreduce refused on one rank for its buffer runs there
 * compressed too: every rank's call fails, and the next compressed call
 * (of small integers, exact in fp16) is exact.
 */
static int refuse_compressed_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float in[1000], out[1000];
    chorus_opts_t fp16 = CHORUS_OPTS_INIT;

    (void)arg;
    fp16.flags = CHORUS_COMPRESS_FP16;
    for (int i = 0; i < 1000; i++)
        in[i] = (float)(rank + 1 + i % 7);
    if (chorus_allreduce(in, rank == size - 1 ? NULL : out, 1000, CHORUS_FLOAT32, CHORUS_SUM,
                         comm, &fp16) != CHORUS_ERR_INVALID_ARG)
        return RC_SUCCESS_WRONG;
    if (chorus_allreduce(in, out, 1000, CHORUS_FLOAT32, CHORUS_SUM, comm, &fp16) != CHORUS_OK)
        return RC_AFTER;
    for (int i = 0; i < 1000; i++)
        if (out[i] != (float)(size * (size + 1) / 2 + size * (i % 7)))
            return RC_AFTER;
    return allreduce_exact(comm, rank, size);
}

Test(refused, compressed_for_a_buffer_on_one_rank_fails_that_call_only, .timeout = 60)
{
    for (int nranks = 2; nranks <= 4; nranks++) {
        harness_opts_t opts = {.nranks = nranks, .timeout_s = 10, .deadline_s = 30,
                               .kill_rank = -1};
        int status[4] = {0};

        cr_expect_eq(harness_run(&opts, refuse_compressed_rank, NULL, status, NULL), 0,
                     "%d ranks: exit codes %d %d %d %d", nranks, status[0], status[1],
                     status[2], status[3]);
    }
}

/*
 * One rank refuses an allreduce for its buffer, another for its opts: the
 * first runs it on scratch buffers, the second as it learns it from the
 * others; every rank's call fails, soon, and the next one is exact.
 */
static int refuse_mixed_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    chorus_opts_t bad = CHORUS_OPTS_INIT;

    (void)arg;
    bad.struct_size = 1;
    if (chorus_allreduce(in, rank == size - 1 ? NULL : out, 4, CHORUS_INT32, CHORUS_SUM, comm,
                         rank == 0 ? &bad : NULL) != CHORUS_ERR_INVALID_ARG)
        return RC_SUCCESS_WRONG;
    return allreduce_exact(comm, rank, size);
}

Test(refused, for_a_buffer_here_and_its_shape_there_fails_that_call_only, .timeout = 120)
{
    for (int shm = 0; shm < 2; shm++)
        for (int nranks = 2; nranks <= 4; nranks++) {
            harness_opts_t opts = {.nranks = nranks, .timeout_s = 10, .deadline_s = 30,
                                   .kill_rank = -1};
            int status[4] = {0};
            double elapsed[4] = {0};

            setenv("CHORUS_SHM", shm ? "1" : "0", 1);
            cr_expect_eq(harness_run(&opts, refuse_mixed_rank, NULL, status, elapsed), 0,
                         "%d ranks over %s: exit codes %d %d %d %d", nranks,
                         shm ? "shm" : "tcp", status[0], status[1], status[2], status[3]);
            unsetenv("CHORUS_SHM");
            for (int r = 0; r < nranks; r++)
                cr_expect_lt(elapsed[r], 6.0, "%d ranks over %s: rank %d took %.1f s", nranks,
                             shm ? "shm" : "tcp", r, elapsed[r]);
        }
}

/*
 * Every rank refuses the same call (a NULL receive buffer everywhere, or a
 * root out of range for the reduce, bad opts for the barrier): every rank
 * gets CHORUS_ERR_INVALID_ARG, the communicator goes on, and the next call
 * gives the exact answer.
 */
static int refuse_alike_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t in[4 * 8] = {0};
    chorus_opts_t bad = CHORUS_OPTS_INIT;
    int rc;

    (void)arg;
    bad.struct_size = 1;
    for (int kind = 0; kind < CALL_KINDS; kind++) {
        chorus_status_t st = kind == CALL_REDUCE
                                 ? call(kind, in, in, 4, CHORUS_INT32, size, comm, NULL)
                                 : call(kind, in, NULL, 4, CHORUS_INT32, 0, comm, NULL);

        if (st != CHORUS_ERR_INVALID_ARG)
            return RC_ACCEPTED;
        if ((rc = allreduce_exact(comm, rank, size)) != RC_OK)
            return rc;
    }
    if (chorus_barrier(comm, &bad) != CHORUS_ERR_INVALID_ARG)
        return RC_ACCEPTED;
    return allreduce_exact(comm, rank, size);
}

/* fn on every rank of jobs of lo..hi (at most 5) ranks over shm or TCP: each exits 0. */
static void run_ranks_over(harness_rank_fn fn, int lo, int hi, int shm)
{
    for (int nranks = lo; nranks <= hi; nranks++) {
        harness_opts_t opts = {.nranks = nranks, .timeout_s = 10, .deadline_s = 30,
                               .kill_rank = -1};
        int status[5] = {0};

        setenv("CHORUS_SHM", shm ? "1" : "0", 1);
        cr_expect_eq(harness_run(&opts, fn, NULL, status, NULL), 0,
                     "%d ranks over %s: exit codes %d %d %d %d %d", nranks,
                     shm ? "shm" : "tcp", status[0], status[1], status[2], status[3],
                     status[4]);
        unsetenv("CHORUS_SHM");
    }
}

static void run_refuse_alike(int shm)
{
    run_ranks_over(refuse_alike_rank, 2, 5, shm);
}

Test(refused, alike_on_every_rank_keeps_the_communicator_shm, .timeout = 120)
{
    run_refuse_alike(1);
}

Test(refused, alike_on_every_rank_keeps_the_communicator_tcp, .timeout = 120)
{
    run_refuse_alike(0);
}

/*
 * The device options where no CUDA device is (this build without CUDA, or a
 * machine without a GPU): a mem_type out of range is refused on the rank
 * that passes it and fails that call everywhere; CHORUS_MEM_CUDA or a
 * stream is unsupported, alike on every rank or on one; the engine and
 * chorus_fc_weight_grad refuse them too; every time the next call is exact.
 */
static int device_opts_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    float x[4] = {1, 2, 3, 4}, grad[4];
    chorus_opts_t bad = CHORUS_OPTS_INIT, cuda = CHORUS_OPTS_INIT, streamed = CHORUS_OPTS_INIT;
    chorus_engine_t engine;
    chorus_request_t req = NULL;
    chorus_status_t st;
    int rc;

    (void)arg;
    bad.mem_type = 7;
    cuda.mem_type = CHORUS_MEM_CUDA;
    streamed.stream = (void *)&streamed;   /* never used: refused before any CUDA call */
    st = chorus_allreduce(in, out, 4, CHORUS_INT32, CHORUS_SUM, comm, rank == 0 ? &bad : NULL);
    if (st != CHORUS_ERR_INVALID_ARG)
        return RC_ACCEPTED;
    if ((rc = allreduce_exact(comm, rank, size)) != RC_OK)
        return rc;
    if (chorus__device_present())
        return RC_OK;   /* a device is there: the rest is the GPU test's (tests/cuda) */
    if (chorus_allreduce(in, out, 4, CHORUS_INT32, CHORUS_SUM, comm, &cuda) !=
        CHORUS_ERR_UNSUPPORTED)
        return RC_ACCEPTED;
    if ((rc = allreduce_exact(comm, rank, size)) != RC_OK)
        return rc;
    /* Refused on the last rank. The root's part depends on no rank, and the others read only
     * the root's data: they may be done before the notice comes (chorus(7), ERRORS). */
    st = chorus_broadcast(in, out, 4, CHORUS_INT32, 0, comm, rank == size - 1 ? &streamed : NULL);
    if (rank == size - 1 && st != CHORUS_ERR_UNSUPPORTED)
        return RC_ACCEPTED;
    for (int i = 0; st == CHORUS_OK && i < 4; i++)
        if (out[i] != i + 1)
            return RC_SUCCESS_WRONG;
    if ((rc = allreduce_exact(comm, rank, size)) != RC_OK)
        return rc;
    if (chorus_engine_create(comm, NULL, &engine) != CHORUS_OK)
        return RC_SETUP;
    st = chorus_engine_allreduce(engine, "t", x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, &streamed,
                                 &req);
    if (st == CHORUS_OK)
        chorus_request_free(req);
    if (chorus_engine_destroy(engine) != CHORUS_OK || st != CHORUS_ERR_UNSUPPORTED)
        return RC_ACCEPTED;
    if (chorus_fc_weight_grad(x, x, 1, 4, 1, CHORUS_FLOAT32, grad, comm, &cuda) !=
        CHORUS_ERR_UNSUPPORTED)
        return RC_ACCEPTED;
    return allreduce_exact(comm, rank, size);
}

Test(refused, device_options_without_a_device, .timeout = 120)
{
    for (int nranks = 1; nranks <= 3; nranks++) {
        harness_opts_t opts = {.nranks = nranks, .timeout_s = 10, .deadline_s = 30,
                               .kill_rank = -1};
        int status[3] = {0};

        cr_expect_eq(harness_run(&opts, device_opts_rank, NULL, status, NULL), 0,
                     "%d ranks: exit codes %d %d %d", nranks, status[0], status[1], status[2]);
    }
}

/* ---- a repeated call changed in one argument ------------------------------ */

/* An allreduce (root -1) or a broadcast of 4 int32, blocking, with these arguments. */
typedef struct {
    const char *what;
    int sendbuf_at, recvbuf_at;     /* element offsets into the rank's buffer; -1: NULL */
    size_t count;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;                       /* -1: an allreduce; INT32_MAX: the broadcast's bad root */
} repeat_call_t;

static const repeat_call_t repeat_good[2] = {
    {"allreduce", 0, SMALL, 4, CHORUS_INT32, CHORUS_SUM, -1},
    {"broadcast", 0, SMALL, 4, CHORUS_INT32, CHORUS_SUM, 0},
};

/* Each changes one argument of repeat_good[good] so that every rank refuses the call. */
static const struct {
    int good;
    repeat_call_t bad;
} repeat_bad[] = {
    {0, {"dtype", 0, SMALL, 4, CHORUS_DTYPE_COUNT, CHORUS_SUM, -1}},
    {0, {"op", 0, SMALL, 4, CHORUS_INT32, CHORUS_OP_COUNT, -1}},
    {0, {"count", 0, SMALL, SIZE_MAX / 2, CHORUS_INT32, CHORUS_SUM, -1}},
    {0, {"recvbuf", 0, -1, 4, CHORUS_INT32, CHORUS_SUM, -1}},
    {0, {"sendbuf", -1, SMALL, 4, CHORUS_INT32, CHORUS_SUM, -1}},
    {0, {"overlapping buffers", SMALL + 1, SMALL, 4, CHORUS_INT32, CHORUS_SUM, -1}},
    {1, {"root", 0, SMALL, 4, CHORUS_INT32, CHORUS_SUM, INT32_MAX}},
};

static chorus_status_t repeat_run(const repeat_call_t *c, chorus_comm_t comm, int32_t *buf)
{
    const int32_t *s = c->sendbuf_at < 0 ? NULL : buf + c->sendbuf_at;
    int32_t *r = c->recvbuf_at < 0 ? NULL : buf + c->recvbuf_at;

    if (c->root < 0)
        return chorus_allreduce(s, r, c->count, c->dtype, c->op, comm, NULL);
    return chorus_broadcast(s, r, c->count, c->dtype,
                            c->root == INT32_MAX ? chorus_comm_size(comm) : c->root, comm, NULL);
}

/* The good call of repeat_good[good] on buf, with fresh inputs: exact, or an RC_* code. */
static int repeat_exact(int good, chorus_comm_t comm, int rank, int size, int round,
                        int32_t *buf)
{
    int want = good == 0 ? size * (size + 1) / 2 + size * round : 1 + round;

    for (int i = 0; i < SMALL; i++) {
        buf[i] = rank + 1 + round;
        buf[SMALL + i] = -1;
    }
    if (repeat_run(&repeat_good[good], comm, buf) != CHORUS_OK)
        return RC_AFTER;
    for (int i = 0; i < 4; i++)
        if (buf[SMALL + i] != want)
            return RC_SUCCESS_WRONG;
    return RC_OK;
}

/*
 * A blocking call that repeats the last accepted one in every argument skips
 * the checks (coll_api.c keeps their answers): one that differs from it in a
 * single argument must be checked again. Each bad call follows the same good
 * call made twice, is refused on every rank, and the good call after it is
 * exact (on the same buffers, so it repeats the remembered call again).
 */
static int repeat_changed_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t buf[2 * SMALL] = {0};
    int rc, round = 0;

    (void)arg;
    for (size_t k = 0; k < sizeof(repeat_bad) / sizeof(repeat_bad[0]); k++) {
        int good = repeat_bad[k].good;

        for (int twice = 0; twice < 2; twice++)
            if ((rc = repeat_exact(good, comm, rank, size, round++, buf)) != RC_OK)
                return rc;
        if (repeat_run(&repeat_bad[k].bad, comm, buf) != CHORUS_ERR_INVALID_ARG) {
            fprintf(stderr, "rank %d: the repeated %s with a bad %s was not refused\n", rank,
                    repeat_good[good].what, repeat_bad[k].bad.what);
            return RC_ACCEPTED;
        }
        if ((rc = repeat_exact(good, comm, rank, size, round++, buf)) != RC_OK)
            return rc;
    }
    return RC_OK;
}

static void run_repeat_changed(int shm)
{
    run_ranks_over(repeat_changed_rank, 1, 3, shm);
}

Test(refused, a_repeated_call_changed_in_one_argument_is_checked_again_shm, .timeout = 120)
{
    run_repeat_changed(1);
}

Test(refused, a_repeated_call_changed_in_one_argument_is_checked_again_tcp, .timeout = 120)
{
    run_repeat_changed(0);
}
