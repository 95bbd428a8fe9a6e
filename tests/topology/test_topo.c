/*
 * The topology map, from captured hwloc XML files (tests/topology/data):
 * this development machine (no GPU, one virtual NIC) and a hand-written
 * 8-GPU NVLink server with 4 InfiniBand NICs behind 4 PCI switches.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topology/topo.h"
#include "topology/topo_internal.h"
#include "util/config.h"

#define NVLINK8 TOPO_DATA_DIR "/nvlink8.xml"
#define DEVBOX  TOPO_DATA_DIR "/devbox.xml"

static topo_node_t *load(const char *path)
{
    topo_node_t *node = NULL;

    cr_assert_eq(topo_node_load(path, &node), CHORUS_OK, "load %s", path);
    cr_assert_not_null(node);
    return node;
}

/* A file in /tmp holding len bytes of text; the caller unlinks it. */
static void temp_file(char *path, const char *text, size_t len)
{
    int fd;

    strcpy(path, "/tmp/chorus-topo-XXXXXX");
    fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
}

Test(nvlink8, counts)
{
    topo_node_t *node = load(NVLINK8);

    cr_assert_str_eq(node->host, "nvlink8");
    cr_assert_eq(node->npackages, 2);
    cr_assert_eq(node->nnuma, 2);
    cr_assert_eq(node->ncores, 16);
    cr_assert_eq(node->npus, 16);
    cr_assert_eq(node->ncaches, 2);
    cr_assert_eq(node->ngpus, 8);
    cr_assert_eq(node->nnics, 4);
    cr_assert_eq(node->nnvlinks, 28);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(node->numa[i].memory_bytes, 512ull << 30);
        cr_assert_eq(node->numa[i].package, i);
        cr_assert_eq(node->caches[i].level, 3);
        cr_assert_eq(node->caches[i].size_bytes, 32u << 20);
        cr_assert_eq(node->caches[i].ncores, 8);
        cr_assert_eq(node->caches[i].package, i);
    }
    for (int c = 0; c < 16; c++) {
        cr_assert_eq(node->cores[c].package, c / 8);
        cr_assert_eq(node->cores[c].numa, c / 8);
        cr_assert_eq(node->pus[c].core, c);
    }
    cr_assert_eq(node->numa_dist[0], 10);
    cr_assert_eq(node->numa_dist[1], 21);
    cr_assert_eq(node->numa_dist[2], 21);
    cr_assert_eq(node->numa_dist[3], 10);
    topo_node_free(node);
}

Test(nvlink8, devices)
{
    static const char *const gpu_bus[8] = {"0000:12:00.0", "0000:13:00.0", "0000:22:00.0",
                                           "0000:23:00.0", "0000:92:00.0", "0000:93:00.0",
                                           "0000:a2:00.0", "0000:a3:00.0"};
    static const char *const nic_bus[4] = {"0000:14:00.0", "0000:24:00.0", "0000:94:00.0",
                                           "0000:a4:00.0"};
    topo_node_t *node = load(NVLINK8);

    for (int g = 0; g < 8; g++) {
        cr_assert_str_eq(node->gpus[g].busid, gpu_bus[g]);
        cr_assert_eq(node->gpus[g].vendor_id, 0x10de);
        cr_assert_eq(node->gpus[g].device_id, 0x2330);
        cr_assert_str_eq(node->gpus[g].name, "GH100 [H100 SXM5 80GB]");
        cr_assert_eq(node->gpus[g].numa, g / 4);
        cr_assert_eq(node->gpus[g].package, g / 4);
        cr_assert_str_eq(node->gpus[g].cpuset, g < 4 ? "0-7" : "8-15");
    }
    for (int n = 0; n < 4; n++) {
        char name[16], netdev[16];

        snprintf(name, sizeof(name), "mlx5_%d", n);
        snprintf(netdev, sizeof(netdev), "ib%d", n);
        cr_assert_str_eq(node->nics[n].name, name);
        cr_assert_str_eq(node->nics[n].netdev, netdev);
        cr_assert_str_eq(node->nics[n].busid, nic_bus[n]);
        cr_assert_eq(node->nics[n].kind, TOPO_NIC_INFINIBAND);
        cr_assert_eq(node->nics[n].numa, n / 2);
    }
    topo_node_free(node);
}

