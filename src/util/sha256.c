/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), used to authenticate
 * bootstrap and transport peers with the job secret. Written for clarity,
 * not speed: it hashes a few hundred bytes per connection.
 */
#include "util/sha256.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "chorus.h"
#include "util/log.h"

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static inline uint32_t rotr32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void sha256_block(uint32_t h[8], const uint8_t block[64])
{
    uint32_t w[64];
    uint32_t a, b, c, d, e, f, g, hh;

    for (int i = 0; i < 16; i++)
        w[i] = ((uint32_t)block[4 * i] << 24) | ((uint32_t)block[4 * i + 1] << 16) |
               ((uint32_t)block[4 * i + 2] << 8) | (uint32_t)block[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }

    a = h[0]; b = h[1]; c = h[2]; d = h[3];
    e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t s1 = rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + s1 + ch + sha256_k[i] + w[i];
        uint32_t s0 = rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = s0 + maj;
        hh = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void chorus__sha256_init(chorus__sha256_t *ctx)
{
    static const uint32_t h0[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    };
    memcpy(ctx->h, h0, sizeof(h0));
    ctx->length = 0;
    ctx->used = 0;
}

void chorus__sha256_update(chorus__sha256_t *ctx, const void *data, size_t len)
{
    const uint8_t *p = data;

    ctx->length += len;
    if (ctx->used > 0) {
        size_t take = 64 - ctx->used;
        if (take > len)
            take = len;
        memcpy(ctx->block + ctx->used, p, take);
        ctx->used += take;
        p += take;
        len -= take;
        if (ctx->used < 64)
            return;
        sha256_block(ctx->h, ctx->block);
        ctx->used = 0;
    }
    for (; len >= 64; p += 64, len -= 64)
        sha256_block(ctx->h, p);
    if (len > 0) {
        memcpy(ctx->block, p, len);
        ctx->used = len;
    }
}

void chorus__sha256_final(chorus__sha256_t *ctx, uint8_t out[CHORUS_SHA256_BYTES])
{
    uint64_t bits = ctx->length * 8;

    /* Padding: one 1 bit, zeros up to 56 bytes mod 64, then the length in bits. */
    ctx->block[ctx->used++] = 0x80;
    if (ctx->used > 56) {
        memset(ctx->block + ctx->used, 0, 64 - ctx->used);
        sha256_block(ctx->h, ctx->block);
        ctx->used = 0;
    }
    memset(ctx->block + ctx->used, 0, 56 - ctx->used);
    for (int i = 0; i < 8; i++)
        ctx->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(ctx->h, ctx->block);

    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(ctx->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->h[i];
    }
    /* The state would let anyone extend the message; do not leave it behind. */
    memset(ctx, 0, sizeof(*ctx));
}

void chorus__sha256(const void *data, size_t len, uint8_t out[CHORUS_SHA256_BYTES])
{
    chorus__sha256_t ctx;

    chorus__sha256_init(&ctx);
    chorus__sha256_update(&ctx, data, len);
    chorus__sha256_final(&ctx, out);
}

void chorus__hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                         uint8_t out[CHORUS_SHA256_BYTES])
{
    uint8_t k[64] = {0};
    uint8_t pad[64];
    uint8_t inner[CHORUS_SHA256_BYTES];
    chorus__sha256_t ctx;

    /* Keys longer than the block are hashed first (RFC 2104, section 2). */
    if (key_len > sizeof(k))
        chorus__sha256(key, key_len, k);
    else if (key_len > 0)
        memcpy(k, key, key_len);

    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    chorus__sha256_init(&ctx);
    chorus__sha256_update(&ctx, pad, sizeof(pad));
    chorus__sha256_update(&ctx, msg, msg_len);
    chorus__sha256_final(&ctx, inner);

    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    chorus__sha256_init(&ctx);
    chorus__sha256_update(&ctx, pad, sizeof(pad));
    chorus__sha256_update(&ctx, inner, sizeof(inner));
    chorus__sha256_final(&ctx, out);

    explicit_bzero(k, sizeof(k));
    explicit_bzero(pad, sizeof(pad));
}

int chorus__mac_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
    /* Accumulate every difference so the time does not depend on where they differ. */
    volatile uint8_t diff = 0;

    for (size_t i = 0; i < len; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

int chorus__random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t got = getrandom(p, len, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            chorus_error("getrandom(%zu bytes) failed: %m", len);
            return CHORUS_ERR_SYSTEM;
        }
        p += got;
        len -= (size_t)got;
    }
    return CHORUS_OK;
}
