/*
 * Transport conformance suite. Every test takes a transport name and runs
 * against tl_find(name), so other transports join by adding their name to
 * TL_TEST_TRANSPORTS. Ranks are forked processes, each driving its own
 * context; the parent checks how each one ended. What a transport counts of
 * its flow control (flow_t: eager bytes, rendezvous, credit, bytes held) is
 * checked for each that counts it (tcp, ucx); the TCP transport's own figures
 * (collisions, lanes) where it is tcp. The TCP transport's own features are
 * tcp_* tests; test_tcp_wire.c holds the TCP-only tests against raw sockets.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "config.h"
#include "transports/base/transport.h"
#include "transports/tcp/tcp.h"
#ifdef HAVE_UCX
#include "transports/ucx/ucx.h"
#endif
#include "util/config.h"
#include "util/sha256.h"
#include "util/time.h"

#ifdef HAVE_UCX
/* UCX twice: with UCX's rendezvous and with chorus's (CHORUS_UCX_RNDV). */
#define TL_TEST_TRANSPORTS {{"tcp", ""}, {"ucx", "ucx"}, {"ucx", "chorus"}}
#else
#define TL_TEST_TRANSPORTS {{"tcp"}}
#endif
#define MAX_RANKS 8
#define WAIT_S 20.0
#define BIG (64u << 20)

typedef struct {
    char name[16];
    char rndv[8];               /* CHORUS_UCX_RNDV of every rank; "": unset */
} tl_param_t;

#define TL_PARAMS(test)                                                              \
    ParameterizedTestParameters(transport, test)                                     \
    {                                                                                \
        static tl_param_t names[] = TL_TEST_TRANSPORTS;                              \
        return cr_make_param_array(tl_param_t, names, sizeof(names) / sizeof(names[0])); \
    }

/* In a rank process: report the failed condition and leave the body. */
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "rank %d: check failed at %s:%d: %s\n", env->rank,       \
                    __FILE__, __LINE__, #cond);                                      \
            return 1;                                                                \
        }                                                                            \
    } while (0)

typedef struct {
    pthread_barrier_t barrier;
    unsigned char addrs[MAX_RANKS * TL_ADDR_MAX];
    long board[MAX_RANKS];      /* what ranks tell each other between barriers */
} shared_t;

typedef struct {
    const tl_ops_t *ops;
    tl_ctx_t *ctx;
    int rank;
    int size;
    chorus_status_t connect_status;
    double connect_s;
    long completed;             /* sum of progress() results */
    int streams_use;            /* the bound set through ops->streams; 0: none */
    shared_t *sh;
} rank_env_t;

typedef int (*rank_fn_t)(rank_env_t *env);

typedef struct {
    int size;
    double timeout_s;
    int bad_key_rank;           /* this rank holds another key; -1: none */
    int idle_rank;              /* this rank never calls set_peers; -1: none */
    int killed_rank;            /* this rank is expected to die of SIGKILL; -1: none */
    const char *eager;          /* CHORUS_TCP_EAGER_SIZE of every rank; NULL: the default */
    const char *window;         /* CHORUS_TCP_WINDOW */
    const char *streams;        /* CHORUS_TCP_STREAMS of every rank */
    const char *streams_0;      /* ... but rank 0's */
    int streams_use;            /* every rank bounds the streams it deals to (ops->streams) */
    const char *ifaces;         /* CHORUS_TCP_IFACES of every rank */
    int dead_addr;              /* DEAD_*: every rank publishes its second address so */
} run_opts_t;

/* A published second address that refuses connections, or never answers. */
enum { DEAD_NONE = 0, DEAD_REFUSES, DEAD_SILENT };

static const run_opts_t defaults = {2, 10.0, -1, -1, -1, NULL, NULL, NULL, NULL, 0, NULL,
                                    DEAD_NONE};

/* ---- helpers used inside rank processes ----------------------------------- */

static unsigned char pattern(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 131u + i * 13u + (i >> 8) * 7u + (i >> 16));
}

static void fill(void *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        ((unsigned char *)buf)[i] = pattern(seed, i);
}

static int matches(const void *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        if (((const unsigned char *)buf)[i] != pattern(seed, i)) {
            fprintf(stderr, "byte %zu of %zu differs (seed %u)\n", i, len, seed);
            return 0;
        }
    }
    return 1;
}

static unsigned seed_of(int src, int dst, uint64_t tag)
{
    return (unsigned)(src * 1000 + dst * 100 + (int)tag);
}

/* One progress step, sleeping on the event fd briefly when nothing moved. */
static int step(rank_env_t *env)
{
    int n = env->ops->progress(env->ctx);

    if (n < 0)
        return n;
    env->completed += n;
    if (n == 0) {
        struct pollfd pfd = {.fd = env->ops->event_fd(env->ctx), .events = POLLIN};

        poll(&pfd, 1, 5);
    }
    return 0;
}

/* Progress until all n requests are done; 0 on success, -1 on timeout or fault. */
static int wait_reqs(rank_env_t *env, tl_req_t *reqs, int n, double timeout_s)
{
    double deadline = chorus__now() + timeout_s;

    for (;;) {
        int pending = 0;

        for (int i = 0; i < n; i++)
            pending += !reqs[i].done;
        if (pending == 0)
            return 0;
        if (chorus__now() > deadline || step(env) < 0)
            return -1;
    }
}

static void progress_for(rank_env_t *env, double seconds)
{
    double until = chorus__now() + seconds;

    while (chorus__now() < until)
        step(env);
}

/* Every rank reaches this point (no progress meanwhile: call it with nothing in flight). */
static void sync_ranks(rank_env_t *env)
{
    pthread_barrier_wait(&env->sh->barrier);
}

static int conns(rank_env_t *env)
{
    return env->ops->connections != NULL ? env->ops->connections(env->ctx) : -1;
}

/* The transport's own figures, where it is tcp; NULL for another transport. */
static const tl_tcp_stats_t *tcp_stats(rank_env_t *env)
{
    return strcmp(env->ops->name, "tcp") == 0 ? &env->ctx->stats : NULL;
}

/* What every transport with a window counts of its flow control. */
typedef struct {
    uint64_t eager_bytes;       /* sent against the receiver's window */
    uint64_t rndv_sent;         /* messages sent by rendezvous */
    uint64_t credit_sent;       /* credit returns sent, received */
    uint64_t credit_recv;
    size_t ue_bytes;            /* held for receives not posted yet; its peak */
    size_t ue_peak;
} flow_t;

/* The transport's flow figures as they are now; NULL for one that keeps none. */
static const flow_t *flow(rank_env_t *env)
{
    static flow_t f;

    if (tcp_stats(env) != NULL) {
        const tl_tcp_stats_t *t = tcp_stats(env);

        f = (flow_t){t->eager_bytes, t->rndv_sent, t->credit_sent, t->credit_recv, t->ue_bytes,
                     t->ue_peak};
        return &f;
    }
#ifdef HAVE_UCX
    if (strcmp(env->ops->name, "ucx") == 0) {
        const tl_ucx_stats_t *u = &tl_ucx_of(env->ctx)->stats;

        f = (flow_t){u->eager_bytes, u->rndv_sent, u->credit_sent, u->credit_recv, u->ue_bytes,
                     u->ue_peak};
        return &f;
    }
#endif
    return NULL;
}

/* ---- the rank launcher ----------------------------------------------------- */

/*
 * A loopback port for the DEAD_* cases, open while the rank lives: nothing
 * listens there (a connection is refused), or a listener whose queue is
 * full (the SYN is dropped: the connection never answers).
 */
static int dead_port(int how, char port[8])
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    snprintf(port, 8, "%u", ntohs(sa.sin_port));
    if (how == DEAD_REFUSES)
        return close(fd);
    if (listen(fd, 0) != 0)
        return -1;
    /* Fill the queue that nobody accepts from; later SYNs are dropped. */
    for (int i = 0; i < 4; i++) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

        if (c < 0 || (connect(c, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
                      errno != EINPROGRESS))
            return -1;
    }
    return 0;
}

/* CHORUS_<NAME>_<what> of the transport ops ("CHORUS_TCP_WINDOW"). */
static const char *transport_var(const tl_ops_t *ops, const char *what)
{
    static char var[64];
    size_t n = (size_t)snprintf(var, sizeof(var), "CHORUS_%s_%s", ops->name, what);

    for (size_t i = 0; i < n && i < sizeof(var); i++)
        var[i] = (char)(var[i] >= 'a' && var[i] <= 'z' ? var[i] - 'a' + 'A' : var[i]);
    return var;
}

static int rank_main(const tl_ops_t *ops, const run_opts_t *o, shared_t *sh, int rank,
                     rank_fn_t fn)
{
    static const uint8_t key[] = "chorus-test-job-key-0123456789";
    static const uint8_t other[] = "chorus-test-job-key-0123456788";
    tl_ctx_params_t params = {
        .rank = rank, .size = o->size, .bind_host = "127.0.0.1",
        .auth_key = rank == o->bad_key_rank ? other : key, .auth_key_len = sizeof(key) - 1,
        .timeout_s = o->timeout_s,
    };
    rank_env_t envs = {.ops = ops, .rank = rank, .size = o->size, .sh = sh}, *env = &envs;
    size_t len = 0;
    int rc;

    /* Every transport with a window names its variables alike: CHORUS_<NAME>_WINDOW. */
    if (o->eager != NULL)
        setenv(transport_var(ops, "EAGER_SIZE"), o->eager, 1);
    if (o->window != NULL)
        setenv(transport_var(ops, "WINDOW"), o->window, 1);
    if (o->streams != NULL)
        setenv("CHORUS_TCP_STREAMS", rank == 0 && o->streams_0 ? o->streams_0 : o->streams, 1);
    if (o->ifaces != NULL)
        setenv("CHORUS_TCP_IFACES", o->ifaces, 1);
    CHECK(ops->ctx_create(&params, &env->ctx) == CHORUS_OK);
    /* The bound takes what it is given up to what the rank opens, which it returns. */
    CHECK(ops->streams == NULL ||
          ops->streams(env->ctx, 0) == (o->streams != NULL ? env->ctx->streams : 1));
    if (o->streams_use > 0) {
        CHECK(ops->streams(env->ctx, o->streams_use) == env->ctx->streams);
        env->streams_use = o->streams_use;
    }
    CHECK(ops->get_address(env->ctx, sh->addrs + (size_t)rank * TL_ADDR_MAX, &len) ==
          CHORUS_OK);
    CHECK(len > 0 && len <= TL_ADDR_MAX);
    if (o->dead_addr != DEAD_NONE) {
        tl_tcp_blob_t *blob = (tl_tcp_blob_t *)(sh->addrs + (size_t)rank * TL_ADDR_MAX);

        CHECK(blob->count >= 2);
        CHECK(dead_port(o->dead_addr, blob->addr[1].port) == 0);
    }
    pthread_barrier_wait(&sh->barrier);
    if (rank != o->idle_rank) {
        double t0 = chorus__now();

        env->connect_status = ops->set_peers(env->ctx, sh->addrs);
        env->connect_s = chorus__now() - t0;
    }
    rc = fn(env);
    if (env->ctx != NULL)
        ops->ctx_destroy(env->ctx);
    return rc;
}

