/*
 * The online autotuner's search (autotune.c): a pure function of the rates
 * it is fed, so every rank fed the same agreed rates moves to the same
 * points at the same samples, without a coordinator.
 *
 * A point is an index into each dimension's values (the caller's: bucket
 * sizes, cycle times, streams). The search measures the current point,
 * then the unmeasured neighbours of the best point so far (one step along
 * one dimension, the direction that last paid first), until every
 * neighbour of the best is measured. Then it measures the best again, up to
 * TUNE_CONFIRM_SAMPLES in all, since a point's single sample may have been
 * lucky: a point's figure is the mean of its samples, and when that mean
 * falls below another point's, the search goes on from that one. Once the
 * best point's neighbours are all measured and it holds its lead over its
 * confirming samples, the search settles there and watches. Its
 * reference is the mean of every rate there but the last
 * TUNE_WATCH_SAMPLES (at first, of the first TUNE_WATCH_SAMPLES), so it
 * steadies as the watch goes on; when the median of the last
 * TUNE_WATCH_SAMPLES moves away from it by more than
 * TUNE_DRIFT (a link slowed, another job started: TUNE_DRIFT_SAMPLES of
 * them changed), it searches again from where it is. A median, not a run
 * of samples in a row, so that the noise of single samples (a window holds
 * only a few training steps) neither starts a search nor hides a shift.
 */
#ifndef CHORUS_TUNING_AUTOTUNE_H
#define CHORUS_TUNING_AUTOTUNE_H

#define TUNE_DIMS 3
#define TUNE_VALUES_MAX 8
#define TUNE_POINTS (TUNE_VALUES_MAX * TUNE_VALUES_MAX * TUNE_VALUES_MAX)
#define TUNE_CONFIRM_SAMPLES 2
#define TUNE_DRIFT 0.20
#define TUNE_DRIFT_SAMPLES 3
#define TUNE_WATCH_SAMPLES (2 * TUNE_DRIFT_SAMPLES - 1)

typedef enum { TUNE_SEARCH = 0, TUNE_WATCH } tune_phase_t;

typedef struct {
    int n[TUNE_DIMS];           /* values in each dimension, 1..TUNE_VALUES_MAX */
    int at[TUNE_DIMS];          /* the point the next rate is measured at */
    tune_phase_t phase;
    int best[TUNE_DIMS];        /* SEARCH: the point of the highest mean rate so far */
    double best_rate;           /* its mean */
    int last_dim, last_dir;     /* the step that last found a better point */
    double reference;           /* WATCH: the mean of the rates before the recent ones */
    double reference_sum;       /* WATCH: their sum */
    int reference_n;            /* WATCH: and count */
    double recent[TUNE_WATCH_SAMPLES]; /* WATCH: the last rates, oldest overwritten */
    int watched;                /* WATCH: rates fed since it settled */
    int samples;                /* rates fed since this search began */
    double sum[TUNE_POINTS];    /* of the rates measured at each point in this search */
    int count[TUNE_POINTS];     /* rates measured there; 0: not yet */
} tune_search_t;

/* Start searching at `start` over n[d] values per dimension (out-of-range counts clamp). */
void tune_search_init(tune_search_t *s, const int n[TUNE_DIMS], const int start[TUNE_DIMS]);
/* The rate measured at s->at (bytes per second); returns 1 when s->at moved. */
int tune_search_feed(tune_search_t *s, double rate);

#endif
