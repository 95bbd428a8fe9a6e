/*
 * Writes the seed corpus of the fuzz targets: one valid message of each kind,
 * made with the library's own encoders (and the fixed keys of fuzz.h, so
 * that MACs are genuine). run.sh --seeds builds and runs it; the files it
 * writes are kept in tests/fuzz/corpus/<target>/.
 */
#include <errno.h>
#include <sys/stat.h>

#include "core/bootstrap_wire.h"
#include "transports/shm/shm_internal.h"
#include "transports/tcp/tcp.h"
#include "fuzz.h"

static const char *top;

static int put(const char *target, const char *name, const void *a, size_t alen,
               const void *b, size_t blen)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", top, target);
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return -1;
    snprintf(path, sizeof(path), "%s/%s/seed-%s", top, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
        fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

/* A selector byte, then the payload: the input format of fuzz_boot_messages. */
static int put_msg(const char *name, uint8_t selector, const uint8_t *msg, size_t len)
{
    return put("fuzz_boot_messages", name, &selector, 1, msg + CHORUS_BOOT_HEADER,
               len - CHORUS_BOOT_HEADER);
}

/* A TCP address blob of one address, or of two when host2 is not NULL. */
static void tcp_blob(uint8_t blob[TL_ADDR_MAX], const char *host, const char *port,
                     const char *host2, int streams)
{
    tl_tcp_blob_t b;

    memset(&b, 0, sizeof(b));
    b.count = host2 != NULL ? 2 : 1;
    b.streams = (uint8_t)streams;
    snprintf(b.addr[0].host, sizeof(b.addr[0].host), "%s", host);
    snprintf(b.addr[0].port, sizeof(b.addr[0].port), "%s", port);
    if (host2 != NULL) {
        snprintf(b.addr[1].host, sizeof(b.addr[1].host), "%s", host2);
        snprintf(b.addr[1].port, sizeof(b.addr[1].port), "%s", port);
    }
    memset(blob, 0, TL_ADDR_MAX);
    memcpy(blob, &b, sizeof(b));
}

static int boot_seeds(void)
{
    static uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX];
    const chorus__boot_keys_t keys = FUZZ_BOOT_KEYS;
    uint8_t blob[TL_ADDR_MAX], key[CHORUS_BOOT_KEY], digest[32];
    int rc = 0;
    size_t n;

    n = chorus__boot_hello_encode(msg, fuzz_nc);
    rc |= put("fuzz_boot_header", "hello", msg, CHORUS_BOOT_HEADER, NULL, 0);
    rc |= put_msg("hello", 0, msg, n);
    n = chorus__boot_challenge_encode(msg, &keys);
    rc |= put("fuzz_boot_header", "challenge", msg, CHORUS_BOOT_HEADER, NULL, 0);
    rc |= put_msg("challenge", 1, msg, n);
    tcp_blob(blob, "127.0.0.1", "41000", NULL, 1);
    n = chorus__boot_join_encode(msg, &keys, 1, 4, blob, sizeof(blob));
    rc |= put("fuzz_boot_header", "join", msg, CHORUS_BOOT_HEADER, NULL, 0);
    rc |= put_msg("join-tcp-blob", 2, msg, n);
    n = chorus__boot_join_encode(msg, &keys, 0, 1, NULL, 0);
    rc |= put_msg("join-empty-blob", 2, msg, n);
    memset(key, 0x5a, sizeof(key));
    chorus__sha256(blob, sizeof(blob), digest);
    n = chorus__boot_result_encode(msg, &keys, key, digest, sizeof(blob));
    rc |= put("fuzz_boot_header", "result", msg, CHORUS_BOOT_HEADER, NULL, 0);
    {
        /* The prefix, then the blobs its MAC covers: what the client reads. */
        uint8_t in[1 + CHORUS_BOOT_RESULT_HDR + TL_ADDR_MAX];

        in[0] = 3;
        memcpy(in + 1, msg + CHORUS_BOOT_HEADER, CHORUS_BOOT_RESULT_HDR);
        memcpy(in + 1 + CHORUS_BOOT_RESULT_HDR, blob, sizeof(blob));
        rc |= put("fuzz_boot_messages", "result", in, sizeof(in), NULL, 0);
    }
    n = chorus__boot_error_encode(msg, CHORUS_ERR_IN_USE, "rank 1 already joined (from "
                                  "127.0.0.1:50000)");
    rc |= put("fuzz_boot_header", "error", msg, CHORUS_BOOT_HEADER, NULL, 0);
    rc |= put_msg("error", 4, msg, n);
    n = chorus__boot_abandon_encode(msg, 2, 3);
    rc |= put_msg("abandon", 5, msg, n);
    n = chorus__boot_query_encode(msg, &keys, 1);
    rc |= put_msg("query", 6, msg, n);
    {
        /* Ranks 0 and 1 of 3 joined. */
        const uint8_t joined[1] = {0x03};
        const chorus__boot_status_t st = {.seq = 1, .size = 3, .elapsed_ms = 1500,
                                          .joined = joined};

        n = chorus__boot_status_encode(msg, &keys, &st);
        rc |= put_msg("status", 7, msg, n);
    }
    return rc;
}

