/*
 * CHORUS_TRACE: the per-rank timelines of a 3-rank job, read back as JSON
 * (one slice per call with its arguments and algorithm, waits nested in
 * their calls, instants for a stall report and a timeout, written at the
 * fault and at an abort), the ring's bound, bad settings, and chorus-trace
 * merge (three tracks, clocks aligned per node, and clear refusals of
 * missing or malformed files). Also the info-level log of the algorithm
 * each size range's first call runs.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util/json.h"

#define RANKS 3
#define BIG (256 * 1024)        /* floats: 1 MiB, several chunks and steps */
#define SMALL 4096

enum { RC_OK = 0, RC_STATUS = 10, RC_RESULT = 11, RC_SETUP = 12, RC_TRACE = 13 };

static char dir[64];
static char prefix[96];

static void dir_make(void)
{
    snprintf(dir, sizeof(dir), "/tmp/chorus_trace_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(prefix, sizeof(prefix), "%s/t", dir);
    setenv("CHORUS_TRACE", prefix, 1);
}

/* After each test, even a failed one: remove every file of the folder, then the folder. */
static void dir_remove(void)
{
    char cmd[128];

    if (dir[0] == '\0')
        return;
    unsetenv("CHORUS_TRACE");
    unsetenv("CHORUS_TRACE_EVENTS");
    unsetenv("CHORUS_SHM");
    unsetenv("CHORUS_STALL_WARN");
    unsetenv("CHORUS_LOG_LEVEL");
    unsetenv("CHORUS_DEBUG_CHECK");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    dir[0] = '\0';
}

static char *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "r");
    char *text;
    long len;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    text = malloc((size_t)len + 1);
    if (text != NULL && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    fclose(f);
    if (text != NULL) {
        text[len] = '\0';
        if (len_p != NULL)
            *len_p = (size_t)len;
    }
    return text;
}

static void write_text_file(const char *name, const char *text)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static chorus__json_t *load_json(const char *path)
{
    chorus__json_t *doc = NULL;
    char err[160] = "";
    size_t len = 0;
    char *text = slurp(path, &len);

    cr_assert_not_null(text, "cannot read %s", path);
    cr_assert_eq(chorus__json_parse(text, len, &doc, err, sizeof(err)), CHORUS_OK,
                 "%s is not JSON: %s", path, err);
    free(text);
    return doc;
}

static chorus__json_t *load_rank(int rank)
{
    char path[128];

    snprintf(path, sizeof(path), "%s.%d.json", prefix, rank);
    return load_json(path);
}

static const chorus__json_t *events_of(const chorus__json_t *doc)
{
    const chorus__json_t *ev = chorus__json_get(doc, "traceEvents");

    cr_assert(ev != NULL && ev->type == CHORUS__JSON_ARRAY, "no traceEvents array");
    return ev;
}

static int is(const chorus__json_t *e, const char *key, const char *value)
{
    const char *s = chorus__json_string(e, key);

    return s != NULL && strcmp(s, value) == 0;
}

static const chorus__json_t *args_of(const chorus__json_t *e)
{
    return chorus__json_get(e, "args");
}

/* Events of category cat (and name, when not NULL) into out (room for max); how many. */
static size_t select_events(const chorus__json_t *ev, const char *cat, const char *name,
                            const chorus__json_t **out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < ev->n; i++) {
        const chorus__json_t *e = &ev->items[i];

        if (is(e, "cat", cat) && (name == NULL || is(e, "name", name))) {
            if (n < max)
                out[n] = e;
            n++;
        }
    }
    return n;
}

