/*
 * What the fuzz targets need of the library besides the files they compile:
 * the list of config tables, which lives with the core (core_config.c) and
 * which no fuzzed function reads, and status names, which only log messages
 * use (src/core/status.c needs the configure header).
 */
#include <stddef.h>

#include "chorus.h"
#include "util/config.h"

const char *chorus_status_string(chorus_status_t status)
{
    return status == CHORUS_OK ? "success" : "an error";
}

const chorus__config_table_t *const chorus__config_tables[] = {NULL};
