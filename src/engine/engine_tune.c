/*
 * The engine's online autotuner (CHORUS_AUTOTUNE). A sample is the rate the
 * buckets moved over whole training rounds: a round begins when a name
 * goes into a bucket a second time since the last one began, which happens
 * at the same cycle on every rank (every rank takes the same names in the
 * same cycle). At such a cycle the ranks take the minimum, on the
 * negotiation communicator, of two figures: the time since the last sample
 * and the rate over it, counting the bytes of the rounds that ended (the
 * names of one round may go in several cycles, on either side of a look). Once even the slowest clock has run a window
 * (CHORUS_AUTOTUNE_WINDOW_MS), the slowest rank's rate is a sample, fed to
 * the same search (tuning/autotune.h) on every rank: all change their
 * bucket size and cycle time at the same cycle, and buckets stay cut alike.
 * A sample of whole rounds holds no part of a step, so a window of one or
 * two steps is as steady as the steps are. Work without rounds (no name
 * comes back, or a round longer than TUNE_ROUNDLESS_WINDOWS windows) is
 * sampled by time alone, looked at every TUNE_CHECK_CYCLES cycles.
 *
 * The third dimension is the streams per peer the network transport deals
 * payload to, from 1 to the fewest any rank opens (agreed when the engine
 * is created): a bound on the transport, which takes it from its next
 * fragment on; ranks need not switch it together. Every sample goes to
 * rank 0's log (CHORUS_AUTOTUNE_LOG) and every move to the trace
 * (CHORUS_TRACE), on the engine's communicator's track.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_trace.h"
#include "engine/engine.h"
#include "util/log.h"
#include "util/time.h"

static const size_t tune_buckets[] = {1u << 20, 2u << 20, 4u << 20, 8u << 20,
                                      16u << 20, 32u << 20, 64u << 20};
static const double tune_cycles_ms[] = {0.5, 1, 2, 4, 8};
#define NBUCKETS ((int)(sizeof(tune_buckets) / sizeof(tune_buckets[0])))
#define NCYCLES ((int)(sizeof(tune_cycles_ms) / sizeof(tune_cycles_ms[0])))
/* Cycles between looks at whether a window of work without rounds is over. */
#define TUNE_CHECK_CYCLES 10
/* Windows without a round after which a sample is taken by time alone. */
#define TUNE_ROUNDLESS_WINDOWS 4

/* The value of a list nearest to x, as an index (ratios: the values double). */
static int nearest(const double *values, int n, double x)
{
    int best = 0;

    for (int i = 1; i < n; i++)
        if (fabs(log(values[i] / x)) < fabs(log(values[best] / x)))
            best = i;
    return best;
}

static int nearest_bucket(size_t bytes)
{
    double buckets[NBUCKETS];

    for (int i = 0; i < NBUCKETS; i++)
        buckets[i] = (double)tune_buckets[i];
    return nearest(buckets, NBUCKETS, (double)bytes);
}

chorus_status_t engine_tune_init(chorus_engine_t engine, const engine_config_t *cfg)
{
    if (!cfg->autotune)
        return CHORUS_OK;
    if (!(cfg->autotune_window_ms >= 1 && cfg->autotune_window_ms <= 600000)) {
        chorus_error("rank %d: CHORUS_AUTOTUNE_WINDOW_MS=%g is not in [1, 600000]",
                     engine->rank, cfg->autotune_window_ms);
        return CHORUS_ERR_INVALID_ARG;
    }
    engine->tune = malloc(sizeof(*engine->tune));
    if (engine->tune == NULL)
        return CHORUS_ERR_NO_MEMORY;
    engine->tune_window_s = cfg->autotune_window_ms / 1000.0;
    if (engine->rank == 0 && cfg->autotune_log.s[0] != '\0') {
        engine->tune_log = fopen(cfg->autotune_log.s, "a");
        if (engine->tune_log == NULL) {
            chorus_error("rank 0: CHORUS_AUTOTUNE_LOG=%s: %s", cfg->autotune_log.s,
                         strerror(errno));
            return CHORUS_ERR_INVALID_ARG;
        }
        fprintf(engine->tune_log,
                "cycle,seconds,bucket_bytes,cycle_ms,streams,rate,phase,rounds\n");
    }
    /* Names start in round 0: the first one taken is no repeat. */
    engine->tune_round = engine->tune_round_seen = engine->tune_mark_round = 1;
    return CHORUS_OK;
}

/* The engine takes the search's point at: the settings it tunes, and the streams. */
static void tune_take(chorus_engine_t engine, const int at[TUNE_DIMS])
{
    pthread_mutex_lock(&engine->lock);
    if (!(engine->tune_keep & ENGINE_KEEP_BUCKET))
        engine->bucket_bytes = tune_buckets[at[0]];
    if (!(engine->tune_keep & ENGINE_KEEP_CYCLE))
        engine->cycle_s = tune_cycles_ms[at[1]] / 1000.0;
    pthread_mutex_unlock(&engine->lock);
    chorus__ctx_net_streams(engine->comm->ctx, at[2] + 1);
}