/* The path of chorus-trace: $CHORUS_TRACE_TOOL (make check), else in this build tree. */
static void tool_path(char *out, size_t len)
{
    const char *env = getenv("CHORUS_TRACE_TOOL");
    char dir_of[PATH_MAX];
    ssize_t n;

    if (env != NULL && env[0] != '\0') {
        snprintf(out, len, "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", dir_of, sizeof(dir_of) - 1);
    cr_assert(n > 0);
    dir_of[n] = '\0';
    /* build/tests/coll/[.libs/]test_trace: look upwards for build/src/tools/chorus-trace. */
    for (int up = 0; up < 4; up++) {
        char parent[PATH_MAX];

        snprintf(parent, sizeof(parent), "%s", dirname(dir_of));
        snprintf(dir_of, sizeof(dir_of), "%s", parent);
        snprintf(out, len, "%.*s/src/tools/chorus-trace", (int)(len - 32), dir_of);
        if (access(out, X_OK) == 0)
            return;
    }
    cr_assert_fail("chorus-trace not found: set CHORUS_TRACE_TOOL");
}

/* Run chorus-trace with args (a shell word list); its exit code, its output into *out_p. */
static int run_tool(const char *args, char **out_p)
{
    char tool[PATH_MAX], cmd[PATH_MAX + 512], log[128];
    int rc;

    tool_path(tool, sizeof(tool));
    snprintf(log, sizeof(log), "%s/tool.out", dir);
    snprintf(cmd, sizeof(cmd), "timeout 30 '%s' %s >'%s' 2>&1", tool, args, log);
    rc = system(cmd);
    *out_p = slurp(log, NULL);
    cr_assert_not_null(*out_p);
    unlink(log);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* ---- a run's calls --------------------------------------------------------- */

/*
 * Two allreduces of 1 MiB and a broadcast from rank 1, each non-blocking so
 * that the rank can write down the algorithm that served it.
 */
static int rank_calls(chorus_comm_t comm, int rank, int size, void *arg)
{
    static float in[BIG], out[2][BIG], bcast[SMALL];
    chorus_request_t req[3];
    char path[128];
    FILE *f;

    (void)arg;
    for (int i = 0; i < BIG; i++)
        in[i] = (float)(rank + 1);
    for (int k = 0; k < 2; k++) {
        if (chorus_iallreduce(in, out[k], BIG, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL,
                              &req[k]) != CHORUS_OK)
            return RC_STATUS;
    }
    if (chorus_ibroadcast(in, bcast, SMALL, CHORUS_FLOAT32, 1, comm, NULL, &req[2]) != CHORUS_OK)
        return RC_STATUS;
    snprintf(path, sizeof(path), "%s/algs.%d", dir, rank);
    f = fopen(path, "w");
    if (f == NULL)
        return RC_SETUP;
    for (int k = 0; k < 3; k++)
        fprintf(f, "%s\n", chorus_request_algorithm(req[k]));
    fclose(f);
    for (int k = 0; k < 3; k++) {
        if (chorus_request_free(req[k]) != CHORUS_OK)
            return RC_STATUS;
    }
    /* Ranks hold 1, 2, 3: the sums are 6; rank 1 broadcasts 2. */
    return out[0][0] == 6.0f && out[1][BIG - 1] == 6.0f && bcast[SMALL - 1] == 2.0f &&
           size == RANKS ? RC_OK : RC_RESULT;
}

static void run_calls(void)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 30, .deadline_s = 60, .kill_rank = -1};
    int status[RANKS];

    cr_assert_eq(harness_run(&opts, rank_calls, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
}

static void check_rank_calls(int rank)
{
    static const char *names[3] = {"allreduce", "allreduce", "broadcast"};
    chorus__json_t *doc = load_rank(rank);
    const chorus__json_t *ev = events_of(doc), *other = chorus__json_get(doc, "otherData");
    const chorus__json_t *calls[8], *waits[4096];
    size_t ncalls = select_events(ev, "call", NULL, calls, 8);
    size_t nwaits = select_events(ev, "wait", NULL, waits, 4096), nested = 0, ontrack = 0;
    char path[128], algs[3][64];
    FILE *f;

    cr_expect_eq(chorus__json_number(other, "rank", -1), rank);
    cr_expect_eq(chorus__json_number(other, "size", -1), RANKS);
    cr_expect_gt(chorus__json_number(other, "clock_sync_us", 0), 0);
    cr_expect_eq(chorus__json_number(other, "dropped", -1), 0);
    snprintf(path, sizeof(path), "%s/algs.%d", dir, rank);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(fscanf(f, "%63s", algs[k]), 1);
    fclose(f);
    cr_assert_eq(ncalls, 3, "rank %d: %zu call slices", rank, ncalls);
    for (size_t k = 0; k < ncalls; k++) {
        const chorus__json_t *c = calls[k], *a = args_of(c);
        int seq = (int)chorus__json_number(a, "seq", -1);

        cr_assert(seq >= 0 && seq < 3, "rank %d: call with seq %d", rank, seq);
        cr_expect(is(c, "ph", "X") && is(c, "name", names[seq]), "rank %d: #%d is %s", rank,
                  seq, chorus__json_string(c, "name"));
        cr_expect(is(a, "alg", algs[seq]), "rank %d: #%d served by %s, traced as %s", rank,
                  seq, algs[seq], chorus__json_string(a, "alg"));
        cr_expect(is(a, "via", "tcp"), "rank %d: #%d via %s", rank, seq,
                  chorus__json_string(a, "via"));
        cr_expect(is(a, "dtype", "float32") && is(a, "status", "success"));
        cr_expect_eq(chorus__json_number(a, "count", 0), seq < 2 ? BIG : SMALL);
        cr_expect_eq(chorus__json_number(a, "bytes", 0), (seq < 2 ? BIG : SMALL) * 4.0);
        cr_expect_eq(chorus__json_number(a, "root", -1), seq < 2 ? -1 : 1);
        cr_expect(is(a, "op", seq < 2 ? "sum" : "none"));
    }
    /* Every wait of the calls' track lies inside one of its calls. */
    for (size_t w = 0; w < nwaits && w < 4096; w++) {
        double ts = chorus__json_number(waits[w], "ts", -1);
        double end = ts + chorus__json_number(waits[w], "dur", -1);

        if (chorus__json_number(waits[w], "tid", -1) != 0)
            continue;   /* a creation exchange's wait, on its own track */
        ontrack++;
        for (size_t k = 0; k < ncalls; k++) {
            double cts = chorus__json_number(calls[k], "ts", 0);
            double cend = cts + chorus__json_number(calls[k], "dur", 0);

            /* Times are written to the nanosecond: allow its rounding. */
            if (ts >= cts - 0.002 && end <= cend + 0.002) {
                nested++;
                break;
            }
        }
    }
    cr_expect_gt(ontrack, 0, "rank %d: no waits traced on the calls' track", rank);
    cr_expect_eq(nested, ontrack, "rank %d: %zu of %zu waits lie outside every call", rank,
                 ontrack - nested, ontrack);
    chorus__json_free(doc);
}

Test(trace, one_slice_per_call_with_nested_waits, .timeout = 120, .fini = dir_remove)
{
    dir_make();
    setenv("CHORUS_SHM", "0", 1);   /* schedules over TCP: waits on peers to nest */
    run_calls();
    for (int r = 0; r < RANKS; r++)
        check_rank_calls(r);
}

/* ---- instants: a stall report, then a timeout ------------------------------ */

/* Whether this rank's trace file, as it is now, holds text. */
static int trace_holds(int rank, const char *text)
{
    char path[128];
    char *all;
    int found;

    snprintf(path, sizeof(path), "%s.%d.json", prefix, rank);
    all = slurp(path, NULL);
    found = all != NULL && strstr(all, text) != NULL;
    free(all);
    return found;
}

/*
 * Ranks 0 and 1 call an allreduce that rank 2 never joins: a stall report
 * after 1 s, a timeout after 3 s (on the rank whose deadline passes first;
 * the other may see its peer's fault first). The trace is on disk at the
 * fault, before the communicator is destroyed.
 */
static int rank_stalled(chorus_comm_t comm, int rank, int size, void *arg)
{
    float in[SMALL] = {0}, out[SMALL];

    (void)size; (void)arg;
    if (chorus_barrier(comm, NULL) != CHORUS_OK)
        return RC_STATUS;
    if (rank == 2) {
        usleep(4500 * 1000);
        return RC_OK;
    }
    if (chorus_allreduce(in, out, SMALL, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) == CHORUS_OK)
        return RC_STATUS;
    return trace_holds(rank, "\"cat\":\"error\"") ? RC_OK : RC_TRACE;
}

Test(trace, instants_for_a_stall_report_and_a_timeout, .timeout = 120, .fini = dir_remove)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 3, .deadline_s = 60, .kill_rank = -1};
    int status[RANKS], timeouts = 0;

    dir_make();
    setenv("CHORUS_STALL_WARN", "1", 1);
    harness_run(&opts, rank_stalled, NULL, status, NULL);
    cr_assert(status[0] == RC_OK && status[1] == RC_OK,
              "ranks 0 and 1 exited with %d %d (13: no error in the trace at the fault)",
              status[0], status[1]);
    for (int r = 0; r < 2; r++) {
        chorus__json_t *doc = load_rank(r);
        const chorus__json_t *ev = events_of(doc), *stalls[16], *errors[16], *calls[8];
        size_t nstalls = select_events(ev, "stall", "stall report", stalls, 16);
        size_t nerrors = select_events(ev, "error", NULL, errors, 16);
        size_t ncalls = select_events(ev, "call", NULL, calls, 8);

        cr_expect_geq(nstalls, 1, "rank %d: no stall report traced", r);
        for (size_t i = 0; i < nstalls && i < 16; i++) {
            const char *msg = chorus__json_string(args_of(stalls[i]), "msg");

            cr_expect(is(stalls[i], "ph", "i"));
            cr_expect(msg != NULL && strstr(msg, "rank 2 has not started it") != NULL,
                      "rank %d: stall report says %s", r, msg);
        }
        cr_expect_geq(nerrors, 1, "rank %d: no error instant", r);
        for (size_t i = 0; i < nerrors && i < 16; i++) {
            const char *msg = chorus__json_string(args_of(errors[i]), "msg");

            cr_expect(is(errors[i], "ph", "i"));
            if (is(errors[i], "name", "timeout")) {
                timeouts++;
                cr_expect(msg != NULL && strstr(msg, "allreduce #1") != NULL, "says %s", msg);
            }
        }
        /* The barrier, then the allreduce that ended with an error. */
        cr_expect_eq(ncalls, 2, "rank %d: %zu calls", r, ncalls);
        for (size_t i = 0; i < ncalls && i < 8; i++) {
            const chorus__json_t *a = args_of(calls[i]);

            if (chorus__json_number(a, "seq", -1) == 1)
                cr_expect(!is(a, "status", "success"), "rank %d: the allreduce succeeded", r);
        }
        chorus__json_free(doc);
    }
    cr_expect_geq(timeouts, 1, "no rank traced its timeout");
}

