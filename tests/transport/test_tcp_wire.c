/*
 * TCP transport against raw sockets: the frame header codec, the handshake
 * as strangers and impostors see it, connect failures, and a peer that
 * speaks the protocol by hand, well and badly. One process drives both the
 * context (through progress) and the raw side, so nothing here needs threads.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "transports/base/transport.h"
#include "transports/tcp/tcp.h"
#include "util/sha256.h"
#include "util/time.h"

/* ---- frame headers ----------------------------------------------------------- */

static int frame_equal(const tl_tcp_frame_t *a, const tl_tcp_frame_t *b)
{
    return a->type == b->type && a->space == b->space && a->id == b->id && a->tag == b->tag &&
           a->length == b->length;
}

static chorus_status_t check_frame(const tl_tcp_frame_t *f, tl_tcp_frame_t *out)
{
    tl_tcp_hdr_t h;

    tl_tcp_header_encode(&h, f);
    return tl_tcp_header_check(&h, out);
}

Test(tcp, header_check)
{
    tl_tcp_frame_t f = {TL_TCP_FRAME_DATA, 0x55667788u, 0, 0x1122334455667788ull & ~TL_TAG_CTRL,
                        12345};
    tl_tcp_frame_t out = {0}, seven = {TL_TCP_FRAME_CREDIT, 7, 7, 7, 7};
    tl_tcp_hdr_t h;

    tl_tcp_header_encode(&h, &f);
    cr_assert_eq(tl_tcp_header_check(&h, &out), CHORUS_OK);
    cr_expect(frame_equal(&out, &f));
    /* Byte order on the wire is fixed: little-endian. */
    cr_expect_eq(((const unsigned char *)&h)[0], TL_TCP_MAGIC & 0xff);
    cr_expect_eq(((const unsigned char *)&h)[4], TL_TCP_FRAME_DATA);
    cr_expect_eq(((const unsigned char *)&h)[8], 0x88);
    cr_expect_eq(((const unsigned char *)&h)[16], 0x88);
    cr_expect_eq(((const unsigned char *)&h)[24], 12345 & 0xff);

    /* Every frame type with the fields it carries. */
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_DATA, 0, 0, 1, TL_TCP_MAX_MSG},
                             &out), CHORUS_OK);
    cr_expect_eq(out.length, TL_TCP_MAX_MSG);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_RTS, 3, 9, 4, 1 << 20}, &out),
                 CHORUS_OK);
    cr_expect(out.type == TL_TCP_FRAME_RTS && out.id == 9 && out.space == 3 && out.tag == 4);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_CTS, 0, 9, 0, 0}, &out), CHORUS_OK);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_CTS, TL_TCP_FRAG_MIN, 9, 0, 10},
                             &out), CHORUS_OK);
    cr_expect_eq(out.space, TL_TCP_FRAG_MIN);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_RDATA, 0, 9, 0, TL_TCP_FRAG_MAX},
                             &out), CHORUS_OK);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_RDATA, 0, 9, 3 << 16, 10}, &out),
                 CHORUS_OK);
    cr_expect_eq(out.tag, 3 << 16);
    cr_expect_eq(check_frame(&(tl_tcp_frame_t){TL_TCP_FRAME_CREDIT, 0, 0, 0, 4096}, &out),
                 CHORUS_OK);

    /* Malformed headers; outputs are written only on success. */
    out = seven;
    tl_tcp_header_encode(&h, &f);
    h.magic ^= 1;
    cr_expect_eq(tl_tcp_header_check(&h, &out), CHORUS_ERR_PROTOCOL);
    tl_tcp_header_encode(&h, &f);
    h.zero[1] = 1;
    cr_expect_eq(tl_tcp_header_check(&h, &out), CHORUS_ERR_PROTOCOL);
    tl_tcp_header_encode(&h, &f);
    h.type = 0;
    cr_expect_eq(tl_tcp_header_check(&h, &out), CHORUS_ERR_PROTOCOL);
    h.type = TL_TCP_FRAME_CREDIT + 1;
    cr_expect_eq(tl_tcp_header_check(&h, &out), CHORUS_ERR_PROTOCOL);
    static const tl_tcp_frame_t bad[] = {
        {TL_TCP_FRAME_DATA, 0, 0, 1, TL_TCP_MAX_MSG + 1},
        {TL_TCP_FRAME_DATA, 0, 0, 1, UINT64_MAX},
        {TL_TCP_FRAME_DATA, 0, 1, 1, 10},                       /* data has no id */
        {TL_TCP_FRAME_DATA, 0, 0, TL_TAG_CTRL | 1, TL_CTRL_MAX + 1}, /* control is small */
        {TL_TCP_FRAME_RTS, 0, 1, TL_TAG_CTRL | 1, 10},          /* control goes eagerly */
        {TL_TCP_FRAME_RTS, 0, 1, 1, 0},                         /* empty goes eagerly */
        {TL_TCP_FRAME_CTS, 0, 1, 5, 10},
        {TL_TCP_FRAME_CTS, 0, 1, 0, 10},                        /* no fragment size */
        {TL_TCP_FRAME_CTS, 2, 1, 0, 10},                        /* fragments too small */
        {TL_TCP_FRAME_CTS, 3 << 12, 1, 0, 10},                  /* not a power of two */
        {TL_TCP_FRAME_CTS, 2 * TL_TCP_FRAG_MAX, 1, 0, 10},      /* fragments too large */
        {TL_TCP_FRAME_CTS, TL_TCP_FRAG_MAX, 1, 0, 0},           /* a drop has none */
        {TL_TCP_FRAME_RDATA, 0, 1, 0, 0},
        {TL_TCP_FRAME_RDATA, 0, 1, 0, TL_TCP_FRAG_MAX + 1},
        {TL_TCP_FRAME_RDATA, 1, 1, 0, 10},
        {TL_TCP_FRAME_RDATA, 0, 1, TL_TCP_MAX_MSG, 10},         /* offset out of any message */
        {TL_TCP_FRAME_CREDIT, 0, 1, 0, 10},
        {TL_TCP_FRAME_CREDIT, 0, 0, 0, TL_TCP_MAX_MSG + 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(check_frame(&bad[i], &out), CHORUS_ERR_PROTOCOL, "bad frame %zu admitted", i);
    cr_expect(frame_equal(&out, &seven));
}

/* ---- raw sockets ----------------------------------------------------------------- */

static const uint8_t raw_key[] = "raw-socket-test-key";

static tl_ctx_t *raw_ctx(int rank, int size, double timeout_s)
{
    tl_ctx_params_t params = {rank, size, "127.0.0.1", raw_key, sizeof(raw_key) - 1, timeout_s,
                              NULL, NULL, NULL};
    tl_ctx_t *ctx = NULL;

    cr_assert_eq(tl_tcp_ops.ctx_create(&params, &ctx), CHORUS_OK);
    return ctx;
}

static tl_tcp_blob_t ctx_addr(tl_ctx_t *ctx)
{
    tl_tcp_blob_t a;
    size_t len = sizeof(a);

    cr_assert_eq(tl_tcp_ops.get_address(ctx, &a, &len), CHORUS_OK);
    return a;
}

/* A blob of one address that takes `streams` connections. */
static tl_tcp_blob_t blob_of(const char *host, const char *port, int streams)
{
    tl_tcp_blob_t b = {.count = 1, .streams = (uint8_t)streams};

    snprintf(b.addr[0].host, sizeof(b.addr[0].host), "%s", host);
    snprintf(b.addr[0].port, sizeof(b.addr[0].port), "%s", port);
    return b;
}

/* Every rank's blob: ranks without a context get `other`. */
static void set_peers(tl_ctx_t *ctx, tl_ctx_t **ctxs, int size, const tl_tcp_blob_t *other)
{
    unsigned char *addrs = calloc((size_t)size, TL_ADDR_MAX);

    for (int r = 0; r < size; r++) {
        tl_tcp_blob_t a = ctxs[r] != NULL ? ctx_addr(ctxs[r]) : *other;

        memcpy(addrs + (size_t)r * TL_ADDR_MAX, &a, sizeof(a));
    }
    cr_assert_eq(tl_tcp_ops.set_peers(ctx, addrs), CHORUS_OK);
    free(addrs);
}

static int raw_connect(const tl_tcp_blob_t *b)
{
    const tl_tcp_addr_t *a = &b->addr[0];
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

/* A listener on a free loopback port, as a blob. */
static int raw_listen(tl_tcp_blob_t *a)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char port[8];

    cr_assert_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert_eq(listen(fd, 4), 0);
    getsockname(fd, (struct sockaddr *)&sin, &sl);
    snprintf(port, sizeof(port), "%u", ntohs(sin.sin_port));
    *a = blob_of("127.0.0.1", port, 1);
    return fd;
}

/*
 * Read len bytes from fd while driving the contexts: 0 when they came, 1 at
 * end of stream, -1 after 5 s.
 */
static int pump_read(tl_ctx_t **ctxs, int nctx, int fd, void *buf, size_t len)
{
    double deadline = chorus__now() + 5.0;
    size_t got = 0;

    while (got < len && chorus__now() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};

        for (int i = 0; i < nctx; i++)
            tl_tcp_ops.progress(ctxs[i]);
        if (poll(&p, 1, 1) > 0) {
            ssize_t r = read(fd, (char *)buf + got, len - got);

            if (r <= 0)
                return r == 0 ? 1 : -1;
            got += (size_t)r;
        }
    }
    return got == len ? 0 : -1;
}

