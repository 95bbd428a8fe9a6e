/*
 * Local launcher: runs N ranks of one program on this machine, as
 * chorus-run and chorus-perf -np do.
 *
 * Each rank is a child process with these variables set in its environment
 * (values of the same names inherited from the launcher's environment are
 * overridden, so a launcher started inside another job starts a new job):
 *   CHORUS_RANK, CHORUS_SIZE             rank in 0..N-1 and N
 *   CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE the same values: all ranks are local
 *   CHORUS_ADDR    127.0.0.1:<port>, a free port that the launcher keeps bound
 *                  (not listening) until the job is over, so that no other
 *                  process takes it; rank 0 hosts the rendezvous store there
 *   CHORUS_SECRET  64 hex characters from getrandom(), fresh for every job
 *
 * Every rank runs in its own process group with stdin from /dev/null, and
 * dies with the launcher (PR_SET_PDEATHSIG). When one rank exits non-zero or
 * by a signal, the others get SIGTERM and, after a grace period, SIGKILL;
 * the same happens on timeout. SIGINT, SIGTERM and SIGHUP received by the
 * launcher are forwarded to every rank's process group, with the same grace
 * period before SIGKILL. Once all ranks have exited, whatever is left in
 * their process groups (background processes they started) is terminated
 * the same way, so no process of the job outlives the launcher.
 */
#ifndef CHORUS_TOOLS_LAUNCH_H
#define CHORUS_TOOLS_LAUNCH_H

#define LAUNCH_MAX_RANKS 1024
#define LAUNCH_DEFAULT_GRACE_S 3.0
/* Exit code of a job stopped by its timeout, as timeout(1) does. */
#define LAUNCH_EXIT_TIMEOUT 124
/* Exit code when the launcher itself failed (no free port, fork failed, ...). */
#define LAUNCH_EXIT_ERROR 1

/* launch_opts_t.bind: where the ranks may run. */
typedef enum {
    LAUNCH_BIND_AUTO = 0,  /* a CPU each when the ranks fit the launcher's CPUs, else as it */
    LAUNCH_BIND_CORE,      /* a CPU each, in turn over the launcher's CPUs */
    LAUNCH_BIND_NONE       /* wherever the launcher may run */
} launch_bind_t;

typedef struct {
    int nranks;            /* 1..LAUNCH_MAX_RANKS */
    launch_bind_t bind;
    int prefix;            /* prefix every output line with "[rank] " */
    double timeout_s;      /* stop the job after this long; <= 0: no limit */
    double grace_s;        /* SIGTERM to SIGKILL delay; <= 0: LAUNCH_DEFAULT_GRACE_S */
    const char *progname;  /* names the launcher in its messages */
    const char *exec_path; /* program to execute; NULL: argv[0], searched in PATH */
} launch_opts_t;

/*
 * Runs argv (argv[0] is the program) as opts->nranks ranks and waits for all
 * of them. Returns the launcher's exit code: 0 when every rank exited 0;
 * otherwise the exit code of the first rank that failed (128 + signal number
 * for a rank killed by a signal); LAUNCH_EXIT_TIMEOUT after a timeout;
 * 128 + signal number when the launcher was interrupted and every rank still
 * exited 0; LAUNCH_EXIT_ERROR when the launcher could not start the job.
 * The reason for a non-zero code is printed on stderr.
 */
int launch_run(const launch_opts_t *opts, char *const argv[]);

/*
 * Parses a rank count for -n/-np: a decimal integer in 1..LAUNCH_MAX_RANKS
 * with nothing after it. Returns 0 and sets *nranks_p, or -1.
 */
int launch_parse_nranks(const char *text, int *nranks_p);

/* Parses "core", "none" or "auto" for --bind. Returns 0 and sets *bind_p, or -1. */
int launch_parse_bind(const char *text, launch_bind_t *bind_p);

#endif
