/*
 * chorus-info: what this build of chorus contains and how it is configured.
 *   chorus-info              version, what the build uses and what it only detected,
 *                            transports, kernel ISA
 *   chorus-info -c           every configuration variable: value, default, help
 *   chorus-info --tune [-n N] [--nodes one|many|LIST] [--cores N] the algorithm selection table
 *   chorus-info --estimate COLL:SIZES [...]  the algorithm chosen and its estimate per size
 *   chorus-info --topo [FILE] this node's map (or the one in FILE or CHORUS_TOPO_FILE)
 *   chorus-info --man-config the variables as roff, for chorus(7)
 *   chorus-info --version    the tool's and the library's version
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "coll/select.h"
#include "config.h"
#include "core/core_config.h"
#include "reduce/device.h"
#include "reduce/reduce.h"
#include "tools/tool_version.h"
#include "topology/layout.h"
#include "topology/topo.h"
#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "tuning/tune_config.h"
#include "util/log.h"

static void usage(FILE *out)
{
    fputs("usage: chorus-info [-c | --config] [--tune [-n RANKS] [--nodes one|many|LIST] "
          "[--cores N]]\n"
          "                   [--estimate COLL:SIZE[,SIZE...] [-n RANKS] [--nodes ...] "
          "[--cores N]]\n"
          "                   [--topo [FILE]] [--man-config] [-h | --help] [--version]\n"
          "  (no option)   version, what the build uses and what configure only detected,\n"
          "                transports, kernel ISA\n"
          "  -c, --config  every configuration variable with its value, default and help\n"
          "  --tune        the algorithm selection table (cost-model estimates) for RANKS ranks\n"
          "                (default: CHORUS_SIZE, else 4) on one node (shared memory, the\n"
          "                default), one rank on each of many nodes (--nodes many), or\n"
          "                LIST ranks per node, e.g. --nodes 2,2 (RANKS is then their sum)\n"
          "  --cores N     with --tune or --estimate: price as if each node had N cores\n"
          "                (default: the cores this process may run on)\n"
          "  --estimate COLL:SIZE[,SIZE...]\n"
          "                what --tune's table gives a call of COLL (allreduce, allgather,\n"
          "                broadcast, reduce_scatter, reduce, alltoall, barrier) of each\n"
          "                SIZE bytes (K, M, G suffixes; the whole vector, as chorus-perf\n"
          "                counts it): one line 'COLL BYTES ALGORITHM SECONDS' per size;\n"
          "                may be given up to 16 times\n"
          "  --topo [FILE] this node's packages, caches, GPUs, NICs, their distances and\n"
          "                NVLinks; from FILE (hwloc XML) or CHORUS_TOPO_FILE when given\n"
          "  --man-config  the variables as roff source, for chorus(7)\n"
          "  -h, --help    print this help\n"
          "  --version     print the version of chorus-info and of the library\n", out);
}

static void print_summary(void)
{
    printf("chorus %s (header %d.%d.%d)\n", chorus_version_string(), CHORUS_VERSION_MAJOR,
           CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    /* Only what the library uses; what configure found but no code uses yet is kept apart. */
    printf("built with:%s\n", CHORUS_BUILD_FEATURES[0] ? CHORUS_BUILD_FEATURES : " (none)");
#ifdef CHORUS_BUILD_MPI_HEADER
    printf("mpi: chorus_mpi.h installed (header only; the library links no MPI)\n");
#endif
    printf("detected, not used by this version:%s\n",
           CHORUS_BUILD_DETECTED[0] ? CHORUS_BUILD_DETECTED : " (none)");
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
    if (chorus__device_built())
        printf("cuda: %s\n", chorus__device_present()
                                 ? "a device is visible; device buffers are staged through "
                                   "page-locked host memory"
                                 : "built in; this process sees no device");
    printf("dtypes:");
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)
        printf(" %s", chorus_dtype_name((chorus_dtype_t)d));
    printf("\nops:");
    for (int o = 0; o < CHORUS_OP_COUNT; o++)
        printf(" %s", chorus_op_name((chorus_op_t)o));
    printf("\n");
}

