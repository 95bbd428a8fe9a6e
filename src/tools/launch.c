/*
 * Local launcher: forks the ranks of one job, relays their output and
 * reaps them. One loop drives everything: poll() on a signalfd (SIGCHLD and
 * the signals we forward) and on the ranks' output pipes, with a timeout set
 * by the nearest deadline (job timeout, SIGKILL after the grace period, end
 * of output draining). Signals stay blocked for the whole run so that none
 * is lost between a check and the poll.
 *
 * Ranks that fit the launcher's CPUs run on one each (as mpirun binds them):
 * ranks forked together otherwise start on one CPU and trade it until the
 * scheduler moves one, which makes their first calls take a switch of the
 * CPU each instead of a cache-line transfer.
 */
#include "tools/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/time.h"

extern char **environ;

/* A line longer than this is split; the pieces are still prefixed. */
#define LAUNCH_LINE_MAX 16384
/* Upper bound on one poll, so a lost wake-up only delays us a little. */
#define LAUNCH_POLL_MAX_MS 250
#define LAUNCH_NENV 6

typedef struct {
    int fd;                 /* read end of the rank's pipe; -1 once closed */
    int out_fd;             /* where lines go: 1 or 2 */
    int rank;
    size_t len;
    char buf[LAUNCH_LINE_MAX];
} launch_stream_t;

typedef struct {
    pid_t pid;              /* also its process group id; 0 if never started */
    int alive;              /* started and not reaped yet */
    launch_stream_t out, err;
} launch_rank_t;

typedef struct {
    const launch_opts_t *opts;
    const char *name;       /* progname for messages */
    double grace_s;
    launch_rank_t *ranks;
    int nstarted, nalive;
    int sigfd;
    sigset_t old_mask;
    struct sigaction old_pipe, old_chld;
    char **envp;            /* inherited environment + LAUNCH_NENV slots */
    size_t env_base;        /* index of the first slot */
    char env_strs[LAUNCH_NENV][128];
    char addr[64], secret[65];
    int port_fd;            /* holds the rendezvous port for the job's life; -1: none */
    struct rlimit old_nofile;  /* restored in the ranks */
    int nofile_raised;
    double stop_deadline;   /* job timeout; 0: none */
    double kill_deadline;   /* SIGKILL for groups still there; 0: none */
    double drain_deadline;  /* stop waiting for output; 0: not yet */
    int terminating, cleaned_up;
    int failed_code;        /* exit code of the first failure; 0: none yet */
    int interrupt_sig, timed_out;
    int *cpus, ncpus;       /* the launcher's CPUs, when the ranks are bound to them */
} launch_job_t;

int launch_parse_nranks(const char *text, int *nranks_p)
{
    char *end;
    long v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > LAUNCH_MAX_RANKS)
        return -1;
    *nranks_p = (int)v;
    return 0;
}

/* ---- job identity: port and secret ------------------------------------ */

/*
 * Asks the kernel for a free port on the loopback address and keeps it
 * bound, with SO_REUSEADDR and without listening, until the job is over.
 * Rank 0's rendezvous store binds it too (a listener may share the port
 * with bound sockets that do not listen, when all set SO_REUSEADDR, as
 * chorus's do); meanwhile the kernel gives the port to no outgoing
 * connection and no other bind to port 0. Closing it at once, as a port
 * probe would, left a window in which another process's connection could
 * take the port before rank 0 bound it.
 */
static int launch_hold_port(const char *name, int *fd_p, int *port_p)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        fprintf(stderr, "%s: socket() failed: %s\n", name, strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "%s: cannot find a free port on 127.0.0.1: %s\n", name,
                strerror(errno));
        close(fd);
        return -1;
    }
    *fd_p = fd;
    *port_p = ntohs(sa.sin_port);
    return 0;
}

static int launch_make_secret(const char *name, char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char raw[32];
    size_t got = 0;

    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "%s: getrandom() failed: %s\n", name, strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        hex[2 * i] = digits[raw[i] >> 4];
        hex[2 * i + 1] = digits[raw[i] & 15];
    }
    hex[64] = '\0';
    return 0;
}

/* ---- environment -------------------------------------------------------- */

