/*
 * Fuzz target: the decoder of every bootstrap message, chosen by the first
 * input byte; the rest is the payload as it follows the header. Besides
 * surviving any payload, each decoder must give back what its encoder wrote,
 * refuse a tampered message, and never report fields outside their bounds.
 * Payloads with a MAC are also re-encoded with the fixed keys of fuzz.h, so
 * that the checks behind the MAC are reached too.
 */
#include "core/bootstrap_wire.h"
#include "fuzz.h"

enum {
    MSG_HELLO, MSG_CHALLENGE, MSG_JOIN, MSG_RESULT, MSG_ERROR, MSG_ABANDON, MSG_QUERY,
    MSG_STATUS, MSG_COUNT
};

static const chorus__boot_keys_t keys = FUZZ_BOOT_KEYS;

/* Reads the encoded message's header back: the type and the payload length. */
static const uint8_t *check_header(const uint8_t *msg, size_t msg_len, unsigned type)
{
    chorus__boot_hdr_t hdr;

    FUZZ_CHECK(chorus__boot_header_decode(msg, msg_len, &hdr, NULL, 0) == CHORUS_OK);
    FUZZ_CHECK(hdr.type == type && hdr.len == msg_len - CHORUS_BOOT_HEADER);
    return msg + CHORUS_BOOT_HEADER;
}

static void fuzz_hello(const uint8_t *p, size_t len)
{
    uint8_t nc[CHORUS_BOOT_NONCE], msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_HELLO_LEN], again[32];
    size_t n;

    if (chorus__boot_hello_decode(p, len, nc) != CHORUS_OK) {
        FUZZ_CHECK(len != CHORUS_BOOT_HELLO_LEN);
        return;
    }
    FUZZ_CHECK(len == CHORUS_BOOT_HELLO_LEN && memcmp(nc, p, sizeof(nc)) == 0);
    n = chorus__boot_hello_encode(msg, nc);
    FUZZ_CHECK(n == sizeof(msg));
    FUZZ_CHECK(chorus__boot_hello_decode(check_header(msg, n, CHORUS_BOOT_HELLO),
                                         CHORUS_BOOT_HELLO_LEN, again) == CHORUS_OK);
    FUZZ_CHECK(memcmp(again, nc, sizeof(nc)) == 0);
}

static void fuzz_challenge(const uint8_t *p, size_t len)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_CHAL_LEN], ns[CHORUS_BOOT_NONCE];
    chorus__boot_keys_t k = keys;
    chorus_status_t status;
    size_t n;

    status = chorus__boot_challenge_decode(&keys, p, len, ns);
    FUZZ_CHECK(status == CHORUS_OK || status == CHORUS_ERR_AUTH || status == CHORUS_ERR_PROTOCOL);
    FUZZ_CHECK((status == CHORUS_ERR_PROTOCOL) == (len != CHORUS_BOOT_CHAL_LEN));
    if (status == CHORUS_OK)
        FUZZ_CHECK(memcmp(ns, p, sizeof(ns)) == 0);

    /* The store's nonce from the input: encode, decode, then tamper with one byte. */
    memset(ns, 0, sizeof(ns));
    memcpy(ns, p, len < sizeof(ns) ? len : sizeof(ns));
    k.ns = ns;
    n = chorus__boot_challenge_encode(msg, &k);
    FUZZ_CHECK(n == sizeof(msg));
    {
        uint8_t got[CHORUS_BOOT_NONCE];
        uint8_t *payload = msg + CHORUS_BOOT_HEADER;

        check_header(msg, n, CHORUS_BOOT_CHALLENGE);
        FUZZ_CHECK(chorus__boot_challenge_decode(&keys, payload, CHORUS_BOOT_CHAL_LEN, got) ==
                   CHORUS_OK);
        FUZZ_CHECK(memcmp(got, ns, sizeof(ns)) == 0);
        payload[len % CHORUS_BOOT_CHAL_LEN] ^= 0x01;
        FUZZ_CHECK(chorus__boot_challenge_decode(&keys, payload, CHORUS_BOOT_CHAL_LEN, got) ==
                   CHORUS_ERR_AUTH);
    }
}

/* The checks behind the MAC: what they admit is within every bound. */
static void check_join_fields(const chorus__boot_join_t *join)
{
    char why[CHORUS_BOOT_WHY_MAX];

    FUZZ_CHECK(join->blob_len <= CHORUS_BOOT_BLOB_MAX);
    if (chorus__boot_join_check(join, why, sizeof(why)) != CHORUS_OK) {
        FUZZ_CHECK_STR(why, sizeof(why));
        FUZZ_CHECK(strlen(why) > 0);
        return;
    }
    FUZZ_CHECK(join->size >= 1 && join->size <= CHORUS_BOOT_SIZE_MAX);
    FUZZ_CHECK(join->rank < join->size);
    FUZZ_CHECK((uint64_t)join->size * join->blob_len <= CHORUS_BOOT_TOTAL_MAX);
}

