/* Lookups over the lists of built-in transports (transports/registry.c). */
#include "transports/base/transport.h"
#include "transports/base/team.h"

#include <string.h>

const tl_ops_t *tl_find(const char *name)
{
    for (size_t i = 0; name != NULL && tl_p2p_all[i] != NULL; i++) {
        if (strcmp(tl_p2p_all[i]->name, name) == 0)
            return tl_p2p_all[i];
    }
    return NULL;
}

int tl_coll_variant_runs(const tl_coll_ops_t *ops, int v, coll_type_t coll, uint32_t flags,
                         int vform)
{
    const tl_coll_variant_t *var;

    if (ops == NULL || v < 0 || v >= ops->nvariants || (unsigned)coll >= COLL_TYPE_COUNT)
        return 0;
    var = &ops->variants[v];
    if (!(var->colls & (1u << coll)) || (flags & (TL_TEAM_OK | var->needs)) !=
                                             (TL_TEAM_OK | var->needs))
        return 0;
    return !vform || var->vforms;
}

int tl_coll_variant_serves(const tl_coll_ops_t *ops, int v, coll_mem_t mem)
{
    uint32_t mems;

    if (ops == NULL || v < 0 || v >= ops->nvariants || (unsigned)mem >= COLL_MEM_TYPE_COUNT)
        return 0;
    mems = ops->variants[v].mems ? ops->variants[v].mems : TL_MEM(COLL_MEM_HOST);
    return (mems & TL_MEM(mem)) != 0;
}
