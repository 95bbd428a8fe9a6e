/*
 * Fuzz target: the TCP address blob each rank receives for every other rank
 * through the bootstrap (another rank wrote it: it is untrusted input), and
 * its numeric resolution to a socket address.
 */
#include <netdb.h>
#include <netinet/in.h>

#include "transports/tcp/tcp.h"
#include "fuzz.h"

/* What tcp_get_address publishes for a socket address; 0 when it cannot. */
static int encode_blob(const struct sockaddr_storage *ss, socklen_t len, uint8_t *blob)
{
    tl_tcp_addr_t a;

    memset(&a, 0, sizeof(a));
    if (getnameinfo((const struct sockaddr *)ss, len, a.host, sizeof(a.host), a.port,
                    sizeof(a.port), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return 0;
    memset(blob, 0, TL_ADDR_MAX);
    memcpy(blob, &a, sizeof(a));
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_storage ss, ss2;
    socklen_t sslen = 0, sslen2 = 0;
    uint8_t blob[TL_ADDR_MAX];
    tl_tcp_addr_t addr, again;

    if (tl_tcp_addr_decode(data, size, &addr) != CHORUS_OK)
        return 0;
    FUZZ_CHECK(size >= sizeof(tl_tcp_addr_t));
    FUZZ_CHECK_STR(addr.host, sizeof(addr.host));
    FUZZ_CHECK_STR(addr.port, sizeof(addr.port));
    if (tl_tcp_addr_resolve(&addr, &ss, &sslen) != 0)
        return 0;
    FUZZ_CHECK(sslen > 0 && sslen <= sizeof(ss));
    FUZZ_CHECK(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
    FUZZ_CHECK(sslen == (ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                 : sizeof(struct sockaddr_in6)));

    /* The blob this address publishes resolves to the same address. */
    FUZZ_CHECK(encode_blob(&ss, sslen, blob));
    FUZZ_CHECK(tl_tcp_addr_decode(blob, sizeof(blob), &again) == CHORUS_OK);
    FUZZ_CHECK(tl_tcp_addr_resolve(&again, &ss2, &sslen2) == 0);
    FUZZ_CHECK(sslen2 == sslen && memcmp(&ss2, &ss, sslen) == 0);
    return 0;
}
