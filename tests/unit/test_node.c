/* Node identity and local rank arithmetic. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topology/node.h"
#include "util/config.h"

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

static char *format3(const char *host, const char *boot, const char *netns)
{
    static char out[CHORUS_NODE_ID_MAX];

    memset(out, 'Z', sizeof(out));
    chorus__node_identity_format(host, boot, netns, out);
    return out;
}

static char *format(const char *host, const char *boot)
{
    return format3(host, boot, NULL);
}

Test(identity, format_joins_host_and_boot_id)
{
    cr_assert_str_eq(format("node-1.example", "0a1b-2c3d"), "node-1.example:0a1b-2c3d");
    cr_assert_str_eq(format("node_1", NULL), "node_1");
    cr_assert_str_eq(format("node_1", ""), "node_1");
    cr_assert_str_eq(format(NULL, "b"), "unknown:b");
    cr_assert_str_eq(format("", NULL), "unknown");
    cr_assert_str_eq(format3("h", "b", "4026531840"), "h:b:4026531840");
    cr_assert_str_eq(format3("h", NULL, "4026531840"), "h:4026531840");
    cr_assert_str_eq(format3("h", "b", ""), "h:b");
}

Test(identity, format_sanitizes)
{
    cr_assert_str_eq(format("a b/c:d\x01\x7f", "x\ny"), "a_b_c_d__:x_y");
    /* A two-byte UTF-8 character becomes two placeholders. */
    cr_assert_str_eq(format("h\xc3\xa9", "1"), "h__:1");
}

Test(identity, format_bounds_each_part)
{
    char host[300], boot[300], net[300], want[CHORUS_NODE_ID_MAX];

    memset(host, 'h', sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    memset(boot, 'b', sizeof(boot) - 1);
    boot[sizeof(boot) - 1] = '\0';
    memset(net, 'n', sizeof(net) - 1);
    net[sizeof(net) - 1] = '\0';
    snprintf(want, sizeof(want), "%.64s:%.48s:%.24s", host, boot, net);
    cr_assert_str_eq(format3(host, boot, net), want);
    cr_assert_lt(strlen(format3(host, boot, net)), CHORUS_NODE_ID_MAX);
}

Test(identity, this_machine)
{
    char id[CHORUS_NODE_ID_MAX], again[CHORUS_NODE_ID_MAX];
    char host[128] = "", boot[128] = "", link[64] = "", net[64] = "", want[CHORUS_NODE_ID_MAX];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    /* "net:[4026531840]": the number between the brackets. */
    if (readlink("/proc/self/ns/net", link, sizeof(link) - 1) > 0)
        sscanf(link, "net:[%63[0-9]]", net);
    chorus__node_identity_format(host, boot, net, want);

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

/* The identity this process would have in a network namespace of its own. */
static int identity_in_new_netns(char *id)
{
    int fds[2], status;
    pid_t pid;
    ssize_t got;

    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char child[CHORUS_NODE_ID_MAX] = "";

        close(fds[0]);
        if (unshare(CLONE_NEWNET) != 0)
            _exit(errno == EPERM ? 3 : 4);
        if (chorus__node_identity(child, sizeof(child)) != CHORUS_OK)
            _exit(5);
        _exit(write(fds[1], child, sizeof(child)) == (ssize_t)sizeof(child) ? 0 : 6);
    }
    close(fds[1]);
    got = read(fds[0], id, CHORUS_NODE_ID_MAX);
    close(fds[0]);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3)
        return -1;
    cr_assert_eq(WEXITSTATUS(status), 0, "child exit %d", WEXITSTATUS(status));
    cr_assert_eq(got, CHORUS_NODE_ID_MAX);
    return 0;
}

Test(identity, network_namespaces_are_nodes)
{
    char here[CHORUS_NODE_ID_MAX], there[CHORUS_NODE_ID_MAX];
    size_t prefix;

    cr_assert_eq(chorus__node_identity(here, sizeof(here)), CHORUS_OK);
    if (identity_in_new_netns(there) != 0)
        cr_skip_test("creating a network namespace needs privileges this run lacks");
    cr_assert_str_neq(here, there, "a new network namespace is another node: %s", here);
    /* Host name and boot id stay the same: only the last part differs. */
    prefix = (size_t)(strrchr(here, ':') - here);
    cr_assert_eq(strncmp(here, there, prefix + 1), 0, "%s vs %s", here, there);
}