/* Ranks leave with _exit, past the leak checker's exit hook: run it here. */
static int rank_exit(int rc)
{
#if defined(__SANITIZE_ADDRESS__)
    if (rc == 0 && __lsan_do_recoverable_leak_check() != 0)
        rc = 2;
#endif
    return rc;
}

static void run_ranks(const tl_param_t *p, const run_opts_t *o, rank_fn_t fn)
{
    const tl_ops_t *ops = tl_find(p->name);
    pthread_barrierattr_t attr;
    pid_t pids[MAX_RANKS];
    shared_t *sh;
    double deadline = chorus__now() + WAIT_S + o->timeout_s;

    cr_assert_not_null(ops, "transport %s not found", p->name);
    if (p->rndv[0] != '\0')
        setenv("CHORUS_UCX_RNDV", p->rndv, 1);
    else
        unsetenv("CHORUS_UCX_RNDV");
    cr_assert(o->size >= 1 && o->size <= MAX_RANKS);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->barrier, &attr, (unsigned)o->size);
    fflush(NULL);
    for (int r = 0; r < o->size; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0, "fork failed");
        if (pids[r] == 0)
            _exit(rank_exit(rank_main(ops, o, sh, r, fn)));
    }
    for (int r = 0; r < o->size; r++) {
        int st = 0;
        pid_t got;

        while ((got = waitpid(pids[r], &st, WNOHANG)) == 0 && chorus__now() < deadline)
            usleep(2000);
        if (got == 0) {
            for (int k = r; k < o->size; k++)
                kill(pids[k], SIGKILL);
            waitpid(pids[r], &st, 0);
            cr_assert_fail("rank %d of %d did not finish in time", r, o->size);
        }
        if (r == o->killed_rank)
            cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "rank %d was not killed", r);
        else
            cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "rank %d of %d failed (status 0x%x)", r, o->size, st);
    }
    pthread_barrier_destroy(&sh->barrier);
    munmap(sh, sizeof(*sh));
}

/* A conformance test: body runs in every rank; the statements after it adjust the options. */
#define TL_TEST(test, body, ...)                                                     \
    TL_PARAMS(test)                                                                  \
    ParameterizedTest(tl_param_t *p, transport, test, .timeout = 120)                \
    {                                                                                \
        run_opts_t o = defaults;                                                     \
        __VA_ARGS__;                                                                 \
        run_ranks(p, &o, body);                                                      \
    }

/* A test of the TCP transport's own features (streams, lanes, interleaving). */
#define TCP_TEST(test, body, ...)                                                    \
    Test(transport, tcp_##test, .timeout = 120)                                      \
    {                                                                                \
        static const tl_param_t tcp = {"tcp"};                                       \
        run_opts_t o = defaults;                                                     \
        __VA_ARGS__;                                                                 \
        run_ranks(&tcp, &o, body);                                                   \
    }

/* ---- mesh setup ------------------------------------------------------------ */

/* Every rank sends three messages to every rank, itself included, and checks all. */
static int body_mesh(rank_env_t *env)
{
    enum { PER = 3 };
    tl_req_t reqs[2 * PER * MAX_RANKS];
    unsigned char *sbuf[PER * MAX_RANKS], *rbuf[PER * MAX_RANKS];
    int n = 0;

    CHECK(env->connect_status == CHORUS_OK);
    for (int peer = 0; peer < env->size; peer++) {
        for (int t = 0; t < PER; t++) {
            int i = peer * PER + t;
            size_t len = 1000u * (size_t)t + 17u * (size_t)env->rank + (size_t)peer;

            sbuf[i] = malloc(len + 1);
            rbuf[i] = malloc(4096);
            fill(sbuf[i], len, seed_of(env->rank, peer, (uint64_t)t));
            CHECK(env->ops->recv_nb(env->ctx, peer, 0, (uint64_t)t, rbuf[i], 4096, &reqs[n++]) == CHORUS_OK);
            CHECK(env->ops->send_nb(env->ctx, peer, 0, (uint64_t)t, sbuf[i], len, &reqs[n++]) == CHORUS_OK);
        }
    }
    CHECK(wait_reqs(env, reqs, n, WAIT_S) == 0);
    for (int peer = 0; peer < env->size; peer++) {
        for (int t = 0; t < PER; t++) {
            int i = peer * PER + t;
            size_t len = 1000u * (size_t)t + 17u * (size_t)peer + (size_t)env->rank;

            CHECK(reqs[2 * i].status == CHORUS_OK && reqs[2 * i + 1].status == CHORUS_OK);
            CHECK(reqs[2 * i].length == len);
            CHECK(matches(rbuf[i], len, seed_of(peer, env->rank, (uint64_t)t)));
            free(sbuf[i]);
            free(rbuf[i]);
        }
    }
    /* Completions made inside the posts are reported by the next progress call. */
    env->completed += env->ops->progress(env->ctx);
    CHECK(env->completed == n);
    return 0;
}

TL_TEST(mesh_1, body_mesh, o.size = 1)

TL_TEST(mesh_2, body_mesh)

TL_TEST(mesh_4, body_mesh, o.size = 4)

/*
 * Buffers of unexpected messages are kept for reuse only up to the window's
 * bytes: four messages of 4 MiB to this rank itself, received after they
 * came, leave at most 1 MiB allocated.
 */
static int body_cache_bound(rank_env_t *env)
{
    const size_t len = 4u << 20;
    unsigned char *buf = malloc(len);
    tl_req_t r[2];

    CHECK(buf != NULL);
    fill(buf, len, 3);
    for (int i = 0; i < 4; i++) {
        CHECK(env->ops->send_nb(env->ctx, 0, 0, 1, buf, len, &r[0]) == CHORUS_OK);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 1, buf, len, &r[1]) == CHORUS_OK);
        CHECK(wait_reqs(env, r, 2, WAIT_S) == 0 && r[1].status == CHORUS_OK);
        CHECK(r[1].length == len && matches(buf, len, 3));
    }
    CHECK(flow(env) == NULL || flow(env)->ue_bytes <= (1u << 20));
    free(buf);
    return 0;
}

TL_TEST(cache_bound, body_cache_bound, o.size = 1, o.window = "1M")

/* ---- ping-pong ------------------------------------------------------------- */

static int body_ping_pong(rank_env_t *env)
{
    static const size_t sizes[] = {0, 1, 8, 4096, 65537, 1u << 20};
    const int iters = 50;
    unsigned char *sbuf = malloc(1u << 20), *rbuf = malloc(1u << 20);
    int other = 1 - env->rank;

    CHECK(env->connect_status == CHORUS_OK);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (int it = 0; it < iters; it++) {
            uint64_t tag = (uint64_t)(s * 1000 + (size_t)it);
            tl_req_t req;

            if (env->rank == 0) {
                fill(sbuf, sizes[s], (unsigned)tag);
                CHECK(env->ops->send_nb(env->ctx, 1, 0, tag, sbuf, sizes[s], &req) == CHORUS_OK);
                CHECK(wait_reqs(env, &req, 1, WAIT_S) == 0 && req.status == CHORUS_OK);
            }
            CHECK(env->ops->recv_nb(env->ctx, other, 0, tag, rbuf, 1u << 20, &req) == CHORUS_OK);
            CHECK(wait_reqs(env, &req, 1, WAIT_S) == 0 && req.status == CHORUS_OK);
            CHECK(req.length == sizes[s] && matches(rbuf, sizes[s], (unsigned)tag));
            if (env->rank == 1) {
                CHECK(env->ops->send_nb(env->ctx, 0, 0, tag, rbuf, sizes[s], &req) == CHORUS_OK);
                CHECK(wait_reqs(env, &req, 1, WAIT_S) == 0 && req.status == CHORUS_OK);
            }
        }
    }
    free(sbuf);
    free(rbuf);
    return 0;
}

TL_TEST(ping_pong, body_ping_pong)

/* ---- matching order -------------------------------------------------------- */

enum { NTAGS = 64, SAME_TAG = 1000, GO_TAG = 9999, MARK_TAG = 8888 };

static size_t tag_len(int t)
{
    return (size_t)((t * 37) % 1000);
}

/*
 * Rank 1 posts receives for tags in the reverse order of the sends, plus three
 * with one tag, and only then lets rank 0 send: every message meets a posted
 * receive that is not first in the queue.
 */
