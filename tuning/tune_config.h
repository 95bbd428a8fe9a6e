/*
 * The selection's variables: CHORUS_TUNE (overrides of the selection,
 * applied by src/coll/select.c) and the cost model's rates.
 */
#ifndef CHORUS_TUNING_TUNE_CONFIG_H
#define CHORUS_TUNING_TUNE_CONFIG_H

#include "chorus.h"
#include "tuning/cost_model.h"
#include "util/config.h"

typedef struct {
    chorus__config_str_t tune;  /* CHORUS_TUNE */
    double alpha_us;            /* CHORUS_TUNE_ALPHA_US */
    double bandwidth_gbs;       /* CHORUS_TUNE_BANDWIDTH_GBS */
    double reduce_gbs;          /* CHORUS_TUNE_REDUCE_GBS */
    double net_alpha_us;        /* CHORUS_TUNE_NET_ALPHA_US */
    double net_bandwidth_gbs;   /* CHORUS_TUNE_NET_BANDWIDTH_GBS */
    int fc_blocks;              /* CHORUS_FC_BLOCKS; 0: the cost model chooses */
} tune_config_t;

/* Most row blocks CHORUS_FC_BLOCKS may ask for. */
#define TUNE_FC_BLOCKS_MAX 64

extern const chorus__config_table_t tune_config_table;

/*
 * The model from config, each rate checked (the first bad one is logged);
 * chunk_bytes 0 keeps the default chunk.
 */
chorus_status_t tune_model_from_config(const tune_config_t *config, size_t chunk_bytes,
                                       tune_model_t *model_p);

#endif