/* An abort writes the trace at once: the process may not live to destroy. */
static int rank_aborts(chorus_comm_t comm, int rank, int size, void *arg)
{
    (void)size; (void)arg;
    /*
     * Rank 1 may leave the barrier and abort before another rank has seen the
     * barrier end; that rank's barrier then fails with the abort, as any call in
     * flight does. Only rank 1's must succeed.
     */
    if (chorus_barrier(comm, NULL) != CHORUS_OK && rank == 1)
        return RC_STATUS;
    if (rank == 1 && chorus_comm_abort(comm) != CHORUS_OK)
        return RC_STATUS;
    if (rank == 1 && !trace_holds(rank, chorus_status_string(CHORUS_ERR_ABORTED)))
        return RC_TRACE;
    /* The others see rank 1's connections close (or their own deadline) and fail too. */
    if (rank != 1 && chorus_barrier(comm, NULL) == CHORUS_OK)
        return RC_STATUS;
    return trace_holds(rank, "\"cat\":\"error\"") ? RC_OK : RC_TRACE;
}

Test(trace, an_abort_writes_the_trace_at_once, .timeout = 60, .fini = dir_remove)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 5, .deadline_s = 40, .kill_rank = -1};
    int status[RANKS];

    dir_make();
    harness_run(&opts, rank_aborts, NULL, status, NULL);
    for (int r = 0; r < RANKS; r++)
        cr_expect_eq(status[r], RC_OK, "rank %d exited with %d (13: its trace lacked the "
                     "fault before destroy)", r, status[r]);
}

