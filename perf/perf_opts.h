/* chorus-perf command line. Pure code, tested without the library. */
#ifndef CHORUS_PERF_OPTS_H
#define CHORUS_PERF_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "perf/perf_size.h"

#define PERF_ALL (-1)
/* coll: the fc_weight_grad subcommand, which times shapes instead of sizes. */
#define PERF_FC_WEIGHT_GRAD (-3)

/* Most values of one --rows, --in or --out list. */
#define PERF_LIST_MAX 16

/* "4,0,1K": sizes, in the order given. */
typedef struct {
    size_t v[PERF_LIST_MAX];
    int n;
} perf_size_list_t;

typedef struct {
    int coll;              /* perf_coll_t, PERF_ALL, or PERF_FC_WEIGHT_GRAD */
    size_t minbytes, maxbytes;
    size_t factor;         /* >= 2 */
    int iters, warmup;
    int check;             /* 0 or 1 */
    int dtype;             /* chorus_dtype_t, or PERF_ALL (fc_weight_grad: the float types) */
    int op;                /* chorus_op_t, or PERF_ALL */
    int root;              /* >= 0, or PERF_ALL */
    int nranks;            /* -np: ranks to spawn; 0: run under the current launcher */
    int np_argi;           /* index of "-np" in argv, 0 when absent */
    const char *json_path; /* NULL: no JSON */
    uint32_t compress;     /* CHORUS_COMPRESS_FP16 or _BF16 (allreduce of float32), or 0 */
    int mem_cuda;          /* --mem cuda: the collectives' buffers in CUDA device memory */
    int mem_chorus;        /* --mem chorus: the collectives' buffers from chorus_mem_alloc */
    /* fc_weight_grad: every combination of rows (per rank), in and out features */
    perf_size_list_t rows, in, out;
    int help;              /* -h or --help: print the usage, nothing else */
    int version;           /* --version: print the versions, nothing else */
} perf_opts_t;

/*
 * Parses argv (argv[0] is the program). Returns 0, or -1 with a message in
 * err naming the argument and its value.
 */
int perf_opts_parse(int argc, char **argv, perf_opts_t *opts, char *err, size_t errlen);


/*
 * The message sizes of a sweep: the first is minbytes; each next one is
 * factor times the last (the one after 0 is 1), and the last is maxbytes
 * itself. Returns the size after prev, or 0 with *done_p = 1 at the end.
 */
size_t perf_next_size(const perf_opts_t *opts, size_t prev, int *done_p);

/*
 * A copy of argv without the "-np N" that opts was parsed from, for running
 * this program again under the launcher. NULL-terminated; free() the array
 * (the strings are argv's).
 */
char **perf_opts_strip_np(int argc, char **argv, const perf_opts_t *opts);

/* The usage text. */
extern const char perf_usage_text[];

#endif
