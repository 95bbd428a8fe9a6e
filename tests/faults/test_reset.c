/*
 * A connection reset: while the ranks loop an allreduce, the parent destroys
 * their TCP connections with "ss -K" (SOCK_DESTROY: the socket fails with
 * ECONNABORTED and the kernel sends a reset to the other end). Every earlier
 * call must be exact and nothing may hang; and since a reset is an event the
 * ranks see at once (unlike a silent link), every rank must end its call
 * with CHORUS_ERR_PEER_FAILED within RESET_NOTICE_S, well before
 * CHORUS_TIMEOUT: a rank that only times out has missed the reset.
 *
 * Needs root and a kernel with CONFIG_INET_DIAG_DESTROY; exits 77 (skip)
 * with a message otherwise. Only connections to the ranks' own listening
 * ports on 127.0.0.1 are matched.
 *
 * Exit: 0 passed, 1 failed, 77 skipped.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "fault_loop.h"
#include "coll/harness.h"

#define RESET_TIMEOUT_S 3.0
#define RESET_NOTICE_S 1.0
#define RESET_SKIP 77

typedef struct {
    fault_loop_t loop;
    int nranks;
    double delay_s, ready_t, reset_t;
    int killed;     /* sockets ss reported destroying */
} reset_ctx_t;

/* Run ss -K with filter; returns the number of sockets it printed (destroyed), or -1. */
static int reset_ss_kill(const char *filter)
{
    char cmd[2304], line[512];
    FILE *p;
    int n = 0;

    snprintf(cmd, sizeof(cmd), "ss -K -t -n %s 2>&1", filter);
    p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    while (fgets(line, sizeof(line), p) != NULL)
        n += strncmp(line, "State", 5) != 0 && strncmp(line, "Recv-Q", 6) != 0;
    return pclose(p) == 0 ? n : -1;
}

/* Can this process destroy a socket? Probe on a loopback pair of its own. */
static int reset_probe(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 2};
    socklen_t len = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = socket(AF_INET, SOCK_STREAM, 0), afd = -1;
    char filter[128], c;
    int ok = 0;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || cfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(lfd, 1) != 0 || getsockname(lfd, (struct sockaddr *)&sa, &len) != 0 ||
        connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        (afd = accept(lfd, NULL, NULL)) < 0)
        goto out;
    setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(filter, sizeof(filter), "dst 127.0.0.1 dport = :%d", ntohs(sa.sin_port));
    ok = reset_ss_kill(filter) > 0 && recv(cfd, &c, 1, 0) < 0 && errno == ECONNABORTED;
out:
    if (afd >= 0)
        close(afd);
    if (cfd >= 0)
        close(cfd);
    if (lfd >= 0)
        close(lfd);
    return ok;
}

static void reset_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    reset_ctx_t *s = arg;
    char filter[2048];
    size_t len;
    double now = fault_now();
    int terms = 0;

    (void)pids; (void)elapsed_s;
    if (s->reset_t > 0)
        return;
    if (s->ready_t == 0) {
        if (fault_all_in_loop(s->loop.states, nranks))
            s->ready_t = now;
        return;
    }
    if (now - s->ready_t < s->delay_s)
        return;
    /*
     * Exactly the ranks' own connections, by both ports of each; ss is never
     * run with a filter that could match another program's sockets.
     */
    len = (size_t)snprintf(filter, sizeof(filter), "src 127.0.0.1 dst 127.0.0.1 '(");
    for (int r = 0; r < nranks; r++) {
        const fault_rank_state_t *st = &s->loop.states[r];
        for (int i = 0; i < st->nconns && len < sizeof(filter) - 64; i++)
            len += (size_t)snprintf(filter + len, sizeof(filter) - len,
                                    "%s( sport = :%d and dport = :%d )", terms++ ? " or " : " ",
                                    st->conns[i][0], st->conns[i][1]);
    }
    snprintf(filter + len, sizeof(filter) - len, " )'");
    if (terms == 0) {
        printf("  FAIL: the ranks reported no TCP connection\n");
        s->reset_t = fault_now();
        s->killed = 0;
        return;
    }
    s->reset_t = fault_now();
    s->killed = reset_ss_kill(filter);
    printf("  ss -K %s: %d sockets destroyed\n", filter, s->killed);
}

static int reset_judge(const reset_ctx_t *s, int r, int status)
{
    const fault_rank_state_t *st = &s->loop.states[r];
    double took = st->final_t - s->reset_t;
    int ok = status == FAULT_RC_ENDED && st->final_status == CHORUS_ERR_PEER_FAILED &&
             took <= RESET_NOTICE_S;

    printf("  rank %d: exit %d, %d calls exact, then %s %.3f s after the reset%s\n", r, status,
           st->calls_ok,
           st->final_t > 0 ? chorus_status_string((chorus_status_t)st->final_status) : "-",
           took, ok ? "" : " FAIL (expected peer failed within 1 s)");
    return ok;
}

static int reset_scenario(int nranks, double delay_s)
{
    reset_ctx_t s;
    harness_opts_t opts;
    int status[FAULT_MAX_RANKS], pass;

    memset(&s, 0, sizeof(s));
    s.nranks = nranks;
    s.delay_s = delay_s;
    if (fault_loop_init(&s.loop, CHORUS_INT32, &opts, nranks, RESET_TIMEOUT_S) != 0)
        return 0;
    opts.tick = reset_tick;
    opts.tick_arg = &s;
    printf("%d ranks: reset every connection %.3f s into a loop of int32 allreduces, "
           "CHORUS_TIMEOUT %.1f s\n", nranks, delay_s, RESET_TIMEOUT_S);
    fflush(stdout);
    harness_run(&opts, fault_loop_rank, &s.loop, status, NULL);
    pass = s.reset_t > 0 && s.killed > 0;
    if (!pass)
        printf("  FAIL: %s\n", s.reset_t > 0 ? "ss destroyed no socket" : "never reset");
    for (int r = 0; r < nranks; r++)
        pass &= reset_judge(&s, r, status[r]);
    printf("  %s\n", pass ? "PASS" : "FAIL");
    fault_loop_free(&s.loop);
    return pass;
}

int main(void)
{
    unsigned seed = (unsigned)getpid();
    int pass = 1;

    /* Resets cut TCP connections: the ranks must talk over TCP, not shared memory. */
    setenv("CHORUS_SHM", "0", 1);

    if (geteuid() != 0) {
        printf("SKIP: ss -K needs root (CAP_NET_ADMIN)\n");
        return RESET_SKIP;
    }
    if (!reset_probe()) {
        printf("SKIP: ss -K cannot destroy sockets here (no ss, or a kernel without "
               "CONFIG_INET_DIAG_DESTROY)\n");
        return RESET_SKIP;
    }
    printf("test_reset: seed %u\n", seed);
    srand(seed);
    pass &= reset_scenario(2, (double)(rand() % 300) / 1000.0);
    pass &= reset_scenario(4, (double)(rand() % 300) / 1000.0);
    return pass ? 0 : 1;
}
