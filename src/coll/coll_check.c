/* Argument checks shared by the builders: block layouts (ring, pairwise), job layouts (hier). */
#include "coll/coll.h"

#include <stdint.h>

#include "util/log.h"

chorus_status_t coll_check_blocks(const coll_args_t *a, const char *alg, int reduces,
                                  int per_rank, size_t *esize_p)
{
    size_t esize = chorus_dtype_size(a->dtype);
    size_t blocks = per_rank && a->size > 0 ? (size_t)a->size : 1;

    if (esize == 0 || (reduces && (unsigned)a->op >= CHORUS_OP_COUNT)) {
        chorus_error("%s: invalid dtype %d or op %d", alg, (int)a->dtype, (int)a->op);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->size < 1 || a->rank < 0 || a->rank >= a->size) {
        chorus_error("%s: invalid rank %d of size %d", alg, a->rank, a->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->count > SIZE_MAX / esize / blocks) {
        chorus_error("%s: count %zu x %zu blocks overflows", alg, a->count, blocks);
        return CHORUS_ERR_INVALID_ARG;
    }
    *esize_p = esize;
    return CHORUS_OK;
}

chorus_status_t coll_check_layout(const coll_args_t *a, const coll_env_t *env, const char *alg,
                                  int needs_send)
{
    const topo_layout_t *l = env != NULL ? env->layout : NULL;

    if (l == NULL || l->size != a->size) {
        chorus_error("%s: rank %d has no layout of %d ranks (layout of %d)", alg, a->rank,
                     a->size, l != NULL ? l->size : 0);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->count > 0 && (a->recvbuf == NULL || (needs_send && a->sendbuf == NULL))) {
        chorus_error("%s: rank %d has a NULL %s for count %zu", alg, a->rank,
                     a->recvbuf == NULL ? "recvbuf" : "sendbuf", a->count);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}
