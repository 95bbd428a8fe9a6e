/*
 * The I/O side of the map: GPUs and NICs found on hwloc's PCI tree, the
 * distance class of every GPU/NIC pair, and NVLinks read back from the info
 * attributes that topo_nvml.c (or a topology file) put on the GPUs.
 */
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "topology/topo_internal.h"
#include "util/log.h"

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMD    0x1002
#define PCI_CLASS_3D      0x0302
#define PCI_CLASS_INFINIBAND_NIC 0x0207
#define PCI_CLASS_INFINIBAND_BUS 0x0c06

/* Deep enough for any real PCI tree under any CPU hierarchy. */
#define ANCESTORS_MAX 64

int topo_io_is_gpu(hwloc_obj_t obj)
{
    unsigned cls = obj->attr->pcidev.class_id, vendor = obj->attr->pcidev.vendor_id;

    /* Display controllers of other vendors are mostly board management VGA, not GPUs. */
    return cls == PCI_CLASS_3D ||
           ((cls >> 8) == 0x03 && (vendor == PCI_VENDOR_NVIDIA || vendor == PCI_VENDOR_AMD));
}

static int is_nic(hwloc_obj_t obj)
{
    unsigned cls = obj->attr->pcidev.class_id;

    return (cls >> 8) == 0x02 || cls == PCI_CLASS_INFINIBAND_BUS;
}

void topo_io_busid(hwloc_obj_t pci, char out[TOPO_BUSID_MAX])
{
    snprintf(out, TOPO_BUSID_MAX, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain & 0xffffu,
             pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

/* Where a device sits: the nearest CPU-side object above it. */
static void locality(hwloc_topology_t t, hwloc_obj_t pci, int *numa, int *package,
                     char cpuset[TOPO_CPUSET_MAX])
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, pci);

    *numa = anc ? topo_hwloc_numa_of(t, anc) : -1;
    *package = anc ? topo_hwloc_package_of(t, anc) : -1;
    if (cpuset)
        topo_hwloc_cpuset(anc ? anc->cpuset : NULL, cpuset);
}

static void convert_gpu(hwloc_topology_t t, hwloc_obj_t obj, topo_gpu_t *g)
{
    const char *name = hwloc_obj_get_info_by_name(obj, "PCIDevice");
    const char *sw = hwloc_obj_get_info_by_name(obj, TOPO_INFO_NVSWITCH);

    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
        const char *model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (model) {
            name = model;
            break;
        }
    }
    topo_io_busid(obj, g->busid);
    g->vendor_id = obj->attr->pcidev.vendor_id;
    g->device_id = obj->attr->pcidev.device_id;
    snprintf(g->name, sizeof(g->name), "%s", name ? name : "");
    locality(t, obj, &g->numa, &g->package, g->cpuset);
    g->nvswitch_links = sw ? atoi(sw) : 0;
    if (g->nvswitch_links < 0 || g->nvswitch_links > TOPO_NVLINK_MAX)
        g->nvswitch_links = 0;
}

static void convert_nic(hwloc_topology_t t, hwloc_obj_t obj, topo_nic_t *n)
{
    unsigned cls = obj->attr->pcidev.class_id;

    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL)
            continue;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && n->name[0] == '\0')
            snprintf(n->name, sizeof(n->name), "%s", c->name);
        else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && n->netdev[0] == '\0')
            snprintf(n->netdev, sizeof(n->netdev), "%s", c->name);
    }
    if (n->name[0] == '\0')
        memcpy(n->name, n->netdev, sizeof(n->name));
    topo_io_busid(obj, n->busid);
    n->vendor_id = obj->attr->pcidev.vendor_id;
    n->device_id = obj->attr->pcidev.device_id;
    n->kind = cls == PCI_CLASS_INFINIBAND_NIC || cls == PCI_CLASS_INFINIBAND_BUS ?
              TOPO_NIC_INFINIBAND : TOPO_NIC_ETHERNET;
    locality(t, obj, &n->numa, &n->package, NULL);
}

/* The lowest object above both a and b. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    hwloc_obj_t up[ANCESTORS_MAX];
    int n = 0;

    for (hwloc_obj_t o = a->parent; o && n < ANCESTORS_MAX; o = o->parent)
        up[n++] = o;
    for (hwloc_obj_t o = b->parent; o; o = o->parent)
        for (int i = 0; i < n; i++)
            if (up[i] == o)
                return o;
    return NULL;
}

static topo_dist_t distance(hwloc_topology_t t, hwloc_obj_t a, hwloc_obj_t b, int npackages)
{
    hwloc_obj_t anc = common_ancestor(a, b);
    int pa, pb, na, nb;

    if (anc && anc->type == HWLOC_OBJ_BRIDGE)
        return anc->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ?
               TOPO_DIST_HOST_BRIDGE : TOPO_DIST_PCI_SWITCH;
    if (anc && anc->type == HWLOC_OBJ_PCI_DEVICE)
        return TOPO_DIST_PCI_SWITCH;
    /* Only CPU-side objects in common: the packages the two hang from decide. */
    locality(t, a, &na, &pa, NULL);
    locality(t, b, &nb, &pb, NULL);
    if (npackages <= 1 || (pa >= 0 && pa == pb))
        return TOPO_DIST_PACKAGE;
    return TOPO_DIST_CROSS_PACKAGE;
}

