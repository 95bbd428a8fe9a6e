/*
 * UCX transport: what UCX can reach peers over on this machine, for the
 * choices that depend on it (CHORUS_UCX_RNDV=auto).
 */
#include "transports/ucx/ucx.h"

#include <stdlib.h>
#include <string.h>

#include <uct/api/uct.h>

#include "util/log.h"

int tl_ucx_tls_allow_rdma(const char *tls)
{
    static const char *const rdma[] = {"rc", "ud", "dc", "ib"};

    /* Unset, or a list of what to leave out: UCX may take an RDMA device. */
    if (tls == NULL || tls[0] == '\0' || tls[0] == '^')
        return 1;
    /* A list of transports and aliases: one of them is RDMA (rc_mlx5, ud_v, ib, ...) or all. */
    for (const char *t = tls; *t != '\0'; t += strcspn(t, ","), t += *t == ',') {
        size_t n = strcspn(t, ",");

        if (n == 3 && strncmp(t, "all", 3) == 0)
            return 1;
        for (size_t i = 0; i < sizeof(rdma) / sizeof(rdma[0]); i++) {
            if (n >= 2 && strncmp(t, rdma[i], 2) == 0 && (n == 2 || t[2] == '_'))
                return 1;
        }
    }
    return 0;
}

int tl_ucx_rdma_here(void)
{
    uct_component_h *components;
    unsigned n;
    int found = 0;

    if (uct_query_components(&components, &n) != UCS_OK)
        return 0;
    for (unsigned i = 0; i < n && !found; i++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

        /* The verbs component ("ib") lists a memory domain per RDMA device found. */
        if (uct_component_query(components[i], &attr) == UCS_OK &&
            strcmp(attr.name, "ib") == 0 && attr.md_resource_count > 0)
            found = 1;
    }
    uct_release_component_list(components);
    return found;
}

int tl_ucx_offered(void)
{
    return tl_ucx_rdma_here() && tl_ucx_tls_allow_rdma(getenv("UCX_TLS"));
}
