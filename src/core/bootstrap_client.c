/* The bootstrap logs as its own component, although it is built with the core. */
#undef CHORUS_LOG_COMPONENT
#define CHORUS_LOG_COMPONENT CHORUS_LOG_COMP_BOOTSTRAP
/*
 * Bootstrap client: one rank's side of the rendezvous (wire format in
 * bootstrap.h). While it waits for the others it asks the store who has
 * joined, every report_s seconds and once shortly before its deadline, so
 * that its progress reports and its timeout name ranks as the store sees them;
 * before the store accepts it at all, it reports that instead.
 */
#include "core/bootstrap.h"

#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/rank_set.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"
#include "core/bootstrap_wire.h"

/* The store is asked one last time this long before the deadline (at most a tenth of it). */
#define CLIENT_LAST_QUERY_S 1.0

typedef struct {
    const char *addr;
    const uint8_t *secret;
    size_t secret_len;
    int fd, rank, size;
    double timeout_s, report_s, started, deadline;
    double next_report;         /* when to say again that this rank waits (INFINITY: never) */
    uint8_t nc[CHORUS_BOOT_NONCE], ns[CHORUS_BOOT_NONCE];
    /* Status queries: the last sent, the one sent before the deadline (0: none yet). */
    uint32_t query_seq, last_query_seq;
    /* The store's last answer: who had joined, and when this rank heard it (0: never). */
    uint8_t *joined;
    double heard_at;
} boot_client_t;

static chorus__boot_keys_t client_keys(const boot_client_t *cl)
{
    return (chorus__boot_keys_t){.secret = cl->secret, .secret_len = cl->secret_len,
                                 .nc = cl->nc, .ns = cl->ns};
}

/* Names the step that failed when the transfer timed out or the store went away. */
static chorus_status_t client_io_fail(const boot_client_t *cl, chorus_status_t status,
                                      const char *step)
{
    if (status == CHORUS_ERR_TIMEOUT)
        chorus_error("rank %d: timed out after %.1f s %s the bootstrap store at %s", cl->rank,
                     cl->timeout_s, step, cl->addr);
    else if (status == CHORUS_ERR_PEER_FAILED)
        chorus_error("rank %d: the bootstrap store at %s closed the connection while %s it",
                     cl->rank, cl->addr, step);
    return status;
}

/* Reads an ERROR payload and returns the status it carries, logging its text. */
static chorus_status_t client_read_error(const boot_client_t *cl, uint32_t len)
{
    uint8_t msg[CHORUS_BOOT_ERROR_MAX];
    char text[CHORUS_BOOT_ERROR_TEXT_MAX + 1];
    chorus_status_t status, carried;

    if (!chorus__boot_error_len_ok(len)) {
        chorus_error("rank %d: the bootstrap store at %s sent an error message of %u bytes",
                     cl->rank, cl->addr, len);
        return CHORUS_ERR_PROTOCOL;
    }
    status = chorus__sock_read_full(cl->fd, msg, len, cl->deadline);
    if (status != CHORUS_OK)
        return client_io_fail(cl, status, "reading an error from");
    status = chorus__boot_error_decode(msg, len, &carried, text);
    if (status != CHORUS_OK)
        return status;
    chorus_error("rank %d: the bootstrap store at %s reports: %s", cl->rank, cl->addr, text);
    return carried;
}

/*
 * Reads a header that must announce `type` with a payload of exactly `len`
 * bytes; or, where status_len_p is not NULL, a STATUS: then *status_len_p is
 * its payload length (never 0), and 0 for the awaited message.
 */