/*
 * With CHORUS_DEBUG_CHECK, rank 2 calling with another count fails the call
 * on every rank without a fault: the error is on disk before destroy, and
 * the next call works and is traced too.
 */
static int rank_mismatch(chorus_comm_t comm, int rank, int size, void *arg)
{
    float in[SMALL] = {0}, out[SMALL];

    (void)size; (void)arg;
    if (chorus_allreduce(in, out, rank == 2 ? SMALL / 2 : SMALL, CHORUS_FLOAT32, CHORUS_SUM,
                         comm, NULL) != CHORUS_ERR_INVALID_ARG)
        return RC_STATUS;
    if (!trace_holds(rank, "\"name\":\"call failed\""))
        return RC_TRACE;
    return chorus_allreduce(in, out, SMALL, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) ==
           CHORUS_OK ? RC_OK : RC_STATUS;
}

Test(trace, a_failed_call_is_written_at_once, .timeout = 60, .fini = dir_remove)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 20, .deadline_s = 40, .kill_rank = -1};
    int status[RANKS];

    dir_make();
    setenv("CHORUS_DEBUG_CHECK", "1", 1);
    harness_run(&opts, rank_mismatch, NULL, status, NULL);
    unsetenv("CHORUS_DEBUG_CHECK");
    for (int r = 0; r < RANKS; r++) {
        chorus__json_t *doc;
        const chorus__json_t *calls[8];
        size_t ncalls;

        cr_expect_eq(status[r], RC_OK, "rank %d exited with %d (13: the failed call was not "
                     "on disk before destroy)", r, status[r]);
        doc = load_rank(r);
        ncalls = select_events(events_of(doc), "call", NULL, calls, 8);
        cr_expect_eq(ncalls, 2, "rank %d: %zu calls traced", r, ncalls);
        for (size_t i = 0; i < ncalls && i < 8; i++) {
            const chorus__json_t *a = args_of(calls[i]);
            int seq = (int)chorus__json_number(a, "seq", -1);

            cr_expect(is(a, "status", seq == 0 ? chorus_status_string(CHORUS_ERR_INVALID_ARG)
                                               : "success"),
                      "rank %d: #%d ended with %s", r, seq, chorus__json_string(a, "status"));
        }
        chorus__json_free(doc);
    }
}