static int body_tags_reverse(rank_env_t *env)
{
    static unsigned char bufs[NTAGS + 3][1000];
    tl_req_t reqs[NTAGS + 3], go;

    CHECK(env->connect_status == CHORUS_OK);
    if (env->rank == 0) {
        CHECK(env->ops->recv_nb(env->ctx, 1, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
        CHECK(wait_reqs(env, &go, 1, WAIT_S) == 0 && go.status == CHORUS_OK);
        for (int t = 0; t < NTAGS; t++) {
            fill(bufs[t], tag_len(t), (unsigned)t);
            CHECK(env->ops->send_nb(env->ctx, 1, 0, (uint64_t)t, bufs[t], tag_len(t),
                                    &reqs[t]) == CHORUS_OK);
        }
        for (int k = 0; k < 3; k++) {
            fill(bufs[NTAGS + k], 100u + (size_t)k, 500u + (unsigned)k);
            CHECK(env->ops->send_nb(env->ctx, 1, 0, SAME_TAG, bufs[NTAGS + k], 100u + (size_t)k, &reqs[NTAGS + k]) == CHORUS_OK);
        }
        CHECK(wait_reqs(env, reqs, NTAGS + 3, WAIT_S) == 0);
        for (int i = 0; i < NTAGS + 3; i++)
            CHECK(reqs[i].status == CHORUS_OK);
        return 0;
    }
    for (int t = NTAGS - 1; t >= 0; t--)
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, (uint64_t)t, bufs[t], 1000, &reqs[t]) ==
              CHORUS_OK);
    for (int k = 0; k < 3; k++)
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, SAME_TAG, bufs[NTAGS + k], 1000, &reqs[NTAGS + k]) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, 0, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
    CHECK(wait_reqs(env, reqs, NTAGS + 3, WAIT_S) == 0);
    for (int t = 0; t < NTAGS; t++) {
        CHECK(reqs[t].status == CHORUS_OK && reqs[t].length == tag_len(t));
        CHECK(matches(bufs[t], tag_len(t), (unsigned)t));
    }
    for (int k = 0; k < 3; k++) {
        CHECK(reqs[NTAGS + k].status == CHORUS_OK && reqs[NTAGS + k].length == 100u + (size_t)k);
        CHECK(matches(bufs[NTAGS + k], 100u + (size_t)k, 500u + (unsigned)k));
    }
    return 0;
}

TL_TEST(tags_reverse, body_tags_reverse)

/*
 * Rank 0 sends everything, then a marker; once rank 1 has the marker, all came
 * unexpected. The messages are small enough to go eagerly, so each receive
 * completes inside its post.
 */
static int body_unexpected(rank_env_t *env)
{
    static const uint64_t tags[] = {1, 2, 3, 1, 4};
    static const size_t lens[] = {100, 0, 200000, 50, 3};
    enum { N = 5 };
    unsigned char *bufs[N];
    tl_req_t reqs[N], mark;

    CHECK(env->connect_status == CHORUS_OK);
    for (int i = 0; i < N; i++) {
        bufs[i] = malloc(lens[i] + 1);
        fill(bufs[i], lens[i], 70u + (unsigned)i);
    }
    if (env->rank == 0) {
        for (int i = 0; i < N; i++)
            CHECK(env->ops->send_nb(env->ctx, 1, 0, tags[i], bufs[i], lens[i], &reqs[i]) ==
                  CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, MARK_TAG, NULL, 0, &mark) == CHORUS_OK);
        CHECK(wait_reqs(env, reqs, N, WAIT_S) == 0 && wait_reqs(env, &mark, 1, WAIT_S) == 0);
        for (int i = 0; i < N; i++)
            CHECK(reqs[i].status == CHORUS_OK && reqs[i].length == lens[i]);
    } else {
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, MARK_TAG, NULL, 0, &mark) == CHORUS_OK);
        CHECK(wait_reqs(env, &mark, 1, WAIT_S) == 0 && mark.status == CHORUS_OK);
        /* Posted in another order than sent; each completes inside the post. */
        for (int i = N - 1; i >= 0; i--) {
            if (i == 0 || i == 3)
                continue;
            memset(bufs[i], 0, lens[i] + 1);
            CHECK(env->ops->recv_nb(env->ctx, 0, 0, tags[i], bufs[i], lens[i] + 1, &reqs[i]) ==
                  CHORUS_OK);
            CHECK(reqs[i].done && reqs[i].status == CHORUS_OK && reqs[i].length == lens[i]);
            CHECK(matches(bufs[i], lens[i], 70u + (unsigned)i));
        }
        /* Same tag: the first receive gets the first message. */
        memset(bufs[0], 0, 101);
        memset(bufs[3], 0, 51);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 1, bufs[0], 101, &reqs[0]) == CHORUS_OK);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 1, bufs[3], 51, &reqs[3]) == CHORUS_OK);
        CHECK(reqs[0].done && reqs[0].length == 100 && matches(bufs[0], 100, 70));
        CHECK(reqs[3].done && reqs[3].length == 50 && matches(bufs[3], 50, 73));
        CHECK(env->ops->progress(env->ctx) == N);
    }
    for (int i = 0; i < N; i++)
        free(bufs[i]);
    return 0;
}

TL_TEST(unexpected, body_unexpected)

/* Zero-length messages, posted first and unexpected; the buffer stays untouched. */
static int body_zero_length(rank_env_t *env)
{
    unsigned char sentinel[16];
    tl_req_t reqs[3], mark;
    int other = 1 - env->rank;

    CHECK(env->connect_status == CHORUS_OK);
    memset(sentinel, 0xa5, sizeof(sentinel));
    CHECK(env->ops->recv_nb(env->ctx, other, 0, 10, NULL, 0, &reqs[0]) == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, other, 0, 11, sentinel, sizeof(sentinel), &reqs[1]) ==
          CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, other, 0, 10, NULL, 0, &reqs[2]) == CHORUS_OK);
    CHECK(wait_reqs(env, reqs, 1, WAIT_S) == 0 && wait_reqs(env, &reqs[2], 1, WAIT_S) == 0);
    CHECK(env->ops->send_nb(env->ctx, other, 0, 11, sentinel, 0, &reqs[2]) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, other, 0, 12, NULL, 0, &mark) == CHORUS_OK);
    CHECK(wait_reqs(env, reqs, 3, WAIT_S) == 0 && wait_reqs(env, &mark, 1, WAIT_S) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(reqs[i].status == CHORUS_OK && reqs[i].length == 0);
    for (size_t i = 0; i < sizeof(sentinel); i++)
        CHECK(sentinel[i] == 0xa5);
    /* Tag 12 arrived before its receive: an unexpected zero-length message. */
    progress_for(env, 0.05);
    CHECK(env->ops->recv_nb(env->ctx, other, 0, 12, sentinel, 4, &reqs[0]) == CHORUS_OK);
    CHECK(wait_reqs(env, reqs, 1, WAIT_S) == 0);
    CHECK(reqs[0].status == CHORUS_OK && reqs[0].length == 0 && sentinel[0] == 0xa5);
    return 0;
}

TL_TEST(zero_length, body_zero_length)

/*
 * 64 MiB both ways at once. Rank 0 posts its receive first; rank 1 lets part
 * of the message arrive unexpected before posting.
 */
static int body_big(rank_env_t *env)
{
    unsigned char *sbuf = malloc(BIG), *rbuf = malloc(BIG);
    int other = 1 - env->rank;
    tl_req_t reqs[2];

    CHECK(env->connect_status == CHORUS_OK && sbuf != NULL && rbuf != NULL);
    fill(sbuf, BIG, 40u + (unsigned)env->rank);
    memset(rbuf, 0, BIG);
    if (env->rank == 0)
        CHECK(env->ops->recv_nb(env->ctx, other, 0, 7, rbuf, BIG, &reqs[0]) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, other, 0, 7, sbuf, BIG, &reqs[1]) == CHORUS_OK);
    if (env->rank == 1) {
        progress_for(env, 0.02);
        CHECK(env->ops->recv_nb(env->ctx, other, 0, 7, rbuf, BIG, &reqs[0]) == CHORUS_OK);
    }
    CHECK(wait_reqs(env, reqs, 2, WAIT_S) == 0);
    CHECK(reqs[0].status == CHORUS_OK && reqs[1].status == CHORUS_OK);
    CHECK(reqs[0].length == BIG);
    CHECK(matches(rbuf, BIG, 40u + (unsigned)other));
    free(sbuf);
    free(rbuf);
    return 0;
}

TL_TEST(big_64mib, body_big)

/* ---- truncation ------------------------------------------------------------ */

/* Oversized messages fail their receive; the messages after them still arrive intact. */
static int body_truncated(rank_env_t *env)
{
    unsigned char big[100], small[10];
    tl_req_t r[4], go, mark;

    CHECK(env->connect_status == CHORUS_OK);
    if (env->rank == 0) {
        fill(big, sizeof(big), 1);
        fill(small, sizeof(small), 2);
        CHECK(env->ops->recv_nb(env->ctx, 1, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
        CHECK(wait_reqs(env, &go, 1, WAIT_S) == 0);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, 5, big, sizeof(big), &r[0]) == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, 6, small, sizeof(small), &r[1]) == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, 7, big, sizeof(big), &r[2]) == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, 8, small, sizeof(small), &r[3]) == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, MARK_TAG, NULL, 0, &mark) == CHORUS_OK);
        CHECK(wait_reqs(env, r, 4, WAIT_S) == 0 && wait_reqs(env, &mark, 1, WAIT_S) == 0);
        for (int i = 0; i < 4; i++)
            CHECK(r[i].status == CHORUS_OK);
        return 0;
    }
    memset(big, 0, sizeof(big));
    memset(small, 0, sizeof(small));
    /* Tags 5 and 6 meet posted receives. */
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 5, big, 50, &r[0]) == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 6, small, sizeof(small), &r[1]) == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, MARK_TAG, NULL, 0, &mark) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, 0, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
    CHECK(wait_reqs(env, r, 2, WAIT_S) == 0 && wait_reqs(env, &mark, 1, WAIT_S) == 0);
    CHECK(r[0].status == CHORUS_ERR_TRUNCATED);
    CHECK(r[1].status == CHORUS_OK && r[1].length == 10 && matches(small, 10, 2));
    for (size_t i = 0; i < sizeof(big); i++)
        CHECK(big[i] == 0);
    /* Tags 7 and 8 arrived before their receives. */
    memset(small, 0, sizeof(small));
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 7, big, 99, &r[2]) == CHORUS_OK);
    CHECK(r[2].done && r[2].status == CHORUS_ERR_TRUNCATED);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 8, small, sizeof(small), &r[3]) == CHORUS_OK);
    CHECK(r[3].done && r[3].status == CHORUS_OK && matches(small, 10, 2));
    return 0;
}

TL_TEST(truncated, body_truncated)

/* ---- failures -------------------------------------------------------------- */