/* Drive the contexts until every request is done; 0, or -1 after timeout_s. */
static int pump_reqs(tl_ctx_t **ctxs, int nctx, tl_req_t *reqs, int n, double timeout_s)
{
    double deadline = chorus__now() + timeout_s;

    for (;;) {
        int pending = 0;

        for (int i = 0; i < n; i++)
            pending += !reqs[i].done;
        if (pending == 0)
            return 0;
        if (chorus__now() > deadline)
            return -1;
        for (int i = 0; i < nctx; i++)
            tl_tcp_ops.progress(ctxs[i]);
        usleep(200);
    }
}

static void write_all(int fd, const void *buf, size_t len)
{
    cr_assert_eq(write(fd, buf, len), (ssize_t)len);
}

static void mac_of(const char *label, const uint8_t nonce[TL_TCP_NONCE_BYTES], uint32_t from,
                   uint32_t to, uint32_t lane, uint8_t mac[TL_TCP_MAC_BYTES])
{
    uint8_t msg[3 + TL_TCP_NONCE_BYTES + 12];
    uint32_t f = htole32(from), t = htole32(to), l = htole32(lane);
    size_t len = 0;

    if (label != NULL) {
        memcpy(msg, label, 3);
        len = 3;
    }
    memcpy(msg + len, nonce, TL_TCP_NONCE_BYTES);
    memcpy(msg + len + TL_TCP_NONCE_BYTES, &f, 4);
    memcpy(msg + len + TL_TCP_NONCE_BYTES + 4, &t, 4);
    memcpy(msg + len + TL_TCP_NONCE_BYTES + 8, &l, 4);
    chorus__hmac_sha256(raw_key, sizeof(raw_key) - 1, msg, len + TL_TCP_NONCE_BYTES + 12, mac);
}

