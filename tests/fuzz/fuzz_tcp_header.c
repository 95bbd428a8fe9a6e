/*
 * Fuzz target: the TCP transport's 32-byte frame header (magic, type, space,
 * id, tag, length), decoded by tl_tcp_header_check before any payload is
 * read or any buffer is sized by it.
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

/* The rules of tcp.h, restated: what each frame type may carry. */
static int frame_valid(const tl_tcp_frame_t *f)
{
    int ctrl = (f->tag & TL_TAG_CTRL) != 0;

    if (f->length > TL_TCP_MAX_MSG)
        return 0;
    switch (f->type) {
    case TL_TCP_FRAME_DATA:
        return f->id == 0 && (!ctrl || f->length <= TL_CTRL_MAX);
    case TL_TCP_FRAME_RTS:
        return !ctrl && f->length > 0;
    case TL_TCP_FRAME_CTS:
        /* space: the fragment size asked for; none for a dropped message. */
        if (f->length == 0)
            return f->space == 0 && f->tag == 0;
        return f->tag == 0 && f->space >= TL_TCP_FRAG_MIN && f->space <= TL_TCP_FRAG_MAX &&
               __builtin_popcount(f->space) == 1;
    case TL_TCP_FRAME_RDATA:
        /* tag: the fragment's offset in its message. */
        return f->space == 0 && f->tag < TL_TCP_MAX_MSG && f->length > 0 &&
               f->length <= TL_TCP_FRAG_MAX;
    case TL_TCP_FRAME_CREDIT:
        return f->space == 0 && f->tag == 0 && f->id == 0;
    default:
        return 0;
    }
}

static int frame_equal(const tl_tcp_frame_t *a, const tl_tcp_frame_t *b)
{
    return a->type == b->type && a->space == b->space && a->id == b->id && a->tag == b->tag &&
           a->length == b->length;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const tl_tcp_frame_t untouched = {TL_TCP_FRAME_CREDIT, 7, 7, 7, 7};
    tl_tcp_frame_t f = untouched, f2, in;
    tl_tcp_hdr_t wire, enc;
    chorus_status_t status;

    /* The connection reads exactly one header before decoding it. */
    if (size < sizeof(wire))
        return 0;
    memcpy(&wire, data, sizeof(wire));
    status = tl_tcp_header_check(&wire, &f);
    if (status == CHORUS_OK) {
        FUZZ_CHECK(frame_valid(&f));
        FUZZ_CHECK(f.type == data[4] && f.length == le64_at(data + 24) &&
                   f.tag == le64_at(data + 16));
        /* A header the check admits is exactly what the encoder writes for its fields. */
        tl_tcp_header_encode(&enc, &f);
        FUZZ_CHECK(memcmp(&enc, data, sizeof(enc)) == 0);
    } else {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL);
        FUZZ_CHECK(frame_equal(&f, &untouched)); /* outputs untouched on failure */
    }

    /* decode(encode(...)) for fields taken from the input, the length maybe too big. */
    memset(&in, 0, sizeof(in));
    in.type = (tl_tcp_frame_type_t)(data[4] % 7);
    memcpy(&in.space, data + 8, 4);
    memcpy(&in.id, data + 12, 4);
    in.tag = le64_at(data + 16);
    in.length = le64_at(data + 24) >> (data[0] % 64);
    tl_tcp_header_encode(&enc, &in);
    status = tl_tcp_header_check(&enc, &f2);
    FUZZ_CHECK((status == CHORUS_OK) == frame_valid(&in));
    if (status == CHORUS_OK)
        FUZZ_CHECK(frame_equal(&f2, &in));
    return 0;
}