/*
 * Rank 1 dies by SIGKILL in the middle of a 64 MiB send to rank 0. Rank 0's
 * pending receives (one half filled, one never matched) and its own large
 * send fail with PEER_FAILED within a second; rank 2 keeps working with it.
 */
static int body_peer_killed(rank_env_t *env)
{
    unsigned char *big = calloc(1, BIG), *big2 = calloc(1, BIG);
    tl_req_t alive, lost[3], late[2], ping;
    double t0;

    CHECK(env->connect_status == CHORUS_OK && big != NULL && big2 != NULL);
    if (env->rank == 1) {
        CHECK(env->ops->send_nb(env->ctx, 0, 0, 0, NULL, 0, &alive) == CHORUS_OK);
        CHECK(wait_reqs(env, &alive, 1, WAIT_S) == 0);
        /* Rank 0 is not reading: this fills the socket buffers and stays pending. */
        CHECK(env->ops->send_nb(env->ctx, 0, 0, 4, big, BIG, &lost[0]) == CHORUS_OK);
        progress_for(env, 0.1);
        CHECK(!lost[0].done);
        kill(getpid(), SIGKILL);
        pause();
    }
    if (env->rank == 2) {
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 5, NULL, 0, &ping) == CHORUS_OK);
        CHECK(wait_reqs(env, &ping, 1, WAIT_S) == 0 && ping.status == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 0, 0, 6, NULL, 0, &ping) == CHORUS_OK);
        CHECK(wait_reqs(env, &ping, 1, WAIT_S) == 0 && ping.status == CHORUS_OK);
        free(big);
        free(big2);
        return 0;
    }
    CHECK(env->ops->recv_nb(env->ctx, 1, 0, 0, NULL, 0, &alive) == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 1, 0, 1, big, 16, &lost[0]) == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 1, 0, 4, big2, BIG, &lost[2]) == CHORUS_OK);
    CHECK(wait_reqs(env, &alive, 1, WAIT_S) == 0 && alive.status == CHORUS_OK);
    usleep(300 * 1000);
    t0 = chorus__now();
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 2, big, BIG, &lost[1]) == CHORUS_OK);
    CHECK(wait_reqs(env, lost, 3, 2.0) == 0);
    CHECK(chorus__now() - t0 < 1.0);
    for (int i = 0; i < 3; i++)
        CHECK(lost[i].status == CHORUS_ERR_PEER_FAILED);
    /* Later posts to the lost peer fail at once, the request too. */
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 3, big, 1, &late[0]) == CHORUS_ERR_PEER_FAILED);
    CHECK(env->ops->recv_nb(env->ctx, 1, 0, 3, big, 1, &late[1]) == CHORUS_ERR_PEER_FAILED);
    CHECK(late[0].done && late[0].status == CHORUS_ERR_PEER_FAILED);
    CHECK(late[1].done && late[1].status == CHORUS_ERR_PEER_FAILED);
    /* The other peer is unaffected. */
    CHECK(env->ops->send_nb(env->ctx, 2, 0, 5, NULL, 0, &ping) == CHORUS_OK);
    CHECK(wait_reqs(env, &ping, 1, WAIT_S) == 0 && ping.status == CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 2, 0, 6, NULL, 0, &ping) == CHORUS_OK);
    CHECK(wait_reqs(env, &ping, 1, WAIT_S) == 0 && ping.status == CHORUS_OK);
    free(big);
    free(big2);
    return 0;
}

TL_TEST(peer_killed, body_peer_killed, o.size = 3, o.killed_rank = 1)

/* A zero-byte message each way: the pair's connection is open afterwards. */
static int exchange(rank_env_t *env, int other)
{
    tl_req_t r[2];

    CHECK(env->ops->recv_nb(env->ctx, other, 0, 77, NULL, 0, &r[0]) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, other, 0, 77, NULL, 0, &r[1]) == CHORUS_OK);
    CHECK(wait_reqs(env, r, 2, WAIT_S) == 0);
    CHECK(r[0].status == CHORUS_OK && r[1].status == CHORUS_OK);
    return 0;
}

/* fail_all fails local requests with its status and makes the peer see a failure. */
static int body_fail_all(rank_env_t *env)
{
    tl_req_t r, late;

    CHECK(env->connect_status == CHORUS_OK);
    CHECK(exchange(env, 1 - env->rank) == 0);
    CHECK(env->ops->recv_nb(env->ctx, 1 - env->rank, 0, 1, NULL, 0, &r) == CHORUS_OK);
    if (env->rank == 1) {
        CHECK(wait_reqs(env, &r, 1, 2.0) == 0 && r.status == CHORUS_ERR_PEER_FAILED);
        return 0;
    }
    progress_for(env, 0.05);
    CHECK(!r.done);
    env->ops->fail_all(env->ctx, CHORUS_ERR_ABORTED);
    CHECK(r.done && r.status == CHORUS_ERR_ABORTED);
    CHECK(env->ops->progress(env->ctx) == 1);
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 2, NULL, 0, &late) == CHORUS_ERR_ABORTED);
    CHECK(late.done && late.status == CHORUS_ERR_ABORTED);
    CHECK(conns(env) == 0);
    return 0;
}

TL_TEST(fail_all, body_fail_all)

/* Destroying a context completes its pending requests with ABORTED. */
static int body_destroy_pending(rank_env_t *env)
{
    unsigned char *big = calloc(1, BIG);
    tl_req_t r[2];

    CHECK(env->connect_status == CHORUS_OK && big != NULL);
    CHECK(exchange(env, 1 - env->rank) == 0);
    CHECK(env->ops->recv_nb(env->ctx, 1 - env->rank, 0, 1, NULL, 0, &r[0]) == CHORUS_OK);
    if (env->rank == 1) {
        /* Not reading yet keeps rank 0's large send pending until it destroys. */
        usleep(300 * 1000);
        CHECK(wait_reqs(env, r, 1, 2.0) == 0 && r[0].status == CHORUS_ERR_PEER_FAILED);
        /* The 64 MiB message never arrived whole: it is not delivered. */
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 2, big, BIG, &r[1]) == CHORUS_ERR_PEER_FAILED);
        CHECK(r[1].done && r[1].status == CHORUS_ERR_PEER_FAILED);
        free(big);
        return 0;
    }
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 2, big, BIG, &r[1]) == CHORUS_OK);
    progress_for(env, 0.05);
    CHECK(!r[0].done && !r[1].done);
    env->ops->ctx_destroy(env->ctx);
    env->ctx = NULL;
    CHECK(r[0].done && r[0].status == CHORUS_ERR_ABORTED);
    CHECK(r[1].done && r[1].status == CHORUS_ERR_ABORTED);
    free(big);
    return 0;
}

TL_TEST(destroy_pending, body_destroy_pending)

/*
 * Rank 1 dies after set_peers, before anyone connects. Rank 0's first send to
 * it fails with PEER_FAILED at once (its listener is gone: the connect is
 * refused), far before the deadline; its receive from rank 1 fails with it,
 * and rank 2 keeps working with rank 0.
 */
static int body_killed_before_connect(rank_env_t *env)
{
    tl_req_t r[3];
    double t0;
    chorus_status_t st;

    CHECK(env->connect_status == CHORUS_OK);
    sync_ranks(env);
    if (env->rank == 1) {
        kill(getpid(), SIGKILL);
        pause();
    }
    if (env->rank == 2) {
        /* Stay until rank 0 has counted its connections. */
        CHECK(exchange(env, 0) == 0);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 3, NULL, 0, &r[0]) == CHORUS_OK);
        CHECK(wait_reqs(env, r, 1, WAIT_S) == 0 && r[0].status == CHORUS_OK);
        return 0;
    }
    usleep(300 * 1000);
    CHECK(env->ops->recv_nb(env->ctx, 1, 0, 1, NULL, 0, &r[0]) == CHORUS_OK);
    t0 = chorus__now();
    st = env->ops->send_nb(env->ctx, 1, 0, 1, "x", 1, &r[1]);
    CHECK(st == CHORUS_OK || st == CHORUS_ERR_PEER_FAILED);
    CHECK(wait_reqs(env, r, 2, 5.0) == 0);
    CHECK(chorus__now() - t0 < 1.0);
    CHECK(r[0].status == CHORUS_ERR_PEER_FAILED && r[1].status == CHORUS_ERR_PEER_FAILED);
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 2, NULL, 0, &r[2]) == CHORUS_ERR_PEER_FAILED);
    CHECK(exchange(env, 2) == 0);
    CHECK(conns(env) == 1);
    CHECK(env->ops->send_nb(env->ctx, 2, 0, 3, NULL, 0, &r[2]) == CHORUS_OK);
    CHECK(wait_reqs(env, &r[2], 1, WAIT_S) == 0 && r[2].status == CHORUS_OK);
    return 0;
}

TL_TEST(killed_before_connect, body_killed_before_connect, o.size = 3, o.killed_rank = 1)

/* ---- connections on first use --------------------------------------------- */

/*
 * Of six ranks only 0 and 3 talk: they hold one connection each, the others
 * none, although they post receives from every other rank (a receive never
 * opens a connection: its peer may never send).
 */
static int body_first_use_pair(rank_env_t *env)
{
    int talks = env->rank == 0 || env->rank == 3;
    static tl_req_t idle[MAX_RANKS];    /* still posted when the context is destroyed */

    CHECK(env->connect_status == CHORUS_OK);
    CHECK(conns(env) == 0);
    for (int peer = 0; peer < env->size && !talks; peer++)
        CHECK(env->ops->recv_nb(env->ctx, peer, 0, 99, NULL, 0, &idle[peer]) == CHORUS_OK);
    if (talks)
        CHECK(exchange(env, 3 - env->rank) == 0);
    else
        progress_for(env, 0.2);
    sync_ranks(env);
    CHECK(conns(env) == (talks ? 1 : 0));
    sync_ranks(env);
    return 0;
}

TL_TEST(first_use_pair, body_first_use_pair, o.size = 6)

