/*
 * The one definition of every reduction, for the CPU kernels (reduce.c) and
 * the CUDA kernels (reduce_cuda.cu): the dtypes with their class and C
 * types, the ops, and each element operation. A kernel file writes only its
 * loops over these.
 */
#ifndef CHORUS_REDUCE_DEFS_H
#define CHORUS_REDUCE_DEFS_H

#include <stdint.h>
#include <string.h>

#include "chorus.h"
#include "reduce/half_bits.h"

/*
 * The dtypes: enum, name, class, element type, and a helper type. Integers
 * name their unsigned twin, in which sum and prod wrap without undefined
 * behaviour; floats name the integer type of their bits; float16 and
 * bfloat16 name the converter family (chorus__half_to_float_n, ...).
 */
#define REDUCE_DTYPES(X)                                   \
    X(CHORUS_INT8, int8, SINT, int8_t, uint8_t)            \
    X(CHORUS_UINT8, uint8, UINT, uint8_t, uint8_t)         \
    X(CHORUS_INT32, int32, SINT, int32_t, uint32_t)        \
    X(CHORUS_UINT32, uint32, UINT, uint32_t, uint32_t)     \
    X(CHORUS_INT64, int64, SINT, int64_t, uint64_t)        \
    X(CHORUS_UINT64, uint64, UINT, uint64_t, uint64_t)     \
    X(CHORUS_FLOAT16, float16, HALF, uint16_t, half)       \
    X(CHORUS_BFLOAT16, bfloat16, HALF, uint16_t, bf16)     \
    X(CHORUS_FLOAT32, float32, FLT, float, uint32_t)       \
    X(CHORUS_FLOAT64, float64, FLT, double, uint64_t)

/* The ops with kernels of their own; CHORUS_AVG reduces with SUM's kernel. */
#define REDUCE_OPS(X, ...)                \
    X(__VA_ARGS__, CHORUS_SUM, sum)       \
    X(__VA_ARGS__, CHORUS_PROD, prod)     \
    X(__VA_ARGS__, CHORUS_MIN, min)       \
    X(__VA_ARGS__, CHORUS_MAX, max)

/* Element operations of the integer classes. Small types promote to int, where
 * even uint8 * uint8 cannot overflow; the cast back wraps modulo 2^n. */
#define ELEM_SINT_sum(T, U, x, y)  ((T)((U)(x) + (U)(y)))
#define ELEM_SINT_prod(T, U, x, y) ((T)((U)(x) * (U)(y)))
#define ELEM_SINT_min(T, U, x, y)  ((x) < (y) ? (x) : (y))
#define ELEM_SINT_max(T, U, x, y)  ((x) > (y) ? (x) : (y))
#define ELEM_UINT_sum  ELEM_SINT_sum
#define ELEM_UINT_prod ELEM_SINT_prod
#define ELEM_UINT_min  ELEM_SINT_min
#define ELEM_UINT_max  ELEM_SINT_max

/*
 * Float min and max propagate NaN (like torch.minimum) and order -0 below +0
 * (like IEEE 754-2019 minimum). The second rule makes them commutative, so
 * ranks that combine the same two values in opposite order agree on the bits.
 * Equal inputs have equal bits except for a +0/-0 pair, which OR (min) or
 * AND (max) of the bits resolves.
 */
#define DEFINE_FLT_MINMAX(T, U)                                   \
    CHORUS__HD static inline T flt_min_##T(T x, T y)                         \
    {                                                             \
        U xb, yb;                                                 \
        T eq;                                                     \
        memcpy(&xb, &x, sizeof(xb));                              \
        memcpy(&yb, &y, sizeof(yb));                              \
        xb |= yb;                                                 \
        memcpy(&eq, &xb, sizeof(eq));                             \
        int first = x < y, second = y < x;                      \
        int nan = (x != x) | (y != y);                            \
        T quiet = x + y;                                          \
        T r = second ? y : eq;                                    \
        r = first ? x : r;                                        \
        return nan ? quiet : r;                                   \
    }                                                             \
    CHORUS__HD static inline T flt_max_##T(T x, T y)                         \
    {                                                             \
        U xb, yb;                                                 \
        T eq;                                                     \
        memcpy(&xb, &x, sizeof(xb));                              \
        memcpy(&yb, &y, sizeof(yb));                              \
        xb &= yb;                                                 \
        memcpy(&eq, &xb, sizeof(eq));                             \
        int first = x > y, second = y > x;                      \
        int nan = (x != x) | (y != y);                            \
        T quiet = x + y;                                          \
        T r = second ? y : eq;                                    \
        r = first ? x : r;                                        \
        return nan ? quiet : r;                                   \
    }

DEFINE_FLT_MINMAX(float, uint32_t)
DEFINE_FLT_MINMAX(double, uint64_t)

#define ELEM_FLT_sum(T, U, x, y)  ((x) + (y))
#define ELEM_FLT_prod(T, U, x, y) ((x) * (y))
#define ELEM_FLT_min(T, U, x, y)  flt_min_##T(x, y)
#define ELEM_FLT_max(T, U, x, y)  flt_max_##T(x, y)

#endif
