/*
 * The UCX transport's wire: its 56-byte header and its address blob,
 * encoded and decoded, with every field a peer (or anyone who learnt an
 * address) could get wrong refused; and the MACs its handshake and tokens
 * rest on, bound to their label, nonce and both ranks.
 */
#include <criterion/criterion.h>

#include <endian.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "transports/ucx/ucx.h"

enum { SIZE = 5 };

static tl_ucx_msg_hdr_t sample(tl_ucx_kind_t kind)
{
    tl_ucx_msg_hdr_t h = {.kind = kind, .from = 3};

    if (kind == TL_UCX_DATA || kind == TL_UCX_RTS) {
        h.charged = kind == TL_UCX_DATA;
        h.space = 7;
        h.tag = TL_TAG_FINAL | 12345;
    }
    if (kind >= TL_UCX_DATA && kind != TL_UCX_CREDIT && kind != TL_UCX_BYE &&
        kind != TL_UCX_BYE_ACK)
        h.seq = 99;
    if (kind == TL_UCX_CREDIT || kind == TL_UCX_RTS || kind == TL_UCX_CTS)
        h.value = 1u << 20;
    if (kind == TL_UCX_RDATA)
        h.tag = 3u << 18;   /* the fragment's offset */
    if (kind > TL_UCX_REJECT)
        memset(h.token, 0xa5, sizeof(h.token));
    return h;
}

Test(ucx_wire, header_round_trip)
{
    for (int k = TL_UCX_HELLO; k < TL_UCX_KIND_END; k++) {
        tl_ucx_msg_hdr_t in = sample((tl_ucx_kind_t)k), out;
        tl_ucx_hdr_t wire;

        tl_ucx_hdr_encode(&wire, &in);
        cr_assert_eq(tl_ucx_hdr_decode(&wire, sizeof(wire), SIZE, &out), CHORUS_OK, "kind %d", k);
        cr_expect(memcmp(&in, &out, sizeof(in)) == 0, "kind %d", k);
        /* Little-endian whatever the host: the magic's first byte is 'C'. */
        cr_expect_eq(((const uint8_t *)&wire)[0], 'C');
    }
}

/* Decoding wire as changed by edit must fail. */
static void refused(const char *what, void (*edit)(tl_ucx_hdr_t *), tl_ucx_kind_t kind)
{
    tl_ucx_msg_hdr_t in = sample(kind), out;
    tl_ucx_hdr_t wire;

    memset(&out, 0x5a, sizeof(out));
    tl_ucx_hdr_encode(&wire, &in);
    edit(&wire);
    cr_expect_eq(tl_ucx_hdr_decode(&wire, sizeof(wire), SIZE, &out), CHORUS_ERR_PROTOCOL,
                 "%s (kind %d) was accepted", what, kind);
    cr_expect_eq(out.from, 0x5a5a5a5au, "%s: the output was written", what);
}

static void bad_magic(tl_ucx_hdr_t *w) { w->magic ^= htole32(1); }
static void kind_zero(tl_ucx_hdr_t *w) { w->kind = 0; }
static void kind_end(tl_ucx_hdr_t *w) { w->kind = TL_UCX_KIND_END; }
static void charged_two(tl_ucx_hdr_t *w) { w->charged = 2; }
static void charged_one(tl_ucx_hdr_t *w) { w->charged = 1; }
static void zero_set(tl_ucx_hdr_t *w) { w->zero = 1; }
static void from_size(tl_ucx_hdr_t *w) { w->from = htole32(SIZE); }
static void from_huge(tl_ucx_hdr_t *w) { w->from = htole32(0xffffffffu); }
static void tag_set(tl_ucx_hdr_t *w) { w->tag = htole64(1); }
static void space_set(tl_ucx_hdr_t *w) { w->space = htole32(1); }
static void seq_set(tl_ucx_hdr_t *w) { w->seq = htole64(1); }
static void value_set(tl_ucx_hdr_t *w) { w->value = htole64(1); }
static void token_set(tl_ucx_hdr_t *w) { w->token[15] = 1; }

