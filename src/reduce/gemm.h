/*
 * The one matrix product the fully-connected gradient needs (src/coll/fc_*):
 * c (m x n) = a^T b, or c += a^T b, where a is k x m and b is k x n, every
 * matrix row-major and dense. float32 and float64. It runs on the CBLAS that
 * configure found (OpenBLAS on Debian), or on a cache-blocked loop that is
 * correct but slow, for builds without one. Given the same inputs it gives
 * the same bits on every call, so ranks that multiply the same rows in the
 * same order agree exactly.
 */
#ifndef CHORUS_REDUCE_GEMM_H
#define CHORUS_REDUCE_GEMM_H

#include <stddef.h>
#include "chorus.h"

/* dtype CHORUS_FLOAT32 or CHORUS_FLOAT64; accumulate: c += a^T b, else c = a^T b. */
void chorus__gemm_atb(chorus_dtype_t dtype, size_t m, size_t n, size_t k, const void *a,
                      const void *b, int accumulate, void *c);

/* The blocked loop itself, whether or not the build has a CBLAS (for the unit tests). */
void chorus__gemm_atb_blocked(chorus_dtype_t dtype, size_t m, size_t n, size_t k,
                              const void *a, const void *b, int accumulate, void *c);

/* "cblas" or "blocked loop (slow)": what chorus__gemm_atb runs on. */
const char *chorus__gemm_impl(void);

/*
 * This process's rate of chorus__gemm_atb in flop/s for dtype (float32 or
 * float64) on a core of its own, measured on first use with a product that
 * fits the caches (the best of a few short windows, so that processes
 * sharing the cores at that moment do not lower it) and cached; 0 for any
 * other dtype.
 */
double chorus__gemm_rate(chorus_dtype_t dtype);

/* n elements of dtype (float16, bfloat16, float32) to and from float32. */
void chorus__widen_n(chorus_dtype_t dtype, float *dst, const void *src, size_t n);
void chorus__narrow_n(chorus_dtype_t dtype, void *dst, const float *src, size_t n);

#endif