/* ---- the acceptor against strangers ------------------------------------------------ */

/*
 * Rank 0 of 2 meets three impostors (wrong MAC, wrong magic, wrong rank): it
 * answers each with the reject reply and closes, then takes rank 1. Its
 * listener stays open until fail_all.
 */
Test(tcp, impostors_dropped, .timeout = 30)
{
    tl_ctx_t *ctx[2] = {raw_ctx(0, 2, 5.0), raw_ctx(1, 2, 5.0)};
    tl_tcp_blob_t a0 = ctx_addr(ctx[0]);
    uint8_t reject[TL_TCP_MAC_BYTES] = {0};
    tl_req_t r[2];
    int fd;

    set_peers(ctx[0], ctx, 2, NULL);
    set_peers(ctx[1], ctx, 2, NULL);
    memcpy(reject, TL_TCP_REJECT, sizeof(TL_TCP_REJECT) - 1);
    cr_assert_eq(tl_tcp_ops.recv_nb(ctx[0], 1, 0, 1, NULL, 0, &r[0]), CHORUS_OK);
    for (int bad = 0; bad < 3; bad++) {
        uint8_t nonce[TL_TCP_NONCE_BYTES], reply[TL_TCP_MAC_BYTES], byte;
        tl_tcp_hello_t h = {htole32(TL_TCP_HELLO_MAGIC), htole32(TL_TCP_VERSION), htole32(1),
                            htole32(0), 0, {0}};

        fd = raw_connect(&a0);
        cr_assert_geq(fd, 0);
        cr_assert_eq(pump_read(ctx, 1, fd, nonce, sizeof(nonce)), 0, "no nonce");
        if (bad == 0)
            memset(h.mac, 0x5a, sizeof(h.mac));
        if (bad == 1)
            h.magic = 0;
        if (bad == 2)
            h.to_rank = htole32(5);
        if (bad != 0)
            mac_of(NULL, nonce, 1, 0, 0, h.mac);
        write_all(fd, &h, sizeof(h));
        cr_assert_eq(pump_read(ctx, 1, fd, reply, sizeof(reply)), 0, "no reply to impostor %d",
                     bad);
        cr_expect(memcmp(reply, reject, sizeof(reply)) == 0, "impostor %d not rejected", bad);
        cr_expect_eq(pump_read(ctx, 1, fd, &byte, 1), 1, "impostor %d was not dropped", bad);
        close(fd);
    }
    cr_expect_eq(tl_tcp_ops.connections(ctx[0]), 0);
    cr_assert_eq(tl_tcp_ops.send_nb(ctx[1], 0, 0, 1, NULL, 0, &r[1]), CHORUS_OK);
    cr_assert_eq(pump_reqs(ctx, 2, r, 2, 5.0), 0);
    cr_expect(r[0].status == CHORUS_OK && r[1].status == CHORUS_OK);
    cr_expect_eq(tl_tcp_ops.connections(ctx[0]), 1);
    cr_expect_eq(tl_tcp_ops.connections(ctx[1]), 1);
    /* Connections open on first use: the listener stays, until the context fails. */
    fd = raw_connect(&a0);
    cr_expect_geq(fd, 0);
    close(fd);
    tl_tcp_ops.fail_all(ctx[0], CHORUS_ERR_ABORTED);
    cr_expect_eq(raw_connect(&a0), -1);
    cr_expect_eq(tl_tcp_ops.connections(ctx[0]), 0);
    tl_tcp_ops.ctx_destroy(ctx[0]);
    tl_tcp_ops.ctx_destroy(ctx[1]);
}