Test(ucx_wire, header_fields_refused)
{
    for (int k = TL_UCX_HELLO; k < TL_UCX_KIND_END; k++) {
        refused("a wrong magic", bad_magic, (tl_ucx_kind_t)k);
        refused("kind 0", kind_zero, (tl_ucx_kind_t)k);
        refused("an unknown kind", kind_end, (tl_ucx_kind_t)k);
        refused("charged 2", charged_two, (tl_ucx_kind_t)k);
        refused("a padding byte", zero_set, (tl_ucx_kind_t)k);
        refused("a sender past the ranks", from_size, (tl_ucx_kind_t)k);
        refused("a negative sender", from_huge, (tl_ucx_kind_t)k);
        /* Each field only where its kind uses it (ucx.h). */
        if (k != TL_UCX_DATA && k != TL_UCX_RTS && k != TL_UCX_RDATA)
            refused("a tag where none belongs", tag_set, (tl_ucx_kind_t)k);
        if (k != TL_UCX_DATA && k != TL_UCX_RTS)
            refused("a space where none belongs", space_set, (tl_ucx_kind_t)k);
        if (k < TL_UCX_DATA || k == TL_UCX_CREDIT || k == TL_UCX_BYE || k == TL_UCX_BYE_ACK)
            refused("a sequence where none belongs", seq_set, (tl_ucx_kind_t)k);
        if (k != TL_UCX_DATA)
            refused("charged outside DATA", charged_one, (tl_ucx_kind_t)k);
        if (k != TL_UCX_CREDIT && k != TL_UCX_RTS && k != TL_UCX_CTS)
            refused("a value where none belongs", value_set, (tl_ucx_kind_t)k);
        if (k <= TL_UCX_REJECT)
            refused("a token in the handshake", token_set, (tl_ucx_kind_t)k);
    }
}

static void value_zero(tl_ucx_hdr_t *w) { w->value = 0; }
static void value_huge(tl_ucx_hdr_t *w) { w->value = htole64(TL_UCX_MAX_MSG + 1); }
static void tag_huge(tl_ucx_hdr_t *w) { w->tag = htole64(TL_UCX_MAX_MSG); }

/* Lengths and offsets past what a message may have; an announcement of nothing. */
Test(ucx_wire, header_bounds_refused)
{
    refused("an RTS of no bytes", value_zero, TL_UCX_RTS);
    refused("an RTS past the largest message", value_huge, TL_UCX_RTS);
    refused("a CTS past the largest message", value_huge, TL_UCX_CTS);
    refused("a CREDIT past the largest message", value_huge, TL_UCX_CREDIT);
    refused("a fragment past the largest message", tag_huge, TL_UCX_RDATA);
}

Test(ucx_wire, header_lengths_refused)
{
    tl_ucx_msg_hdr_t in = sample(TL_UCX_DATA), out;
    unsigned char buf[2 * sizeof(tl_ucx_hdr_t)] = {0};

    tl_ucx_hdr_encode((tl_ucx_hdr_t *)buf, &in);
    cr_expect_eq(tl_ucx_hdr_decode(NULL, sizeof(tl_ucx_hdr_t), SIZE, &out), CHORUS_ERR_PROTOCOL);
    cr_expect_eq(tl_ucx_hdr_decode(buf, 0, SIZE, &out), CHORUS_ERR_PROTOCOL);
    cr_expect_eq(tl_ucx_hdr_decode(buf, sizeof(tl_ucx_hdr_t) - 1, SIZE, &out),
                 CHORUS_ERR_PROTOCOL);
    cr_expect_eq(tl_ucx_hdr_decode(buf, sizeof(tl_ucx_hdr_t) + 1, SIZE, &out),
                 CHORUS_ERR_PROTOCOL);
    cr_expect_eq(tl_ucx_hdr_decode(buf, sizeof(tl_ucx_hdr_t), SIZE, &out), CHORUS_OK);
}

/* A blob of rank with an address of n bytes (0x11 each). */
static void make_blob(tl_ucx_blob_t *b, uint32_t rank, uint16_t n)
{
    memset(b, 0, sizeof(*b));
    b->magic = htole32(TL_UCX_MAGIC);
    b->version = htole16(TL_UCX_VERSION);
    b->addr_len = htole16(n);
    b->rank = htole32(rank);
    b->window = htole64(4u << 20);
    memset(b->nonce, 0x22, sizeof(b->nonce));
    memset(b->addr, 0x11, n);
}

