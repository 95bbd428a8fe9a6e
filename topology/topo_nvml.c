/*
 * NVLink through NVML, loaded at run time: chorus never links against the
 * driver's library, so a build runs on machines without a GPU driver, where
 * the map simply has no NVLink. Each active link of each NVIDIA GPU is
 * followed to the PCI device at its other end: a GPU of this node (a peer),
 * or anything else (an NVSwitch). The result becomes info attributes of the
 * GPUs' hwloc objects (topo_internal.h), like a topology file carries them.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <hwloc.h>

#include "topology/topo_internal.h"
#include "util/log.h"

/* The few NVML declarations we need, from its stable C ABI. */
#define NVML_SUCCESS            0
#define NVML_FEATURE_ENABLED    1
#define NVML_NVLINK_MAX_LINKS   18
typedef struct nvml_device *nvml_device_t;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device;
    unsigned pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info_t;

typedef struct {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_bus_id)(const char *bus_id, nvml_device_t *dev);
    int (*link_state)(nvml_device_t dev, unsigned link, int *active);
    int (*remote_pci)(nvml_device_t dev, unsigned link, nvml_pci_info_t *pci);
} nvml_t;

static int nvml_open(nvml_t *n)
{
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (n->lib == NULL) {
        chorus_debug("no nvml (%s); the map has no nvlink", dlerror());
        return -1;
    }
    *(void **)&n->init = dlsym(n->lib, "nvmlInit_v2");
    *(void **)&n->shutdown = dlsym(n->lib, "nvmlShutdown");
    *(void **)&n->by_bus_id = dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&n->link_state = dlsym(n->lib, "nvmlDeviceGetNvLinkState");
    *(void **)&n->remote_pci = dlsym(n->lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    if (!n->init || !n->shutdown || !n->by_bus_id || !n->link_state || !n->remote_pci) {
        chorus_debug("nvml lacks the nvlink queries; the map has no nvlink");
        dlclose(n->lib);
        return -1;
    }
    if (n->init() != NVML_SUCCESS) {
        chorus_debug("nvml did not initialize; the map has no nvlink");
        dlclose(n->lib);
        return -1;
    }
    return 0;
}

static void nvml_close(nvml_t *n)
{
    n->shutdown();
    dlclose(n->lib);
}

/* The NVIDIA GPU of this topology at a bus id NVML gave ("00000000:07:00.0"), or NULL. */
static hwloc_obj_t gpu_at(hwloc_topology_t t, const char *bus_id)
{
    unsigned domain, bus, dev, func;

    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4)
        return NULL;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, NULL); o; o = hwloc_get_next_pcidev(t, o))
        if (topo_io_is_gpu(o) && o->attr->pcidev.domain == domain &&
            o->attr->pcidev.bus == bus && o->attr->pcidev.dev == dev &&
            o->attr->pcidev.func == func)
            return o;
    return NULL;
}

/* Follow every active link of one GPU; record peers and the links that end elsewhere. */
static void annotate_gpu(nvml_t *n, hwloc_topology_t t, hwloc_obj_t gpu)
{
    hwloc_obj_t peers[NVML_NVLINK_MAX_LINKS];
    int counts[NVML_NVLINK_MAX_LINKS], npeers = 0, to_switch = 0;
    char busid[TOPO_BUSID_MAX], value[TOPO_BUSID_MAX + 16];
    nvml_device_t dev;

    topo_io_busid(gpu, busid);
    if (n->by_bus_id(busid, &dev) != NVML_SUCCESS) {
        chorus_debug("nvml does not know gpu %s", busid);
        return;
    }
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        nvml_pci_info_t pci;
        hwloc_obj_t peer;
        int active = 0, k;

        if (n->link_state(dev, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED ||
            n->remote_pci(dev, link, &pci) != NVML_SUCCESS)
            continue;
        pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
        peer = gpu_at(t, pci.bus_id);
        if (peer == NULL || peer == gpu) {
            to_switch++;
            continue;
        }
        for (k = 0; k < npeers && peers[k] != peer; k++)
            ;
        if (k == npeers)
            peers[npeers] = peer, counts[npeers++] = 0;
        counts[k]++;
    }
    for (int k = 0; k < npeers; k++) {
        char peer_id[TOPO_BUSID_MAX];

        topo_io_busid(peers[k], peer_id);
        topo_file_nvlink_format(value, sizeof(value), peer_id, counts[k]);
        hwloc_obj_add_info(gpu, TOPO_INFO_NVLINK_PEER, value);
    }
    if (to_switch > 0) {
        snprintf(value, sizeof(value), "%d", to_switch);
        hwloc_obj_add_info(gpu, TOPO_INFO_NVSWITCH, value);
    }
    chorus_debug("gpu %s: %d nvlink peers, %d links to a switch", busid, npeers,
                 to_switch);
}

void topo_nvml_annotate(hwloc_topology_t t)
{
    nvml_t n;

    if (nvml_open(&n) != 0)
        return;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, NULL); o; o = hwloc_get_next_pcidev(t, o))
        if (topo_io_is_gpu(o) && o->attr->pcidev.vendor_id == 0x10de)
            annotate_gpu(&n, t, o);
    nvml_close(&n);
}
