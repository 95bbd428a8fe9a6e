/* Rank sets (util/rank_set.h): membership, counting, and printing as ranges. */
#include <criterion/criterion.h>
#include <string.h>

#include "util/rank_set.h"

/* A set of n ranks from a string of '0' and '1', rank 0 first. */
static void set_from(uint8_t *bits, const char *members)
{
    memset(bits, 0, chorus__rank_set_bytes((int)strlen(members)));
    for (int r = 0; members[r] != '\0'; r++)
        chorus__rank_set_put(bits, r, members[r] == '1');
}

static void expect_format(const char *members, int member, size_t len, const char *want)
{
    uint8_t bits[64];
    char buf[256];

    set_from(bits, members);
    memset(buf, 'x', sizeof(buf));
    chorus__rank_set_format(bits, (int)strlen(members), member, buf, len);
    cr_expect_str_eq(buf, want, "members %s (%d) in %zu bytes", members, member, len);
    cr_expect_lt(strlen(buf), len);
}

Test(rank_set, bytes_and_membership)
{
    uint8_t bits[2] = {0};

    cr_expect_eq(chorus__rank_set_bytes(0), 0);
    cr_expect_eq(chorus__rank_set_bytes(1), 1);
    cr_expect_eq(chorus__rank_set_bytes(8), 1);
    cr_expect_eq(chorus__rank_set_bytes(9), 2);
    chorus__rank_set_put(bits, 9, 1);
    chorus__rank_set_put(bits, 0, 1);
    cr_expect(chorus__rank_set_has(bits, 9) && chorus__rank_set_has(bits, 0));
    cr_expect(!chorus__rank_set_has(bits, 8) && !chorus__rank_set_has(bits, 1));
    cr_expect_eq(bits[1], 0x02);
    chorus__rank_set_put(bits, 9, 0);
    cr_expect_eq(bits[1], 0);
    cr_expect_eq(chorus__rank_set_count(bits, 10, 1), 1);
    cr_expect_eq(chorus__rank_set_count(bits, 10, 0), 9);
}

Test(rank_set, ranges)
{
    expect_format("110", 1, 64, "0-1");
    expect_format("110", 0, 64, "2");
    expect_format("000", 1, 64, "none");
    expect_format("1", 1, 64, "0");
    expect_format("1011100101", 1, 64, "0, 2-4, 7, 9");
    expect_format("1011100101", 0, 64, "1, 5-6, 8");
    expect_format("111111111111", 1, 64, "0-11");
}

Test(rank_set, a_cut_list_says_how_many_it_left_out)
{
    /* 20 single ranks: "0, 2, 4, ..." does not fit 40 bytes. */
    const char *alternate = "1010101010101010101010101010101010101010";

    expect_format(alternate, 1, 40, "0, 2, 4, ... (17 more)");
    expect_format(alternate, 1, 32, "... (20 more)");
    expect_format(alternate, 1, 256, "0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, "
                  "28, 30, 32, 34, 36, 38");
}