/* ---- settings that cannot work ------------------------------------------------ */

/* chorus_comm_create of a 1-rank job with the environment as it is; comm is left alone. */
static chorus_status_t create_alone(void)
{
    chorus_comm_t comm = (chorus_comm_t)&comm;
    char addr[32];
    chorus_status_t status;

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
    status = chorus_comm_create(0, 1, addr, "trace-test-secret-0123456789", 10, &comm);
    if (status == CHORUS_OK)
        chorus_comm_destroy(comm);
    else
        cr_expect_eq(comm, (chorus_comm_t)&comm, "comm written on failure");
    return status;
}

Test(trace, bad_settings_fail_the_creation_with_a_reason, .timeout = 60, .fini = dir_remove)
{
    char bad[160];

    dir_make();
    /* A ring too small to hold anything useful. */
    setenv("CHORUS_TRACE_EVENTS", "4", 1);
    cr_expect_eq(create_alone(), CHORUS_ERR_INVALID_ARG);
    unsetenv("CHORUS_TRACE_EVENTS");
    /* A prefix whose folder cannot be made: a regular file stands in its way. */
    write_text_file("blocker", "x");
    snprintf(bad, sizeof(bad), "%s/blocker/sub/t", dir);
    setenv("CHORUS_TRACE", bad, 1);
    cr_expect_eq(create_alone(), CHORUS_ERR_SYSTEM);
    /* A good one: the folders are made and the file written at destroy. */
    snprintf(bad, sizeof(bad), "%s/new/deeper/t", dir);
    setenv("CHORUS_TRACE", bad, 1);
    cr_expect_eq(create_alone(), CHORUS_OK);
    snprintf(bad, sizeof(bad), "%s/new/deeper/t.0.json", dir);
    cr_expect_eq(access(bad, R_OK), 0, "%s not written", bad);
}

/* ---- which algorithm ran (CHORUS_LOG_LEVEL=info) ----------------------------- */

#define LOG_CALLS 3

/* Three small allreduces, three large ones: each size's range is logged once. */
static int rank_logged_calls(chorus_comm_t comm, int rank, int size, void *arg)
{
    static float in[BIG], out[BIG];
    const size_t counts[2] = {16, BIG};
    char path[128];
    FILE *f;
    int fd;

    (void)size; (void)arg;
    snprintf(path, sizeof(path), "%s/rank%d.err", dir, rank);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        return RC_SETUP;
    close(fd);
    snprintf(path, sizeof(path), "%s/algs.%d", dir, rank);
    f = fopen(path, "w");
    if (f == NULL)
        return RC_SETUP;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < LOG_CALLS; i++) {
            chorus_request_t req;

            if (chorus_iallreduce(in, out, counts[k], CHORUS_FLOAT32, CHORUS_SUM, comm, NULL,
                                  &req) != CHORUS_OK)
                return RC_STATUS;
            if (i == 0)
                fprintf(f, "%s\n", chorus_request_algorithm(req));
            if (chorus_request_free(req) != CHORUS_OK)
                return RC_STATUS;
        }
    }
    fclose(f);
    return RC_OK;
}