/* A ring opens the two connections it uses, whatever the number of ranks. */
static int body_first_use_ring(rank_env_t *env)
{
    int right = (env->rank + 1) % env->size, left = (env->rank + env->size - 1) % env->size;
    unsigned char out[64], in[64];
    tl_req_t r[2];

    CHECK(env->connect_status == CHORUS_OK);
    fill(out, sizeof(out), seed_of(env->rank, right, 3));
    CHECK(env->ops->recv_nb(env->ctx, left, 0, 3, in, sizeof(in), &r[0]) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, right, 0, 3, out, sizeof(out), &r[1]) == CHORUS_OK);
    CHECK(wait_reqs(env, r, 2, WAIT_S) == 0);
    CHECK(r[0].status == CHORUS_OK && r[1].status == CHORUS_OK);
    CHECK(matches(in, sizeof(in), seed_of(left, env->rank, 3)));
    sync_ranks(env);
    CHECK(conns(env) == 2);
    sync_ranks(env);
    return 0;
}

TL_TEST(first_use_ring, body_first_use_ring, o.size = 6)

enum { QUEUED = 6 };

/* Lengths around the eager size (default 256 KiB): eager, rendezvous, empty. */
static size_t queued_len(int i)
{
    static const size_t lens[QUEUED] = {10, 300000, 0, 5000, 1u << 20, 77};

    return lens[i];
}

/* Post QUEUED sends to `to` with one tag, and the matching receives from it. */
static int post_queued(rank_env_t *env, int to, unsigned char **sbuf, unsigned char **rbuf,
                       tl_req_t *reqs)
{
    for (int i = 0; i < QUEUED; i++) {
        sbuf[i] = malloc(queued_len(i) + 1);
        rbuf[i] = malloc((1u << 20) + 1);
        CHECK(sbuf[i] != NULL && rbuf[i] != NULL);
        fill(sbuf[i], queued_len(i), seed_of(env->rank, to, (uint64_t)i));
        CHECK(env->ops->send_nb(env->ctx, to, 0, 5, sbuf[i], queued_len(i), &reqs[i]) ==
              CHORUS_OK);
    }
    return 0;
}

/* Receive the QUEUED messages of `from`, in order, and check every byte. */
static int check_queued(rank_env_t *env, int from, unsigned char **sbuf, unsigned char **rbuf,
                        tl_req_t *sends)
{
    tl_req_t reqs[QUEUED];

    for (int i = 0; i < QUEUED; i++)
        CHECK(env->ops->recv_nb(env->ctx, from, 0, 5, rbuf[i], (1u << 20) + 1, &reqs[i]) ==
              CHORUS_OK);
    CHECK(wait_reqs(env, reqs, QUEUED, WAIT_S) == 0);
    CHECK(sends == NULL || wait_reqs(env, sends, QUEUED, WAIT_S) == 0);
    for (int i = 0; i < QUEUED; i++) {
        CHECK(reqs[i].status == CHORUS_OK && reqs[i].length == queued_len(i));
        CHECK(matches(rbuf[i], queued_len(i), seed_of(from, env->rank, (uint64_t)i)));
        CHECK(sends == NULL || sends[i].status == CHORUS_OK);
        free(sbuf[i]);
        free(rbuf[i]);
    }
    return 0;
}

/*
 * Both ranks start connecting to each other before either runs progress, so
 * both attempts exist: exactly one connection survives on both sides, and
 * what each queued meanwhile (one tag: order matters) arrives whole and in
 * order. Between them the two ranks resolved at least one collision.
 */
static int body_collision(rank_env_t *env)
{
    unsigned char *sbuf[QUEUED], *rbuf[QUEUED];
    tl_req_t sends[QUEUED];
    int other = 1 - env->rank;

    CHECK(env->connect_status == CHORUS_OK);
    if (env->rank == 0)
        CHECK(post_queued(env, other, sbuf, rbuf, sends) == 0);
    sync_ranks(env);
    if (env->rank == 1)
        CHECK(post_queued(env, other, sbuf, rbuf, sends) == 0);
    CHECK(check_queued(env, other, sbuf, rbuf, sends) == 0);
    CHECK(conns(env) == 1);
    if (tcp_stats(env) != NULL)
        env->sh->board[env->rank] = (long)tcp_stats(env)->collisions;
    sync_ranks(env);
    CHECK(tcp_stats(env) == NULL || env->sh->board[0] + env->sh->board[1] >= 1);
    CHECK(conns(env) == 1);
    sync_ranks(env);
    return 0;
}

TL_TEST(collision, body_collision)

/*
 * Rank 0 posts its sends right after set_peers while rank 1 is asleep: they
 * wait for the connection and then leave on it in order.
 */
static int body_queued_before_connect(rank_env_t *env)
{
    unsigned char *sbuf[QUEUED], *rbuf[QUEUED];
    tl_req_t sends[QUEUED];

    CHECK(env->connect_status == CHORUS_OK);
    if (env->rank == 0) {
        CHECK(post_queued(env, 1, sbuf, rbuf, sends) == 0);
        progress_for(env, 0.2);
        CHECK(!sends[0].done);
        CHECK(wait_reqs(env, sends, QUEUED, WAIT_S) == 0);
        /* They waited for the receiver's window: only those above the eager size are announced. */
        CHECK(flow(env) == NULL || flow(env)->rndv_sent == 2);
        for (int i = 0; i < QUEUED; i++) {
            CHECK(sends[i].status == CHORUS_OK);
            free(sbuf[i]);
            free(rbuf[i]);
        }
        return 0;
    }
    usleep(400 * 1000);
    for (int i = 0; i < QUEUED; i++) {
        sbuf[i] = NULL;
        rbuf[i] = malloc((1u << 20) + 1);
    }
    return check_queued(env, 0, sbuf, rbuf, NULL);
}

TL_TEST(queued_before_connect, body_queued_before_connect)

/* ---- flow control ------------------------------------------------------------ */

enum { FLOOD = 256, FLOOD_LEN = 64 << 10, FLOOD_WINDOW = 1 << 20 };

/*
 * Rank 0 sends 16 MiB in 64 KiB messages to rank 1, which posts nothing for
 * a second: rank 1 holds at most its window of them (plus the small records
 * of announced ones), the eager sends complete and the rest wait. Then rank 1
 * posts its receives and gets every byte, in order.
 */
static int body_window_bound(rank_env_t *env)
{
    unsigned char *buf = malloc((size_t)FLOOD * FLOOD_LEN);
    tl_req_t *reqs = calloc(FLOOD, sizeof(*reqs));
    const flow_t *st;
    int done = 0;

    CHECK(env->connect_status == CHORUS_OK && buf != NULL && reqs != NULL);
    if (env->rank == 0) {
        for (int i = 0; i < FLOOD; i++) {
            fill(buf + (size_t)i * FLOOD_LEN, FLOOD_LEN, (unsigned)i);
            CHECK(env->ops->send_nb(env->ctx, 1, 0, (uint64_t)(i % 3), buf + (size_t)i *
                                    FLOOD_LEN, FLOOD_LEN, &reqs[i]) == CHORUS_OK);
        }
        progress_for(env, 1.0);
        for (int i = 0; i < FLOOD; i++)
            done += reqs[i].done;
        CHECK(done > 0 && (size_t)done * FLOOD_LEN <= FLOOD_WINDOW);
        st = flow(env);
        CHECK(st == NULL || (st->rndv_sent >= FLOOD - FLOOD_WINDOW / FLOOD_LEN &&
                             st->eager_bytes <= FLOOD_WINDOW));
        sync_ranks(env);
        CHECK(wait_reqs(env, reqs, FLOOD, WAIT_S) == 0);
        free(buf);
        free(reqs);
        return 0;
    }
    memset(buf, 0, (size_t)FLOOD * FLOOD_LEN);
    progress_for(env, 1.0);
    st = flow(env);
    CHECK(st == NULL || st->ue_peak <= FLOOD_WINDOW + (64 << 10));
    sync_ranks(env);
    for (int i = 0; i < FLOOD; i++)
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, (uint64_t)(i % 3), buf + (size_t)i * FLOOD_LEN,
                                FLOOD_LEN, &reqs[i]) == CHORUS_OK);
    CHECK(wait_reqs(env, reqs, FLOOD, WAIT_S) == 0);
    for (int i = 0; i < FLOOD; i++) {
        CHECK(reqs[i].status == CHORUS_OK && reqs[i].length == FLOOD_LEN);
        CHECK(matches(buf + (size_t)i * FLOOD_LEN, FLOOD_LEN, (unsigned)i));
    }
    /* Consuming may fill the reuse cache, which is bounded by the window too. */
    st = flow(env);
    CHECK(st == NULL || st->ue_peak <= 2 * FLOOD_WINDOW + (64 << 10));
    free(buf);
    free(reqs);
    return 0;
}

TL_TEST(window_bound, body_window_bound, o.window = "1M", o.eager = "64K")

/* Message lengths of body_trunc_modes: eager (100 B) and rendezvous (100 KiB) with a 4 KiB eager size. */
#define TM_SMALL 100u
#define TM_LARGE (100u << 10)

/* Tag t: its length, and the capacity of its receive (too small: truncated; larger: short). */
static size_t tm_len(int t)
{
    return (t % 2) ? TM_LARGE : TM_SMALL;
}

static size_t tm_cap(int t)
{
    return ((t / 2) % 2) ? 2 * tm_len(t) : tm_len(t) / 2;
}

/*
 * Truncated and short receives of eager and rendezvous messages, posted
 * before (tags 0-3) and after (tags 4-7) the messages arrive. Truncation
 * fails the receive and leaves the framing intact; a shorter message
 * completes with its length; every send completes.
 */