static int launch_is_ours(const char *entry)
{
    static const char *const names[LAUNCH_NENV] = {
        "CHORUS_RANK=", "CHORUS_SIZE=", "CHORUS_LOCAL_RANK=",
        "CHORUS_LOCAL_SIZE=", "CHORUS_ADDR=", "CHORUS_SECRET=",
    };
    for (int i = 0; i < LAUNCH_NENV; i++) {
        if (strncmp(entry, names[i], strlen(names[i])) == 0)
            return 1;
    }
    return 0;
}

/* Copies environ without our variables and leaves LAUNCH_NENV slots at the end. */
static int launch_env_init(launch_job_t *job)
{
    size_t n = 0, k = 0;

    while (environ != NULL && environ[n] != NULL)
        n++;
    job->envp = calloc(n + LAUNCH_NENV + 1, sizeof(char *));
    if (job->envp == NULL) {
        fprintf(stderr, "%s: out of memory\n", job->name);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!launch_is_ours(environ[i]))
            job->envp[k++] = environ[i];
    }
    job->env_base = k;
    for (int i = 0; i < LAUNCH_NENV; i++)
        job->envp[k + (size_t)i] = job->env_strs[i];
    job->envp[k + LAUNCH_NENV] = NULL;
    return 0;
}

static void launch_env_set_rank(launch_job_t *job, int rank)
{
    int size = job->opts->nranks;

    snprintf(job->env_strs[0], sizeof(job->env_strs[0]), "CHORUS_RANK=%d", rank);
    snprintf(job->env_strs[1], sizeof(job->env_strs[1]), "CHORUS_SIZE=%d", size);
    snprintf(job->env_strs[2], sizeof(job->env_strs[2]), "CHORUS_LOCAL_RANK=%d", rank);
    snprintf(job->env_strs[3], sizeof(job->env_strs[3]), "CHORUS_LOCAL_SIZE=%d", size);
    snprintf(job->env_strs[4], sizeof(job->env_strs[4]), "CHORUS_ADDR=%s", job->addr);
    snprintf(job->env_strs[5], sizeof(job->env_strs[5]), "CHORUS_SECRET=%s", job->secret);
}

/* ---- signals -------------------------------------------------------------- */

static int launch_signals_init(launch_job_t *job)
{
    struct sigaction ign, dfl;
    sigset_t mask;

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &mask, &job->old_mask) != 0) {
        fprintf(stderr, "%s: sigprocmask() failed: %s\n", job->name, strerror(errno));
        return -1;
    }
    job->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (job->sigfd < 0) {
        fprintf(stderr, "%s: signalfd() failed: %s\n", job->name, strerror(errno));
        sigprocmask(SIG_SETMASK, &job->old_mask, NULL);
        return -1;
    }
    /* A closed stdout must not kill the launcher while ranks still run; and
     * SIGCHLD must not be ignored, or the kernel reaps the ranks for us. */
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &ign, &job->old_pipe);
    sigaction(SIGCHLD, &dfl, &job->old_chld);
    /* Orphans of the ranks become our children, so we can reap them and
     * their process groups vanish without waiting for init. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return 0;
}

static void launch_signals_restore(launch_job_t *job)
{
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    sigaction(SIGPIPE, &job->old_pipe, NULL);
    sigaction(SIGCHLD, &job->old_chld, NULL);
    close(job->sigfd);
    sigprocmask(SIG_SETMASK, &job->old_mask, NULL);
}

/*
 * Signals the process group of every rank that was started, also of ranks
 * already reaped, so that their leftover children get it too. The group id
 * is the rank's pid, which the kernel does not reuse while the group has
 * members.
 */
static void launch_signal_all(launch_job_t *job, int sig)
{
    for (int r = 0; r < job->nstarted; r++) {
        if (job->ranks[r].pid > 0)
            kill(-job->ranks[r].pid, sig);
    }
}

static void launch_terminate(launch_job_t *job, int sig)
{
    launch_signal_all(job, sig);
    if (!job->terminating) {
        job->terminating = 1;
        job->kill_deadline = chorus__now() + job->grace_s;
    }
}

/* ---- output relay ------------------------------------------------------- */