/*
 * More strangers than slots connect and say nothing: the oldest are dropped
 * to make room, and the genuine rank 1 still gets in.
 */
Test(tcp, handshake_slots_bounded, .timeout = 30)
{
    enum { STRANGERS = 15 };
    tl_ctx_t *ctx[2] = {raw_ctx(0, 2, 5.0), raw_ctx(1, 2, 5.0)};
    tl_tcp_blob_t a0 = ctx_addr(ctx[0]);
    int fds[STRANGERS], dropped = 0;
    tl_req_t r[2];

    set_peers(ctx[0], ctx, 2, NULL);
    set_peers(ctx[1], ctx, 2, NULL);
    cr_assert_lt(ctx[0]->in_max, STRANGERS);
    for (int i = 0; i < STRANGERS; i++) {
        uint8_t nonce[TL_TCP_NONCE_BYTES];

        fds[i] = raw_connect(&a0);
        cr_assert_geq(fds[i], 0);
        cr_assert_eq(pump_read(ctx, 1, fds[i], nonce, sizeof(nonce)), 0);
    }
    for (int i = 0; i < STRANGERS; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        char byte;

        dropped += poll(&p, 1, 0) > 0 && read(fds[i], &byte, 1) == 0;
    }
    cr_expect_eq(dropped, STRANGERS - ctx[0]->in_max);
    cr_assert_eq(tl_tcp_ops.recv_nb(ctx[0], 1, 0, 1, NULL, 0, &r[0]), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.send_nb(ctx[1], 0, 0, 1, NULL, 0, &r[1]), CHORUS_OK);
    cr_assert_eq(pump_reqs(ctx, 2, r, 2, 5.0), 0);
    cr_expect(r[0].status == CHORUS_OK && r[1].status == CHORUS_OK);
    for (int i = 0; i < STRANGERS; i++)
        close(fds[i]);
    tl_tcp_ops.ctx_destroy(ctx[0]);
    tl_tcp_ops.ctx_destroy(ctx[1]);
}

/* ---- the connector against listeners that misbehave -------------------------------- */

typedef enum { L_BAD_ACK, L_REJECT, L_CLOSE, L_REFUSED, L_YIELD, L_SILENT, L_MODES } l_mode_t;

/*
 * Rank 1 of 2 sends to rank 0, whose address leads to a listener run here.
 * The hello it sends is checked byte for byte; what the listener answers
 * decides how the send fails, and how soon.
 */
