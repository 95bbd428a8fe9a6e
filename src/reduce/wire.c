/* Wire formats of compressed calls: see wire.h. */
#include "reduce/wire.h"

#include <math.h>

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

void chorus__wire_round(chorus_dtype_t wire, float *buf, size_t n, float scale)
{
    uint16_t tmp[WIRE_BLOCK];

    for (size_t done = 0; done < n; done += WIRE_BLOCK) {
        size_t k = n - done < WIRE_BLOCK ? n - done : WIRE_BLOCK;

        chorus__wire_narrow(wire, tmp, buf + done, k, scale);
        chorus__wire_widen(wire, buf + done, tmp, k, scale);
    }
}

double chorus__wire_maxabs(const float *src, size_t n)
{
    float most = 0;

    for (size_t i = 0; i < n; i++) {
        float a = fabsf(src[i]);

        if (!(a <= most)) {
            if (!isfinite(a))
                return INFINITY;
            most = a;
        }
    }
    return most;
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
