/*
 * Discovery with hwloc and conversion of an hwloc topology into the plain
 * map of topo.h: the CPU side here, the I/O side in topo_io.c.
 */
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>
#include <hwloc/distances.h>

#include "topology/topo_internal.h"
#include "util/log.h"

/* calloc that gives a pointer even for zero elements, so NULL always means failure. */
static void *topo_calloc(int n, size_t size)
{
    return calloc(n > 0 ? (size_t)n : 1, size);
}

void topo_hwloc_cpuset(hwloc_const_bitmap_t set, char out[TOPO_CPUSET_MAX])
{
    int n;

    out[0] = '\0';
    if (set == NULL || hwloc_bitmap_iszero(set))
        return;
    n = hwloc_bitmap_list_snprintf(out, TOPO_CPUSET_MAX, set);
    /* A cut list must not read as a complete one. */
    if (n >= TOPO_CPUSET_MAX)
        strcpy(out + TOPO_CPUSET_MAX - 4, "...");
}

int topo_hwloc_package_of(hwloc_topology_t t, hwloc_obj_t obj)
{
    if (obj->type != HWLOC_OBJ_PACKAGE)
        obj = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, obj);
    return obj ? (int)obj->logical_index : -1;
}

int topo_hwloc_numa_of(hwloc_topology_t t, hwloc_obj_t obj)
{
    hwloc_obj_t numa = NULL;
    int found = -1;

    if (obj->cpuset == NULL)
        return -1;
    while ((numa = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, numa)) != NULL) {
        if (hwloc_bitmap_iszero(numa->cpuset) ||
            !hwloc_bitmap_intersects(numa->cpuset, obj->cpuset))
            continue;
        if (found >= 0)
            return -1;
        found = (int)numa->logical_index;
    }
    return found;
}

static void convert_packages(hwloc_topology_t t, topo_node_t *node)
{
    for (int i = 0; i < node->npackages; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, i);
        topo_package_t *p = &node->packages[i];
        const char *model = hwloc_obj_get_info_by_name(obj, "CPUModel");

        p->os_index = (int)obj->os_index;
        p->ncores = hwloc_get_nbobjs_inside_cpuset_by_type(t, obj->cpuset, HWLOC_OBJ_CORE);
        p->npus = hwloc_get_nbobjs_inside_cpuset_by_type(t, obj->cpuset, HWLOC_OBJ_PU);
        snprintf(p->model, sizeof(p->model), "%s", model ? model : "");
        topo_hwloc_cpuset(obj->cpuset, p->cpuset);
    }
}

static void convert_cpus(hwloc_topology_t t, topo_node_t *node)
{
    for (int i = 0; i < node->nnuma; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);

        node->numa[i].os_index = (int)obj->os_index;
        node->numa[i].package = topo_hwloc_package_of(t, obj);
        node->numa[i].memory_bytes = obj->attr->numanode.local_memory;
        topo_hwloc_cpuset(obj->cpuset, node->numa[i].cpuset);
    }
    for (int i = 0; i < node->ncores; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i);

        node->cores[i].os_index = (int)obj->os_index;
        node->cores[i].package = topo_hwloc_package_of(t, obj);
        node->cores[i].numa = topo_hwloc_numa_of(t, obj);
        node->cores[i].npus = hwloc_bitmap_weight(obj->cpuset);
    }
    for (int i = 0; i < node->npus; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, i);
        hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, obj);

        node->pus[i].os_index = (int)obj->os_index;
        node->pus[i].core = core ? (int)core->logical_index : -1;
    }
}

static int count_caches(hwloc_topology_t t)
{
    int n = 0, depth = hwloc_topology_get_depth(t);

    for (int d = 0; d < depth; d++)
        if (hwloc_obj_type_is_cache(hwloc_get_depth_type(t, d)))
            n += hwloc_get_nbobjs_by_depth(t, d);
    return n;
}

static void convert_caches(hwloc_topology_t t, topo_node_t *node)
{
    int k = 0, depth = hwloc_topology_get_depth(t);

    for (int d = 0; d < depth; d++) {
        if (!hwloc_obj_type_is_cache(hwloc_get_depth_type(t, d)))
            continue;
        for (unsigned i = 0; i < hwloc_get_nbobjs_by_depth(t, d) && k < node->ncaches; i++) {
            hwloc_obj_t obj = hwloc_get_obj_by_depth(t, d, i);
            topo_cache_t *c = &node->caches[k++];
            hwloc_obj_cache_type_t type = obj->attr->cache.type;

            c->level = (int)obj->attr->cache.depth;
            c->type = type == HWLOC_OBJ_CACHE_DATA ? 'd' :
                      type == HWLOC_OBJ_CACHE_INSTRUCTION ? 'i' : 'u';
            c->size_bytes = obj->attr->cache.size;
            c->npus = hwloc_bitmap_weight(obj->cpuset);
            c->ncores = hwloc_get_nbobjs_inside_cpuset_by_type(t, obj->cpuset, HWLOC_OBJ_CORE);
            c->package = topo_hwloc_package_of(t, obj);
        }
    }
}

