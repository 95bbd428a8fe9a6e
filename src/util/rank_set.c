/* Rank sets: counting and printing as ranges (see rank_set.h). */
#include "util/rank_set.h"

#include <stdio.h>
#include <string.h>

int chorus__rank_set_count(const uint8_t *bits, int n, int member)
{
    int count = 0;

    for (int r = 0; r < n; r++)
        count += chorus__rank_set_has(bits, r) == (member != 0);
    return count;
}

/* Room kept at the end of the buffer for ", ... (K more)". */
#define RANK_SET_TAIL 32

void chorus__rank_set_format(const uint8_t *bits, int n, int member, char *buf, size_t len)
{
    int want = member != 0, total = chorus__rank_set_count(bits, n, member), named = 0;
    size_t off = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    if (total == 0) {
        snprintf(buf, len, "none");
        return;
    }
    for (int r = 0; r < n; r++) {
        int last = r;
        char item[32];
        int item_len;

        if (chorus__rank_set_has(bits, r) != want)
            continue;
        while (last + 1 < n && chorus__rank_set_has(bits, last + 1) == want)
            last++;
        if (last == r)
            item_len = snprintf(item, sizeof(item), "%s%d", named ? ", " : "", r);
        else
            item_len = snprintf(item, sizeof(item), "%s%d-%d", named ? ", " : "", r, last);
        /* Keep room for the tail unless this range is the last one. */
        if (off + (size_t)item_len + (named + (last - r + 1) < total ? RANK_SET_TAIL : 0) >=
            len)
            break;
        memcpy(buf + off, item, (size_t)item_len + 1);
        off += (size_t)item_len;
        named += last - r + 1;
        r = last;
    }
    if (named < total)
        snprintf(buf + off, len - off, "%s... (%d more)", named ? ", " : "", total - named);
}