Test(tcp, connect_failures, .timeout = 60)
{
    static const chorus_status_t expect[L_MODES] = {
        CHORUS_ERR_AUTH, CHORUS_ERR_AUTH, CHORUS_ERR_PEER_FAILED, CHORUS_ERR_PEER_FAILED,
        CHORUS_ERR_TIMEOUT, CHORUS_ERR_TIMEOUT};

    for (int mode = 0; mode < L_MODES; mode++) {
        tl_tcp_blob_t fake;
        int lfd = raw_listen(&fake), fd = -1;
        tl_ctx_t *ctx[2] = {NULL, raw_ctx(1, 2, 1.0)};
        uint8_t nonce[TL_TCP_NONCE_BYTES], mac[TL_TCP_MAC_BYTES], reply[TL_TCP_MAC_BYTES] = {0};
        tl_tcp_hello_t h;
        double t0;
        tl_req_t r;

        set_peers(ctx[1], ctx, 2, &fake);
        if (mode == L_REFUSED)
            close(lfd);
        t0 = chorus__now();
        tl_tcp_ops.send_nb(ctx[1], 0, 0, 1, "x", 1, &r);
        if (mode != L_REFUSED) {
            fd = accept(lfd, NULL, NULL);
            cr_assert_geq(fd, 0);
        }
        if (mode != L_REFUSED && mode != L_SILENT) {
            memset(nonce, 0x30 + mode, sizeof(nonce));
            write_all(fd, nonce, sizeof(nonce));
            cr_assert_eq(pump_read(ctx + 1, 1, fd, &h, sizeof(h)), 0);
            cr_expect_eq(le32toh(h.magic), TL_TCP_HELLO_MAGIC);
            cr_expect_eq(le32toh(h.version), TL_TCP_VERSION);
            cr_expect(le32toh(h.from_rank) == 1 && le32toh(h.to_rank) == 0 && h.lane == 0);
            mac_of(NULL, nonce, 1, 0, 0, mac);
            cr_expect(memcmp(mac, h.mac, sizeof(mac)) == 0,
                      "hello MAC is not HMAC(key, nonce||1||0||0)");
        }
        if (mode == L_REJECT)
            memcpy(reply, TL_TCP_REJECT, sizeof(TL_TCP_REJECT) - 1);
        if (mode == L_YIELD)
            mac_of("yld", nonce, 1, 0, 0, reply);
        if (mode == L_BAD_ACK || mode == L_REJECT || mode == L_YIELD)
            write_all(fd, reply, sizeof(reply));
        if (mode == L_CLOSE) {
            close(fd);
            fd = -1;
        }
        cr_assert_eq(pump_reqs(ctx + 1, 1, &r, 1, 5.0), 0, "mode %d: the send never ended", mode);
        cr_expect_eq(r.status, expect[mode], "mode %d: %s", mode, chorus_status_string(r.status));
        if (expect[mode] == CHORUS_ERR_TIMEOUT)
            cr_expect(chorus__now() - t0 > 0.9 && chorus__now() - t0 < 3.0);
        else
            cr_expect_lt(chorus__now() - t0, 0.5, "mode %d took %.2f s", mode, chorus__now() - t0);
        cr_expect_eq(tl_tcp_ops.connections(ctx[1]), 0);
        if (fd >= 0)
            close(fd);
        if (mode != L_REFUSED)
            close(lfd);
        tl_tcp_ops.ctx_destroy(ctx[1]);
    }
}

/* ---- a peer speaking the protocol by hand ------------------------------------------ */

static void send_frame(int fd, tl_tcp_frame_type_t type, uint32_t id, uint64_t tag,
                       uint64_t length, const void *payload, size_t len)
{
    tl_tcp_frame_t f = {type, 0, id, tag, length};
    tl_tcp_hdr_t h;

    /* A CTS asks for whole 1 MiB fragments, as a receiver with one stream does. */
    if (type == TL_TCP_FRAME_CTS && length > 0)
        f.space = TL_TCP_FRAG_MAX;
    tl_tcp_header_encode(&h, &f);
    write_all(fd, &h, sizeof(h));
    if (len > 0)
        write_all(fd, payload, len);
}

static tl_tcp_frame_t read_frame(tl_ctx_t *ctx, int fd)
{
    tl_tcp_frame_t f = {0};
    tl_tcp_hdr_t h;

    cr_assert_eq(pump_read(&ctx, 1, fd, &h, sizeof(h)), 0, "no frame came");
    cr_assert_eq(tl_tcp_header_check(&h, &f), CHORUS_OK, "the context wrote a malformed frame");
    return f;
}