Test(ucx_wire, blob)
{
    tl_ucx_blob_t b;
    tl_ucx_peer_addr_t pa;
    unsigned char *tiny;

    make_blob(&b, 2, 200);
    cr_assert_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_OK);
    cr_expect(pa.addr_len == 200 && pa.addr == b.addr && pa.window == (4u << 20));
    cr_expect(pa.nonce[0] == 0x22 && pa.nonce[TL_UCX_NONCE_BYTES - 1] == 0x22);
    make_blob(&b, 2, TL_UCX_ADDR_MAX);
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_OK);
    /* Another rank's, another version's, an empty or oversized address, junk after it. */
    make_blob(&b, 2, 200);
    cr_expect_eq(tl_ucx_blob_decode(&b, 1, &pa), CHORUS_ERR_INVALID_ARG);
    b.version = htole16(TL_UCX_VERSION + 1);
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    make_blob(&b, 2, 0);
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    make_blob(&b, 2, 200);
    b.addr_len = htole16(TL_UCX_ADDR_MAX + 1);
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    make_blob(&b, 2, 200);
    b.addr[200] = 1;
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    make_blob(&b, 2, 200);
    b.zero = 1;
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    make_blob(&b, 2, 200);
    b.window = htole64(TL_UCX_MAX_MSG + 1);
    cr_expect_eq(tl_ucx_blob_decode(&b, 2, &pa), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(tl_ucx_blob_decode(NULL, 0, &pa), CHORUS_ERR_INVALID_ARG);
    /* Four zero bytes are refused on their magic, nothing past them read (ASan builds). */
    tiny = calloc(1, 4);
    cr_assert_not_null(tiny);
    cr_expect_eq(tl_ucx_blob_decode(tiny, 0, &pa), CHORUS_ERR_INVALID_ARG);
    free(tiny);
}

Test(ucx_wire, macs_bind_label_nonce_and_ranks)
{
    static uint8_t key[] = "a job key", other[] = "b job key";
    tl_ucx_ctx_t ctx = {.auth_key = key, .auth_key_len = sizeof(key) - 1};
    uint8_t n1[TL_UCX_NONCE_BYTES], n2[TL_UCX_NONCE_BYTES];
    uint8_t m[6][TL_UCX_MAC_BYTES];

    memset(n1, 1, sizeof(n1));
    memset(n2, 1, sizeof(n2));
    n2[31] = 2;
    tl_ucx_mac(&ctx, "hello", n1, 0, 1, m[0]);
    tl_ucx_mac(&ctx, "ack", n1, 0, 1, m[1]);
    tl_ucx_mac(&ctx, "hello", n2, 0, 1, m[2]);
    tl_ucx_mac(&ctx, "hello", n1, 1, 0, m[3]);
    tl_ucx_mac(&ctx, "hello", n1, 0, 2, m[4]);
    ctx.auth_key = other;
    tl_ucx_mac(&ctx, "hello", n1, 0, 1, m[5]);
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            cr_expect(memcmp(m[i], m[j], TL_UCX_MAC_BYTES) != 0, "MACs %d and %d agree", i, j);
    ctx.auth_key = key;
    tl_ucx_mac(&ctx, "hello", n1, 0, 1, m[1]);
    cr_expect(memcmp(m[0], m[1], TL_UCX_MAC_BYTES) == 0, "the same inputs gave another MAC");
}

/* CHORUS_UCX_RNDV=auto: which UCX_TLS settings leave UCX an RDMA transport. */
Test(ucx_wire, tls_allow_rdma)
{
    static const char *const yes[] = {NULL, "", "all", "^tcp", "rc,sm", "ud_v,self", "dc_x",
                                      "tcp,rc_mlx5", "ib"};
    static const char *const no[] = {"tcp", "tcp,self", "sm,tcp", "posix,sysv,cma,tcp",
                                     "cuda_copy,tcp", "udp", "ibx", "tcp,"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        cr_expect(tl_ucx_tls_allow_rdma(yes[i]), "UCX_TLS=%s", yes[i] ? yes[i] : "(unset)");
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        cr_expect(!tl_ucx_tls_allow_rdma(no[i]), "UCX_TLS=%s", no[i]);
}
