/*
 * Wire formats of compressed calls (CHORUS_COMPRESS_FP16, _BF16): float32
 * values multiplied by a power of two (the call's scale, the same on every
 * rank) and carried as float16 or bfloat16. A receiver widens back to
 * float32 and divides by the scale, which is exact: only the rounding to
 * 16 bits loses anything.
 */
#ifndef CHORUS_REDUCE_WIRE_H
#define CHORUS_REDUCE_WIRE_H

#include <stddef.h>

#include "chorus.h"

/* dst (n 16-bit values of wire) = src * scale, rounded to nearest even. */
void chorus__wire_narrow(chorus_dtype_t wire, void *dst, const float *src, size_t n,
                         float scale);
/* dst = src (n 16-bit values of wire) / scale. */
void chorus__wire_widen(chorus_dtype_t wire, float *dst, const void *src, size_t n,
                        float scale);
/* buf = what buf becomes through the wire: widen(narrow(buf * scale)) / scale. */
void chorus__wire_round(chorus_dtype_t wire, float *buf, size_t n, float scale);

/* The largest |src[i]|; +infinity when some value is not finite. */
double chorus__wire_maxabs(const float *src, size_t n);
/*
 * The scale for sums of nranks values of at most maxabs each: the largest
 * power of two that keeps nranks * maxabs within wire's finite range, at
 * most 2^64 for float16 and 1 for bfloat16; 0 when maxabs is not finite
 * (the call goes uncompressed).
 */
float chorus__wire_scale(chorus_dtype_t wire, double maxabs, int nranks);

#endif
