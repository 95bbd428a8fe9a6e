/*
 * CHORUS_TRANSPORT=auto: the network transport every rank keeps, chosen
 * alike on every rank from the addresses they exchanged. A transport a rank
 * did not open published an all-zero slot.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "core/context.h"

enum { SIZE = 4 };
#define CARD ((size_t)CHORUS__LANES_MAX * TL_ADDR_MAX)

static char addrs[SIZE * CARD];

/* Rank r published something at slot s. */
static void publish(int r, int s)
{
    memset(addrs + (size_t)r * CARD + (size_t)s * TL_ADDR_MAX + 7, 0x5a, 9);
}

Test(net_choose, the_first_unless_every_rank_opened_a_later_one)
{
    static const int slots[] = {0, 1, 2};

    memset(addrs, 0, sizeof(addrs));
    for (int r = 0; r < SIZE; r++)
        publish(r, 0);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 1), 0);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 3), 0, "nobody opened more");
    /* Slot 1 on every rank but the last: not taken. */
    for (int r = 0; r < SIZE - 1; r++)
        publish(r, 1);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 3), 0);
    publish(SIZE - 1, 1);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 3), 1, "every rank opened slot 1");
    /* A later one every rank opened wins; one only some opened does not. */
    publish(0, 2);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 3), 1);
    for (int r = 1; r < SIZE; r++)
        publish(r, 2);
    cr_expect_eq(chorus__net_choose(addrs, SIZE, slots, 3), 2);
    /* Slots need not be in order of the lanes: the index into slots is returned. */
    {
        static const int shuffled[] = {2, 0};

        cr_expect_eq(chorus__net_choose(addrs, SIZE, shuffled, 2), 1);
    }
}