static void fuzz_join(const uint8_t *p, size_t len)
{
    static uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX];
    chorus__boot_join_t join, again;
    chorus_status_t status;
    uint8_t *payload;
    size_t n, blob_len;

    status = chorus__boot_join_decode(&keys, p, len, &join);
    if (status == CHORUS_ERR_PROTOCOL)
        FUZZ_CHECK(len < CHORUS_BOOT_JOIN_MIN || len > CHORUS_BOOT_JOIN_MAX);
    else
        FUZZ_CHECK(status == CHORUS_ERR_AUTH || status == CHORUS_OK);
    if (status == CHORUS_OK) {
        FUZZ_CHECK(join.blob == p + CHORUS_BOOT_JOIN_MIN &&
                   join.blob_len == len - CHORUS_BOOT_JOIN_MIN);
        check_join_fields(&join);
    }

    /* The same rank, size and blob with a genuine MAC. */
    blob_len = len > CHORUS_BOOT_JOIN_MIN ? len - CHORUS_BOOT_JOIN_MIN : 0;
    n = chorus__boot_join_encode(msg, &keys, fuzz_u32(p, len, CHORUS_BOOT_MAC),
                                 fuzz_u32(p, len, CHORUS_BOOT_MAC + 4),
                                 p + (blob_len ? CHORUS_BOOT_JOIN_MIN : 0), blob_len);
    if (blob_len > CHORUS_BOOT_BLOB_MAX) {
        FUZZ_CHECK(n == 0);
        return;
    }
    FUZZ_CHECK(n == CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MIN + blob_len);
    payload = (uint8_t *)check_header(msg, n, CHORUS_BOOT_JOIN);
    FUZZ_CHECK(chorus__boot_join_decode(&keys, payload, n - CHORUS_BOOT_HEADER, &again) ==
               CHORUS_OK);
    FUZZ_CHECK(again.rank == fuzz_u32(p, len, CHORUS_BOOT_MAC) &&
               again.size == fuzz_u32(p, len, CHORUS_BOOT_MAC + 4));
    FUZZ_CHECK(again.blob_len == blob_len &&
               (blob_len == 0 || memcmp(again.blob, p + CHORUS_BOOT_JOIN_MIN, blob_len) == 0));
    check_join_fields(&again);
    payload[len % (n - CHORUS_BOOT_HEADER)] ^= 0x80;
    FUZZ_CHECK(chorus__boot_join_decode(&keys, payload, n - CHORUS_BOOT_HEADER, &again) ==
               CHORUS_ERR_AUTH);
}

static void fuzz_result(const uint8_t *p, size_t len)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_RESULT_HDR], key[CHORUS_BOOT_KEY];
    uint8_t digest[32], got[CHORUS_BOOT_KEY];
    size_t head = len < CHORUS_BOOT_RESULT_HDR ? len : CHORUS_BOOT_RESULT_HDR;
    chorus__boot_hdr_t hdr;
    chorus_status_t status;
    uint64_t total;
    uint8_t *payload;

    /* The payload is the prefix the decoder checks, then the blobs its MAC covers. */
    chorus__sha256(p + head, len - head, digest);
    status = chorus__boot_result_decode(&keys, p, head, digest, key);
    FUZZ_CHECK((status == CHORUS_ERR_PROTOCOL) == (head != CHORUS_BOOT_RESULT_HDR));
    FUZZ_CHECK(status == CHORUS_OK || status == CHORUS_ERR_AUTH || status == CHORUS_ERR_PROTOCOL);

    memset(key, 0, sizeof(key));
    memcpy(key, p, head < sizeof(key) ? head : sizeof(key));
    total = fuzz_u32(p, len, 0) % (CHORUS_BOOT_TOTAL_MAX + 1u);
    FUZZ_CHECK(chorus__boot_result_encode(msg, &keys, key, digest, total) == sizeof(msg));
    FUZZ_CHECK(chorus__boot_header_decode(msg, sizeof(msg), &hdr, NULL, 0) == CHORUS_OK);
    FUZZ_CHECK(hdr.type == CHORUS_BOOT_RESULT && hdr.len == CHORUS_BOOT_RESULT_HDR + total);
    FUZZ_CHECK(chorus__boot_client_expect(&hdr, CHORUS_BOOT_RESULT,
                                          CHORUS_BOOT_RESULT_HDR + total) == CHORUS_OK);
    payload = msg + CHORUS_BOOT_HEADER;
    FUZZ_CHECK(chorus__boot_result_decode(&keys, payload, CHORUS_BOOT_RESULT_HDR, digest, got) ==
               CHORUS_OK);
    FUZZ_CHECK(memcmp(got, key, sizeof(key)) == 0);
    /* Other blobs, or a changed prefix, fail the MAC. */
    digest[len % sizeof(digest)] ^= 0x04;
    FUZZ_CHECK(chorus__boot_result_decode(&keys, payload, CHORUS_BOOT_RESULT_HDR, digest, got) ==
               CHORUS_ERR_AUTH);
    digest[len % sizeof(digest)] ^= 0x04;
    payload[len % CHORUS_BOOT_RESULT_HDR] ^= 0x10;
    FUZZ_CHECK(chorus__boot_result_decode(&keys, payload, CHORUS_BOOT_RESULT_HDR, digest, got) ==
               CHORUS_ERR_AUTH);
}

