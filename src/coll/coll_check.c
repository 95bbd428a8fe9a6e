/* Argument checks shared by the block-layout builders (ring, pairwise). */
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
