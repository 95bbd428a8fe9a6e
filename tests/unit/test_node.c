/* Node identity and local rank arithmetic. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "topology/node.h"
#include "util/config.h"

/* log.c reads its level through config.c, which refers to the library's tables. */
__attribute__((weak)) const chorus__config_table_t *const chorus__config_tables[] = {NULL};

#define MAX_SIZE 6

/* Reference: group ranks by label in rank order, then read positions off the groups. */
static void reference(const int *label, int size, int *local_rank, int *local_size)
{
    int group[MAX_SIZE][MAX_SIZE], count[MAX_SIZE] = {0};

    for (int r = 0; r < size; r++)
        group[label[r]][count[label[r]]++] = r;
    for (int l = 0; l < size; l++) {
        for (int k = 0; k < count[l]; k++) {
            local_rank[group[l][k]] = k;
            local_size[group[l][k]] = count[l];
        }
    }
}

/* Every assignment of MAX_SIZE node labels to 1..MAX_SIZE ranks. */
Test(local_ranks, every_pattern_up_to_six_ranks)
{
    /* Labels are prefixes of one another, so a prefix comparison would fail. */
    static const char *const names[MAX_SIZE] = {"n", "n1", "n12", "m", "n1:x", "n13"};
    long patterns = 0;

    for (int size = 1; size <= MAX_SIZE; size++) {
        int label[MAX_SIZE] = {0};

        for (;;) {
            const char *ids[MAX_SIZE];
            int want_rank[MAX_SIZE], want_size[MAX_SIZE];
            int d = 0;

            for (int r = 0; r < size; r++)
                ids[r] = names[label[r]];
            reference(label, size, want_rank, want_size);
            for (int r = 0; r < size; r++) {
                int lr = -1, ls = -1;

                cr_assert_eq(chorus__local_ranks(ids, size, r, &lr, &ls), CHORUS_OK);
                cr_assert_eq(lr, want_rank[r], "size %d rank %d", size, r);
                cr_assert_eq(ls, want_size[r], "size %d rank %d", size, r);
            }
            patterns++;
            /* Next label vector, counting in base size. */
            while (d < size && ++label[d] == size)
                label[d++] = 0;
            if (d == size)
                break;
        }
    }
    cr_assert_eq(patterns, 1 + 4 + 27 + 256 + 3125 + 46656);
}

Test(local_ranks, separate_copies_of_one_identity_match)
{
    char a[] = "host:boot", b[] = "host:boot";
    const char *ids[] = {a, "other", b};
    int lr = -1, ls = -1;

    cr_assert_eq(chorus__local_ranks(ids, 3, 2, &lr, &ls), CHORUS_OK);
    cr_assert_eq(lr, 1);
    cr_assert_eq(ls, 2);
}

Test(local_ranks, bad_arguments_leave_outputs_alone)
{
    const char *ids[] = {"a", "b", NULL};
    int lr = 77, ls = 88;

    cr_assert_eq(chorus__local_ranks(NULL, 2, 0, &lr, &ls), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(chorus__local_ranks(ids, 0, 0, &lr, &ls), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(chorus__local_ranks(ids, 2, -1, &lr, &ls), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(chorus__local_ranks(ids, 2, 2, &lr, &ls), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(chorus__local_ranks(ids, 3, 0, &lr, &ls), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(lr, 77);
    cr_assert_eq(ls, 88);
}

/* ---- identity ------------------------------------------------------------ */

static char *format(const char *host, const char *boot)
{
    static char out[CHORUS_NODE_ID_MAX];

    memset(out, 'Z', sizeof(out));
    chorus__node_identity_format(host, boot, out);
    return out;
}

Test(identity, format_joins_host_and_boot_id)
{
    cr_assert_str_eq(format("node-1.example", "0a1b-2c3d"), "node-1.example:0a1b-2c3d");
    cr_assert_str_eq(format("node_1", NULL), "node_1");
    cr_assert_str_eq(format("node_1", ""), "node_1");
    cr_assert_str_eq(format(NULL, "b"), "unknown:b");
    cr_assert_str_eq(format("", NULL), "unknown");
}

Test(identity, format_sanitizes)
{
    cr_assert_str_eq(format("a b/c:d\x01\x7f", "x\ny"), "a_b_c_d__:x_y");
    /* A two-byte UTF-8 character becomes two placeholders. */
    cr_assert_str_eq(format("h\xc3\xa9", "1"), "h__:1");
}

Test(identity, format_bounds_each_part)
{
    char host[300], boot[300], want[CHORUS_NODE_ID_MAX];

    memset(host, 'h', sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    memset(boot, 'b', sizeof(boot) - 1);
    boot[sizeof(boot) - 1] = '\0';
    snprintf(want, sizeof(want), "%.64s:%.48s", host, boot);
    cr_assert_str_eq(format(host, boot), want);
    cr_assert_lt(strlen(format(host, boot)), CHORUS_NODE_ID_MAX);
}

Test(identity, this_machine)
{
    char id[CHORUS_NODE_ID_MAX], again[CHORUS_NODE_ID_MAX];
    char host[128] = "", boot[128] = "", want[CHORUS_NODE_ID_MAX];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    chorus__node_identity_format(host, boot, want);

    cr_assert_eq(chorus__node_identity(id, sizeof(id)), CHORUS_OK);
    cr_assert_str_eq(id, want);
    if (boot[0] != '\0')
        cr_assert_not_null(strchr(id, ':'), "boot id present: %s", id);
    for (const char *s = id; *s; s++)
        cr_assert(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:",
                         *s) != NULL, "printable identity: %s", id);
    cr_assert_eq(chorus__node_identity(again, sizeof(again)), CHORUS_OK);
    cr_assert_str_eq(id, again);
}

Test(identity, small_buffer_is_rejected)
{
    char id[CHORUS_NODE_ID_MAX - 1];

    memset(id, 'Q', sizeof(id));
    cr_assert_eq(chorus__node_identity(id, sizeof(id)), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(id[0], 'Q');
    cr_assert_eq(chorus__node_identity(NULL, CHORUS_NODE_ID_MAX), CHORUS_ERR_INVALID_ARG);
}