static int header_seed(const char *name, tl_tcp_frame_type_t type, uint32_t space,
                       uint32_t id, uint64_t tag, uint64_t length)
{
    tl_tcp_frame_t f = {type, space, id, tag, length};
    tl_tcp_hdr_t hdr;

    tl_tcp_header_encode(&hdr, &f);
    return put("fuzz_tcp_header", name, &hdr, sizeof(hdr), NULL, 0);
}

/* A stream of frames for fuzz_tcp_stream, after its two selector bytes. */
typedef struct {
    uint8_t bytes[4096];
    size_t len;
} stream_t;

static void stream_frame(stream_t *st, tl_tcp_frame_type_t type, uint32_t id, uint64_t tag,
                         uint64_t length, size_t payload)
{
    tl_tcp_frame_t f = {type, 0, id, tag, length};

    /* A CTS asks for whole 1 MiB fragments, as a receiver with one stream does. */
    if (type == TL_TCP_FRAME_CTS && length > 0)
        f.space = TL_TCP_FRAG_MAX;
    tl_tcp_header_encode((tl_tcp_hdr_t *)(st->bytes + st->len), &f);
    st->len += sizeof(tl_tcp_hdr_t);
    for (size_t i = 0; i < payload; i++)
        st->bytes[st->len++] = (uint8_t)(i * 13);
}

static int stream_seeds(void)
{
    stream_t st;
    int rc = 0;

    /* Receives for tags 0-3 (tag 2 with room for 2048 bytes): eager, truncated, announced. */
    memset(&st, 0, sizeof(st));
    st.bytes[0] = 0x4f;
    st.len = 2;
    stream_frame(&st, TL_TCP_FRAME_CREDIT, 0, 0, 4096, 0);
    stream_frame(&st, TL_TCP_FRAME_DATA, 0, 0, 50, 50);
    stream_frame(&st, TL_TCP_FRAME_DATA, 0, 1, 200, 200);
    stream_frame(&st, TL_TCP_FRAME_DATA, 0, TL_TAG_CTRL | 1, 16, 16);
    stream_frame(&st, TL_TCP_FRAME_RTS, 5, 2, 1500, 0);
    stream_frame(&st, TL_TCP_FRAME_RDATA, 5, 0, 1500, 1500);
    stream_frame(&st, TL_TCP_FRAME_RTS, 6, 3, 1500, 0);
    rc |= put("fuzz_tcp_stream", "matched", st.bytes, st.len, NULL, 0);
    /* Rank 0 sends by rendezvous (id 1) and eagerly once granted. */
    memset(&st, 0, sizeof(st));
    st.bytes[1] = 3;
    st.len = 2;
    stream_frame(&st, TL_TCP_FRAME_CREDIT, 0, 0, 4096, 0);
    stream_frame(&st, TL_TCP_FRAME_CTS, 1, 0, 3000, 0);
    stream_frame(&st, TL_TCP_FRAME_CREDIT, 0, 0, 1024, 0);
    rc |= put("fuzz_tcp_stream", "cleared", st.bytes, st.len, NULL, 0);
    /* Nothing posted: a window (1 KiB) of unexpected data, then one byte beyond it. */
    memset(&st, 0, sizeof(st));
    st.len = 2;
    for (int i = 0; i < 16; i++)
        stream_frame(&st, TL_TCP_FRAME_DATA, 0, 3, 64, 64);
    stream_frame(&st, TL_TCP_FRAME_RTS, 9, 3, 100000, 0);
    stream_frame(&st, TL_TCP_FRAME_DATA, 0, 3, 1, 1);
    rc |= put("fuzz_tcp_stream", "flood", st.bytes, st.len, NULL, 0);
    return rc;
}

