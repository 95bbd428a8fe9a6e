/*
 * The bit arithmetic of float16 and bfloat16, one definition for the CPU
 * (half.c) and the CUDA kernels (reduce_cuda.cu), so that both give the same
 * bits: round to nearest even, NaN quiet with its leading payload bits kept.
 * Written as selects rather than branches so that loops over it vectorize.
 */
#ifndef CHORUS_HALF_BITS_H
#define CHORUS_HALF_BITS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CHORUS__HD __host__ __device__
#else
#define CHORUS__HD
#endif

CHORUS__HD static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

CHORUS__HD static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ---- float16 ------------------------------------------------------------ */

CHORUS__HD static inline uint32_t half_to_f32_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    /* Normal numbers: rebias the exponent from 15 to 127. */
    uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
    /* Subnormals are mant * 2^-24, which float32 holds exactly. */
    uint32_t sub = f32_bits((float)mant * 0x1p-24f);
    /* NaN comes out quiet, as the F16C instruction makes it. */
    uint32_t special = 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
    uint32_t r = exp == 0 ? sub : normal;
    r = exp == 0x1F ? special : r;
    return sign | r;
}

CHORUS__HD static inline uint16_t f32_bits_to_half(uint32_t x)
{
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7FFFFFFFu;
    /* Normal results: rebias, then round away the low 13 bits to nearest even. */
    uint32_t n = a - 0x38000000u;
    n = (n + 0xFFFu + ((n >> 13) & 1u)) >> 13;
    /*
     * Subnormal results count units of 2^-24: the full significand shifted
     * right by 126 - exponent, rounded to nearest even. Shifts beyond 24
     * leave 0, which is the right answer below 2^-25; the clamp to 31 only
     * keeps the shift defined for inputs that take another branch.
     */
    uint32_t e = a >> 23;
    uint32_t shift = (e < 95u || e >= 126u) ? 31u : 126u - e;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t s = (m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift;
    uint32_t r = a < 0x38800000u ? s : n;
    /* 65520 is halfway between 65504 and 65536; the tie goes to infinity. */
    r = a >= 0x477FF000u ? 0x7C00u : r;
    r = a > 0x7F800000u ? (0x7E00u | ((a >> 13) & 0x3FFu)) : r;
    return (uint16_t)(sign | r);
}

/* ---- bfloat16 ----------------------------------------------------------- */

CHORUS__HD static inline uint32_t bf16_to_f32_bits(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    /* Quiet a signaling NaN, as the float16 path does. */
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? u | 0x00400000u : u;
}

CHORUS__HD static inline uint16_t f32_bits_to_bf16(uint32_t x)
{
    /* Round to nearest even; a carry out of the mantissa rounds up to infinity. */
    uint32_t r = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    /* NaN: truncate the payload and set the quiet bit, so it cannot become infinity. */
    return (uint16_t)((x & 0x7FFFFFFFu) > 0x7F800000u ? (x >> 16) | 0x0040u : r);
}

#endif
