/* Sizes as the perf tools read them (chorus-perf, chorus-train-step). */
#ifndef CHORUS_PERF_SIZE_H
#define CHORUS_PERF_SIZE_H

#include <stddef.h>

/* "8", "64K", "64M", "1G" (powers of 1024) to bytes; -1 when invalid. */
int perf_parse_size(const char *text, size_t *bytes_p);

#endif
