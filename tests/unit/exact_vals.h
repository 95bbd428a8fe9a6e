/*
 * Values for the schedule-simulator tests of the reducing and copying
 * algorithms (test_tree_algs, test_hier_algs): element i of every dtype as a
 * double, and inputs whose exact reduction over p ranks does not depend on
 * the reduction order (small integers for sum and avg, ones with a single 2
 * or -1 for prod, distinct values for min and max).
 */
#ifndef CHORUS_TESTS_EXACT_VALS_H
#define CHORUS_TESTS_EXACT_VALS_H

#include <stddef.h>
#include "chorus.h"

int exact_is_unsigned(chorus_dtype_t dt);
void exact_put(chorus_dtype_t dt, void *buf, size_t i, double v);
double exact_get(chorus_dtype_t dt, const void *buf, size_t i);
/* Rank r's element i for a reduction with op over p ranks. */
double exact_input(chorus_op_t op, chorus_dtype_t dt, int p, int r, size_t i);
/* The result of element i over p ranks (AVG divided). */
double exact_expected(chorus_op_t op, chorus_dtype_t dt, int p, size_t i);

#endif
