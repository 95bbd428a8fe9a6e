/*
 * The hostile side of test_attack.c: one process whose threads are a
 * legitimate 4-rank rendezvous (rank 0 behind a recording relay) and every
 * hostile peer at once. It speaks the wire format of core/bootstrap.h with
 * raw sockets, tells the store's side which phase it is in, and reports each
 * refusal that did not happen as a "fail: " line.
 */
#include "bootstrap/attack_peers.h"

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"

#define SCANS       300
#define HELLO_BYTES (CHORUS_BOOT_HEADER + CHORUS_BOOT_NONCE)
#define JOIN_BYTES  (CHORUS_BOOT_HEADER + 32 + 8 + BLOB_LEN)

static int report_fd = -1;      /* to the store's side: phase names, "fail: ..." lines */
static atomic_int failures;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(report_fd, line, (size_t)n) != n)
        _exit(90);
}

#define FAIL(...) do { atomic_fetch_add(&failures, 1); say("fail: " __VA_ARGS__); } while (0)

/* Reads one line from fd before deadline; returns 0, or -1 on EOF or timeout. */
int attack_read_line(int fd, char *buf, size_t len, double deadline)
{
    size_t n = 0;

    while (n + 1 < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, chorus__ms_left(deadline)) != 1 || read(fd, buf + n, 1) != 1)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
    return 0;
}

static void header(uint8_t *p, unsigned type, uint32_t len)
{
    chorus__boot_put_u32(p, CHORUS_BOOT_MAGIC);
    p[4] = 0;
    p[5] = CHORUS_BOOT_VERSION;
    p[6] = 0;
    p[7] = (uint8_t)type;
    chorus__boot_put_u32(p + 8, len);
}

static void rank_blob(int rank, uint8_t *blob)
{
    for (int i = 0; i < BLOB_LEN; i++)
        blob[i] = (uint8_t)(rank * 29 + i * 3 + 7);
}

static int raw_connect(const char *addr)
{
    int fd = -1;

    if (chorus__sock_connect(addr, chorus__now() + 5, &fd) != CHORUS_OK)
        return -1;
    return fd;
}

/*
 * Waits for the store to drop fd. Returns the code of the ERROR it sent (a
 * positive status number), 0 when it closed without one, -1 when it kept
 * the connection open for 8 s. Closes fd.
 */
static long expect_dropped(int fd)
{
    uint8_t hdr[CHORUS_BOOT_HEADER], payload[4 + CHORUS_BOOT_ERROR_TEXT_MAX], byte;
    double deadline = chorus__now() + 8;
    chorus_status_t st = chorus__sock_read_full(fd, hdr, sizeof(hdr), deadline);
    long code = 0;

    /* A peer that sent HELLO and JOIN at once may get the CHALLENGE before the ERROR. */
    if (st == CHORUS_OK && hdr[7] == CHORUS_BOOT_CHALLENGE && chorus__boot_get_u32(hdr + 8) == 64 &&
        chorus__sock_read_full(fd, payload, 64, deadline) == CHORUS_OK)
        st = chorus__sock_read_full(fd, hdr, sizeof(hdr), deadline);
    if (st == CHORUS_OK && hdr[7] == CHORUS_BOOT_ERROR && chorus__boot_get_u32(hdr + 8) >= 4 &&
        chorus__boot_get_u32(hdr + 8) <= sizeof(payload) &&
        chorus__sock_read_full(fd, payload, chorus__boot_get_u32(hdr + 8), deadline) == CHORUS_OK) {
        code = chorus__boot_get_u32(payload);
        st = chorus__sock_read_full(fd, &byte, 1, deadline);
    }
    close(fd);
    if (st == CHORUS_ERR_TIMEOUT)
        return -1;
    return st == CHORUS_ERR_PEER_FAILED ? code : -2;   /* -2: more data than an ERROR */
}

static void expect_refusal(int fd, chorus_status_t want, const char *what)
{
    long code = expect_dropped(fd);

    if (code != -want)
        FAIL("%s: store answered %ld (%s), expected %d (%s)", what, code,
             code == -1 ? "kept the connection open" : chorus_status_string(-(int)code),
             -want, chorus_status_string(want));
}

