/*
 * Reduction kernels: dst[i] = a[i] op b[i] for every (dtype, op).
 *
 * All kernels come from one definition. REDUCE_DTYPES lists the dtypes with
 * their class (SINT, UINT, FLT, HALF) and C types, REDUCE_OPS lists the ops,
 * and one macro per class writes the loop. The generated static functions
 * are named reduce_<dtype>_<op> (reduce_int8_sum ... reduce_float64_max) and
 * finalize_<dtype>; they are reached only through the tables at the bottom.
 *
 * dst may be a or b exactly, so the loops carry no restrict; the vectorizer
 * then checks for overlap at run time, and an exact alias passes that check
 * because element i is read before it is written. GCC at -O2 only vectorizes
 * loops that need neither such checks nor a scalar tail, hence the pragma.
 * It also drops trapping math: the kernels promise values, not floating-point
 * exception flags, and without it the float min/max selects stay branches.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

#include "reduce/reduce.h"
#include "reduce/reduce_defs.h"
#include "reduce/reduce_internal.h"
#include "util/log.h"

#include <string.h>

/* One elementwise loop serves the integer and the float classes. */
#define DEFINE_KERNEL_ELEM(name, cls, T, U, op)                                 \
    CHORUS__KERNEL_CLONES                                                       \
    static void reduce_##name##_##op(void *dst_, const void *a_, const void *b_, \
                                     size_t count)                              \
    {                                                                           \
        T *dst = dst_;                                                          \
        const T *a = a_;                                                        \
        const T *b = b_;                                                        \
        for (size_t i = 0; i < count; i++)                                      \
            dst[i] = ELEM_##cls##_##op(T, U, a[i], b[i]);                       \
    }
#define DEFINE_KERNEL_SINT DEFINE_KERNEL_ELEM
#define DEFINE_KERNEL_UINT DEFINE_KERNEL_ELEM
#define DEFINE_KERNEL_FLT  DEFINE_KERNEL_ELEM

/*
 * float16 and bfloat16 widen a block of each input to float32, run the
 * float32 kernel there and round the block back. A block is read whole
 * before its part of dst is written, so dst may alias a or b.
 */
#define REDUCE_BLOCK 512

typedef void (*to_float_fn)(float *dst, const uint16_t *src, size_t n);
typedef void (*from_float_fn)(uint16_t *dst, const float *src, size_t n);

static void reduce_via_float(void *dst, const void *a, const void *b, size_t count,
                             to_float_fn widen, from_float_fn narrow,
                             chorus__reduce_fn kernel)
{
    _Alignas(64) float fa[REDUCE_BLOCK];
    _Alignas(64) float fb[REDUCE_BLOCK];
    uint16_t *d = dst;
    const uint16_t *pa = a;
    const uint16_t *pb = b;

    for (size_t i = 0; i < count; i += REDUCE_BLOCK) {
        size_t n = count - i < REDUCE_BLOCK ? count - i : REDUCE_BLOCK;
        widen(fa, pa + i, n);
        widen(fb, pb + i, n);
        kernel(fa, fa, fb, n);
        narrow(d + i, fa, n);
    }
}

