/* The selection's variables and the model they give. */
#include "tuning/tune_config.h"

#include <math.h>
#include <stddef.h>

#include "util/log.h"

static const chorus__config_var_t tune_config_vars[] = {
    {
        .name = "CHORUS_TUNE",
        .default_value = "",
        .help = "overrides of the algorithm selection: coll=alg[@lo-hi],... with sizes in "
                "bytes (K, M, G suffixes; an empty hi means no bound), e.g. "
                "allreduce=rd@0-64K,broadcast=chain; chorus-info prints the table; and "
                "fc_weight_grad=late|allreduce|auto, chorus_fc_weight_grad's strategy",
        .parse = chorus__config_parse_string,
        .offset = offsetof(tune_config_t, tune),
    },
    {
        .name = "CHORUS_TUNE_ALPHA_US",
        .default_value = "30",
        .help = "cost model: latency of one message, in microseconds",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, alpha_us),
    },
    {
        .name = "CHORUS_TUNE_BANDWIDTH_GBS",
        .default_value = "2",
        .help = "cost model: bandwidth of one link, in GB/s (1e9 bytes per second)",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, bandwidth_gbs),
    },
    {
        .name = "CHORUS_TUNE_REDUCE_GBS",
        .default_value = "4",
        .help = "cost model: reduction speed, in GB/s of input reduced",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, reduce_gbs),
    },
    {
        .name = "CHORUS_FC_BLOCKS",
        .default_value = "0",
        .help = "chorus_fc_weight_grad, late-multiply: row blocks whose gathers are pipelined "
                "with their products, 1 to 64; 0: the cost model chooses (1 to 8)",
        .parse = chorus__config_parse_int,
        .offset = offsetof(tune_config_t, fc_blocks),
    },
    {
        .name = "CHORUS_TUNE_NET_ALPHA_US",
        .default_value = "50",
        .help = "cost model, ranks on several nodes: latency of one message between nodes, "
                "in microseconds",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, net_alpha_us),
    },
    {
        .name = "CHORUS_TUNE_NET_BANDWIDTH_GBS",
        .default_value = "1.25",
        .help = "cost model, ranks on several nodes: bandwidth of one node's network link in "
                "GB/s, shared by the node's ranks (CHORUS_TUNE_BANDWIDTH_GBS is then the link "
                "between ranks of one node)",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, net_bandwidth_gbs),
    },
};

const chorus__config_table_t tune_config_table = {
    .component = "tune",
    .description = "algorithm selection",
    .vars = tune_config_vars,
    .count = sizeof(tune_config_vars) / sizeof(tune_config_vars[0]),
};

/* A rate variable: finite, and above 0 (rates) or at least 0 (latencies). */
static int rate_valid(const char *name, double v, int positive)
{
    if (isfinite(v) && (positive ? v > 0.0 : v >= 0.0))
        return 1;
    chorus_error("invalid %s %g: must be %s", name, v, positive ? "above 0" : "0 or more");
    return 0;
}

chorus_status_t tune_model_from_config(const tune_config_t *config, size_t chunk_bytes,
                                       tune_model_t *model_p)
{
    if (!rate_valid("CHORUS_TUNE_ALPHA_US", config->alpha_us, 0) ||
        !rate_valid("CHORUS_TUNE_BANDWIDTH_GBS", config->bandwidth_gbs, 1) ||
        !rate_valid("CHORUS_TUNE_REDUCE_GBS", config->reduce_gbs, 1) ||
        !rate_valid("CHORUS_TUNE_NET_ALPHA_US", config->net_alpha_us, 0) ||
        !rate_valid("CHORUS_TUNE_NET_BANDWIDTH_GBS", config->net_bandwidth_gbs, 1))
        return CHORUS_ERR_INVALID_ARG;
    tune_model_default(model_p);
    model_p->net_alpha = config->net_alpha_us * 1e-6;
    model_p->net_beta = 1.0 / (config->net_bandwidth_gbs * 1e9);
    model_p->alpha = config->alpha_us * 1e-6;
    model_p->beta = 1.0 / (config->bandwidth_gbs * 1e9);
    model_p->gamma = 1.0 / (config->reduce_gbs * 1e9);
    model_p->chunk_bytes = chunk_bytes ? chunk_bytes : TUNE_DEFAULT_CHUNK_BYTES;
    return CHORUS_OK;
}
