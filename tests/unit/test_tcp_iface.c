/*
 * transports/tcp/tcp_iface.c over lists of interfaces made here:
 * CHORUS_TCP_IFACES=auto listens on the bootstrap's address and one more
 * per other network that is up (not loopback, not link-local), and keeps a
 * peer's further addresses only when they lie on a network this machine is
 * on and are not its own.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

#include "transports/tcp/tcp.h"

#define NIFS_MAX 12

typedef struct {
    struct ifaddrs ifa[NIFS_MAX];
    struct sockaddr_in addr[NIFS_MAX], mask[NIFS_MAX];
    struct sockaddr_in6 addr6[NIFS_MAX], mask6[NIFS_MAX];
    int n;
} iflist_t;

static struct sockaddr_in v4(const char *text)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};

    cr_assert_eq(inet_pton(AF_INET, text, &sa.sin_addr), 1, "%s", text);
    return sa;
}

/* Add an IPv4 interface: name, address, prefix length, flags (IFF_*). */
static void add4(iflist_t *l, const char *name, const char *addr, int prefix, unsigned flags)
{
    int i = l->n++;

    cr_assert_lt(i, NIFS_MAX);
    l->addr[i] = v4(addr);
    l->mask[i] = (struct sockaddr_in){.sin_family = AF_INET};
    l->mask[i].sin_addr.s_addr = prefix == 0 ? 0 : htonl(~0u << (32 - prefix));
    l->ifa[i] = (struct ifaddrs){.ifa_name = (char *)name, .ifa_flags = flags,
                                 .ifa_addr = (struct sockaddr *)&l->addr[i],
                                 .ifa_netmask = (struct sockaddr *)&l->mask[i]};
    if (i > 0)
        l->ifa[i - 1].ifa_next = &l->ifa[i];
}

/* Add an IPv6 interface with a /64. */
static void add6(iflist_t *l, const char *name, const char *addr, unsigned flags)
{
    int i = l->n++;

    cr_assert_lt(i, NIFS_MAX);
    l->addr6[i] = (struct sockaddr_in6){.sin6_family = AF_INET6};
    cr_assert_eq(inet_pton(AF_INET6, addr, &l->addr6[i].sin6_addr), 1);
    l->mask6[i] = (struct sockaddr_in6){.sin6_family = AF_INET6};
    memset(&l->mask6[i].sin6_addr, 0xff, 8);
    l->ifa[i] = (struct ifaddrs){.ifa_name = (char *)name, .ifa_flags = flags,
                                 .ifa_addr = (struct sockaddr *)&l->addr6[i],
                                 .ifa_netmask = (struct sockaddr *)&l->mask6[i]};
    if (i > 0)
        l->ifa[i - 1].ifa_next = &l->ifa[i];
}

#define UP (IFF_UP | IFF_RUNNING)

/* A node of the test bed: loopback, two links, and a bridge with no carrier. */
static void testbed_node(iflist_t *l, const char *eth0, const char *eth1)
{
    add4(l, "lo", "127.0.0.1", 8, UP | IFF_LOOPBACK);
    add4(l, "eth0", eth0, 24, UP);
    add6(l, "eth0", "fd00::1", UP);
    add4(l, "eth1", eth1, 24, UP);
    add4(l, "docker0", "172.17.0.1", 16, IFF_UP);      /* up, not running */
}

Test(tcp_iface, auto_adds_one_address_per_other_network)
{
    iflist_t l = {.n = 0};
    char hosts[TL_TCP_ADDRS_MAX][TL_TCP_HOST_MAX];
    struct sockaddr_in first = v4("10.9.0.2");

    testbed_node(&l, "10.9.0.2", "10.9.1.2");
    add4(&l, "eth0:1", "10.9.0.77", 24, UP);            /* a second address on eth0's network */
    add4(&l, "ib0", "192.168.50.2", 24, UP);
    add4(&l, "eth2", "169.254.3.4", 16, UP);            /* link-local: not dialled */
    add6(&l, "eth1", "fe80::5", UP);
    cr_assert_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&first, hosts, TL_TCP_ADDRS_MAX),
                 2);
    cr_expect_str_eq(hosts[0], "10.9.1.2");
    cr_expect_str_eq(hosts[1], "192.168.50.2");
}