static chorus_status_t client_read_header(const boot_client_t *cl, unsigned want_type,
                                          uint64_t want_len, const char *step,
                                          uint32_t *status_len_p)
{
    uint8_t raw[CHORUS_BOOT_HEADER];
    char why[CHORUS_BOOT_WHY_MAX];
    chorus__boot_hdr_t hdr;
    chorus_status_t status;

    status = chorus__sock_read_full(cl->fd, raw, sizeof(raw), cl->deadline);
    if (status != CHORUS_OK)
        return client_io_fail(cl, status, step);
    if (chorus__boot_header_decode(raw, sizeof(raw), &hdr, why, sizeof(why)) != CHORUS_OK) {
        chorus_error("rank %d: the bootstrap store at %s sent %s", cl->rank, cl->addr, why);
        return CHORUS_ERR_PROTOCOL;
    }
    if (hdr.type == CHORUS_BOOT_ERROR)
        return client_read_error(cl, hdr.len);
    if (status_len_p != NULL && hdr.type == CHORUS_BOOT_STATUS && hdr.len > 0) {
        *status_len_p = hdr.len;
        return CHORUS_OK;
    }
    if (status_len_p != NULL)
        *status_len_p = 0;
    if (chorus__boot_client_expect(&hdr, want_type, want_len) != CHORUS_OK) {
        chorus_error("rank %d: the bootstrap store at %s sent message type %u of %u bytes "
                     "while rank %d expected type %u of %llu bytes", cl->rank, cl->addr,
                     hdr.type, hdr.len, cl->rank, want_type, (unsigned long long)want_len);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}

/* HELLO and CHALLENGE: afterwards both nonces are known and the store proved the secret. */
static chorus_status_t client_handshake(boot_client_t *cl)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_CHAL_LEN];
    chorus__boot_keys_t keys = client_keys(cl);
    chorus_status_t status;
    size_t len;

    status = chorus__random_bytes(cl->nc, sizeof(cl->nc));
    if (status != CHORUS_OK)
        return status;
    len = chorus__boot_hello_encode(msg, cl->nc);
    status = chorus__sock_write_full(cl->fd, msg, len, cl->deadline);
    if (status != CHORUS_OK)
        return client_io_fail(cl, status, "greeting");
    status = client_read_header(cl, CHORUS_BOOT_CHALLENGE, CHORUS_BOOT_CHAL_LEN, "waiting for",
                                NULL);
    if (status != CHORUS_OK)
        return status;
    status = chorus__sock_read_full(cl->fd, msg, CHORUS_BOOT_CHAL_LEN, cl->deadline);
    if (status != CHORUS_OK)
        return client_io_fail(cl, status, "reading the challenge from");
    status = chorus__boot_challenge_decode(&keys, msg, CHORUS_BOOT_CHAL_LEN, cl->ns);
    if (status == CHORUS_ERR_AUTH) {
        chorus_error("rank %d: the bootstrap store at %s failed to prove it holds the job "
                     "secret (do the ranks' secrets differ?)", cl->rank, cl->addr);
        /* Say so, so that the store can name this rank at once; it proves nothing. */
        len = chorus__boot_abandon_encode(msg, (uint32_t)cl->rank, (uint32_t)cl->size);
        (void)chorus__sock_write_full(cl->fd, msg, len, fmin(cl->deadline, chorus__now() + 1));
    }
    return status;
}

static chorus_status_t client_join(boot_client_t *cl, const void *blob, size_t blob_len)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX];
    chorus__boot_keys_t keys = client_keys(cl);
    chorus_status_t status;
    size_t len;

    /* client_check_args bounded blob_len, so the encoder does not refuse it. */
    len = chorus__boot_join_encode(msg, &keys, (uint32_t)cl->rank, (uint32_t)cl->size, blob,
                                   blob_len);
    if (len == 0)
        return CHORUS_ERR_INVALID_ARG;
    status = chorus__sock_write_full(cl->fd, msg, len, cl->deadline);
    return status == CHORUS_OK ? CHORUS_OK : client_io_fail(cl, status, "joining");
}

/* Logs who has joined, as the store reported it, at the warning level. */
static void client_report(const boot_client_t *cl, double now)
{
    char joined[160], missing[160];

    chorus__rank_set_format(cl->joined, cl->size, 1, joined, sizeof(joined));
    chorus__rank_set_format(cl->joined, cl->size, 0, missing, sizeof(missing));
    chorus_warn("rank %d: waiting %.0f s at the rendezvous (store %s): %d of %d ranks joined "
                "(%s); not joined: %s", cl->rank, now - cl->started, cl->addr,
                chorus__rank_set_count(cl->joined, cl->size, 1), cl->size, joined, missing);
}

