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
