/*
 * Bootstrap rendezvous: SHA-256/HMAC against published vectors, a real
 * rendezvous over 127.0.0.1, and every refusal the store and the client make.
 * Hostile peers are played by raw sockets speaking (or mangling) the wire
 * format documented in core/bootstrap.h.
 */
#include <criterion/criterion.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "util/config.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"

#define SECRET     "correct horse battery staple"
#define SECRET_LEN (sizeof(SECRET) - 1)
#define BLOB_LEN   24
#define MAX_RANKS  8

/*
 * log.c reads its level through config.c, which lists every table; a
 * standalone build of this test has none. Weak, so the library's list wins.
 */

/* ---- Helpers --------------------------------------------------------------------- */

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static void expect_sha(const void *data, size_t len, const char *want)
{
    uint8_t md[32];
    char text[65];

    chorus__sha256(data, len, md);
    hex(md, 32, text);
    cr_expect_str_eq(text, want, "sha256 of %zu bytes", len);
}

static void expect_hmac(const void *key, size_t key_len, const void *msg, size_t msg_len,
                        const char *want)
{
    uint8_t md[32];
    char text[65];

    chorus__hmac_sha256(key, key_len, msg, msg_len, md);
    hex(md, 32, text);
    cr_expect_str_eq(text, want, "hmac with a %zu-byte key", key_len);
}

static void rank_blob(int rank, uint8_t *blob)
{
    for (int i = 0; i < BLOB_LEN; i++)
        blob[i] = (uint8_t)(rank * 31 + i * 7 + 1);
}

typedef struct {
    char addr[CHORUS_SOCK_ADDR_MAX];
    const char *secret;
    int rank, size;
    double timeout_s, report_s;
    uint8_t blob[BLOB_LEN];
    uint8_t all[MAX_RANKS * BLOB_LEN];
    uint8_t key[32];
    char host[64];
    chorus_status_t status;
    pthread_t thread;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;

    const chorus__boot_client_params_t p = {
        .addr = c->addr, .secret = c->secret, .secret_len = strlen(c->secret),
        .rank = c->rank, .size = c->size, .timeout_s = c->timeout_s, .report_s = c->report_s};

    c->status = chorus__bootstrap_exchange(&p, c->blob, BLOB_LEN, c->all, c->key, c->host,
                                           sizeof(c->host));
    return NULL;
}

static void client_init(client_t *c, const char *addr, int rank, int size, double timeout_s)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    c->secret = SECRET;
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s;
    c->status = CHORUS_ERR_INTERNAL;
    rank_blob(rank, c->blob);
}

static void client_spawn(client_t *c, const char *addr, int rank, int size, double timeout_s)
{
    client_init(c, addr, rank, size, timeout_s);
    cr_assert_eq(pthread_create(&c->thread, NULL, client_main, c), 0);
}

/* Checks one finished rank: status, every rank's blob in rank order, the key. */
static void expect_result(const client_t *c, const uint8_t key[32])
{
    uint8_t want[BLOB_LEN];

    cr_assert_eq(c->status, CHORUS_OK, "rank %d returned %d", c->rank, c->status);
    for (int r = 0; r < c->size; r++) {
        rank_blob(r, want);
        cr_expect_arr_eq(c->all + r * BLOB_LEN, want, BLOB_LEN, "rank %d sees rank %d's blob",
                         c->rank, r);
    }
    cr_expect_arr_eq(c->key, key, 32, "rank %d has another session key", c->rank);
    cr_expect_str_eq(c->host, "127.0.0.1");
}

static chorus__store_t *store_begin(double timeout_s, char *addr)
{
    chorus__store_t *store = NULL;

    cr_assert_eq(chorus__store_start("127.0.0.1:0", SECRET, SECRET_LEN, timeout_s, 0, addr,
                                     CHORUS_SOCK_ADDR_MAX, &store), CHORUS_OK);
    cr_assert_not_null(store);
    cr_assert(strncmp(addr, "127.0.0.1:", 10) == 0 && strcmp(addr, "127.0.0.1:0") != 0,
              "bound address %s", addr);
    return store;
}

static void wait_joined(chorus__store_t *store, int n)
{
    double deadline = chorus__now() + 10;

    while (chorus__store_joined(store) != n && chorus__now() < deadline)
        usleep(2000);
    cr_assert_eq(chorus__store_joined(store), n, "ranks joined");
}

/* Runs ranks [first, size) to completion and checks everyone, ranks before first included. */
static void finish_rendezvous(chorus__store_t *store, const char *addr, client_t *clients,
                              int first, int size)
{
    for (int r = first; r < size; r++)
        client_spawn(&clients[r], addr, r, size, 10);
    for (int r = 0; r < size; r++)
        pthread_join(clients[r].thread, NULL);
    cr_assert_eq(chorus__store_join(store), CHORUS_OK);
    for (int r = 0; r < size; r++)
        expect_result(&clients[r], clients[0].key);
}

