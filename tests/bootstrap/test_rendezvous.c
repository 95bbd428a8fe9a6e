/*
 * Communicator creation as a user meets it when a launch goes wrong: a rank
 * that never starts, a rank with another secret, two processes with the same
 * rank, a rank with another size, a short secret. Each process is forked and
 * writes its stderr to a file of its own, so the test reads exactly what each
 * rank said, and the parent times every exit.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chorus.h"
#include "coll/harness.h"
#include "util/time.h"

#define SECRET "rendezvous-test-secret-0123456789"
#define PROCS_MAX 4
#define KILL_AFTER_S 40.0

/* One process of a launch. */
typedef struct {
    int rank, size;
    const char *secret;
    double delay_s;         /* before it creates its communicator */
} proc_spec_t;

typedef struct {
    char dir[64];
    char addr[64];
    int n;
    double timeout_s;
    const char *stall_warn;             /* CHORUS_STALL_WARN of every process */
    int status[PROCS_MAX];              /* -chorus_status_t, or -1 when it was killed */
    double exited_at[PROCS_MAX];        /* seconds after the fork */
    /* Optional: the first moment process watch_proc's log contained watch_text. */
    int watch_proc;
    const char *watch_text;
    double watch_seen_at;
} launch_t;

static void launch_init(launch_t *l, int n, double timeout_s, const char *stall_warn)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->dir, sizeof(l->dir), "/tmp/chorus_rdv_XXXXXX");
    cr_assert_not_null(mkdtemp(l->dir));
    snprintf(l->addr, sizeof(l->addr), "127.0.0.1:%d", harness_free_port());
    l->n = n;
    l->timeout_s = timeout_s;
    l->stall_warn = stall_warn;
    l->watch_proc = -1;
    l->watch_seen_at = -1;
}

static void log_path(const launch_t *l, int i, char *path, size_t len)
{
    snprintf(path, len, "%s/proc%d.err", l->dir, i);
}

/* The whole log of process i (empty when missing); the caller frees it. */
static char *proc_log(const launch_t *l, int i)
{
    char path[128], *text = calloc(1, 1 << 16);
    size_t n = 0;
    FILE *f;

    cr_assert_not_null(text);
    log_path(l, i, path, sizeof(path));
    f = fopen(path, "r");
    if (f != NULL) {
        n = fread(text, 1, (1 << 16) - 1, f);
        fclose(f);
    }
    text[n] = '\0';
    return text;
}

static void launch_cleanup(const launch_t *l)
{
    char path[128];

    for (int i = 0; i < l->n; i++) {
        log_path(l, i, path, sizeof(path));
        unlink(path);
    }
    rmdir(l->dir);
}

static int proc_main(const launch_t *l, int i, const proc_spec_t *spec)
{
    char path[128];
    chorus_comm_t comm;
    chorus_status_t status;
    int fd;

    log_path(l, i, path, sizeof(path));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
        return 100;
    close(fd);
    if (l->stall_warn != NULL)
        setenv("CHORUS_STALL_WARN", l->stall_warn, 1);
    if (spec->delay_s > 0)
        usleep((useconds_t)(spec->delay_s * 1e6));
    status = chorus_comm_create(spec->rank, spec->size, l->addr, spec->secret, l->timeout_s,
                                &comm);
    if (status == CHORUS_OK)
        chorus_comm_destroy(comm);
    return -status;
}

static int text_has(const char *text, const char *needle)
{
    return strstr(text, needle) != NULL;
}

/* Forks every process, waits for all (killing any left at KILL_AFTER_S) and times them. */
static void launch_run(launch_t *l, const proc_spec_t *specs)
{
    pid_t pids[PROCS_MAX];
    double start;
    int left = l->n;

    fflush(stdout);
    fflush(stderr);
    start = chorus__now();
    for (int i = 0; i < l->n; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0)
            _exit(proc_main(l, i, &specs[i]));
        l->status[i] = -1;
    }
    while (left > 0) {
        double now = chorus__now() - start;

        for (int i = 0; i < l->n; i++) {
            int ws;
            if (pids[i] == 0 || waitpid(pids[i], &ws, WNOHANG) != pids[i])
                continue;
            l->status[i] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            l->exited_at[i] = now;
            pids[i] = 0;
            left--;
        }
        if (l->watch_text != NULL && l->watch_seen_at < 0) {
            char *log = proc_log(l, l->watch_proc);
            if (text_has(log, l->watch_text))
                l->watch_seen_at = now;
            free(log);
        }
        if (now > KILL_AFTER_S) {
            for (int i = 0; i < l->n; i++) {
                if (pids[i] != 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    l->exited_at[i] = now;
                    pids[i] = 0;
                    left--;
                }
            }
        }
        usleep(5000);
    }
}

