/*
 * float16 and bfloat16 conversions, scalar and bulk.
 *
 * The portable code is plain bit arithmetic written as selects rather than
 * branches so that the compiler can vectorize the bulk loops. On x86 the
 * float16 bulk conversions also have F16C and AVX-512 paths chosen once at
 * run time. Every path gives the same bits as the portable one, NaN included:
 * the hardware quiets a NaN and keeps its leading payload bits, so the
 * portable code does the same (the unit tests compare all paths).
 *
 * GCC at -O2 only vectorizes loops that need no scalar tail, hence the pragma.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "reduce/reduce.h"
#include "reduce/half_bits.h"
#include "reduce/reduce_internal.h"

#include <pthread.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define HALF_HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define HALF_HAVE_X86 0
#endif

float chorus__half_to_float(uint16_t h)
{
    return f32_from_bits(half_to_f32_bits(h));
}

uint16_t chorus__float_to_half(float f)
{
    return f32_bits_to_half(f32_bits(f));
}

static void half_to_float_portable(float *restrict dst, const uint16_t *restrict src,
                                   size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_from_bits(half_to_f32_bits(src[i]));
}

static void float_to_half_portable(uint16_t *restrict dst, const float *restrict src,
                                   size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_bits_to_half(f32_bits(src[i]));
}

float chorus__bf16_to_float(uint16_t b)
{
    return f32_from_bits(bf16_to_f32_bits(b));
}

uint16_t chorus__float_to_bf16(float f)
{
    return f32_bits_to_bf16(f32_bits(f));
}

CHORUS__KERNEL_CLONES
void chorus__bf16_to_float_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_from_bits(bf16_to_f32_bits(src[i]));
}

CHORUS__KERNEL_CLONES
void chorus__float_to_bf16_n(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_bits_to_bf16(f32_bits(src[i]));
}

/* ---- float16 instruction-set paths -------------------------------------- */

#if HALF_HAVE_X86
/* The tails shorter than a vector use the portable code, which gives the same bits. */
__attribute__((target("f16c,avx2")))
static void half_to_float_f16c(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(src + i))));
    half_to_float_portable(dst + i, src + i, n - i);
}

__attribute__((target("f16c,avx2")))
static void float_to_half_f16c(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    float_to_half_portable(dst + i, src + i, n - i);
}

__attribute__((target("avx512f")))
static void half_to_float_avx512(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(src + i))));
    half_to_float_portable(dst + i, src + i, n - i);
}

__attribute__((target("avx512f")))
static void float_to_half_avx512(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((void *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    float_to_half_portable(dst + i, src + i, n - i);
}
#endif

typedef struct {
    const char *name;
    void (*to_float)(float *dst, const uint16_t *src, size_t n);
    void (*from_float)(uint16_t *dst, const float *src, size_t n);
} half_path_t;

enum { HALF_PATH_PORTABLE, HALF_PATH_F16C, HALF_PATH_AVX512, HALF_PATH_COUNT };

static const half_path_t half_paths[HALF_PATH_COUNT] = {
    [HALF_PATH_PORTABLE] = {.name = "portable",
                            .to_float = half_to_float_portable,
                            .from_float = float_to_half_portable},
#if HALF_HAVE_X86
    [HALF_PATH_F16C] = {.name = "f16c",
                        .to_float = half_to_float_f16c,
                        .from_float = float_to_half_f16c},
    [HALF_PATH_AVX512] = {.name = "avx512",
                          .to_float = half_to_float_avx512,
                          .from_float = float_to_half_avx512},
#endif
};

static pthread_once_t half_once = PTHREAD_ONCE_INIT;
static int half_best = HALF_PATH_PORTABLE;
/* The path in use; tests may pin another one. Read with relaxed atomics. */
static const half_path_t *half_current = &half_paths[HALF_PATH_PORTABLE];

static int half_path_supported(int path)
{
#if HALF_HAVE_X86
    unsigned eax, ebx, ecx = 0, edx;

    __builtin_cpu_init();
    /*
     * Not every compiler knows "f16c" in __builtin_cpu_supports, so its CPUID
     * bit is read directly; the AVX2 check covers the operating system's
     * support for the 256-bit registers that the instructions use.
     */
    if (path == HALF_PATH_F16C)
        return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) &&
               __builtin_cpu_supports("avx2");
    if (path == HALF_PATH_AVX512)
        return __builtin_cpu_supports("avx512f");
#endif
    return path == HALF_PATH_PORTABLE;
}

static void half_detect(void)
{
    for (int path = HALF_PATH_COUNT - 1; path > HALF_PATH_PORTABLE; path--) {
        if (half_path_supported(path)) {
            half_best = path;
            break;
        }
    }
    __atomic_store_n(&half_current, &half_paths[half_best], __ATOMIC_RELEASE);
}

static const half_path_t *half_path(void)
{
    pthread_once(&half_once, half_detect);
    return __atomic_load_n(&half_current, __ATOMIC_ACQUIRE);
}

void chorus__half_to_float_n(float *dst, const uint16_t *src, size_t n)
{
    half_path()->to_float(dst, src, n);
}

void chorus__float_to_half_n(uint16_t *dst, const float *src, size_t n)
{
    half_path()->from_float(dst, src, n);
}

const char *chorus__reduce_isa(void)
{
    return half_path()->name;
}

chorus_status_t chorus__reduce_force_isa(const char *isa)
{
    pthread_once(&half_once, half_detect);
    if (isa == NULL) {
        __atomic_store_n(&half_current, &half_paths[half_best], __ATOMIC_RELEASE);
        return CHORUS_OK;
    }
    for (int path = 0; path < HALF_PATH_COUNT; path++) {
        if (half_paths[path].name == NULL || strcmp(half_paths[path].name, isa) != 0)
            continue;
        if (!half_path_supported(path))
            return CHORUS_ERR_UNSUPPORTED;
        __atomic_store_n(&half_current, &half_paths[path], __ATOMIC_RELEASE);
        return CHORUS_OK;
    }
    return CHORUS_ERR_INVALID_ARG;
}

void chorus__reduce_force_portable(int on)
{
    (void)chorus__reduce_force_isa(on ? "portable" : NULL);
}
