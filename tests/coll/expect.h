/*
 * Inputs whose exact collective result is known whatever the reduction
 * order: small integers for sum and avg, ones with a single 2 or -1 for
 * prod, distinct small values for min and max. Every value and every result
 * is exact in every dtype, float16 and int8 included, for up to 64 ranks.
 */
#ifndef CHORUS_TEST_EXPECT_H
#define CHORUS_TEST_EXPECT_H

#include <stddef.h>
#include "chorus.h"

/* Rank r's input element i for op. */
double expect_input(chorus_op_t op, chorus_dtype_t dtype, int r, size_t i);
/* The reduction over p ranks of element i, before AVG's division. */
double expect_reduced(chorus_op_t op, chorus_dtype_t dtype, int p, size_t i);

/* Store v (exactly representable, or an AVG quotient) as element i of buf. */
void expect_store(chorus_dtype_t dtype, void *buf, size_t i, double v);
/* Store the AVG result sum / p for element i, rounded as chorus rounds it. */
void expect_store_avg(chorus_dtype_t dtype, void *buf, size_t i, double sum, int p);

/* Fill count elements of rank r's input for op. */
void expect_fill(chorus_op_t op, chorus_dtype_t dtype, int r, void *buf, size_t count,
                 size_t first_index);
/* Fill count elements with the expected reduction over p ranks. */
void expect_fill_reduced(chorus_op_t op, chorus_dtype_t dtype, int p, void *buf, size_t count,
                         size_t first_index);
/*
 * Count elements of got that differ from want (bitwise, element by element);
 * the first difference is printed with label.
 */
size_t expect_compare(chorus_dtype_t dtype, const void *got, const void *want, size_t count,
                      const char *label);

#endif