/*
 * Connect to ctx (rank 0) as `rank` for `lane`, with the key: the reply is
 * returned in reply, the socket is.
 */
static int raw_hello(tl_ctx_t *ctx, int rank, uint32_t lane, uint8_t reply[TL_TCP_MAC_BYTES])
{
    tl_tcp_blob_t a = ctx_addr(ctx);
    uint8_t nonce[TL_TCP_NONCE_BYTES], mac[TL_TCP_MAC_BYTES];
    tl_tcp_hello_t h;
    int fd = raw_connect(&a);

    cr_assert_geq(fd, 0);
    cr_assert_eq(pump_read(&ctx, 1, fd, nonce, sizeof(nonce)), 0);
    mac_of(NULL, nonce, (uint32_t)rank, 0, lane, mac);
    tl_tcp_hello_encode(&h, (uint32_t)rank, 0, lane, mac);
    write_all(fd, &h, sizeof(h));
    memset(reply, 0, TL_TCP_MAC_BYTES);
    if (pump_read(&ctx, 1, fd, reply, TL_TCP_MAC_BYTES) == 0) {
        mac_of("ack", nonce, (uint32_t)rank, 0, lane, mac);
        if (memcmp(mac, reply, sizeof(mac)) == 0)
            memcpy(reply, "ack", 4);
    }
    return fd;
}

/* Join ctx (rank 0) as `rank`, with the key: the ack and the context's grant come back. */
static int raw_join(tl_ctx_t *ctx, int rank, uint64_t window)
{
    uint8_t reply[TL_TCP_MAC_BYTES];
    tl_tcp_frame_t grant;
    int fd = raw_hello(ctx, rank, 0, reply);

    cr_assert(memcmp(reply, "ack", 4) == 0, "rank %d was not acked", rank);
    grant = read_frame(ctx, fd);
    cr_expect(grant.type == TL_TCP_FRAME_CREDIT && grant.length == window,
              "the first frame is not a grant of the window");
    return fd;
}

/*
 * Rank 1 talks to rank 0 in eager frames and by rendezvous in both
 * directions, written and read here byte for byte.
 */
static void raw_well_behaved(tl_ctx_t *ctx, int fd)
{
    static unsigned char big[200000], got[200000], out[5000], in[5000];
    unsigned char small[100], rsmall[128];
    tl_req_t r[4];
    tl_tcp_frame_t f;

    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7);
    memset(small, 0x42, sizeof(small));
    send_frame(fd, TL_TCP_FRAME_CREDIT, 0, 0, 1000, NULL, 0);
    cr_assert_eq(tl_tcp_ops.recv_nb(ctx, 1, 0, 5, rsmall, sizeof(rsmall), &r[0]), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.recv_nb(ctx, 1, 0, 6, got, sizeof(got), &r[1]), CHORUS_OK);
    send_frame(fd, TL_TCP_FRAME_DATA, 0, 5, sizeof(small), small, sizeof(small));
    send_frame(fd, TL_TCP_FRAME_RTS, 7, 6, sizeof(big), NULL, 0);
    f = read_frame(ctx, fd);
    cr_assert(f.type == TL_TCP_FRAME_CTS && f.id == 7 && f.length == sizeof(big) &&
              f.space == TL_TCP_FRAG_MAX);
    send_frame(fd, TL_TCP_FRAME_RDATA, 7, 0, sizeof(big), big, sizeof(big));
    cr_assert_eq(pump_reqs(&ctx, 1, r, 2, 5.0), 0);
    cr_expect(r[0].status == CHORUS_OK && r[0].length == sizeof(small) &&
              memcmp(rsmall, small, sizeof(small)) == 0);
    cr_expect(r[1].status == CHORUS_OK && r[1].length == sizeof(big) &&
              memcmp(got, big, sizeof(big)) == 0);
    /* Rank 0 sends: 10 bytes fit the 1000 granted; 5000 exceed the eager size. */
    memset(out, 0x17, sizeof(out));
    cr_assert_eq(tl_tcp_ops.send_nb(ctx, 1, 0, 8, out, 10, &r[2]), CHORUS_OK);
    cr_assert_eq(tl_tcp_ops.send_nb(ctx, 1, 0, 9, out, sizeof(out), &r[3]), CHORUS_OK);
    f = read_frame(ctx, fd);
    cr_assert(f.type == TL_TCP_FRAME_DATA && f.tag == 8 && f.length == 10);
    cr_assert_eq(pump_read(&ctx, 1, fd, in, 10), 0);
    f = read_frame(ctx, fd);
    cr_assert(f.type == TL_TCP_FRAME_RTS && f.tag == 9 && f.length == sizeof(out));
    cr_expect(!r[3].done);
    send_frame(fd, TL_TCP_FRAME_CTS, f.id, 0, sizeof(out), NULL, 0);
    f = read_frame(ctx, fd);
    cr_assert(f.type == TL_TCP_FRAME_RDATA && f.length == sizeof(out));
    cr_assert_eq(pump_read(&ctx, 1, fd, in, sizeof(out)), 0);
    cr_expect(memcmp(in, out, sizeof(out)) == 0);
    cr_assert_eq(pump_reqs(&ctx, 1, r + 2, 2, 5.0), 0);
    cr_expect(r[2].status == CHORUS_OK && r[3].status == CHORUS_OK);
}

