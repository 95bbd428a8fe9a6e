/* Wire formats of compressed calls: see wire.h. */
/* The passes over whole buffers (maximum, rounding) vectorize, as the kernels do. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "reduce/wire.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce/reduce_internal.h"

/* Values converted at a time through a buffer on the stack. */
#define WIRE_BLOCK 1024

/* The largest finite value of each 16-bit wire format. */
#define WIRE_FP16_MAX 65504.0
#define WIRE_BF16_MAX 3.3895313892515355e38

void chorus__wire_narrow(chorus_dtype_t wire, void *dst, const float *src, size_t n,
                         float scale)
{
    uint16_t *out = dst;
    float tmp[WIRE_BLOCK];

    for (size_t done = 0; done < n; done += WIRE_BLOCK) {
        size_t k = n - done < WIRE_BLOCK ? n - done : WIRE_BLOCK;
        const float *in = src + done;

        if (scale != 1.0f) {
            for (size_t i = 0; i < k; i++)
                tmp[i] = src[done + i] * scale;
            in = tmp;
        }
        if (wire == CHORUS_FLOAT16)
            chorus__float_to_half_n(out + done, in, k);
        else
            chorus__float_to_bf16_n(out + done, in, k);
    }
}

void chorus__wire_widen(chorus_dtype_t wire, float *dst, const void *src, size_t n,
                        float scale)
{
    if (wire == CHORUS_FLOAT16)
        chorus__half_to_float_n(dst, src, n);
    else
        chorus__bf16_to_float_n(dst, src, n);
    if (scale != 1.0f) {
        float inv = 1.0f / scale;   /* a power of two: exact */

        for (size_t i = 0; i < n; i++)
            dst[i] *= inv;
    }
}

/*
 * Below this magnitude (after scaling) a value is not a normal number of the
 * wire format, and rounding it takes the format's own conversion.
 */
static float wire_min_normal(chorus_dtype_t wire)
{
    return wire == CHORUS_FLOAT16 ? 0x1p-14f : 0x1p-126f;
}

void chorus__wire_round(chorus_dtype_t wire, float *buf, size_t n, float scale)
{
    /* float16 keeps 10 of float32's 23 fraction bits, bfloat16 7. */
    const unsigned drop = wire == CHORUS_FLOAT16 ? 13 : 16;
    const uint32_t half = (1u << (drop - 1)) - 1, mask = ~((1u << drop) - 1);
    const float small = wire_min_normal(wire) / scale;
    uint32_t small_bits;
    int any_small = 0;

    memcpy(&small_bits, &small, sizeof(small_bits));   /* |x| < small, compared as bits */

    /*
     * A normal number of the format: round the fraction to nearest, ties to
     * even, on the bits themselves (the scale, a power of two, changes only
     * the exponent). One pass that vectorizes; the rare smaller values after.
     */
    uint32_t *bits = (uint32_t *)(void *)buf;

    for (size_t i = 0; i < n; i++) {
        uint32_t b = bits[i], r = (b + half + ((b >> drop) & 1u)) & mask;
        int tiny = (b & 0x7fffffffu) < small_bits;

        any_small |= tiny;
        bits[i] = tiny ? b : r;
    }
    for (size_t i = 0; any_small && i < n; i++) {
        uint16_t h;

        if (!(fabsf(buf[i]) < small) || buf[i] == 0)
            continue;
        chorus__wire_narrow(wire, &h, &buf[i], 1, scale);
        chorus__wire_widen(wire, &buf[i], &h, 1, scale);
    }
}

double chorus__wire_maxabs(const float *src, size_t n)
{
    const uint32_t *bits = (const uint32_t *)(const void *)src;
    uint32_t most = 0;
    float f;

    /* |x| as bits orders as |x| does, and every infinity and NaN lies above the finite. */
    for (size_t i = 0; i < n; i++) {
        uint32_t a = bits[i] & 0x7fffffffu;

        most = a > most ? a : most;
    }
    if (most >= 0x7f800000u)
        return INFINITY;
    memcpy(&f, &most, sizeof(f));
    return f;
}

float chorus__wire_scale(chorus_dtype_t wire, double maxabs, int nranks)
{
    double top = wire == CHORUS_FLOAT16 ? WIRE_FP16_MAX : WIRE_BF16_MAX, bound;
    int e;

    if (!isfinite(maxabs))
        return 0;
    bound = maxabs * (nranks > 0 ? nranks : 1);
    if (bound == 0)
        return 1;
    /*
     * 2^e with 2^e * bound <= top. float16 scales up too (at most 2^64), so that
     * small values stay clear of its subnormals; bfloat16 has float32's range
     * and only ever scales down.
     */
    e = (int)floor(log2(top / bound));
    while (e > -126 && ldexp(bound, e) > top)
        e--;
    if (e > (wire == CHORUS_FLOAT16 ? 64 : 0))
        e = wire == CHORUS_FLOAT16 ? 64 : 0;
    if (e < -126)
        return 0;
    return (float)ldexp(1.0, e);
}
