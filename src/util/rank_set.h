/*
 * A set of ranks as a bitmap (rank r is bit r % 8 of byte r / 8), the form
 * the bootstrap store keeps and sends of who has joined, and its printing as
 * ranges for messages: "0-3, 5, 7-9".
 */
#ifndef CHORUS_UTIL_RANK_SET_H
#define CHORUS_UTIL_RANK_SET_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a bitmap of n ranks. */
static inline size_t chorus__rank_set_bytes(int n)
{
    return n > 0 ? ((size_t)n + 7) / 8 : 0;
}

static inline int chorus__rank_set_has(const uint8_t *bits, int rank)
{
    return (bits[rank / 8] >> (rank % 8)) & 1;
}

static inline void chorus__rank_set_put(uint8_t *bits, int rank, int member)
{
    if (member)
        bits[rank / 8] |= (uint8_t)(1u << (rank % 8));
    else
        bits[rank / 8] &= (uint8_t)~(1u << (rank % 8));
}

/* How many of ranks 0..n-1 are members (member != 0) or not (member == 0). */
int chorus__rank_set_count(const uint8_t *bits, int n, int member);

/*
 * Writes the ranks among 0..n-1 that are members (member != 0) or are not
 * (member == 0) as comma-separated ranges into buf, NUL-terminated; "none"
 * when there are none. When buf is too small the list ends with
 * ", ... (K more)" naming how many ranks were left out, so it never claims
 * to be complete when it is not. len should be at least 32.
 */
void chorus__rank_set_format(const uint8_t *bits, int n, int member, char *buf, size_t len);

#endif