void engine_tune_start(chorus_engine_t engine, int streams)
{
    int keep_bucket = (engine->tune_keep & ENGINE_KEEP_BUCKET) != 0;
    int keep_cycle = (engine->tune_keep & ENGINE_KEEP_CYCLE) != 0;
    /* A kept setting is a dimension of one value: the search never moves along it. */
    int n[TUNE_DIMS] = {keep_bucket ? 1 : NBUCKETS, keep_cycle ? 1 : NCYCLES, streams};
    int start[TUNE_DIMS] = {
        keep_bucket ? 0 : nearest_bucket(engine->bucket_bytes),
        keep_cycle ? 0 : nearest(tune_cycles_ms, NCYCLES, engine->cycle_s * 1000.0),
        streams - 1};

    if (engine->tune == NULL)
        return;
    if (n[0] * n[1] * n[2] == 1) {
        chorus_debug("rank %d: autotune: bucket size and cycle time set by the user, one "
                     "network stream: nothing to tune", engine->rank);
        engine_tune_free(engine);
        return;
    }
    /* The grid's point nearest the settings, with all the streams opened, as without it. */
    tune_take(engine, start);
    tune_search_init(engine->tune, n, start);
    engine->tune_t0 = engine->tune_mark_t = chorus__now();
}

void engine_tune_free(chorus_engine_t engine)
{
    /* The context's other calls go back to every stream opened. */
    if (engine->tune != NULL)
        chorus__ctx_net_streams(engine->comm->ctx, INT_MAX);
    if (engine->tune_log != NULL)
        fclose(engine->tune_log);
    engine->tune_log = NULL;
    free(engine->tune);
    engine->tune = NULL;
}

void engine_tune_taken(chorus_engine_t engine, engine_name_t *e, size_t bytes)
{
    if (engine->tune == NULL)
        return;
    if (e->tune_round == engine->tune_round) {
        engine->tune_round++;
        engine->tune_round_bytes = engine->tune_taken_bytes;
    }
    e->tune_round = engine->tune_round;
    engine->tune_taken_bytes += bytes;
}

/*
 * The search moved to s->at, or changed phase (was_phase before): the
 * engine takes the point, and the trace shows the decision.
 */
static void tune_move(chorus_engine_t engine, const tune_search_t *s, tune_phase_t was_phase,
                      double rate)
{
    const char *what = s->phase == TUNE_WATCH    ? "settled on"
                       : was_phase == TUNE_WATCH ? "the rate drifted, searching again from"
                                                 : "trying";
    char text[160];

    tune_take(engine, s->at);
    snprintf(text, sizeof(text), "%s buckets of %zu bytes every %g ms, %d streams (last "
             "sample %.0f bytes/s)", what, engine->bucket_bytes, engine->cycle_s * 1000.0,
             s->at[2] + 1, rate);
    chorus_debug("rank %d: autotune: %s", engine->rank, text);
    if (engine->comm->ctx->trace != NULL)
        chorus__trace_note(engine->comm, "autotune", "autotune", text);
}

chorus_status_t engine_tune_cycle(chorus_engine_t engine)
{
    tune_search_t *s = engine->tune;
    double now, need, mine[2], agreed[2];
    uint64_t rounds, upto;
    tune_phase_t was_phase;
    chorus_status_t status;

    if (s == NULL)
        return CHORUS_OK;
    rounds = engine->tune_round - engine->tune_mark_round;
    if (engine->tune_round != engine->tune_round_seen) {
        /* A round began in this cycle: the rounds before it are whole. */
        need = engine->tune_window_s;
        upto = engine->tune_round_bytes;
    } else if (rounds == 0 && engine->counters.cycles % TUNE_CHECK_CYCLES == 0) {
        need = TUNE_ROUNDLESS_WINDOWS * engine->tune_window_s;
        upto = engine->tune_taken_bytes;
    } else {
        return CHORUS_OK;
    }
    engine->tune_round_seen = engine->tune_round;
    now = chorus__now();
    mine[0] = now - engine->tune_mark_t;
    mine[1] = (double)(upto - engine->tune_mark_bytes) / mine[0];
    status = chorus_allreduce(mine, agreed, 2, CHORUS_FLOAT64, CHORUS_MIN, engine->neg, NULL);
    if (status != CHORUS_OK || agreed[0] < need)
        return status;
    engine->tune_mark_t = now;
    engine->tune_mark_bytes = upto;
    engine->tune_mark_round = engine->tune_round;
    /* A window in which some rank moved nothing says nothing about the settings. */
    if (!(agreed[1] > 0))
        return CHORUS_OK;
    if (engine->tune_log != NULL)
        fprintf(engine->tune_log, "%llu,%.6f,%zu,%g,%d,%.0f,%s,%llu\n",
                (unsigned long long)engine->counters.cycles, now - engine->tune_t0,
                engine->bucket_bytes, engine->cycle_s * 1000.0, s->at[2] + 1, agreed[1],
                s->phase == TUNE_SEARCH ? "search" : "watch", (unsigned long long)rounds);
    was_phase = s->phase;
    if (tune_search_feed(s, agreed[1]) || s->phase != was_phase)
        tune_move(engine, s, was_phase, agreed[1]);
    if (engine->tune_log != NULL)
        fflush(engine->tune_log);
    return CHORUS_OK;
}
