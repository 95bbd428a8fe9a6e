/*
 * Internals of the reduction layer shared by reduce.c, half.c and the unit
 * tests: bulk float16/bfloat16 conversion and the hooks that pin the float16
 * instruction-set path so tests can compare every path bit for bit.
 */
#ifndef CHORUS_REDUCE_INTERNAL_H
#define CHORUS_REDUCE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* defines __GLIBC__ where it applies */
#include "chorus.h"

/*
 * Simple loops get copies built for AVX2 and AVX-512 (x86-64-v3, -v4) and
 * the loader picks one for the CPU (ifunc), so the library itself stays
 * buildable for any x86-64. Needs GCC 12 and glibc; elsewhere it is empty.
 * Defining it empty on the command line builds the baseline code alone
 * (the tests use that to check the baseline on a newer CPU).
 */
#if defined(CHORUS__KERNEL_CLONES)
/* set by the build */
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    defined(__GLIBC__) && defined(__ELF__)
#define CHORUS__KERNEL_CLONES \
    __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define CHORUS__KERNEL_CLONES
#endif

/*
 * Bulk conversions of n elements; src and dst never overlap. Rounding is to
 * nearest even, NaN comes out quiet with its leading payload bits kept,
 * exactly as the scalar chorus__half_to_float() family does.
 */
void chorus__half_to_float_n(float *dst, const uint16_t *src, size_t n);
void chorus__float_to_half_n(uint16_t *dst, const float *src, size_t n);
void chorus__bf16_to_float_n(float *dst, const uint16_t *src, size_t n);
void chorus__float_to_bf16_n(uint16_t *dst, const float *src, size_t n);

/*
 * Test hooks. chorus__reduce_force_isa() pins the float16 path to "portable",
 * "f16c" or "avx512" (NULL: back to the automatic choice); it returns
 * CHORUS_ERR_UNSUPPORTED when this CPU or build lacks that path and
 * CHORUS_ERR_INVALID_ARG for an unknown name. Not for use while kernels run
 * on other threads.
 */
chorus_status_t chorus__reduce_force_isa(const char *isa);
/* Shorthand: nonzero pins the portable path, zero restores the automatic choice. */
void chorus__reduce_force_portable(int on);

#endif
