/* TCP socket helpers with deadlines; see sock.h. */
#include "util/sock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

/* Pauses between connection attempts while the listener is not up yet. */
#define SOCK_RETRY_FIRST_MS 10
#define SOCK_RETRY_MAX_MS   250

static chorus_status_t sock_errno_status(int err)
{
    switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ENOTCONN:
        return CHORUS_ERR_PEER_FAILED;
    case ETIMEDOUT:
        return CHORUS_ERR_TIMEOUT;
    case ENOMEM:
    case ENOBUFS:
        return CHORUS_ERR_NO_MEMORY;
    case EADDRINUSE:
        return CHORUS_ERR_IN_USE;
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
        return CHORUS_ERR_INVALID_ARG;
    default:
        return CHORUS_ERR_SYSTEM;
    }
}

/* Logs errno for a failed call about addr and converts it. Peer faults go to debug. */
static chorus_status_t sock_fail(const char *what, const char *addr, int err)
{
    chorus_status_t status = sock_errno_status(err);

    errno = err;
    if (status == CHORUS_ERR_PEER_FAILED || status == CHORUS_ERR_TIMEOUT)
        chorus_debug("%s %s failed: %m", what, addr);
    else
        chorus_error("%s %s failed: %m", what, addr);
    return status;
}

static chorus_status_t sock_fail_fd(const char *what, int fd, int err)
{
    char where[32];

    snprintf(where, sizeof(where), "fd %d", fd);
    return sock_fail(what, where, err);
}

static int sock_parse_port(const char *text, int *port_p)
{
    long port = 0;

    if (*text == '\0' || strlen(text) > 5)
        return -1;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        port = port * 10 + (*p - '0');
    }
    if (port > 65535)
        return -1;
    *port_p = (int)port;
    return 0;
}

