/*
 * Wire formats of compressed calls (src/reduce/wire.c): the fast rounding of
 * a buffer through the wire gives, bit for bit, what narrowing and widening
 * give, for random float32 values of every magnitude, ties included, at
 * several scales; the scale keeps p * max within range; the maximum sees
 * infinities and NaN.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reduce/wire.h"

#define N 100000

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random finite values whose scaled magnitude stays within the wire's range. */
static void fill(float *x, size_t n, chorus_dtype_t wire, float scale, uint64_t seed)
{
    double top = wire == CHORUS_FLOAT16 ? 65504.0 : 3e38;

    for (size_t i = 0; i < n; i++) {
        uint64_t r = next(&seed);
        /* exponents from far below the wire's normals to its top; ties: low bits cleared */
        int e = (int)(r % 60) - 40;
        double v = ldexp(1.0 + (double)((r >> 8) % 1024) / 1024.0, e) / scale;

        if ((r >> 20) % 4 == 0)
            v = ldexp((double)((r >> 24) % 4096 * 2 + 1), e - 13) / scale;  /* ties */
        if (fabs(v) * scale > top)
            v = top / scale / 2;
        x[i] = (float)((r >> 40) & 1 ? -v : v);
    }
    x[0] = 0;
    x[1] = -0.0f;
}

static void same_as_narrow_widen(chorus_dtype_t wire, float scale, uint64_t seed)
{
    static float x[N], fast[N], slow[N];
    static uint16_t h[N];
    size_t bad = 0;

    fill(x, N, wire, scale, seed);
    memcpy(fast, x, sizeof(x));
    chorus__wire_round(wire, fast, N, scale);
    chorus__wire_narrow(wire, h, x, N, scale);
    chorus__wire_widen(wire, slow, h, N, scale);
    for (size_t i = 0; i < N; i++)
        if (memcmp(&fast[i], &slow[i], sizeof(float)) != 0 && bad++ < 5)
            cr_log_error("%s scale %g: %a rounds to %a, through the wire %a",
                         wire == CHORUS_FLOAT16 ? "float16" : "bfloat16", (double)scale,
                         (double)x[i], (double)fast[i], (double)slow[i]);
    cr_expect_eq(bad, 0, "%zu of %d values differ", bad, N);
    /* Rounding again changes nothing. */
    memcpy(slow, fast, sizeof(fast));
    chorus__wire_round(wire, slow, N, scale);
    cr_expect_eq(memcmp(slow, fast, sizeof(fast)), 0, "rounding twice changed a value");
}

Test(wire, round_is_narrow_then_widen)
{
    static const float scales[] = {1.0f, 0x1p-10f, 0x1p20f, 0x1p64f};

    for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++) {
        same_as_narrow_widen(CHORUS_FLOAT16, scales[k], 11 + k);
        if (scales[k] <= 1.0f)
            same_as_narrow_widen(CHORUS_BFLOAT16, scales[k], 23 + k);
    }
}

Test(wire, scale_keeps_sums_in_range)
{
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, 1.0, 4), 0x1p13f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, 65504.0, 1), 1.0f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, 65000.0, 4), 0.25f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, 0.0, 8), 1.0f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, 1e-30, 2), 0x1p64f);
    cr_expect_eq(chorus__wire_scale(CHORUS_BFLOAT16, 1.0, 8), 1.0f);
    cr_expect_eq(chorus__wire_scale(CHORUS_BFLOAT16, 3e38, 8), 0.125f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, INFINITY, 2), 0.0f);
    cr_expect_eq(chorus__wire_scale(CHORUS_FLOAT16, NAN, 2), 0.0f);
}

Test(wire, maxabs_sees_every_value)
{
    float x[9] = {1, -3, 2, 0, -0.0f, 0x1p-140f, 2.5f, -2.75f, 0.5f};

    cr_expect_eq(chorus__wire_maxabs(x, 9), 3.0);
    cr_expect_eq(chorus__wire_maxabs(x, 0), 0.0);
    x[6] = -INFINITY;
    cr_expect(isinf(chorus__wire_maxabs(x, 9)));
    x[6] = NAN;
    cr_expect(isinf(chorus__wire_maxabs(x, 9)));
}