static int tcp_seeds(void)
{
    uint8_t blob[TL_ADDR_MAX], mac[TL_TCP_MAC_BYTES], prefix[8];
    tl_tcp_hello_t hello;
    int rc = 0;

    rc |= header_seed("data", TL_TCP_FRAME_DATA, 7, 0, 3, 4096);
    rc |= header_seed("max-length", TL_TCP_FRAME_DATA, 0, 0, 1, TL_TCP_MAX_MSG);
    rc |= header_seed("control", TL_TCP_FRAME_DATA, 0, 0, TL_TAG_CTRL | 2, TL_CTRL_MAX);
    rc |= header_seed("rts", TL_TCP_FRAME_RTS, 7, 42, 3, 1 << 20);
    rc |= header_seed("cts", TL_TCP_FRAME_CTS, TL_TCP_FRAG_MAX, 42, 0, 1 << 20);
    rc |= header_seed("cts-shared", TL_TCP_FRAME_CTS, 64 << 10, 42, 0, 8 << 20);
    rc |= header_seed("cts-dropped", TL_TCP_FRAME_CTS, 0, 42, 0, 0);
    rc |= header_seed("rdata", TL_TCP_FRAME_RDATA, 0, 42, 0, TL_TCP_FRAG_MAX);
    rc |= header_seed("rdata-offset", TL_TCP_FRAME_RDATA, 0, 42, 3 << 16, 1 << 16);
    rc |= header_seed("credit", TL_TCP_FRAME_CREDIT, 0, 0, 0, 4 << 20);
    /* Acceptor rank 0 of 4 (size - 1 = 3, little-endian), hello from rank 2. */
    memset(prefix, 0, sizeof(prefix));
    prefix[0] = 3;
    memset(mac, 0xa5, sizeof(mac));
    tl_tcp_hello_encode(&hello, 2, 0, 0, mac);
    rc |= put("fuzz_tcp_hello", "from-2-to-0", prefix, sizeof(prefix), &hello, sizeof(hello));
    tl_tcp_hello_encode(&hello, 2, 0, 3, mac);
    rc |= put("fuzz_tcp_hello", "lane-3", prefix, sizeof(prefix), &hello, sizeof(hello));
    /* Acceptor rank 2 of 4: a lower rank connects as well. */
    prefix[4] = 2;
    tl_tcp_hello_encode(&hello, 0, 2, 0, mac);
    rc |= put("fuzz_tcp_hello", "from-0-to-2", prefix, sizeof(prefix), &hello, sizeof(hello));
    tcp_blob(blob, "127.0.0.1", "41000", NULL, 1);
    rc |= put("fuzz_tcp_addr", "ipv4", blob, sizeof(blob), NULL, 0);
    tcp_blob(blob, "10.99.0.1", "41000", "10.98.0.1", 2);
    rc |= put("fuzz_tcp_addr", "two-links", blob, sizeof(blob), NULL, 0);
    tcp_blob(blob, "::1", "65535", NULL, 8);
    rc |= put("fuzz_tcp_addr", "ipv6", blob, sizeof(blob), NULL, 0);
    tcp_blob(blob, "fe80::1%1", "1", NULL, 1);
    rc |= put("fuzz_tcp_addr", "ipv6-scope", blob, sizeof(blob), NULL, 0);
    return rc | stream_seeds();
}

/*
 * Four ranks in step 1 of a call: variant 0 an allreduce of 1000 elements in step, 1 the
 * same with rank 2 one step behind, 2 with rank 3 in another call, 3 a v-form
 * reduce_scatter in step with uneven blocks, 4 an alltoall whose rank 1 published another
 * whole fingerprint.
 */
static int shm_seed(const char *name, int variant)
{
    uint8_t in[FUZZ_SHM_HEAD_BYTES + 4 * FUZZ_SHM_PEER_BYTES];
    const uint64_t fp = 0x5eed00c0ffee1234ull, base = 40, count = 1000;
    static const uint32_t blocks[4] = {700, 0, 3, 1000}, places[4] = {1010, 2000, 900, 0};

    memset(in, 0, sizeof(in));
    in[0] = 3;                                  /* four ranks */
    in[1] = 1;                                  /* this rank */
    in[2] = variant == 4 ? 5 : variant == 3 ? 3 : 0;   /* alltoall, reduce_scatter, allreduce */
    fuzz_put_u64(in + 4, fp);
    fuzz_put_u64(in + 12, base | count << 32);
    in[20] = variant == 3;                      /* v-form */
    for (int j = 0; j < 4; j++) {
        uint8_t *p = in + FUZZ_SHM_HEAD_BYTES + j * FUZZ_SHM_PEER_BYTES;
        uint64_t step = base + 1 - (variant == 1 && j == 2);
        uint64_t tag = variant == 2 && j == 3 ? 0x0bad : shm_fp_tag(fp);

        fuzz_put_u64(p, tag << 48 | step);
        fuzz_put_u64(p + 12, 0x7f0000001000u + (uint64_t)j * 0x100000);
        fuzz_put_u64(p + 20, 0x7f0000801000u + (uint64_t)j * 0x100000);
        fuzz_put_u64(p + 28, count);
        fuzz_put_u64(p + 40, fp);
        fuzz_put_u64(p + 48, variant == 4 && j == 1 ? fp ^ 1 : fp);
        fuzz_put_u64(p + 56, blocks[j] | (uint64_t)places[j] << 32);
    }
    return put("fuzz_shm_peer", name, in, sizeof(in), NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s corpus-dir\n", argv[0]);
        return 2;
    }
    top = argv[1];
    return boot_seeds() | tcp_seeds() | shm_seed("in-step", 0) | shm_seed("behind", 1) |
                   shm_seed("other-call", 2) | shm_seed("vform-in-step", 3) |
                   shm_seed("alltoall-other-fp", 4)
               ? 1
               : 0;
}
