/*
 * Fuzz target: the TCP transport's 24-byte message header, decoded by
 * tl_tcp_header_check before any payload is read or any buffer is sized by it.
 */
#include <endian.h>

#include "transports/tcp/tcp.h"
#include "fuzz.h"

static uint64_t le64_at(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t tag = 0, length = 0, tag2, length2;
    tl_tcp_hdr_t wire, enc;
    chorus_status_t status;

    /* The connection reads exactly one header before decoding it. */
    if (size < sizeof(wire))
        return 0;
    memcpy(&wire, data, sizeof(wire));
    status = tl_tcp_header_check(&wire, &tag, &length);
    if (status == CHORUS_OK) {
        FUZZ_CHECK(length <= TL_TCP_MAX_MSG);
        FUZZ_CHECK(tag == le64_at(data + 8) && length == le64_at(data + 16));
        /* A header the check admits is exactly what the encoder writes for its fields. */
        tl_tcp_header_encode(&enc, tag, length);
        FUZZ_CHECK(memcmp(&enc, data, sizeof(enc)) == 0);
    } else {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL);
        FUZZ_CHECK(tag == 0 && length == 0); /* outputs untouched on failure */
    }

    /* decode(encode(tag, length)) for the fields of the input, the length maybe too big. */
    tag = le64_at(data + 8);
    length = le64_at(data + 16) >> (data[0] % 64);
    tl_tcp_header_encode(&enc, tag, length);
    status = tl_tcp_header_check(&enc, &tag2, &length2);
    FUZZ_CHECK((status == CHORUS_OK) == (length <= TL_TCP_MAX_MSG));
    if (status == CHORUS_OK)
        FUZZ_CHECK(tag2 == tag && length2 == length);
    return 0;
}
