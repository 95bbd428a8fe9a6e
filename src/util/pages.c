/* Large buffers straight from the kernel: see pages.h. */
#include "util/pages.h"

#include <stdlib.h>
#include <sys/mman.h>

void *chorus__pages_alloc(size_t bytes)
{
    void *mem;

    if (bytes < CHORUS_PAGES_MIN)
        return malloc(bytes > 0 ? bytes : 1);
    mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mem == MAP_FAILED ? NULL : mem;
}

void chorus__pages_free(void *mem, size_t bytes)
{
    if (mem == NULL)
        return;
    if (bytes < CHORUS_PAGES_MIN)
        free(mem);
    else
        munmap(mem, bytes);
}