/* HELLO with nonce nc; returns the connection with ns filled from the CHALLENGE, or -1. */
static int raw_hello(const char *addr, const uint8_t *nc, uint8_t *ns)
{
    uint8_t msg[CHORUS_BOOT_HEADER + 64];
    int fd = raw_connect(addr);

    if (fd < 0)
        return -1;
    header(msg, CHORUS_BOOT_HELLO, CHORUS_BOOT_NONCE);
    memcpy(msg + CHORUS_BOOT_HEADER, nc, CHORUS_BOOT_NONCE);
    if (chorus__sock_write_full(fd, msg, HELLO_BYTES, chorus__now() + 5) != CHORUS_OK ||
        chorus__sock_read_full(fd, msg, sizeof(msg), chorus__now() + 5) != CHORUS_OK ||
        msg[7] != CHORUS_BOOT_CHALLENGE) {
        close(fd);
        return -1;
    }
    memcpy(ns, msg + CHORUS_BOOT_HEADER, CHORUS_BOOT_NONCE);
    return fd;
}

/* A JOIN for (rank, size) MAC'd with secret over (nc, ns), as bootstrap.h describes. */
static void join_msg(const uint8_t *nc, const uint8_t *ns, const char *secret, uint32_t rank,
                     uint32_t size, uint8_t *msg)
{
    uint8_t mac_in[64 + 64 + 8 + BLOB_LEN], *body = msg + CHORUS_BOOT_HEADER + 32;
    size_t label = strlen(CHORUS_BOOT_LABEL_CLIENT);

    header(msg, CHORUS_BOOT_JOIN, 32 + 8 + BLOB_LEN);
    chorus__boot_put_u32(body, rank);
    chorus__boot_put_u32(body + 4, size);
    rank_blob((int)(rank % NRANKS), body + 8);
    memcpy(mac_in, CHORUS_BOOT_LABEL_CLIENT, label);
    memcpy(mac_in + label, nc, 32);
    memcpy(mac_in + label + 32, ns, 32);
    memcpy(mac_in + label + 64, body, 8 + BLOB_LEN);
    chorus__hmac_sha256(secret, strlen(secret), mac_in, label + 64 + 8 + BLOB_LEN,
                        msg + CHORUS_BOOT_HEADER);
}

/* A peer that completes HELLO, then JOINs as (rank, size) with secret; want: the refusal. */
static void bogus_join(const char *addr, const char *secret, uint32_t rank, uint32_t size,
                       chorus_status_t want)
{
    uint8_t nc[32], ns[32], msg[JOIN_BYTES];
    char what[96];
    int fd;

    snprintf(what, sizeof(what), "join as rank %u of %u with %s secret", rank, size,
             strcmp(secret, SECRET) == 0 ? "the job's" : "a wrong");
    chorus__random_bytes(nc, sizeof(nc));
    fd = raw_hello(addr, nc, ns);
    if (fd < 0) {
        FAIL("join as rank %u of %u: no challenge from the store", rank, size);
        return;
    }
    join_msg(nc, ns, secret, rank, size, msg);
    if (chorus__sock_write_full(fd, msg, sizeof(msg), chorus__now() + 5) != CHORUS_OK) {
        FAIL("join as rank %u of %u: cannot send", rank, size);
        close(fd);
        return;
    }
    expect_refusal(fd, want, what);
}

/* A man in the middle for rank 0: forwards both ways, records what the rank sends. */
typedef struct {
    char store[CHORUS_SOCK_ADDR_MAX], addr[CHORUS_SOCK_ADDR_MAX];
    int listen_fd;
    uint8_t sent[512];
    atomic_size_t nsent;
    pthread_t thread;
} relay_t;