/*
 * The layout --tune prices: LIST's nodes (printed unless quiet), one node of
 * ranks, or none for one rank on each of many nodes (*layout_p NULL; the
 * model then has one link between every pair). Returns 0, or the exit status.
 */
static int tune_layout(const char *list, int node_local, int quiet, int *ranks,
                       topo_layout_t **layout_p)
{
    char shape[256];
    int *node_of;
    chorus_status_t status;

    *layout_p = NULL;
    if (list == NULL && !node_local)
        return 0;
    if (list == NULL) {
        node_of = calloc((size_t)*ranks, sizeof(*node_of));
        status = node_of != NULL ? topo_layout_from_nodes(node_of, *ranks, layout_p)
                                 : CHORUS_ERR_NO_MEMORY;
        free(node_of);
        return status == CHORUS_OK ? 0 : 1;
    }
    if (topo_layout_parse(list, layout_p) != CHORUS_OK)
        return 2;
    *ranks = (*layout_p)->size;
    if (quiet)
        return 0;
    topo_layout_shape(*layout_p, shape, sizeof(shape));
    printf("# %d ranks on %d nodes (ranks per node %s), consecutive ranks sharing a node\n",
           *ranks, (*layout_p)->nnodes, shape);
    topo_layout_print(stdout, *layout_p, NULL, "#   ");
    return 0;
}

/*
 * A node team as a communicator on one node would have it: the first
 * collective transport that is on, with every capability its variants need
 * assumed to work (a communicator checks them when it is created). *ctx_p
 * is its context (to destroy), or NULL where none is on. Fails when a
 * transport's variable does not parse (the message names it).
 */
static chorus_status_t tune_team(coll_env_t *env, int size, tl_coll_ctx_t **ctx_p)
{
    tl_coll_ctx_params_t params = {.rank = 0, .size = size};

    *ctx_p = NULL;
    for (int i = 0; tl_coll_all[i] != NULL; i++) {
        const tl_coll_ops_t *ops = tl_coll_all[i];
        uint32_t flags = TL_TEAM_OK;
        chorus_status_t status = ops->ctx_create(&params, ctx_p);

        if (status != CHORUS_OK)
            return status;
        if (*ctx_p == NULL)
            continue;
        for (int v = 0; v < ops->nvariants; v++)
            flags |= ops->variants[v].needs;
        env->team_ops = ops;
        env->team_ctx = *ctx_p;
        env->team_desc = (tl_team_desc_t){.size = size, .cores = env->cores, .flags = flags};
        return CHORUS_OK;
    }
    return CHORUS_OK;
}

/* At most this many --estimate options in one run, and sizes in one option. */
#define ESTIMATES_MAX 16
#define ESTIMATE_SIZES_MAX 64

/* One --estimate: a collective and the sizes to price it at. */
typedef struct {
    coll_type_t coll;
    size_t nsizes;
    size_t sizes[ESTIMATE_SIZES_MAX];
} estimate_t;

/*
 * For each size: the algorithm the table runs a call of that size with, and
 * that algorithm's estimate at exactly that size.
 */
static void print_estimates(const coll_select_t *sel, const coll_env_t *env,
                            const estimate_t *est, int nest)
{
    for (int e = 0; e < nest; e++) {
        for (size_t i = 0; i < est[e].nsizes; i++) {
            size_t bytes = est[e].sizes[i];
            const coll_alg_t *alg = coll_select_lookup(sel, est[e].coll, COLL_MEM_HOST, bytes);

            if (alg == NULL) {
                printf("%s %zu none inf\n", coll_type_name(est[e].coll), bytes);
                continue;
            }
            printf("%s %zu %s %.9g\n", coll_type_name(est[e].coll), bytes, alg->name,
                   coll_alg_price(alg, env, bytes));
        }
    }
}