/* IPv6: the same, and the link-local addresses every interface has are no networks. */
Test(tcp_iface, auto_ipv6)
{
    iflist_t l = {.n = 0};
    char hosts[TL_TCP_ADDRS_MAX][TL_TCP_HOST_MAX];
    struct sockaddr_in6 first = {.sin6_family = AF_INET6};

    testbed_node(&l, "10.9.0.2", "10.9.1.2");
    add6(&l, "eth1", "fe80::5", UP);
    add6(&l, "eth0", "fe80::6", UP);
    cr_assert_eq(inet_pton(AF_INET6, "fd00::1", &first.sin6_addr), 1);
    cr_expect_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&first, hosts, TL_TCP_ADDRS_MAX),
                 0);
    add6(&l, "eth1", "fd01::7", UP);
    cr_assert_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&first, hosts, TL_TCP_ADDRS_MAX),
                 1);
    cr_expect_str_eq(hosts[0], "fd01::7");
}

Test(tcp_iface, auto_stops_at_max)
{
    iflist_t l = {.n = 0};
    char hosts[TL_TCP_ADDRS_MAX][TL_TCP_HOST_MAX];
    struct sockaddr_in first = v4("10.0.0.1");

    add4(&l, "a", "10.0.0.1", 24, UP);
    add4(&l, "b", "10.0.1.1", 24, UP);
    add4(&l, "c", "10.0.2.1", 24, UP);
    cr_expect_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&first, hosts, 2), 1);
    cr_expect_str_eq(hosts[0], "10.0.1.1");
}

/* The ranks share a machine (a loopback bootstrap), or the address is not one of ours. */
Test(tcp_iface, auto_adds_nothing_off_a_real_interface)
{
    iflist_t l = {.n = 0};
    char hosts[TL_TCP_ADDRS_MAX][TL_TCP_HOST_MAX];
    struct sockaddr_in loop = v4("127.0.0.1"), other = v4("10.9.5.5");

    testbed_node(&l, "10.9.0.2", "10.9.1.2");
    cr_expect_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&loop, hosts, TL_TCP_ADDRS_MAX), 0);
    cr_expect_eq(tl_tcp_iface_auto(l.ifa, (struct sockaddr *)&other, hosts, TL_TCP_ADDRS_MAX),
                 0);
}

Test(tcp_iface, on_link)
{
    iflist_t l = {.n = 0};
    struct sockaddr_in peer_eth1 = v4("10.9.1.3"), routed = v4("10.20.0.3"),
                       own = v4("10.9.1.2"), bridge = v4("172.17.0.2"),
                       loop = v4("127.0.0.1");
    struct sockaddr_in6 peer6 = {.sin6_family = AF_INET6};

    testbed_node(&l, "10.9.0.2", "10.9.1.2");
    cr_assert_eq(inet_pton(AF_INET6, "fd00::2", &peer6.sin6_addr), 1);
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&peer_eth1), 1);
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&peer6), 1);
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&routed), 0, "not on a link");
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&own), 0, "this machine's own");
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&bridge), 0,
                 "on a bridge without carrier");
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&loop), 0, "loopback");
    cr_expect_eq(tl_tcp_iface_on_link(NULL, (struct sockaddr *)&peer_eth1), 0, "no list");
    add6(&l, "eth1", "fe80::1", UP);
    cr_assert_eq(inet_pton(AF_INET6, "fe80::2", &peer6.sin6_addr), 1);
    cr_expect_eq(tl_tcp_iface_on_link(l.ifa, (struct sockaddr *)&peer6), 0, "link-local");
}

Test(tcp_iface, address_of_a_name)
{
    iflist_t l = {.n = 0};
    char host[TL_TCP_HOST_MAX];

    testbed_node(&l, "10.9.0.2", "10.9.1.2");
    add6(&l, "v6only", "fd00::9", UP);
    cr_expect_eq(tl_tcp_iface_address(l.ifa, "eth0", host, sizeof(host)), 1);
    cr_expect_str_eq(host, "10.9.0.2", "IPv4 first");
    cr_expect_eq(tl_tcp_iface_address(l.ifa, "v6only", host, sizeof(host)), 1);
    cr_expect_str_eq(host, "fd00::9");
    cr_expect_eq(tl_tcp_iface_address(l.ifa, "nosuch", host, sizeof(host)), 0);
}