#define DEFINE_KERNEL_HALF(name, cls, T, cv, op)                                \
    static void reduce_##name##_##op(void *dst, const void *a, const void *b,   \
                                     size_t count)                              \
    {                                                                           \
        reduce_via_float(dst, a, b, count, chorus__##cv##_to_float_n,           \
                         chorus__float_to_##cv##_n, reduce_float32_##op);       \
    }

#define DECLARE_KERNEL(DT, name, cls, T, U, OP, op) \
    static void reduce_##name##_##op(void *dst, const void *a, const void *b, size_t count);
#define DEFINE_KERNEL(DT, name, cls, T, U, OP, op) DEFINE_KERNEL_##cls(name, cls, T, U, op)
#define DECLARE_KERNELS(DT, name, cls, T, U) REDUCE_OPS(DECLARE_KERNEL, DT, name, cls, T, U)
#define DEFINE_KERNELS(DT, name, cls, T, U)  REDUCE_OPS(DEFINE_KERNEL, DT, name, cls, T, U)

REDUCE_DTYPES(DECLARE_KERNELS)
REDUCE_DTYPES(DEFINE_KERNELS)

/* ---- finalize: AVG divides by the rank count ---------------------------- */

/* Integer division in C truncates toward zero; the quotient always fits T. */
#define DEFINE_FINALIZE_SINT(name, T, U)                         \
    static void finalize_##name(void *buf, size_t count, int nranks) \
    {                                                            \
        T *p = buf;                                              \
        for (size_t i = 0; i < count; i++)                       \
            p[i] = (T)((int64_t)p[i] / (int64_t)nranks);         \
    }
#define DEFINE_FINALIZE_UINT(name, T, U)                         \
    static void finalize_##name(void *buf, size_t count, int nranks) \
    {                                                            \
        T *p = buf;                                              \
        for (size_t i = 0; i < count; i++)                       \
            p[i] = (T)((uint64_t)p[i] / (uint64_t)nranks);       \
    }
#define DEFINE_FINALIZE_FLT(name, T, U)                          \
    static void finalize_##name(void *buf, size_t count, int nranks) \
    {                                                            \
        T *p = buf;                                              \
        T n = (T)nranks;                                         \
        for (size_t i = 0; i < count; i++)                       \
            p[i] = p[i] / n;                                     \
    }

static void finalize_via_float(uint16_t *p, size_t count, int nranks,
                               to_float_fn widen, from_float_fn narrow)
{
    _Alignas(64) float f[REDUCE_BLOCK];
    float n = (float)nranks;

    for (size_t i = 0; i < count; i += REDUCE_BLOCK) {
        size_t m = count - i < REDUCE_BLOCK ? count - i : REDUCE_BLOCK;
        widen(f, p + i, m);
        for (size_t j = 0; j < m; j++)
            f[j] = f[j] / n;
        narrow(p + i, f, m);
    }
}

#define DEFINE_FINALIZE_HALF(name, T, cv)                            \
    static void finalize_##name(void *buf, size_t count, int nranks) \
    {                                                                \
        finalize_via_float(buf, count, nranks, chorus__##cv##_to_float_n, \
                           chorus__float_to_##cv##_n);               \
    }

#define DEFINE_FINALIZE(DT, name, cls, T, U) DEFINE_FINALIZE_##cls(name, T, U)
REDUCE_DTYPES(DEFINE_FINALIZE)

/* ---- dispatch ----------------------------------------------------------- */

#define KERNEL_ENTRY(name, OP, op) [OP] = reduce_##name##_##op,
#define KERNEL_ROW(DT, name, cls, T, U) \
    [DT] = {REDUCE_OPS(KERNEL_ENTRY, name) [CHORUS_AVG] = reduce_##name##_sum},

static const chorus__reduce_fn reduce_table[CHORUS_DTYPE_COUNT][CHORUS_OP_COUNT] = {
    REDUCE_DTYPES(KERNEL_ROW)
};

typedef void (*finalize_fn)(void *buf, size_t count, int nranks);

#define FINALIZE_ENTRY(DT, name, cls, T, U) [DT] = finalize_##name,

static const finalize_fn finalize_table[CHORUS_DTYPE_COUNT] = {
    REDUCE_DTYPES(FINALIZE_ENTRY)
};

chorus__reduce_fn chorus__reduce_kernel(chorus_dtype_t dtype, chorus_op_t op)
{
    /* The casts to unsigned also reject negative values. */
    if ((unsigned)dtype >= CHORUS_DTYPE_COUNT || (unsigned)op >= CHORUS_OP_COUNT)
        return NULL;
    return reduce_table[dtype][op];
}

chorus_status_t chorus__reduce(chorus_dtype_t dtype, chorus_op_t op, void *dst,
                               const void *a, const void *b, size_t count)
{
    chorus__reduce_fn fn = chorus__reduce_kernel(dtype, op);

    if (fn == NULL) {
        chorus_error("reduce: invalid dtype %d or op %d", (int)dtype, (int)op);
        return CHORUS_ERR_INVALID_ARG;
    }
    fn(dst, a, b, count);
    return CHORUS_OK;
}

void chorus__reduce_finalize(chorus_dtype_t dtype, chorus_op_t op, void *buf,
                             size_t count, int nranks)
{
    if (op != CHORUS_AVG)
        return;
    /* Callers pass validated arguments; a bad one is a bug, reported not trusted. */
    if ((unsigned)dtype >= CHORUS_DTYPE_COUNT || nranks <= 0) {
        chorus_error("reduce finalize: invalid dtype %d or rank count %d",
                     (int)dtype, nranks);
        return;
    }
    finalize_table[dtype](buf, count, nranks);
}
