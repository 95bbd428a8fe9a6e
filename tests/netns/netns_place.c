/*
 * Where the harness puts its ranks when CHORUS_TEST_NETNS lists namespaces
 * (run under "testbed.sh --harness"): rank r of N must be in the namespace of
 * entry r * m / N of the m listed (a namespace may be listed once per rank on
 * it, as testbed.sh does for uneven and round-robin placements), see exactly
 * the ranks in that namespace as its node (local size, and local rank by
 * rank order), and reach every other rank (an allreduce of the node numbers,
 * checked exactly).
 *
 * usage: netns_place [NRANKS]   (default 5; exits 77 without CHORUS_TEST_NETNS)
 * Exit status: 0 when every rank is where it should be, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coll/harness.h"

typedef struct {
    const char *list;
    int m;
} place_t;

/* The name of the index-th entry of the list, as a length and a pointer into it. */
static const char *place_entry(const char *list, int index, int *len_p)
{
    const char *p = list;

    for (int i = 0; i < index && p != NULL; i++)
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    *len_p = p != NULL ? (int)strcspn(p, ",") : 0;
    return p;
}

/* The node of rank r of size: the first entry that names the namespace of its entry. */
static int place_node(const place_t *p, int r, int size)
{
    int len, first_len, e = r * p->m / size;
    const char *name = place_entry(p->list, e, &len);

    for (int i = 0; i < e; i++) {
        const char *other = place_entry(p->list, i, &first_len);

        if (first_len == len && strncmp(other, name, (size_t)len) == 0)
            return i;
    }
    return e;
}

/* The inode of the namespace of the node-th entry (a name under /var/run/netns). */
static ino_t place_ns_inode(const char *list, int node)
{
    char path[256];
    struct stat st;
    int len;
    const char *name = place_entry(list, node, &len);

    if (name == NULL)
        return 0;
    snprintf(path, sizeof(path), "/var/run/netns/%.*s", len, name);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* How many ranks of size share the node of rank, and how many of them come before it. */
static int place_node_size(const place_t *p, int rank, int size, int *before_p)
{
    int n = 0, node = place_node(p, rank, size);

    *before_p = 0;
    for (int r = 0; r < size; r++) {
        if (place_node(p, r, size) != node)
            continue;
        *before_p += r < rank;
        n++;
    }
    return n;
}

static int place_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const place_t *p = arg;
    int node = place_node(p, rank, size), before, local = place_node_size(p, rank, size, &before);
    int64_t mine = node, sum = 0, want = 0;
    struct stat self;

    if (stat("/proc/self/ns/net", &self) != 0 || self.st_ino != place_ns_inode(p->list, node)) {
        fprintf(stderr, "rank %d of %d: not in the namespace of entry %d of '%s'\n", rank, size,
                node, p->list);
        return 1;
    }
    if (chorus_comm_local_size(comm) != local || chorus_comm_local_rank(comm) != before) {
        fprintf(stderr, "rank %d of %d: local rank %d of %d, expected %d of %d (entry %d)\n",
                rank, size, chorus_comm_local_rank(comm), chorus_comm_local_size(comm),
                before, local, node);
        return 1;
    }
    for (int r = 0; r < size; r++)
        want += place_node(p, r, size);
    if (chorus_allreduce(&mine, &sum, 1, CHORUS_INT64, CHORUS_SUM, comm, NULL) != CHORUS_OK ||
        sum != want) {
        fprintf(stderr, "rank %d of %d: allreduce of node numbers gave %lld, expected %lld\n",
                rank, size, (long long)sum, (long long)want);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    place_t p = {.list = getenv("CHORUS_TEST_NETNS"), .m = 1};
    harness_opts_t opts = {.nranks = argc > 1 ? atoi(argv[1]) : 5, .timeout_s = 30,
                           .deadline_s = 60, .kill_rank = -1};
    int status[64], distinct = 0;

    if (p.list == NULL || *p.list == '\0') {
        printf("netns_place: CHORUS_TEST_NETNS is not set (run under testbed.sh --harness)\n");
        return 77;
    }
    if (opts.nranks < 1 || opts.nranks > 64) {
        fprintf(stderr, "netns_place: invalid NRANKS '%s' (1 to 64)\n", argv[1]);
        return 2;
    }
    for (const char *c = p.list; *c != '\0'; c++)
        p.m += *c == ',';
    for (int e = 0; e < p.m; e++)
        distinct += place_node(&p, e, p.m) == e;
    if (harness_run(&opts, place_rank, &p, status, NULL) != 0)
        return 1;
    printf("netns_place: %d ranks on %d namespaces as expected\n", opts.nranks, distinct);
    return 0;
}