static int body_trunc_modes(rank_env_t *env)
{
    static unsigned char sbuf[TM_LARGE], rbuf[8][2 * TM_LARGE];
    tl_req_t r[8], go, mark, done_all[9];

    CHECK(env->connect_status == CHORUS_OK);
    fill(sbuf, sizeof(sbuf), 9);
    if (env->rank == 0) {
        CHECK(env->ops->recv_nb(env->ctx, 1, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
        CHECK(wait_reqs(env, &go, 1, WAIT_S) == 0);
        for (int t = 0; t < 8; t++)
            CHECK(env->ops->send_nb(env->ctx, 1, 0, (uint64_t)t, sbuf, tm_len(t),
                                    &done_all[t]) == CHORUS_OK);
        CHECK(env->ops->send_nb(env->ctx, 1, 0, MARK_TAG, NULL, 0, &done_all[8]) == CHORUS_OK);
        CHECK(wait_reqs(env, done_all, 9, WAIT_S) == 0);
        for (int t = 0; t < 9; t++)
            CHECK(done_all[t].status == CHORUS_OK);
        CHECK(flow(env) == NULL || flow(env)->rndv_sent == 4);
        return 0;
    }
    memset(rbuf, 0, sizeof(rbuf));
    for (int t = 0; t < 4; t++)
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, (uint64_t)t, rbuf[t], tm_cap(t), &r[t]) ==
              CHORUS_OK);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, MARK_TAG, NULL, 0, &mark) == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, 0, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
    CHECK(wait_reqs(env, r, 4, WAIT_S) == 0 && wait_reqs(env, &mark, 1, WAIT_S) == 0);
    /* Tags 4-7 arrived (or were announced) before their receives. */
    for (int t = 4; t < 8; t++) {
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, (uint64_t)t, rbuf[t], tm_cap(t), &r[t]) ==
              CHORUS_OK);
        /* Whatever does not fit fails inside the post; eager data completes there too. */
        CHECK(r[t].done == (tm_cap(t) < tm_len(t) || tm_len(t) == TM_SMALL));
    }
    CHECK(wait_reqs(env, r + 4, 4, WAIT_S) == 0);
    for (int t = 0; t < 8; t++) {
        if (tm_cap(t) < tm_len(t)) {
            CHECK(r[t].status == CHORUS_ERR_TRUNCATED);
            CHECK(rbuf[t][0] == 0 && rbuf[t][tm_cap(t) - 1] == 0);
        } else {
            CHECK(r[t].status == CHORUS_OK && r[t].length == tm_len(t));
            CHECK(matches(rbuf[t], tm_len(t), 9) && rbuf[t][tm_len(t)] == 0);
        }
    }
    return 0;
}

TL_TEST(trunc_modes, body_trunc_modes, o.window = "64K", o.eager = "4K")

enum { SMALL_N = 5000, SMALL_LEN = 100, SMALL_BATCH = 100, SMALL_WINDOW = 64 << 10 };

/* One batch of body_credit_return on the receiving side: pre-posted, or posted one by one. */
static int credit_batch_recv(rank_env_t *env, unsigned char *buf, tl_req_t *reqs, int round)
{
    tl_req_t go;

    memset(buf, 0, SMALL_BATCH * SMALL_LEN);
    for (int i = 0; round == 0 && i < SMALL_BATCH; i++)
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 4, buf + i * SMALL_LEN, SMALL_LEN, &reqs[i]) ==
              CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, 0, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
    for (int i = 0; round == 1 && i < SMALL_BATCH; i++) {
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 4, buf + i * SMALL_LEN, SMALL_LEN, &reqs[i]) ==
              CHORUS_OK);
        CHECK(wait_reqs(env, &reqs[i], 1, WAIT_S) == 0);
    }
    CHECK(wait_reqs(env, reqs, SMALL_BATCH, WAIT_S) == 0 && wait_reqs(env, &go, 1, WAIT_S) == 0);
    return 0;
}

/*
 * 5000 messages of 100 bytes, eight times the window, in batches the
 * receiver asks for: first into receives posted ahead, then into receives
 * posted one by one after the data came. The receiver returns credit as it
 * consumes, so every message goes eagerly, with one CREDIT frame per quarter
 * window rather than one per message. Same tag throughout: they match in order.
 */
static int body_credit_return(rank_env_t *env)
{
    static unsigned char buf[SMALL_BATCH * SMALL_LEN];
    tl_req_t reqs[SMALL_BATCH], go;
    const flow_t *st;
    const uint64_t total = 2 * (uint64_t)SMALL_N * SMALL_LEN;

    CHECK(env->connect_status == CHORUS_OK);
    for (int b = 0; b < 2 * SMALL_N / SMALL_BATCH; b++) {
        int round = b >= SMALL_N / SMALL_BATCH;

        if (env->rank == 1) {
            CHECK(credit_batch_recv(env, buf, reqs, round) == 0);
            for (int i = 0; i < SMALL_BATCH; i++)
                CHECK(reqs[i].status == CHORUS_OK && reqs[i].length == SMALL_LEN &&
                      matches(buf + i * SMALL_LEN, SMALL_LEN, (unsigned)(b * SMALL_BATCH + i)));
            continue;
        }
        CHECK(env->ops->recv_nb(env->ctx, 1, 0, GO_TAG, NULL, 0, &go) == CHORUS_OK);
        CHECK(wait_reqs(env, &go, 1, WAIT_S) == 0);
        for (int i = 0; i < SMALL_BATCH; i++) {
            fill(buf + i * SMALL_LEN, SMALL_LEN, (unsigned)(b * SMALL_BATCH + i));
            CHECK(env->ops->send_nb(env->ctx, 1, 0, 4, buf + i * SMALL_LEN, SMALL_LEN,
                                    &reqs[i]) == CHORUS_OK);
        }
        CHECK(wait_reqs(env, reqs, SMALL_BATCH, WAIT_S) == 0);
    }
    if ((st = flow(env)) == NULL)
        return 0;
    if (env->rank == 0) {
        CHECK(st->rndv_sent == 0 && st->eager_bytes == total);
        CHECK(st->credit_recv >= total / SMALL_WINDOW &&
              st->credit_recv <= 2 + total / (SMALL_WINDOW / 4));
    } else {
        CHECK(st->credit_sent >= total / SMALL_WINDOW &&
              st->credit_sent <= 2 + total / (SMALL_WINDOW / 4));
        CHECK(st->ue_peak <= 2 * SMALL_WINDOW + (64 << 10));
    }
    return 0;
}

TL_TEST(credit_return, body_credit_return, o.window = "64K", o.eager = "4K")

/* Progress until cond holds (tcp internals); 0, or -1 after WAIT_S. */
#define PROGRESS_UNTIL(env, cond)                                                    \
    ({                                                                               \
        double until_ = chorus__now() + WAIT_S;                                      \
        while (!(cond) && chorus__now() < until_)                                    \
            step(env);                                                               \
        (cond) ? 0 : -1;                                                             \
    })

/*
 * A large message goes by rendezvous in fragments, and a small one posted
 * while its payload is going out takes its turn between fragments: it
 * arrives while the large one is still on its way, instead of waiting behind
 * all of it. The receiver stops reading once it has cleared the large one,
 * so that the payload is still on its way when the small one is posted.
 */
static int body_payload_interleave(rank_env_t *env)
{
    unsigned char *big = malloc(BIG), small[64];
    tl_req_t r[2];

    CHECK(env->connect_status == CHORUS_OK && big != NULL);
    CHECK(exchange(env, 1 - env->rank) == 0);
    if (env->rank == 1) {
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 1, big, BIG, &r[0]) == CHORUS_OK);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 2, small, sizeof(small), &r[1]) == CHORUS_OK);
        sync_ranks(env);
        /* The CTS is written: the payload may come. */
        CHECK(PROGRESS_UNTIL(env, env->ctx->peers[0].rdvq.head != NULL) == 0);
        sync_ranks(env);
        sync_ranks(env);
        CHECK(wait_reqs(env, &r[1], 1, WAIT_S) == 0);
        CHECK(r[1].status == CHORUS_OK && matches(small, sizeof(small), 2));
        CHECK(!r[0].done);
        CHECK(wait_reqs(env, r, 1, WAIT_S) == 0);
        CHECK(r[0].status == CHORUS_OK && r[0].length == BIG && matches(big, BIG, 1));
        free(big);
        return 0;
    }
    fill(big, BIG, 1);
    fill(small, sizeof(small), 2);
    sync_ranks(env);
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 1, big, BIG, &r[0]) == CHORUS_OK);
    CHECK(PROGRESS_UNTIL(env, env->ctx->peers[1].rdataq.head != NULL) == 0);
    sync_ranks(env);
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 2, small, sizeof(small), &r[1]) == CHORUS_OK);
    progress_for(env, 0.1);
    CHECK(!r[0].done);
    sync_ranks(env);
    CHECK(wait_reqs(env, r, 2, WAIT_S) == 0);
    CHECK(r[0].status == CHORUS_OK && r[1].status == CHORUS_OK);
    free(big);
    return 0;
}

TCP_TEST(payload_interleave, body_payload_interleave)

/*
 * A payload whose receiver stops reading fills the sender's socket only up
 * to its queue bound (tcp.h, "Short send queues"), not to its buffer's
 * megabytes: what the socket has not sent stays within the bound and one
 * fragment, which is all that a frame written next waits behind. Once the
 * receiver reads again the payload completes: the socket's EPOLLOUT at the
 * bound wakes the writer.
 */
static int body_send_queue_bound(rank_env_t *env)
{
    unsigned char *big = malloc(BIG);
    tl_req_t r;

    CHECK(env->connect_status == CHORUS_OK && big != NULL);
    CHECK(exchange(env, 1 - env->rank) == 0);
    if (env->rank == 1) {
        /* A small receive buffer: what the payload's grant sends waits in the sender's. */
        int small = 64 << 10;

        CHECK(setsockopt(env->ctx->peers[0].fd, SOL_SOCKET, SO_RCVBUF, &small,
                         sizeof(small)) == 0);
        CHECK(env->ops->recv_nb(env->ctx, 0, 0, 1, big, BIG, &r) == CHORUS_OK);
        /* The CTS is written: the payload may come, and this rank stops reading it. */
        CHECK(PROGRESS_UNTIL(env, env->ctx->peers[0].rdvq.head != NULL) == 0);
        sync_ranks(env);
        sync_ranks(env);
        CHECK(wait_reqs(env, &r, 1, WAIT_S) == 0);
        CHECK(r.status == CHORUS_OK && r.length == BIG && matches(big, BIG, 1));
        free(big);
        return 0;
    }
    fill(big, BIG, 1);
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 1, big, BIG, &r) == CHORUS_OK);
    CHECK(PROGRESS_UNTIL(env, env->ctx->peers[1].rdataq.head != NULL) == 0);
    sync_ranks(env);
    progress_for(env, 0.5);
    {
        const tl_tcp_peer_t *peer = &env->ctx->peers[1];
        int not_sent = -1, lowat = 0;
        socklen_t len = sizeof(lowat);

        CHECK(ioctl(peer->fd, SIOCOUTQNSD, &not_sent) == 0);
        CHECK(getsockopt(peer->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, &len) == 0);
        fprintf(stderr, "rank 0: %d bytes not sent, bound %d, payload done %d\n", not_sent,
                lowat, r.done);
        CHECK(lowat > 0 && (uint32_t)lowat == peer->lanes[0].queue);
        CHECK(lowat <= (int)TL_TCP_QUEUE_MAX);
        CHECK((size_t)not_sent <= (size_t)lowat + TL_TCP_FRAG_MAX + sizeof(tl_tcp_hdr_t));
        CHECK(!r.done);
    }
    sync_ranks(env);
    CHECK(wait_reqs(env, &r, 1, WAIT_S) == 0);
    CHECK(r.status == CHORUS_OK);
    free(big);
    return 0;
}