static int relay_pump(int from, int to, uint8_t *record, atomic_size_t *nrecord)
{
    uint8_t buf[4096];
    size_t got = 0;

    if (chorus__sock_recv_some(from, buf, sizeof(buf), &got) != CHORUS_OK)
        return -1;
    if (record != NULL) {
        size_t have = atomic_load(nrecord), n = got < 512 - have ? got : 512 - have;
        memcpy(record + have, buf, n);
        atomic_store(nrecord, have + n);
    }
    return got == 0 ? 0
                    : chorus__sock_write_full(to, buf, got, chorus__now() + 5) == CHORUS_OK
                      ? 0 : -1;
}

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    struct pollfd p[2] = {{.fd = r->listen_fd, .events = POLLIN}};
    char peer[CHORUS_SOCK_ADDR_MAX];
    double deadline = chorus__now() + 30;
    int client = -1, store = -1;

    if (poll(p, 1, 10000) != 1 || chorus__sock_accept(r->listen_fd, &client, peer,
                                                      sizeof(peer)) != CHORUS_OK ||
        client < 0 || (store = raw_connect(r->store)) < 0) {
        FAIL("relay: no connection from rank 0 or to the store");
        goto out;
    }
    p[0] = (struct pollfd){.fd = client, .events = POLLIN};
    p[1] = (struct pollfd){.fd = store, .events = POLLIN};
    while (chorus__now() < deadline && poll(p, 2, 100) >= 0) {
        if ((p[0].revents && relay_pump(client, store, r->sent, &r->nsent) != 0) ||
            (p[1].revents && relay_pump(store, client, NULL, NULL) != 0))
            break;
    }
out:
    if (client >= 0)
        close(client);
    if (store >= 0)
        close(store);
    return NULL;
}

typedef struct {
    char addr[CHORUS_SOCK_ADDR_MAX];
    const char *secret;
    int rank;
    uint8_t blob[BLOB_LEN], all[NRANKS * BLOB_LEN], key[32];
    chorus_status_t status;
    pthread_t thread;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;

    const chorus__boot_client_params_t p = {
        .addr = c->addr, .secret = c->secret, .secret_len = strlen(c->secret),
        .rank = c->rank, .size = NRANKS, .timeout_s = 10};

    c->status = chorus__bootstrap_exchange(&p, c->blob, BLOB_LEN, c->all, c->key, NULL, 0);
    return NULL;
}

static void client_spawn(client_t *c, const char *addr, const char *secret, int rank)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    c->secret = secret;
    c->rank = rank;
    c->status = CHORUS_ERR_INTERNAL;
    rank_blob(rank, c->blob);
    if (pthread_create(&c->thread, NULL, client_main, c) != 0)
        _exit(91);
}

/* ---- The attacks, each in its own thread, all at once ------------------------------ */

typedef struct {
    const char *store;
    const relay_t *relay;
    int idle[IDLE];
} attack_t;

static void *attack_scan(void *arg)
{
    const attack_t *a = arg;
    struct linger rst = {.l_onoff = 1, .l_linger = 0};

    /*
     * Connect and go, half of the time with a reset, as scanners do; paced at
     * one a millisecond, since an unpaced flood measures how many connections
     * pile up in the backlog while the machine starves the store's thread
     * (each costs the store a 4 KiB buffer until it sees the close).
     */
    for (int i = 0; i < SCANS; i++) {
        int fd = raw_connect(a->store);
        usleep(1000);
        if (fd < 0) {
            FAIL("port scan: connection %d refused or timed out", i);
            return NULL;
        }
        if (i % 2)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
        close(fd);
    }
    return NULL;
}

