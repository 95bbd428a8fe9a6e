/* The map as text a person reads at a glance (chorus-info --topo). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "topology/topo.h"

#define PLURAL(n) ((n) == 1 ? "" : "s")

static const char *const dist_short[TOPO_DIST_COUNT] = {"SW", "HB", "PKG", "SYS"};

/* A right-aligned column heading such as "nic3". */
static void heading(FILE *out, const char *what, int i)
{
    char label[24];

    snprintf(label, sizeof(label), "%s%d", what, i);
    fprintf(out, " %7s", label);
}

/* An index, or "-" for none; buf holds at least 12 bytes. */
static const char *idx(int i, char *buf)
{
    if (i < 0)
        return "-";
    snprintf(buf, 12, "%d", i);
    return buf;
}

static void print_size(FILE *out, uint64_t bytes)
{
    if (bytes >= (1ull << 30))
        fprintf(out, "%.1f GiB", (double)bytes / (1ull << 30));
    else if (bytes >= (1ull << 20))
        fprintf(out, "%" PRIu64 " MiB", bytes >> 20);
    else
        fprintf(out, "%" PRIu64 " KiB", bytes >> 10);
}

static void print_numa(FILE *out, const topo_node_t *node, int i, const char *indent)
{
    const topo_numa_t *m = &node->numa[i];

    fprintf(out, "%snuma %d: ", indent, i);
    print_size(out, m->memory_bytes);
    fprintf(out, ", cpus %s\n", m->cpuset[0] ? m->cpuset : "none");
}

static void print_cpus(FILE *out, const topo_node_t *node)
{
    for (int p = 0; p < node->npackages; p++) {
        const topo_package_t *pk = &node->packages[p];

        fprintf(out, "package %d: %d cores, %d pus, cpus %s%s%s%s\n", p, pk->ncores, pk->npus,
                pk->cpuset, pk->model[0] ? " (" : "", pk->model, pk->model[0] ? ")" : "");
        for (int i = 0; i < node->nnuma; i++)
            if (node->numa[i].package == p)
                print_numa(out, node, i, "  ");
    }
    for (int i = 0; i < node->nnuma; i++)
        if (node->numa[i].package < 0)
            print_numa(out, node, i, "");
}

static int same_cache_kind(const topo_cache_t *a, const topo_cache_t *b)
{
    return a->level == b->level && a->type == b->type && a->size_bytes == b->size_bytes &&
           a->ncores == b->ncores;
}

/* One entry per kind of cache (level, type, size, sharing), with how many there are. */
static void print_caches(FILE *out, const topo_node_t *node)
{
    fprintf(out, "caches:");
    if (node->ncaches == 0)
        fprintf(out, " none");
    for (int i = 0; i < node->ncaches; i++) {
        const topo_cache_t *c = &node->caches[i];
        int seen = 0, count = 0;

        for (int j = 0; j < i && !seen; j++)
            seen = same_cache_kind(c, &node->caches[j]);
        if (seen)
            continue;
        for (int j = i; j < node->ncaches; j++)
            count += same_cache_kind(c, &node->caches[j]);
        fprintf(out, "%s L%d%s ", i ? "," : "", c->level,
                c->type == 'd' ? "d" : c->type == 'i' ? "i" : "");
        print_size(out, c->size_bytes);
        fprintf(out, " x%d (%d core%s each)", count, c->ncores, PLURAL(c->ncores));
    }
    fprintf(out, "\n");
}

static void print_numa_distances(FILE *out, const topo_node_t *node)
{
    if (node->numa_dist == NULL || node->nnuma < 2)
        return;
    fprintf(out, "numa distances:\n%8s", "");
    for (int b = 0; b < node->nnuma; b++)
        heading(out, "numa", b);
    for (int a = 0; a < node->nnuma; a++) {
        fprintf(out, "\n  numa%-2d", a);
        for (int b = 0; b < node->nnuma; b++)
            fprintf(out, " %7" PRIu64, node->numa_dist[a * node->nnuma + b]);
    }
    fprintf(out, "\n");
}

