/*
 * Large buffers straight from the kernel. Scratch and unexpected-message
 * buffers of multi-MiB messages come and go with the traffic; from malloc
 * they settle in the heap, which keeps freed space resident (resident
 * memory then wanders with the message mix) or trims and faults it in
 * again. Mapped pages are returned at once and their cost is explicit;
 * callers cache the few they reuse.
 */
#ifndef CHORUS_UTIL_PAGES_H
#define CHORUS_UTIL_PAGES_H

#include <stddef.h>

/* Sizes from this up are mapped; smaller ones use malloc. */
#define CHORUS_PAGES_MIN (256u << 10)

/* NULL on failure. Free with chorus__pages_free and the same size. */
void *chorus__pages_alloc(size_t bytes);
void chorus__pages_free(void *mem, size_t bytes);

#endif
