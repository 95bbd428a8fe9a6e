/*
 * What one peer may cost a rank over TCP (CHORUS_SHM=0):
 *
 * - tcp_bounds.ring_job_connects_few_peers: in a job that runs only ring
 *   allreduces, a rank opens a handful of connections, not one to every
 *   other rank. Fails while the TCP transport connects a full mesh when a
 *   communicator is created, until connections open on first use.
 * - tcp_bounds.late_root_memory_bounded: a root that sleeps 10 s while the
 *   other ranks post 20,000 reduces of 64 KiB to it completes every call
 *   exactly with a peak resident memory under 256 MiB. Fails while the TCP
 *   transport buffers whatever a peer sends before the receive is posted,
 *   until it bounds what a peer can make it buffer.
 *
 * Each rank writes what it saw into memory shared with this process, which
 * checks it after the ranks have exited.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coll/harness.h"
#include "lib/proc_res.h"

static void *shared_alloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    cr_assert_neq(p, MAP_FAILED, "mmap of %zu shared bytes failed", len);
    memset(p, 0, len);
    return p;
}

/* ---- connections of a ring-only job -------------------------------------- */

#define RING_RANKS 8
#define RING_COUNT 65536
#define RING_MAX_SOCKS 128

typedef struct {
    int nsocks;                 /* -1: could not be read */
    int counted;                /* set once nsocks and socks are written */
    int rc;
    proc_tcp_sock_t socks[RING_MAX_SOCKS];
} ring_seen_t;

/*
 * A ring allreduce, checked exactly; then this rank's TCP sockets are
 * recorded, and it waits (bounded) until every rank has recorded its own,
 * so that no rank closes a connection before its peer has counted it.
 */
static int ring_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    ring_seen_t *seen = arg;
    float *x = malloc(RING_COUNT * sizeof(float));
    chorus_status_t status;
    int rc = 0, all = 0;

    if (x == NULL)
        return 27;
    for (size_t i = 0; i < RING_COUNT; i++)
        x[i] = (float)((rank + 1) * (int)(i % 31 + 1));
    status = chorus_allreduce(x, x, RING_COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    for (size_t i = 0; i < RING_COUNT && status == CHORUS_OK && rc == 0; i++)
        rc = x[i] == (float)(size * (size + 1) / 2 * (int)(i % 31 + 1)) ? 0 : 25;
    free(x);
    if (status != CHORUS_OK)
        rc = 24;
    seen[rank].rc = rc;
    seen[rank].nsocks = proc_tcp_sockets(seen[rank].socks, RING_MAX_SOCKS);
    __atomic_store_n(&seen[rank].counted, 1, __ATOMIC_RELEASE);
    for (int spins = 0; !all && spins < 30000; spins++) {
        all = 1;
        for (int r = 0; r < size; r++)
            all &= __atomic_load_n(&seen[r].counted, __ATOMIC_ACQUIRE);
        if (!all)
            usleep(1000);
    }
    return rc;
}

/* The rank whose established socket is the other end of s, or -1. */
static int ring_peer_of(const ring_seen_t *seen, int self, const proc_tcp_sock_t *s)
{
    for (int r = 0; r < RING_RANKS; r++) {
        for (int j = 0; r != self && j < seen[r].nsocks && j < RING_MAX_SOCKS; j++) {
            const proc_tcp_sock_t *o = &seen[r].socks[j];

            if (o->state == PROC_TCP_ESTABLISHED && o->local_port == s->remote_port &&
                o->remote_port == s->local_port)
                return r;
        }
    }
    return -1;
}

/*
 * The peers a rank exchanges with while its communicator is created: its
 * ring neighbours (the ring allgather) and its recursive-doubling partners
 * rank ^ 1, ^ 2, ^ 4 (the allreduce, at 8 ranks). A ring allreduce needs
 * only the ring neighbours, among them. So 4 of the 7 others at 8 ranks;
 * the bound the issue sets is fewer than size - 1.
 */
static int ring_creation_peer(int self, int peer)
{
    int d = (peer - self + RING_RANKS) % RING_RANKS;

    return d == 1 || d == RING_RANKS - 1 || (self ^ peer) == 1 || (self ^ peer) == 2 ||
           (self ^ peer) == 4;
}