/* ---- Raw peers --------------------------------------------------------------------- */

static void header(uint8_t *p, unsigned type, uint32_t len)
{
    chorus__boot_put_u32(p, CHORUS_BOOT_MAGIC);
    p[4] = 0;
    p[5] = CHORUS_BOOT_VERSION;
    p[6] = 0;
    p[7] = (uint8_t)type;
    chorus__boot_put_u32(p + 8, len);
}

/* HMAC(SECRET, label Nc Ns extra), built the obvious way to cross-check the library. */
static void label_mac(const char *secret, const char *label, const uint8_t *nc,
                      const uint8_t *ns, const void *extra, size_t extra_len, uint8_t *out)
{
    uint8_t msg[64 + 64 + 8 + BLOB_LEN + 64];
    size_t n = strlen(label);

    memcpy(msg, label, n);
    memcpy(msg + n, nc, 32);
    memcpy(msg + n + 32, ns, 32);
    if (extra_len > 0)
        memcpy(msg + n + 64, extra, extra_len);
    chorus__hmac_sha256(secret, strlen(secret), msg, n + 64 + extra_len, out);
}

typedef struct {
    int fd;
    uint8_t nc[32], ns[32];
} raw_t;

static void raw_connect(raw_t *r, const char *addr)
{
    cr_assert_eq(chorus__sock_connect(addr, chorus__now() + 5, &r->fd), CHORUS_OK);
}

static void raw_send(raw_t *r, const void *buf, size_t len)
{
    cr_assert_eq(chorus__sock_write_full(r->fd, buf, len, chorus__now() + 5), CHORUS_OK);
}

/* HELLO, then a CHALLENGE whose proof must verify with the real secret. */
static void raw_hello(raw_t *r, const uint8_t *nc)
{
    uint8_t msg[CHORUS_BOOT_HEADER + 64], proof[32];

    memcpy(r->nc, nc, 32);
    header(msg, CHORUS_BOOT_HELLO, 32);
    memcpy(msg + CHORUS_BOOT_HEADER, nc, 32);
    raw_send(r, msg, CHORUS_BOOT_HEADER + 32);
    cr_assert_eq(chorus__sock_read_full(r->fd, msg, sizeof(msg), chorus__now() + 5), CHORUS_OK);
    cr_assert_eq(chorus__boot_get_u32(msg), CHORUS_BOOT_MAGIC);
    cr_assert_eq(msg[7], CHORUS_BOOT_CHALLENGE);
    cr_assert_eq(chorus__boot_get_u32(msg + 8), 64);
    memcpy(r->ns, msg + CHORUS_BOOT_HEADER, 32);
    label_mac(SECRET, CHORUS_BOOT_LABEL_STORE, r->nc, r->ns, NULL, 0, proof);
    cr_assert_arr_eq(msg + CHORUS_BOOT_HEADER + 32, proof, 32, "store proof");
}

/* Builds a JOIN for (rank, size) with the given secret; returns its length. */
static size_t raw_join_msg(const raw_t *r, const char *secret, uint32_t rank, uint32_t size,
                           uint8_t *msg)
{
    uint8_t *body = msg + CHORUS_BOOT_HEADER + 32;

    header(msg, CHORUS_BOOT_JOIN, 32 + 8 + BLOB_LEN);
    chorus__boot_put_u32(body, rank);
    chorus__boot_put_u32(body + 4, size);
    rank_blob((int)rank, body + 8);
    label_mac(secret, CHORUS_BOOT_LABEL_CLIENT, r->nc, r->ns, body, 8 + BLOB_LEN,
              msg + CHORUS_BOOT_HEADER);
    return CHORUS_BOOT_HEADER + 32 + 8 + BLOB_LEN;
}

/*
 * Waits for the store to drop the connection. Returns the code of the ERROR
 * it sent first (a positive status number), or 0 when it closed without one.
 */
