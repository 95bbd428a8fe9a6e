/*
 * chorus-perf output: the nccl-tests style table on stdout and the same
 * results as JSON. Rank 0 calls these; nothing here calls the library.
 */
#ifndef CHORUS_PERF_REPORT_H
#define CHORUS_PERF_REPORT_H

#include <stdio.h>

#include "perf/perf_check.h"
#include "perf/perf_opts.h"

/* One row: [0] out of place, [1] in place. */
typedef struct {
    perf_coll_t coll;
    chorus_dtype_t dtype;
    int op;               /* chorus_op_t, or -1 when the collective does not reduce */
    int root;             /* -1 when it has none */
    size_t bytes, elems;
    double time_us[2];
    double algbw[2], busbw[2]; /* GB/s */
    long long wrong[2];   /* -1: not checked */
    const char *algorithm; /* what the library chose for this size; NULL: unknown */
} perf_row_t;

/* fc_weight_grad's variants, in the order every iteration runs them. */
typedef enum {
    PERF_FC_LATE = 0,      /* CHORUS_FLAG_FC_LATE */
    PERF_FC_ALLREDUCE,     /* CHORUS_FLAG_FC_ALLREDUCE */
    PERF_FC_AUTO,          /* no flag: the library's cost model chooses */
    PERF_FC_VARIANTS
} perf_fc_variant_t;

/* "late", "allreduce", "auto". */
const char *perf_fc_variant_name(perf_fc_variant_t v);

/* One fc_weight_grad row: a shape and dtype, each variant's time and check. */
typedef struct {
    chorus_dtype_t dtype;
    size_t rows, in, out;        /* rows per rank */
    double time_us[PERF_FC_VARIANTS];
    long long wrong[PERF_FC_VARIANTS]; /* -1: not checked */
    const char *chosen;          /* what auto's calls chose; NULL: unknown or not one */
} perf_fc_row_t;

/*
 * 1 when the strategy auto chose took no longer than the other one, both
 * forced; 0 when it took longer; -1 when what auto chose is not known.
 */
int perf_fc_chose_faster(const perf_fc_row_t *row);

/* What the run is, for the heading and the JSON document: set by rank 0. */
typedef struct {
    const char *version;   /* the library's, chorus_version_string() */
    const char *host;      /* rank 0's host name */
    int cores;             /* cores rank 0 may run on */
    int nranks;
    int local_size;        /* ranks on rank 0's node */
    const char *nodes;     /* "2 (ranks per node 2,2)" */
} perf_run_info_t;

/* Fills algbw and busbw from bytes and time_us. */
void perf_row_bandwidth(perf_row_t *row, int nranks);

/* The table of one collective: its heading, then one line per row. The root column is
 * there only for collectives that have a root. */
void perf_print_header(FILE *f, const perf_opts_t *opts, perf_coll_t coll,
                       const perf_run_info_t *run);
void perf_print_row(FILE *f, const perf_row_t *row);
/* A comment line in place of a size that gives no whole element per rank. */
void perf_print_skipped(FILE *f, const perf_args_t *a, size_t bytes);
/* A comment line saying that bytes, asked for, was run as a's size (whole elements). */
void perf_print_rounded(FILE *f, const perf_args_t *a, size_t bytes);
void perf_print_footer(FILE *f, long long wrong_total, double avg_busbw, int checked);

/* fc_weight_grad's table: its heading, one line per row, and the totals after them. */
void perf_print_fc_header(FILE *f, const perf_opts_t *opts, const perf_run_info_t *run);
void perf_print_fc_row(FILE *f, const perf_fc_row_t *row);
void perf_print_fc_footer(FILE *f, long long wrong_total, int faster, int shapes,
                          int checked);

/* JSON: begin once, one call per row, end once. */
typedef struct {
    FILE *f;
    int nrows;
} perf_json_t;

void perf_json_begin(perf_json_t *j, FILE *f, const perf_opts_t *opts,
                     const perf_run_info_t *run);
void perf_json_row(perf_json_t *j, const perf_row_t *row);
void perf_json_end(perf_json_t *j, long long wrong_total, double avg_busbw, int checked);
/* fc_weight_grad's rows and end, in place of perf_json_row and perf_json_end. */
void perf_json_fc_row(perf_json_t *j, const perf_fc_row_t *row);
void perf_json_fc_end(perf_json_t *j, long long wrong_total, int faster, int shapes,
                      int checked);

#endif