/* Every line of the log at the given level ("error", "warn") that contains needle. */
static int count_lines(const char *log, const char *level, const char *needle)
{
    char tag[16];
    int n = 0;

    snprintf(tag, sizeof(tag), ": %s: ", level);
    for (const char *line = log; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];

        snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
        n += text_has(buf, tag) && text_has(buf, needle);
        line += len + (end != NULL);
    }
    return n;
}

/* The last error line of a log, or "" (a static buffer). */
static const char *last_error(const char *log)
{
    static char buf[1024];
    const char *found = NULL;

    for (const char *p = strstr(log, ": error: "); p != NULL; p = strstr(p + 1, ": error: "))
        found = p;
    buf[0] = '\0';
    if (found != NULL)
        snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(found, "\n"), found);
    return buf;
}

/* ---- a rank that never starts -------------------------------------------------- */

Test(rendezvous, missing_rank_is_reported_while_waiting_and_named_at_the_timeout,
     .timeout = 60)
{
    const proc_spec_t specs[] = {{0, 3, SECRET, 0}, {1, 3, SECRET, 0}};
    launch_t l;

    launch_init(&l, 2, 4.5, "1");
    launch_run(&l, specs);
    for (int i = 0; i < 2; i++) {
        char *log = proc_log(&l, i), want[128];

        cr_expect_eq(l.status[i], -CHORUS_ERR_TIMEOUT, "rank %d exited with %d; logged:\n%s",
                     i, l.status[i], log);
        /* Reports each second from about 1 s on, as the store saw the ranks. */
        snprintf(want, sizeof(want), "rank %d: waiting", i);
        cr_expect_geq(count_lines(log, "warn", want), 2, "rank %d logged:\n%s", i, log);
        cr_expect_geq(count_lines(log, "warn", "2 of 3 ranks joined (0-1); not joined: 2"), 2,
                      "rank %d logged:\n%s", i, log);
        cr_expect_eq(count_lines(log, "warn", "not joined: 0"), 0, "rank %d:\n%s", i, log);
        cr_expect_eq(count_lines(log, "warn", "not joined: 1"), 0, "rank %d:\n%s", i, log);
        /* The final word names exactly the rank that never came. */
        cr_expect(text_has(last_error(log), "ranks 2"), "rank %d ended with: %s", i,
                  last_error(log));
        cr_expect(!text_has(last_error(log), "ranks 0") &&
                  !text_has(last_error(log), "ranks 1") &&
                  !text_has(last_error(log), "ranks 2-") &&
                  !text_has(last_error(log), "ranks 2,"),
                  "rank %d ended with: %s", i, last_error(log));
        cr_expect_lt(l.exited_at[i], l.timeout_s + 3, "rank %d took %.1f s", i,
                     l.exited_at[i]);
        free(log);
    }
    {
        char *log = proc_log(&l, 0);
        /* The store, in rank 0, says it too. */
        cr_expect_eq(count_lines(log, "error", "bootstrap store 127.0.0.1"), 1,
                     "rank 0 logged:\n%s", log);
        /*
         * In the store's own line, and in the reason it gave rank 0's client
         * unless that client timed out a moment first (then the store names
         * rank 0 apart, as joined and left).
         */
        cr_expect_geq(count_lines(log, "error", "never joined: ranks 2"), 1,
                      "rank 0 logged:\n%s", log);
        cr_expect_eq(count_lines(log, "error", "never joined: ranks 2"),
                     count_lines(log, "error", "never joined"), "rank 0 logged:\n%s", log);
        free(log);
    }
    launch_cleanup(&l);
}

