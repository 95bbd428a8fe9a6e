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
} perf_row_t;

/* Fills algbw and busbw from bytes and time_us. */
void perf_row_bandwidth(perf_row_t *row, int nranks);

void perf_print_header(FILE *f, const perf_opts_t *opts, perf_coll_t coll, int nranks,
                       int local_size, const char *nodes);
void perf_print_row(FILE *f, const perf_row_t *row);
void perf_print_footer(FILE *f, long long wrong_total, double avg_busbw, int checked);

/* JSON: begin once, one call per row, end once. */
typedef struct {
    FILE *f;
    int nrows;
} perf_json_t;

void perf_json_begin(perf_json_t *j, FILE *f, const perf_opts_t *opts, int nranks);
void perf_json_row(perf_json_t *j, const perf_row_t *row);
void perf_json_end(perf_json_t *j, long long wrong_total, double avg_busbw, int checked);

#endif
