/*
 * c = a^T b (or c += a^T b) on CBLAS when the build has one, else on a
 * blocked loop. See gemm.h.
 */
#include "reduce/gemm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "reduce/reduce_internal.h"
#include "util/time.h"

#ifdef HAVE_BLAS
#include <cblas.h>
#endif

/*
 * The fallback: for each row i of c, c[i][:] += sum over p of a[p][i] * b[p][:],
 * a block of BLOCK_K rows of b at a time and BLOCK_N columns of c, so that the
 * block of b stays in cache while every row of c passes over it. The inner
 * loop is a plain axpy the compiler vectorizes. The order of the additions
 * into each element of c is fixed (p ascending), so the bits are too.
 */
#define BLOCK_K 64
#define BLOCK_N 512

#define DEFINE_BLOCKED(name, type)                                                          \
    static void name(size_t m, size_t n, size_t k, const type *a, const type *b,           \
                     int accumulate, type *c)                                               \
    {                                                                                       \
        if (!accumulate)                                                                    \
            memset(c, 0, m * n * sizeof(type));                                             \
        for (size_t p0 = 0; p0 < k; p0 += BLOCK_K) {                                        \
            size_t p1 = p0 + BLOCK_K < k ? p0 + BLOCK_K : k;                                \
            for (size_t j0 = 0; j0 < n; j0 += BLOCK_N) {                                    \
                size_t j1 = j0 + BLOCK_N < n ? j0 + BLOCK_N : n;                            \
                for (size_t i = 0; i < m; i++) {                                            \
                    type *restrict ci = c + i * n;                                          \
                    for (size_t p = p0; p < p1; p++) {                                      \
                        type s = a[p * m + i];                                              \
                        const type *restrict bp = b + p * n;                                \
                        for (size_t j = j0; j < j1; j++)                                    \
                            ci[j] += s * bp[j];                                             \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

DEFINE_BLOCKED(gemm_blocked_f32, float)
DEFINE_BLOCKED(gemm_blocked_f64, double)

void chorus__gemm_atb(chorus_dtype_t dtype, size_t m, size_t n, size_t k, const void *a,
                      const void *b, int accumulate, void *c)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        if (!accumulate)
            memset(c, 0, m * n * chorus_dtype_size(dtype));
        return;
    }
#ifdef HAVE_BLAS
    if (dtype == CHORUS_FLOAT32)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                    a, (int)m, b, (int)n, accumulate ? 1.0f : 0.0f, c, (int)n);
    else
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0,
                    a, (int)m, b, (int)n, accumulate ? 1.0 : 0.0, c, (int)n);
#else
    chorus__gemm_atb_blocked(dtype, m, n, k, a, b, accumulate, c);
#endif
}

void chorus__gemm_atb_blocked(chorus_dtype_t dtype, size_t m, size_t n, size_t k,
                              const void *a, const void *b, int accumulate, void *c)
{
    if (dtype == CHORUS_FLOAT32)
        gemm_blocked_f32(m, n, k, a, b, accumulate, c);
    else
        gemm_blocked_f64(m, n, k, a, b, accumulate, c);
}

const char *chorus__gemm_impl(void)
{
#ifdef HAVE_BLAS
    return "cblas";
#else
    return "blocked loop (slow)";
#endif
}

/*
 * The rate probe: a product that fits the caches, timed in RATE_WINDOWS
 * windows of at least RATE_WINDOW_S each; the best window is the rate of a
 * core the process has to itself, which short windows catch even when other
 * processes share the cores (the cost model accounts for sharing itself).
 */
#define RATE_DIM 256
#define RATE_WINDOWS 5
#define RATE_WINDOW_S 0.001

static double gemm_rates[2];
static pthread_once_t gemm_rate_once = PTHREAD_ONCE_INIT;

static double gemm_measure(chorus_dtype_t dtype)
{
    size_t esize = chorus_dtype_size(dtype), elems = (size_t)RATE_DIM * RATE_DIM;
    char *buf = malloc(3 * elems * esize);
    double best = 0;

    if (buf == NULL)
        return 0;
    for (size_t i = 0; i < 2 * elems; i++) {
        if (dtype == CHORUS_FLOAT32)
            ((float *)buf)[i] = (float)(i % 7) * 0.25f;
        else
            ((double *)buf)[i] = (double)(i % 7) * 0.25;
    }
    /* One product first: BLAS threads and caches warm up outside the timing. */
    chorus__gemm_atb(dtype, RATE_DIM, RATE_DIM, RATE_DIM, buf, buf + elems * esize, 0,
                     buf + 2 * elems * esize);
    for (int w = 0; w < RATE_WINDOWS; w++) {
        double start = chorus__now(), elapsed, rate;
        int reps = 0;

        do {
            chorus__gemm_atb(dtype, RATE_DIM, RATE_DIM, RATE_DIM, buf, buf + elems * esize, 1,
                             buf + 2 * elems * esize);
            reps++;
            elapsed = chorus__now() - start;
        } while (elapsed < RATE_WINDOW_S);
        rate = 2.0 * RATE_DIM * RATE_DIM * RATE_DIM * reps / elapsed;
        best = rate > best ? rate : best;
    }
    free(buf);
    return best;
}

static void gemm_measure_both(void)
{
    gemm_rates[0] = gemm_measure(CHORUS_FLOAT32);
    gemm_rates[1] = gemm_measure(CHORUS_FLOAT64);
}

double chorus__gemm_rate(chorus_dtype_t dtype)
{
    if (dtype != CHORUS_FLOAT32 && dtype != CHORUS_FLOAT64)
        return 0;
    pthread_once(&gemm_rate_once, gemm_measure_both);
    return gemm_rates[dtype == CHORUS_FLOAT64];
}

void chorus__widen_n(chorus_dtype_t dtype, float *dst, const void *src, size_t n)
{
    if (dtype == CHORUS_FLOAT16)
        chorus__half_to_float_n(dst, src, n);
    else if (dtype == CHORUS_BFLOAT16)
        chorus__bf16_to_float_n(dst, src, n);
    else if (dst != src)
        memcpy(dst, src, n * sizeof(float));
}

void chorus__narrow_n(chorus_dtype_t dtype, void *dst, const float *src, size_t n)
{
    if (dtype == CHORUS_FLOAT16)
        chorus__float_to_half_n(dst, src, n);
    else if (dtype == CHORUS_BFLOAT16)
        chorus__float_to_bf16_n(dst, src, n);
    else if (dst != src)
        memcpy(dst, src, n * sizeof(float));
}