/* cores: what a node's ranks run on; 0: this process's usable cores. */
static int print_tune(int ranks, int node_local, const char *list, int cores,
                      const estimate_t *est, int nest)
{
    chorus__core_config_t core;
    tune_config_t tcfg;
    tune_model_t model;
    topo_layout_t *layout;
    tl_coll_ctx_t *team_ctx = NULL;
    coll_select_t *sel;
    coll_env_t env;
    int rc;

    if (chorus__config_read(&chorus__core_config_table, &core) != CHORUS_OK ||
        chorus__config_read(&tune_config_table, &tcfg) != CHORUS_OK ||
        tune_model_from_config(&tcfg, core.chunk_bytes, &model) != CHORUS_OK)
        return 1;
    rc = tune_layout(list, node_local, nest > 0, &ranks, &layout);
    if (rc != 0)
        return rc;
    env = (coll_env_t){.nranks = ranks, .layout = layout, .model = &model,
                       .cores = cores > 0 ? cores : tune_usable_cores(), .mem = COLL_MEM_HOST};
    /*
     * As a communicator sees it: a node team wherever a node holds several ranks; it runs
     * whole calls on one node and the hierarchical algorithms' node-local stages on several.
     */
    rc = layout != NULL && layout->local_max > 1 &&
         tune_team(&env, layout->local_max, &team_ctx) != CHORUS_OK;
    if (rc == 0)
        rc = coll_select_create(&env, tcfg.tune.s, &sel) == CHORUS_OK ? 0 : 1;
    if (rc == 0) {
        if (nest > 0)
            print_estimates(sel, &env, est, nest);
        else
            coll_select_print(stdout, sel);
        coll_select_destroy(sel);
    }
    if (team_ctx != NULL)
        env.team_ops->ctx_destroy(team_ctx);
    topo_layout_free(layout);
    return rc;
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

typedef enum {
    INFO_SUMMARY,
    INFO_CONFIG,
    INFO_MAN_CONFIG,
    INFO_TUNE,
    INFO_ESTIMATE,
    INFO_TOPO,
    INFO_HELP,
    INFO_VERSION,
} info_mode_t;

typedef struct {
    info_mode_t mode;
    int ranks;             /* --tune -n; 0: CHORUS_SIZE, else 4 */
    int node_local;        /* --tune: every rank on one node */
    const char *list;      /* --tune --nodes LIST, or NULL */
    int cores;             /* --tune --cores; 0: this process's usable cores */
    estimate_t est[ESTIMATES_MAX];  /* --estimate */
    int nest;
    const char *topo_file; /* --topo FILE, or NULL */
} info_opts_t;

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "chorus-info: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

/* One mode per run: a second one is an error rather than silently ignored. */
static int set_mode(info_opts_t *o, info_mode_t mode, const char *arg)
{
    if (o->mode != INFO_SUMMARY && o->mode != mode)
        return bad_usage("option '%s' cannot be combined with the one before it", arg);
    o->mode = mode;
    return 0;
}

static int parse_ranks(const char *text, int *ranks_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1 || v > 1 << 20)
        return -1;
    *ranks_p = (int)v;
    return 0;
}