/* Each switch holds GPUs 2s and 2s+1 and NIC s; switches 0-1 are package 0's. */
Test(nvlink8, distances_and_nearest_nic)
{
    topo_node_t *node = load(NVLINK8);

    for (int g = 0; g < 8; g++) {
        int nic = -1;

        for (int n = 0; n < 4; n++) {
            topo_dist_t want = n == g / 2 ? TOPO_DIST_PCI_SWITCH :
                               n / 2 == g / 4 ? TOPO_DIST_HOST_BRIDGE : TOPO_DIST_CROSS_PACKAGE;
            cr_assert_eq(node->gpu_nic[g * 4 + n], want, "gpu %d nic %d", g, n);
        }
        cr_assert_eq(topo_nearest_nic_to_gpu(node, g, &nic), CHORUS_OK);
        cr_assert_eq(nic, g / 2, "gpu %d", g);
    }
    for (int numa = 0; numa < 2; numa++) {
        int nic = -1;

        cr_assert_eq(topo_nearest_nic_to_numa(node, numa, &nic), CHORUS_OK);
        cr_assert_eq(nic, 2 * numa);
    }
    cr_assert_eq(topo_nearest_nic_to_gpu(node, 8, &(int){0}), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(topo_nearest_nic_to_numa(node, -1, &(int){0}), CHORUS_ERR_INVALID_ARG);
    topo_node_free(node);
}

/* All-to-all: 4 links between the two GPUs of a switch, 2 between any other pair. */
Test(nvlink8, nvlink_counts)
{
    topo_node_t *node = load(NVLINK8);

    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            cr_assert_eq(topo_nvlink_count(node, a, b), a == b ? 0 : a / 2 == b / 2 ? 4 : 2,
                         "gpus %d and %d", a, b);
    for (int i = 0; i < node->nnvlinks; i++)
        cr_assert_lt(node->nvlinks[i].gpu, node->nvlinks[i].peer);
    topo_node_free(node);
}

Test(devbox, no_gpu_one_ethernet_nic)
{
    topo_node_t *node = load(DEVBOX);
    int nic = -1;

    cr_assert_str_eq(node->host, "vm");
    cr_assert_eq(node->npackages, 1);
    cr_assert_eq(node->nnuma, 1);
    cr_assert_eq(node->ncores, 2);
    cr_assert_eq(node->npus, 2);
    cr_assert_eq(node->ncaches, 7); /* L3, 2 x L2, 2 x L1d, 2 x L1i */
    cr_assert_eq(node->ngpus, 0);
    cr_assert_eq(node->nnvlinks, 0);
    cr_assert_eq(node->nnics, 1);
    cr_assert_str_eq(node->nics[0].name, "eth0");
    cr_assert_str_eq(node->nics[0].busid, "0000:00:03.0");
    cr_assert_eq(node->nics[0].kind, TOPO_NIC_ETHERNET);
    cr_assert_eq(node->nics[0].numa, 0);
    cr_assert_null(node->numa_dist);
    cr_assert_eq(topo_nearest_nic_to_gpu(node, 0, &nic), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(topo_nearest_nic_to_numa(node, 0, &nic), CHORUS_OK);
    cr_assert_eq(nic, 0);
    topo_node_free(node);
}

#define SAME_ARRAY(a, b, field, n) \
    cr_assert_arr_eq((a)->field, (b)->field, (size_t)(n) * sizeof(*(a)->field), #field)

static void assert_same_map(const topo_node_t *a, const topo_node_t *b)
{
    cr_assert_str_eq(a->host, b->host);
    cr_assert_eq(a->npackages, b->npackages);
    cr_assert_eq(a->nnuma, b->nnuma);
    cr_assert_eq(a->ncores, b->ncores);
    cr_assert_eq(a->npus, b->npus);
    cr_assert_eq(a->ncaches, b->ncaches);
    cr_assert_eq(a->ngpus, b->ngpus);
    cr_assert_eq(a->nnics, b->nnics);
    cr_assert_eq(a->nnvlinks, b->nnvlinks);
    SAME_ARRAY(a, b, packages, a->npackages);
    SAME_ARRAY(a, b, numa, a->nnuma);
    SAME_ARRAY(a, b, cores, a->ncores);
    SAME_ARRAY(a, b, pus, a->npus);
    SAME_ARRAY(a, b, caches, a->ncaches);
    SAME_ARRAY(a, b, gpus, a->ngpus);
    SAME_ARRAY(a, b, nics, a->nnics);
    SAME_ARRAY(a, b, nvlinks, a->nnvlinks);
    SAME_ARRAY(a, b, gpu_nic, a->ngpus * a->nnics);
    cr_assert_eq(a->numa_dist == NULL, b->numa_dist == NULL);
    if (a->numa_dist)
        SAME_ARRAY(a, b, numa_dist, a->nnuma * a->nnuma);
}

static void round_trip(topo_node_t *node)
{
    char path[64];
    topo_node_t *back;

    temp_file(path, "", 0);
    cr_assert_eq(topo_node_dump(node, path), CHORUS_OK);
    back = load(path);
    unlink(path);
    assert_same_map(node, back);
    topo_node_free(back);
}

Test(file, dump_load_round_trip)
{
    topo_node_t *node = load(NVLINK8);

    round_trip(node);
    topo_node_free(node);
    node = load(DEVBOX);
    round_trip(node);
    topo_node_free(node);
}

/* What the map depends on must match the file; the sentinel shows node_p is left alone. */
static void load_fails(const char *text, size_t len, chorus_status_t want)
{
    topo_node_t *sentinel = (topo_node_t *)&sentinel, *node = sentinel;
    char path[64];

    temp_file(path, text, len);
    cr_assert_eq(topo_node_load(path, &node), want, "%zu bytes", len);
    cr_assert_eq(node, sentinel);
    unlink(path);
}

Test(file, bad_files)
{
    topo_node_t *node = NULL;
    FILE *f = fopen(NVLINK8, "r");
    static char xml[1 << 16];
    size_t len;

    cr_assert_eq(topo_node_load(TOPO_DATA_DIR "/no-such-file.xml", &node), CHORUS_ERR_SYSTEM);
    cr_assert_null(node);
    cr_assert_eq(topo_node_load(TOPO_DATA_DIR, &node), CHORUS_ERR_INVALID_ARG);
    cr_assert_not_null(f);
    len = fread(xml, 1, sizeof(xml), f);
    fclose(f);
    cr_assert_gt(len, 1000);
    load_fails("", 0, CHORUS_ERR_INVALID_ARG);
    load_fails("this is not xml\n", 16, CHORUS_ERR_INVALID_ARG);
    load_fails(xml, len / 2, CHORUS_ERR_INVALID_ARG);
    load_fails(xml, len - 20, CHORUS_ERR_INVALID_ARG);
}

Test(file, nvlink_info_values)
{
    char busid[TOPO_BUSID_MAX];
    int links = 0;

    cr_assert_eq(topo_file_nvlink_parse("0000:a3:00.0 4", busid, &links), 0);
    cr_assert_str_eq(busid, "0000:a3:00.0");
    cr_assert_eq(links, 4);
    cr_assert_eq(topo_file_nvlink_parse("00000000:A3:00.0 18", busid, &links), 0);
    cr_assert_str_eq(busid, "0000:a3:00.0");
    cr_assert_eq(links, 18);
    cr_assert_eq(topo_file_nvlink_parse("0000:a3:00.0", busid, &links), -1);
    cr_assert_eq(topo_file_nvlink_parse("0000:a3:00.0 0", busid, &links), -1);
    cr_assert_eq(topo_file_nvlink_parse("0000:a3:00.0 4x", busid, &links), -1);
    cr_assert_eq(topo_file_nvlink_parse("0000:a3:00.9 4", busid, &links), -1);
}

Test(file, configured_load_and_dump)
{
    topo_config_t cfg;
    topo_node_t *node, *dumped;
    char path[64];

    temp_file(path, "", 0);
    setenv("CHORUS_TOPO_FILE", NVLINK8, 1);
    setenv("CHORUS_TOPO_DUMP_FILE", path, 1);
    cr_assert_eq(chorus__config_read(&topo_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(topo_node_create(&cfg, &node), CHORUS_OK);
    cr_assert_eq(node->ngpus, 8);
    dumped = load(path);
    unlink(path);
    assert_same_map(node, dumped);
    topo_node_free(dumped);
    topo_node_free(node);
}

Test(discover, this_machine)
{
    topo_node_t *node = NULL;

    cr_assert_eq(topo_node_discover(&node), CHORUS_OK);
    cr_assert_geq(node->ncores, 1);
    cr_assert_geq(node->nnuma, 1);
    cr_assert_geq(node->npus, node->ncores);
    cr_assert_not_null(node->xml);
    round_trip(node);
    topo_node_free(node);
}

static char *print_map(const char *path)
{
    topo_node_t *node = load(path);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    cr_assert_eq(topo_node_print(node, f), CHORUS_OK);
    fclose(f);
    topo_node_free(node);
    return text;
}

#define HAS_LINE(text, line) cr_assert_not_null(strstr(text, line), "missing: %s\n%s", line, text)

Test(print, nvlink8_lines)
{
    char *text = print_map(NVLINK8);

    HAS_LINE(text, "node nvlink8: 2 packages, 2 numa nodes, 16 cores, 16 pus, 8 gpus, 4 nics\n");
    HAS_LINE(text, "\npackage 1: 8 cores, 8 pus, cpus 8-15 (Example 8-core CPU)\n"
                   "  numa 1: 512.0 GiB, cpus 8-15\n");
    HAS_LINE(text, "\ncaches: L3 32 MiB x2 (8 cores each)\n");
    HAS_LINE(text, "\n  numa1       21      10\n");
    HAS_LINE(text, "\ngpu 5: 0000:93:00.0 [10de:2330] GH100 [H100 SXM5 80GB], numa 1, "
                   "package 1, cpus 8-15, nearest nic 2 (pci-switch)\n");
    HAS_LINE(text, "\nnic 3: mlx5_3 (ib3) infiniband 0000:a4:00.0 [15b3:1021], numa 1, "
                   "package 1\n");
    HAS_LINE(text, "\n            nic0    nic1    nic2    nic3\n");
    HAS_LINE(text, "\n  gpu6       SYS     SYS      HB      SW\n");
    HAS_LINE(text, "\n  gpu3         2       2       4       X       2       2       2       2\n");
    free(text);
}

Test(print, devbox_lines)
{
    char *text = print_map(DEVBOX);

    HAS_LINE(text, "node vm: 1 package, 1 numa node, 2 cores, 2 pus, 0 gpus, 1 nic\n");
    HAS_LINE(text, "\ncaches: L3 32 MiB x1 (2 cores each), L2 1 MiB x2 (1 core each), "
                   "L1d 48 KiB x2 (1 core each), L1i 32 KiB x2 (1 core each)\n");
    HAS_LINE(text, "\ngpus: none\n");
    HAS_LINE(text, "\nnic 0: eth0 ethernet 0000:00:03.0 [1af4:1041], numa 0, package -\n");
    cr_assert_null(strstr(text, "nvlink"));
    cr_assert_null(strstr(text, "numa distances"));
    free(text);
}

/*
 * A process pinned to CPU 0 is placed from the map it is given: this
 * machine's (one NUMA node, eth0), the 8-GPU server's (CPU 0 in NUMA node 0,
 * nearest NIC ib0), or none (the CPUs only).
 */
Test(place, pinned_process_on_captured_maps)
{
    cpu_set_t one;
    char place[TOPO_PLACE_MAX];
    topo_node_t *node;

    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        cr_skip_test("cannot pin to CPU 0: %s", strerror(errno));
    node = load(DEVBOX);
    topo_place_self(node, place, sizeof(place));
    cr_assert_str_eq(place, "cpus 0, numa 0, nic eth0");
    topo_node_free(node);
    node = load(NVLINK8);
    topo_place_self(node, place, sizeof(place));
    cr_assert_str_eq(place, "cpus 0, numa 0, nic ib0");
    topo_node_free(node);
    topo_place_self(NULL, place, sizeof(place));
    cr_assert_str_eq(place, "cpus 0, numa ?, nic -");
    /* A short buffer is cut, always terminated. */
    topo_place_self(NULL, place, 8);
    cr_assert_str_eq(place, "cpus 0,");
}