static uint32_t raw_expect_dropped(raw_t *r, char *text, size_t text_len)
{
    uint8_t hdr[CHORUS_BOOT_HEADER], payload[4 + CHORUS_BOOT_ERROR_TEXT_MAX], byte;
    chorus_status_t status;
    uint32_t code = 0, len;

    if (text)
        text[0] = '\0';
    status = chorus__sock_read_full(r->fd, hdr, sizeof(hdr), chorus__now() + 8);
    cr_assert_neq(status, CHORUS_ERR_TIMEOUT, "the store kept the connection open");
    if (status == CHORUS_OK) {
        cr_assert_eq(chorus__boot_get_u32(hdr), CHORUS_BOOT_MAGIC);
        cr_assert_eq(hdr[7], CHORUS_BOOT_ERROR);
        len = chorus__boot_get_u32(hdr + 8);
        cr_assert(len >= 4 && len <= sizeof(payload), "error length %u", len);
        cr_assert_eq(chorus__sock_read_full(r->fd, payload, len, chorus__now() + 5),
                     CHORUS_OK);
        code = chorus__boot_get_u32(payload);
        if (text)
            snprintf(text, text_len, "%.*s", (int)(len - 4), (char *)payload + 4);
        status = chorus__sock_read_full(r->fd, &byte, 1, chorus__now() + 8);
    }
    cr_assert_eq(status, CHORUS_ERR_PEER_FAILED, "the store did not close the connection");
    close(r->fd);
    return code;
}

/* ---- SHA-256 and HMAC ------------------------------------------------------------ */