static int store_error(chorus_status_t s)
{
    return s == CHORUS_ERR_INVALID_ARG || s == CHORUS_ERR_NO_MEMORY || s == CHORUS_ERR_TIMEOUT ||
           s == CHORUS_ERR_AUTH || s == CHORUS_ERR_PROTOCOL || s == CHORUS_ERR_SYSTEM ||
           s == CHORUS_ERR_IN_USE;
}

static void fuzz_error(const uint8_t *p, size_t len)
{
    static const chorus_status_t codes[] = {
        CHORUS_ERR_INVALID_ARG, CHORUS_ERR_NO_MEMORY, CHORUS_ERR_TIMEOUT, CHORUS_ERR_AUTH,
        CHORUS_ERR_PROTOCOL, CHORUS_ERR_SYSTEM, CHORUS_ERR_IN_USE};
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_ERROR_MAX];
    char text[CHORUS_BOOT_ERROR_TEXT_MAX + 1], sent[CHORUS_BOOT_ERROR_TEXT_MAX + 8];
    chorus_status_t status, carried = CHORUS_OK, code;
    size_t n, k = 0;

    text[CHORUS_BOOT_ERROR_TEXT_MAX] = 'G';
    status = chorus__boot_error_decode(p, len, &carried, text);
    FUZZ_CHECK((status == CHORUS_OK) == (len >= 4 && len <= CHORUS_BOOT_ERROR_MAX));
    FUZZ_CHECK((status == CHORUS_OK) == chorus__boot_error_len_ok(len));
    if (status == CHORUS_OK) {
        FUZZ_CHECK(store_error(carried));
        FUZZ_CHECK(strlen(text) == len - 4);
        for (size_t i = 0; text[i] != '\0'; i++)
            FUZZ_CHECK(text[i] >= 0x20 && text[i] < 0x7f);
    } else {
        FUZZ_CHECK(status == CHORUS_ERR_PROTOCOL && text[CHORUS_BOOT_ERROR_TEXT_MAX] == 'G');
    }

    /* Printable text (cut by the encoder at its bound) and a store error survive the trip. */
    for (size_t i = 0; i < len && k < sizeof(sent) - 1; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f)
            sent[k++] = (char)p[i];
    }
    sent[k] = '\0';
    code = codes[len % (sizeof(codes) / sizeof(codes[0]))];
    n = chorus__boot_error_encode(msg, code, sent);
    k = k < CHORUS_BOOT_ERROR_TEXT_MAX ? k : CHORUS_BOOT_ERROR_TEXT_MAX;
    FUZZ_CHECK(n == CHORUS_BOOT_HEADER + 4 + k);
    FUZZ_CHECK(chorus__boot_error_decode(check_header(msg, n, CHORUS_BOOT_ERROR),
                                         n - CHORUS_BOOT_HEADER, &carried, text) == CHORUS_OK);
    FUZZ_CHECK(carried == code && strlen(text) == k && memcmp(text, sent, k) == 0);
}

static void fuzz_abandon(const uint8_t *p, size_t len)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_ABANDON_LEN];
    uint32_t rank = 7, size = 7;
    size_t n;

    if (chorus__boot_abandon_decode(p, len, &rank, &size) != CHORUS_OK) {
        FUZZ_CHECK(len != CHORUS_BOOT_ABANDON_LEN && rank == 7 && size == 7);
        return;
    }
    n = chorus__boot_abandon_encode(msg, rank, size);
    FUZZ_CHECK(n == sizeof(msg) && memcmp(msg + CHORUS_BOOT_HEADER, p, len) == 0);
    FUZZ_CHECK(check_header(msg, n, CHORUS_BOOT_ABANDON) == msg + CHORUS_BOOT_HEADER);
}