Test(tcp_bounds, ring_job_connects_few_peers, .timeout = 120)
{
    ring_seen_t *seen = shared_alloc(RING_RANKS * sizeof(*seen));
    harness_opts_t opts = {.nranks = RING_RANKS, .timeout_s = 30, .deadline_s = 90,
                           .kill_rank = -1};
    int status[RING_RANKS];

    setenv("CHORUS_SHM", "0", 1);
    setenv("CHORUS_TUNE", "allreduce=ring", 1);
    harness_run(&opts, ring_rank, seen, status, NULL);
    for (int a = 0; a < RING_RANKS; a++) {
        int conns = 0, outside = 0, other = 0;
        char peers[128] = "";

        cr_assert_eq(status[a], 0, "rank %d exited with %d (24: the allreduce failed, 25: "
                     "wrong result, -1: hung)", a, status[a]);
        cr_assert(seen[a].counted && seen[a].nsocks >= 0 && seen[a].nsocks <= RING_MAX_SOCKS,
                  "rank %d did not record its sockets (%d)", a, seen[a].nsocks);
        for (int j = 0; j < seen[a].nsocks; j++) {
            const proc_tcp_sock_t *s = &seen[a].socks[j];
            int peer = s->state == PROC_TCP_ESTABLISHED ? ring_peer_of(seen, a, s) : -1;

            if (peer < 0) {
                other++;    /* listening, or the rendezvous store's */
                continue;
            }
            conns++;
            outside += !ring_creation_peer(a, peer);
            snprintf(peers + strlen(peers), sizeof(peers) - strlen(peers), " %d", peer);
        }
        cr_log_info("rank %d: connected to ranks%s (%d other TCP sockets)", a, peers, other);
        cr_expect_lt(conns, RING_RANKS - 1,
                     "rank %d of a ring-only job holds %d connections to other ranks (to%s): "
                     "one to every other rank; the creation's exchanges and the ring need "
                     "only 4 (TCP connects a full mesh at creation instead of on first use)",
                     a, conns, peers);
        if (outside > 0)
            cr_log_warn("rank %d: %d connections to ranks that neither the creation's "
                        "exchanges nor the ring use", a, outside);
    }
    munmap(seen, RING_RANKS * sizeof(*seen));
}

/* ---- a root that joins late ------------------------------------------------ */

#define FLOW_CALLS 20000
#define FLOW_COUNT 16384            /* 64 KiB of float32 per call */
#define FLOW_SLEEP_S 10
#define FLOW_SAMPLE 1000            /* the root checks every 1000th result */
/*
 * The bound on the root's peak. AddressSanitizer keeps freed memory
 * in its quarantine (256 MiB by default) and adds its shadow, so there the
 * peak measures the sanitizer: it is reported, and only the cap below holds.
 */
#define FLOW_HWM_LIMIT_KIB (256L * 1024)
#if defined(__SANITIZE_ADDRESS__)
#define FLOW_HWM_CHECKED 0
#else
#define FLOW_HWM_CHECKED 1
#endif
/* Past this, the root has failed already: the ranks are stopped to spare the machine. */
#define FLOW_RSS_CAP_KIB (1024L * 1024)
#define FLOW_MAX_RANKS 3

typedef struct {
    int calls_ok;               /* calls that returned CHORUS_OK */
    int first_bad_call;         /* -1: none */
    int first_bad_status;
    int wrong;                  /* root: sampled calls with a wrong result */
    long hwm_kib;               /* VmHWM at the end */
    long hwm_before_kib;        /* root: VmHWM before it slept */
} flow_seen_t;

/* Sums over three ranks stay small integers: exact in float32. */
static float flow_value(int rank, int call, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)call) % 61 + 1));
}

static int flow_check(const float *got, int size, int call)
{
    float scale = (float)(size * (size + 1) / 2);

    for (size_t i = 0; i < FLOW_COUNT; i++) {
        if (got[i] != scale * flow_value(0, call, i)) {
            fprintf(stderr, "root: reduce %d [%zu] = %g, expected %g\n", call, i, got[i],
                    scale * flow_value(0, call, i));
            return 1;
        }
    }
    return 0;
}

