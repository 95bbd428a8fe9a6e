/* Exact expected values for collective tests: see expect.h. */
#include "expect.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reduce/reduce.h"

static int is_unsigned(chorus_dtype_t d)
{
    return d == CHORUS_UINT8 || d == CHORUS_UINT32 || d == CHORUS_UINT64;
}

double expect_input(chorus_op_t op, chorus_dtype_t dtype, int r, size_t i)
{
    switch (op) {
    case CHORUS_PROD:
        /* One rank per element contributes 2 (or -1), the others 1. */
        if ((size_t)r == i % 64 || r == (int)(i % 5))
            return (i % 3 == 1 && !is_unsigned(dtype)) ? -1.0 : (i % 3 == 0 ? 2.0 : 1.0);
        return 1.0;
    case CHORUS_MIN:
    case CHORUS_MAX:
        return (double)((r * 7 + (int)(i % 11)) % 23) - (is_unsigned(dtype) ? 0.0 : 11.0);
    default: /* sum, avg: |sum| <= p, exact in every dtype */
        return (double)((r + (int)(i % 3)) % 3) - (is_unsigned(dtype) ? 0.0 : 1.0);
    }
}

double expect_reduced(chorus_op_t op, chorus_dtype_t dtype, int p, size_t i)
{
    double acc = expect_input(op, dtype, 0, i);

    for (int r = 1; r < p; r++) {
        double v = expect_input(op, dtype, r, i);
        switch (op) {
        case CHORUS_PROD: acc *= v; break;
        case CHORUS_MIN: acc = v < acc ? v : acc; break;
        case CHORUS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    return acc;
}

void expect_store(chorus_dtype_t dtype, void *buf, size_t i, double v)
{
    switch (dtype) {
    case CHORUS_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case CHORUS_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case CHORUS_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case CHORUS_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case CHORUS_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case CHORUS_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case CHORUS_FLOAT16: ((uint16_t *)buf)[i] = chorus__float_to_half((float)v); break;
    case CHORUS_BFLOAT16: ((uint16_t *)buf)[i] = chorus__float_to_bf16((float)v); break;
    case CHORUS_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case CHORUS_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

void expect_store_avg(chorus_dtype_t dtype, void *buf, size_t i, double sum, int p)
{
    switch (dtype) {
    case CHORUS_FLOAT16:
    case CHORUS_BFLOAT16:
    case CHORUS_FLOAT32:
        /* float32 division, then rounding to the storage type, as the kernels do. */
        expect_store(dtype, buf, i, (double)((float)sum / (float)p));
        break;
    case CHORUS_FLOAT64:
        expect_store(dtype, buf, i, sum / p);
        break;
    default:
        /* Integers truncate toward zero. */
        expect_store(dtype, buf, i, (double)((int64_t)sum / p));
        break;
    }
}

/*
 * Every input depends on the element index only through i % 3, i % 5, i % 11
 * and i % 64, so values repeat with this period: large buffers compute one
 * period and copy it, which keeps million-element checks cheap.
 */
#define EXPECT_PERIOD (3 * 5 * 11 * 64)

/* Copy the first period of buf (already filled) over the rest of it. */
static void expect_tile(chorus_dtype_t dtype, void *buf, size_t count)
{
    size_t esize = chorus_dtype_size(dtype);
    char *base = buf;

    for (size_t done = EXPECT_PERIOD; done < count; done += EXPECT_PERIOD) {
        size_t n = count - done < EXPECT_PERIOD ? count - done : EXPECT_PERIOD;
        memcpy(base + done * esize, base, n * esize);
    }
}

void expect_fill(chorus_op_t op, chorus_dtype_t dtype, int r, void *buf, size_t count,
                 size_t first_index)
{
    size_t direct = count < EXPECT_PERIOD ? count : EXPECT_PERIOD;

    for (size_t i = 0; i < direct; i++)
        expect_store(dtype, buf, i, expect_input(op, dtype, r, first_index + i));
    expect_tile(dtype, buf, count);
}

void expect_fill_reduced(chorus_op_t op, chorus_dtype_t dtype, int p, void *buf, size_t count,
                         size_t first_index)
{
    size_t direct = count < EXPECT_PERIOD ? count : EXPECT_PERIOD;

    for (size_t i = 0; i < direct; i++) {
        double v = expect_reduced(op, dtype, p, first_index + i);
        if (op == CHORUS_AVG)
            expect_store_avg(dtype, buf, i, v, p);
        else
            expect_store(dtype, buf, i, v);
    }
    expect_tile(dtype, buf, count);
}

size_t expect_compare(chorus_dtype_t dtype, const void *got, const void *want, size_t count,
                      const char *label)
{
    size_t esize = chorus_dtype_size(dtype), wrong = 0;

    for (size_t i = 0; i < count; i++) {
        const unsigned char *g = (const unsigned char *)got + i * esize;
        const unsigned char *w = (const unsigned char *)want + i * esize;
        if (memcmp(g, w, esize) == 0)
            continue;
        if (wrong++ == 0) {
            uint64_t gv = 0, wv = 0;
            memcpy(&gv, g, esize);
            memcpy(&wv, w, esize);
            fprintf(stderr, "%s: element %zu of %zu: got 0x%" PRIx64 ", want 0x%" PRIx64 "\n",
                    label, i, count, gv, wv);
        }
    }
    return wrong;
}
