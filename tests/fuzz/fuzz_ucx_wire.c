/*
 * Fuzz target: the UCX transport's wire decoders. The first byte picks one:
 * even, the 56-byte message header (the rest of the input, any length, as a
 * context of 8 ranks receives it); odd, a rank's address blob (the rest,
 * zero-padded to TL_ADDR_MAX, for rank byte / 2 % 8). What a decoder accepts
 * must be what its encoder writes, byte for byte, and within its bounds.
 */
#include <endian.h>

#include "transports/ucx/ucx.h"
#include "fuzz.h"

enum { RANKS = 8 };

static void header(const uint8_t *data, size_t size)
{
    tl_ucx_msg_hdr_t h;
    tl_ucx_hdr_t again;

    if (tl_ucx_hdr_decode(data, size, RANKS, &h) != CHORUS_OK)
        return;
    FUZZ_CHECK(size == sizeof(again));
    FUZZ_CHECK(h.kind >= TL_UCX_HELLO && h.kind < TL_UCX_KIND_END && h.from < RANKS);
    FUZZ_CHECK(h.kind == TL_UCX_DATA || !h.charged);
    FUZZ_CHECK(h.kind == TL_UCX_DATA || h.kind == TL_UCX_RTS || h.space == 0);
    FUZZ_CHECK(h.kind == TL_UCX_DATA || h.kind == TL_UCX_RTS || h.tag < TL_UCX_MAX_MSG);
    FUZZ_CHECK(h.value <= TL_UCX_MAX_MSG && (h.kind != TL_UCX_RTS || h.value > 0));
    tl_ucx_hdr_encode(&again, &h);
    FUZZ_CHECK(memcmp(&again, data, sizeof(again)) == 0);
}

static void blob(const uint8_t *data, size_t size, int rank)
{
    uint8_t buf[TL_ADDR_MAX] = {0};
    tl_ucx_peer_addr_t pa;

    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    if (tl_ucx_blob_decode(buf, rank, &pa) != CHORUS_OK)
        return;
    FUZZ_CHECK(pa.addr_len > 0 && pa.addr_len <= TL_UCX_ADDR_MAX);
    FUZZ_CHECK(pa.addr == buf + TL_UCX_BLOB_HEAD && pa.window <= TL_UCX_MAX_MSG);
    for (size_t i = TL_UCX_BLOB_HEAD + pa.addr_len; i < sizeof(buf); i++)
        FUZZ_CHECK(buf[i] == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        header(data + 1, size - 1);
    else
        blob(data + 1, size - 1, (data[0] / 2) % RANKS);
    return 0;
}