/* Without reports (CHORUS_STALL_WARN=0) the timeout still names the missing rank. */
Test(rendezvous, missing_rank_is_named_without_reports, .timeout = 60)
{
    const proc_spec_t specs[] = {{0, 3, SECRET, 0}, {2, 3, SECRET, 0}};
    launch_t l;

    launch_init(&l, 2, 3, "0");
    launch_run(&l, specs);
    for (int i = 0; i < 2; i++) {
        char *log = proc_log(&l, i);

        cr_expect_eq(l.status[i], -CHORUS_ERR_TIMEOUT, "process %d exited with %d", i,
                     l.status[i]);
        cr_expect_eq(count_lines(log, "warn", "waiting"), 0, "process %d:\n%s", i, log);
        cr_expect(text_has(last_error(log), "ranks 1") && !text_has(last_error(log), "ranks 0")
                  && !text_has(last_error(log), "ranks 1-") &&
                  !text_has(last_error(log), "ranks 1,"),
                  "process %d ended with: %s", i, last_error(log));
        free(log);
    }
    launch_cleanup(&l);
}

/* Rank 0 (and with it the store) starting late: the others say they wait for it, then join. */
Test(rendezvous, a_late_store_is_reported_while_waiting, .timeout = 60)
{
    const proc_spec_t specs[] = {{0, 2, SECRET, 2.5}, {1, 2, SECRET, 0}};
    launch_t l;
    char *log;

    launch_init(&l, 2, 20, "1");
    launch_run(&l, specs);
    log = proc_log(&l, 1);
    for (int i = 0; i < 2; i++)
        cr_expect_eq(l.status[i], 0, "rank %d exited with %d", i, l.status[i]);
    cr_expect_geq(count_lines(log, "warn", "for the bootstrap store at 127.0.0.1"), 1,
                  "rank 1 logged:\n%s", log);
    cr_expect_geq(count_lines(log, "warn", "to accept connections (rank 0 hosts it"), 1,
                  "rank 1 logged:\n%s", log);
    free(log);
    launch_cleanup(&l);
}

/* ---- refused peers ------------------------------------------------------------------- */

/*
 * Runs ranks 0 and 1 of 3 with the job secret and a third process (index 2)
 * that the store refuses; the refusal must be logged at the store at once,
 * the refused process must fail at once, and ranks 0 and 1 must fail with
 * want once the grace (2 s of a 20 s timeout) has passed, far before the
 * timeout, naming why.
 */
static void run_refused(const proc_spec_t *third, chorus_status_t third_want,
                        chorus_status_t want, const char *store_warns, const char *ranks_say)
{
    const proc_spec_t specs[] = {{0, 3, SECRET, 0}, {1, 3, SECRET, 0}, *third};
    launch_t l;
    char *log;

    launch_init(&l, 3, 20, "0");
    l.watch_proc = 0;
    l.watch_text = store_warns;
    launch_run(&l, specs);

    log = proc_log(&l, 2);
    cr_expect_eq(l.status[2], -third_want, "the refused process exited with %d; logged:\n%s",
                 l.status[2], log);
    cr_expect_lt(l.exited_at[2], third->delay_s + 1.5, "the refused process took %.1f s",
                 l.exited_at[2]);
    free(log);
    cr_expect_geq(l.watch_seen_at, 0, "the store never logged '%s'", store_warns);
    cr_expect_lt(l.watch_seen_at, l.exited_at[2] + 0.5,
                 "the store logged the refusal %.2f s after the refused process exited",
                 l.watch_seen_at - l.exited_at[2]);
    log = proc_log(&l, 0);
    cr_expect_eq(count_lines(log, "warn", store_warns), 1, "rank 0 logged:\n%s", log);
    cr_expect_eq(count_lines(log, "error", "stopping the rendezvous"), 1, "rank 0:\n%s", log);
    free(log);
    for (int i = 0; i < 2; i++) {
        log = proc_log(&l, i);
        cr_expect_eq(l.status[i], -want, "rank %d exited with %d; logged:\n%s", i, l.status[i],
                     log);
        cr_expect_lt(l.exited_at[i], third->delay_s + 2.0 + 2.5, "rank %d took %.1f s", i,
                     l.exited_at[i]);
        cr_expect(text_has(last_error(log), ranks_say), "rank %d ended with: %s", i,
                  last_error(log));
        cr_expect(text_has(last_error(log), "not joined after 2.0 s: ranks 2"),
                  "rank %d ended with: %s", i, last_error(log));
        free(log);
    }
    launch_cleanup(&l);
}