static void fuzz_query(const uint8_t *p, size_t len)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN];
    uint32_t seq = 7, again = 0;
    chorus_status_t status;
    size_t n;

    status = chorus__boot_query_decode(&keys, p, len, &seq);
    FUZZ_CHECK(status == CHORUS_OK || seq == 7);
    FUZZ_CHECK(status != CHORUS_OK || len == CHORUS_BOOT_QUERY_LEN);
    /* The same sequence number, genuinely signed, decodes; one flipped bit does not. */
    n = chorus__boot_query_encode(msg, &keys, fuzz_u32(p, len, 0));
    FUZZ_CHECK(n == sizeof(msg));
    FUZZ_CHECK(chorus__boot_query_decode(&keys, check_header(msg, n, CHORUS_BOOT_QUERY),
                                         CHORUS_BOOT_QUERY_LEN, &again) == CHORUS_OK);
    FUZZ_CHECK(again == fuzz_u32(p, len, 0));
    msg[CHORUS_BOOT_HEADER + (len % CHORUS_BOOT_QUERY_LEN)] ^= 1;
    FUZZ_CHECK(chorus__boot_query_decode(&keys, msg + CHORUS_BOOT_HEADER,
                                         CHORUS_BOOT_QUERY_LEN, &again) == CHORUS_ERR_AUTH);
}

static void fuzz_status(const uint8_t *p, size_t len)
{
    static uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_STATUS_HDR + 512];
    /* The size the payload claims where it fits the buffer, so that genuine seeds decode. */
    uint32_t claimed = len >= CHORUS_BOOT_MAC + 8 ? chorus__boot_get_u32(p + CHORUS_BOOT_MAC + 4)
                                                   : 0;
    uint32_t want = claimed >= 1 && claimed <= 8 * 512 ? claimed : claimed % (8 * 512) + 1;
    chorus__boot_status_t st = {.seq = 0}, again;
    chorus_status_t status;
    size_t n;

    status = chorus__boot_status_decode(&keys, p, len, want, &st);
    FUZZ_CHECK(status == CHORUS_OK || status == CHORUS_ERR_PROTOCOL || status == CHORUS_ERR_AUTH);
    FUZZ_CHECK(status != CHORUS_OK || (len == chorus__boot_status_len(want) && st.size == want));
    /* Signed with the fuzz keys, the payload's bitmap comes back as it was. */
    if (len < chorus__boot_status_len(want))
        return;
    st.seq = fuzz_u32(p, len, 1);
    st.size = want;
    st.elapsed_ms = fuzz_u32(p, len, 5);
    st.joined = p + CHORUS_BOOT_STATUS_HDR;
    n = chorus__boot_status_encode(msg, &keys, &st);
    FUZZ_CHECK(n == CHORUS_BOOT_HEADER + chorus__boot_status_len(want));
    FUZZ_CHECK(chorus__boot_status_decode(&keys, check_header(msg, n, CHORUS_BOOT_STATUS),
                                          n - CHORUS_BOOT_HEADER, want, &again) == CHORUS_OK);
    FUZZ_CHECK(again.seq == st.seq && again.elapsed_ms == st.elapsed_ms &&
               memcmp(again.joined, st.joined, n - CHORUS_BOOT_HEADER -
                      CHORUS_BOOT_STATUS_HDR) == 0);
    FUZZ_CHECK(chorus__boot_status_decode(&keys, msg + CHORUS_BOOT_HEADER,
                                          n - CHORUS_BOOT_HEADER, want + 8, &again) ==
               CHORUS_ERR_PROTOCOL);
    msg[n - 1] ^= 0x80;
    FUZZ_CHECK(chorus__boot_status_decode(&keys, msg + CHORUS_BOOT_HEADER,
                                          n - CHORUS_BOOT_HEADER, want, &again) ==
               CHORUS_ERR_AUTH);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* data + 1 keeps the payload at the end of libFuzzer's buffer: ASan sees any overread. */
    switch (data[0] % MSG_COUNT) {
    case MSG_HELLO:     fuzz_hello(data + 1, size - 1); break;
    case MSG_CHALLENGE: fuzz_challenge(data + 1, size - 1); break;
    case MSG_JOIN:      fuzz_join(data + 1, size - 1); break;
    case MSG_RESULT:    fuzz_result(data + 1, size - 1); break;
    case MSG_ERROR:     fuzz_error(data + 1, size - 1); break;
    case MSG_ABANDON:   fuzz_abandon(data + 1, size - 1); break;
    case MSG_QUERY:     fuzz_query(data + 1, size - 1); break;
    case MSG_STATUS:    fuzz_status(data + 1, size - 1); break;
    }
    return 0;
}
