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

/* JSON: begin once, one call per row, end once. */
typedef struct {
    FILE *f;
    int nrows;
} perf_json_t;

void perf_json_begin(perf_json_t *j, FILE *f, const perf_opts_t *opts,
                     const perf_run_info_t *run);
void perf_json_row(perf_json_t *j, const perf_row_t *row);
void perf_json_end(perf_json_t *j, long long wrong_total, double avg_busbw, int checked);

#endif