/* A STATUS whose header was read: authenticate it, keep it, report it unless it was the last. */
static chorus_status_t client_on_status(boot_client_t *cl, uint32_t len)
{
    uint64_t want = chorus__boot_status_len((uint32_t)cl->size);
    chorus__boot_keys_t keys = client_keys(cl);
    chorus__boot_status_t st;
    chorus_status_t status;
    uint8_t *msg;

    if (len != want) {
        chorus_error("rank %d: the bootstrap store at %s sent a status of %u bytes, expected "
                     "%llu", cl->rank, cl->addr, len, (unsigned long long)want);
        return CHORUS_ERR_PROTOCOL;
    }
    msg = malloc(len);
    if (msg == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = chorus__sock_read_full(cl->fd, msg, len, cl->deadline);
    if (status != CHORUS_OK) {
        free(msg);
        return client_io_fail(cl, status, "reading a status from");
    }
    status = chorus__boot_status_decode(&keys, msg, len, (uint32_t)cl->size, &st);
    if (status == CHORUS_OK && (st.seq == 0 || st.seq > cl->query_seq))
        status = CHORUS_ERR_PROTOCOL;       /* an answer to no question of ours */
    if (status != CHORUS_OK) {
        chorus_error("rank %d: a status from the bootstrap store at %s fails its %s check",
                     cl->rank, cl->addr, status == CHORUS_ERR_AUTH ? "authentication" :
                     "format");
        free(msg);
        return status;
    }
    memcpy(cl->joined, st.joined, chorus__rank_set_bytes(cl->size));
    cl->heard_at = chorus__now();
    if (st.seq != cl->last_query_seq)
        client_report(cl, cl->heard_at);
    free(msg);
    return CHORUS_OK;
}

static chorus_status_t client_query(boot_client_t *cl)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN];
    chorus__boot_keys_t keys = client_keys(cl);
    size_t len = chorus__boot_query_encode(msg, &keys, ++cl->query_seq);
    chorus_status_t status = chorus__sock_write_full(cl->fd, msg, len, cl->deadline);

    return status == CHORUS_OK ? CHORUS_OK : client_io_fail(cl, status, "asking");
}

/* The deadline passed while waiting for the others: name who had not joined, if known. */
static chorus_status_t client_timeout(const boot_client_t *cl)
{
    char missing[160];

    if (cl->heard_at == 0) {
        chorus_error("rank %d: timed out after %.1f s waiting for the other ranks at the "
                     "bootstrap store at %s, which did not say who had joined", cl->rank,
                     cl->timeout_s, cl->addr);
        return CHORUS_ERR_TIMEOUT;
    }
    chorus__rank_set_format(cl->joined, cl->size, 0, missing, sizeof(missing));
    chorus_error("rank %d: timed out after %.1f s waiting for the other ranks at the "
                 "bootstrap store at %s; not joined as the store saw it %.1f s earlier: "
                 "ranks %s", cl->rank,
                 cl->timeout_s, cl->addr, chorus__now() - cl->heard_at, missing);
    return CHORUS_ERR_TIMEOUT;
}

/*
 * Waits for the RESULT's header, answering for progress meanwhile: asks the
 * store who has joined every report_s seconds and once shortly before the
 * deadline, and reads its answers. Returns when the RESULT (of want_len
 * bytes) is next on the wire, or with the store's ERROR or a timeout.
 */
