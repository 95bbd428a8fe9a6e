/*
 * What the fuzz targets need of the library besides the files they compile:
 * status names, which only log messages use (src/core/status.c needs the
 * configure header).
 */
#include <stddef.h>

#include "chorus.h"

const char *chorus_status_string(chorus_status_t status)
{
    return status == CHORUS_OK ? "success" : "an error";
}