Test(sha256, fips_180_vectors)
{
    static const char two_block[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    char *million = malloc(1000000);

    expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_sha(two_block, strlen(two_block),
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    memset(million, 'a', 1000000);
    expect_sha(million, 1000000,
               "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

Test(sha256, updates_in_pieces_match_one_shot)
{
    uint8_t data[300], whole[32], pieces[32];
    chorus__sha256_t ctx;
    size_t off = 0, step = 1;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 13);
    chorus__sha256(data, sizeof(data), whole);
    chorus__sha256_init(&ctx);
    while (off < sizeof(data)) {
        size_t n = step < sizeof(data) - off ? step : sizeof(data) - off;
        chorus__sha256_update(&ctx, data + off, n);
        off += n;
        step = step * 3 + 1;   /* 1, 4, 13, 40, 121: crosses block edges unevenly */
    }
    chorus__sha256_final(&ctx, pieces);
    cr_expect_arr_eq(pieces, whole, 32);
}

Test(hmac, rfc_4231_vectors)
{
    uint8_t k20[20], aa131[131], dd50[50], cd50[50], k25[25];

    memset(k20, 0x0b, sizeof(k20));
    expect_hmac(k20, 20, "Hi There", 8,
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    expect_hmac("Jefe", 4, "what do ya want for nothing?", 28,
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(k20, 0xaa, sizeof(k20));
    memset(dd50, 0xdd, sizeof(dd50));
    expect_hmac(k20, 20, dd50, 50,
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    memset(cd50, 0xcd, sizeof(cd50));
    expect_hmac(k25, 25, cd50, 50,
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(aa131, 0xaa, sizeof(aa131));
    expect_hmac(aa131, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    expect_hmac(aa131, 131,
                "This is a test using a larger than block-size key and a larger than "
                "block-size data. The key needs to be hashed before being used by the HMAC "
                "algorithm.", 152,
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

Test(hmac, compare_and_random)
{
    uint8_t a[32], b[32];

    memset(a, 7, sizeof(a));
    memcpy(b, a, sizeof(b));
    cr_expect_eq(chorus__mac_equal(a, b, 32), 1);
    b[31] ^= 0x80;
    cr_expect_eq(chorus__mac_equal(a, b, 32), 0);
    b[31] ^= 0x80;
    b[0] ^= 1;
    cr_expect_eq(chorus__mac_equal(a, b, 32), 0);
    cr_assert_eq(chorus__random_bytes(a, sizeof(a)), CHORUS_OK);
    cr_assert_eq(chorus__random_bytes(b, sizeof(b)), CHORUS_OK);
    cr_expect_eq(chorus__mac_equal(a, b, 32), 0, "two random draws are equal");
}

/* ---- Addresses --------------------------------------------------------------------- */

Test(sock, parse_addresses)
{
    char host[CHORUS_SOCK_HOST_MAX];
    int port = -1;

    cr_expect_eq(chorus__sock_parse_addr("127.0.0.1:29500", host, sizeof(host), &port),
                 CHORUS_OK);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect_eq(port, 29500);
    cr_expect_eq(chorus__sock_parse_addr("[fe80::1%eth0]:0", host, sizeof(host), &port),
                 CHORUS_OK);
    cr_expect_str_eq(host, "fe80::1%eth0");
    cr_expect_eq(port, 0);
    cr_expect_eq(chorus__sock_parse_addr("node-7.cluster:65535", host, sizeof(host), &port),
                 CHORUS_OK);
    cr_expect_eq(port, 65535);
    static const char *const bad[] = {"127.0.0.1", "127.0.0.1:65536", "::1:80", ":80",
                                      "[::1]80", "[::1]:", "host:8o", "host:-1", "[]:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(chorus__sock_parse_addr(bad[i], host, sizeof(host), &port),
                     CHORUS_ERR_INVALID_ARG, "'%s' accepted", bad[i]);
}

Test(sock, listen_reports_bound_address)
{
    char bound[CHORUS_SOCK_ADDR_MAX];
    int fd;

    cr_assert_eq(chorus__sock_listen("127.0.0.1:0", 4, &fd, bound, sizeof(bound)), CHORUS_OK);
    cr_expect(strncmp(bound, "127.0.0.1:", 10) == 0 && atoi(bound + 10) > 0, "%s", bound);
    close(fd);
    /* IPv6 loopback, when this machine has it. */
    if (chorus__sock_listen("[::1]:0", 4, &fd, bound, sizeof(bound)) == CHORUS_OK) {
        cr_expect(strncmp(bound, "[::1]:", 6) == 0, "%s", bound);
        close(fd);
    }
}

/* ---- Rendezvous -------------------------------------------------------------------- */

Test(bootstrap, five_ranks, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[5];
    uint8_t zero[32] = {0};

    finish_rendezvous(store, addr, clients, 0, 5);
    cr_expect(!chorus__mac_equal(clients[0].key, zero, 32), "session key is all zero");
}

Test(bootstrap, single_rank_and_detached_store, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = (chorus__store_t *)&addr;   /* must be overwritten */
    client_t c;

    cr_assert_eq(chorus__store_start("127.0.0.1:0", SECRET, SECRET_LEN, 10, 1, addr,
                                     sizeof(addr), &store), CHORUS_OK);
    cr_expect_null(store);
    client_init(&c, addr, 0, 1, 10);
    client_main(&c);
    expect_result(&c, c.key);
}

Test(bootstrap, store_starts_after_clients, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store;
    client_t clients[2];
    int fd;

    /* Learn a free port, release it, and let the clients retry until the store is up. */
    cr_assert_eq(chorus__sock_listen("127.0.0.1:0", 1, &fd, addr, sizeof(addr)), CHORUS_OK);
    close(fd);
    client_spawn(&clients[0], addr, 0, 2, 10);
    client_spawn(&clients[1], addr, 1, 2, 10);
    usleep(300 * 1000);
    /* A store on a known address need not report it back. */
    cr_assert_eq(chorus__store_start(addr, SECRET, SECRET_LEN, 10, 0, NULL, 0, &store),
                 CHORUS_OK);
    for (int r = 0; r < 2; r++)
        pthread_join(clients[r].thread, NULL);
    cr_assert_eq(chorus__store_join(store), CHORUS_OK);
    for (int r = 0; r < 2; r++)
        expect_result(&clients[r], clients[0].key);
}

Test(bootstrap, wrong_secret_refused, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX], text[256];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[3], intruder;
    uint8_t msg[256], nc[32] = {1};
    raw_t raw;

    client_spawn(&clients[0], addr, 0, 3, 10);
    client_spawn(&clients[1], addr, 1, 3, 10);
    wait_joined(store, 2);

    /* A rank with another secret: the store cannot prove itself to it. */
    client_init(&intruder, addr, 2, 3, 5);
    intruder.secret = "wrong secret";
    client_main(&intruder);
    cr_expect_eq(intruder.status, CHORUS_ERR_AUTH);

    /* A peer that skips checking the store and sends a JOIN made with a wrong secret. */
    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, "wrong secret", 2, 3, msg));
    cr_expect_eq(raw_expect_dropped(&raw, text, sizeof(text)), -CHORUS_ERR_AUTH);
    cr_expect(strstr(text, "authentication failed") != NULL, "text: %s", text);
    cr_expect_eq(chorus__store_joined(store), 2);

    finish_rendezvous(store, addr, clients, 2, 3);
}

/* A JOIN with a wrong secret, from a raw peer, claiming (rank, size); returns the ERROR code. */
static uint32_t stranger_claims(const char *addr, uint32_t rank, uint32_t size)
{
    uint8_t msg[256], nc[32] = {7};
    raw_t raw;

    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, "wrong secret", rank, size, msg));
    return raw_expect_dropped(&raw, NULL, 0);
}

/* The grace after a refusal, for a store with a 10 s timeout. */
#define GRACE_10S 1.0

/*
 * A stranger claiming a rank that has joined cannot stop the rendezvous,
 * however long the others take after it.
 */
Test(bootstrap, stranger_claiming_a_joined_rank_stops_nothing, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[3];

    client_spawn(&clients[0], addr, 0, 3, 10);
    client_spawn(&clients[1], addr, 1, 3, 10);
    wait_joined(store, 2);
    cr_expect_eq(stranger_claims(addr, 1, 3), -CHORUS_ERR_AUTH);
    usleep((useconds_t)((GRACE_10S + 0.5) * 1e6));
    cr_expect_eq(chorus__store_joined(store), 2, "the store dropped a joined rank");
    finish_rendezvous(store, addr, clients, 2, 3);
}

/*
 * A stranger claiming the missing rank: if that rank is still missing after
 * the grace, every joined rank fails with CHORUS_ERR_AUTH at once rather than
 * at the timeout.
 */
Test(bootstrap, refused_claim_of_a_missing_rank_fails_the_others_after_the_grace,
     .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[2];
    double start;

    client_spawn(&clients[0], addr, 0, 3, 10);
    client_spawn(&clients[1], addr, 1, 3, 10);
    wait_joined(store, 2);
    start = chorus__now();
    cr_expect_eq(stranger_claims(addr, 2, 3), -CHORUS_ERR_AUTH);
    for (int r = 0; r < 2; r++) {
        pthread_join(clients[r].thread, NULL);
        cr_expect_eq(clients[r].status, CHORUS_ERR_AUTH, "rank %d returned %d", r,
                     clients[r].status);
    }
    cr_expect_lt(chorus__now() - start, GRACE_10S + 1.5, "the ranks waited %.1f s",
                 chorus__now() - start);
    cr_expect_geq(chorus__now() - start, GRACE_10S - 0.1, "the ranks did not wait the grace");
    cr_expect_eq(chorus__store_join(store), CHORUS_ERR_AUTH);
}

Test(bootstrap, replayed_join_refused, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    uint8_t nc[32], join[256], hdr[CHORUS_BOOT_HEADER], head[64], blobs[3 * BLOB_LEN];
    uint8_t digest[32], mac[32], extra[64], pad[32], key[32], want[BLOB_LEN];
    client_t clients[3];
    raw_t first, replay;
    size_t join_len;

    /* An honest raw rank 0; an eavesdropper replays its JOIN on a new connection. */
    memset(nc, 0x5a, sizeof(nc));
    raw_connect(&first, addr);
    raw_hello(&first, nc);
    join_len = raw_join_msg(&first, SECRET, 0, 3, join);
    raw_send(&first, join, join_len);
    wait_joined(store, 1);
    raw_connect(&replay, addr);
    raw_hello(&replay, nc);
    cr_assert(!chorus__mac_equal(first.ns, replay.ns, 32), "store reused its nonce");
    /* Had the store accepted it, rank 0 would be refused as a duplicate, not as AUTH. */
    raw_send(&replay, join, join_len);
    cr_expect_eq(raw_expect_dropped(&replay, NULL, 0), -CHORUS_ERR_AUTH);

    client_spawn(&clients[1], addr, 1, 3, 10);
    client_spawn(&clients[2], addr, 2, 3, 10);
    for (int r = 1; r < 3; r++) {
        pthread_join(clients[r].thread, NULL);
        expect_result(&clients[r], clients[1].key);
    }

    /* The honest raw rank checks its RESULT by the documented format. */
    cr_assert_eq(chorus__sock_read_full(first.fd, hdr, sizeof(hdr), chorus__now() + 5),
                 CHORUS_OK);
    cr_assert_eq(hdr[7], CHORUS_BOOT_RESULT);
    cr_assert_eq(chorus__boot_get_u32(hdr + 8), 64 + sizeof(blobs));
    cr_assert_eq(chorus__sock_read_full(first.fd, head, 64, chorus__now() + 5), CHORUS_OK);
    cr_assert_eq(chorus__sock_read_full(first.fd, blobs, sizeof(blobs), chorus__now() + 5),
                 CHORUS_OK);
    close(first.fd);
    for (int r = 0; r < 3; r++) {
        rank_blob(r, want);
        cr_expect_arr_eq(blobs + r * BLOB_LEN, want, BLOB_LEN);
    }
    chorus__sha256(blobs, sizeof(blobs), digest);
    memcpy(extra, head, 32);
    memcpy(extra + 32, digest, 32);
    label_mac(SECRET, CHORUS_BOOT_LABEL_RESULT, first.nc, first.ns, extra, 64, mac);
    cr_expect_arr_eq(head + 32, mac, 32, "result MAC");
    label_mac(SECRET, CHORUS_BOOT_LABEL_KEY, first.nc, first.ns, NULL, 0, pad);
    for (int i = 0; i < 32; i++)
        key[i] = head[i] ^ pad[i];
    cr_expect_arr_eq(key, clients[1].key, 32, "session key of the raw rank");
    cr_expect_eq(chorus__store_join(store), CHORUS_OK);
}

Test(bootstrap, oversized_lengths_refused_by_store, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    uint8_t msg[CHORUS_BOOT_HEADER], nc[32] = {9};
    client_t clients[2];
    raw_t a, b;

    /* A HELLO that claims 4 GiB. */
    raw_connect(&a, addr);
    header(msg, CHORUS_BOOT_HELLO, 0xffffffffu);
    raw_send(&a, msg, sizeof(msg));
    cr_expect_eq(raw_expect_dropped(&a, NULL, 0), -CHORUS_ERR_PROTOCOL);

    /* A JOIN one byte longer than the largest address allows. */
    raw_connect(&b, addr);
    raw_hello(&b, nc);
    header(msg, CHORUS_BOOT_JOIN, 32 + 8 + CHORUS_BOOT_BLOB_MAX + 1);
    raw_send(&b, msg, sizeof(msg));
    cr_expect_eq(raw_expect_dropped(&b, NULL, 0), -CHORUS_ERR_PROTOCOL);

    finish_rendezvous(store, addr, clients, 0, 2);
}

Test(bootstrap, garbage_refused_by_store, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    uint8_t junk[4096];
    client_t clients[2];
    raw_t a;
    uint32_t code;

    client_spawn(&clients[0], addr, 0, 2, 10);
    cr_assert_eq(chorus__random_bytes(junk, sizeof(junk)), CHORUS_OK);
    raw_connect(&a, addr);
    raw_send(&a, junk, sizeof(junk));
    /* Unread junk may turn the close into a reset that discards the error message. */
    code = raw_expect_dropped(&a, NULL, 0);
    cr_expect(code == 0 || code == (uint32_t)-CHORUS_ERR_PROTOCOL, "code %u", code);
    finish_rendezvous(store, addr, clients, 1, 2);
}

Test(bootstrap, duplicate_rank_refused, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX], text[256];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[3], dup;
    uint8_t msg[256], nc[32] = {3};
    raw_t raw;

    client_spawn(&clients[0], addr, 0, 3, 10);
    client_spawn(&clients[1], addr, 1, 3, 10);
    wait_joined(store, 2);
    client_init(&dup, addr, 1, 3, 5);
    client_main(&dup);
    cr_expect_eq(dup.status, CHORUS_ERR_IN_USE);

    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, SECRET, 0, 3, msg));
    cr_expect_eq(raw_expect_dropped(&raw, text, sizeof(text)), -CHORUS_ERR_IN_USE);
    cr_expect(strstr(text, "rank 0 already joined") != NULL, "text: %s", text);

    finish_rendezvous(store, addr, clients, 2, 3);
}

Test(bootstrap, rank_out_of_range_refused, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX], text[256];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[3], bad;
    uint8_t msg[256], nc[32] = {4};
    raw_t raw;

    /* Caught before any connection... */
    client_init(&bad, addr, 3, 3, 5);
    client_main(&bad);
    cr_expect_eq(bad.status, CHORUS_ERR_INVALID_ARG);
    bad.rank = -1;
    client_main(&bad);
    cr_expect_eq(bad.status, CHORUS_ERR_INVALID_ARG);

    /* ...and by the store, should a peer send one anyway. */
    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, SECRET, 7, 3, msg));
    cr_expect_eq(raw_expect_dropped(&raw, text, sizeof(text)), -CHORUS_ERR_INVALID_ARG);
    cr_expect(strstr(text, "rank 7 is out of range for size 3") != NULL, "text: %s", text);
    cr_expect_eq(chorus__store_joined(store), 0);

    finish_rendezvous(store, addr, clients, 0, 3);
}

