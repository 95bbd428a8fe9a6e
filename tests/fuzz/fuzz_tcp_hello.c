/*
 * Fuzz target: the TCP connection hello (52 bytes) as the accepting rank
 * decodes it. The first 8 input bytes choose the acceptor's rank and the
 * communicator size; the rest is what arrived on the socket.
 */
#include "transports/tcp/tcp.h"
#include "fuzz.h"

#define SIZE_BOUND (1 << 20) /* the bootstrap's bound on ranks */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int comm_size = (int)(fuzz_u32(data, size, 0) % SIZE_BOUND) + 1;
    int rank = (int)(fuzz_u32(data, size, 4) % (uint32_t)comm_size);
    const uint8_t *msg = data + (size < 8 ? size : 8);
    size_t len = size < 8 ? 0 : size - 8;
    uint8_t mac[TL_TCP_MAC_BYTES], mac2[TL_TCP_MAC_BYTES];
    char why[128];
    uint32_t from = UINT32_MAX, from2, to, lane = UINT32_MAX, lane2;
    tl_tcp_hello_t enc;
    chorus_status_t status;

    why[sizeof(why) - 1] = 'G';
    status = tl_tcp_hello_decode(msg, len, rank, comm_size, &from, &lane, mac, why,
                                 sizeof(why) - 1);
    FUZZ_CHECK(why[sizeof(why) - 1] == 'G');
    if (status != CHORUS_OK) {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL && from == UINT32_MAX && lane == UINT32_MAX);
        FUZZ_CHECK_STR(why, sizeof(why) - 1);
    } else {
        /* Any other rank of this context may connect to this one: connections open on
         * first use, from whichever side sends first. */
        FUZZ_CHECK(len == sizeof(tl_tcp_hello_t));
        FUZZ_CHECK(from != (uint32_t)rank && from < (uint32_t)comm_size);
        FUZZ_CHECK(lane < TL_TCP_STREAMS_MAX);
        FUZZ_CHECK(memcmp(mac, msg + 20, sizeof(mac)) == 0);
        /* encode(decode(bytes)) == bytes */
        tl_tcp_hello_encode(&enc, from, (uint32_t)rank, lane, mac);
        FUZZ_CHECK(memcmp(&enc, msg, sizeof(enc)) == 0);
    }

    /* decode(encode(from, to, lane, mac)) with the input's fields. */
    from = fuzz_u32(msg, len, 0) % (uint32_t)(comm_size + 1);
    to = data[size ? size - 1 : 0] & 1 ? (uint32_t)rank : fuzz_u32(msg, len, 4);
    lane = fuzz_u32(msg, len, 8) % (2 * TL_TCP_STREAMS_MAX);
    memset(mac, 0, sizeof(mac));
    memcpy(mac, msg, len < sizeof(mac) ? len : sizeof(mac));
    tl_tcp_hello_encode(&enc, from, to, lane, mac);
    status = tl_tcp_hello_decode(&enc, sizeof(enc), rank, comm_size, &from2, &lane2, mac2, why,
                                 sizeof(why));
    FUZZ_CHECK((status == CHORUS_OK) ==
               (to == (uint32_t)rank && from != (uint32_t)rank && from < (uint32_t)comm_size &&
                lane < TL_TCP_STREAMS_MAX));
    if (status == CHORUS_OK)
        FUZZ_CHECK(from2 == from && lane2 == lane && memcmp(mac2, mac, sizeof(mac)) == 0);
    return 0;
}