/* "allreduce:4,1M" into e; -1 when a part is not a collective or a size. */
static int parse_estimate(const char *text, estimate_t *e)
{
    char buf[1024], *sizes, *save = NULL;

    if (strlen(text) >= sizeof(buf))
        return -1;
    strcpy(buf, text);
    sizes = strchr(buf, ':');
    if (sizes == NULL)
        return -1;
    *sizes++ = '\0';
    e->coll = coll_type_from_name(buf);
    e->nsizes = 0;
    if (e->coll == COLL_TYPE_COUNT)
        return -1;
    for (char *tok = strtok_r(sizes, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (e->nsizes == ESTIMATE_SIZES_MAX ||
            chorus__config_parse_size(tok, &e->sizes[e->nsizes]) != CHORUS_OK)
            return -1;
        e->nsizes++;
    }
    return e->nsizes > 0 ? 0 : -1;
}

/* Reads argv into o; returns 0, or the exit status after printing why. */
static int parse_args(int argc, char **argv, info_opts_t *o)
{
    *o = (info_opts_t){.mode = INFO_SUMMARY, .node_local = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;

        if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            rc = set_mode(o, INFO_CONFIG, a);
        } else if (!strcmp(a, "--man-config")) {
            rc = set_mode(o, INFO_MAN_CONFIG, a);
        } else if (!strcmp(a, "--topo")) {
            rc = set_mode(o, INFO_TOPO, a);
            if (rc == 0 && i + 1 < argc && argv[i + 1][0] != '-')
                o->topo_file = argv[++i];
        } else if (!strcmp(a, "--tune")) {
            rc = set_mode(o, INFO_TUNE, a);
        } else if (!strcmp(a, "--estimate")) {
            rc = set_mode(o, INFO_ESTIMATE, a);
            if (rc == 0 && i + 1 >= argc)
                return bad_usage("option %s needs a value", a);
            if (rc == 0 && o->nest == ESTIMATES_MAX)
                return bad_usage("at most 16 options %s", a);
            if (rc == 0 && parse_estimate(argv[++i], &o->est[o->nest++]) != 0)
                return bad_usage("--estimate takes COLL:SIZE[,SIZE...] (at most 64 sizes), "
                                 "e.g. allreduce:8,64K,16M, not '%s'", argv[i]);
        } else if (!strcmp(a, "--cores")) {
            if (i + 1 >= argc)
                return bad_usage("option %s needs a value", a);
            if (parse_ranks(argv[++i], &o->cores) != 0)
                return bad_usage("invalid core count '%s' for --cores: expected an integer "
                                 ">= 1", argv[i]);
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            rc = set_mode(o, INFO_HELP, a);
        } else if (!strcmp(a, "--version")) {
            rc = set_mode(o, INFO_VERSION, a);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--nodes")) {
            if (i + 1 >= argc)
                return bad_usage("option %s needs a value", a);
            i++;
            if (!strcmp(a, "-n") && parse_ranks(argv[i], &o->ranks) != 0)
                return bad_usage("invalid rank count '%s' for -n: expected an integer >= 1",
                                 argv[i]);
            if (!strcmp(a, "--nodes")) {
                o->node_local = !strcmp(argv[i], "one");
                if (!o->node_local && strcmp(argv[i], "many") != 0) {
                    if (argv[i][0] == '\0' ||
                        strspn(argv[i], "0123456789,") != strlen(argv[i]))
                        return bad_usage("--nodes takes 'one', 'many' or ranks per node "
                                         "such as 2,2, not '%s'", argv[i]);
                    o->list = argv[i];
                }
            }
        } else {
            return bad_usage("unknown option '%s'", a);
        }
        if (rc != 0)
            return rc;
    }
    if (o->mode != INFO_TUNE && o->mode != INFO_ESTIMATE &&
        (o->ranks != 0 || !o->node_local || o->cores != 0))
        return bad_usage("%s", "-n, --nodes and --cores go with --tune or --estimate");
    return 0;
}

int main(int argc, char **argv)
{
    const chorus__config_table_t *tables[CHORUS__CONFIG_TABLES_MAX];
    info_opts_t o;
    int rc;

    chorus__log_init();
    rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    switch (o.mode) {
    case INFO_CONFIG:
    case INFO_MAN_CONFIG:
        chorus__config_tables(tables, CHORUS__CONFIG_TABLES_MAX);
        chorus__config_print(stdout, tables, o.mode == INFO_MAN_CONFIG);
        return 0;
    case INFO_TOPO:
        return print_topo(o.topo_file);
    case INFO_TUNE:
    case INFO_ESTIMATE:
        if (o.ranks == 0) {
            const char *size = getenv("CHORUS_SIZE");
            o.ranks = size && atoi(size) > 0 ? atoi(size) : 4;
        }
        return print_tune(o.ranks, o.node_local, o.list, o.cores, o.est, o.nest);
    case INFO_HELP:
        usage(stdout);
        return 0;
    case INFO_VERSION:
        tool_version_print(stdout, "chorus-info", chorus_version_string());
        return 0;
    default:
        print_summary();
        return 0;
    }
}
