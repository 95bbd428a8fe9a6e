/*
 * Fuzz target: the bootstrap message header (12 bytes) and the checks the
 * store and the client apply to its type and length before reading a payload.
 */
#include "core/bootstrap_wire.h"
#include "fuzz.h"

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The store reads a payload only of the bounded length its state allows. */
static void check_store_expect(const chorus__boot_hdr_t *hdr)
{
    if (chorus__boot_store_expect(hdr, CHORUS_BOOT_HELLO) == CHORUS_OK)
        FUZZ_CHECK(hdr->type == CHORUS_BOOT_HELLO && hdr->len == CHORUS_BOOT_HELLO_LEN);
    if (chorus__boot_store_expect(hdr, CHORUS_BOOT_JOIN) == CHORUS_OK)
        FUZZ_CHECK((hdr->type == CHORUS_BOOT_JOIN && hdr->len >= CHORUS_BOOT_JOIN_MIN &&
                    hdr->len <= CHORUS_BOOT_JOIN_MAX) ||
                   (hdr->type == CHORUS_BOOT_ABANDON && hdr->len == CHORUS_BOOT_ABANDON_LEN));
    if (chorus__boot_store_expect(hdr, CHORUS_BOOT_QUERY) == CHORUS_OK)
        FUZZ_CHECK(hdr->type == CHORUS_BOOT_QUERY && hdr->len == CHORUS_BOOT_QUERY_LEN);
    /* No other state reads a payload. */
    FUZZ_CHECK(chorus__boot_store_expect(hdr, CHORUS_BOOT_RESULT) != CHORUS_OK);
    FUZZ_CHECK(chorus__boot_store_expect(hdr, CHORUS_BOOT_ERROR) != CHORUS_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A reason buffer sized by the input, with a guard byte after it. */
    size_t why_len = size > 0 ? data[size - 1] % (CHORUS_BOOT_WHY_MAX + 1) : 0;
    char why[CHORUS_BOOT_WHY_MAX + 1];
    chorus__boot_hdr_t hdr = {0, 0}, again;
    uint8_t raw[CHORUS_BOOT_HEADER];
    chorus_status_t status;

    why[why_len] = 'G';
    status = chorus__boot_header_decode(data, size, &hdr, why, why_len);
    FUZZ_CHECK(why[why_len] == 'G');
    if (status != CHORUS_OK) {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL);
        if (why_len > 0)
            FUZZ_CHECK_STR(why, why_len);
        return 0;
    }
    FUZZ_CHECK(size >= CHORUS_BOOT_HEADER);
    FUZZ_CHECK(be32(data) == CHORUS_BOOT_MAGIC);
    FUZZ_CHECK(hdr.type == (((unsigned)data[6] << 8) | data[7]) && hdr.len == be32(data + 8));
    /* decode(encode(x)) == x, and encode(decode(bytes)) == bytes. */
    chorus__boot_header_encode(raw, hdr.type, hdr.len);
    FUZZ_CHECK(memcmp(raw, data, CHORUS_BOOT_HEADER) == 0);
    FUZZ_CHECK(chorus__boot_header_decode(raw, sizeof(raw), &again, NULL, 0) == CHORUS_OK);
    FUZZ_CHECK(again.type == hdr.type && again.len == hdr.len);

    check_store_expect(&hdr);
    if (chorus__boot_client_expect(&hdr, fuzz_u32(data, size, 12) & 0xffff,
                                   fuzz_u32(data, size, 14)) == CHORUS_OK)
        FUZZ_CHECK(hdr.type == (fuzz_u32(data, size, 12) & 0xffff) &&
                   hdr.len == fuzz_u32(data, size, 14));
    return 0;
}
