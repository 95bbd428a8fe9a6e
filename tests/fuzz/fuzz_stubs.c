/*
 * What the fuzz targets need of the library besides the files they compile:
 * the list of config tables, which lives with the core (core_config.c) and
 * which no fuzzed function reads.
 */
#include <stddef.h>

#include "util/config.h"

const chorus__config_table_t *const chorus__config_tables[] = {NULL};
