/* The job layout: nodes from identities, positions, leaders, ring crossings, parsing, printing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/layout.h"
#include "util/config.h"

static void assert_ints(const int *got, const int *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%d] = %d, expected %d", what, i, got[i], want[i]);
}

/* Nodes are numbered by their lowest rank, whatever the identities say. */
Test(layout, from_identities_interleaved)
{
    const char *ids[] = {"host-b", "host-a", "host-b", "host-c", "host-a"};
    const int node_of[] = {0, 1, 0, 2, 1}, local[] = {0, 0, 1, 0, 1};
    const int first[] = {0, 2, 4, 5}, by_node[] = {0, 2, 1, 4, 3};
    topo_layout_t *l = NULL;

    cr_assert_eq(topo_layout_build(ids, 5, &l), CHORUS_OK);
    cr_assert_eq(l->size, 5);
    cr_assert_eq(l->nnodes, 3);
    assert_ints(l->node_of, node_of, 5, "node_of");
    assert_ints(l->local_index, local, 5, "local_index");
    assert_ints(l->node_first, first, 4, "node_first");
    assert_ints(l->by_node, by_node, 5, "by_node");
    cr_assert_eq(l->local_min, 1);
    cr_assert_eq(l->local_max, 2);
    cr_assert_eq(topo_layout_leader(l, 0), 0);
    cr_assert_eq(topo_layout_leader(l, 1), 1);
    cr_assert_eq(topo_layout_leader(l, 2), 3);
    cr_assert_eq(topo_layout_rank(l, 1, 1), 4);
    /* Edges 0->1, 1->2, 2->3, 3->4, 4->0 all leave their node; nodes 0 and 1 have two each. */
    cr_assert_eq(l->ring_crossings, 2);
    cr_assert_eq(topo_layout_link(l, 2, 2), TOPO_LINK_SELF);
    cr_assert_eq(topo_layout_link(l, 0, 2), TOPO_LINK_NODE);
    cr_assert_eq(topo_layout_link(l, 0, 1), TOPO_LINK_NETWORK);
    topo_layout_free(l);
}

Test(layout, parsed_lists_fill_nodes_in_order)
{
    topo_layout_t *l = NULL;
    char shape[64];

    cr_assert_eq(topo_layout_parse("3,2,1", &l), CHORUS_OK);
    cr_assert_eq(l->size, 6);
    cr_assert_eq(l->nnodes, 3);
    cr_assert_eq(l->local_min, 1);
    cr_assert_eq(l->local_max, 3);
    cr_assert_eq(l->ring_crossings, 1);
    cr_assert_eq(l->node_of[2], 0);
    cr_assert_eq(l->node_of[3], 1);
    cr_assert_eq(l->node_of[5], 2);
    cr_assert_eq(l->local_index[4], 1);
    topo_layout_shape(l, shape, sizeof(shape));
    cr_assert_str_eq(shape, "3,2,1");
    topo_layout_free(l);
    cr_assert_eq(topo_layout_parse("4", &l), CHORUS_OK);
    cr_assert_eq(l->nnodes, 1);
    /* On one node no ring edge leaves it. */
    cr_assert_eq(l->ring_crossings, 0);
    topo_layout_free(l);
}

Test(layout, bad_lists_are_refused)
{
    static const char *const bad[] = {"", "0", "2,", ",2", "2,,2", "a", "-1", "2;2", "2, 2",
                                      "99999"};
    topo_layout_t *l = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(topo_layout_parse(bad[i], &l), CHORUS_ERR_INVALID_ARG, "'%s'", bad[i]);
        cr_assert_null(l, "'%s'", bad[i]);
    }
    cr_assert_eq(topo_layout_parse(NULL, &l), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(topo_layout_from_nodes(NULL, 3, &l), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(topo_layout_build(NULL, 3, &l), CHORUS_ERR_INVALID_ARG);
    {
        const char *ids[] = {"a", NULL};
        cr_assert_eq(topo_layout_build(ids, 2, &l), CHORUS_ERR_INVALID_ARG);
    }
    cr_assert_null(l);
}

Test(layout, printed_one_line_per_node)
{
    const int node_of[] = {7, 7, 3, 7, 3, 5};
    const char *ids[] = {"x", "x", "y", "x", "y", "z"};
    topo_layout_t *l = NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_eq(topo_layout_from_nodes(node_of, 6, &l), CHORUS_OK);
    topo_layout_print(f, l, ids, "# ");
    topo_layout_print(f, l, NULL, "");
    fclose(f);
    cr_assert_str_eq(text, "# node 0: 3 ranks (0-1,3), leader 0, x\n"
                           "# node 1: 2 ranks (2,4), leader 2, y\n"
                           "# node 2: 1 rank (5), leader 5, z\n"
                           "node 0: 3 ranks (0-1,3), leader 0\n"
                           "node 1: 2 ranks (2,4), leader 2\n"
                           "node 2: 1 rank (5), leader 5\n");
    free(text);
    topo_layout_free(l);
}
