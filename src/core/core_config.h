/* The core's configuration: read once per communicator from its table. */
#ifndef CHORUS_CORE_CONFIG_H
#define CHORUS_CORE_CONFIG_H

#include "util/config.h"

typedef struct {
    double timeout_s;           /* CHORUS_TIMEOUT */
    size_t chunk_bytes;         /* CHORUS_CHUNK_SIZE */
    chorus__config_str_t transport;  /* CHORUS_TRANSPORT */
    chorus__config_str_t ifaddr;     /* CHORUS_IFADDR */
    double stall_warn_s;        /* CHORUS_STALL_WARN; 0: no stall reports */
    int debug_check;            /* CHORUS_DEBUG_CHECK */
    chorus__config_str_t trace; /* CHORUS_TRACE: file prefix, empty: off */
    size_t trace_events;        /* CHORUS_TRACE_EVENTS */
    int progress_caller;        /* CHORUS_PROGRESS_CALLER */
} chorus__core_config_t;

/* What a job is launched with: read by chorus_comm_create_from_env. */
typedef struct {
    chorus__config_str_t rank;
    chorus__config_str_t size;
    chorus__config_str_t addr;
    chorus__config_str_t secret;
} chorus__launch_config_t;

/* The MPI interposers' own variables (libchorus_pmpi_*.so, src/pmpi). */
typedef struct {
    chorus__config_str_t serve; /* CHORUS_PMPI: auto, all or none */
    int report;                 /* CHORUS_PMPI_REPORT */
} chorus__pmpi_config_t;

extern const chorus__config_table_t chorus__core_config_table;
extern const chorus__config_table_t chorus__launch_config_table;
extern const chorus__config_table_t chorus__pmpi_config_table;

/* Most configuration tables of the library. */
#define CHORUS__CONFIG_TABLES_MAX 32

/*
 * Every table of the library, in the order chorus-info -c and chorus(7)
 * list them: the core's, each built-in transport's, topology's, tuning's.
 * Fills tables (room for max, NULL-terminated); returns how many.
 */
size_t chorus__config_tables(const chorus__config_table_t **tables, size_t max);

#endif
