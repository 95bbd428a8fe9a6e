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
/* Reads element idx of buf as a double (exact for the values we use). */
double perf_load(chorus_dtype_t dtype, const void *buf, size_t idx);
/* v as dtype stores it, read back: applies integer wrap-around. */
double perf_as_dtype(chorus_dtype_t dtype, int64_t v);

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

#endif
