/*
 * The map of one node: packages, NUMA nodes, cores, PUs, caches, GPUs and
 * NICs, how far every GPU is from every NIC on the PCI tree, NUMA distances
 * and NVLink links. Built from hwloc (and NVML for NVLink, when a driver is
 * there), or loaded from a file so that code and tests can work on machines
 * we do not have. The map is plain data: it holds no hwloc object, and every
 * index in it is an index into one of its own arrays (logical order).
 */
#ifndef CHORUS_TOPOLOGY_TOPO_H
#define CHORUS_TOPOLOGY_TOPO_H

#include <stdint.h>
#include <stdio.h>
#include "chorus.h"
#include "util/config.h"

#define TOPO_NAME_MAX   64
#define TOPO_BUSID_MAX  16  /* "dddd:bb:dd.f" and its NUL */
#define TOPO_CPUSET_MAX 128 /* a list such as "0-7,16-23"; longer ones end in "..." */

/* How far a GPU is from a NIC, nearest first. */
typedef enum {
    TOPO_DIST_PCI_SWITCH = 0, /* below one PCI switch (or root port) */
    TOPO_DIST_HOST_BRIDGE,    /* below one host bridge, different switches */
    TOPO_DIST_PACKAGE,        /* different host bridges of one package */
    TOPO_DIST_CROSS_PACKAGE,  /* through the link between packages */
    TOPO_DIST_COUNT
} topo_dist_t;

typedef enum {
    TOPO_NIC_ETHERNET = 0,
    TOPO_NIC_INFINIBAND
} topo_nic_kind_t;

typedef struct {
    int os_index;
    int ncores, npus;
    char model[TOPO_NAME_MAX];     /* "" when unknown */
    char cpuset[TOPO_CPUSET_MAX];
} topo_package_t;

typedef struct {
    int os_index;
    int package;                   /* -1: outside any package */
    uint64_t memory_bytes;
    char cpuset[TOPO_CPUSET_MAX];  /* "" for memory without CPUs */
} topo_numa_t;

typedef struct {
    int os_index;
    int package, numa;             /* -1 when unknown */
    int npus;
} topo_core_t;

typedef struct {
    int os_index;
    int core;                      /* -1 when the PU has no core above it */
} topo_pu_t;

typedef struct {
    int level;                     /* 1, 2, 3... */
    char type;                     /* 'u'nified, 'd'ata, 'i'nstruction */
    uint64_t size_bytes;
    int npus, ncores;              /* how many share it */
    int package;                   /* -1 when it spans packages */
} topo_cache_t;

typedef struct {
    char busid[TOPO_BUSID_MAX];
    unsigned vendor_id, device_id;
    char name[TOPO_NAME_MAX];      /* model when known, else "" */
    int numa, package;             /* nearest; -1 when not one of them */
    char cpuset[TOPO_CPUSET_MAX];  /* CPUs nearest to it */
    int nvswitch_links;            /* NVLinks to a switch rather than to a GPU */
} topo_gpu_t;

typedef struct {
    char name[TOPO_NAME_MAX];      /* verbs device ("mlx5_0"), else interface, else "" */
    char netdev[TOPO_NAME_MAX];    /* interface ("ib0", "eth0"), "" when none */
    char busid[TOPO_BUSID_MAX];
    unsigned vendor_id, device_id;
    topo_nic_kind_t kind;
    int numa, package;             /* nearest; -1 when not one of them */
} topo_nic_t;

/* gpu < peer; one entry per linked pair. */
typedef struct {
    int gpu, peer;
    int links;
} topo_nvlink_t;

typedef struct {
    char host[TOPO_NAME_MAX];
    int npackages, nnuma, ncores, npus, ncaches, ngpus, nnics, nnvlinks;
    topo_package_t *packages;
    topo_numa_t *numa;
    topo_core_t *cores;
    topo_pu_t *pus;
    topo_cache_t *caches;
    topo_gpu_t *gpus;
    topo_nic_t *nics;
    topo_nvlink_t *nvlinks;
    topo_dist_t *gpu_nic;          /* [gpu * nnics + nic] */
    uint64_t *numa_dist;           /* [a * nnuma + b], relative latency; NULL when unknown */
    /* The description the map was built from (hwloc XML), written by topo_node_dump. */
    char *xml;
    size_t xml_len;
} topo_node_t;

typedef struct {
    chorus__config_str_t file;
    chorus__config_str_t dump_file;
} topo_config_t;

extern const chorus__config_table_t topo_config_table;

/* This machine, through hwloc and NVML. CHORUS_ERR_UNSUPPORTED without hwloc. */
chorus_status_t topo_node_discover(topo_node_t **node_p);

/*
 * The node described by an hwloc XML file (as lstopo --of xml or
 * topo_node_dump write it). CHORUS_ERR_SYSTEM when the file cannot be read,
 * CHORUS_ERR_INVALID_ARG when it is not a topology hwloc can load.
 */
chorus_status_t topo_node_load(const char *path, topo_node_t **node_p);

/*
 * The map as configured: the file named by CHORUS_TOPO_FILE, else this
 * machine; then written to CHORUS_TOPO_DUMP_FILE when that is set (a failed
 * dump is a warning, not an error).
 */
chorus_status_t topo_node_create(const topo_config_t *cfg, topo_node_t **node_p);

/* Write node as hwloc XML, NVLink links included, so topo_node_load reads it back. */
chorus_status_t topo_node_dump(const topo_node_t *node, const char *path);

void topo_node_free(topo_node_t *node);

/* The NIC nearest to a GPU (ties: lowest index); INVALID_ARG for a bad index or no NIC. */
chorus_status_t topo_nearest_nic_to_gpu(const topo_node_t *node, int gpu, int *nic_p);

/* The NIC nearest to a NUMA node: same node, then smallest NUMA distance or same package. */
chorus_status_t topo_nearest_nic_to_numa(const topo_node_t *node, int numa, int *nic_p);

/* Longest place string, with its NUL; NUMA nodes a place names. */
#define TOPO_PLACE_MAX 128
#define TOPO_PLACE_NUMA_MAX 64

/*
 * Where this process runs: "cpus 0-1, numa 0, nic eth0", from its affinity
 * mask, the NUMA nodes of those CPUs in node's map, and the NIC nearest the
 * first of them (node NULL: only the CPUs; "?" and "-" for what is unknown).
 */
void topo_place_self(const topo_node_t *node, char *out, size_t len);

/* NVLinks between two GPUs (0 when none or out of range). */
int topo_nvlink_count(const topo_node_t *node, int a, int b);

/* "pci-switch", "host-bridge", "package", "cross-package". */
const char *topo_dist_name(topo_dist_t dist);

/* A map a person reads at a glance. */
chorus_status_t topo_node_print(const topo_node_t *node, FILE *out);

#endif