Test(log, the_algorithm_of_each_size_range_once, .timeout = 120, .fini = dir_remove)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 30, .deadline_s = 60, .kill_rank = -1};
    static const size_t bytes[2] = {16 * 4, BIG * 4};
    int status[RANKS];

    dir_make();
    unsetenv("CHORUS_TRACE");
    setenv("CHORUS_LOG_LEVEL", "info", 1);
    cr_assert_eq(harness_run(&opts, rank_logged_calls, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
    for (int r = 0; r < RANKS; r++) {
        char path[128], alg[64], line[160];
        char *log;
        FILE *f;

        snprintf(path, sizeof(path), "%s/rank%d.err", dir, r);
        log = slurp(path, NULL);
        cr_assert_not_null(log);
        snprintf(path, sizeof(path), "%s/algs.%d", dir, r);
        f = fopen(path, "r");
        cr_assert_not_null(f);
        for (int k = 0; k < 2; k++) {
            int n = 0;

            cr_assert_eq(fscanf(f, "%63s", alg), 1);
            snprintf(line, sizeof(line), "info: coll: rank %d: allreduce of %zu bytes in host "
                     "memory runs %s, chosen by the model for [", r, bytes[k], alg);
            for (const char *p = strstr(log, line); p != NULL; p = strstr(p + 1, line))
                n++;
            cr_expect_eq(n, 1, "rank %d: %d lines \"%s\" in:\n%s", r, n, line, log);
        }
        fclose(f);
        /* Later calls of a range log nothing: one line per range used. */
        {
            int lines = 0;

            for (const char *p = strstr(log, " in host memory runs "); p != NULL;
                 p = strstr(p + 1, " in host memory runs "))
                lines++;
            cr_expect_eq(lines, 2, "rank %d logged %d choices:\n%s", r, lines, log);
        }
        free(log);
    }
}

/* ---- the ring's bound ------------------------------------------------------ */

#define RING_EVENTS 32
#define RING_CALLS 300

static int rank_many_calls(chorus_comm_t comm, int rank, int size, void *arg)
{
    (void)rank; (void)size; (void)arg;
    for (int i = 0; i < RING_CALLS; i++) {
        if (chorus_barrier(comm, NULL) != CHORUS_OK)
            return RC_STATUS;
    }
    return RC_OK;
}

Test(trace, the_ring_keeps_the_newest_events_and_counts_the_rest, .timeout = 120, .fini = dir_remove)
{
    harness_opts_t opts = {.nranks = RANKS, .timeout_s = 30, .deadline_s = 60, .kill_rank = -1};
    int status[RANKS];

    dir_make();
    setenv("CHORUS_TRACE_EVENTS", "32", 1);
    cr_assert_eq(harness_run(&opts, rank_many_calls, NULL, status, NULL), 0,
                 "ranks exited with %d %d %d", status[0], status[1], status[2]);
    for (int r = 0; r < RANKS; r++) {
        chorus__json_t *doc = load_rank(r);
        const chorus__json_t *ev = events_of(doc), *other = chorus__json_get(doc, "otherData");
        const chorus__json_t *calls[RING_EVENTS + 1];
        size_t kept = 0, ncalls = select_events(ev, "call", NULL, calls, RING_EVENTS + 1);
        double recorded = chorus__json_number(other, "recorded", 0), last = -1, first = 1e9;

        for (size_t i = 0; i < ev->n; i++)
            kept += !is(&ev->items[i], "ph", "M");
        cr_expect_eq(kept, RING_EVENTS, "rank %d kept %zu events", r, kept);
        cr_expect_eq(chorus__json_number(other, "capacity", 0), RING_EVENTS);
        cr_expect_geq(recorded, RING_CALLS, "rank %d recorded %g", r, recorded);
        cr_expect_eq(chorus__json_number(other, "dropped", -1), recorded - RING_EVENTS);
        for (size_t i = 0; i < ncalls && i <= RING_EVENTS; i++) {
            double seq = chorus__json_number(args_of(calls[i]), "seq", -1);

            last = seq > last ? seq : last;
            first = seq < first ? seq : first;
        }
        cr_expect_eq(last, RING_CALLS - 1, "rank %d: the newest call kept is #%g", r, last);
        cr_expect_gt(first, RING_CALLS - 1 - RING_EVENTS, "rank %d: old call #%g kept", r, first);
        chorus__json_free(doc);
    }
}

/* ---- chorus-trace merge ------------------------------------------------------ */

Test(merge, three_ranks_three_tracks, .timeout = 120, .fini = dir_remove)
{
    chorus__json_t *doc;
    const chorus__json_t *ev, *other, *offsets;
    char args[256], path[128], *out;
    int names[RANKS] = {0}, calls[RANKS] = {0};

    dir_make();
    setenv("CHORUS_SHM", "0", 1);
    run_calls();
    snprintf(path, sizeof(path), "%s/job.json", dir);
    snprintf(args, sizeof(args), "merge '%s' -o '%s'", prefix, path);
    cr_assert_eq(run_tool(args, &out), 0, "chorus-trace said:\n%s", out);
    free(out);
    doc = load_json(path);
    ev = events_of(doc);
    for (size_t i = 0; i < ev->n; i++) {
        const chorus__json_t *e = &ev->items[i];
        int pid = (int)chorus__json_number(e, "pid", -1);

        cr_assert(pid >= 0 && pid < RANKS, "event of pid %d", pid);
        if (is(e, "ph", "M") && is(e, "name", "process_name")) {
            char want[16];

            snprintf(want, sizeof(want), "rank %d", pid);
            cr_expect(is(args_of(e), "name", want));
            names[pid]++;
        }
        calls[pid] += is(e, "cat", "call");
    }
    for (int r = 0; r < RANKS; r++) {
        cr_expect_eq(names[r], 1, "rank %d named %d times", r, names[r]);
        cr_expect_eq(calls[r], 3, "rank %d: %d calls", r, calls[r]);
    }
    other = chorus__json_get(doc, "otherData");
    offsets = chorus__json_get(other, "offsets_us");
    cr_assert(offsets != NULL && offsets->n == RANKS);
    /* One machine, one clock: nothing moves. */
    for (int r = 0; r < RANKS; r++)
        cr_expect_eq(offsets->items[r].number, 0);
    chorus__json_free(doc);
}

/* A minimal rank file: one slice at ts, the clock point sync, on node domain. */
static void write_rank_file(int rank, int size, double sync, const char *domain, double ts)
{
    char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s.%d.json", prefix, rank);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"traceEvents\":[{\"name\":\"allreduce\",\"cat\":\"call\",\"ph\":\"X\","
            "\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":5,\"args\":{\"seq\":0}}],"
            "\"otherData\":{\"format\":\"chorus-trace\",\"rank\":%d,\"size\":%d,"
            "\"clock_sync_us\":%.3f,\"clock_domain\":\"%s\",\"dropped\":0}}\n",
            rank, ts, rank, size, sync, domain);
    fclose(f);
}