static int flow_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    flow_seen_t *seen = &((flow_seen_t *)arg)[rank];
    float *send = malloc(FLOW_COUNT * sizeof(float)), *recv = malloc(FLOW_COUNT * sizeof(float));

    seen->first_bad_call = -1;
    if (send == NULL || recv == NULL)
        return 27;
    if (rank == 0) {
        seen->hwm_before_kib = proc_vm_hwm_kib();
        sleep(FLOW_SLEEP_S);
    }
    for (int call = 0; call < FLOW_CALLS; call++) {
        chorus_status_t status;

        for (size_t i = 0; i < FLOW_COUNT; i++)
            send[i] = flow_value(rank, call, i);
        status = chorus_reduce(send, rank == 0 ? recv : NULL, FLOW_COUNT, CHORUS_FLOAT32,
                               CHORUS_SUM, 0, comm, NULL);
        if (status != CHORUS_OK) {
            seen->first_bad_call = call;
            seen->first_bad_status = status;
            break;
        }
        seen->calls_ok++;
        if (rank == 0 && call % FLOW_SAMPLE == 0)
            seen->wrong += flow_check(recv, size, call);
    }
    seen->hwm_kib = proc_vm_hwm_kib();
    free(send);
    free(recv);
    return seen->calls_ok == FLOW_CALLS && seen->wrong == 0 ? 0 : 24;
}

/* Resident memory (VmRSS) of process pid in KiB, or -1. */
static long flow_rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (kib < 0 && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) != 1)
            kib = -1;
    fclose(f);
    return kib;
}

typedef struct {
    long capped_kib;            /* the root's VmRSS when the ranks were stopped, or 0 */
    double capped_at_s;
} flow_watch_t;

/* Stop every rank once the root holds more than FLOW_RSS_CAP_KIB. */
static void flow_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    flow_watch_t *w = arg;
    long rss = pids[0] > 0 && w->capped_kib == 0 ? flow_rss_kib(pids[0]) : -1;

    if (rss <= FLOW_RSS_CAP_KIB)
        return;
    w->capped_kib = rss;
    w->capped_at_s = elapsed_s;
    for (int r = 0; r < nranks; r++)
        if (pids[r] > 0)
            kill(pids[r], SIGKILL);
}

ParameterizedTestParameters(tcp_bounds, late_root_memory_bounded)
{
    static int ranks[] = {2, 3};
    return cr_make_param_array(int, ranks, 2);
}

ParameterizedTest(int *nranks, tcp_bounds, late_root_memory_bounded, .timeout = 300)
{
    flow_seen_t *seen = shared_alloc(FLOW_MAX_RANKS * sizeof(*seen));
    flow_watch_t watch = {0};
    harness_opts_t opts = {.nranks = *nranks, .timeout_s = 120, .deadline_s = 240,
                           .kill_rank = -1, .tick = flow_tick, .tick_arg = &watch};
    int status[FLOW_MAX_RANKS];

    setenv("CHORUS_SHM", "0", 1);
    harness_run(&opts, flow_rank, seen, status, NULL);
    cr_assert_eq(watch.capped_kib, 0,
                 "%d ranks: the root's resident memory reached %ld MiB %.1f s after the start, "
                 "%s (limit %ld MiB; the ranks were stopped there): TCP buffered what %d other "
                 "ranks sent before the root posted its receives", *nranks,
                 watch.capped_kib / 1024, watch.capped_at_s,
                 watch.capped_at_s < FLOW_SLEEP_S ? "while it slept" : "after it woke",
                 FLOW_HWM_LIMIT_KIB / 1024, *nranks - 1);
    for (int r = 0; r < *nranks; r++) {
        cr_expect_eq(status[r], 0, "rank %d exited with %d (-1: hung)", r, status[r]);
        cr_expect_eq(seen[r].calls_ok, FLOW_CALLS,
                     "rank %d: %d of %d reduces completed; call %d returned %s", r,
                     seen[r].calls_ok, FLOW_CALLS, seen[r].first_bad_call,
                     chorus_status_string((chorus_status_t)seen[r].first_bad_status));
    }
    cr_expect_eq(seen[0].wrong, 0, "the root got %d wrong results in %d sampled reduces",
                 seen[0].wrong, FLOW_CALLS / FLOW_SAMPLE);
    cr_log_info("%d ranks: the root's peak resident memory %ld MiB (%ld MiB before it slept)",
                *nranks, seen[0].hwm_kib / 1024, seen[0].hwm_before_kib / 1024);
    cr_expect(seen[0].hwm_kib > 0 &&
                  (!FLOW_HWM_CHECKED || seen[0].hwm_kib < FLOW_HWM_LIMIT_KIB),
              "%d ranks: the root's peak resident memory reached %ld MiB (limit %ld MiB): "
              "TCP buffered what %d other ranks sent before the root posted its receives",
              *nranks, seen[0].hwm_kib / 1024, FLOW_HWM_LIMIT_KIB / 1024, *nranks - 1);
    munmap(seen, FLOW_MAX_RANKS * sizeof(*seen));
}
