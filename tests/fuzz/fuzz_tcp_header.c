/*
 * Fuzz target: the TCP transport's 24-byte message header (magic, space, tag,
 * length), decoded by
 * tl_tcp_header_check before any payload is read or any buffer is sized by it.
 */
#include <endian.h>

#include "transports/tcp/tcp.h"
#include "fuzz.h"

static uint32_t le32_at(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return le32toh(v);
}

static uint64_t le64_at(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t tag = 0, length = 0, tag2, length2;
    uint32_t space = 0, space2;
    tl_tcp_hdr_t wire, enc;
    chorus_status_t status;

    /* The connection reads exactly one header before decoding it. */
    if (size < sizeof(wire))
        return 0;
    memcpy(&wire, data, sizeof(wire));
    status = tl_tcp_header_check(&wire, &space, &tag, &length);
    if (status == CHORUS_OK) {
        FUZZ_CHECK(length <= TL_TCP_MAX_MSG);
        FUZZ_CHECK(!(tag & TL_TAG_CTRL) || length <= TL_CTRL_MAX);
        FUZZ_CHECK(space == le32_at(data + 4) && tag == le64_at(data + 8) &&
                   length == le64_at(data + 16));
        /* A header the check admits is exactly what the encoder writes for its fields. */
        tl_tcp_header_encode(&enc, space, tag, length);
        FUZZ_CHECK(memcmp(&enc, data, sizeof(enc)) == 0);
    } else {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL);
        FUZZ_CHECK(space == 0 && tag == 0 && length == 0); /* outputs untouched on failure */
    }

    /* decode(encode(...)) for the fields of the input, the length maybe too big. */
    space = le32_at(data + 4);
    tag = le64_at(data + 8);
    length = le64_at(data + 16) >> (data[0] % 64);
    tl_tcp_header_encode(&enc, space, tag, length);
    status = tl_tcp_header_check(&enc, &space2, &tag2, &length2);
    FUZZ_CHECK((status == CHORUS_OK) ==
               (length <= TL_TCP_MAX_MSG && (!(tag & TL_TAG_CTRL) || length <= TL_CTRL_MAX)));
    if (status == CHORUS_OK)
        FUZZ_CHECK(space2 == space && tag2 == tag && length2 == length);
    return 0;
}
