/* The table of transports built into chorus, looked up by name. */
#include "transports/base/transport.h"

#include <string.h>

static const tl_ops_t *const tl_all[] = {
    &tl_tcp_ops,
};

const tl_ops_t *tl_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(tl_all) / sizeof(tl_all[0]); i++) {
        if (strcmp(tl_all[i]->name, name) == 0)
            return tl_all[i];
    }
    return NULL;
}