chorus_status_t chorus__sock_parse_addr(const char *addr, char *host, size_t host_len,
                                        int *port_p)
{
    const char *host_start = addr, *host_end, *port_text;

    if (addr == NULL) {
        chorus_error("address is NULL; expected \"host:port\"");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (addr[0] == '[') {
        host_start = addr + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL || host_end[1] != ':')
            goto err_syntax;
        port_text = host_end + 2;
    } else {
        host_end = strrchr(addr, ':');
        /* A bare IPv6 address is ambiguous: its last group would read as the port. */
        if (host_end == NULL || memchr(addr, ':', (size_t)(host_end - addr)) != NULL)
            goto err_syntax;
        port_text = host_end + 1;
    }
    if (host_end == host_start || (size_t)(host_end - host_start) >= host_len)
        goto err_syntax;
    if (sock_parse_port(port_text, port_p) != 0)
        goto err_syntax;
    memcpy(host, host_start, (size_t)(host_end - host_start));
    host[host_end - host_start] = '\0';
    return CHORUS_OK;

err_syntax:
    chorus_error("address '%s' is not \"host:port\" or \"[ipv6]:port\" with a port "
                 "in 0..65535", addr);
    return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__sock_format(const struct sockaddr *sa, socklen_t sa_len, char *buf,
                                    size_t buf_len)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    int rc, n;

    rc = getnameinfo(sa, sa_len, host, sizeof(host), port, sizeof(port),
                     NI_NUMERICHOST | NI_NUMERICSERV);
    if (rc != 0) {
        chorus_error("getnameinfo failed: %s", gai_strerror(rc));
        return CHORUS_ERR_SYSTEM;
    }
    if (sa->sa_family == AF_INET6)
        n = snprintf(buf, buf_len, "[%s]:%s", host, port);
    else
        n = snprintf(buf, buf_len, "%s:%s", host, port);
    if (n < 0 || (size_t)n >= buf_len) {
        chorus_error("address buffer of %zu bytes is too small for %s:%s", buf_len, host, port);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Numeric addresses first, so a literal never waits on a name service. */
static chorus_status_t sock_resolve(const char *addr, struct addrinfo **res_p)
{
    char host[CHORUS_SOCK_HOST_MAX], port_text[8];
    struct addrinfo hints;
    chorus_status_t status;
    int port, rc;

    status = chorus__sock_parse_addr(addr, host, sizeof(host), &port);
    if (status != CHORUS_OK)
        return status;
    snprintf(port_text, sizeof(port_text), "%d", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    rc = getaddrinfo(host, port_text, &hints, res_p);
    if (rc == EAI_NONAME) {
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
        rc = getaddrinfo(host, port_text, &hints, res_p);
    }
    if (rc == 0)
        return CHORUS_OK;
    if (rc == EAI_SYSTEM) {
        chorus_error("cannot resolve '%s': %m", addr);
        return CHORUS_ERR_SYSTEM;
    }
    chorus_error("cannot resolve '%s': %s", addr, gai_strerror(rc));
    return rc == EAI_NONAME ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_SYSTEM;
}

static void sock_set_nodelay(int fd)
{
    int one = 1;

    /* Handshakes are small request/response messages; Nagle would only add latency. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        chorus_debug("setsockopt(TCP_NODELAY) on fd %d failed: %m", fd);
}

static int sock_listen_one(const struct addrinfo *ai, int backlog)
{
    int fd, one = 1;

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        goto err_close;
    /* "[::]:port" means IPv6 only; IPv4 peers must be given an IPv4 address. */
    if (ai->ai_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0)
        goto err_close;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0)
        goto err_close;
    return fd;

err_close: {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
}

chorus_status_t chorus__sock_listen(const char *addr, int backlog, int *fd_p, char *bound,
                                    size_t bound_len)
{
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof(ss);
    struct addrinfo *res, *ai;
    chorus_status_t status;
    int fd = -1, err = EADDRNOTAVAIL;

    status = sock_resolve(addr, &res);
    if (status != CHORUS_OK)
        return status;
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = sock_listen_one(ai, backlog);
        if (fd < 0)
            err = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = err;
        chorus_error("cannot listen on %s: %m", addr);
        return sock_errno_status(err);
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &ss_len) != 0) {
        status = sock_fail("getsockname of the listener on", addr, errno);
        goto err_close;
    }
    status = chorus__sock_format((struct sockaddr *)&ss, ss_len, bound, bound_len);
    if (status != CHORUS_OK)
        goto err_close;
    *fd_p = fd;
    return CHORUS_OK;

err_close:
    close(fd);
    return status;
}

chorus_status_t chorus__sock_accept(int listen_fd, int *fd_p, char *peer, size_t peer_len)
{
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof(ss);
    int fd;

    fd = accept4(listen_fd, (struct sockaddr *)&ss, &ss_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
            errno == ECONNABORTED) {
            *fd_p = -1;
            return CHORUS_OK;
        }
        chorus_error("accept on listener fd %d failed: %m", listen_fd);
        return sock_errno_status(errno);
    }
    if (chorus__sock_format((struct sockaddr *)&ss, ss_len, peer, peer_len) != CHORUS_OK)
        snprintf(peer, peer_len, "(unknown peer)");
    sock_set_nodelay(fd);
    *fd_p = fd;
    return CHORUS_OK;
}

/*
 * One non-blocking connection attempt, waited for until deadline.
 * Returns the socket, or -1 with errno (ETIMEDOUT when the deadline passed).
 */
static int sock_connect_one(const struct addrinfo *ai, double deadline)
{
    int fd, err = 0;
    socklen_t err_len = sizeof(err);
    struct pollfd pfd;

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS)
            goto err_close;
        pfd.fd = fd;
        pfd.events = POLLOUT;
        do {
            int ms = chorus__ms_left(deadline);
            pfd.revents = 0;
            int rc = ms > 0 ? poll(&pfd, 1, ms) : 0;
            if (rc < 0 && errno != EINTR)
                goto err_close;
            if (rc == 0 && chorus__ms_left(deadline) == 0) {
                errno = ETIMEDOUT;
                goto err_close;
            }
        } while (pfd.revents == 0);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0)
            goto err_close;
        if (err != 0) {
            errno = err;
            goto err_close;
        }
    }
    return fd;

err_close:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

