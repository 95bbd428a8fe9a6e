/* Built without hwloc: the map cannot be discovered or loaded, and says so. */
#include "topology/topo_internal.h"
#include "util/log.h"

chorus_status_t topo_node_discover(topo_node_t **node_p)
{
    chorus_error("this chorus was built without hwloc; no topology discovery "
                 "(install libhwloc-dev and configure again)");
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t topo_node_from_xml(const char *buf, size_t len, const char *what,
                                   topo_node_t **node_p)
{
    chorus_error("cannot read %s: this chorus was built without hwloc", what);
    return CHORUS_ERR_UNSUPPORTED;
}
