/*
 * Fuzz target: what an authenticated peer writes on a TCP connection, fed to
 * the receive state machine of a real context (rank 0 of 2) through a socket
 * pair standing in for the connection. The first two input bytes choose the
 * receives and sends rank 0 posts first; the rest is the stream, followed by
 * end of stream. Whatever the frames, the context buffers at most its window
 * of eager data (plus the small records of announced messages), completes
 * every request it ends the connection with, and frees everything.
 */
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transports/tcp/tcp.h"
#include "fuzz.h"

#define WINDOW 1024
#define NTAGS 4

static const uint8_t key[] = "fuzz tcp stream key";

static tl_ctx_t *stream_ctx(void)
{
    tl_ctx_params_t params = {0, 2, "127.0.0.1", key, sizeof(key) - 1, 5.0, NULL, NULL, NULL};
    unsigned char addrs[2 * TL_ADDR_MAX] = {0};
    tl_ctx_t *ctx = NULL;
    size_t len = TL_ADDR_MAX;

    setenv("CHORUS_TCP_WINDOW", "1K", 1);
    setenv("CHORUS_TCP_EAGER_SIZE", "256", 1);
    setenv("CHORUS_LOG_LEVEL", "error", 1);
    FUZZ_CHECK(tl_tcp_ops.ctx_create(&params, &ctx) == CHORUS_OK);
    FUZZ_CHECK(tl_tcp_ops.get_address(ctx, addrs, &len) == CHORUS_OK);
    memcpy(addrs + TL_ADDR_MAX, addrs, TL_ADDR_MAX);
    FUZZ_CHECK(tl_tcp_ops.set_peers(ctx, addrs) == CHORUS_OK);
    return ctx;
}

/* Make fd the authenticated connection of rank 1, as the handshake would. */
static void stream_attach(tl_ctx_t *ctx, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TL_TCP_EV(TL_TCP_EV_DATA, 1)};

    FUZZ_CHECK(epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) == 0);
    tl_tcp_peer_attach(ctx, &ctx->peers[1], fd);
}

static void check_done(const tl_req_t *req, size_t capacity)
{
    FUZZ_CHECK(req->done);
    FUZZ_CHECK(req->status != CHORUS_OK || req->length <= capacity);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char rbuf[NTAGS][2048], sbuf[3000];
    tl_req_t recvs[NTAGS], again[NTAGS], sends[2];
    uint8_t posts = size > 0 ? data[0] : 0, sendbits = size > 1 ? data[1] : 0;
    size_t cap[NTAGS], records = size / sizeof(tl_tcp_hdr_t) + 1;
    tl_ctx_t *ctx = stream_ctx();
    int sv[2];

    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    stream_attach(ctx, sv[0]);
    for (int t = 0; t < NTAGS; t++) {
        cap[t] = (posts >> (4 + t)) & 1 ? sizeof(rbuf[t]) : 100;
        if ((posts >> t) & 1)
            FUZZ_CHECK(tl_tcp_ops.recv_nb(ctx, 1, 0, (uint64_t)t, rbuf[t], cap[t], &recvs[t]) ==
                       CHORUS_OK);
    }
    /* A rendezvous send (id 1 once the grant came) and an eager one. */
    if (sendbits & 1)
        tl_tcp_ops.send_nb(ctx, 1, 0, 9, sbuf, sizeof(sbuf), &sends[0]);
    if (sendbits & 2)
        tl_tcp_ops.send_nb(ctx, 1, 0, 8, sbuf, 10, &sends[1]);
    if (size > 2)
        FUZZ_CHECK(write(sv[1], data + 2, size - 2) == (ssize_t)(size - 2));
    shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 64 && ctx->peers[1].state != TL_TCP_PEER_CLOSED; i++) {
        FUZZ_CHECK(tl_tcp_ops.progress(ctx) >= 0);
        FUZZ_CHECK(ctx->stats.ue_peak <= 2 * WINDOW + records * (sizeof(tl_tcp_ue_t) + 64));
    }
    /* The stream ended: the connection is closed and nothing is left pending. */
    FUZZ_CHECK(ctx->peers[1].state == TL_TCP_PEER_CLOSED);
    for (int t = 0; t < NTAGS; t++) {
        if ((posts >> t) & 1)
            check_done(&recvs[t], cap[t]);
        /* What arrived whole stays deliverable; the rest fails at once. */
        tl_tcp_ops.recv_nb(ctx, 1, 0, (uint64_t)t, rbuf[t], sizeof(rbuf[t]), &again[t]);
        check_done(&again[t], sizeof(rbuf[t]));
    }
    if (sendbits & 1)
        check_done(&sends[0], sizeof(sbuf));
    if (sendbits & 2)
        check_done(&sends[1], 10);
    tl_tcp_ops.ctx_destroy(ctx);
    close(sv[1]);
    return 0;
}
