/* SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), for authenticating peers. */
#ifndef CHORUS_UTIL_SHA256_H
#define CHORUS_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define CHORUS_SHA256_BYTES 32

typedef struct {
    uint32_t h[8];
    uint64_t length;        /* bytes hashed so far */
    uint8_t block[64];
    size_t used;            /* bytes in block */
} chorus__sha256_t;

void chorus__sha256_init(chorus__sha256_t *ctx);
void chorus__sha256_update(chorus__sha256_t *ctx, const void *data, size_t len);
void chorus__sha256_final(chorus__sha256_t *ctx, uint8_t out[CHORUS_SHA256_BYTES]);
void chorus__sha256(const void *data, size_t len, uint8_t out[CHORUS_SHA256_BYTES]);

void chorus__hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                         uint8_t out[CHORUS_SHA256_BYTES]);

/* Constant-time comparison: 1 when equal. */
int chorus__mac_equal(const uint8_t *a, const uint8_t *b, size_t len);

/* Cryptographically random bytes (getrandom). CHORUS_ERR_SYSTEM on failure. */
int chorus__random_bytes(void *buf, size_t len);

#endif
