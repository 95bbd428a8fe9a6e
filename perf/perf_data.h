/*
 * chorus-perf data: element types as the tool knows them, exact conversions
 * for float16 and bfloat16, and the values each rank contributes when
 * results are checked.
 *
 * The values are small integers chosen so that the exact result of every
 * collective is known whatever order a reduction uses: every partial result
 * is an integer that the dtype represents exactly (or, for integer dtypes,
 * wraps the same way in any order). The expected value of an element is
 * computed from the same formulas, never from another rank's data.
 *
 * fc_weight_grad's inputs are multiples of 1/8 instead (perf_fc_fill): its
 * products and every partial sum of them are multiples of 1/64 that float32
 * holds exactly, so the gradient is exact in any order of summation too.
 *
 * Nothing here calls the library, so it is tested without it.
 */
#ifndef CHORUS_PERF_DATA_H
#define CHORUS_PERF_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef struct {
    const char *name;     /* as printed and parsed: "float32" */
    size_t size;          /* bytes per element */
    int is_float;
    int is_unsigned;
} perf_dtype_info_t;

/* Info for a dtype, or NULL when out of range. */
const perf_dtype_info_t *perf_dtype_info(chorus_dtype_t dtype);
/* "sum", "prod", ...; "none" for an op out of range. */
const char *perf_op_name(chorus_op_t op);
/* Name or alias ("float", "half", "bf16") to dtype; -1 when unknown. */
int perf_dtype_parse(const char *text);
/* "sum", "prod", "min", "max", "avg"; -1 when unknown. */
int perf_op_parse(const char *text);

/* IEEE binary16 and bfloat16 from/to float, rounding to nearest even. */
uint16_t perf_float_to_half(float f);
float perf_half_to_float(uint16_t h);
uint16_t perf_float_to_bf16(float f);
float perf_bf16_to_float(uint16_t b);

/* Writes v into element idx of buf as dtype (integers wrap like a C cast). */
void perf_store(chorus_dtype_t dtype, void *buf, size_t idx, int64_t v);
/*
 * Writes v into element idx of buf as a floating-point dtype, rounding to
 * nearest even (through float for float16 and bfloat16: exact for the values
 * float holds). Does nothing for integer dtypes.
 */
void perf_store_real(chorus_dtype_t dtype, void *buf, size_t idx, double v);
/* Reads element idx of buf as a double (exact for the values we use). */
double perf_load(chorus_dtype_t dtype, const void *buf, size_t idx);
/* v as dtype stores it, read back: applies integer wrap-around. */
double perf_as_dtype(chorus_dtype_t dtype, int64_t v);
/* v as perf_store_real stores it in a floating-point dtype, read back: rounded. */
double perf_real_as_dtype(chorus_dtype_t dtype, double v);

/*
 * What rank contributes at element idx of its send buffer to a reducing
 * collective with op, among nranks ranks.
 */
int64_t perf_reduce_value(chorus_dtype_t dtype, chorus_op_t op, int rank, int nranks,
                          size_t idx);
/* The exact reduction over all ranks of perf_reduce_value(..., idx). */
double perf_reduce_expected(chorus_dtype_t dtype, chorus_op_t op, int nranks, size_t idx);
/* What rank holds at element idx of its send buffer for data movement. */
int64_t perf_copy_value(chorus_dtype_t dtype, int rank, size_t idx);

/*
 * The values are periodic in idx: perf_reduce_value(..., idx) equals
 * perf_reduce_value(..., idx + perf_reduce_period(op, nranks)), and
 * perf_copy_value repeats every PERF_COPY_PERIOD elements.
 */
size_t perf_reduce_period(chorus_op_t op, int nranks);
#define PERF_COPY_PERIOD 97

/*
 * Fills count elements of buf with a value that no check expects: NaN for
 * floating-point dtypes, 0xa5 bytes for integers, so that an element the
 * collective did not write is counted as wrong.
 */
void perf_fill_sentinel(chorus_dtype_t dtype, void *buf, size_t count);

/* ---- fc_weight_grad ------------------------------------------------------ */

/*
 * One chorus_fc_weight_grad call as every rank makes it: rows per rank (the
 * same on every rank), x rows x in, e rows x out, grad out x in.
 */
typedef struct {
    chorus_dtype_t dtype;  /* float16, bfloat16, float32 or float64 */
    int rank, nranks;
    size_t rows, in, out;
} perf_fc_args_t;

/*
 * The inputs, in eighths (-8..8), by the row's index in the whole job
 * (rank * rows + row), so that every rank contributes other rows. Only the
 * first PERF_FC_ROWS_MAX rows of the job have x other than 0: at most that
 * many products of at most 1 are summed, so every partial sum is a multiple
 * of 1/64 of at most 2^18, which float32 holds exactly. The values repeat
 * along a row of x every PERF_FC_PERIOD_IN elements and along a row of e
 * every PERF_FC_PERIOD_OUT: two primes, so that a gradient transposed or
 * shifted by a few elements does not match.
 */
#define PERF_FC_ROWS_MAX ((size_t)1 << 18)
#define PERF_FC_PERIOD_IN 13
#define PERF_FC_PERIOD_OUT 11
int64_t perf_fc_x_value(size_t job_row, size_t i);
int64_t perf_fc_e_value(size_t job_row, size_t o);
/* The exact grad[o][i] over total_rows rows of the job, in 64ths. */
int64_t perf_fc_expected(size_t total_rows, size_t o, size_t i);

/* Writes a's x and e, and a sentinel into every element of grad. */
void perf_fc_fill(const perf_fc_args_t *a, void *x, void *e, void *grad);
/*
 * Counts the elements of grad that differ from the exact gradient rounded
 * once to a's dtype (float16 and bfloat16 are summed in float32, where the
 * sum is exact, and rounded at the end).
 */
size_t perf_fc_check(const perf_fc_args_t *a, const void *grad);

#endif
