/*
 * Shared by the fuzz targets (libFuzzer; built and run by run.sh): an
 * invariant check that stops the run with a finding, and the fixed secret
 * and nonces with which the bootstrap targets and the seed generator compute
 * MACs, so that seeds with valid MACs stay valid for the targets.
 */
#ifndef CHORUS_TESTS_FUZZ_H
#define CHORUS_TESTS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A broken invariant is a finding: abort so that libFuzzer saves the input. */
#define FUZZ_CHECK(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A NUL within the first len bytes: a reason or text never runs past its buffer. */
#define FUZZ_CHECK_STR(s, len) FUZZ_CHECK(memchr((s), '\0', (len)) != NULL)

static const uint8_t fuzz_secret[] = "chorus fuzz job secret";
static const uint8_t fuzz_nc[32] = {
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20};
static const uint8_t fuzz_ns[32] = {
    0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0xe0,
    0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xd0};

#define FUZZ_BOOT_KEYS                                                                   \
    {.secret = fuzz_secret, .secret_len = sizeof(fuzz_secret) - 1, .nc = fuzz_nc,        \
     .ns = fuzz_ns}

/* Little helpers to take fields from the input without reading past it. */
static inline uint32_t fuzz_u32(const uint8_t *data, size_t size, size_t at)
{
    uint32_t v = 0;

    for (size_t i = 0; i < 4 && at + i < size; i++)
        v |= (uint32_t)data[at + i] << (8 * i);
    return v;
}

/*
 * Input of fuzz_shm_peer: a head (ranks - 1, this rank, collective | steps << 4, root, the
 * call's fingerprint u64, base step u32, count u32, v-form flag, op, 2 spare), then per
 * rank: step word u64, failed i32, descriptor sendbuf u64, recvbuf u64, count u32 (high
 * bit: a u64 count follows) at 28, descriptor fingerprint u64 at 40, staging fingerprint
 * u64 at 48, and the rank's block in this rank's v-form: count u32 at 56, place u32 at 60.
 */
#define FUZZ_SHM_HEAD_BYTES 24
#define FUZZ_SHM_PEER_BYTES 64

static inline void fuzz_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

#endif
