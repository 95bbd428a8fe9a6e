/* Where this process runs on its node: its CPUs, their NUMA nodes, the NIC nearest them. */
#include "topology/topo.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

/* Append the set bits of set below max as ranges ("0-3,8") to buf at *used. */
static void put_ranges(const int *set, int max, char *buf, size_t len, size_t *used)
{
    int first = 1;

    for (int i = 0; i < max && *used < len; i++) {
        int j = i;
        int w;

        if (!set[i])
            continue;
        while (j + 1 < max && set[j + 1])
            j++;
        w = j == i ? snprintf(buf + *used, len - *used, "%s%d", first ? "" : ",", i)
                   : snprintf(buf + *used, len - *used, "%s%d-%d", first ? "" : ",", i, j);
        *used += w > 0 ? (size_t)w : 0;
        first = 0;
        i = j;
    }
}

/* The map's NUMA index of the PU with OS index cpu, or -1. */
static int numa_of_cpu(const topo_node_t *node, int cpu)
{
    for (int p = 0; p < node->npus; p++) {
        const topo_pu_t *pu = &node->pus[p];

        if (pu->os_index == cpu && pu->core >= 0 && pu->core < node->ncores)
            return node->cores[pu->core].numa;
    }
    return -1;
}

/* Interface, else device, else PCI address (a network namespace hides the host's interfaces). */
static const char *nic_label(const topo_nic_t *nic)
{
    if (nic->netdev[0])
        return nic->netdev;
    if (nic->name[0])
        return nic->name;
    return nic->busid[0] ? nic->busid : "?";
}

void topo_place_self(const topo_node_t *node, char *out, size_t len)
{
    int cpus[CPU_SETSIZE];
    int numa[TOPO_PLACE_NUMA_MAX] = {0}, first_numa = -1, nic = -1;
    cpu_set_t set;
    size_t used = 0;

    if (len == 0)
        return;
    out[0] = '\0';
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        int m;

        cpus[c] = CPU_ISSET(c, &set) != 0;
        m = cpus[c] && node != NULL ? numa_of_cpu(node, c) : -1;
        if (m >= 0 && m < TOPO_PLACE_NUMA_MAX) {
            numa[m] = 1;
            first_numa = first_numa < 0 ? m : first_numa;
        }
    }
    used = (size_t)snprintf(out, len, "cpus ");
    put_ranges(cpus, CPU_SETSIZE, out, len, &used);
    if (used < len)
        used += (size_t)snprintf(out + used, len - used, ", numa ");
    if (first_numa < 0 && used < len)
        used += (size_t)snprintf(out + used, len - used, "?");
    put_ranges(numa, TOPO_PLACE_NUMA_MAX, out, len, &used);
    if (node != NULL && first_numa >= 0 &&
        topo_nearest_nic_to_numa(node, first_numa, &nic) != CHORUS_OK)
        nic = -1;
    if (used < len)
        snprintf(out + used, len - used, ", nic %s", nic >= 0 ? nic_label(&node->nics[nic]) : "-");
}
