/*
 * Memory that other processes of the same user on this machine can map:
 * what chorus_mem_alloc hands out. Each allocation is a memfd of its own
 * (no name in any file system, gone with the last mapping, also after
 * SIGKILL), sealed against resizing; its first page is a header naming the
 * allocation, the caller's bytes follow. A process-wide list knows every
 * live allocation, so that any buffer can be looked up; a pending call holds
 * the allocations its buffers lie in, and an allocation that is held cannot
 * be freed.
 *
 * A peer maps an allocation through /proc/<pid>/fd/<fd> from what the owner
 * published about it (chorus__shared_ref_t), and the header proves that the
 * file is the allocation named.
 */
#ifndef CHORUS_UTIL_SHARED_MEM_H
#define CHORUS_UTIL_SHARED_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chorus.h"

/* What a peer needs to map an allocation, as the owner sees it. */
typedef struct {
    int32_t fd;         /* the memfd, in the owner's process */
    uint32_t pad;
    uint64_t id;        /* the allocation's identity, also in its header */
    uint64_t base;      /* the owner's address of its first byte */
    uint64_t bytes;     /* its size as allocated */
} chorus__shared_ref_t;

/* A new allocation of bytes (> 0), zeroed. */
chorus_status_t chorus__shared_alloc(size_t bytes, void **ptr_p);
/* Free what chorus__shared_alloc returned: INVALID_ARG when ptr is not that, IN_USE when held. */
chorus_status_t chorus__shared_free(void *ptr);
/* Whether [ptr, ptr + bytes) lies in one allocation; *ref (may be NULL) then names it. */
int chorus__shared_find(const void *ptr, size_t bytes, chorus__shared_ref_t *ref);
/* Hold the allocation ptr lies in (NULL: none); release the handle when done. */
void *chorus__shared_hold(const void *ptr);
void chorus__shared_release(void *held);
/* Live allocations in this process (for tests and chorus-info). */
size_t chorus__shared_count(void);

/*
 * Map the allocation ref of process pid here. *ptr_p is its first byte;
 * unmap with chorus__shared_unmap(*ptr_p, ref->bytes). SYSTEM when it
 * cannot be opened; PROTOCOL when the file there is not the allocation ref
 * names (freed, and the descriptor reused).
 */
chorus_status_t chorus__shared_map(pid_t pid, const chorus__shared_ref_t *ref, void **ptr_p);
void chorus__shared_unmap(void *ptr, size_t bytes);

#endif
