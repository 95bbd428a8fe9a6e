/*
 * Fuzz target: the TCP address blob each rank receives for every other rank
 * through the bootstrap (another rank wrote it: it is untrusted input), and
 * the numeric resolution of its addresses to socket addresses.
 */
#include <netdb.h>
#include <netinet/in.h>

#include "transports/tcp/tcp.h"
#include "fuzz.h"

/* What tcp_get_address publishes for one socket address; 0 when it cannot. */
static int encode_addr(const struct sockaddr_storage *ss, socklen_t len, tl_tcp_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    return getnameinfo((const struct sockaddr *)ss, len, a->host, sizeof(a->host), a->port,
                       sizeof(a->port), NI_NUMERICHOST | NI_NUMERICSERV) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t buf[TL_ADDR_MAX];
    tl_tcp_blob_t blob, again;

    if (tl_tcp_blob_decode(data, size, &blob) != CHORUS_OK)
        return 0;
    FUZZ_CHECK(size >= sizeof(tl_tcp_blob_t));
    FUZZ_CHECK(blob.count >= 1 && blob.count <= TL_TCP_ADDRS_MAX);
    FUZZ_CHECK(blob.streams >= 1 && blob.streams <= TL_TCP_STREAMS_MAX);
    for (int i = 0; i < blob.count; i++) {
        struct sockaddr_storage ss, ss2;
        socklen_t sslen = 0, sslen2 = 0;
        tl_tcp_addr_t *a = &blob.addr[i];

        FUZZ_CHECK_STR(a->host, sizeof(a->host));
        FUZZ_CHECK_STR(a->port, sizeof(a->port));
        if (tl_tcp_addr_resolve(a, &ss, &sslen) != 0)
            continue;
        FUZZ_CHECK(sslen > 0 && sslen <= sizeof(ss));
        FUZZ_CHECK(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
        FUZZ_CHECK(sslen == (ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                     : sizeof(struct sockaddr_in6)));

        /* The blob this address publishes resolves to the same address. */
        memset(&again, 0, sizeof(again));
        again.count = 1;
        again.streams = blob.streams;
        FUZZ_CHECK(encode_addr(&ss, sslen, &again.addr[0]));
        memset(buf, 0, sizeof(buf));
        memcpy(buf, &again, sizeof(again));
        FUZZ_CHECK(tl_tcp_blob_decode(buf, sizeof(buf), &again) == CHORUS_OK);
        FUZZ_CHECK(tl_tcp_addr_resolve(&again.addr[0], &ss2, &sslen2) == 0);
        FUZZ_CHECK(sslen2 == sslen && memcmp(&ss2, &ss, sslen) == 0);
    }
    return 0;
}