Test(rendezvous, wrong_secret_is_reported_at_once_and_fails_every_rank_fast, .timeout = 60)
{
    const proc_spec_t third = {2, 3, "another-secret-of-enough-length", 0.3};

    run_refused(&third, CHORUS_ERR_AUTH, CHORUS_ERR_AUTH,
                "rank 2 (of 3) could not verify the store's proof: its job secret differs",
                "rendezvous stopped: rank 2 (of 3) could not verify the store's proof");
}

Test(rendezvous, duplicate_rank_is_reported_at_once_and_fails_every_rank_fast,
     .timeout = 60)
{
    const proc_spec_t third = {1, 3, SECRET, 0.5};

    run_refused(&third, CHORUS_ERR_IN_USE, CHORUS_ERR_IN_USE, "rank 1 already joined",
                "rendezvous stopped: rank 1 already joined");
}

Test(rendezvous, size_mismatch_is_reported_at_once_and_fails_every_rank_fast,
     .timeout = 60)
{
    const proc_spec_t third = {2, 4, SECRET, 0.5};

    run_refused(&third, CHORUS_ERR_INVALID_ARG, CHORUS_ERR_INVALID_ARG,
                "rank 2 announced size 4, which disagrees with size 3",
                "rendezvous stopped: rank 2 announced size 4");
}

/* A process with the wrong secret, then the right one for the same rank within the grace. */
Test(rendezvous, a_correct_rank_after_a_refused_one_still_completes, .timeout = 60)
{
    const proc_spec_t specs[] = {
        {0, 3, SECRET, 0}, {1, 3, SECRET, 0}, {2, 3, "another-secret-of-enough-length", 0.3},
        {2, 3, SECRET, 1.0}};
    launch_t l;

    launch_init(&l, 4, 20, "0");
    launch_run(&l, specs);
    cr_expect_eq(l.status[2], -CHORUS_ERR_AUTH, "the refused process exited with %d",
                 l.status[2]);
    for (int i = 0; i < 4; i++) {
        char *log = proc_log(&l, i);
        if (i != 2)
            cr_expect_eq(l.status[i], 0, "process %d exited with %d; logged:\n%s", i,
                         l.status[i], log);
        free(log);
    }
    launch_cleanup(&l);
}

/* ---- short secrets ----------------------------------------------------------------- */

Test(rendezvous, a_secret_under_16_bytes_warns_and_16_bytes_do_not, .timeout = 60)
{
    const proc_spec_t specs[] = {{0, 1, "0123456789abcde", 0}, {0, 1, "0123456789abcdef", 0}};
    const char *warning = "the job secret has 15 bytes; use at least 16";
    launch_t l;

    for (int i = 0; i < 2; i++) {
        char *log;

        launch_init(&l, 1, 5, "0");
        l.status[0] = -1;
        launch_run(&l, &specs[i]);
        log = proc_log(&l, 0);
        cr_expect_eq(l.status[0], 0, "secret %s: exited with %d; logged:\n%s", specs[i].secret,
                     l.status[0], log);
        cr_expect_eq(count_lines(log, "warn", "the job secret has"), i == 0,
                     "secret %s logged:\n%s", specs[i].secret, log);
        if (i == 0)
            cr_expect(text_has(log, warning), "logged:\n%s", log);
        free(log);
        launch_cleanup(&l);
    }
}

/* A second communicator of the same process does not repeat the warning. */
static int create_twice(const launch_t *l)
{
    chorus_comm_t comm;

    for (int k = 0; k < 2; k++) {
        char addr[64];

        snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
        if (chorus_comm_create(0, 1, addr, "short", l->timeout_s, &comm) != CHORUS_OK)
            return 1;
        chorus_comm_destroy(comm);
    }
    return 0;
}

Test(rendezvous, short_secret_warning_is_not_repeated, .timeout = 60)
{
    launch_t l;
    char path[128], *log;
    pid_t pid;
    int ws;

    launch_init(&l, 1, 5, NULL);
    log_path(&l, 0, path, sizeof(path));
    fflush(stderr);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(100);
        _exit(create_twice(&l));
    }
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    log = proc_log(&l, 0);
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "logged:\n%s", log);
    cr_expect_eq(count_lines(log, "warn", "the job secret has 5 bytes"), 1, "logged:\n%s",
                 log);
    free(log);
    launch_cleanup(&l);
}
