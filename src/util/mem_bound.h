/*
 * How large a buffer of this process can be. A caller's byte count that no
 * buffer could have is refused before anything is sized by it: an
 * allocation of that size would fail or grow without end, and a loop over
 * it would run off the caller's memory.
 *
 * A buffer fits when it lies inside the user part of the address space (on
 * Linux that part ends at the power of two above the main stack: 2^47 on
 * x86-64 with 4-level paging, 2^48 on arm64), when it spans at most
 * PTRDIFF_MAX bytes (the most that pointer arithmetic in C covers), and
 * when it is no larger than the soft RLIMIT_AS (all the memory the process
 * may map).
 */
#ifndef CHORUS_UTIL_MEM_BOUND_H
#define CHORUS_UTIL_MEM_BOUND_H

#include <stddef.h>

/*
 * 1 when [buf, buf + bytes) lies in the user part of the address space and
 * spans at most PTRDIFF_MAX bytes, else 0. buf may be NULL (the bound on
 * bytes alone, for memory still to be allocated).
 */
int chorus__mem_fits(const void *buf, size_t bytes);

/*
 * 1 when bytes is no larger than the soft RLIMIT_AS, else 0. A call with
 * several buffers asks once, for the largest: the limit bounds each alone.
 */
int chorus__mem_under_limit(size_t bytes);

/* The end of the user part of the address space (computed once). */
size_t chorus__mem_space_end(void);

#endif