TCP_TEST(send_queue_bound, body_send_queue_bound)

/* ---- streams ---------------------------------------------------------------------- */

/* Message t of the streams test: eager, at the eager bound's edge, and by rendezvous. */
static size_t st_len(int t)
{
    static const size_t lens[] = {0, 1, (256u << 10) + 1, (1u << 20), (5u << 20) + 3, 64u << 10};

    return lens[t];
}
#define ST_MSGS 6

/*
 * Every rank sends ST_MSGS messages to every other, receives posted in
 * reverse order by odd ranks; every byte checked, every completion counted
 * once. Afterwards each connection has the lanes both ranks take (the fewer
 * of their CHORUS_TCP_STREAMS, read back from board), and with several
 * lanes the 5 MiB messages went over more than one, but over no more than
 * the bound ops->streams set, when the test set one.
 */
static int body_streams(rank_env_t *env)
{
    tl_req_t reqs[2 * ST_MSGS * MAX_RANKS];
    unsigned char *sbuf[ST_MSGS * MAX_RANKS], *rbuf[ST_MSGS * MAX_RANKS];
    const char *mine = getenv("CHORUS_TCP_STREAMS");
    int n = 0, lanes_used = 0, most = 1;

    CHECK(env->connect_status == CHORUS_OK);
    env->sh->board[env->rank] = mine != NULL ? atol(mine) : 1;
    /* Every connection up, then its lanes, before the payloads that should share them. */
    for (int peer = 0; peer < env->size; peer++)
        CHECK(peer == env->rank || exchange(env, peer) == 0);
    env->completed = 0;
    sync_ranks(env);
    for (int peer = 0; peer < env->size; peer++) {
        long want = env->sh->board[peer] < env->sh->board[env->rank] ? env->sh->board[peer]
                                                                    : env->sh->board[env->rank];

        if (peer == env->rank)
            continue;
        CHECK(env->ctx->peers[peer].nlanes == want);
        CHECK(PROGRESS_UNTIL(env, env->ctx->peers[peer].lanes_up == want) == 0);
        most = want > most ? (int)want : most;
    }
    for (int peer = 0; peer < env->size; peer++) {
        for (int k = 0; k < ST_MSGS; k++) {
            int t = env->rank % 2 ? ST_MSGS - 1 - k : k, i = peer * ST_MSGS + t;

            sbuf[i] = malloc(st_len(t) + 1);
            rbuf[i] = malloc(st_len(t) + 1);
            CHECK(sbuf[i] != NULL && rbuf[i] != NULL);
            fill(sbuf[i], st_len(t), seed_of(env->rank, peer, (uint64_t)t));
            CHECK(env->ops->recv_nb(env->ctx, peer, 0, (uint64_t)t, rbuf[i], st_len(t),
                                    &reqs[2 * i]) == CHORUS_OK);
            n++;
        }
    }
    for (int peer = 0; peer < env->size; peer++) {
        for (int t = 0; t < ST_MSGS; t++) {
            int i = peer * ST_MSGS + t;

            CHECK(env->ops->send_nb(env->ctx, peer, 0, (uint64_t)t, sbuf[i], st_len(t),
                                    &reqs[2 * i + 1]) == CHORUS_OK);
            n++;
        }
    }
    CHECK(wait_reqs(env, reqs, n, WAIT_S) == 0);
    for (int i = 0; i < n; i++) {
        int peer = i / (2 * ST_MSGS), t = (i / 2) % ST_MSGS;

        CHECK(reqs[i].status == CHORUS_OK);
        if (i % 2 == 0) {
            CHECK(reqs[i].length == st_len(t));
            CHECK(matches(rbuf[i / 2], st_len(t), seed_of(peer, env->rank, (uint64_t)t)));
        }
    }
    env->completed += env->ops->progress(env->ctx);
    CHECK(env->completed == n);
    for (int i = 0; i < TL_TCP_STREAMS_MAX; i++)
        lanes_used += env->ctx->stats.lane_bytes[i] > 0;
    if (env->streams_use > 0 && env->streams_use < most)
        most = env->streams_use;
    CHECK(most == 1 ? lanes_used == 1 : lanes_used > 1 && lanes_used <= most);
    /* No rank closes its connections before every rank is done with them. */
    sync_ranks(env);
    for (int i = 0; i < env->size * ST_MSGS; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    return 0;
}

TCP_TEST(streams_2x8, body_streams, o.streams = "8")
TCP_TEST(streams_3x3, body_streams, o.size = 3, o.streams = "3")
TCP_TEST(streams_5x2, body_streams, o.size = 5, o.streams = "2")
/* A tuner's bound: 8 opened, payload dealt to the first 3 only, or to the connection alone. */
TCP_TEST(streams_bound_3_of_8, body_streams, o.size = 3, o.streams = "8", o.streams_use = 3)
TCP_TEST(streams_bound_1_of_4, body_streams, o.streams = "4", o.streams_use = 1)
/* The fewer of two settings: rank 0 takes 4, the others 2 or 1. */
TCP_TEST(streams_unequal, body_streams, o.size = 3, o.streams = "2", o.streams_0 = "4")
TCP_TEST(streams_one_side, body_streams, o.streams = "1", o.streams_0 = "8")

/*
 * A peer's second address does not lead to it from here: the lanes dealt
 * to it are dialled again at its first address, and the streams test runs
 * exact over every lane; every pair of ranks dialled again at least once
 * (the rank that dials the lanes counts it).
 */
static int body_lane_fallback(rank_env_t *env)
{
    long pairs = env->size * (env->size - 1) / 2, total = 0;

    CHECK(body_streams(env) == 0);
    env->sh->board[env->rank] = (long)env->ctx->stats.lane_fallbacks;
    sync_ranks(env);
    for (int r = 0; r < env->size; r++)
        total += env->sh->board[r];
    CHECK(total >= pairs);
    sync_ranks(env);
    return 0;
}

TCP_TEST(lane_fallback_refused, body_lane_fallback, o.size = 3, o.streams = "2",
        o.ifaces = "127.0.0.1,lo", o.dead_addr = DEAD_REFUSES)
TCP_TEST(lane_fallback_silent, body_lane_fallback, o.streams = "3",
        o.ifaces = "127.0.0.1,lo", o.dead_addr = DEAD_SILENT)

/*
 * A lane closed in the middle of a 64 MiB transfer: both ranks fail the
 * transfer with PEER_FAILED within a second, and never hang.
 */
static int body_stream_killed(rank_env_t *env)
{
    unsigned char *big = malloc(BIG);
    tl_req_t r;
    double t0;

    CHECK(env->connect_status == CHORUS_OK && big != NULL);
    CHECK(exchange(env, 1 - env->rank) == 0);
    fill(big, BIG, 3);
    if (env->rank == 0)
        CHECK(env->ops->recv_nb(env->ctx, 1, 0, 1, big, BIG, &r) == CHORUS_OK);
    else
        CHECK(env->ops->send_nb(env->ctx, 0, 0, 1, big, BIG, &r) == CHORUS_OK);
    /* The sender may see the lane fail before it looks. */
    CHECK(PROGRESS_UNTIL(env, env->ctx->peers[1 - env->rank].lanes_up == 2 || r.done) == 0);
    if (env->rank == 0) {
        /* The payload flows; rank 0 stops reading, so the transfer cannot end meanwhile. */
        CHECK(PROGRESS_UNTIL(env, env->ctx->peers[1].rdvq.head != NULL &&
                                      env->ctx->peers[1].rdvq.head->got > 0) == 0);
        CHECK(!r.done);
        shutdown(env->ctx->peers[1].lanes[1].fd, SHUT_RDWR);
    }
    t0 = chorus__now();
    CHECK(wait_reqs(env, &r, 1, 5.0) == 0);
    CHECK(r.status == CHORUS_ERR_PEER_FAILED);
    CHECK(chorus__now() - t0 < 1.0);
    CHECK(env->ctx->peers[1 - env->rank].state == TL_TCP_PEER_CLOSED);
    free(big);
    return 0;
}

TCP_TEST(stream_killed, body_stream_killed, o.streams = "2")

/* ---- connection setup failures ----------------------------------------------- */

/*
 * One rank holds another key. set_peers only records addresses, so it
 * succeeds; rank 0's first send then fails with AUTH as soon as rank 1 refuses
 * its hello (or rank 0 refuses the key rank 1 proves), not at the deadline.
 */
static int body_wrong_key(rank_env_t *env)
{
    tl_req_t r;
    double t0 = chorus__now();

    CHECK(env->connect_status == CHORUS_OK);
    if (env->rank == 1) {
        progress_for(env, 1.0);
        CHECK(conns(env) == 0);
#ifdef HAVE_UCX
        /* The hello that did not pass is counted among what was dropped. */
        CHECK(strcmp(env->ops->name, "ucx") != 0 || tl_ucx_of(env->ctx)->stats.dropped >= 1);
#endif
        return 0;
    }
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 1, NULL, 0, &r) == CHORUS_OK);
    CHECK(wait_reqs(env, &r, 1, 4.0) == 0);
    CHECK(r.status == CHORUS_ERR_AUTH);
    CHECK(chorus__now() - t0 < 1.0);
    CHECK(conns(env) == 0);
    return 0;
}