static void print_devices(FILE *out, const topo_node_t *node)
{
    if (node->ngpus == 0)
        fprintf(out, "gpus: none\n");
    for (int g = 0; g < node->ngpus; g++) {
        const topo_gpu_t *d = &node->gpus[g];
        int nic;

        char b1[12], b2[12];

        fprintf(out, "gpu %d: %s [%04x:%04x] %s, numa %s, package %s, cpus %s", g, d->busid,
                d->vendor_id, d->device_id, d->name[0] ? d->name : "(unnamed)",
                idx(d->numa, b1), idx(d->package, b2), d->cpuset[0] ? d->cpuset : "none");
        if (node->nnics > 0 && topo_nearest_nic_to_gpu(node, g, &nic) == CHORUS_OK)
            fprintf(out, ", nearest nic %d (%s)", nic,
                    topo_dist_name(node->gpu_nic[g * node->nnics + nic]));
        fprintf(out, "\n");
    }
    if (node->nnics == 0)
        fprintf(out, "nics: none\n");
    for (int n = 0; n < node->nnics; n++) {
        const topo_nic_t *d = &node->nics[n];
        int alias = d->netdev[0] && strcmp(d->netdev, d->name) != 0;
        char b1[12], b2[12];

        fprintf(out, "nic %d: %s%s%s%s %s %s [%04x:%04x], numa %s, package %s\n", n,
                d->name[0] ? d->name : "(unnamed)", alias ? " (" : "", alias ? d->netdev : "",
                alias ? ")" : "", d->kind == TOPO_NIC_INFINIBAND ? "infiniband" : "ethernet",
                d->busid, d->vendor_id, d->device_id, idx(d->numa, b1), idx(d->package, b2));
    }
}

static void print_gpu_nic(FILE *out, const topo_node_t *node)
{
    if (node->ngpus == 0 || node->nnics == 0)
        return;
    fprintf(out, "gpu-nic paths (SW same pci switch, HB same host bridge, PKG same package, "
                 "SYS across packages):\n%8s", "");
    for (int n = 0; n < node->nnics; n++)
        heading(out, "nic", n);
    for (int g = 0; g < node->ngpus; g++) {
        fprintf(out, "\n  gpu%-3d", g);
        for (int n = 0; n < node->nnics; n++)
            fprintf(out, " %7s", dist_short[node->gpu_nic[g * node->nnics + n]]);
    }
    fprintf(out, "\n");
}

static void print_nvlink(FILE *out, const topo_node_t *node)
{
    if (node->ngpus == 0)
        return;
    if (node->nnvlinks == 0) {
        fprintf(out, "nvlink: none\n");
        return;
    }
    fprintf(out, "nvlink (links between gpus):\n%8s", "");
    for (int b = 0; b < node->ngpus; b++)
        heading(out, "gpu", b);
    for (int a = 0; a < node->ngpus; a++) {
        fprintf(out, "\n  gpu%-3d", a);
        for (int b = 0; b < node->ngpus; b++) {
            int links = topo_nvlink_count(node, a, b);
            if (links > 0)
                fprintf(out, " %7d", links);
            else
                fprintf(out, " %7s", a == b ? "X" : "-");
        }
    }
    fprintf(out, "\n");
    for (int g = 0; g < node->ngpus; g++)
        if (node->gpus[g].nvswitch_links > 0)
            fprintf(out, "gpu %d: %d nvlinks to nvswitches\n", g, node->gpus[g].nvswitch_links);
}

chorus_status_t topo_node_print(const topo_node_t *node, FILE *out)
{
    if (node == NULL || out == NULL)
        return CHORUS_ERR_INVALID_ARG;
    fprintf(out, "node %s: %d package%s, %d numa node%s, %d core%s, %d pu%s, %d gpu%s, "
            "%d nic%s\n", node->host[0] ? node->host : "(unnamed)",
            node->npackages, PLURAL(node->npackages), node->nnuma, PLURAL(node->nnuma),
            node->ncores, PLURAL(node->ncores), node->npus, PLURAL(node->npus),
            node->ngpus, PLURAL(node->ngpus), node->nnics, PLURAL(node->nnics));
    print_cpus(out, node);
    print_caches(out, node);
    print_numa_distances(out, node);
    print_devices(out, node);
    print_gpu_nic(out, node);
    print_nvlink(out, node);
    return ferror(out) ? CHORUS_ERR_SYSTEM : CHORUS_OK;
}
