/*
 * Transport conformance suite. Every test takes a transport name and runs
 * against tl_find(name), so other transports join by adding their name to
 * TL_TEST_TRANSPORTS. Ranks are forked processes, each driving its own
 * context; the parent checks how each one ended.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "transports/base/transport.h"
#include "transports/tcp/tcp.h"
#include "util/config.h"
#include "util/sha256.h"
#include "util/time.h"

#define TL_TEST_TRANSPORTS {{"tcp"}}
#define MAX_RANKS 8
#define WAIT_S 20.0
#define BIG (64u << 20)

typedef struct {
    char name[16];
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
} shared_t;

typedef struct {
    const tl_ops_t *ops;
    tl_ctx_t *ctx;
    int rank;
    int size;
    chorus_status_t connect_status;
    double connect_s;
    long completed;             /* sum of progress() results */
} rank_env_t;

typedef int (*rank_fn_t)(rank_env_t *env);

typedef struct {
    int size;
    double timeout_s;
    int bad_key_rank;           /* this rank holds another key; -1: none */
    int idle_rank;              /* this rank never calls set_peers; -1: none */
    int killed_rank;            /* this rank is expected to die of SIGKILL; -1: none */
} run_opts_t;

static const run_opts_t defaults = {2, 10.0, -1, -1, -1};

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

/* ---- the rank launcher ----------------------------------------------------- */

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
    rank_env_t envs = {.ops = ops, .rank = rank, .size = o->size}, *env = &envs;
    size_t len = 0;
    int rc;

    CHECK(ops->ctx_create(&params, &env->ctx) == CHORUS_OK);
    CHECK(ops->get_address(env->ctx, sh->addrs + (size_t)rank * TL_ADDR_MAX, &len) ==
          CHORUS_OK);
    CHECK(len > 0 && len <= TL_ADDR_MAX);
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

/* Rank 0 sends everything, then a marker; once rank 1 has the marker, all came unexpected. */
static int body_unexpected(rank_env_t *env)
{
    static const uint64_t tags[] = {1, 2, 3, 1, 4};
    static const size_t lens[] = {100, 0, 1u << 20, 50, 3};
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

/* fail_all fails local requests with its status and makes the peer see a failure. */
static int body_fail_all(rank_env_t *env)
{
    tl_req_t r, late;

    CHECK(env->connect_status == CHORUS_OK);
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
    return 0;
}

TL_TEST(fail_all, body_fail_all)

/* Destroying a context completes its pending requests with ABORTED. */
static int body_destroy_pending(rank_env_t *env)
{
    unsigned char *big = calloc(1, BIG);
    tl_req_t r[2];

    CHECK(env->connect_status == CHORUS_OK && big != NULL);
    CHECK(env->ops->recv_nb(env->ctx, 1 - env->rank, 0, 1, NULL, 0, &r[0]) == CHORUS_OK);
    if (env->rank == 1) {
        /* Not reading yet keeps rank 0's large send pending until it destroys. */
        usleep(300 * 1000);
        CHECK(wait_reqs(env, r, 1, 2.0) == 0 && r[0].status == CHORUS_ERR_PEER_FAILED);
        /* The 64 MiB message arrived only in part: it is dropped, not delivered. */
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

/* ---- setup failures -------------------------------------------------------- */

/*
 * One rank holds another key. The acceptor (rank 0) rejects or is rejected,
 * keeps waiting for the genuine peer and ends with AUTH at the deadline; the
 * connector only sees its connections closed and ends with TIMEOUT.
 */
static int body_wrong_key(rank_env_t *env)
{
    tl_req_t r;

    CHECK(env->connect_status ==
          (env->rank == 0 ? CHORUS_ERR_AUTH : CHORUS_ERR_TIMEOUT));
    CHECK(env->connect_s > 0.9 && env->connect_s < 5.0);
    CHECK(env->ops->send_nb(env->ctx, 1 - env->rank, 0, 1, NULL, 0, &r) ==
          CHORUS_ERR_INVALID_ARG);
    return 0;
}

TL_TEST(wrong_key_connector, body_wrong_key, o.timeout_s = 1.0, o.bad_key_rank = 1)

TL_TEST(wrong_key_acceptor, body_wrong_key, o.timeout_s = 1.0, o.bad_key_rank = 0)

/* A rank that never connects makes the others time out near timeout_s. */
static int body_missing_rank(rank_env_t *env)
{
    if (env->rank == 1) {
        usleep(700 * 1000);
        return 0;
    }
    CHECK(env->connect_status == CHORUS_ERR_TIMEOUT);
    CHECK(env->connect_s > 0.45 && env->connect_s < 3.0);
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
    tl_ctx_params_t ok = {0, 2, "127.0.0.1", key, 1, 1.0}, bad;
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

Test(transport, find)
{
    cr_expect_eq(tl_find("tcp"), &tl_tcp_ops);
    cr_expect_str_eq(tl_find("tcp")->name, "tcp");
    cr_expect_null(tl_find("no-such-transport"));
    cr_expect_null(tl_find(NULL));
}

/* ---- TCP framing ----------------------------------------------------------- */

Test(tcp, header_check)
{
    tl_tcp_hdr_t h;
    uint64_t tag = 0, len = 0;
    uint32_t space = 0;

    tl_tcp_header_encode(&h, 0x55667788u, 0x1122334455667788ull & ~TL_TAG_CTRL, 12345);
    cr_assert_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_OK);
    cr_expect_eq(space, 0x55667788u);
    cr_expect_eq(tag, 0x1122334455667788ull & ~TL_TAG_CTRL);
    cr_expect_eq(len, 12345);
    /* Byte order on the wire is fixed: little-endian. */
    cr_expect_eq(((const unsigned char *)&h)[0], TL_TCP_MAGIC & 0xff);
    cr_expect_eq(((const unsigned char *)&h)[4], 0x88);
    cr_expect_eq(((const unsigned char *)&h)[16], 12345 & 0xff);

    tl_tcp_header_encode(&h, 0, 1, TL_TCP_MAX_MSG);
    cr_expect_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_OK);
    cr_expect_eq(len, TL_TCP_MAX_MSG);

    tag = len = 7;
    space = 7;
    tl_tcp_header_encode(&h, 0, 1, TL_TCP_MAX_MSG + 1);
    cr_expect_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_ERR_PROTOCOL);
    tl_tcp_header_encode(&h, 0, 1, UINT64_MAX);
    cr_expect_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_ERR_PROTOCOL);
    tl_tcp_header_encode(&h, 0, 1, 10);
    h.magic ^= 1;
    cr_expect_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_ERR_PROTOCOL);
    /* A control message is small: a longer one is malformed. */
    tl_tcp_header_encode(&h, 0, TL_TAG_CTRL | 1, TL_CTRL_MAX + 1);
    cr_expect_eq(tl_tcp_header_check(&h, &space, &tag, &len), CHORUS_ERR_PROTOCOL);
    /* Outputs are written only on success. */
    cr_expect_eq(tag, 7);
    cr_expect_eq(len, 7);
    cr_expect_eq(space, 7);
}

