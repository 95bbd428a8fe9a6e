/* The online autotuner's search (autotune.h). */
#include "tuning/autotune.h"

#include <math.h>
#include <string.h>

static int point_index(const int p[TUNE_DIMS])
{
    return (p[0] * TUNE_VALUES_MAX + p[1]) * TUNE_VALUES_MAX + p[2];
}

static void search_begin(tune_search_t *s)
{
    s->phase = TUNE_SEARCH;
    memcpy(s->best, s->at, sizeof(s->best));
    s->best_rate = -1;
    s->last_dim = 0;
    s->last_dir = 1;
    s->samples = 0;
    memset(s->sum, 0, sizeof(s->sum));
    memset(s->count, 0, sizeof(s->count));
}

void tune_search_init(tune_search_t *s, const int n[TUNE_DIMS], const int start[TUNE_DIMS])
{
    memset(s, 0, sizeof(*s));
    for (int d = 0; d < TUNE_DIMS; d++) {
        s->n[d] = n[d] < 1 ? 1 : n[d] > TUNE_VALUES_MAX ? TUNE_VALUES_MAX : n[d];
        s->at[d] = start[d] < 0 ? 0 : start[d] >= s->n[d] ? s->n[d] - 1 : start[d];
    }
    search_begin(s);
}

/* The best point's first neighbour not measured yet, the last paying step first; 0: none. */
static int next_neighbour(const tune_search_t *s, int next[TUNE_DIMS], int *dim_p, int *dir_p)
{
    for (int k = 0; k < 2 * TUNE_DIMS; k++) {
        int dim = (s->last_dim + k / 2) % TUNE_DIMS;
        int dir = k % 2 == 0 ? s->last_dir : -s->last_dir;

        memcpy(next, s->best, sizeof(s->best));
        next[dim] += dir;
        if (next[dim] < 0 || next[dim] >= s->n[dim] || s->count[point_index(next)] > 0)
            continue;
        *dim_p = dim;
        *dir_p = dir;
        return 1;
    }
    return 0;
}

static double median_of_recent(const tune_search_t *s)
{
    double v[TUNE_WATCH_SAMPLES];

    memcpy(v, s->recent, sizeof(v));
    for (int i = 1; i < TUNE_WATCH_SAMPLES; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];

            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[TUNE_WATCH_SAMPLES / 2];
}

static int watch(tune_search_t *s, double rate)
{
    int slot = s->watched % TUNE_WATCH_SAMPLES;

    /* A rate leaving the recent ones joins the reference (the first ones are in it already). */
    if (s->watched >= 2 * TUNE_WATCH_SAMPLES) {
        s->reference_sum += s->recent[slot];
        s->reference_n++;
    }
    s->recent[slot] = rate;
    s->watched++;
    if (s->watched < TUNE_WATCH_SAMPLES)
        return 0;
    if (s->watched == TUNE_WATCH_SAMPLES) {
        s->reference_sum = 0;
        for (int i = 0; i < TUNE_WATCH_SAMPLES; i++)
            s->reference_sum += s->recent[i];
        s->reference_n = TUNE_WATCH_SAMPLES;
    }
    s->reference = s->reference_sum / s->reference_n;
    if (s->watched == TUNE_WATCH_SAMPLES)
        return 0;
    if (fabs(median_of_recent(s) - s->reference) > TUNE_DRIFT * s->reference) {
        /* The ground moved: search again, measuring from here. */
        search_begin(s);
        s->reference = 0;
        s->watched = 0;
    }
    return 0;
}

/*
 * The measured point of the highest mean, the best one on a tie (taken
 * again, the best's samples may have lowered its mean below another's).
 */
static void best_of_measured(tune_search_t *s)
{
    int p[TUNE_DIMS], b = point_index(s->best);

    s->best_rate = s->sum[b] / s->count[b];
    for (p[0] = 0; p[0] < s->n[0]; p[0]++)
        for (p[1] = 0; p[1] < s->n[1]; p[1]++)
            for (p[2] = 0; p[2] < s->n[2]; p[2]++) {
                int i = point_index(p);

                if (s->count[i] > 0 && s->sum[i] / s->count[i] > s->best_rate) {
                    s->best_rate = s->sum[i] / s->count[i];
                    memcpy(s->best, p, sizeof(p));
                }
            }
}

int tune_search_feed(tune_search_t *s, double rate)
{
    int next[TUNE_DIMS], dim, dir, moved, at = point_index(s->at);
    double mean;

    if (!(rate >= 0))
        return 0; /* not a rate: nothing learnt */
    if (s->phase == TUNE_WATCH)
        return watch(s, rate);
    s->samples++;
    s->sum[at] += rate;
    s->count[at]++;
    mean = s->sum[at] / s->count[at];
    if (memcmp(s->at, s->best, sizeof(s->best)) == 0 && s->count[at] > 1) {
        best_of_measured(s);    /* the best measured again: it may have lost its lead */
    } else if (mean > s->best_rate) {
        /* A step that paid: keep going that way first. */
        for (int d = 0; d < TUNE_DIMS; d++)
            if (s->at[d] != s->best[d]) {
                s->last_dim = d;
                s->last_dir = s->at[d] > s->best[d] ? 1 : -1;
            }
        memcpy(s->best, s->at, sizeof(s->best));
        s->best_rate = mean;
    }
    if (next_neighbour(s, next, &dim, &dir)) {
        memcpy(s->at, next, sizeof(next));
        return 1;
    }
    moved = memcmp(s->at, s->best, sizeof(s->best)) != 0;
    memcpy(s->at, s->best, sizeof(s->best));
    if (s->count[point_index(s->best)] < TUNE_CONFIRM_SAMPLES)
        return moved;           /* measure the best again before settling on it */
    /* Every neighbour of the best is measured, and it held its lead: settle there. */
    s->phase = TUNE_WATCH;
    s->reference = 0;
    s->watched = 0;
    return moved;
}