Test(bootstrap, size_mismatch_refused, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX], text[256];
    chorus__store_t *store = store_begin(10, addr);
    client_t clients[3], bad;
    uint8_t msg[256], nc[32] = {5};
    raw_t raw;

    client_spawn(&clients[0], addr, 0, 3, 10);
    wait_joined(store, 1);
    client_init(&bad, addr, 1, 4, 5);
    client_main(&bad);
    cr_expect_eq(bad.status, CHORUS_ERR_INVALID_ARG);

    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, SECRET, 2, 5, msg));
    cr_expect_eq(raw_expect_dropped(&raw, text, sizeof(text)), -CHORUS_ERR_INVALID_ARG);
    cr_expect(strstr(text, "size 5, which disagrees with size 3") != NULL, "text: %s", text);

    finish_rendezvous(store, addr, clients, 1, 3);
}

Test(bootstrap, missing_rank_times_out, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(1.0, addr);
    client_t clients[2];
    double start = chorus__now(), elapsed;

    client_spawn(&clients[0], addr, 0, 3, 5);
    client_spawn(&clients[1], addr, 1, 3, 5);
    for (int r = 0; r < 2; r++)
        pthread_join(clients[r].thread, NULL);
    cr_expect_eq(chorus__store_join(store), CHORUS_ERR_TIMEOUT);
    elapsed = chorus__now() - start;
    for (int r = 0; r < 2; r++)
        cr_expect_eq(clients[r].status, CHORUS_ERR_TIMEOUT, "rank %d", r);
    cr_expect(elapsed >= 0.9 && elapsed < 3.0, "took %.2f s", elapsed);
}

