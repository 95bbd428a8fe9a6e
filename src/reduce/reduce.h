/*
 * Reduction and conversion kernels. Every (dtype, op) instance is generated
 * from one definition (src/reduce/reduce.c) and dispatched by table lookup.
 * float16 and bfloat16 are computed in float32 and rounded to nearest even.
 */
#ifndef CHORUS_REDUCE_H
#define CHORUS_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "chorus.h"

/* dst[i] = a[i] op b[i] for i < count; dst may alias a or b (exactly, not partially). */
typedef void (*chorus__reduce_fn)(void *dst, const void *a, const void *b, size_t count);

/* The kernel for (dtype, op), or NULL when either is out of range. AVG reduces like SUM. */
chorus__reduce_fn chorus__reduce_kernel(chorus_dtype_t dtype, chorus_op_t op);

/* Convenience: look up and run. Returns CHORUS_ERR_INVALID_ARG for a bad pair. */
chorus_status_t chorus__reduce(chorus_dtype_t dtype, chorus_op_t op, void *dst,
                               const void *a, const void *b, size_t count);

/*
 * Final step of a reduction: for CHORUS_AVG divide every element by nranks
 * (integers: truncating division; floats: multiply by nothing, divide exactly);
 * nothing for other ops.
 */
void chorus__reduce_finalize(chorus_dtype_t dtype, chorus_op_t op, void *buf,
                             size_t count, int nranks);

/* Scalar conversions, round to nearest even; NaN stays NaN, infinities stay. */
float chorus__half_to_float(uint16_t h);
uint16_t chorus__float_to_half(float f);
float chorus__bf16_to_float(uint16_t b);
uint16_t chorus__float_to_bf16(float f);

/* Which float16 path the kernels use on this CPU: "f16c", "avx512", or "portable". */
const char *chorus__reduce_isa(void);

#endif
