/* Exact values for the schedule-simulator tests (see exact_vals.h). */
#include "tests/unit/exact_vals.h"

#include <criterion/criterion.h>
#include <stdint.h>

#include "reduce/reduce.h"
#include "tests/coll/expect.h"

int exact_is_unsigned(chorus_dtype_t dt)
{
    return dt == CHORUS_UINT8 || dt == CHORUS_UINT32 || dt == CHORUS_UINT64;
}

/* The collective tests' store (tests/coll/expect.c), one definition for both. */
void exact_put(chorus_dtype_t dt, void *buf, size_t i, double v)
{
    cr_assert_lt((unsigned)dt, (unsigned)CHORUS_DTYPE_COUNT, "bad dtype %d", (int)dt);
    expect_store(dt, buf, i, v);
}

double exact_get(chorus_dtype_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case CHORUS_INT8: return ((const int8_t *)buf)[i];
    case CHORUS_UINT8: return ((const uint8_t *)buf)[i];
    case CHORUS_INT32: return ((const int32_t *)buf)[i];
    case CHORUS_UINT32: return ((const uint32_t *)buf)[i];
    case CHORUS_INT64: return (double)((const int64_t *)buf)[i];
    case CHORUS_UINT64: return (double)((const uint64_t *)buf)[i];
    case CHORUS_FLOAT16: return chorus__half_to_float(((const uint16_t *)buf)[i]);
    case CHORUS_BFLOAT16: return chorus__bf16_to_float(((const uint16_t *)buf)[i]);
    case CHORUS_FLOAT32: return ((const float *)buf)[i];
    case CHORUS_FLOAT64: return ((const double *)buf)[i];
    default: cr_assert_fail("bad dtype %d", (int)dt);
    }
    return 0;
}

double exact_input(chorus_op_t op, chorus_dtype_t dt, int p, int r, size_t i)
{
    int u = exact_is_unsigned(dt);
    long m;

    switch (op) {
    case CHORUS_SUM:
        return u ? (double)((r + i) % 4) : (double)((long)((r + i) % 6) - 2);
    case CHORUS_PROD:
        if (i % 3 == 0 && r == (int)(i % (size_t)p))
            return 2;
        if (i % 3 == 1 && r == (int)((i * 7 + 3) % (size_t)p))
            return u ? 3 : -1;
        return 1;
    case CHORUS_MIN:
    case CHORUS_MAX:
        m = (long)((r + i) % (size_t)p) * 3;
        return u ? (double)m : (double)(m - 5);
    case CHORUS_AVG:
        /* Rank 0 carries p - 1 extra, every other rank one less: the sum is p * m. */
        m = 1 + (long)(i % 3);
        return r == 0 ? (double)(m + p - 1) : (double)(m - 1);
    default:
        cr_assert_fail("bad op %d", (int)op);
    }
    return 0;
}

double exact_expected(chorus_op_t op, chorus_dtype_t dt, int p, size_t i)
{
    double acc = exact_input(op, dt, p, 0, i);

    for (int r = 1; r < p; r++) {
        double x = exact_input(op, dt, p, r, i);

        switch (op) {
        case CHORUS_SUM: case CHORUS_AVG: acc += x; break;
        case CHORUS_PROD: acc *= x; break;
        case CHORUS_MIN: acc = x < acc ? x : acc; break;
        case CHORUS_MAX: acc = x > acc ? x : acc; break;
        default: break;
        }
    }
    return op == CHORUS_AVG ? acc / p : acc;
}
