/* Multi-process test harness: see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_MAX_RANKS 64

double harness_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The first port the kernel hands out to connect() and to bind() on port 0. */
static int ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int low = 32768;

    if (f != NULL) {
        if (fscanf(f, "%d", &low) != 1 || low < 2048)
            low = 32768;
        fclose(f);
    }
    return low;
}

static int port_bindable(const char *ip, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), got = -1;

    if (fd >= 0 && inet_pton(AF_INET, ip, &sa.sin_addr) == 1 &&
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        got = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return got;
}

/*
 * A free TCP port on the IPv4 address ip, or -1. It is released before a
 * rank listens on it, so it is drawn at random from below the ephemeral
 * range: a port the kernel gives any connect() in a test running beside
 * this one (as bind to port 0 would return) can be taken in between.
 */
static int free_port_on(const char *ip)
{
    static unsigned seed;
    int low = ephemeral_low(), span = low - 1024 > 20000 ? 20000 : low - 1024;

    if (seed == 0)
        seed = (unsigned)getpid() ^ (unsigned)(harness_now() * 1e6);
    for (int attempt = 0; attempt < 64 && span > 0; attempt++) {
        int port = low - 1 - rand_r(&seed) % span;

        if (port_bindable(ip, port) == port)
            return port;
    }
    return port_bindable(ip, 0);
}

int harness_expect_status(chorus_status_t got, chorus_status_t want, const char *what,
                          int rank)
{
    if (got == want)
        return 0;
    fprintf(stderr, "rank %d: %s returned %s, expected %s\n", rank, what,
            chorus_status_string(got), chorus_status_string(want));
    return 1;
}

int harness_free_port(void)
{
    return free_port_on("127.0.0.1");
}

/*
 * Opt-in emulated nodes: CHORUS_TEST_NETNS lists network namespaces (names
 * under /var/run/netns, or absolute paths), as tests/netns/testbed.sh
 * --harness creates them. Rank r of n runs in namespace r * m / n of the m
 * listed, so consecutive ranks share a node, and listens on that
 * namespace's address; rank 0's address is the rendezvous.
 */
static int netns_enter(const char *list, int index)
{
    char path[256];
    const char *p = list;
    size_t len;
    int fd, rc;

    for (int i = 0; i < index && p != NULL; i++)
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    if (p == NULL)
        return -1;
    len = strcspn(p, ",");
    snprintf(path, sizeof(path), "%s%.*s", *p == '/' ? "" : "/var/run/netns/", (int)len, p);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    rc = fd >= 0 ? setns(fd, CLONE_NEWNET) : -1;
    if (rc != 0)
        fprintf(stderr, "harness: cannot enter network namespace %s: %m\n", path);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int netns_count(const char *list)
{
    int m = 1;

    for (const char *p = list; *p != '\0'; p++)
        m += *p == ',';
    return m;
}

/* The first IPv4 address of an interface that is up and not loopback. */
static int netns_local_ipv4(char *buf, size_t len)
{
    struct ifaddrs *ifs, *i;
    int rc = -1;

    if (getifaddrs(&ifs) != 0)
        return -1;
    for (i = ifs; i != NULL && rc != 0; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
            continue;
        if (inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
                      (socklen_t)len) != NULL)
            rc = 0;
    }
    freeifaddrs(ifs);
    if (rc != 0)
        fprintf(stderr, "harness: no IPv4 address in this network namespace\n");
    return rc;
}

/* The rendezvous in the first namespace; this thread returns to its own. */
static int netns_rendezvous(const char *list, char *addr, size_t len)
{
    char ip[INET_ADDRSTRLEN];
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), port = -1;

    if (self < 0)
        return -1;
    if (netns_enter(list, 0) == 0 && netns_local_ipv4(ip, sizeof(ip)) == 0)
        port = free_port_on(ip);
    if (setns(self, CLONE_NEWNET) != 0)
        port = -1;
    close(self);
    if (port < 0)
        return -1;
    snprintf(addr, len, "%s:%d", ip, port);
    return 0;
}

/* In a forked rank: move to its node and listen there. */
static int netns_join(const char *list, int rank, int nranks)
{
    char ip[INET_ADDRSTRLEN];

    if (netns_enter(list, rank * netns_count(list) / nranks) != 0 ||
        netns_local_ipv4(ip, sizeof(ip)) != 0)
        return -1;
    return setenv("CHORUS_IFADDR", ip, 1);
}

static void make_secret(char *buf, size_t len)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)(harness_now() * 1e6);

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
    double start = harness_now(), ended[HARNESS_MAX_RANKS];
    char addr[64], secret[33];
    const char *netns = getenv("CHORUS_TEST_NETNS");
    int n = opts->nranks, left, failed = 0, killed = 0;

    if (n < 1 || n > HARNESS_MAX_RANKS)
        return -1;
    if (netns != NULL && *netns != '\0') {
        if (netns_rendezvous(netns, addr, sizeof(addr)) != 0)
            return -1;
    } else {
        netns = NULL;
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
    }
    make_secret(secret, sizeof(secret));
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            if (netns != NULL && netns_join(netns, r, n) != 0)
                _exit(102);
            _exit(run_rank(opts, r, addr, secret, fn, arg));
        }
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
                ended[r] = harness_now() - start;
                pids[r] = 0;
                left--;
            }
            continue;
        }
        if (!killed && opts->kill_rank >= 0 && harness_now() - start >= opts->kill_after_s) {
            if (pids[opts->kill_rank] > 0)
                kill(pids[opts->kill_rank], SIGKILL);
            killed = 1;
        }
        if (opts->tick != NULL)
            opts->tick(pids, n, harness_now() - start, opts->tick_arg);
        if (harness_now() - start > opts->deadline_s) {
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
                    elapsed_out[r] = pids[r] > 0 ? harness_now() - start : ended[r];
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