chorus_status_t chorus__sock_connect(const char *addr, double deadline, int *fd_p)
{
    struct addrinfo *res, *ai;
    chorus_status_t status;
    int fd = -1, err = 0, pause_ms = SOCK_RETRY_FIRST_MS;

    status = sock_resolve(addr, &res);
    if (status != CHORUS_OK)
        return status;
    for (;;) {
        int refused = 0;
        for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
            fd = sock_connect_one(ai, deadline);
            if (fd < 0) {
                err = errno;
                refused |= err == ECONNREFUSED;
            }
        }
        if (fd >= 0 || !refused || chorus__ms_left(deadline) == 0)
            break;
        /* Nobody listens yet: the peer may still be starting. */
        if (pause_ms > chorus__ms_left(deadline))
            pause_ms = chorus__ms_left(deadline);
        poll(NULL, 0, pause_ms);
        pause_ms = pause_ms * 2 > SOCK_RETRY_MAX_MS ? SOCK_RETRY_MAX_MS : pause_ms * 2;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        status = sock_fail("connect to", addr, err);
        /* Refused until the deadline: the caller waited as long as it was allowed to. */
        return err == ECONNREFUSED ? CHORUS_ERR_TIMEOUT : status;
    }
    sock_set_nodelay(fd);
    *fd_p = fd;
    return CHORUS_OK;
}

chorus_status_t chorus__sock_local_host(int fd, char *host, size_t host_len)
{
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof(ss);
    char text[NI_MAXHOST];
    int rc;

    if (getsockname(fd, (struct sockaddr *)&ss, &ss_len) != 0) {
        chorus_error("getsockname of fd %d failed: %m", fd);
        return sock_errno_status(errno);
    }
    rc = getnameinfo((struct sockaddr *)&ss, ss_len, text, sizeof(text), NULL, 0,
                     NI_NUMERICHOST);
    if (rc != 0) {
        chorus_error("getnameinfo of fd %d failed: %s", fd, gai_strerror(rc));
        return CHORUS_ERR_SYSTEM;
    }
    if (strlen(text) >= host_len) {
        chorus_error("host buffer of %zu bytes is too small for '%s'", host_len, text);
        return CHORUS_ERR_INVALID_ARG;
    }
    strcpy(host, text);
    return CHORUS_OK;
}

chorus_status_t chorus__sock_recv_some(int fd, void *buf, size_t len, size_t *done_p)
{
    ssize_t n;

    *done_p = 0;
    if (len == 0)
        return CHORUS_OK;
    do {
        n = recv(fd, buf, len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        *done_p = (size_t)n;
        return CHORUS_OK;
    }
    if (n == 0) {
        chorus_debug("peer on fd %d closed the connection", fd);
        return CHORUS_ERR_PEER_FAILED;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return CHORUS_OK;
    return sock_fail_fd("recv on", fd, errno);
}

chorus_status_t chorus__sock_send_some(int fd, const void *buf, size_t len, size_t *done_p)
{
    ssize_t n;

    *done_p = 0;
    if (len == 0)
        return CHORUS_OK;
    do {
        /* MSG_NOSIGNAL: a vanished peer is an error to report, not a SIGPIPE. */
        n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n >= 0) {
        *done_p = (size_t)n;
        return CHORUS_OK;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return CHORUS_OK;
    return sock_fail_fd("send on", fd, errno);
}

/* Waits until fd is ready for events or the deadline passes (CHORUS_ERR_TIMEOUT). */
static chorus_status_t sock_wait(int fd, short events, double deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int ms = chorus__ms_left(deadline);

    if (ms == 0)
        return CHORUS_ERR_TIMEOUT;
    if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
        return sock_fail_fd("poll on", fd, errno);
    return CHORUS_OK;
}

chorus_status_t chorus__sock_read_full(int fd, void *buf, size_t len, double deadline)
{
    uint8_t *p = buf;
    chorus_status_t status;
    size_t got;

    while (len > 0) {
        status = chorus__sock_recv_some(fd, p, len, &got);
        if (status != CHORUS_OK)
            return status;
        if (got == 0) {
            status = sock_wait(fd, POLLIN, deadline);
            if (status != CHORUS_OK)
                return status;
        }
        p += got;
        len -= got;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__sock_write_full(int fd, const void *buf, size_t len, double deadline)
{
    const uint8_t *p = buf;
    chorus_status_t status;
    size_t sent;

    while (len > 0) {
        status = chorus__sock_send_some(fd, p, len, &sent);
        if (status != CHORUS_OK)
            return status;
        if (sent == 0) {
            status = sock_wait(fd, POLLOUT, deadline);
            if (status != CHORUS_OK)
                return status;
        }
        p += sent;
        len -= sent;
    }
    return CHORUS_OK;
}
