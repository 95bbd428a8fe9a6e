/* Multi-process test harness: see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_MAX_RANKS 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int harness_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void make_secret(char *buf, size_t len)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)(now_s() * 1e6);

    for (size_t i = 0; i + 1 < len; i++)
        buf[i] = "0123456789abcdef"[rand_r(&seed) % 16];
    buf[len - 1] = '\0';
}

static int run_rank(const harness_opts_t *opts, int rank, const char *addr, const char *secret,
                    harness_rank_fn fn, void *arg)
{
    chorus_comm_t comm;
    chorus_status_t status;
    int rc;

    status = chorus_comm_create(rank, opts->nranks, addr, secret, opts->timeout_s, &comm);
    if (status != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_comm_create: %s\n", rank, chorus_status_string(status));
        return 100;
    }
    rc = fn(comm, rank, opts->nranks, arg);
    status = chorus_comm_destroy(comm);
    if (status != CHORUS_OK && rc == 0) {
        fprintf(stderr, "rank %d: chorus_comm_destroy: %s\n", rank,
                chorus_status_string(status));
        rc = 101;
    }
    return rc;
}

int harness_run(const harness_opts_t *opts, harness_rank_fn fn, void *arg, int *status_out,
                double *elapsed_out)
{
    pid_t pids[HARNESS_MAX_RANKS];
    double start = now_s(), ended[HARNESS_MAX_RANKS];
    char addr[64], secret[33];
    int n = opts->nranks, left, failed = 0, killed = 0;

    if (n < 1 || n > HARNESS_MAX_RANKS)
        return -1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
    make_secret(secret, sizeof(secret));
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(run_rank(opts, r, addr, secret, fn, arg));
        status_out[r] = -1;
        ended[r] = -1;
    }
    for (left = n; left > 0;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);

        if (pid > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] != pid)
                    continue;
                status_out[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                ended[r] = now_s() - start;
                pids[r] = 0;
                left--;
            }
            continue;
        }
        if (!killed && opts->kill_rank >= 0 && now_s() - start >= opts->kill_after_s) {
            if (pids[opts->kill_rank] > 0)
                kill(pids[opts->kill_rank], SIGKILL);
            killed = 1;
        }
        if (opts->tick != NULL)
            opts->tick(pids, n, now_s() - start, opts->tick_arg);
        if (now_s() - start > opts->deadline_s) {
            for (int r = 0; r < n; r++) {
                if (pids[r] > 0) {
                    fprintf(stderr, "harness: rank %d still running after %.1f s: killed\n",
                            r, opts->deadline_s);
                    kill(pids[r], SIGKILL);
                }
            }
            while (wait(NULL) > 0)
                ;
            for (int r = 0; r < n; r++)
                if (elapsed_out)
                    elapsed_out[r] = pids[r] > 0 ? now_s() - start : ended[r];
            return 1;
        }
        usleep(2000);
    }
    for (int r = 0; r < n; r++) {
        if (elapsed_out)
            elapsed_out[r] = ended[r];
        if (r != opts->kill_rank && status_out[r] != 0)
            failed = 1;
    }
    return failed;
}