Test(bootstrap, no_store_times_out, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    client_t c;
    double start;
    int fd;

    cr_assert_eq(chorus__sock_listen("127.0.0.1:0", 1, &fd, addr, sizeof(addr)), CHORUS_OK);
    close(fd);
    client_init(&c, addr, 0, 2, 0.5);
    start = chorus__now();
    client_main(&c);
    cr_expect_eq(c.status, CHORUS_ERR_TIMEOUT);
    cr_expect(chorus__now() - start >= 0.45 && chorus__now() - start < 2.0);
}

Test(bootstrap, idle_connection_dropped, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(8, addr);   /* idle limit: 8 / 4 = 2 s */
    client_t clients[2];
    double start = chorus__now(), elapsed;
    raw_t idle;

    raw_connect(&idle, addr);
    cr_expect_eq(raw_expect_dropped(&idle, NULL, 0), -CHORUS_ERR_TIMEOUT);
    elapsed = chorus__now() - start;
    cr_expect(elapsed >= 1.8 && elapsed < 5.0, "dropped after %.2f s", elapsed);
    finish_rendezvous(store, addr, clients, 0, 2);
}

Test(bootstrap, many_idle_connections_do_not_block, .timeout = 60)
{
    enum { IDLE = 300 };
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(8, addr);
    client_t clients[3];
    double start;
    raw_t *idle = calloc(IDLE, sizeof(*idle));
    uint8_t hello[CHORUS_BOOT_HEADER];

    /* More idle peers than the store admits at once, some stalled mid-header. */
    header(hello, CHORUS_BOOT_HELLO, 32);
    for (int i = 0; i < IDLE; i++) {
        raw_connect(&idle[i], addr);
        if (i % 2)
            raw_send(&idle[i], hello, 6);
    }
    start = chorus__now();
    finish_rendezvous(store, addr, clients, 0, 3);
    cr_expect(chorus__now() - start < 6.0, "took %.2f s", chorus__now() - start);
    for (int i = 0; i < IDLE; i++)
        close(idle[i].fd);
    free(idle);
}

