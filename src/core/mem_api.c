/*
 * chorus_mem_alloc and chorus_mem_free: the argument checks around the
 * shareable allocations of util/shared_mem.c, which the node team's
 * collectives map in each other's processes.
 */
#include "core/comm.h"
#include "util/log.h"
#include "util/shared_mem.h"

chorus_status_t chorus_mem_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p)
{
    if (ptr_p == NULL) {
        chorus_error("chorus_mem_alloc: invalid argument ptr_p=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    *ptr_p = NULL;
    if (comm == NULL) {
        chorus_error("chorus_mem_alloc: invalid argument comm=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    return chorus__shared_alloc(bytes, ptr_p);
}

chorus_status_t chorus_mem_free(chorus_comm_t comm, void *ptr)
{
    if (comm == NULL) {
        chorus_error("chorus_mem_free: invalid argument comm=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (ptr == NULL)
        return CHORUS_OK;
    return chorus__shared_free(ptr);
}
