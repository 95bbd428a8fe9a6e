/*
 * TCP socket helpers with deadlines. Every socket these functions create is
 * non-blocking and close-on-exec; the *_full calls wait with poll() until
 * their deadline (seconds on chorus__now's clock), so nothing blocks forever.
 *
 * Addresses are text, "host:port" or "[v6 address]:port". errno is turned
 * into a chorus_status_t here and logged once; callers pass the status up.
 * Conditions a peer causes (reset, closed, timed out) are logged at debug
 * level only, because the caller knows what the connection was for and says so.
 */
#ifndef CHORUS_UTIL_SOCK_H
#define CHORUS_UTIL_SOCK_H

#include <stddef.h>
#include <sys/socket.h>

#include "chorus.h"

/* Room for any numeric "host:port", IPv6 with brackets and scope included. */
#define CHORUS_SOCK_ADDR_MAX 96
/* Room for a host name or numeric host, as accepted by chorus__sock_parse_addr. */
#define CHORUS_SOCK_HOST_MAX 256

/*
 * Split "host:port" or "[host]:port" into host (brackets removed) and port.
 * The host must not be empty; the port is decimal, 0..65535.
 */
chorus_status_t chorus__sock_parse_addr(const char *addr, char *host, size_t host_len,
                                        int *port_p);

/* Numeric "host:port" ("[host]:port" for IPv6) of a socket address. */
chorus_status_t chorus__sock_format(const struct sockaddr *sa, socklen_t sa_len, char *buf,
                                    size_t buf_len);

/*
 * Listen on addr, bound to exactly that address (never a wildcard the caller
 * did not name). Port 0 picks a free port; bound receives the "host:port"
 * actually bound. SO_REUSEADDR is set so a restarted job can reuse the port.
 */
chorus_status_t chorus__sock_listen(const char *addr, int backlog, int *fd_p, char *bound,
                                    size_t bound_len);

/*
 * Accept one pending connection. *fd_p is -1 when none is pending. peer
 * receives the peer's "host:port". The new socket has TCP_NODELAY.
 */
chorus_status_t chorus__sock_accept(int listen_fd, int *fd_p, char *peer, size_t peer_len);

/*
 * Connect to addr before deadline. A refused connection (the listener is not
 * up yet) is retried with a growing pause until the deadline: CHORUS_ERR_TIMEOUT.
 */
chorus_status_t chorus__sock_connect(const char *addr, double deadline, int *fd_p);

/* Numeric address of this end of a connected socket, without port or brackets. */
chorus_status_t chorus__sock_local_host(int fd, char *host, size_t host_len);

/*
 * Non-blocking partial transfers: *done_p receives the bytes moved, 0 when the
 * socket is not ready. CHORUS_ERR_PEER_FAILED when the peer closed or reset.
 */
chorus_status_t chorus__sock_recv_some(int fd, void *buf, size_t len, size_t *done_p);
chorus_status_t chorus__sock_send_some(int fd, const void *buf, size_t len, size_t *done_p);

/* Transfer exactly len bytes before deadline, else CHORUS_ERR_TIMEOUT or PEER_FAILED. */
chorus_status_t chorus__sock_read_full(int fd, void *buf, size_t len, double deadline);
chorus_status_t chorus__sock_write_full(int fd, const void *buf, size_t len, double deadline);

#endif
