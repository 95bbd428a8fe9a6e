/* The training engine's variables (engine_config.c), for the core's list of tables. */
#ifndef CHORUS_ENGINE_CONFIG_H
#define CHORUS_ENGINE_CONFIG_H

#include <stddef.h>

#include "util/config.h"

typedef struct {
    size_t bucket_bytes;        /* CHORUS_BUCKET_BYTES */
    double cycle_ms;            /* CHORUS_CYCLE_MS */
    int autotune;               /* CHORUS_AUTOTUNE */
    double autotune_window_ms;  /* CHORUS_AUTOTUNE_WINDOW_MS */
    chorus__config_str_t autotune_log;  /* CHORUS_AUTOTUNE_LOG */
} engine_config_t;

extern const chorus__config_table_t engine_config_table;

#endif