/* ---- TCP handshake against raw sockets -------------------------------------- */

static const uint8_t raw_key[] = "raw-socket-test-key";

static int raw_connect(const tl_tcp_addr_t *a)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 3};

    sin.sin_port = htons((uint16_t)atoi(a->port));
    inet_pton(AF_INET, a->host, &sin.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t r = read(fd, (char *)buf + got, len - got);

        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static tl_ctx_t *raw_ctx(int rank, int size, double timeout_s)
{
    tl_ctx_params_t params = {rank, size, "127.0.0.1", raw_key, sizeof(raw_key) - 1, timeout_s};
    tl_ctx_t *ctx = NULL;

    cr_assert_eq(tl_tcp_ops.ctx_create(&params, &ctx), CHORUS_OK);
    return ctx;
}

typedef struct {
    tl_ctx_t *ctx;
    const unsigned char *addrs;
    chorus_status_t status;
} connect_job_t;

static void *connect_thread(void *arg)
{
    connect_job_t *job = arg;

    job->status = tl_tcp_ops.set_peers(job->ctx, job->addrs);
    return NULL;
}

/*
 * Rank 0 of 2 meets three impostors (wrong MAC, wrong magic, wrong rank)
 * before the real rank 1: it drops each one and then connects to rank 1.
 */
Test(tcp, impostors_dropped, .timeout = 30)
{
    unsigned char addrs[2 * TL_ADDR_MAX];
    tl_tcp_addr_t a0;
    tl_ctx_t *ctx[2] = {raw_ctx(0, 2, 5.0), raw_ctx(1, 2, 5.0)};
    connect_job_t job0 = {ctx[0], addrs, CHORUS_ERR_INTERNAL};
    connect_job_t job1 = {ctx[1], addrs, CHORUS_ERR_INTERNAL};
    pthread_t t0, t1;
    size_t len;

    cr_assert_eq(tl_tcp_ops.get_address(ctx[0], addrs, &len), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.get_address(ctx[1], addrs + TL_ADDR_MAX, &len), CHORUS_OK);
    memcpy(&a0, addrs, sizeof(a0));
    pthread_create(&t0, NULL, connect_thread, &job0);
    for (int bad = 0; bad < 3; bad++) {
        uint8_t nonce[TL_TCP_NONCE_BYTES], byte;
        tl_tcp_hello_t h = {htole32(TL_TCP_HELLO_MAGIC), htole32(TL_TCP_VERSION), htole32(1),
                            htole32(0), {0}};
        int fd = raw_connect(&a0);

        cr_assert_geq(fd, 0);
        cr_assert_eq(read_full(fd, nonce, sizeof(nonce)), 0, "no nonce from the acceptor");
        if (bad == 0)
            memset(h.mac, 0x5a, sizeof(h.mac));
        if (bad == 1)
            h.magic = 0;
        if (bad == 2)
            h.to_rank = htole32(5);
        if (bad != 0)
            chorus__hmac_sha256(raw_key, sizeof(raw_key) - 1, nonce, sizeof(nonce), h.mac);
        cr_assert_eq(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
        /* Dropped: end of stream, never an ack. */
        cr_expect_eq(read(fd, &byte, 1), 0, "impostor %d was not dropped", bad);
        close(fd);
    }
    pthread_create(&t1, NULL, connect_thread, &job1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cr_assert_eq(job0.status, CHORUS_OK);
    cr_assert_eq(job1.status, CHORUS_OK);
    /* The mesh is complete: the listener is gone. */
    cr_expect_eq(raw_connect(&a0), -1);
    tl_tcp_ops.ctx_destroy(ctx[0]);
    tl_tcp_ops.ctx_destroy(ctx[1]);
}

/*
 * Rank 1's peer address leads to a listener that does not hold the key. The
 * hello rank 1 sends is checked byte for byte; the forged ack is refused.
 */
Test(tcp, impostor_listener, .timeout = 30)
{
    unsigned char addrs[2 * TL_ADDR_MAX] = {0};
    tl_tcp_addr_t fake = {.host = "127.0.0.1"};
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
    tl_ctx_t *ctx = raw_ctx(1, 2, 1.0);
    connect_job_t job = {ctx, addrs, CHORUS_ERR_INTERNAL};
    uint8_t nonce[TL_TCP_NONCE_BYTES], msg[TL_TCP_NONCE_BYTES + 8], mac[32], ack[32] = {0};
    uint32_t from = htole32(1), to = htole32(0);
    tl_tcp_hello_t h;
    pthread_t t;
    size_t len;

    cr_assert_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    getsockname(lfd, (struct sockaddr *)&sin, &sl);
    snprintf(fake.port, sizeof(fake.port), "%u", ntohs(sin.sin_port));
    memcpy(addrs, &fake, sizeof(fake));
    cr_assert_eq(tl_tcp_ops.get_address(ctx, addrs + TL_ADDR_MAX, &len), CHORUS_OK);
    pthread_create(&t, NULL, connect_thread, &job);
    fd = accept(lfd, NULL, NULL);
    cr_assert_geq(fd, 0);
    memset(nonce, 0x33, sizeof(nonce));
    cr_assert_eq(write(fd, nonce, sizeof(nonce)), (ssize_t)sizeof(nonce));
    cr_assert_eq(read_full(fd, &h, sizeof(h)), 0);
    cr_expect_eq(le32toh(h.magic), TL_TCP_HELLO_MAGIC);
    cr_expect_eq(le32toh(h.version), TL_TCP_VERSION);
    cr_expect_eq(le32toh(h.from_rank), 1);
    cr_expect_eq(le32toh(h.to_rank), 0);
    memcpy(msg, nonce, sizeof(nonce));
    memcpy(msg + sizeof(nonce), &from, 4);
    memcpy(msg + sizeof(nonce) + 4, &to, 4);
    chorus__hmac_sha256(raw_key, sizeof(raw_key) - 1, msg, sizeof(msg), mac);
    cr_expect(memcmp(mac, h.mac, sizeof(mac)) == 0, "hello MAC is not HMAC(key, nonce||1||0)");
    cr_assert_eq(write(fd, ack, sizeof(ack)), (ssize_t)sizeof(ack));
    pthread_join(t, NULL);
    cr_expect_eq(job.status, CHORUS_ERR_AUTH);
    close(fd);
    close(lfd);
    tl_tcp_ops.ctx_destroy(ctx);
}
