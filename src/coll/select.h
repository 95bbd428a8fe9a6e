/*
 * The selection table: for each collective and memory type, ordered byte
 * ranges [lo, hi) that cover [0, infinity) without gap or overlap, each
 * naming the algorithm to run. The algorithms' own prices (coll_alg_price)
 * fill it; user overrides (CHORUS_TUNE) then replace the prices' choice
 * within the ranges they name. chorus-info prints the table with every
 * candidate's estimate, so a user can see why a range got its algorithm.
 */
#ifndef CHORUS_COLL_SELECT_H
#define CHORUS_COLL_SELECT_H

#include <stdint.h>
#include <stdio.h>

#include "coll/coll.h"
#include "coll/fc.h"

/* Upper bound of the last range of every collective. */
#define COLL_SIZE_INF SIZE_MAX

/* Most algorithms of any one collective (builders and team variants). */
#define COLL_CANDIDATES_MAX 16

typedef struct {
    size_t lo;
    size_t hi;                  /* exclusive; COLL_SIZE_INF for no bound */
    const coll_alg_t *alg;      /* NULL: no algorithm runs such calls */
    int user;                   /* 1 when a user override chose alg */
    int used;                   /* a call took it (coll_select_call); atomic builtins only */
    double est[COLL_CANDIDATES_MAX];    /* seconds per candidate at lo */
} coll_range_t;

typedef struct {
    coll_range_t *ranges;       /* ascending, ranges[0].lo == 0 */
    size_t count;
} coll_ranges_t;

/* Read-only for users; change it with the functions below. */
typedef struct {
    coll_env_t env;             /* where the prices were taken; model points at model */
    tune_model_t model;
    /* The candidates of each collective, in registry order (coll_alg_list). */
    const coll_alg_t *cands[COLL_TYPE_COUNT][COLL_CANDIDATES_MAX];
    int ncands[COLL_TYPE_COUNT];
    coll_ranges_t colls[COLL_TYPE_COUNT][COLL_MEM_TYPE_COUNT];
    coll_fc_strategy_t fc;      /* chorus_fc_weight_grad's strategy: CHORUS_TUNE's, else auto */
    int fc_blocks;              /* its row blocks (CHORUS_FC_BLOCKS); 0: the model's */
} coll_select_t;

/*
 * The prices' table for env: every candidate is priced on a geometric grid
 * of sizes from 0 to 1 TiB and adjacent grid points with the same winner
 * are merged; the last winner extends to infinity. The first candidate
 * keeps a point unless another is cheaper by more than 5%; a point where
 * every candidate is priced INFINITY has no algorithm. env's layout and team
 * context must outlive the table; its node team is not kept.
 */
chorus_status_t coll_select_build(const coll_env_t *env, coll_select_t **sel_p);
void coll_select_destroy(coll_select_t *sel);

/*
 * Apply overrides to the host memory tables: comma-separated items
 * "coll=alg" or "coll=alg@lo-hi", covering [lo, hi) bytes (coll_args_bytes;
 * K, M, G suffixes; an empty hi means no bound), e.g.
 * "allreduce=rd@0-64K,broadcast=chain"; and "fc_weight_grad=late|allreduce|auto"
 * (no range), chorus_fc_weight_grad's strategy. Later items win over earlier ones
 * where they overlap. Every item is checked before any is applied: a bad
 * one is logged with its text and returns CHORUS_ERR_INVALID_ARG, leaving
 * the table as it was. NULL or "" changes nothing.
 */
chorus_status_t coll_select_override(coll_select_t *sel, const char *overrides);

/*
 * Whether every algorithm the overrides chose can run in the table's env:
 * a team variant only where its transport prices it (a schedule builder runs
 * on any layout). Logs the first that cannot and returns CHORUS_ERR_INVALID_ARG.
 */
chorus_status_t coll_select_check(const coll_select_t *sel);

/* coll_select_build, then the overrides, then coll_select_check, in one call. */
chorus_status_t coll_select_create(const coll_env_t *env, const char *overrides,
                                   coll_select_t **sel_p);

/* The algorithm for a call of coll on mem with bytes (coll_args_bytes); NULL: none. */
const coll_alg_t *coll_select_lookup(const coll_select_t *sel, coll_type_t coll,
                                     coll_mem_t mem, size_t bytes);

/*
 * coll_select_lookup for a call of rank, logging at info level the first
 * call of each range: the collective, the range, the algorithm and who chose
 * it (the model or CHORUS_TUNE). Later calls of the range log nothing.
 */
const coll_alg_t *coll_select_call(coll_select_t *sel, coll_type_t coll, coll_mem_t mem,
                                   size_t bytes, int rank);

/*
 * A heading (the model, the node team), then one line per range:
 * collective, range, algorithm, who chose it, every finite estimate.
 * Memory types other than host follow under a heading of their own, or in
 * one line when no algorithm serves them.
 */
void coll_select_print(FILE *out, const coll_select_t *sel);

#endif
