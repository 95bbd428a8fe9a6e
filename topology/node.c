/* Node identity and the ranks that share it. */
#include "topology/node.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "topology/layout.h"
#include "util/log.h"

#define NODE_HOST_MAX 64    /* Linux's HOST_NAME_MAX */
#define NODE_BOOT_MAX 48    /* a boot id is a 36-character UUID */
#define NODE_NET_MAX 24     /* the namespace's inode number */
#define NODE_BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#define NODE_NETNS_PATH "/proc/self/ns/net"

static int node_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '.' || c == '_' || c == '-';
}

/* Copy at most max characters of src to dst, sanitized; returns the count. */
static size_t node_copy(char *dst, const char *src, size_t max)
{
    size_t n = 0;

    for (; src[n] != '\0' && n < max; n++)
        dst[n] = node_char_ok(src[n]) ? src[n] : '_';
    return n;
}

/*
 * A host name alone is not unique (cloned virtual machines, containers
 * named alike), and the boot id alone is shared by containers on one
 * kernel that may not share memory. The network namespace separates
 * processes that reach each other only through a network, such as the
 * namespaces of an emulated cluster on one machine: they are nodes of their
 * own. Together the three name one node; ':' cannot occur in a sanitized part.
 */
void chorus__node_identity_format(const char *host, const char *boot_id, const char *netns,
                                  char *out)
{
    size_t n = node_copy(out, host && *host ? host : "unknown", NODE_HOST_MAX);

    if (boot_id != NULL && *boot_id != '\0') {
        out[n++] = ':';
        n += node_copy(out + n, boot_id, NODE_BOOT_MAX);
    }
    if (netns != NULL && *netns != '\0') {
        out[n++] = ':';
        n += node_copy(out + n, netns, NODE_NET_MAX);
    }
    out[n] = '\0';
}

/* The boot id without its newline, or "" when it cannot be read. */
static void node_read_boot_id(char *buf, size_t len)
{
    FILE *f = fopen(NODE_BOOT_ID_PATH, "re");

    buf[0] = '\0';
    if (f == NULL) {
        chorus_debug("cannot open %s: %m; the node identity is the host name alone",
                     NODE_BOOT_ID_PATH);
        return;
    }
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

/* The inode number of this process's network namespace ("net:[N]"), or "". */
static void node_read_netns(char *buf, size_t len)
{
    char link[64];
    ssize_t n = readlink(NODE_NETNS_PATH, link, sizeof(link) - 1);
    const char *open_br, *close_br;

    buf[0] = '\0';
    if (n <= 0) {
        chorus_debug("cannot read %s: %m; the node identity has no network namespace",
                     NODE_NETNS_PATH);
        return;
    }
    link[n] = '\0';
    open_br = strchr(link, '[');
    close_br = open_br ? strchr(open_br, ']') : NULL;
    if (close_br == NULL || (size_t)(close_br - open_br) > len)
        return;
    memcpy(buf, open_br + 1, (size_t)(close_br - open_br - 1));
    buf[close_br - open_br - 1] = '\0';
}

chorus_status_t chorus__node_identity(char *out, size_t len)
{
    char host[NODE_HOST_MAX + 2];
    char boot_id[NODE_BOOT_MAX + 2];
    char netns[NODE_NET_MAX + 2];

    if (out == NULL || len < CHORUS_NODE_ID_MAX) {
        chorus_error("node identity needs a buffer of %d bytes, got %zu",
                     CHORUS_NODE_ID_MAX, out ? len : 0);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (gethostname(host, sizeof(host)) != 0 && errno != ENAMETOOLONG) {
        chorus_error("gethostname failed: %m");
        return CHORUS_ERR_SYSTEM;
    }
    /* A truncated name need not be terminated. */
    host[sizeof(host) - 1] = '\0';
    node_read_boot_id(boot_id, sizeof(boot_id));
    node_read_netns(netns, sizeof(netns));
    chorus__node_identity_format(host, boot_id, netns, out);
    return CHORUS_OK;
}

uint64_t chorus__machine_id(void)
{
    char host[NODE_HOST_MAX + 2] = "", boot_id[NODE_BOOT_MAX + 2];
    uint64_t h = 0xcbf29ce484222325ull;

    if (gethostname(host, sizeof(host)) != 0)
        host[0] = '\0';
    host[sizeof(host) - 1] = '\0';
    node_read_boot_id(boot_id, sizeof(boot_id));
    for (const char *s = host; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h = (h ^ ':') * 0x100000001b3ull;
    for (const char *s = boot_id; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

chorus_status_t chorus__local_ranks(const char *const *ids, int size, int rank,
                                    int *local_rank_p, int *local_size_p)
{
    topo_layout_t *l;
    chorus_status_t status;

    if (ids == NULL || size < 1 || rank < 0 || rank >= size) {
        chorus_error("invalid arguments for local ranks: rank %d of size %d", rank, size);
        return CHORUS_ERR_INVALID_ARG;
    }
    /* The job layout groups the ranks; this is one rank's view of it. */
    status = topo_layout_build(ids, size, &l);
    if (status != CHORUS_OK)
        return status;
    *local_rank_p = l->local_index[rank];
    *local_size_p = topo_layout_node_size(l, l->node_of[rank]);
    topo_layout_free(l);
    return CHORUS_OK;
}