static void launch_write_all(int fd, const struct iovec *iov_in, int n)
{
    struct iovec iov[3];
    int i = 0;

    memcpy(iov, iov_in, (size_t)n * sizeof(*iov));
    while (i < n) {
        ssize_t w = writev(fd, iov + i, n - i);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return; /* EPIPE and friends: drop the output, keep draining */
        while (i < n && (size_t)w >= iov[i].iov_len) {
            w -= (ssize_t)iov[i].iov_len;
            i++;
        }
        if (i < n) {
            iov[i].iov_base = (char *)iov[i].iov_base + w;
            iov[i].iov_len -= (size_t)w;
        }
    }
}

/* Writes "[rank] " + line + "\n" in one writev, so lines never mix. */
static void launch_emit_line(int fd, int rank, const char *line, size_t len)
{
    char prefix[32];
    struct iovec iov[3];
    int plen = snprintf(prefix, sizeof(prefix), "[%d] ", rank);

    iov[0].iov_base = prefix;
    iov[0].iov_len = (size_t)plen;
    iov[1].iov_base = (void *)line;
    iov[1].iov_len = len;
    iov[2].iov_base = "\n";
    iov[2].iov_len = 1;
    launch_write_all(fd, iov, 3);
}

/* Emits every complete line; with at_eof or a full buffer, the rest too. */
static void launch_stream_flush(launch_stream_t *s, int at_eof)
{
    size_t start = 0;
    int rank = s->rank;

    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] == '\n') {
            launch_emit_line(s->out_fd, rank, s->buf + start, i - start);
            start = i + 1;
        }
    }
    if (start < s->len && (at_eof || (start == 0 && s->len == sizeof(s->buf)))) {
        launch_emit_line(s->out_fd, rank, s->buf + start, s->len - start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static void launch_stream_close(launch_stream_t *s)
{
    if (s->fd < 0)
        return;
    launch_stream_flush(s, 1);
    close(s->fd);
    s->fd = -1;
}

static void launch_stream_read(launch_stream_t *s)
{
    ssize_t n;

    do {
        n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        launch_stream_close(s);
        return;
    }
    s->len += (size_t)n;
    launch_stream_flush(s, 0);
}

/* ---- starting ranks ----------------------------------------------------- */

/* Runs in the child between fork and exec; never returns. */
static void launch_child(launch_job_t *job, char *const argv[], int rank,
                         pid_t parent, const int out[2], const int err[2])
{
    const char *file = job->opts->exec_path ? job->opts->exec_path : argv[0];
    int devnull, code;

    setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(LAUNCH_EXIT_ERROR);
    sigaction(SIGPIPE, &job->old_pipe, NULL);
    sigaction(SIGCHLD, &job->old_chld, NULL);
    if (job->nofile_raised)
        setrlimit(RLIMIT_NOFILE, &job->old_nofile);
    devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    if (out[1] >= 0 && (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0))
        _exit(LAUNCH_EXIT_ERROR);
    sigprocmask(SIG_SETMASK, &job->old_mask, NULL);
    if (job->ncpus > 0) {
        cpu_set_t one;

        CPU_ZERO(&one);
        CPU_SET(job->cpus[rank % job->ncpus], &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0)
            dprintf(2, "%s: rank %d: cannot bind to CPU %d (%s); it runs unbound\n",
                    job->name, rank, job->cpus[rank % job->ncpus], strerror(errno));
    }
    execvpe(file, argv, job->envp);
    code = (errno == ENOENT) ? 127 : 126;
    dprintf(2, "%s: rank %d: cannot execute '%s': %s\n", job->name, rank, file,
            strerror(errno));
    _exit(code);
}

static int launch_start_rank(launch_job_t *job, char *const argv[], int rank)
{
    launch_rank_t *r = &job->ranks[rank];
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    pid_t parent = getpid(), pid;

    if (job->opts->prefix && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
        fprintf(stderr, "%s: cannot create pipes for rank %d: %s\n", job->name, rank,
                strerror(errno));
        goto err_pipes;
    }
    launch_env_set_rank(job, rank);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: cannot fork rank %d: %s\n", job->name, rank, strerror(errno));
        goto err_pipes;
    }
    if (pid == 0)
        launch_child(job, argv, rank, parent, out, err);
    /* Also set here, so the group exists before we may signal it. */
    setpgid(pid, pid);
    r->pid = pid;
    r->alive = 1;
    job->nalive++;
    if (job->opts->prefix) {
        close(out[1]);
        close(err[1]);
        r->out.fd = out[0];
        r->err.fd = err[0];
    }
    return 0;

err_pipes:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    return -1;
}

/* ---- reaping ------------------------------------------------------------ */

static void launch_rank_exited(launch_job_t *job, int rank, int status)
{
    int code;

    job->ranks[rank].alive = 0;
    job->nalive--;
    if (WIFEXITED(status))
        code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        code = 128 + WTERMSIG(status);
    else
        code = LAUNCH_EXIT_ERROR;
    if (code == 0 || job->failed_code != 0)
        return;
    job->failed_code = code;
    if (job->terminating)
        return; /* a consequence of our own signals */
    if (WIFSIGNALED(status))
        fprintf(stderr, "%s: rank %d killed by signal %d (%s)", job->name, rank,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        fprintf(stderr, "%s: rank %d exited with code %d", job->name, rank, code);
    fprintf(stderr, job->nalive > 0 ? "; terminating the other ranks\n" : "\n");
    launch_terminate(job, SIGTERM);
}

/*
 * Reaps each rank and, as we are a subreaper, the orphans left in its
 * process group, so that the group disappears as soon as it is empty.
 */
static void launch_reap(launch_job_t *job)
{
    for (int r = 0; r < job->nstarted; r++) {
        pid_t pid = job->ranks[r].pid, p;
        int status;

        for (;;) {
            p = waitpid(-pid, &status, WNOHANG);
            if (p < 0 && errno == EINTR)
                continue;
            if (p <= 0)
                break;
            if (p == pid)
                launch_rank_exited(job, r, status);
        }
        if (p < 0 && errno == ECHILD && job->ranks[r].alive) {
            fprintf(stderr, "%s: rank %d (pid %d) vanished: %s\n", job->name, r,
                    (int)pid, strerror(errno));
            job->ranks[r].alive = 0;
            job->nalive--;
        }
    }
}

static void launch_handle_signals(launch_job_t *job)
{
    struct signalfd_siginfo si;

    while (read(job->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;

        if (sig == SIGCHLD)
            continue; /* launch_reap runs after every wake-up */
        if (job->interrupt_sig == 0) {
            job->interrupt_sig = sig;
            fprintf(stderr, "%s: got signal %d (%s); forwarding it to the ranks\n",
                    job->name, sig, strsignal(sig));
        }
        launch_terminate(job, sig);
    }
}

/* ---- the loop ------------------------------------------------------------- */

static int launch_group_exists(pid_t pgid)
{
    return kill(-pgid, 0) == 0 || errno == EPERM;
}

static int launch_any_group(const launch_job_t *job)
{
    for (int r = 0; r < job->nstarted; r++) {
        if (job->ranks[r].pid > 0 && launch_group_exists(job->ranks[r].pid))
            return 1;
    }
    return 0;
}

/* Deadlines: timeout, SIGKILL, leftovers once all ranks are gone. */
static void launch_check_deadlines(launch_job_t *job, double now)
{
    if (job->stop_deadline > 0 && now >= job->stop_deadline && !job->terminating &&
        job->nalive > 0) {
        fprintf(stderr, "%s: timeout after %g s; terminating the ranks\n", job->name,
                job->opts->timeout_s);
        job->timed_out = 1;
        launch_terminate(job, SIGTERM);
    }
    if (job->kill_deadline > 0 && now >= job->kill_deadline) {
        launch_signal_all(job, SIGKILL);
        job->kill_deadline = 0;
    }
    if (job->nalive == 0 && !job->cleaned_up) {
        job->cleaned_up = 1;
        job->stop_deadline = 0; /* the job is over; only cleanup is left */
        if (launch_any_group(job)) {
            job->terminating = 0; /* the grace period starts now */
            launch_terminate(job, SIGTERM);
        }
        /* Output of a process that escaped its group must not hold us forever. */
        job->drain_deadline = now + job->grace_s + 1.0;
    }
    /* Nothing left to kill: no need to wait for the grace period to end. */
    if (job->kill_deadline > 0 && job->nalive == 0 && !launch_any_group(job))
        job->kill_deadline = 0;
}

static int launch_poll_ms(const launch_job_t *job)
{
    double next = 0;
    double d[3] = {job->stop_deadline, job->kill_deadline, job->drain_deadline};
    int ms;

    for (int i = 0; i < 3; i++) {
        if (d[i] > 0 && (job->terminating == 0 || i != 0) && (next == 0 || d[i] < next))
            next = d[i];
    }
    if (next == 0)
        return LAUNCH_POLL_MAX_MS;
    ms = chorus__ms_left(next);
    return ms < LAUNCH_POLL_MAX_MS ? ms : LAUNCH_POLL_MAX_MS;
}

static int launch_add_fd(struct pollfd *fds, launch_stream_t **who, int n,
                         launch_stream_t *s)
{
    if (s->fd < 0)
        return n;
    fds[n].fd = s->fd;
    fds[n].events = POLLIN;
    fds[n].revents = 0;
    who[n] = s;
    return n + 1;
}

static int launch_loop(launch_job_t *job, struct pollfd *fds, launch_stream_t **who)
{
    for (;;) {
        int n = 1, ready;

        fds[0].fd = job->sigfd;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        for (int r = 0; r < job->nstarted; r++) {
            n = launch_add_fd(fds, who, n, &job->ranks[r].out);
            n = launch_add_fd(fds, who, n, &job->ranks[r].err);
        }
        if (job->nalive == 0 && job->cleaned_up && job->kill_deadline == 0 &&
            (n == 1 || chorus__now() >= job->drain_deadline))
            break;
        ready = poll(fds, (nfds_t)n, launch_poll_ms(job));
        if (ready < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll() failed: %s\n", job->name, strerror(errno));
            return -1;
        }
        for (int i = 1; ready > 0 && i < n; i++) {
            if (fds[i].revents != 0)
                launch_stream_read(who[i]);
        }
        launch_handle_signals(job);
        launch_reap(job);
        launch_check_deadlines(job, chorus__now());
    }
    return 0;
}

/* ---- entry point ---------------------------------------------------------- */

static int launch_exit_code(const launch_job_t *job)
{
    if (job->timed_out)
        return LAUNCH_EXIT_TIMEOUT;
    if (job->failed_code != 0)
        return job->failed_code;
    if (job->interrupt_sig != 0)
        return 128 + job->interrupt_sig;
    return 0;
}

/* With --prefix we hold two pipes per rank: raise the soft limit if needed. */
static void launch_raise_nofile(launch_job_t *job)
{
    rlim_t need = 2 * (rlim_t)job->opts->nranks + 64;
    struct rlimit lim;

    if (!job->opts->prefix || getrlimit(RLIMIT_NOFILE, &job->old_nofile) != 0 ||
        job->old_nofile.rlim_cur >= need)
        return;
    lim = job->old_nofile;
    lim.rlim_cur = lim.rlim_max < need ? lim.rlim_max : need;
    job->nofile_raised = setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

int launch_parse_bind(const char *text, launch_bind_t *bind_p)
{
    static const char *const names[] = {"auto", "core", "none"};

    for (int b = 0; b < 3; b++) {
        if (text != NULL && strcmp(text, names[b]) == 0) {
            *bind_p = (launch_bind_t)b;
            return 0;
        }
    }
    return -1;
}

/* The CPUs the ranks are bound to, one each in turn; none when they run unbound. */
static int launch_bind_setup(launch_job_t *job)
{
    cpu_set_t set;
    int n;

    if (job->opts->bind == LAUNCH_BIND_NONE || sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    n = CPU_COUNT(&set);
    if (job->opts->bind == LAUNCH_BIND_AUTO && (job->opts->nranks < 2 || job->opts->nranks > n))
        return 0;
    job->cpus = calloc((size_t)n, sizeof(*job->cpus));
    if (job->cpus == NULL) {
        fprintf(stderr, "%s: out of memory\n", job->name);
        return -1;
    }
    for (int c = 0; c < CPU_SETSIZE && job->ncpus < n; c++) {
        if (CPU_ISSET(c, &set))
            job->cpus[job->ncpus++] = c;
    }
    return 0;
}

static int launch_setup(launch_job_t *job, const launch_opts_t *opts)
{
    int port;

    memset(job, 0, sizeof(*job));
    job->port_fd = -1;
    job->opts = opts;
    job->name = opts->progname ? opts->progname : "chorus-run";
    job->grace_s = opts->grace_s > 0 ? opts->grace_s : LAUNCH_DEFAULT_GRACE_S;
    job->sigfd = -1;
    if (opts->nranks < 1 || opts->nranks > LAUNCH_MAX_RANKS) {
        fprintf(stderr, "%s: invalid rank count %d (expected 1..%d)\n", job->name,
                opts->nranks, LAUNCH_MAX_RANKS);
        return -1;
    }
    if (launch_hold_port(job->name, &job->port_fd, &port) != 0 ||
        launch_make_secret(job->name, job->secret) != 0)
        return -1;
    snprintf(job->addr, sizeof(job->addr), "127.0.0.1:%d", port);
    job->ranks = calloc((size_t)opts->nranks, sizeof(*job->ranks));
    if (job->ranks == NULL) {
        fprintf(stderr, "%s: out of memory\n", job->name);
        return -1;
    }
    for (int r = 0; r < opts->nranks; r++) {
        job->ranks[r].out.fd = job->ranks[r].err.fd = -1;
        job->ranks[r].out.out_fd = 1;
        job->ranks[r].err.out_fd = 2;
        job->ranks[r].out.rank = job->ranks[r].err.rank = r;
    }
    launch_raise_nofile(job);
    return launch_bind_setup(job);
}

int launch_run(const launch_opts_t *opts, char *const argv[])
{
    launch_job_t job;
    struct pollfd *fds = NULL;
    launch_stream_t **who = NULL;
    size_t nfds;
    int code = LAUNCH_EXIT_ERROR;

    if (argv == NULL || argv[0] == NULL || launch_setup(&job, opts) != 0)
        return LAUNCH_EXIT_ERROR;
    nfds = 1 + 2 * (size_t)opts->nranks;
    fds = calloc(nfds, sizeof(*fds));
    who = calloc(nfds, sizeof(*who));
    if (fds == NULL || who == NULL) {
        fprintf(stderr, "%s: out of memory\n", job.name);
        goto err_alloc;
    }
    if (launch_env_init(&job) != 0)
        goto err_alloc;
    if (launch_signals_init(&job) != 0)
        goto err_env;
    if (opts->timeout_s > 0)
        job.stop_deadline = chorus__now() + opts->timeout_s;
    for (int r = 0; r < opts->nranks; r++) {
        if (launch_start_rank(&job, argv, r) != 0) {
            /* Stop the ranks already running; the loop reaps them. */
            job.failed_code = LAUNCH_EXIT_ERROR;
            launch_terminate(&job, SIGTERM);
            break;
        }
        job.nstarted++;
    }
    if (launch_loop(&job, fds, who) != 0) {
        launch_signal_all(&job, SIGKILL);
        for (int r = 0; r < job.nstarted; r++) {
            if (job.ranks[r].alive)
                waitpid(job.ranks[r].pid, NULL, 0); /* SIGKILL: returns soon */
        }
        job.failed_code = job.failed_code ? job.failed_code : LAUNCH_EXIT_ERROR;
    }
    for (int r = 0; r < job.nstarted; r++) {
        launch_stream_close(&job.ranks[r].out);
        launch_stream_close(&job.ranks[r].err);
    }
    code = launch_exit_code(&job);
    launch_signals_restore(&job);
    if (job.nofile_raised)
        setrlimit(RLIMIT_NOFILE, &job.old_nofile);
err_env:
    free(job.envp);
err_alloc:
    free(who);
    free(fds);
    free(job.ranks);
    free(job.cpus);
    if (job.port_fd >= 0)
        close(job.port_fd);
    return code;
}
