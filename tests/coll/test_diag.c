/*
 * Diagnostics: stall reports (CHORUS_STALL_WARN), the call check
 * (CHORUS_DEBUG_CHECK), a size mismatch without it, and per-component log
 * levels (CHORUS_LOG_LEVEL). Each rank writes its stderr to a file of its
 * own so that the test can read exactly what that rank logged.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define DIAG_RANKS 3
#define STALL_S 2.0
#define COUNT 1024
#define GUARD 4096      /* bytes after every receive buffer that nothing may touch */

/* Exit codes of the rank functions: 0 = saw the expected outcome. */
enum {
    RC_OK = 0, RC_STATUS = 10, RC_TOUCHED = 11, RC_GUARD = 12, RC_SETUP = 13, RC_RESULT = 14,
    RC_AFTER = 15
};

static char diag_dir[64];

static void dir_make(void)
{
    snprintf(diag_dir, sizeof(diag_dir), "/tmp/chorus_diag_XXXXXX");
    cr_assert_not_null(mkdtemp(diag_dir));
}

static void dir_remove(void)
{
    char path[128];

    for (int r = 0; r < DIAG_RANKS + 1; r++) {
        snprintf(path, sizeof(path), "%s/rank%d.err", diag_dir, r);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/all.err", diag_dir);
    unlink(path);
    rmdir(diag_dir);
}

/* From here on, this rank's messages go to its own file. */
static int rank_stderr_to_file(int rank)
{
    char path[128];
    int fd;

    snprintf(path, sizeof(path), "%s/rank%d.err", diag_dir, rank);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        return -1;
    close(fd);
    return 0;
}

/* The whole file as a string (empty when missing); the caller frees it. */
static char *slurp(const char *name)
{
    char path[128];
    FILE *f;
    char *text = calloc(1, 1 << 20);
    size_t n = 0;

    cr_assert_not_null(text);
    snprintf(path, sizeof(path), "%s/%s", diag_dir, name);
    f = fopen(path, "r");
    if (f != NULL) {
        n = fread(text, 1, (1 << 20) - 1, f);
        fclose(f);
    }
    text[n] = '\0';
    return text;
}

static char *rank_log(int rank)
{
    char name[32];

    snprintf(name, sizeof(name), "rank%d.err", rank);
    return slurp(name);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;

    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- stall reports ------------------------------------------------------ */

/* Each stall scenario: stderr to the rank's file, inputs of 1, then a barrier (#0) all join. */
static int stall_begin(chorus_comm_t comm, int rank, float *in)
{
    if (rank_stderr_to_file(rank) != 0)
        return RC_SETUP;
    for (int i = 0; i < COUNT; i++)
        in[i] = 1.0f;
    return chorus_barrier(comm, NULL) == CHORUS_OK ? 0 : RC_STATUS;
}

/*
 * Every rank joins a barrier (#0), then ranks 0 and 2 call an allreduce (#1)
 * that rank 1 joins only 3.5 s later: both report it once at 2 s.
 */
static int stall_late_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float in[COUNT], out[COUNT];
    int rc = stall_begin(comm, rank, in);

    (void)size; (void)arg;
    if (rc != 0)
        return rc;
    if (rank == 1)
        usleep(3500 * 1000);
    if (chorus_allreduce(in, out, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != CHORUS_OK)
        return RC_STATUS;
    return out[0] == 3.0f ? RC_OK : RC_RESULT;
}

Test(stall, names_the_rank_that_has_not_started, .timeout = 60)
{
    harness_opts_t opts = {.nranks = DIAG_RANKS, .timeout_s = 30, .deadline_s = 40,
                           .kill_rank = -1};
    const char *expect = "warn: core: rank %d: allreduce #1 (1024 x float32) waiting 2 s; "
                         "rank 1 has not started it (it is at #0)\n";
    int status[DIAG_RANKS];
    char line[256];

    dir_make();
    setenv("CHORUS_STALL_WARN", "2", 1);
    setenv("CHORUS_SHM", "0", 1);   /* the network path's reports */
    cr_expect_eq(harness_run(&opts, stall_late_rank, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
    for (int r = 0; r < DIAG_RANKS; r++) {
        char *log = rank_log(r);

        /*
         * A report is printed only while its call still waits, and the call
         * ends once rank 1 joins at 3.5 s: one report, within threshold + 2 s.
         */
        snprintf(line, sizeof(line), expect, r);
        if (r == 1)
            cr_expect_eq(count_of(log, "waiting"), 0, "rank 1 reported a stall:\n%s", log);
        else
            cr_expect_eq(count_of(log, line), 1, "rank %d logged:\n%s", r, log);
        cr_expect_eq(count_of(log, "waiting"), r == 1 ? 0 : 1, "rank %d logged:\n%s", r, log);
        cr_expect_eq(count_of(log, " lost "), 0, "rank %d logged:\n%s", r, log);
        free(log);
    }
    dir_remove();
}

/*
 * Rank 1 stops (SIGSTOP, its progress thread too) after the barrier, so it
 * cannot answer; a child process it forked wakes it 4.5 s later.
 */
static int stall_frozen_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    float in[COUNT], out[COUNT];
    int rc = stall_begin(comm, rank, in);

    (void)size; (void)arg;
    if (rc != 0)
        return rc;
    if (rank == 1) {
        pid_t waker = fork();

        if (waker < 0)
            return RC_SETUP;
        if (waker == 0) {
            usleep(4500 * 1000);
            kill(getppid(), SIGCONT);
            _exit(0);
        }
        raise(SIGSTOP);
        waitpid(waker, NULL, 0);
    }
    if (chorus_allreduce(in, out, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != CHORUS_OK)
        return RC_STATUS;
    return out[0] == 3.0f ? RC_OK : RC_RESULT;
}

Test(stall, names_the_rank_that_does_not_answer, .timeout = 60)
{
    harness_opts_t opts = {.nranks = DIAG_RANKS, .timeout_s = 30, .deadline_s = 40,
                           .kill_rank = -1};
    int status[DIAG_RANKS];
    char line[256];

    dir_make();
    setenv("CHORUS_STALL_WARN", "2", 1);
    setenv("CHORUS_SHM", "0", 1);   /* the network path's reports */
    cr_expect_eq(harness_run(&opts, stall_frozen_rank, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
    for (int r = 0; r < DIAG_RANKS; r += 2) {
        char *log = rank_log(r);

        /* Asked at 2 s, given up on 1 s later. */
        snprintf(line, sizeof(line), "rank %d: allreduce #1 (1024 x float32) waiting 3 s; "
                 "rank 1 did not answer\n", r);
        cr_expect_eq(count_of(log, line), 1, "rank %d logged:\n%s", r, log);
        free(log);
    }
    dir_remove();
}

/* ---- CHORUS_DEBUG_CHECK ------------------------------------------------- */

typedef enum { MISMATCH_COUNT, MISMATCH_OP, MISMATCH_ROOT } mismatch_t;

static int buffer_untouched(const unsigned char *buf, size_t bytes, unsigned char fill)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != fill)
            return 0;
    return 1;
}

/* Rank 1's call differs from the others' in one argument. */
static int check_mismatch(chorus_comm_t comm, int rank, int size, void *arg)
{
    mismatch_t what = *(const mismatch_t *)arg;
    size_t bytes = COUNT * sizeof(float) + GUARD;
    float *in = malloc(bytes), *out = malloc(bytes);
    chorus_status_t status;
    int rc = RC_OK;

    if (in == NULL || out == NULL || rank_stderr_to_file(rank) != 0)
        return RC_SETUP;
    for (int i = 0; i < COUNT; i++)
        in[i] = 1.0f;
    memset(out, 0x5a, bytes);
    if (what == MISMATCH_COUNT)
        status = chorus_allreduce(in, out, rank == 1 ? COUNT - 24 : COUNT, CHORUS_FLOAT32,
                                  CHORUS_SUM, comm, NULL);
    else if (what == MISMATCH_OP)
        status = chorus_allreduce(in, out, COUNT, CHORUS_FLOAT32,
                                  rank == 1 ? CHORUS_MAX : CHORUS_SUM, comm, NULL);
    else
        status = chorus_broadcast(in, out, COUNT, CHORUS_FLOAT32, rank == 1 ? 1 : 0, comm, NULL);
    if (status != CHORUS_ERR_INVALID_ARG)
        rc = RC_STATUS;
    else if (!buffer_untouched((unsigned char *)out, bytes, 0x5a))
        rc = RC_TOUCHED;
    /* Nothing was sent: the communicator goes on with the next call. */
    if (rc == RC_OK &&
        (chorus_allreduce(in, out, COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != CHORUS_OK ||
         out[COUNT - 1] != (float)size))
        rc = RC_AFTER;
    free(in);
    free(out);
    return rc;
}

static void run_check_mismatch(mismatch_t what, const char *expect)
{
    harness_opts_t opts = {.nranks = DIAG_RANKS, .timeout_s = 10, .deadline_s = 30,
                           .kill_rank = -1};
    int status[DIAG_RANKS];

    dir_make();
    setenv("CHORUS_DEBUG_CHECK", "1", 1);
    cr_expect_eq(harness_run(&opts, check_mismatch, &what, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
    for (int r = 0; r < DIAG_RANKS; r++) {
        char *log = rank_log(r), line[512];

        snprintf(line, sizeof(line), "error: core: rank %d: call #0 fails on every rank "
                 "(CHORUS_DEBUG_CHECK): %s; no data was moved\n", r, expect);
        cr_expect_eq(count_of(log, line), 1, "rank %d logged:\n%s\nexpected:\n%s", r, log,
                     line);
        free(log);
    }
    dir_remove();
}

Test(debug_check, count_mismatch_fails_every_rank, .timeout = 60)
{
    run_check_mismatch(MISMATCH_COUNT,
                       "rank 0 called allreduce #0 (count 1024, float32, op sum) but rank 1 "
                       "called allreduce #0 (count 1000, float32, op sum)");
}

Test(debug_check, op_mismatch_fails_every_rank, .timeout = 60)
{
    run_check_mismatch(MISMATCH_OP,
                       "rank 0 called allreduce #0 (count 1024, float32, op sum) but rank 1 "
                       "called allreduce #0 (count 1024, float32, op max)");
}

Test(debug_check, root_mismatch_fails_every_rank, .timeout = 60)
{
    run_check_mismatch(MISMATCH_ROOT,
                       "rank 0 called broadcast #0 (count 1024, float32, root 0) but rank 1 "
                       "called broadcast #0 (count 1024, float32, root 1)");
}

/* With matching calls the check is invisible: results as without it. */
static int check_match(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t v[5] = {rank, rank, rank, rank, rank}, root_val = 7;

    (void)arg;
    if (chorus_allreduce(v, v, 5, CHORUS_INT32, CHORUS_SUM, comm, NULL) != CHORUS_OK ||
        v[4] != size * (size - 1) / 2)
        return RC_RESULT;
    if (chorus_broadcast(&root_val, &root_val, 1, CHORUS_INT32, size - 1, comm, NULL) !=
            CHORUS_OK || root_val != 7)
        return RC_RESULT;
    return chorus_barrier(comm, NULL) == CHORUS_OK ? RC_OK : RC_STATUS;
}

Test(debug_check, matching_calls_pass, .timeout = 60)
{
    harness_opts_t opts = {.nranks = DIAG_RANKS, .timeout_s = 10, .deadline_s = 30,
                           .kill_rank = -1};
    int status[DIAG_RANKS];

    setenv("CHORUS_DEBUG_CHECK", "1", 1);
    cr_expect_eq(harness_run(&opts, check_match, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
}

/* ---- size mismatch without the check ------------------------------------ */

/*
 * Rank 1 passes 24 elements fewer. Whatever the algorithm, no rank may write
 * past its own count, and the call must fail with a clean error.
 */
static int unchecked_mismatch(chorus_comm_t comm, int rank, int size, void *arg)
{
    size_t count = *(const size_t *)arg, mine = rank == 1 ? count - 24 : count;
    size_t bytes = mine * sizeof(float);
    unsigned char *in = malloc(count * sizeof(float)), *out = malloc(bytes + GUARD);
    chorus_status_t status;
    int rc;

    (void)size;
    if (in == NULL || out == NULL || rank_stderr_to_file(rank) != 0)
        return RC_SETUP;
    memset(in, 0, count * sizeof(float));
    memset(out + bytes, 0xa5, GUARD);
    status = chorus_allreduce(in, out, mine, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    if (!buffer_untouched(out + bytes, GUARD, 0xa5))
        rc = RC_GUARD;
    else if (status == CHORUS_ERR_TRUNCATED)
        rc = 1;     /* the rank that saw too much data */
    else if (status == CHORUS_ERR_PROTOCOL)
        rc = 2;     /* the rank that saw too little */
    else if (status == CHORUS_ERR_PEER_FAILED || status == CHORUS_ERR_ABORTED ||
             status == CHORUS_ERR_TIMEOUT)
        rc = 3;     /* a rank that learnt of the failure from another */
    else
        rc = RC_STATUS;
    free(in);
    free(out);
    return rc;
}

static void run_unchecked_mismatch(size_t count)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 5, .deadline_s = 30, .kill_rank = -1};
    int status[2], detected = 0;

    dir_make();
    unsetenv("CHORUS_DEBUG_CHECK");
    setenv("CHORUS_SHM", "0", 1);   /* truncation is the network path's behaviour */
    harness_run(&opts, unchecked_mismatch, &count, status, NULL);
    for (int r = 0; r < 2; r++) {
        char *log = rank_log(r), line[128];

        cr_expect(status[r] >= 1 && status[r] <= 3, "rank %d exited with %d; logged:\n%s", r,
                  status[r], log);
        /* Whichever rank saw the mismatch names the peer it came from. */
        if (status[r] == 1)
            snprintf(line, sizeof(line), "rank %d: message from peer %d with tag", r, 1 - r);
        else
            snprintf(line, sizeof(line), "bytes from peer %d, expected", 1 - r);
        if (status[r] == 1 || status[r] == 2)
            cr_expect(strstr(log, line) != NULL, "rank %d logged:\n%s", r, log);
        detected += status[r] == 1 || status[r] == 2;
        free(log);
    }
    cr_expect_geq(detected, 1, "no rank saw the mismatch itself (%d %d)", status[0], status[1]);
    dir_remove();
}

Test(mismatch, unchecked_small_count_is_truncated_not_overrun, .timeout = 60)
{
    run_unchecked_mismatch(COUNT);
}

Test(mismatch, unchecked_large_count_is_truncated_not_overrun, .timeout = 60)
{
    run_unchecked_mismatch((size_t)1 << 20);
}

/* ---- a mismatch on the shared-memory path -------------------------------- */

/*
 * Rank 0 passes 2 elements fewer to an allreduce over shared memory, without
 * the call check: the rank that sees the other fingerprint fails with
 * INVALID_ARG (the others learn it from that rank), and its message points to
 * CHORUS_DEBUG_CHECK=1 and what that would name.
 */
static int shm_mismatch(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[12] = {0};
    chorus_status_t status;

    (void)size; (void)arg;
    if (rank_stderr_to_file(rank) != 0)
        return RC_SETUP;
    status = chorus_allreduce(x, x, rank == 0 ? 10 : 12, CHORUS_FLOAT32, CHORUS_SUM, comm,
                              NULL);
    if (status == CHORUS_ERR_INVALID_ARG)
        return 1;
    return status == CHORUS_ERR_PEER_FAILED ? 2 : RC_STATUS;
}

Test(mismatch, shm_mismatch_suggests_the_call_check, .timeout = 60)
{
    harness_opts_t opts = {.nranks = DIAG_RANKS, .timeout_s = 5, .deadline_s = 30,
                           .kill_rank = -1};
    int status[DIAG_RANKS], detected = 0;

    dir_make();
    unsetenv("CHORUS_DEBUG_CHECK");
    setenv("CHORUS_SHM", "1", 1);
    harness_run(&opts, shm_mismatch, NULL, status, NULL);
    for (int r = 0; r < DIAG_RANKS; r++) {
        char *log = rank_log(r);

        cr_expect(status[r] == 1 || status[r] == 2, "rank %d exited with %d; logged:\n%s", r,
                  status[r], log);
        if (status[r] == 1) {
            cr_expect(strstr(log, "set CHORUS_DEBUG_CHECK=1 on every rank to have each call "
                              "compared before any data moves, naming both ranks and their "
                              "collective, sequence number, count, dtype, op and root") != NULL,
                      "rank %d logged:\n%s", r, log);
            detected++;
        }
        free(log);
    }
    cr_expect_geq(detected, 1, "no rank saw the mismatch itself");
    dir_remove();
}

/* ---- per-component log levels ------------------------------------------- */

static int log_levels_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    (void)rank; (void)size; (void)arg;
    return chorus_barrier(comm, NULL) == CHORUS_OK ? RC_OK : RC_STATUS;
}

/*
 * Every rank's messages, creation included, in one file: the ranks inherit
 * the test's stderr, which points at it while they run.
 */
static char *run_with_log_level(const char *value)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 10, .deadline_s = 30, .kill_rank = -1};
    int status[2], saved = dup(2), fd;
    char path[128];

    snprintf(path, sizeof(path), "%s/all.err", diag_dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    cr_assert(fd >= 0 && saved >= 0);
    setenv("CHORUS_LOG_LEVEL", value, 1);
    fflush(stderr);
    dup2(fd, 2);
    close(fd);
    harness_run(&opts, log_levels_rank, NULL, status, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_expect(status[0] == 0 && status[1] == 0, "ranks exited with %d %d", status[0],
              status[1]);
    return slurp("all.err");
}

Test(log, component_levels, .timeout = 60)
{
    char *log;

    dir_make();
    log = run_with_log_level("error,tcp=debug");
    /* A tcp debug message, with its source line, and no core info message. */
    cr_expect(strstr(log, ": debug: tcp: rank 0: tcp: connected to peer 1 (tcp_connect.c:") !=
              NULL, "logged:\n%s", log);
    cr_expect(strstr(log, ": info: core: ") == NULL, "logged:\n%s", log);
    /* The communicator's end is not taken for a lost peer. */
    cr_expect(strstr(log, " lost ") == NULL, "logged:\n%s", log);
    free(log);

    /* The other way round: the core's info message, no tcp debug message. */
    log = run_with_log_level("core=info, error");
    cr_expect_eq(count_of(log, ": info: core: rank 0 of 2: communicator ready"), 1,
                 "logged:\n%s", log);
    cr_expect(strstr(log, ": tcp: ") == NULL, "logged:\n%s", log);
    free(log);
    dir_remove();
}

Test(log, bad_items_are_reported_once_and_ignored, .timeout = 60)
{
    char *log;

    dir_make();
    log = run_with_log_level("error,tpc=debug,core=loud,tcp=debug");
    /* Once per process: each of the two ranks reads the variable once. */
    cr_expect_eq(count_of(log, "warn: util: CHORUS_LOG_LEVEL item 'tpc=debug' ignored: "
                               "unknown component"), 2, "logged:\n%s", log);
    cr_expect_eq(count_of(log, "warn: util: CHORUS_LOG_LEVEL item 'core=loud' ignored: "
                               "unknown level"), 2, "logged:\n%s", log);
    /* The good items still apply. */
    cr_expect(strstr(log, ": debug: tcp: ") != NULL, "logged:\n%s", log);
    free(log);
    dir_remove();
}

/*
 * chorus_request_algorithm names what CHORUS_TUNE forced, for each size range,
 * and the name outlives the request.
 */
static int algorithm_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    static int32_t buf[4096];
    const char *small_name, *large_name;
    chorus_request_t req;

    (void)rank, (void)size, (void)arg;
    if (chorus_request_algorithm(NULL) != NULL)
        return RC_RESULT;
    if (chorus_iallreduce(buf, buf, 16, CHORUS_INT32, CHORUS_SUM, comm, NULL, &req) != CHORUS_OK)
        return RC_STATUS;
    small_name = chorus_request_algorithm(req);
    if (chorus_request_free(req) != CHORUS_OK)
        return RC_STATUS;
    if (chorus_iallreduce(buf, buf, 4096, CHORUS_INT32, CHORUS_SUM, comm, NULL, &req) != CHORUS_OK)
        return RC_STATUS;
    large_name = chorus_request_algorithm(req);
    if (chorus_request_free(req) != CHORUS_OK)
        return RC_STATUS;
    if (small_name == NULL || strcmp(small_name, "rd") != 0 || large_name == NULL ||
        strcmp(large_name, "ring") != 0)
        return RC_RESULT;
    return RC_OK;
}

Test(algorithm, request_names_the_forced_algorithm, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 10, .deadline_s = 30, .kill_rank = -1};
    int status[3];

    setenv("CHORUS_SHM", "0", 1);
    setenv("CHORUS_TUNE", "allreduce=rd@0-1K,allreduce=ring@1K-1G", 1);
    harness_run(&opts, algorithm_rank, NULL, status, NULL);
    unsetenv("CHORUS_TUNE");
    for (int r = 0; r < 3; r++)
        cr_expect(status[r] == RC_OK, "rank %d exited with %d", r, status[r]);
}