static chorus_status_t client_wait(boot_client_t *cl, uint64_t want_len)
{
    double last_query_at = cl->deadline - fmin(CLIENT_LAST_QUERY_S, cl->timeout_s / 10);

    for (;;) {
        struct pollfd pfd = {.fd = cl->fd, .events = POLLIN};
        double now = chorus__now();
        double wake = cl->deadline;
        uint32_t status_len;
        chorus_status_t status;

        if (now >= cl->deadline)
            return client_timeout(cl);
        if (now >= cl->next_report) {
            cl->next_report = now + cl->report_s;
            if ((status = client_query(cl)) != CHORUS_OK)
                return status;
        }
        if (cl->last_query_seq == 0 && now >= last_query_at) {
            if ((status = client_query(cl)) != CHORUS_OK)
                return status;
            cl->last_query_seq = cl->query_seq;
        }
        wake = fmin(wake, cl->next_report);
        if (cl->last_query_seq == 0)
            wake = fmin(wake, last_query_at);
        if (poll(&pfd, 1, chorus__ms_left(wake)) <= 0)
            continue;
        status = client_read_header(cl, CHORUS_BOOT_RESULT, want_len,
                                    "waiting for the other ranks at", &status_len);
        if (status != CHORUS_OK || status_len == 0)
            return status;
        if ((status = client_on_status(cl, status_len)) != CHORUS_OK)
            return status;
    }
}

static chorus_status_t client_result(boot_client_t *cl, const void *blob, size_t blob_len,
                                     void *all_blobs, uint8_t session_key[32])
{
    size_t total = (size_t)cl->size * blob_len;
    uint8_t head[CHORUS_BOOT_RESULT_HDR], digest[32];
    chorus__boot_keys_t keys = client_keys(cl);
    chorus_status_t status;

    status = client_wait(cl, CHORUS_BOOT_RESULT_HDR + (uint64_t)total);
    if (status != CHORUS_OK)
        return status;
    status = chorus__sock_read_full(cl->fd, head, sizeof(head), cl->deadline);
    if (status == CHORUS_OK)
        status = chorus__sock_read_full(cl->fd, all_blobs, total, cl->deadline);
    if (status != CHORUS_OK)
        return client_io_fail(cl, status, "reading the result from");
    chorus__sha256(all_blobs, total, digest);
    /* session_key is the exchange's own copy; its caller publishes it only on success. */
    status = chorus__boot_result_decode(&keys, head, sizeof(head), digest, session_key);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: the result from the bootstrap store at %s fails its "
                     "authentication check", cl->rank, cl->addr);
        return status;
    }
    if (blob_len > 0 &&
        memcmp((uint8_t *)all_blobs + (size_t)cl->rank * blob_len, blob, blob_len) != 0) {
        chorus_error("rank %d: the bootstrap store at %s returned another address for rank "
                     "%d", cl->rank, cl->addr, cl->rank);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}