Test(merge, aligns_the_clocks_of_other_nodes, .timeout = 30, .fini = dir_remove)
{
    chorus__json_t *doc;
    const chorus__json_t *ev;
    char args[256], path[128], *out;
    double ts[4] = {-1, -1, -1, -1};

    dir_make();
    /* Node a: ranks 0 and 1; node b: ranks 2 and 3, whose clock is 1000 us behind. */
    write_rank_file(0, 4, 5000, "a", 6000);
    write_rank_file(1, 4, 5100, "a", 6000);
    write_rank_file(2, 4, 3950, "b", 5000);
    write_rank_file(3, 4, 4050, "b", 5000);
    snprintf(path, sizeof(path), "%s/job.json", dir);
    snprintf(args, sizeof(args), "merge '%s' -o '%s'", prefix, path);
    cr_assert_eq(run_tool(args, &out), 0, "chorus-trace said:\n%s", out);
    free(out);
    doc = load_json(path);
    ev = events_of(doc);
    for (size_t i = 0; i < ev->n; i++) {
        if (is(&ev->items[i], "ph", "X"))
            ts[(int)chorus__json_number(&ev->items[i], "pid", 0)] =
                chorus__json_number(&ev->items[i], "ts", -1);
    }
    /* Rank 0's node keeps its times; node b moves by the mean of 1050 and 950. */
    cr_expect_float_eq(ts[0], 6000, 1e-6);
    cr_expect_float_eq(ts[1], 6000, 1e-6);
    cr_expect_float_eq(ts[2], 6000, 1e-6, "rank 2 at %g", ts[2]);
    cr_expect_float_eq(ts[3], 6000, 1e-6, "rank 3 at %g", ts[3]);
    chorus__json_free(doc);
    snprintf(args, sizeof(args), "merge '%s' --no-align -o '%s'", prefix, path);
    cr_assert_eq(run_tool(args, &out), 0, "chorus-trace said:\n%s", out);
    free(out);
    doc = load_json(path);
    ev = events_of(doc);
    for (size_t i = 0; i < ev->n; i++) {
        if (is(&ev->items[i], "ph", "X") && chorus__json_number(&ev->items[i], "pid", 0) == 2)
            cr_expect_float_eq(chorus__json_number(&ev->items[i], "ts", -1), 5000, 1e-6);
    }
    chorus__json_free(doc);
}