/* NUMA latencies when hwloc has them (from the OS or the file); none is not an error. */
static chorus_status_t convert_numa_distances(hwloc_topology_t t, topo_node_t *node)
{
    struct hwloc_distances_s *dist = NULL;
    unsigned nr = 1;
    int n = node->nnuma;

    if (hwloc_distances_get_by_type(t, HWLOC_OBJ_NUMANODE, &nr, &dist,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 || nr == 0)
        return CHORUS_OK;
    if ((int)dist->nbobjs == n && n > 0) {
        node->numa_dist = calloc((size_t)n * n, sizeof(*node->numa_dist));
        if (node->numa_dist == NULL) {
            hwloc_distances_release(t, dist);
            return CHORUS_ERR_NO_MEMORY;
        }
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                node->numa_dist[dist->objs[a]->logical_index * n + dist->objs[b]->logical_index] =
                    dist->values[a * n + b];
    }
    hwloc_distances_release(t, dist);
    return CHORUS_OK;
}

static chorus_status_t convert_cpu_side(hwloc_topology_t t, topo_node_t *node)
{
    const char *host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t), "HostName");

    snprintf(node->host, sizeof(node->host), "%s", host ? host : "");
    node->npackages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    node->nnuma = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    node->ncores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    node->npus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    node->ncaches = count_caches(t);
    node->packages = topo_calloc(node->npackages, sizeof(*node->packages));
    node->numa = topo_calloc(node->nnuma, sizeof(*node->numa));
    node->cores = topo_calloc(node->ncores, sizeof(*node->cores));
    node->pus = topo_calloc(node->npus, sizeof(*node->pus));
    node->caches = topo_calloc(node->ncaches, sizeof(*node->caches));
    if (!node->packages || !node->numa || !node->cores || !node->pus || !node->caches)
        return CHORUS_ERR_NO_MEMORY;
    convert_packages(t, node);
    convert_cpus(t, node);
    convert_caches(t, node);
    return convert_numa_distances(t, node);
}

/* Keep the description itself, so that a dump writes exactly what the map came from. */
static chorus_status_t keep_xml(hwloc_topology_t t, topo_node_t *node)
{
    char *buf;
    int len;

    if (hwloc_topology_export_xmlbuffer(t, &buf, &len, 0) != 0 || len < 1) {
        chorus_error("hwloc cannot export the topology as xml");
        return CHORUS_ERR_INTERNAL;
    }
    node->xml = malloc((size_t)len);
    if (node->xml == NULL) {
        hwloc_free_xmlbuffer(t, buf);
        return CHORUS_ERR_NO_MEMORY;
    }
    memcpy(node->xml, buf, (size_t)len);
    node->xml_len = (size_t)len - 1; /* hwloc counts the final NUL */
    hwloc_free_xmlbuffer(t, buf);
    return CHORUS_OK;
}

static chorus_status_t convert(hwloc_topology_t t, topo_node_t **node_p)
{
    topo_node_t *node = calloc(1, sizeof(*node));
    chorus_status_t st;

    if (node == NULL)
        return CHORUS_ERR_NO_MEMORY;
    st = convert_cpu_side(t, node);
    if (st == CHORUS_OK)
        st = topo_io_convert(t, node);
    if (st == CHORUS_OK)
        st = keep_xml(t, node);
    if (st != CHORUS_OK) {
        if (st == CHORUS_ERR_NO_MEMORY)
            chorus_error("out of memory building the map of %d pus", node->npus);
        topo_node_free(node);
        return st;
    }
    *node_p = node;
    return CHORUS_OK;
}

/* hwloc components discovery leaves out (see topo_hwloc_init). */
static const char *const topo_unwanted[] = {"pci", "opencl", "gl", "cuda", "nvml", "rsmi",
                                            "levelzero"};

/* I/O devices are what the map is for: keep GPUs, NICs and the bridges above them. */
static chorus_status_t topo_hwloc_init(hwloc_topology_t *t_p)
{
    if (hwloc_topology_init(t_p) != 0) {
        chorus_error("hwloc_topology_init failed: %m");
        return CHORUS_ERR_SYSTEM;
    }
    hwloc_topology_set_io_types_filter(*t_p, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc leaves instruction caches out unless asked; the map lists every cache. */
    hwloc_topology_set_icache_types_filter(*t_p, HWLOC_TYPE_FILTER_KEEP_ALL);
    /*
     * The Linux backend reads the PCI tree from sysfs itself. The libpciaccess
     * component finds nothing more and leaks about 1 KiB per load; the OpenCL and
     * GL components would start vendor stacks for GPUs the map already names by
     * their PCI class. None of them is wanted in every rank.
     */
    for (size_t i = 0; i < sizeof(topo_unwanted) / sizeof(topo_unwanted[0]); i++)
        hwloc_topology_set_components(*t_p, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                      topo_unwanted[i]);
    return CHORUS_OK;
}

chorus_status_t topo_node_from_xml(const char *buf, size_t len, const char *what,
                                   topo_node_t **node_p)
{
    hwloc_topology_t t;
    chorus_status_t st = topo_hwloc_init(&t);

    if (st != CHORUS_OK)
        return st;
    if (len + 1 > (size_t)TOPO_FILE_MAX + 1 ||
        hwloc_topology_set_xmlbuffer(t, buf, (int)len + 1) != 0 ||
        hwloc_topology_load(t) != 0) {
        chorus_error("%s (%zu bytes) is not an hwloc xml topology", what, len);
        hwloc_topology_destroy(t);
        return CHORUS_ERR_INVALID_ARG;
    }
    st = convert(t, node_p);
    hwloc_topology_destroy(t);
    return st;
}

chorus_status_t topo_node_discover(topo_node_t **node_p)
{
    hwloc_topology_t t;
    chorus_status_t st = topo_hwloc_init(&t);

    if (st != CHORUS_OK)
        return st;
    if (hwloc_topology_load(t) != 0) {
        chorus_error("hwloc cannot discover this machine: %m");
        hwloc_topology_destroy(t);
        return CHORUS_ERR_SYSTEM;
    }
    topo_nvml_annotate(t);
    st = convert(t, node_p);
    hwloc_topology_destroy(t);
    return st;
}
