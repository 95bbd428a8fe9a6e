/*
 * Which local interfaces a rank listens on, and which of a peer's published
 * addresses its streams may go to (see tcp.h): pure functions over a list
 * of interfaces as getifaddrs gives it, so that tests can hand them any.
 */
#include "transports/tcp/tcp.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

static socklen_t family_len(int family)
{
    return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* The address bytes of an AF_INET or AF_INET6 sockaddr; its length in *len_p. */
static const unsigned char *addr_bytes(const struct sockaddr *sa, size_t *len_p)
{
    if (sa->sa_family == AF_INET) {
        *len_p = 4;
        return (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    }
    *len_p = 16;
    return (const unsigned char *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
}

/* a and b (of one family) agree under mask; same: they are one address. */
static int masked_equal(const struct sockaddr *a, const struct sockaddr *b,
                        const struct sockaddr *mask)
{
    size_t len, len_b, mlen;
    const unsigned char *x = addr_bytes(a, &len), *y = addr_bytes(b, &len_b);
    const unsigned char *m = mask != NULL ? addr_bytes(mask, &mlen) : NULL;

    for (size_t i = 0; i < len; i++)
        if ((x[i] & (m != NULL ? m[i] : 0xff)) != (y[i] & (m != NULL ? m[i] : 0xff)))
            return 0;
    return 1;
}

/* A link-local address (169.254/16, fe80::/10): it needs a scope to be dialled. */
static int link_local(const struct sockaddr *sa)
{
    size_t len;
    const unsigned char *a = addr_bytes(sa, &len);

    return len == 4 ? a[0] == 169 && a[1] == 254 : a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

/* An interface with an address of family that carries traffic to other machines. */
static int iface_usable(const struct ifaddrs *ifa, int family)
{
    return ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == family &&
           ifa->ifa_netmask != NULL && ifa->ifa_netmask->sa_family == family &&
           (ifa->ifa_flags & IFF_UP) && (ifa->ifa_flags & IFF_RUNNING) &&
           !(ifa->ifa_flags & IFF_LOOPBACK) && !link_local(ifa->ifa_addr);
}

int tl_tcp_iface_address(const struct ifaddrs *list, const char *name, char *host, size_t len)
{
    for (int want = AF_INET; ; want = AF_INET6) {
        for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != want ||
                strcmp(ifa->ifa_name, name) != 0)
                continue;
            if (getnameinfo(ifa->ifa_addr, family_len(want), host, (socklen_t)len, NULL, 0,
                            NI_NUMERICHOST) == 0)
                return 1;
        }
        if (want == AF_INET6)
            return 0;
    }
}

int tl_tcp_iface_auto(const struct ifaddrs *list, const struct sockaddr *first,
                      char hosts[][TL_TCP_HOST_MAX], int max)
{
    const struct ifaddrs *chosen[TL_TCP_ADDRS_MAX];
    const struct ifaddrs *first_ifa = NULL;
    int n = 0;

    if (max > TL_TCP_ADDRS_MAX)
        max = TL_TCP_ADDRS_MAX;
    /* The interface the bootstrap's address is on; none (loopback, or not ours): no others. */
    for (const struct ifaddrs *ifa = list; ifa != NULL && first_ifa == NULL; ifa = ifa->ifa_next)
        if (iface_usable(ifa, first->sa_family) && masked_equal(ifa->ifa_addr, first, NULL))
            first_ifa = ifa;
    if (first_ifa == NULL)
        return 0;
    chosen[n++] = first_ifa;
    for (const struct ifaddrs *ifa = list; ifa != NULL && n < max; ifa = ifa->ifa_next) {
        int known = 0;

        if (!iface_usable(ifa, first->sa_family))
            continue;
        /* One address per network: a second on a network already chosen adds no link. */
        for (int i = 0; i < n && !known; i++)
            known = masked_equal(ifa->ifa_addr, chosen[i]->ifa_addr, chosen[i]->ifa_netmask) ||
                    masked_equal(ifa->ifa_addr, chosen[i]->ifa_addr, ifa->ifa_netmask);
        if (!known)
            chosen[n++] = ifa;
    }
    for (int i = 1; i < n; i++)
        if (getnameinfo(chosen[i]->ifa_addr, family_len(first->sa_family), hosts[i - 1],
                        TL_TCP_HOST_MAX, NULL, 0, NI_NUMERICHOST) != 0)
            return i - 1;
    return n - 1;
}

int tl_tcp_iface_on_link(const struct ifaddrs *list, const struct sockaddr *sa)
{
    int on_link = 0;

    if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) || link_local(sa))
        return 0;
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (!iface_usable(ifa, sa->sa_family))
            continue;
        /* A peer never holds this machine's own address (two machines' private bridges may). */
        if (masked_equal(ifa->ifa_addr, sa, NULL))
            return 0;
        on_link |= masked_equal(ifa->ifa_addr, sa, ifa->ifa_netmask);
    }
    return on_link;
}

int tl_tcp_ifaces_auto(const tl_tcp_config_t *cfg)
{
    return strcmp(cfg->ifaces.s, "auto") == 0;
}

int tl_tcp_ifaces_bootstrap(const tl_tcp_config_t *cfg)
{
    return strcmp(cfg->ifaces.s, "bootstrap") == 0 || cfg->ifaces.s[0] == '\0';
}
