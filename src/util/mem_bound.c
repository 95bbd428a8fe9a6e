/* How large a buffer of this process can be: see mem_bound.h. */
#include "util/mem_bound.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>

/*
 * Below this size the limit on mapped memory is not read: a process whose
 * RLIMIT_AS is smaller could not hold its own code and stacks, so no buffer
 * under it is refused by the limit and the common call costs no system call.
 */
#define MEM_RLIMIT_FROM ((size_t)64 << 10)

size_t chorus__mem_space_end(void)
{
    static _Atomic size_t end;
    size_t e = atomic_load_explicit(&end, memory_order_relaxed);
    int here;

    if (e != 0)
        return e;
    /* The main stack is mapped at the top of the user part; threads' stacks lie below it. */
    e = (size_t)(uintptr_t)&here;
    for (unsigned shift = 1; shift < 8 * sizeof(e); shift <<= 1)
        e |= e >> shift;
    if (e != SIZE_MAX)
        e += 1;     /* else the stack is at the very top: the whole space */
    atomic_store_explicit(&end, e, memory_order_relaxed);
    return e;
}

int chorus__mem_fits(const void *buf, size_t bytes)
{
    size_t end = chorus__mem_space_end(), start = (size_t)(uintptr_t)buf;

    if (bytes > (size_t)PTRDIFF_MAX || bytes > end)
        return 0;
    return buf == NULL || (start < end && bytes <= end - start);
}

int chorus__mem_under_limit(size_t bytes)
{
    struct rlimit lim;

    return bytes < MEM_RLIMIT_FROM || getrlimit(RLIMIT_AS, &lim) != 0 ||
           lim.rlim_cur == RLIM_INFINITY || bytes <= lim.rlim_cur;
}