/*
 * Rank 0 of 6 with a 64 KiB window and a 4 KiB eager size. Rank 1 follows the
 * protocol; ranks 2-5 each break it once (eager data beyond the window, a CTS
 * or RDATA nobody asked for, a malformed header): rank 0 closes that
 * connection, fails the receive posted for it with PROTOCOL, and keeps the
 * others.
 */
Test(tcp, raw_protocol, .timeout = 60)
{
    tl_ctx_t *ctx, *none[6] = {NULL};
    tl_tcp_blob_t nowhere = blob_of("127.0.0.1", "1", 1);
    unsigned char junk[100] = {0};
    tl_req_t r[6];
    int fds[6];

    setenv("CHORUS_TCP_WINDOW", "64K", 1);
    setenv("CHORUS_TCP_EAGER_SIZE", "4K", 1);
    ctx = raw_ctx(0, 6, 5.0);
    none[0] = ctx;
    set_peers(ctx, none, 6, &nowhere);
    for (int rank = 1; rank < 6; rank++)
        fds[rank] = raw_join(ctx, rank, 64 << 10);
    cr_expect_eq(tl_tcp_ops.connections(ctx), 5);
    raw_well_behaved(ctx, fds[1]);
    for (int rank = 2; rank < 6; rank++)
        cr_assert_eq(tl_tcp_ops.recv_nb(ctx, rank, 0, 1, junk, sizeof(junk), &r[rank]),
                     CHORUS_OK);
    send_frame(fds[2], TL_TCP_FRAME_DATA, 0, 1, (64 << 10) + 1, NULL, 0);
    send_frame(fds[3], TL_TCP_FRAME_CTS, 99, 0, 10, NULL, 0);
    send_frame(fds[4], TL_TCP_FRAME_RDATA, 99, 0, 10, junk, 10);
    write_all(fds[5], junk, sizeof(tl_tcp_hdr_t));
    cr_assert_eq(pump_reqs(&ctx, 1, r + 2, 4, 5.0), 0);
    for (int rank = 2; rank < 6; rank++) {
        char byte;

        cr_expect_eq(r[rank].status, CHORUS_ERR_PROTOCOL, "rank %d: %s", rank,
                     chorus_status_string(r[rank].status));
        cr_expect_eq(pump_read(&ctx, 1, fds[rank], &byte, 1), 1, "rank %d still connected",
                     rank);
    }
    cr_expect_eq(tl_tcp_ops.connections(ctx), 1);
    for (int rank = 1; rank < 6; rank++)
        close(fds[rank]);
    tl_tcp_ops.ctx_destroy(ctx);
}

/* ---- lanes, by hand ------------------------------------------------------------------- */

/* Progress ctx until its connection to `rank` has `lanes` lanes up; 0, or -1 after 5 s. */
static int lanes_up(tl_ctx_t *ctx, int rank, int lanes)
{
    double deadline = chorus__now() + 5.0;

    while (ctx->peers[rank].lanes_up != lanes && chorus__now() < deadline)
        tl_tcp_ops.progress(ctx);
    return ctx->peers[rank].lanes_up == lanes ? 0 : -1;
}