static chorus_status_t client_check_args(const chorus__boot_client_params_t *p,
                                         const void *blob, size_t blob_len,
                                         const void *all_blobs, const uint8_t *session_key)
{
    int rank = p->rank, size = p->size;

    if (p->addr == NULL || session_key == NULL ||
        (blob_len > 0 && (blob == NULL || all_blobs == NULL))) {
        chorus_error("rank %d: bootstrap exchange needs addr, blob, all_blobs and "
                     "session_key", rank);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (p->secret == NULL || p->secret_len == 0) {
        chorus_error("rank %d: the job secret is empty", rank);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (size < 1 || size > CHORUS_BOOT_SIZE_MAX) {
        chorus_error("rank %d: size %d is out of range 1..%d", rank, size,
                     CHORUS_BOOT_SIZE_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (rank < 0 || rank >= size) {
        chorus_error("rank %d is out of range for size %d", rank, size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (blob_len > CHORUS_BOOT_BLOB_MAX ||
        (uint64_t)size * blob_len > CHORUS_BOOT_TOTAL_MAX) {
        chorus_error("rank %d: address blob of %zu bytes for size %d exceeds %d bytes, or "
                     "%u bytes in all", rank, blob_len, size, CHORUS_BOOT_BLOB_MAX,
                     CHORUS_BOOT_TOTAL_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(p->timeout_s > 0) || !isfinite(p->timeout_s)) {
        chorus_error("rank %d: timeout %g s is not a positive number", rank, p->timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(p->report_s >= 0)) {
        chorus_error("rank %d: report interval %g s is not 0 or a positive number", rank,
                     p->report_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/*
 * Connects to the store, which may not be listening yet (rank 0 starting
 * late): every report_s seconds until then, says that this rank is still
 * waiting for it.
 */
static chorus_status_t client_connect(boot_client_t *cl)
{
    for (;;) {
        chorus_status_t status = chorus__sock_connect(cl->addr,
                                                      fmin(cl->deadline, cl->next_report),
                                                      &cl->fd);
        double now = chorus__now();

        if (status != CHORUS_ERR_TIMEOUT || now >= cl->deadline)
            return status == CHORUS_OK ? CHORUS_OK : client_io_fail(cl, status, "connecting to");
        chorus_warn("rank %d: waiting %.0f s for the bootstrap store at %s to accept "
                    "connections (rank 0 hosts it: has it started?)", cl->rank,
                    now - cl->started, cl->addr);
        cl->next_report = now + cl->report_s;
    }
}

/* Connects, authenticates, joins and waits for every blob; the caller closes cl->fd. */
static chorus_status_t client_run(boot_client_t *cl, const void *blob, size_t blob_len,
                                  void *all_blobs, uint8_t key[32], char *host,
                                  size_t host_len, size_t local_host_len)
{
    chorus_status_t status;

    status = client_connect(cl);
    if (status != CHORUS_OK)
        return status;
    status = chorus__sock_local_host(cl->fd, host, host_len);
    if (status == CHORUS_OK && strlen(host) >= local_host_len) {
        chorus_error("rank %d: local_host of %zu bytes cannot hold '%s'", cl->rank,
                     local_host_len, host);
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status == CHORUS_OK)
        status = client_handshake(cl);
    if (status == CHORUS_OK)
        status = client_join(cl, blob, blob_len);
    if (status == CHORUS_OK)
        status = client_result(cl, blob, blob_len, all_blobs, key);
    return status;
}

chorus_status_t chorus__bootstrap_exchange(const chorus__boot_client_params_t *p,
                                           const void *blob, size_t blob_len, void *all_blobs,
                                           uint8_t session_key[32], char *local_host,
                                           size_t local_host_len)
{
    boot_client_t cl = {.fd = -1};
    char host[CHORUS_SOCK_HOST_MAX];
    uint8_t key[32];
    chorus_status_t status;

    chorus__log_init();
    if (p == NULL) {
        chorus_error("bootstrap exchange: params is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    status = client_check_args(p, blob, blob_len, all_blobs, session_key);
    if (status != CHORUS_OK)
        return status;
    cl.joined = calloc(chorus__rank_set_bytes(p->size), 1);
    if (cl.joined == NULL)
        return CHORUS_ERR_NO_MEMORY;
    cl.addr = p->addr;
    cl.secret = (const uint8_t *)p->secret;
    cl.secret_len = p->secret_len;
    cl.rank = p->rank;
    cl.size = p->size;
    cl.timeout_s = p->timeout_s;
    cl.report_s = p->report_s;
    cl.started = chorus__now();
    cl.deadline = cl.started + p->timeout_s;
    cl.next_report = p->report_s > 0 ? cl.started + p->report_s : INFINITY;
    status = client_run(&cl, blob, blob_len, all_blobs, key, host, sizeof(host),
                        local_host != NULL ? local_host_len : SIZE_MAX);
    if (cl.fd >= 0)
        close(cl.fd);
    free(cl.joined);
    if (status != CHORUS_OK)
        return status;
    memcpy(session_key, key, sizeof(key));
    explicit_bzero(key, sizeof(key));
    if (local_host != NULL)
        strcpy(local_host, host);
    chorus_debug("rank %d: bootstrap with %d ranks at %s done", cl.rank, cl.size, cl.addr);
    return CHORUS_OK;
}