/* chorus-trace with args fails with exit code rc, and says what. */
static void expect_refusal(const char *args, int rc, const char *says)
{
    char *out;
    int got = run_tool(args, &out);

    cr_expect_eq(got, rc, "chorus-trace %s exited with %d:\n%s", args, got, out);
    cr_expect(strstr(out, says) != NULL, "chorus-trace %s said:\n%s\n(expected: %s)", args,
              out, says);
    free(out);
}

Test(merge, refuses_missing_and_malformed_files, .timeout = 30, .fini = dir_remove)
{
    char args[256], out_path[128];

    dir_make();
    snprintf(out_path, sizeof(out_path), "%s/job.json", dir);
    /* No file at all. */
    snprintf(args, sizeof(args), "merge '%s' -o '%s'", prefix, out_path);
    expect_refusal(args, 1, "cannot open");
    /* Rank 1 of 2 missing. */
    write_rank_file(0, 2, 100, "a", 200);
    expect_refusal(args, 1, "t.1.json: No such file");
    /* Rank 1 cut in the middle. */
    write_text_file("t.1.json", "{\"traceEvents\":[{\"name\":\"x\",");
    expect_refusal(args, 1, "t.1.json is not JSON: line 1");
    /* Valid JSON, not a trace. */
    write_text_file("t.1.json", "[1, 2, 3]\n");
    expect_refusal(args, 1, "not a chorus trace");
    /* Another rank's file under rank 1's name. */
    write_text_file("t.1.json", "{\"traceEvents\":[],\"otherData\":{\"format\":\"chorus-trace\","
               "\"rank\":0,\"size\":2,\"clock_sync_us\":1}}");
    expect_refusal(args, 1, "says it is rank 0's trace");
    /* A different job size. */
    write_text_file("t.1.json", "{\"traceEvents\":[],\"otherData\":{\"format\":\"chorus-trace\","
               "\"rank\":1,\"size\":3,\"clock_sync_us\":1}}");
    expect_refusal(args, 1, "job has 3 ranks");
    /* An event without a time. */
    write_text_file("t.1.json", "{\"traceEvents\":[{\"name\":\"x\",\"ph\":\"X\"}],\"otherData\":"
               "{\"format\":\"chorus-trace\",\"rank\":1,\"size\":2,\"clock_sync_us\":1}}");
    expect_refusal(args, 1, "event 0 lacks");
    /* A rank that never finished creating the communicator, on another node. */
    write_text_file("t.1.json", "{\"traceEvents\":[],\"otherData\":{\"format\":\"chorus-trace\","
               "\"rank\":1,\"size\":2,\"clock_sync_us\":0,\"clock_domain\":\"b\"}}");
    expect_refusal(args, 1, "no clock point");
    cr_expect_neq(access(out_path, F_OK), 0, "a refused merge wrote %s", out_path);
    /* The command line. */
    expect_refusal("--bogus", 2, "usage:");
    expect_refusal("merge", 2, "merge takes one PREFIX");
    snprintf(args, sizeof(args), "merge '%s'", prefix);
    expect_refusal(args, 2, "needs -o FILE");
    expect_refusal("split x -o y", 2, "unknown command 'split'");
    expect_refusal("--version", 0, "chorus-trace ");
    expect_refusal("--help", 0, "usage: chorus-trace merge PREFIX");
}
