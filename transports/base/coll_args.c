/* Names of the collectives and memory types; the bytes and elements a call moves. */
#include "transports/base/coll_args.h"

#include <strings.h>

static const char *const coll_type_names[COLL_TYPE_COUNT] = {
    [COLL_ALLREDUCE] = "allreduce",
    [COLL_ALLGATHER] = "allgather",
    [COLL_BROADCAST] = "broadcast",
    [COLL_REDUCE_SCATTER] = "reduce_scatter",
    [COLL_REDUCE] = "reduce",
    [COLL_ALLTOALL] = "alltoall",
    [COLL_BARRIER] = "barrier",
};

static const char *const coll_mem_names[COLL_MEM_TYPE_COUNT] = {
    [COLL_MEM_HOST] = "host",
    [COLL_MEM_CUDA] = "cuda",
};

const char *coll_type_name(coll_type_t coll)
{
    return (unsigned)coll < COLL_TYPE_COUNT ? coll_type_names[coll] : NULL;
}

coll_type_t coll_type_from_name(const char *name)
{
    for (int c = 0; name != NULL && c < COLL_TYPE_COUNT; c++) {
        if (strcasecmp(name, coll_type_names[c]) == 0)
            return (coll_type_t)c;
    }
    return COLL_TYPE_COUNT;
}

const char *coll_mem_name(coll_mem_t mem)
{
    return (unsigned)mem < COLL_MEM_TYPE_COUNT ? coll_mem_names[mem] : NULL;
}

size_t coll_args_bytes(const coll_args_t *args)
{
    size_t bytes = args->count * chorus_dtype_size(args->dtype);

    switch (args->coll) {
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL:
        return bytes * (size_t)args->size;
    case COLL_BARRIER:
        return 0;
    default:
        return bytes;
    }
}

void coll_args_elems(const coll_args_t *a, size_t n, size_t elems[2])
{
    elems[0] = elems[1] = a->count;
    switch (a->coll) {
    case COLL_ALLGATHER:
        elems[1] = a->count * n;
        break;
    case COLL_REDUCE_SCATTER:
        elems[0] = a->count * n;
        break;
    case COLL_ALLTOALL:
        elems[0] = elems[1] = a->count * n;
        break;
    case COLL_BARRIER:
        elems[0] = elems[1] = 0;
        break;
    default:
        break;
    }
}
