/* The job's layout, from the ranks' node identities (see layout.h). */
#include "topology/layout.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

void topo_layout_free(topo_layout_t *layout)
{
    if (layout == NULL)
        return;
    free(layout->node_of);
    free(layout->local_index);
    free(layout->node_first);
    free(layout->by_node);
    free(layout);
}

static topo_layout_t *layout_alloc(int size)
{
    topo_layout_t *l = calloc(1, sizeof(*l));

    if (l == NULL)
        return NULL;
    l->size = size;
    l->node_of = calloc((size_t)size, sizeof(int));
    l->local_index = calloc((size_t)size, sizeof(int));
    l->node_first = calloc((size_t)size + 1, sizeof(int));
    l->by_node = calloc((size_t)size, sizeof(int));
    if (l->node_of == NULL || l->local_index == NULL || l->node_first == NULL ||
        l->by_node == NULL) {
        topo_layout_free(l);
        return NULL;
    }
    return l;
}

/* Fill everything from node_of, whose nodes are numbered by their lowest rank. */
static void layout_finish(topo_layout_t *l)
{
    int *fill = l->local_index;     /* per node: ranks placed so far, then reused per rank */

    memset(l->node_first, 0, ((size_t)l->nnodes + 1) * sizeof(int));
    for (int r = 0; r < l->size; r++)
        l->node_first[l->node_of[r] + 1]++;
    for (int n = 0; n < l->nnodes; n++)
        l->node_first[n + 1] += l->node_first[n];
    l->local_min = INT_MAX;
    l->local_max = 0;
    for (int n = 0; n < l->nnodes; n++) {
        int k = topo_layout_node_size(l, n);
        l->local_min = k < l->local_min ? k : l->local_min;
        l->local_max = k > l->local_max ? k : l->local_max;
    }
    memset(fill, 0, (size_t)l->size * sizeof(int));
    for (int r = 0; r < l->size; r++) {
        int n = l->node_of[r];
        l->by_node[l->node_first[n] + fill[n]++] = r;
    }
    for (int n = 0; n < l->nnodes; n++) {
        for (int i = 0; i < topo_layout_node_size(l, n); i++)
            l->local_index[topo_layout_rank(l, n, i)] = i;
    }
    l->ring_crossings = 0;
    for (int n = 0; n < l->nnodes; n++) {
        int out = 0;
        for (int i = 0; i < topo_layout_node_size(l, n); i++) {
            int r = topo_layout_rank(l, n, i);
            out += l->node_of[(r + 1) % l->size] != n;
        }
        l->ring_crossings = out > l->ring_crossings ? out : l->ring_crossings;
    }
}

chorus_status_t topo_layout_from_nodes(const int *node_of, int size, topo_layout_t **layout_p)
{
    topo_layout_t *l;

    if (node_of == NULL || size < 1 || layout_p == NULL) {
        chorus_error("invalid arguments for a layout of %d ranks", size);
        return CHORUS_ERR_INVALID_ARG;
    }
    l = layout_alloc(size);
    if (l == NULL)
        return CHORUS_ERR_NO_MEMORY;
    /* Renumber: a rank's node is the node of the first earlier rank with the same name. */
    for (int r = 0; r < size; r++) {
        int first = r;
        for (int q = 0; q < r; q++) {
            if (node_of[q] == node_of[r]) {
                first = q;
                break;
            }
        }
        l->node_of[r] = first == r ? l->nnodes++ : l->node_of[first];
    }
    layout_finish(l);
    *layout_p = l;
    return CHORUS_OK;
}

chorus_status_t topo_layout_build(const char *const *ids, int size, topo_layout_t **layout_p)
{
    int *names;
    chorus_status_t status;

    if (ids == NULL || size < 1) {
        chorus_error("invalid arguments for a layout of %d ranks", size);
        return CHORUS_ERR_INVALID_ARG;
    }
    names = malloc((size_t)size * sizeof(*names));
    if (names == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int r = 0; r < size; r++) {
        if (ids[r] == NULL) {
            chorus_error("rank %d has no node identity", r);
            free(names);
            return CHORUS_ERR_INVALID_ARG;
        }
        names[r] = r;
        for (int q = 0; q < r; q++) {
            if (strcmp(ids[q], ids[r]) == 0) {
                names[r] = names[q];
                break;
            }
        }
    }
    status = topo_layout_from_nodes(names, size, layout_p);
    free(names);
    return status;
}

chorus_status_t topo_layout_parse(const char *ranks_per_node, topo_layout_t **layout_p)
{
    const char *p = ranks_per_node;
    int *node_of = NULL, size = 0, node = 0;
    chorus_status_t status = CHORUS_ERR_INVALID_ARG;

    if (p == NULL || *p == '\0')
        goto bad;
    while (*p != '\0') {
        char *end;
        long k;
        int *grown;

        if (*p < '0' || *p > '9')
            goto bad;
        errno = 0;
        k = strtol(p, &end, 10);
        if (errno != 0 || end == p || k < 1 || k > 4096 || size + k > 65536 ||
            (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0'))
            goto bad;
        grown = realloc(node_of, (size_t)(size + k) * sizeof(*grown));
        if (grown == NULL) {
            status = CHORUS_ERR_NO_MEMORY;
            goto out;
        }
        node_of = grown;
        for (long i = 0; i < k; i++)
            node_of[size++] = node;
        node++;
        p = *end == ',' ? end + 1 : end;
    }
    status = topo_layout_from_nodes(node_of, size, layout_p);
    goto out;
bad:
    chorus_error("invalid ranks per node '%s': expected counts of at least 1 separated by "
                 "commas, e.g. 2,2 or 3,2,1", ranks_per_node ? ranks_per_node : "(null)");
out:
    free(node_of);
    return status;
}

void topo_layout_shape(const topo_layout_t *l, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (int n = 0; n < l->nnodes && used < len; n++) {
        int w = snprintf(buf + used, len - used, "%s%d", n ? "," : "",
                         topo_layout_node_size(l, n));
        used += w > 0 ? (size_t)w : 0;
    }
}

/* Node n's ranks as ascending ranges: "0-3,8". */
static void node_ranks(const topo_layout_t *l, int n, char *buf, size_t len)
{
    size_t used = 0;
    int k = topo_layout_node_size(l, n);

    buf[0] = '\0';
    for (int i = 0; i < k && used < len; ) {
        int lo = topo_layout_rank(l, n, i), j = i;
        int w;

        while (j + 1 < k && topo_layout_rank(l, n, j + 1) == topo_layout_rank(l, n, j) + 1)
            j++;
        if (j == i)
            w = snprintf(buf + used, len - used, "%s%d", i ? "," : "", lo);
        else
            w = snprintf(buf + used, len - used, "%s%d-%d", i ? "," : "", lo,
                         topo_layout_rank(l, n, j));
        used += w > 0 ? (size_t)w : 0;
        i = j + 1;
    }
}

void topo_layout_print(FILE *out, const topo_layout_t *l, const char *const *ids,
                       const char *prefix)
{
    char ranks[256];

    for (int n = 0; n < l->nnodes; n++) {
        node_ranks(l, n, ranks, sizeof(ranks));
        fprintf(out, "%snode %d: %d rank%s (%s), leader %d%s%s\n", prefix, n,
                topo_layout_node_size(l, n), topo_layout_node_size(l, n) == 1 ? "" : "s", ranks,
                topo_layout_leader(l, n), ids ? ", " : "",
                ids ? ids[topo_layout_leader(l, n)] : "");
    }
}