static void *attack_garbage(void *arg)
{
    static const char http[] = "GET / HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n";
    static const uint8_t tls[] = {0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03,
                                  0x03, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
    const attack_t *a = arg;
    uint8_t junk[4096];

    /* Every piece at least a header long: shorter ones are the idle peers' business. */
    for (int i = 0; i < 18; i++) {
        const void *data = junk;
        size_t len = sizeof(junk);
        int fd = raw_connect(a->store);
        long code;
        if (i == 16) {
            data = http;
            len = sizeof(http) - 1;
        } else if (i == 17) {
            data = tls;
            len = sizeof(tls);
        } else {
            chorus__random_bytes(junk, sizeof(junk));
            len = CHORUS_BOOT_HEADER + (size_t)i * 255;
        }
        if (fd < 0 || chorus__sock_write_full(fd, data, len, chorus__now() + 5) != CHORUS_OK) {
            FAIL("random bytes %d: cannot connect or send", i);
            if (fd >= 0)
                close(fd);
            continue;
        }
        /* Unread junk may turn the close into a reset that discards the ERROR. */
        code = expect_dropped(fd);
        if (code != 0 && code != -CHORUS_ERR_PROTOCOL)
            FAIL("random bytes %d (%zu bytes): store answered %ld", i, len, code);
    }
    return NULL;
}

static void *attack_wrong_secret(void *arg)
{
    const attack_t *a = arg;
    client_t c;

    client_spawn(&c, a->store, WRONG_SECRET, 2);
    pthread_join(c.thread, NULL);
    if (c.status != CHORUS_ERR_AUTH)
        FAIL("client with a wrong secret: %s, expected CHORUS_ERR_AUTH",
             chorus_status_string(c.status));
    /* One that does not check the store's proof and sends its JOIN anyway. */
    bogus_join(a->store, WRONG_SECRET, 2, NRANKS, CHORUS_ERR_AUTH);
    bogus_join(a->store, WRONG_SECRET, 0, 0, CHORUS_ERR_AUTH);
    return NULL;
}

static void *attack_replay(void *arg)
{
    const attack_t *a = arg;
    size_t n = atomic_load(&a->relay->nsent);
    int fd = raw_connect(a->store);

    if (n != HELLO_BYTES + JOIN_BYTES)
        FAIL("replay: recorded %zu bytes of rank 0, expected %d", n, HELLO_BYTES + JOIN_BYTES);
    if (memmem(a->relay->sent, n, SECRET, strlen(SECRET)) != NULL)
        FAIL("replay: the secret crossed the wire");
    /* The whole recorded session at once: the store's fresh nonce defeats it. */
    if (fd < 0 || chorus__sock_write_full(fd, a->relay->sent, n, chorus__now() + 5) !=
                  CHORUS_OK) {
        FAIL("replay: cannot connect or send");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    expect_refusal(fd, CHORUS_ERR_AUTH, "replayed handshake of rank 0");
    return NULL;
}

static void *attack_idle(void *arg)
{
    attack_t *a = arg;
    uint8_t hello[CHORUS_BOOT_HEADER];

    /* Silent ones and ones stalled in the middle of a header, held until the end. */
    header(hello, CHORUS_BOOT_HELLO, CHORUS_BOOT_NONCE);
    for (int i = 0; i < IDLE; i++) {
        a->idle[i] = raw_connect(a->store);
        if (a->idle[i] < 0)
            FAIL("idle connection %d refused", i);
        else if (i % 2)
            chorus__sock_write_full(a->idle[i], hello, 7, chorus__now() + 5);
    }
    return NULL;
}

static void *attack_lengths(void *arg)
{
    static const uint32_t lens[] = {0xffffffffu, 0x80000000u, 0x10000000u,
                                    32 + 8 + CHORUS_BOOT_BLOB_MAX + 1};
    const attack_t *a = arg;
    uint8_t msg[CHORUS_BOOT_HEADER], nc[32], ns[32];

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        /* As the first message... */
        int fd = raw_connect(a->store);
        if (fd >= 0) {
            header(msg, CHORUS_BOOT_HELLO, lens[i]);
            chorus__sock_write_full(fd, msg, sizeof(msg), chorus__now() + 5);
            expect_refusal(fd, CHORUS_ERR_PROTOCOL, "HELLO with a huge length");
        } else {
            FAIL("length %u: cannot connect", lens[i]);
        }
        /* ...and as the JOIN after an honest HELLO. */
        chorus__random_bytes(nc, sizeof(nc));
        fd = raw_hello(a->store, nc, ns);
        if (fd < 0) {
            FAIL("length %u: no challenge", lens[i]);
            continue;
        }
        header(msg, CHORUS_BOOT_JOIN, lens[i]);
        chorus__sock_write_full(fd, msg, sizeof(msg), chorus__now() + 5);
        expect_refusal(fd, CHORUS_ERR_PROTOCOL, "JOIN with a huge length");
    }
    return NULL;
}

/* Peers that hold the secret but announce impossible ranks and sizes. */
static void *attack_rank_counts(void *arg)
{
    const attack_t *a = arg;

    bogus_join(a->store, SECRET, 0, 0, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, 0, CHORUS_BOOT_SIZE_MAX + 1, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, 0, 0xffffffffu, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, NRANKS, NRANKS, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, 0xffffffffu, NRANKS, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, 2, NRANKS + 1, CHORUS_ERR_INVALID_ARG);
    bogus_join(a->store, SECRET, 1, NRANKS, CHORUS_ERR_IN_USE);
    return NULL;
}

static void check_results(const client_t *c)
{
    uint8_t want[BLOB_LEN];

    for (int r = 0; r < NRANKS; r++) {
        if (c[r].status != CHORUS_OK) {
            FAIL("legitimate rank %d: %s", r, chorus_status_string(c[r].status));
            continue;
        }
        for (int q = 0; q < NRANKS; q++) {
            rank_blob(q, want);
            if (memcmp(c[r].all + q * BLOB_LEN, want, BLOB_LEN) != 0)
                FAIL("legitimate rank %d got a wrong blob for rank %d", r, q);
        }
        if (memcmp(c[r].key, c[0].key, 32) != 0)
            FAIL("legitimate rank %d got another session key", r);
    }
}

/* Every idle connection must have been dropped by now: the rendezvous is over. */
static void check_idle_dropped(const attack_t *a)
{
    int kept = 0;

    for (int i = 0; i < IDLE; i++)
        kept += a->idle[i] >= 0 && expect_dropped(a->idle[i]) == -1;
    if (kept)
        FAIL("%d idle connections still open after the rendezvous", kept);
}

typedef void *(*attack_fn)(void *);

int attack_world_main(int from_parent, int to_parent)
{
    static const attack_fn attacks[] = {attack_scan, attack_garbage, attack_wrong_secret,
                                        attack_replay, attack_idle, attack_lengths,
                                        attack_rank_counts};
    enum { NATTACKS = sizeof(attacks) / sizeof(attacks[0]) };
    char store[CHORUS_SOCK_ADDR_MAX], line[64];
    pthread_t threads[NATTACKS];
    client_t clients[NRANKS];
    attack_t a = {.store = store};
    relay_t relay = {.listen_fd = -1};
    double deadline = chorus__now() + 10;

    report_fd = to_parent;
    if (attack_read_line(from_parent, store, sizeof(store), deadline) != 0)
        return 92;
    snprintf(relay.store, sizeof(relay.store), "%s", store);
    if (chorus__sock_listen("127.0.0.1:0", 4, &relay.listen_fd, relay.addr,
                            sizeof(relay.addr)) != CHORUS_OK ||
        pthread_create(&relay.thread, NULL, relay_main, &relay) != 0)
        return 93;
    a.relay = &relay;

    /* Rank 0 through the relay, rank 1 directly; the parent confirms both joined. */
    client_spawn(&clients[0], relay.addr, SECRET, 0);
    client_spawn(&clients[1], store, SECRET, 1);
    while (atomic_load(&relay.nsent) < HELLO_BYTES + JOIN_BYTES && chorus__now() < deadline)
        usleep(2000);
    say("joining");
    if (attack_read_line(from_parent, line, sizeof(line), chorus__now() + 15) != 0 ||
        strcmp(line, "attack") != 0)
        return 94;

    say("attack-start");
    for (int i = 0; i < NATTACKS; i++) {
        if (pthread_create(&threads[i], NULL, attacks[i], &a) != 0)
            return 95;
    }
    for (int i = 0; i < NATTACKS; i++)
        pthread_join(threads[i], NULL);
    say("attack-end");
    if (attack_read_line(from_parent, line, sizeof(line), chorus__now() + 15) != 0 ||
        strcmp(line, "go") != 0)
        return 96;

    client_spawn(&clients[2], store, SECRET, 2);
    client_spawn(&clients[3], store, SECRET, 3);
    for (int r = 0; r < NRANKS; r++)
        pthread_join(clients[r].thread, NULL);
    pthread_join(relay.thread, NULL);
    close(relay.listen_fd);
    check_results(clients);
    check_idle_dropped(&a);
    say("done %d", atomic_load(&failures));
    return 0;
}
