/* Shared between the files of the topology map; not for use outside topology/. */
#ifndef CHORUS_TOPOLOGY_TOPO_INTERNAL_H
#define CHORUS_TOPOLOGY_TOPO_INTERNAL_H

#include <stddef.h>
#include "config.h"
#include "topology/topo.h"

/*
 * What hwloc does not describe travels as info attributes of the GPU's PCI
 * object, so that one XML file carries the whole map: one
 * "ChorusNVLinkPeer" = "<peer bus id> <links>" per linked GPU, and
 * "ChorusNVSwitchLinks" = "<links>" for links that end at an NVSwitch.
 */
#define TOPO_INFO_NVLINK_PEER   "ChorusNVLinkPeer"
#define TOPO_INFO_NVSWITCH      "ChorusNVSwitchLinks"
#define TOPO_NVLINK_MAX         64 /* links per GPU we believe; more is a bad file */

/* Largest topology file we read. */
#define TOPO_FILE_MAX (64u << 20)

/* Parse a ChorusNVLinkPeer value; 0 on success, -1 when malformed. */
int topo_file_nvlink_parse(const char *value, char busid[TOPO_BUSID_MAX], int *links_p);
void topo_file_nvlink_format(char *out, size_t len, const char *busid, int links);

/*
 * Build a map from an hwloc XML buffer (buf[len] must be '\0'); what names
 * its origin in messages. Without hwloc: CHORUS_ERR_UNSUPPORTED.
 */
chorus_status_t topo_node_from_xml(const char *buf, size_t len, const char *what,
                                   topo_node_t **node_p);

#ifdef HAVE_HWLOC
#include <hwloc.h>

/* Conversion of the I/O part (GPUs, NICs, their distances and NVLinks) into node. */
chorus_status_t topo_io_convert(hwloc_topology_t t, topo_node_t *node);
/* Whether a PCI device is a GPU we count (3D controllers, NVIDIA and AMD display devices). */
int topo_io_is_gpu(hwloc_obj_t obj);
void topo_io_busid(hwloc_obj_t pci, char out[TOPO_BUSID_MAX]);

/* Record NVLinks found through NVML as info attributes of the GPUs; absent NVML is fine. */
void topo_nvml_annotate(hwloc_topology_t t);

/* The package at or above obj, or -1. */
int topo_hwloc_package_of(hwloc_topology_t t, hwloc_obj_t obj);
/* The one NUMA node with CPUs that overlaps obj's CPUs, or -1 (none, or several). */
int topo_hwloc_numa_of(hwloc_topology_t t, hwloc_obj_t obj);
void topo_hwloc_cpuset(hwloc_const_bitmap_t set, char out[TOPO_CPUSET_MAX]);
#endif

#endif
