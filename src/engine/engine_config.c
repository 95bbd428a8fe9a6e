/* The engine's variables (chorus-info -c, chorus(7)). */
#include <stddef.h>

#include "engine/engine.h"

static const chorus__config_var_t engine_vars[] = {
    {"CHORUS_BUCKET_BYTES", "16M",
     "training engine: most bytes of tensors fused into one collective (a larger tensor "
     "goes alone); every rank must use the same value (K, M, G suffixes); "
     "chorus_engine_opts_t.bucket_bytes overrides it",
     chorus__config_parse_size, offsetof(engine_config_t, bucket_bytes)},
    {"CHORUS_CYCLE_MS", "1",
     "training engine: milliseconds between negotiation cycles, in which the ranks agree "
     "which named tensors every rank has submitted; a cycle starts sooner when a bucket's "
     "worth is waiting; cycles with nothing waiting anywhere stretch up to 8 times; "
     "chorus_engine_opts_t.cycle_ms overrides it",
     chorus__config_parse_double, offsetof(engine_config_t, cycle_ms)},
    {"CHORUS_AUTOTUNE", "1",
     "training engine: tune the bucket size (1-64 MiB), the cycle time (0.5-8 ms) and the "
     "TCP streams per peer payload is dealt to (1 to CHORUS_TCP_STREAMS) while it runs, "
     "from the rate its buckets move, the same on every rank (the slowest rank's figure, "
     "agreed in the negotiation); it keeps watching and searches again when the rate "
     "drifts by more than 20 % (the median of five windows); a bucket size or cycle time "
     "the user set (CHORUS_BUCKET_BYTES, CHORUS_CYCLE_MS or chorus_engine_opts_t, on any "
     "rank) is kept as set and not tuned; 0: the settings stay as set or default; every "
     "rank must use the same value",
     chorus__config_parse_bool, offsetof(engine_config_t, autotune)},
    {"CHORUS_AUTOTUNE_WINDOW_MS", "500",
     "training engine, CHORUS_AUTOTUNE: milliseconds of work per sample of the rate, at "
     "least; a sample ends when a training round begins (a tensor's name submitted again), "
     "so it holds whole steps, or after four windows of work without one; every rank must "
     "use the same value",
     chorus__config_parse_double, offsetof(engine_config_t, autotune_window_ms)},
    {"CHORUS_AUTOTUNE_LOG", "",
     "training engine, CHORUS_AUTOTUNE: rank 0 appends every sample to this CSV file "
     "(cycle, seconds, bucket bytes, cycle ms, streams, agreed rate in bytes/s, phase, "
     "rounds the sample holds); every move is also an instant of the CHORUS_TRACE timeline; "
     "perf/autotune_plot.py draws the log",
     chorus__config_parse_string, offsetof(engine_config_t, autotune_log)},
};

const chorus__config_table_t engine_config_table = {
    "engine", "the training engine: buckets and negotiation cycles",
    engine_vars, sizeof(engine_vars) / sizeof(engine_vars[0]),
};