TL_TEST(wrong_key_connector, body_wrong_key, o.timeout_s = 5.0, o.bad_key_rank = 0)

TL_TEST(wrong_key_acceptor, body_wrong_key, o.timeout_s = 5.0, o.bad_key_rank = 1)

/* A peer that never answers (it listens but never runs progress) fails a send near timeout_s. */
static int body_missing_rank(rank_env_t *env)
{
    tl_req_t r;
    double t0;

    if (env->rank == 1) {
        usleep(1500 * 1000);
        return 0;
    }
    CHECK(env->connect_status == CHORUS_OK);
    t0 = chorus__now();
    CHECK(env->ops->send_nb(env->ctx, 1, 0, 1, NULL, 0, &r) == CHORUS_OK);
    CHECK(wait_reqs(env, &r, 1, 5.0) == 0 && r.status == CHORUS_ERR_TIMEOUT);
    CHECK(chorus__now() - t0 > 0.45 && chorus__now() - t0 < 1.5);
    return 0;
}

TL_TEST(missing_rank, body_missing_rank, o.timeout_s = 0.5, o.idle_rank = 1)

/* ---- arguments and lookup -------------------------------------------------- */

static int body_bad_args(rank_env_t *env)
{
    unsigned char buf[4] = {0};
    tl_req_t r;

    CHECK(env->connect_status == CHORUS_OK);
    CHECK(env->ops->send_nb(env->ctx, -1, 0, 0, buf, 4, &r) == CHORUS_ERR_INVALID_ARG);
    CHECK(env->ops->send_nb(env->ctx, env->size, 0, 0, buf, 4, &r) == CHORUS_ERR_INVALID_ARG);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 0, NULL, 4, &r) == CHORUS_ERR_INVALID_ARG);
    CHECK(env->ops->recv_nb(env->ctx, 0, 0, 0, buf, 4, NULL) == CHORUS_ERR_INVALID_ARG);
    CHECK(env->ops->set_peers(env->ctx, buf) == CHORUS_ERR_INVALID_ARG);
    return 0;
}

TL_TEST(bad_args, body_bad_args)

TL_PARAMS(ctx_create_args)
ParameterizedTest(tl_param_t *p, transport, ctx_create_args)
{
    const tl_ops_t *ops = tl_find(p->name);
    static const uint8_t key[] = "k";
    tl_ctx_params_t ok = {0, 2, "127.0.0.1", key, 1, 1.0, NULL, NULL, NULL}, bad;
    tl_ctx_t *ctx = NULL;
    tl_caps_t caps;

    cr_assert_not_null(ops);
    ops->query(&caps);
    cr_expect(caps.mem_host == 1);
    bad = ok;
    bad.rank = 2;
    cr_expect_eq(ops->ctx_create(&bad, &ctx), CHORUS_ERR_INVALID_ARG);
    bad = ok;
    bad.bind_host = "not-an-address";
    cr_expect_eq(ops->ctx_create(&bad, &ctx), CHORUS_ERR_INVALID_ARG);
    bad = ok;
    bad.auth_key_len = 0;
    cr_expect_eq(ops->ctx_create(&bad, &ctx), CHORUS_ERR_INVALID_ARG);
    bad = ok;
    bad.timeout_s = 0;
    cr_expect_eq(ops->ctx_create(&bad, &ctx), CHORUS_ERR_INVALID_ARG);
    cr_expect_null(ctx);
    cr_assert_eq(ops->ctx_create(&ok, &ctx), CHORUS_OK);
    cr_expect_geq(ops->event_fd(ctx), 0);
    ops->ctx_destroy(ctx);
}

/* Streams and interfaces: bad settings refused by name; good ones published in the blob. */
Test(transport, tcp_streams_config)
{
    static const uint8_t key[] = "k";
    static const char *bad_streams[] = {"9", "-1", "two"};
    static const char *bad_ifaces[] = {"no-such-if", "lo,lo,lo,lo,lo", ",", "lo,300.1.1.1"};
    tl_ctx_params_t ok = {0, 2, "127.0.0.1", key, 1, 1.0, NULL, NULL, NULL};
    tl_ctx_t *ctx = NULL;
    tl_tcp_blob_t blob;
    size_t len = sizeof(blob);

    for (size_t i = 0; i < sizeof(bad_streams) / sizeof(bad_streams[0]); i++) {
        setenv("CHORUS_TCP_STREAMS", bad_streams[i], 1);
        cr_expect_eq(tl_tcp_ops.ctx_create(&ok, &ctx), CHORUS_ERR_INVALID_ARG, "streams %s",
                     bad_streams[i]);
    }
    unsetenv("CHORUS_TCP_STREAMS");
    for (size_t i = 0; i < sizeof(bad_ifaces) / sizeof(bad_ifaces[0]); i++) {
        setenv("CHORUS_TCP_IFACES", bad_ifaces[i], 1);
        cr_expect_eq(tl_tcp_ops.ctx_create(&ok, &ctx), CHORUS_ERR_INVALID_ARG, "ifaces %s",
                     bad_ifaces[i]);
    }
    cr_expect_null(ctx);
    /* Two addresses: a stream each by default, both published. */
    setenv("CHORUS_TCP_IFACES", "lo,127.0.0.1", 1);
    cr_assert_eq(tl_tcp_ops.ctx_create(&ok, &ctx), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.get_address(ctx, &blob, &len), CHORUS_OK);
    cr_expect(blob.count == 2 && blob.streams == 2);
    cr_expect_str_eq(blob.addr[0].host, "127.0.0.1");
    cr_expect_str_eq(blob.addr[1].host, "127.0.0.1");
    cr_expect_str_neq(blob.addr[0].port, blob.addr[1].port);
    tl_tcp_ops.ctx_destroy(ctx);
    setenv("CHORUS_TCP_STREAMS", "5", 1);
    cr_assert_eq(tl_tcp_ops.ctx_create(&ok, &ctx), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.get_address(ctx, &blob, &len), CHORUS_OK);
    cr_expect(blob.count == 2 && blob.streams == 5);
    tl_tcp_ops.ctx_destroy(ctx);
    unsetenv("CHORUS_TCP_STREAMS");
    /* auto (the default) on a loopback bootstrap: the ranks share a machine, one address
       and stream; bootstrap: that address alone, whatever the machine. */
    for (int i = 0; i < 3; i++) {
        static const char *const how[] = {"auto", NULL, "bootstrap"};

        if (how[i] != NULL)
            setenv("CHORUS_TCP_IFACES", how[i], 1);
        else
            unsetenv("CHORUS_TCP_IFACES");
        cr_assert_eq(tl_tcp_ops.ctx_create(&ok, &ctx), CHORUS_OK);
        cr_assert_eq(tl_tcp_ops.get_address(ctx, &blob, &len), CHORUS_OK);
        cr_expect(blob.count == 1 && blob.streams == 1, "%s", how[i] ? how[i] : "default");
        cr_expect_str_eq(blob.addr[0].host, "127.0.0.1");
        tl_tcp_ops.ctx_destroy(ctx);
    }
    unsetenv("CHORUS_TCP_IFACES");
}

#ifdef HAVE_UCX
/* UCX's variables: bad values refused by name; its blob one of this rank with its worker's address. */
Test(transport, ucx_config)
{
    static const uint8_t key[] = "k";
    static const char *bad_rndv[] = {"zero-copy", "UCX", "on"};
    tl_ctx_params_t ok = {1, 2, "127.0.0.1", key, 1, 1.0, NULL, NULL, NULL};
    const tl_ops_t *ops = tl_find("ucx");
    tl_ctx_t *ctx = NULL;
    tl_ucx_blob_t blob;
    tl_ucx_peer_addr_t pa;
    size_t len = 0;

    cr_assert_not_null(ops);
    for (size_t i = 0; i < sizeof(bad_rndv) / sizeof(bad_rndv[0]); i++) {
        setenv("CHORUS_UCX_RNDV", bad_rndv[i], 1);
        cr_expect_eq(ops->ctx_create(&ok, &ctx), CHORUS_ERR_INVALID_ARG, "rndv '%s'",
                     bad_rndv[i]);
    }
    unsetenv("CHORUS_UCX_RNDV");
    setenv("CHORUS_UCX_WINDOW", "1100G", 1);
    cr_expect_eq(ops->ctx_create(&ok, &ctx), CHORUS_ERR_INVALID_ARG);
    unsetenv("CHORUS_UCX_WINDOW");
    setenv("CHORUS_UCX_EAGER_SIZE", "lots", 1);
    cr_expect_eq(ops->ctx_create(&ok, &ctx), CHORUS_ERR_INVALID_ARG);
    unsetenv("CHORUS_UCX_EAGER_SIZE");
    cr_expect_null(ctx);
    for (int i = 0; i < 3; i++) {
        static const char *const how[] = {"auto", "ucx", "chorus"};

        setenv("CHORUS_UCX_RNDV", how[i], 1);
        cr_assert_eq(ops->ctx_create(&ok, &ctx), CHORUS_OK, "rndv %s", how[i]);
        cr_expect(ops->streams == NULL);
        cr_assert_eq(ops->get_address(ctx, &blob, &len), CHORUS_OK);
        cr_expect_eq(len, sizeof(blob));
        cr_expect_eq(tl_ucx_blob_decode(&blob, 1, &pa), CHORUS_OK);
        cr_expect_eq(tl_ucx_blob_decode(&blob, 0, &pa), CHORUS_ERR_INVALID_ARG);
        cr_expect_eq(pa.window, 4u << 20);
        cr_expect_eq(tl_ucx_of(ctx)->rndv_chorus,
                     i == 2 || (i == 0 && !tl_ucx_rdma_here()), "rndv %s", how[i]);
        ops->ctx_destroy(ctx);
        ctx = NULL;
    }
    unsetenv("CHORUS_UCX_RNDV");
}
#endif

Test(transport, find)
{
    cr_expect_eq(tl_find("tcp"), &tl_tcp_ops);
    cr_expect_str_eq(tl_find("tcp")->name, "tcp");
    cr_expect_null(tl_find("no-such-transport"));
    cr_expect_null(tl_find(NULL));
}

