/* The scratch pool keeps the largest recent buffers and never serves a wasteful one. */
#include <criterion/criterion.h>
#include <string.h>

#include "coll/scratch_pool.h"

Test(scratch_pool, reuses_a_returned_buffer)
{
    coll_scratch_pool_t pool;
    coll_pool_buf_t a, b;

    coll_pool_init(&pool);
    a = coll_pool_get(&pool, 1000);
    cr_assert_not_null(a.mem);
    cr_assert_geq(a.size, 1000);
    memset(a.mem, 1, 1000);
    coll_pool_put(&pool, a);
    b = coll_pool_get(&pool, 800);
    cr_expect_eq(b.mem, a.mem, "a fitting cached buffer is served again");
    coll_pool_put(&pool, b);
    b = coll_pool_get(&pool, 100);
    cr_expect_neq(b.mem, a.mem, "a buffer more than 4x too large is not served");
    coll_pool_put(&pool, b);
    coll_pool_destroy(&pool);
}

Test(scratch_pool, keeps_the_largest_when_full)
{
    coll_scratch_pool_t pool;
    coll_pool_buf_t bufs[COLL_POOL_SLOTS + 1], big;

    coll_pool_init(&pool);
    for (int i = 0; i <= COLL_POOL_SLOTS; i++)
        bufs[i] = coll_pool_get(&pool, 64 * (size_t)(i + 1));
    big = bufs[COLL_POOL_SLOTS];
    for (int i = 0; i <= COLL_POOL_SLOTS; i++)
        coll_pool_put(&pool, bufs[i]);
    /* The smallest (64 bytes) was dropped; the largest is still there. */
    for (int i = 0; i < COLL_POOL_SLOTS; i++)
        cr_expect_neq(pool.slots[i].size, 64);
    cr_expect_eq(coll_pool_get(&pool, big.size).mem, big.mem);
    coll_pool_put(&pool, big);
    coll_pool_destroy(&pool);
}

Test(scratch_pool, works_without_a_pool)
{
    coll_pool_buf_t b = coll_pool_get(NULL, 0);

    cr_assert_not_null(b.mem);
    coll_pool_put(NULL, b);
}
