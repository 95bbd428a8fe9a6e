/*
 * Where the harness puts its ranks when CHORUS_TEST_NETNS lists namespaces
 * (run under "testbed.sh --harness"): rank r of N must be in namespace
 * r * m / N of the m listed, see exactly the ranks of that namespace as its
 * node (local size and local rank), and reach every other rank (an allreduce
 * of the node indexes, checked exactly).
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

/* The inode of the index-th namespace of the list (a name under /var/run/netns). */
static ino_t place_ns_inode(const char *list, int index)
{
    char path[256];
    struct stat st;
    const char *p = list;

    for (int i = 0; i < index && p != NULL; i++)
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    if (p == NULL)
        return 0;
    snprintf(path, sizeof(path), "/var/run/netns/%.*s", (int)strcspn(p, ","), p);
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* How many ranks of size share node (consecutive ranks share a node). */
static int place_node_size(int node, int m, int size, int *first_p)
{
    int n = 0;

    *first_p = -1;
    for (int r = 0; r < size; r++) {
        if (r * m / size != node)
            continue;
        if (*first_p < 0)
            *first_p = r;
        n++;
    }
    return n;
}

static int place_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const place_t *p = arg;
    int node = rank * p->m / size, first, local = place_node_size(node, p->m, size, &first);
    int64_t mine = node, sum = 0, want = 0;
    struct stat self;

    if (stat("/proc/self/ns/net", &self) != 0 || self.st_ino != place_ns_inode(p->list, node)) {
        fprintf(stderr, "rank %d of %d: not in namespace %d of '%s'\n", rank, size, node,
                p->list);
        return 1;
    }
    if (chorus_comm_local_size(comm) != local || chorus_comm_local_rank(comm) != rank - first) {
        fprintf(stderr, "rank %d of %d: local rank %d of %d, expected %d of %d (node %d)\n",
                rank, size, chorus_comm_local_rank(comm), chorus_comm_local_size(comm),
                rank - first, local, node);
        return 1;
    }
    for (int r = 0; r < size; r++)
        want += r * p->m / size;
    if (chorus_allreduce(&mine, &sum, 1, CHORUS_INT64, CHORUS_SUM, comm, NULL) != CHORUS_OK ||
        sum != want) {
        fprintf(stderr, "rank %d of %d: allreduce of node indexes gave %lld, expected %lld\n",
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
    int status[64];

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
    if (harness_run(&opts, place_rank, &p, status, NULL) != 0)
        return 1;
    printf("netns_place: %d ranks on %d namespaces as expected\n", opts.nranks, p.m);
    return 0;
}