Test(bootstrap, rank_that_leaves_can_rejoin, .timeout = 30)
{
    char addr[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *store = store_begin(10, addr);
    uint8_t msg[256], nc[32] = {6};
    client_t clients[2];
    raw_t raw;

    raw_connect(&raw, addr);
    raw_hello(&raw, nc);
    raw_send(&raw, msg, raw_join_msg(&raw, SECRET, 0, 2, msg));
    wait_joined(store, 1);
    close(raw.fd);
    wait_joined(store, 0);
    finish_rendezvous(store, addr, clients, 0, 2);
}

/* ---- Hostile stores ---------------------------------------------------------------- */

typedef enum { FAKE_HUGE_CHALLENGE, FAKE_GARBAGE, FAKE_BAD_PROOF, FAKE_HUGE_RESULT } fake_mode_t;

typedef struct {
    int listen_fd;
    fake_mode_t mode;
    pthread_t thread;
} fake_store_t;

static void *fake_store_main(void *arg)
{
    fake_store_t *f = arg;
    struct pollfd pfd = {.fd = f->listen_fd, .events = POLLIN};
    uint8_t in[CHORUS_BOOT_HEADER + 32], out[CHORUS_BOOT_HEADER + 64], byte;
    char peer[CHORUS_SOCK_ADDR_MAX];
    raw_t r;

    if (poll(&pfd, 1, 5000) != 1 || chorus__sock_accept(f->listen_fd, &r.fd, peer,
                                                         sizeof(peer)) != CHORUS_OK)
        return NULL;
    if (chorus__sock_read_full(r.fd, in, sizeof(in), chorus__now() + 5) != CHORUS_OK)
        goto out;
    memcpy(r.nc, in + CHORUS_BOOT_HEADER, 32);
    memset(r.ns, 0x11, 32);
    header(out, CHORUS_BOOT_CHALLENGE, 64);
    memcpy(out + CHORUS_BOOT_HEADER, r.ns, 32);
    label_mac(SECRET, CHORUS_BOOT_LABEL_STORE, r.nc, r.ns, NULL, 0, out + CHORUS_BOOT_HEADER + 32);
    if (f->mode == FAKE_HUGE_CHALLENGE)
        header(out, CHORUS_BOOT_CHALLENGE, 0xffffffffu);
    else if (f->mode == FAKE_GARBAGE)
        chorus__random_bytes(out, sizeof(out));
    else if (f->mode == FAKE_BAD_PROOF)
        out[CHORUS_BOOT_HEADER + 40] ^= 1;
    chorus__sock_write_full(r.fd, out, sizeof(out), chorus__now() + 5);
    if (f->mode == FAKE_HUGE_RESULT) {
        uint8_t join[CHORUS_BOOT_HEADER + 32 + 8 + BLOB_LEN];
        chorus__sock_read_full(r.fd, join, sizeof(join), chorus__now() + 5);
        header(out, CHORUS_BOOT_RESULT, 0xffffffffu);
        chorus__sock_write_full(r.fd, out, CHORUS_BOOT_HEADER, chorus__now() + 5);
    }
    /* Hold the connection until the client gives up on it. */
    chorus__sock_read_full(r.fd, &byte, 1, chorus__now() + 5);
out:
    close(r.fd);
    return NULL;
}

static chorus_status_t against_fake_store(fake_mode_t mode)
{
    fake_store_t f = {.mode = mode};
    char addr[CHORUS_SOCK_ADDR_MAX];
    client_t c;
    double start;

    cr_assert_eq(chorus__sock_listen("127.0.0.1:0", 4, &f.listen_fd, addr, sizeof(addr)),
                 CHORUS_OK);
    cr_assert_eq(pthread_create(&f.thread, NULL, fake_store_main, &f), 0);
    client_init(&c, addr, 0, 2, 4);
    start = chorus__now();
    client_main(&c);
    cr_expect(chorus__now() - start < 2.0, "client took %.2f s to refuse",
              chorus__now() - start);
    pthread_join(f.thread, NULL);
    close(f.listen_fd);
    return c.status;
}

Test(bootstrap_client, oversized_challenge_refused, .timeout = 30)
{
    cr_expect_eq(against_fake_store(FAKE_HUGE_CHALLENGE), CHORUS_ERR_PROTOCOL);
}

Test(bootstrap_client, oversized_result_refused, .timeout = 30)
{
    cr_expect_eq(against_fake_store(FAKE_HUGE_RESULT), CHORUS_ERR_PROTOCOL);
}

Test(bootstrap_client, garbage_refused, .timeout = 30)
{
    cr_expect_eq(against_fake_store(FAKE_GARBAGE), CHORUS_ERR_PROTOCOL);
}

Test(bootstrap_client, store_without_secret_refused, .timeout = 30)
{
    cr_expect_eq(against_fake_store(FAKE_BAD_PROOF), CHORUS_ERR_AUTH);
}

/* The exchange with one field of an otherwise valid client changed. */
static chorus_status_t exchange_with(chorus__boot_client_params_t p, size_t blob_len)
{
    static uint8_t blob[CHORUS_BOOT_BLOB_MAX + 1], all[2 * (CHORUS_BOOT_BLOB_MAX + 1)];
    uint8_t key[32];

    return chorus__bootstrap_exchange(&p, blob, blob_len, all, key, NULL, 0);
}

Test(bootstrap_client, bad_arguments, .timeout = 30)
{
    const chorus__boot_client_params_t ok = {.addr = "127.0.0.1:1", .secret = SECRET,
                                             .secret_len = SECRET_LEN, .rank = 0, .size = 2,
                                             .timeout_s = 1};
    chorus__boot_client_params_t p;
    uint8_t blob[8] = {0}, all[16], key[32];

    cr_expect_eq(chorus__bootstrap_exchange(NULL, blob, 8, all, key, NULL, 0),
                 CHORUS_ERR_INVALID_ARG);
    p = ok, p.secret_len = 0;
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
    p = ok, p.size = 0;
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
    p = ok, p.size = (1 << 20) + 1;
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(exchange_with(ok, CHORUS_BOOT_BLOB_MAX + 1), CHORUS_ERR_INVALID_ARG);
    p = ok, p.size = 1 << 20;
    cr_expect_eq(exchange_with(p, 2048), CHORUS_ERR_INVALID_ARG, "2 GiB of addresses in all");
    p = ok, p.timeout_s = 0;
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
    p = ok, p.report_s = -1;
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
    p = ok, p.addr = "127.0.0.1";
    cr_expect_eq(exchange_with(p, 8), CHORUS_ERR_INVALID_ARG);
}
