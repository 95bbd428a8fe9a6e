/*
 * Selection tables: for each collective, ordered byte ranges [lo, hi) that
 * cover [0, infinity) without gap or overlap, each naming the algorithm to
 * run. The cost model fills them; user overrides (CHORUS_TUNE) then replace
 * the model's choice within the ranges they name. chorus-info prints the
 * table with the model's estimates, so a user can see why a range got its
 * algorithm.
 */
#ifndef CHORUS_TUNING_SELECT_H
#define CHORUS_TUNING_SELECT_H

#include <stdint.h>
#include <stdio.h>
#include "chorus.h"
#include "topology/layout.h"
#include "tuning/cost_model.h"
#include "util/config.h"

/* Upper bound of the last range of every collective. */
#define TUNE_SIZE_INF SIZE_MAX

typedef struct {
    size_t lo;
    size_t hi;                  /* exclusive; TUNE_SIZE_INF for no bound */
    const char *alg;            /* a static name from tune_coll_alg() */
    int user;                   /* 1 when a user override chose alg */
    double est[TUNE_ALGS_MAX];  /* model's seconds per candidate at lo */
} tune_range_t;

typedef struct {
    tune_range_t *ranges;       /* ascending, ranges[0].lo == 0 */
    size_t count;
} tune_ranges_t;

/* Read-only for users; change it with the functions below. */
typedef struct {
    tune_model_t model;
    int nranks;
    tune_ranges_t colls[TUNE_COLL_COUNT];
} tune_table_t;

/*
 * The model's table for p ranks: every candidate is evaluated on a
 * geometric grid of sizes from 0 to 1 TiB and adjacent grid points with
 * the same winner are merged; the last winner extends to infinity.
 */
chorus_status_t tune_table_build(const tune_model_t *model, int p, tune_table_t **table_p);
void tune_table_destroy(tune_table_t *table);

/*
 * Apply overrides: comma-separated items "coll=alg" or "coll=alg@lo-hi",
 * covering [lo, hi) bytes (sizes as in tune_cost(); K, M, G suffixes; an
 * empty hi means no bound), e.g. "allreduce=rd@0-64K,broadcast=chain".
 * Later items win over earlier ones where they overlap. Every item is
 * checked before any is applied: a bad one is logged with its text and
 * returns CHORUS_ERR_INVALID_ARG, leaving the table as it was. NULL or ""
 * changes nothing.
 */
chorus_status_t tune_table_override(tune_table_t *table, const char *overrides);

/* The algorithm for a call of coll with bytes (as in tune_cost()); NULL if coll is invalid. */
const char *tune_table_lookup(const tune_table_t *table, tune_coll_t coll, size_t bytes);

/* One line per range: collective, range, algorithm, who chose it, estimates. */
void tune_table_print(FILE *out, const tune_table_t *table);

/* ---- configuration ----------------------------------------------------- */

typedef struct {
    chorus__config_str_t tune;  /* CHORUS_TUNE */
    double alpha_us;            /* CHORUS_TUNE_ALPHA_US */
    double bandwidth_gbs;       /* CHORUS_TUNE_BANDWIDTH_GBS */
    double reduce_gbs;          /* CHORUS_TUNE_REDUCE_GBS */
    double net_alpha_us;        /* CHORUS_TUNE_NET_ALPHA_US */
    double net_bandwidth_gbs;   /* CHORUS_TUNE_NET_BANDWIDTH_GBS */
} tune_config_t;

extern const chorus__config_table_t tune_config_table;

/* The model from config; chunk_bytes 0 keeps the default chunk. */
chorus_status_t tune_model_from_config(const tune_config_t *config, size_t chunk_bytes,
                                       tune_model_t *model_p);

/* tune_model_from_config, tune_table_build and the config's overrides in one call. */
chorus_status_t tune_table_create(const tune_config_t *config, int p, size_t chunk_bytes,
                                  tune_table_t **table_p);

/* Where every rank shares one node: the node-local candidates join the table. */
typedef struct {
    int cma;                    /* single copy works between every pair of ranks */
    size_t slot_bytes;          /* staging round (CHORUS_SHM_SLOT_SIZE) */
    int cores;                  /* cores the ranks run on (tune_usable_cores); 0: enough */
} tune_node_t;

/* The cores this process may run on (its affinity mask), at least 1. */
int tune_usable_cores(void);

/* tune_table_create for ranks on one node (node NULL: on several). */
chorus_status_t tune_table_create_node(const tune_config_t *config, int p, size_t chunk_bytes,
                                       const tune_node_t *node, tune_table_t **table_p);

/* Where the ranks span nodes: the shape of the job's layout (topology/layout.h). */
typedef struct {
    int nnodes;
    int local_min;              /* ranks on the emptiest node */
    int local_max;              /* ranks on the fullest node */
    int ring_crossings;         /* most ring edges leaving one node */
} tune_spread_t;

/* The shape of a job's layout. */
void tune_spread_of(const topo_layout_t *layout, tune_spread_t *spread);

/* tune_table_create_node, and when spread says so, priced for several nodes. */
chorus_status_t tune_table_create_job(const tune_config_t *config, int p, size_t chunk_bytes,
                                      const tune_node_t *node, const tune_spread_t *spread,
                                      tune_table_t **table_p);

#endif
