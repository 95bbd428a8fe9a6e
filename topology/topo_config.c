/* Configuration of the topology map, and the map as configured. */
#include <stddef.h>

#include "topology/topo.h"
#include "util/log.h"

static const chorus__config_var_t topo_vars[] = {
    {"CHORUS_TOPO_FILE", "",
     "hwloc XML file describing this node (from lstopo --of xml or CHORUS_TOPO_DUMP_FILE), "
     "read instead of discovering the machine; NVLinks are info attributes of the GPUs "
     "(read by chorus-info --topo; communicators do not build the map yet)",
     chorus__config_parse_string, offsetof(topo_config_t, file)},
    {"CHORUS_TOPO_DUMP_FILE", "",
     "write the topology map (discovered or loaded) to this file as hwloc XML, "
     "NVLinks included, so that it can be read back with CHORUS_TOPO_FILE "
     "(written by chorus-info --topo)",
     chorus__config_parse_string, offsetof(topo_config_t, dump_file)},
};

const chorus__config_table_t topo_config_table = {
    "topology", "discovery of packages, caches, GPUs, NICs and NVLink (hwloc, NVML)",
    topo_vars, sizeof(topo_vars) / sizeof(topo_vars[0]),
};

chorus_status_t topo_node_create(const topo_config_t *cfg, topo_node_t **node_p)
{
    topo_node_t *node;
    chorus_status_t st;

    st = cfg->file.s[0] ? topo_node_load(cfg->file.s, &node) : topo_node_discover(&node);
    if (st != CHORUS_OK)
        return st;
    /* A dump is a diagnostic aid: failing to write it must not stop the job. */
    if (cfg->dump_file.s[0] && topo_node_dump(node, cfg->dump_file.s) != CHORUS_OK)
        chorus_warn("continuing without the dump to %s", cfg->dump_file.s);
    *node_p = node;
    return CHORUS_OK;
}
