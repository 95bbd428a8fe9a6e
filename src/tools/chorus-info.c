/*
 * chorus-info: what this build of chorus contains and how it is configured.
 *   chorus-info              version, features, transports, kernel ISA
 *   chorus-info -c           every configuration variable: value, default, help
 *   chorus-info --tune [-n N] [--nodes one|many|LIST] the algorithm selection table
 *   chorus-info --topo [FILE] this node's map (or the one in FILE or CHORUS_TOPO_FILE)
 *   chorus-info --man-config the variables as roff, for chorus(7)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "config.h"
#include "core/core_config.h"
#include "reduce/reduce.h"
#include "topology/layout.h"
#include "topology/topo.h"
#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "transports/shm/shm.h"
#include "tuning/select.h"
#include "util/log.h"

static void usage(FILE *out)
{
    fputs("usage: chorus-info [-c | --config] [--tune [-n RANKS] [--nodes one|many|LIST]] "
          "[--topo [FILE]] [--man-config] [-h]\n"
          "  (no option)   version, built-in features, transports, kernel ISA\n"
          "  -c, --config  every configuration variable with its value, default and help\n"
          "  --tune        the algorithm selection table (cost-model estimates) for RANKS ranks\n"
          "                (default: CHORUS_SIZE, else 4) on one node (shared memory, the\n"
          "                default), one rank on each of many nodes (--nodes many), or\n"
          "                LIST ranks per node, e.g. --nodes 2,2 (RANKS is then their sum)\n"
          "  --topo [FILE] this node's packages, caches, GPUs, NICs, their distances and\n"
          "                NVLinks; from FILE (hwloc XML) or CHORUS_TOPO_FILE when given\n"
          "  --man-config  the variables as roff source, for chorus(7)\n", out);
}

static void print_summary(void)
{
    printf("chorus %s (header %d.%d.%d)\n", chorus_version_string(), CHORUS_VERSION_MAJOR,
           CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    printf("features:%s\n", CHORUS_BUILD_FEATURES[0] ? CHORUS_BUILD_FEATURES : " (none)");
    printf("transports:");
    for (int i = 0; tl_p2p_all[i] != NULL; i++) {
        tl_caps_t caps;

        tl_p2p_all[i]->query(&caps);
        printf("%s %s (point to point, host memory, %s)", i ? "," : "", tl_p2p_all[i]->name,
               caps.reach_network ? "network and node" : "node");
    }
    for (int i = 0; tl_coll_all[i] != NULL; i++)
        printf(", %s (collectives of ranks on one node)", tl_coll_all[i]->name);
    printf("\n");
    printf("reduction kernels: %s\n", chorus__reduce_isa());
    printf("dtypes:");
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)
        printf(" %s", chorus_dtype_name((chorus_dtype_t)d));
    printf("\nops:");
    for (int o = 0; o < CHORUS_OP_COUNT; o++)
        printf(" %s", chorus_op_name((chorus_op_t)o));
    printf("\n");
}

/* The job's nodes as a LIST gives them: the layout printed, and its shape for the model. */
static int tune_layout(const char *list, int *ranks, tune_spread_t *spread)
{
    topo_layout_t *l;
    char shape[256];

    if (topo_layout_parse(list, &l) != CHORUS_OK)
        return 1;
    *ranks = l->size;
    tune_spread_of(l, spread);
    topo_layout_shape(l, shape, sizeof(shape));
    printf("# %d ranks on %d nodes (ranks per node %s), consecutive ranks sharing a node\n",
           l->size, l->nnodes, shape);
    topo_layout_print(stdout, l, NULL, "#   ");
    topo_layout_free(l);
    return 0;
}

static int print_tune(int ranks, int node_local, const char *list)
{
    chorus__core_config_t core;
    tune_config_t tcfg;
    shm_config_t scfg;
    tune_node_t node;
    tune_spread_t spread = {0};
    tune_table_t *table;

    if (chorus__config_read(&chorus__core_config_table, &core) != CHORUS_OK ||
        chorus__config_read(&tune_config_table, &tcfg) != CHORUS_OK ||
        chorus__config_read(&shm_config_table, &scfg) != CHORUS_OK)
        return 1;
    /* As a communicator whose ranks share this node sees it when single copy works. */
    node.cma = scfg.cma;
    node.slot_bytes = scfg.slot_bytes;
    node.cores = tune_usable_cores();
    if (list != NULL && tune_layout(list, &ranks, &spread) != 0)
        return 2;
    if (spread.nnodes == 1)
        node_local = 1;
    if (tune_table_create_job(&tcfg, ranks, core.chunk_bytes,
                              node_local && scfg.enabled ? &node : NULL, &spread,
                              &table) != CHORUS_OK)
        return 1;
    tune_table_print(stdout, table);
    tune_table_destroy(table);
    return 0;
}

/* file: a topology file named on the command line, else NULL for the configured map. */
static int print_topo(const char *file)
{
    topo_config_t cfg;
    topo_node_t *node;
    chorus_status_t st;

    if (chorus__config_read(&topo_config_table, &cfg) != CHORUS_OK)
        return 1;
    if (file)
        snprintf(cfg.file.s, sizeof(cfg.file.s), "%s", file);
    st = topo_node_create(&cfg, &node);
    if (st != CHORUS_OK) {
        fprintf(stderr, "chorus-info: no topology: %s\n", chorus_status_string(st));
        return 1;
    }
    st = topo_node_print(node, stdout);
    if (st == CHORUS_OK && file == NULL && cfg.file.s[0] == '\0') {
        char place[TOPO_PLACE_MAX];
        topo_place_self(node, place, sizeof(place));
        printf("this process: %s\n", place);
    }
    topo_node_free(node);
    return st == CHORUS_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    int ranks = 0, tune = 0, node_local = 1;
    const char *list = NULL;

    chorus__log_init();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config") ||
            !strcmp(argv[i], "--man-config")) {
            const chorus__config_table_t *tables[CHORUS__CONFIG_TABLES_MAX];

            chorus__config_tables(tables, CHORUS__CONFIG_TABLES_MAX);
            chorus__config_print(stdout, tables, !strcmp(argv[i], "--man-config"));
            return 0;
        } else if (!strcmp(argv[i], "--topo")) {
            return print_topo(i + 1 < argc && argv[i + 1][0] != '-' ? argv[i + 1] : NULL);
        } else if (!strcmp(argv[i], "--tune")) {
            tune = 1;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            ranks = atoi(argv[++i]);
            if (ranks < 1) {
                fprintf(stderr, "chorus-info: invalid rank count '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--nodes") && i + 1 < argc) {
            node_local = !strcmp(argv[++i], "one");
            if (!node_local && strcmp(argv[i], "many") != 0) {
                if (strspn(argv[i], "0123456789,") != strlen(argv[i])) {
                    fprintf(stderr, "chorus-info: --nodes takes 'one', 'many' or ranks per "
                            "node such as 2,2, not '%s'\n", argv[i]);
                    return 2;
                }
                list = argv[i];
                node_local = 0;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "chorus-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (tune) {
        const char *size = getenv("CHORUS_SIZE");
        if (ranks == 0)
            ranks = size && atoi(size) > 0 ? atoi(size) : 4;
        return print_tune(ranks, node_local, list);
    }
    print_summary();
    return 0;
}