/*
 * Rank 0 of 4 takes 2 streams, as do the ranks played here. A lane's hello
 * before its connection is up, or for a lane beyond those both take, is
 * closed unanswered. Rank 1 sends a 1 MiB message in 64 KiB fragments, last
 * first, over both lanes: it arrives whole. Rank 2 sends one fragment twice,
 * rank 3 a frame other than payload on its lane: each breaks the protocol,
 * and only its own connection goes.
 */
Test(tcp, raw_lanes, .timeout = 60)
{
    enum { LEN = 1 << 20, FRAG = 64 << 10 };
    static unsigned char msg[LEN], got[LEN], junk[LEN];
    tl_ctx_t *ctx, *none[4] = {NULL};
    tl_tcp_blob_t nowhere = blob_of("127.0.0.1", "1", 2);
    uint8_t reply[TL_TCP_MAC_BYTES], byte;
    int fd[4], lane[4];
    tl_req_t r[4];
    tl_tcp_frame_t f;

    setenv("CHORUS_TCP_STREAMS", "2", 1);
    ctx = raw_ctx(0, 4, 5.0);
    unsetenv("CHORUS_TCP_STREAMS");
    none[0] = ctx;
    set_peers(ctx, none, 4, &nowhere);
    lane[1] = raw_hello(ctx, 1, 1, reply);
    cr_expect(memcmp(reply, "ack", 4) != 0, "a lane was acked before its connection");
    cr_expect_eq(pump_read(&ctx, 1, lane[1], &byte, 1), 1, "the early lane was not closed");
    close(lane[1]);
    for (int rank = 1; rank < 4; rank++) {
        fd[rank] = raw_join(ctx, rank, 4 << 20);
        lane[rank] = raw_hello(ctx, rank, 1, reply);
        cr_assert(memcmp(reply, "ack", 4) == 0, "rank %d's lane was not acked", rank);
        cr_assert_eq(lanes_up(ctx, rank, 2), 0, "rank %d's lane is not up", rank);
        cr_assert_eq(tl_tcp_ops.recv_nb(ctx, rank, 0, 6, got, LEN, &r[rank]), CHORUS_OK);
        send_frame(fd[rank], TL_TCP_FRAME_RTS, 7, 6, LEN, NULL, 0);
        f = read_frame(ctx, fd[rank]);
        cr_assert(f.type == TL_TCP_FRAME_CTS && f.id == 7 && f.length == LEN &&
                  f.space == FRAG, "CTS for %llu-byte fragments", (unsigned long long)f.space);
    }
    close(raw_hello(ctx, 1, 2, reply));
    cr_expect(memcmp(reply, "ack", 4) != 0, "a lane beyond both ranks' streams was acked");
    cr_expect_eq(ctx->peers[1].state, TL_TCP_PEER_UP);

    for (size_t i = 0; i < LEN; i++)
        msg[i] = (unsigned char)(i * 31 + 5);
    for (int k = LEN / FRAG - 1; k >= 0; k--)
        send_frame(k % 2 ? lane[1] : fd[1], TL_TCP_FRAME_RDATA, 7, (uint64_t)k * FRAG, FRAG,
                   msg + (size_t)k * FRAG, FRAG);
    cr_assert_eq(pump_reqs(&ctx, 1, &r[1], 1, 5.0), 0);
    cr_expect(r[1].status == CHORUS_OK && r[1].length == LEN && memcmp(got, msg, LEN) == 0);

    send_frame(lane[2], TL_TCP_FRAME_RDATA, 7, FRAG, FRAG, junk, FRAG);
    send_frame(fd[2], TL_TCP_FRAME_RDATA, 7, FRAG, FRAG, junk, FRAG);
    send_frame(lane[3], TL_TCP_FRAME_CREDIT, 0, 0, 10, NULL, 0);
    cr_assert_eq(pump_reqs(&ctx, 1, r + 2, 2, 5.0), 0);
    for (int rank = 2; rank < 4; rank++) {
        cr_expect_eq(r[rank].status, CHORUS_ERR_PROTOCOL, "rank %d: %s", rank,
                     chorus_status_string(r[rank].status));
        cr_expect_eq(pump_read(&ctx, 1, lane[rank], &byte, 1), 1, "rank %d's lane open", rank);
    }
    cr_expect_eq(tl_tcp_ops.connections(ctx), 1);
    for (int rank = 1; rank < 4; rank++) {
        close(fd[rank]);
        close(lane[rank]);
    }
    tl_tcp_ops.ctx_destroy(ctx);
}
