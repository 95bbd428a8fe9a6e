/* Questions asked of a built map, and its release; pure code on plain data. */
#include <stdlib.h>

#include "topology/topo.h"
#include "util/log.h"

void topo_node_free(topo_node_t *node)
{
    if (node == NULL)
        return;
    free(node->packages);
    free(node->numa);
    free(node->cores);
    free(node->pus);
    free(node->caches);
    free(node->gpus);
    free(node->nics);
    free(node->nvlinks);
    free(node->gpu_nic);
    free(node->numa_dist);
    free(node->xml);
    free(node);
}

const char *topo_dist_name(topo_dist_t dist)
{
    static const char *const names[TOPO_DIST_COUNT] = {
        [TOPO_DIST_PCI_SWITCH] = "pci-switch",
        [TOPO_DIST_HOST_BRIDGE] = "host-bridge",
        [TOPO_DIST_PACKAGE] = "package",
        [TOPO_DIST_CROSS_PACKAGE] = "cross-package",
    };

    return (unsigned)dist < TOPO_DIST_COUNT ? names[dist] : "?";
}

chorus_status_t topo_nearest_nic_to_gpu(const topo_node_t *node, int gpu, int *nic_p)
{
    int best = -1;

    if (node == NULL || gpu < 0 || gpu >= node->ngpus || node->nnics == 0) {
        chorus_error("no nic for gpu %d (%d gpus, %d nics)", gpu,
                     node ? node->ngpus : 0, node ? node->nnics : 0);
        return CHORUS_ERR_INVALID_ARG;
    }
    for (int n = 0; n < node->nnics; n++)
        if (best < 0 || node->gpu_nic[gpu * node->nnics + n] <
                        node->gpu_nic[gpu * node->nnics + best])
            best = n;
    *nic_p = best;
    return CHORUS_OK;
}

/* Smaller is nearer: NUMA distance when known, else same node, same package, elsewhere. */
static uint64_t numa_cost(const topo_node_t *node, int numa, const topo_nic_t *nic)
{
    if (nic->numa == numa)
        return 0;
    if (nic->numa >= 0 && node->numa_dist)
        return node->numa_dist[numa * node->nnuma + nic->numa];
    if (nic->package >= 0 && nic->package == node->numa[numa].package)
        return (uint64_t)1 << 32;
    return (uint64_t)2 << 32;
}

chorus_status_t topo_nearest_nic_to_numa(const topo_node_t *node, int numa, int *nic_p)
{
    int best = -1;
    uint64_t best_cost = 0;

    if (node == NULL || numa < 0 || numa >= node->nnuma || node->nnics == 0) {
        chorus_error("no nic for numa node %d (%d numa nodes, %d nics)", numa,
                     node ? node->nnuma : 0, node ? node->nnics : 0);
        return CHORUS_ERR_INVALID_ARG;
    }
    for (int n = 0; n < node->nnics; n++) {
        uint64_t cost = numa_cost(node, numa, &node->nics[n]);
        if (best < 0 || cost < best_cost) {
            best = n;
            best_cost = cost;
        }
    }
    *nic_p = best;
    return CHORUS_OK;
}

int topo_nvlink_count(const topo_node_t *node, int a, int b)
{
    for (int i = 0; node && i < node->nnvlinks; i++) {
        const topo_nvlink_t *l = &node->nvlinks[i];
        if ((l->gpu == a && l->peer == b) || (l->gpu == b && l->peer == a))
            return l->links;
    }
    return 0;
}
