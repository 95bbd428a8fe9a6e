/* Ring rank arithmetic and chunking (src/coll/ring.h), checked by simulating the ring. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "coll/ring.h"

Test(ring_math, neighbours_are_inverse)
{
    for (int p = 1; p <= 17; p++) {
        for (int r = 0; r < p; r++) {
            int right = coll_ring_right(r, p), left = coll_ring_left(r, p);
            cr_assert(right >= 0 && right < p && left >= 0 && left < p);
            cr_assert_eq(coll_ring_left(right, p), r, "p=%d r=%d", p, r);
            cr_assert_eq(coll_ring_right(left, p), r, "p=%d r=%d", p, r);
            cr_assert_eq(right, (r + 1) % p);
        }
    }
    cr_assert_eq(coll_ring_mod(-1, 5), 4);
    cr_assert_eq(coll_ring_mod(-10, 5), 0);
    cr_assert_eq(coll_ring_mod(-11, 5), 4);
}

Test(ring_math, blocks_partition_the_vector)
{
    for (int p = 1; p <= 17; p++) {
        for (size_t count = 0; count <= 70; count++) {
            size_t next = 0, lo = SIZE_MAX, hi = 0;
            for (int b = 0; b < p; b++) {
                size_t n = coll_ring_block_count(count, p, b);
                cr_assert_eq(coll_ring_block_offset(count, p, b), next,
                             "p=%d count=%zu block %d", p, count, b);
                next += n;
                lo = n < lo ? n : lo;
                hi = n > hi ? n : hi;
            }
            cr_assert_eq(next, count, "p=%d count=%zu", p, count);
            cr_assert(hi - lo <= 1, "p=%d count=%zu: blocks %zu..%zu", p, count, lo, hi);
            cr_assert_eq(coll_ring_block_offset(count, p, p), count);
        }
    }
    /* Larger than 32 bits. */
    cr_assert_eq(coll_ring_block_count((size_t)1 << 40, 3, 0), (((size_t)1 << 40) / 3) + 1);
}

/* Reduce-scatter: after size-1 steps rank r holds every rank's contribution to block r. */
Test(ring_math, reduce_scatter_steps_meet)
{
    for (int p = 1; p <= 12; p++) {
        uint32_t have[12][12];  /* have[rank][block]: bitmask of contributing ranks */
        for (int r = 0; r < p; r++)
            for (int b = 0; b < p; b++)
                have[r][b] = 1u << r;
        for (int s = 0; s < p - 1; s++) {
            uint32_t sent[12];
            for (int r = 0; r < p; r++)
                sent[r] = have[r][coll_ring_rs_send_block(r, p, s)];
            for (int r = 0; r < p; r++) {
                int left = coll_ring_left(r, p);
                int rb = coll_ring_rs_recv_block(r, p, s);
                cr_assert_eq(rb, coll_ring_rs_send_block(left, p, s), "p=%d s=%d r=%d", p, s, r);
                cr_assert_eq(have[r][rb] & sent[left], 0, "block %d reduced twice", rb);
                have[r][rb] |= sent[left];
                /* What a rank sends at step s+1 is what it completed at step s. */
                if (s + 1 < p - 1)
                    cr_assert_eq(coll_ring_rs_send_block(r, p, s + 1), rb);
            }
        }
        for (int r = 0; r < p; r++)
            cr_assert_eq(have[r][r], (1u << p) - 1, "p=%d rank %d", p, r);
    }
}

/* Allgather: starting from block r on rank r, every rank ends with every block. */
Test(ring_math, allgather_steps_meet)
{
    for (int p = 1; p <= 12; p++) {
        int have[12][12] = {{0}};
        for (int r = 0; r < p; r++)
            have[r][r] = 1;
        for (int s = 0; s < p - 1; s++) {
            for (int r = 0; r < p; r++) {
                int left = coll_ring_left(r, p);
                int sb = coll_ring_ag_send_block(left, p, s);
                cr_assert(have[left][sb], "p=%d s=%d: rank %d sends block %d it lacks", p, s,
                          left, sb);
                cr_assert_eq(coll_ring_ag_recv_block(r, p, s), sb);
                cr_assert(!have[r][sb], "p=%d s=%d: rank %d receives block %d twice", p, s, r,
                          sb);
            }
            for (int r = 0; r < p; r++)
                have[r][coll_ring_ag_recv_block(r, p, s)] = 1;
        }
        for (int r = 0; r < p; r++)
            for (int b = 0; b < p; b++)
                cr_assert(have[r][b], "p=%d rank %d lacks block %d", p, r, b);
    }
}

Test(ring_math, chunking)
{
    /* Rounded down to whole elements, at least one, at most the block. */
    cr_assert_eq(coll_chunk_elems(4096, 8, 100000, 14), 512);
    cr_assert_eq(coll_chunk_elems(4095, 8, 100000, 14), 511);
    cr_assert_eq(coll_chunk_elems(3, 8, 100000, 14), 1);
    cr_assert_eq(coll_chunk_elems(4096, 8, 100, 14), 100);
    cr_assert_eq(coll_chunk_elems(0, 8, 100, 14), 100);
    cr_assert_eq(coll_chunk_count(0, 5), 0);
    cr_assert_eq(coll_chunk_count(10, 5), 2);
    cr_assert_eq(coll_chunk_count(11, 5), 3);
    /* Tags (steps x chunks) always fit in 32 bits. */
    size_t big = (size_t)1 << 40;
    for (long nsteps = 1; nsteps <= 4096; nsteps *= 4) {
        size_t chunk = coll_chunk_elems(1, 4, big, nsteps);
        cr_assert(coll_chunk_count(big, chunk) * (size_t)nsteps <= UINT32_MAX,
                  "nsteps %ld chunk %zu", nsteps, chunk);
    }
}