static int find_gpu(const topo_node_t *node, const char *busid)
{
    for (int i = 0; i < node->ngpus; i++)
        if (!strcmp(node->gpus[i].busid, busid))
            return i;
    return -1;
}

/* links[i * ngpus + j]: what GPU i says about its links to GPU j. */
static void read_nvlinks(hwloc_obj_t *gpus, const topo_node_t *node, int *links)
{
    for (int i = 0; i < node->ngpus; i++) {
        for (unsigned k = 0; k < gpus[i]->infos_count; k++) {
            const struct hwloc_info_s *info = &gpus[i]->infos[k];
            char busid[TOPO_BUSID_MAX];
            int j, count;

            if (strcmp(info->name, TOPO_INFO_NVLINK_PEER) != 0)
                continue;
            if (topo_file_nvlink_parse(info->value, busid, &count) != 0 ||
                (j = find_gpu(node, busid)) < 0 || j == i) {
                chorus_warn("gpu %s: ignoring nvlink entry '%s' (no such peer gpu "
                            "or bad count)", node->gpus[i].busid, info->value);
                continue;
            }
            links[i * node->ngpus + j] = count;
        }
    }
}

static chorus_status_t convert_nvlinks(hwloc_obj_t *gpus, topo_node_t *node)
{
    int n = node->ngpus, k = 0;
    int *links = calloc((size_t)(n > 0 ? n * n : 1), sizeof(*links));

    node->nvlinks = calloc((size_t)(n > 1 ? n * (n - 1) / 2 : 1), sizeof(*node->nvlinks));
    if (links == NULL || node->nvlinks == NULL) {
        free(links);
        return CHORUS_ERR_NO_MEMORY;
    }
    read_nvlinks(gpus, node, links);
    /* Either side's record is enough: a file may list a link once. */
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            int c = links[i * n + j] > links[j * n + i] ? links[i * n + j] : links[j * n + i];
            if (c > 0)
                node->nvlinks[k++] = (topo_nvlink_t){.gpu = i, .peer = j, .links = c};
        }
    }
    node->nnvlinks = k;
    free(links);
    return CHORUS_OK;
}

static void count_devices(hwloc_topology_t t, int *ngpus, int *nnics)
{
    *ngpus = *nnics = 0;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, NULL); o; o = hwloc_get_next_pcidev(t, o)) {
        *ngpus += topo_io_is_gpu(o);
        *nnics += is_nic(o);
    }
}

chorus_status_t topo_io_convert(hwloc_topology_t t, topo_node_t *node)
{
    hwloc_obj_t *gpus, *nics;
    chorus_status_t st = CHORUS_ERR_NO_MEMORY;
    int g = 0, n = 0;

    count_devices(t, &node->ngpus, &node->nnics);
    gpus = calloc((size_t)node->ngpus + 1, sizeof(*gpus));
    nics = calloc((size_t)node->nnics + 1, sizeof(*nics));
    node->gpus = calloc((size_t)node->ngpus + 1, sizeof(*node->gpus));
    node->nics = calloc((size_t)node->nnics + 1, sizeof(*node->nics));
    node->gpu_nic = calloc((size_t)node->ngpus * node->nnics + 1, sizeof(*node->gpu_nic));
    if (!gpus || !nics || !node->gpus || !node->nics || !node->gpu_nic)
        goto out;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, NULL); o; o = hwloc_get_next_pcidev(t, o)) {
        if (topo_io_is_gpu(o) && g < node->ngpus) {
            gpus[g] = o;
            convert_gpu(t, o, &node->gpus[g++]);
        } else if (is_nic(o) && n < node->nnics) {
            nics[n] = o;
            convert_nic(t, o, &node->nics[n++]);
        }
    }
    for (int i = 0; i < node->ngpus; i++)
        for (int j = 0; j < node->nnics; j++)
            node->gpu_nic[i * node->nnics + j] = distance(t, gpus[i], nics[j], node->npackages);
    st = convert_nvlinks(gpus, node);
out:
    free(gpus);
    free(nics);
    return st;
}
