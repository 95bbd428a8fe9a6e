/*
 * chorus-train-step: the gradient exchange of one training step of
 * ResNet-50, with the training engine and without it. Uses the public API
 * only.
 *
 * The program replays ResNet-50's backward pass: its 161 gradient tensors
 * (25,557,032 float32 parameters, built from the architecture and checked at
 * startup), each produced after a gap of simulated compute in proportion to
 * its size, the gaps adding up to --compute-ms per step. The gaps are spent
 * busy-waiting, which holds a core as a CPU backward pass does (and so
 * competes with the library's threads where ranks and threads outnumber the
 * cores); --sleep spends them in clock_nanosleep instead, which leaves the
 * core free as a GPU backward pass does. Every step runs five modes in
 * turn, each after a barrier, so that drift in the machine affects all of
 * them alike (one engine serves the whole run, as in training):
 *
 *   engine        each tensor submitted to chorus_engine_allreduce as it is
 *                 produced, in reverse layer order (with --shuffle, a random
 *                 order of its own on each rank and step); the step ends
 *                 when every request has completed
 *   per-tensor    one blocking chorus_allreduce per tensor as it is produced,
 *                 in reverse layer order on every rank (plain collectives
 *                 need the same order everywhere)
 *   fused-after   the whole backward pass, then one chorus_allreduce of all
 *                 gradients as a single buffer
 *   compute-only  the same gaps with no communication
 *   fused-only    the single allreduce of all gradients, with no compute
 *
 * A step's time is the slowest rank's; the report gives medians over the
 * steps. From them: exposed = step - compute-only, the communication the
 * mode did not hide; hidden = (compute-only + fused-only - step) / fused-only,
 * the share of one fused allreduce's time that the mode overlapped with
 * compute (fused-after scores about 0 by construction, a mode whose step
 * equals compute-only scores 1; the most any mode can score is
 * min(1, compute-only / fused-only)).
 *
 * Every mode that communicates checks its result on every rank after every
 * step: the inputs are small integers of (rank, tensor, element), so the
 * float32 sums are exact whatever the order of reduction, and the received
 * buffer is filled with NaN before each step so that a stale result fails.
 * The check runs outside the timed region.
 *
 * Run it under chorus-run -n N (or any launcher chorus_comm_create_from_env
 * reads). Memory: three buffers of 102 MB per rank (gradients, results,
 * expected results).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "perf/perf_size.h"
#include "tools/tool_version.h"

#define TS_PROG "chorus-train-step"

/* ResNet-50 as torchvision builds it: what the model builder must arrive at. */
#define TS_RESNET50_TENSORS 161
#define TS_RESNET50_PARAMS 25557032UL
/* Room for the builder to overshoot, so that a wrong count is reported, not overflowed. */
#define TS_TENSORS_MAX 4096
#define TS_NAME_MAX 48

/* Input values lie in [-TS_VALUE_HALF, TS_VALUE_HALF]; sums stay exact below 2^24. */
#define TS_VALUE_MOD 61
#define TS_VALUE_HALF 30

/* ---- options ------------------------------------------------------------------ */

typedef struct {
    int steps, warmup;
    double compute_ms;     /* total simulated backward compute per step */
    int shuffle;           /* engine: a random submission order per rank and step */
    int engine_only;       /* every step runs the engine mode alone */
    int sleep;             /* compute gaps in clock_nanosleep instead of busy-waiting */
    size_t bucket_bytes;   /* chorus_engine_opts_t; 0: the library's default */
    double cycle_ms;       /* chorus_engine_opts_t; 0: the library's default */
    int uniform_n;         /* --uniform: this many tensors of uniform_bytes; 0: ResNet-50 */
    size_t uniform_bytes;
    const char *json_path; /* NULL: no JSON */
    int print_tensors;     /* print the model's tensors and exit, with no communicator */
    int help, version;
} ts_opts_t;

static const char ts_usage_text[] =
    "usage: " TS_PROG " [options]   (run under chorus-run -n N or another launcher)\n"
    "\n"
    "Replays ResNet-50's backward pass (161 float32 gradient tensors, 25,557,032\n"
    "parameters) and times its gradient exchange in five modes, interleaved in\n"
    "every step, each after a barrier:\n"
    "  engine        chorus_engine_allreduce of each tensor as it is produced\n"
    "  per-tensor    a blocking chorus_allreduce of each tensor as it is produced\n"
    "                (reverse layer order on every rank)\n"
    "  fused-after   the whole backward pass, then one allreduce of all gradients\n"
    "  compute-only  the backward pass's compute gaps alone\n"
    "  fused-only    the one allreduce of all gradients alone\n"
    "\n"
    "options:\n"
    "  --steps N          timed steps (default 10)\n"
    "  --warmup N         untimed steps first (default 2)\n"
    "  --compute-ms MS    simulated backward compute per step, spread over the\n"
    "                     tensors in proportion to their sizes; each tensor is\n"
    "                     produced after its share (default 100)\n"
    "  --sleep            spend the compute in clock_nanosleep, which leaves the core\n"
    "                     to the library's threads as a GPU backward pass does;\n"
    "                     default: busy-wait, which holds a core as a CPU one does\n"
    "  --shuffle          engine: each rank submits in a random order of its own,\n"
    "                     different every step (seeded by rank and step)\n"
    "  --engine-only      run the engine mode alone, step after step (as training\n"
    "                     does, and as CHORUS_AUTOTUNE needs to measure it); no\n"
    "                     exposed, hidden or speedup figures\n"
    "  --bucket-bytes B   the engine's bucket size: bytes, or with K, M, G (powers of\n"
    "                     1024); 0: CHORUS_BUCKET_BYTES, or the default that\n"
    "                     CHORUS_AUTOTUNE tunes (default 0); a value given is kept\n"
    "  --cycle-ms MS      the engine's negotiation period; 0: CHORUS_CYCLE_MS, or the\n"
    "                     default that CHORUS_AUTOTUNE tunes (default 0)\n"
    "  --uniform N:BYTES  instead of ResNet-50, N tensors (1 to 4096) of BYTES each\n"
    "                     (a multiple of 4; K, M, G), as in 1000:4K\n"
    "  --json FILE        also write the results as JSON to FILE (rank 0)\n"
    "  --print-tensors    print the model's tensors, one 'NAME ELEMENTS' line each in\n"
    "                     layer order (the backward pass produces them last first),\n"
    "                     and exit; needs no launcher (perf/simulate.py reads it)\n"
    "  -h, --help         print this text\n"
    "  --version          print the tool's and the library's versions\n"
    "\n"
    "A step's time is the slowest rank's (max over ranks); the table gives the\n"
    "median, min and max over the timed steps, and from the medians:\n"
    "  exposed = step - compute-only: the communication the mode did not hide\n"
    "  hidden  = (compute-only + fused-only - step) / fused-only: the share of one\n"
    "            fused allreduce's time that the mode overlapped with compute;\n"
    "            1 = all of it, 0 = none (fused-after, by construction); at most\n"
    "            compute-only / fused-only when that is less than 1\n"
    "and the engine's speedup over per-tensor, fused-after, and compute-only +\n"
    "fused-only (a step that overlaps nothing and fuses everything): their median\n"
    "step divided by the engine's.\n"
    "\n"
    "Every mode that communicates checks every element of its result on every rank\n"
    "after every step, warmup included (inputs are small integers, so the sums are\n"
    "exact); messages number the steps from 0, the warmup's first. The exit code is\n"
    "1 on a wrong element or a failed call, 2 for a usage error.\n";

static int ts_parse_int(const char *text, int min, int max, int *v_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return -1;
    *v_p = (int)v;
    return 0;
}

/* A duration in milliseconds: a finite number in [0, max]. */
static int ts_parse_ms(const char *text, double max, double *v_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= 0 && v <= max))
        return -1;
    *v_p = v;
    return 0;
}

enum { TS_OPT_STEPS = 256, TS_OPT_WARMUP, TS_OPT_COMPUTE, TS_OPT_SLEEP, TS_OPT_SHUFFLE,
       TS_OPT_ENGINE_ONLY, TS_OPT_BUCKET, TS_OPT_CYCLE, TS_OPT_UNIFORM, TS_OPT_JSON,
       TS_OPT_PRINT_TENSORS, TS_OPT_VERSION };

static const struct option ts_long_opts[] = {
    {"steps", required_argument, NULL, TS_OPT_STEPS},
    {"warmup", required_argument, NULL, TS_OPT_WARMUP},
    {"compute-ms", required_argument, NULL, TS_OPT_COMPUTE},
    {"sleep", no_argument, NULL, TS_OPT_SLEEP},
    {"shuffle", no_argument, NULL, TS_OPT_SHUFFLE},
    {"engine-only", no_argument, NULL, TS_OPT_ENGINE_ONLY},
    {"bucket-bytes", required_argument, NULL, TS_OPT_BUCKET},
    {"cycle-ms", required_argument, NULL, TS_OPT_CYCLE},
    {"uniform", required_argument, NULL, TS_OPT_UNIFORM},
    {"json", required_argument, NULL, TS_OPT_JSON},
    {"print-tensors", no_argument, NULL, TS_OPT_PRINT_TENSORS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, TS_OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Sets one option's value; -1 with a message naming the option and the value. */
static int ts_opts_set(ts_opts_t *o, int opt, const char *v, char *err, size_t errlen)
{
    const char *expected = NULL;

    switch (opt) {
    case TS_OPT_STEPS:
        if (ts_parse_int(v, 1, 1000000, &o->steps) != 0)
            expected = "an integer from 1 to 1000000";
        break;
    case TS_OPT_WARMUP:
        if (ts_parse_int(v, 0, 1000000, &o->warmup) != 0)
            expected = "an integer from 0 to 1000000";
        break;
    case TS_OPT_COMPUTE:
        if (ts_parse_ms(v, 1e6, &o->compute_ms) != 0)
            expected = "milliseconds from 0 to 1000000";
        break;
    case TS_OPT_BUCKET:
        if (perf_parse_size(v, &o->bucket_bytes) != 0)
            expected = "a size in bytes, with K, M or G";
        break;
    case TS_OPT_CYCLE:
        if (ts_parse_ms(v, 1e4, &o->cycle_ms) != 0)
            expected = "milliseconds from 0 to 10000";
        break;
    case TS_OPT_UNIFORM: {
        const char *colon = strchr(v, ':');
        char n[16];

        if (colon == NULL || colon - v >= (long)sizeof(n) ||
            (memcpy(n, v, (size_t)(colon - v)), n[colon - v] = '\0',
             ts_parse_int(n, 1, TS_TENSORS_MAX, &o->uniform_n) != 0) ||
            perf_parse_size(colon + 1, &o->uniform_bytes) != 0 || o->uniform_bytes == 0 ||
            o->uniform_bytes % sizeof(float) != 0)
            expected = "N:BYTES, N from 1 to 4096, BYTES a positive multiple of 4";
        break;
    }
    case TS_OPT_JSON: o->json_path = v; break;
    case TS_OPT_SLEEP: o->sleep = 1; break;
    case TS_OPT_SHUFFLE: o->shuffle = 1; break;
    case TS_OPT_ENGINE_ONLY: o->engine_only = 1; break;
    case TS_OPT_PRINT_TENSORS: o->print_tensors = 1; break;
    case TS_OPT_VERSION: o->version = 1; break;
    case 'h': o->help = 1; break;
    default:
        return -1;
    }
    if (expected == NULL)
        return 0;
    for (const struct option *lo = ts_long_opts; lo->name != NULL; lo++) {
        if (lo->val == opt)
            snprintf(err, errlen, "invalid value '%s' for --%s: expected %s", v, lo->name,
                     expected);
    }
    return -1;
}

/*
 * The long option just parsed, as written: "--name" or "--name=value" is
 * argv[optind - 1], or argv[optind - 2] when its value came as the next
 * argument.
 */
static const char *ts_long_arg(char **argv, int optind_now)
{
    const char *last = argv[optind_now - 1];

    return strncmp(last, "--", 2) == 0 || optind_now < 2 ? last : argv[optind_now - 2];
}

/* Whether the long option just parsed was written with its whole name. */
static int ts_long_name_is(const char *name, char **argv, int optind_now)
{
    const char *arg = ts_long_arg(argv, optind_now) + 2;
    size_t len = strcspn(arg, "=");

    return len == strlen(name) && strncmp(arg, name, len) == 0;
}

/* Parses argv; 0, or -1 with a message in err naming the argument. */
static int ts_opts_parse(int argc, char **argv, ts_opts_t *o, char *err, size_t errlen)
{
    int opt, longindex = -1;

    *o = (ts_opts_t){.steps = 10, .warmup = 2, .compute_ms = 100};
    opterr = 0; /* the messages below name the program as the others do */
    while ((opt = getopt_long(argc, argv, ":h", ts_long_opts, &longindex)) != -1) {
        const char *arg = argv[optind - 1];

        if (opt == '?' || opt == ':') {
            snprintf(err, errlen, "%s '%s'", opt == '?' ? "unknown option" :
                     "missing value for", arg);
            return -1;
        }
        /* Long options by their whole name only, as the other tools take them. */
        if (longindex >= 0 && !ts_long_name_is(ts_long_opts[longindex].name, argv, optind)) {
            snprintf(err, errlen, "unknown option '%s'", ts_long_arg(argv, optind));
            return -1;
        }
        longindex = -1;
        if (ts_opts_set(o, opt, optarg, err, errlen) != 0)
            return -1;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- the model ------------------------------------------------------------------ */

typedef struct {
    char name[TS_NAME_MAX]; /* torchvision's parameter name: "layer3.2.conv2.weight" */
    size_t count;           /* float32 elements */
    size_t offset;          /* elements before it in the gradient buffer, in layer order */
} ts_tensor_t;

typedef struct {
    ts_tensor_t t[TS_TENSORS_MAX];
    int n;                  /* tensors built; more than TS_TENSORS_MAX counted, not stored */
    size_t elems;
} ts_model_t;

static void ts_model_add(ts_model_t *m, size_t count, const char *fmt, ...)
{
    if (m->n < TS_TENSORS_MAX) {
        ts_tensor_t *t = &m->t[m->n];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(t->name, sizeof(t->name), fmt, ap);
        va_end(ap);
        t->count = count;
        t->offset = m->elems;
    }
    m->n++;
    m->elems += count;
}

/* A convolution without bias: its weight only. */
static void ts_add_conv(ts_model_t *m, const char *prefix, size_t k, size_t in, size_t out)
{
    ts_model_add(m, k * k * in * out, "%s.weight", prefix);
}

/* Batch normalization: gamma ("weight") and beta ("bias"). */
static void ts_add_bn(ts_model_t *m, const char *prefix, size_t channels)
{
    ts_model_add(m, channels, "%s.weight", prefix);
    ts_model_add(m, channels, "%s.bias", prefix);
}

/* One bottleneck block, 1x1 - 3x3 - 1x1 with expansion 4; returns its output channels. */
static size_t ts_add_bottleneck(ts_model_t *m, int stage, int block, size_t in, size_t width)
{
    const size_t kernel[3] = {1, 3, 1};
    const size_t out[3] = {width, width, 4 * width};
    char prefix[TS_NAME_MAX];

    for (int k = 0; k < 3; k++) {
        snprintf(prefix, sizeof(prefix), "layer%d.%d.conv%d", stage, block, k + 1);
        ts_add_conv(m, prefix, kernel[k], k == 0 ? in : width, out[k]);
        snprintf(prefix, sizeof(prefix), "layer%d.%d.bn%d", stage, block, k + 1);
        ts_add_bn(m, prefix, out[k]);
    }
    if (block == 0) {
        snprintf(prefix, sizeof(prefix), "layer%d.0.downsample.0", stage);
        ts_add_conv(m, prefix, 1, in, 4 * width);
        snprintf(prefix, sizeof(prefix), "layer%d.0.downsample.1", stage);
        ts_add_bn(m, prefix, 4 * width);
    }
    return 4 * width;
}

/*
 * ResNet-50's parameters in layer (forward) order, as torchvision names them:
 * the stem, four stages of [3, 4, 6, 3] bottlenecks of widths 64 to 512, and
 * the classifier. -1 when the result is not the known 161 tensors of
 * 25,557,032 parameters.
 */
static int ts_model_build_resnet50(ts_model_t *m)
{
    static const int blocks[4] = {3, 4, 6, 3};
    size_t channels = 64;

    m->n = 0;
    m->elems = 0;
    ts_add_conv(m, "conv1", 7, 3, 64);
    ts_add_bn(m, "bn1", 64);
    for (int s = 0; s < 4; s++) {
        for (int b = 0; b < blocks[s]; b++)
            channels = ts_add_bottleneck(m, s + 1, b, channels, (size_t)64 << s);
    }
    ts_model_add(m, channels * 1000, "fc.weight");
    ts_model_add(m, 1000, "fc.bias");
    if (m->n != TS_RESNET50_TENSORS || m->elems != TS_RESNET50_PARAMS) {
        fprintf(stderr, TS_PROG ": the ResNet-50 model has %d tensors of %zu parameters, "
                "not %d of %lu\n", m->n, m->elems, TS_RESNET50_TENSORS, TS_RESNET50_PARAMS);
        return -1;
    }
    return 0;
}

/* n tensors of bytes each, named "t0000", "t0001", ... (no rank can fail here). */
static void ts_model_build_uniform(ts_model_t *m, int n, size_t bytes)
{
    m->n = 0;
    m->elems = 0;
    for (int i = 0; i < n; i++)
        ts_model_add(m, bytes / sizeof(float), "t%04d", i);
}

static const char *ts_model_name(const ts_opts_t *o)
{
    return o->uniform_n > 0 ? "uniform" : "resnet50";
}

/* ---- the run ---------------------------------------------------------------------- */

typedef enum {
    TS_ENGINE = 0,
    TS_PER_TENSOR,
    TS_FUSED_AFTER,
    TS_COMPUTE_ONLY,
    TS_FUSED_ONLY,
    TS_MODES
} ts_mode_t;

typedef struct {
    const char *name;
    int computes, communicates;
} ts_mode_info_t;

static const ts_mode_info_t ts_modes[TS_MODES] = {
    [TS_ENGINE] = {"engine", 1, 1},
    [TS_PER_TENSOR] = {"per-tensor", 1, 1},
    [TS_FUSED_AFTER] = {"fused-after", 1, 1},
    [TS_COMPUTE_ONLY] = {"compute-only", 1, 0},
    [TS_FUSED_ONLY] = {"fused-only", 0, 1},
};

typedef struct {
    const ts_opts_t *opts;
    ts_model_t model;
    chorus_comm_t comm;
    chorus_engine_t engine;
    int rank, nranks;
    float *send, *recv;    /* all gradients, in layer order, and their sums */
    float *expect;         /* the exact sums */
    double gap_s[TS_TENSORS_MAX];  /* compute before each tensor is produced, by tensor */
    int reverse[TS_TENSORS_MAX];   /* reverse layer order: the backward pass's */
    int order[TS_TENSORS_MAX];     /* this step's engine order */
    chorus_request_t reqs[TS_TENSORS_MAX];
    double overrun_s;      /* how late the last compute gap ended; the next one is shorter */
    double *times_s;       /* [mode * steps + step]: the slowest rank's time */
    double *scratch_s;     /* steps values: one mode's times, sorted for its median */
    FILE *json_f;          /* rank 0 with --json only */
} ts_ctx_t;

static double ts_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * A failed call leaves the other ranks blocked in the same collective: the
 * abort makes their calls (the engine's included) fail at once instead of at
 * their timeout. The process exits, so the engine's collective destruction
 * is skipped.
 */
static void ts_die(ts_ctx_t *c, const char *what, chorus_status_t st)
{
    fprintf(stderr, TS_PROG ": rank %d: %s failed: %s\n", c->rank, what,
            chorus_status_string(st));
    chorus_comm_abort(c->comm);
    exit(1);
}

static void ts_check(ts_ctx_t *c, const char *what, chorus_status_t st)
{
    if (st != CHORUS_OK)
        ts_die(c, what, st);
}

/* ---- inputs and checks ---- */

/*
 * Rank r's input for element i of tensor t is ((i + 13 t + 7 r) mod 61) - 30:
 * a small integer that differs between ranks, tensors and neighbouring
 * elements, so that a missing or doubled contribution, a swapped tensor or
 * a shifted element changes the sum. It depends on i + 13 t only through
 * j = (i + 13 t) mod 61, so the inputs and the sums are looked up by j.
 */
static float ts_value(int r, int j)
{
    return (float)((int)(((size_t)j + 7 * (size_t)r) % TS_VALUE_MOD) - TS_VALUE_HALF);
}

/* This rank's gradients, and the sums over all ranks that every result must equal. */
static void ts_fill(ts_ctx_t *c)
{
    float mine[TS_VALUE_MOD], sum[TS_VALUE_MOD];

    for (int j = 0; j < TS_VALUE_MOD; j++) {
        mine[j] = ts_value(c->rank, j);
        sum[j] = 0;
        for (int r = 0; r < c->nranks; r++)
            sum[j] += ts_value(r, j);
    }
    for (int t = 0; t < c->model.n; t++) {
        const ts_tensor_t *tn = &c->model.t[t];
        int j = (13 * t) % TS_VALUE_MOD;

        for (size_t i = 0; i < tn->count; i++) {
            c->send[tn->offset + i] = mine[j];
            c->expect[tn->offset + i] = sum[j];
            j = j + 1 < TS_VALUE_MOD ? j + 1 : 0;
        }
    }
}

/*
 * Compares every result with its exact sum; returns the wrong elements and
 * names the first one. NaN (the fill of recv before each step) never
 * compares equal, so an element the step did not write is wrong.
 */
static long ts_verify(ts_ctx_t *c, ts_mode_t m, int step)
{
    long wrong = 0;

    for (int t = 0; t < c->model.n; t++) {
        const ts_tensor_t *tn = &c->model.t[t];
        const float *got = c->recv + tn->offset, *want = c->expect + tn->offset;

        for (size_t i = 0; i < tn->count; i++) {
            if (got[i] == want[i])
                continue;
            if (wrong++ == 0)
                fprintf(stderr, TS_PROG ": rank %d: %s, step %d: %s[%zu] is %g, expected %g\n",
                        c->rank, ts_modes[m].name, step, tn->name, i, (double)got[i],
                        (double)want[i]);
        }
    }
    if (wrong > 0)
        fprintf(stderr, TS_PROG ": rank %d: %s, step %d: %ld wrong element%s\n", c->rank,
                ts_modes[m].name, step, wrong, wrong == 1 ? "" : "s");
    return wrong;
}

/* ---- the backward pass ---- */

static void ts_sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - floor(t)) * 1e9)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/*
 * Spends s seconds of simulated compute: busy-waiting, or with --sleep in
 * clock_nanosleep. Sleeps wake late by tens of microseconds, which over 161
 * gaps would add up: the lateness of one gap is taken off the next, so a
 * step's compute stays --compute-ms. The time spent between gaps (a
 * submission, a blocking allreduce) is not taken off: it counts as the
 * step's own.
 */
static void ts_compute(ts_ctx_t *c, double s)
{
    double end, now;

    if (s <= 0)
        return;     /* no gap: not even a system call, which could lose the core */
    end = ts_now() + s - c->overrun_s;

    if (c->opts->sleep)
        ts_sleep_until(end);
    while ((now = ts_now()) < end)
        ;
    c->overrun_s = now - end;
}

/* What a mode does with a tensor once it is produced; NULL: nothing. */
typedef void (*ts_produce_fn_t)(ts_ctx_t *c, int k, int t);

/* The backward pass: each tensor of order in turn, after its compute gap. */
static void ts_backward(ts_ctx_t *c, const int *order, ts_produce_fn_t produce)
{
    c->overrun_s = 0;
    for (int k = 0; k < c->model.n; k++) {
        ts_compute(c, c->gap_s[order[k]]);
        if (produce != NULL)
            produce(c, k, order[k]);
    }
}

static void ts_engine_submit(ts_ctx_t *c, int k, int t)
{
    const ts_tensor_t *tn = &c->model.t[t];

    ts_check(c, "chorus_engine_allreduce", chorus_engine_allreduce(
             c->engine, tn->name, c->send + tn->offset, c->recv + tn->offset, tn->count,
             CHORUS_FLOAT32, CHORUS_SUM, NULL, &c->reqs[k]));
}

static void ts_allreduce_tensor(ts_ctx_t *c, int k, int t)
{
    const ts_tensor_t *tn = &c->model.t[t];

    ts_check(c, "chorus_allreduce of one tensor", chorus_allreduce(
             c->send + tn->offset, c->recv + tn->offset, tn->count, CHORUS_FLOAT32,
             CHORUS_SUM, c->comm, NULL));
}

static void ts_allreduce_all(ts_ctx_t *c)
{
    ts_check(c, "chorus_allreduce of all gradients", chorus_allreduce(
             c->send, c->recv, c->model.elems, CHORUS_FLOAT32, CHORUS_SUM, c->comm, NULL));
}

static void ts_engine_wait_all(ts_ctx_t *c)
{
    for (int k = 0; k < c->model.n; k++) {
        chorus_status_t st = chorus_request_wait(c->reqs[k]);
        chorus_status_t st_free = chorus_request_free(c->reqs[k]);

        c->reqs[k] = NULL;
        ts_check(c, "an engine submission", st != CHORUS_OK ? st : st_free);
    }
}

static void ts_run_mode(ts_ctx_t *c, ts_mode_t m)
{
    switch (m) {
    case TS_ENGINE:
        ts_backward(c, c->order, ts_engine_submit);
        ts_engine_wait_all(c);
        break;
    case TS_PER_TENSOR:
        ts_backward(c, c->reverse, ts_allreduce_tensor);
        break;
    case TS_FUSED_AFTER:
        ts_backward(c, c->reverse, NULL);
        ts_allreduce_all(c);
        break;
    case TS_COMPUTE_ONLY:
        ts_backward(c, c->order, NULL); /* the engine's gaps in the engine's order */
        break;
    case TS_FUSED_ONLY:
        ts_allreduce_all(c);
        break;
    default:
        break;
    }
}

/* ---- steps ---- */

static uint64_t ts_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The engine's order for step (warmup included): reverse layer order, or shuffled. */
static void ts_order_step(ts_ctx_t *c, int step)
{
    uint64_t seed = ((uint64_t)(uint32_t)c->rank << 32) | (uint32_t)step;

    memcpy(c->order, c->reverse, sizeof(c->order[0]) * (size_t)c->model.n);
    if (!c->opts->shuffle)
        return;
    for (int k = c->model.n - 1; k > 0; k--) {
        int j = (int)(ts_splitmix64(&seed) % (uint64_t)(k + 1));
        int tmp = c->order[k];

        c->order[k] = c->order[j];
        c->order[j] = tmp;
    }
}

/*
 * One mode's step, timed from a barrier; then its check. Returns the slowest
 * rank's time. The time and the wrong count travel in one allreduce (max),
 * so every rank learns whether any rank saw a wrong element, and all stop.
 */
static double ts_time_mode(ts_ctx_t *c, ts_mode_t m, int step)
{
    double res[2], t0;

    if (ts_modes[m].communicates)
        memset(c->recv, 0xff, c->model.elems * sizeof(float)); /* NaN everywhere */
    ts_check(c, "chorus_barrier", chorus_barrier(c->comm, NULL));
    t0 = ts_now();
    ts_run_mode(c, m);
    res[0] = ts_now() - t0;
    res[1] = ts_modes[m].communicates ? (double)ts_verify(c, m, step) : 0;
    ts_check(c, "chorus_allreduce of the step's time",
             chorus_allreduce(res, res, 2, CHORUS_FLOAT64, CHORUS_MAX, c->comm, NULL));
    if (res[1] > 0) {
        if (c->rank == 0)
            fprintf(stderr, TS_PROG ": %s, step %d: wrong results (%.0f element%s on the "
                    "worst rank); stopping\n", ts_modes[m].name, step, res[1],
                    res[1] == 1 ? "" : "s");
        return -1;
    }
    return res[0];
}

/* The modes a step runs: the first this many (the engine's is the first). */
static int ts_nmodes(const ts_opts_t *o)
{
    return o->engine_only ? 1 : TS_MODES;
}

/* Warmup, then the timed steps, each running every mode in turn; -1 on wrong results. */
static int ts_run_steps(ts_ctx_t *c)
{
    const ts_opts_t *o = c->opts;

    for (int s = -o->warmup; s < o->steps; s++) {
        ts_order_step(c, s + o->warmup);
        for (int m = 0; m < ts_nmodes(o); m++) {
            double t = ts_time_mode(c, (ts_mode_t)m, s + o->warmup);

            if (t < 0)
                return -1;
            if (s >= 0)
                c->times_s[m * o->steps + s] = t;
        }
    }
    return 0;
}

/* ---- results ---------------------------------------------------------------------- */

typedef struct {
    double median, min, max; /* seconds */
} ts_stat_t;

typedef struct {
    ts_stat_t mode[TS_MODES];
} ts_summary_t;

static int ts_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Median, min and max of n values, sorted in scratch. */
static ts_stat_t ts_stat(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof(v[0]));
    qsort(scratch, (size_t)n, sizeof(v[0]), ts_cmp_double);
    return (ts_stat_t){
        .median = n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2,
        .min = scratch[0], .max = scratch[n - 1],
    };
}

static void ts_summarize(ts_ctx_t *c, ts_summary_t *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int m = 0; m < ts_nmodes(c->opts); m++)
        sum->mode[m] = ts_stat(c->times_s + m * c->opts->steps, c->opts->steps, c->scratch_s);
}

/* exposed = step - compute-only; for modes that compute and communicate only. */
static double ts_exposed(const ts_summary_t *sum, ts_mode_t m)
{
    return sum->mode[m].median - sum->mode[TS_COMPUTE_ONLY].median;
}

/* hidden = (compute-only + fused-only - step) / fused-only; the same modes. */
static double ts_hidden(const ts_summary_t *sum, ts_mode_t m)
{
    double fused = sum->mode[TS_FUSED_ONLY].median;

    return (fused - ts_exposed(sum, m)) / fused;
}

/* Whether m has exposed and hidden figures: it computes and communicates, and they ran. */
static int ts_has_overlap(const ts_opts_t *o, ts_mode_t m)
{
    return ts_modes[m].computes && ts_modes[m].communicates && !o->engine_only;
}

/* compute-only + fused-only: a step that overlaps nothing and fuses everything. */
static double ts_no_overlap_s(const ts_summary_t *sum)
{
    return sum->mode[TS_COMPUTE_ONLY].median + sum->mode[TS_FUSED_ONLY].median;
}

/* How many times faster the engine's step is than one taking t seconds. */
static double ts_engine_speedup(const ts_summary_t *sum, double t)
{
    return t / sum->mode[TS_ENGINE].median;
}

static const char *ts_order_text(const ts_opts_t *o)
{
    return o->shuffle ? "engine: a random order per rank and step (--shuffle); "
                        "per-tensor: reverse layer order"
                      : "reverse layer order on every rank";
}

/* The cores this process may run on (its affinity mask). */
static int ts_usable_cores(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
        return 1;
    return CPU_COUNT(&set);
}

static void ts_hostname(char *buf, size_t len)
{
    if (gethostname(buf, len) != 0)
        snprintf(buf, len, "unknown");
    buf[len - 1] = '\0';
}

static void ts_print_heading(ts_ctx_t *c)
{
    const ts_opts_t *o = c->opts;
    int local = chorus_comm_local_size(c->comm), cores = ts_usable_cores();
    char host[256];

    ts_hostname(host, sizeof(host));
    printf("# " TS_PROG ": %s gradients, %d tensors, %zu float32 (%.1f MB) per rank\n",
           o->uniform_n > 0 ? "uniform" : "ResNet-50", c->model.n, c->model.elems,
           (double)(c->model.elems * sizeof(float)) / 1e6);
    printf("# chorus %s on %s: %d ranks, %d on this node, %d core%s\n",
           chorus_version_string(), host, c->nranks, local, cores, cores == 1 ? "" : "s");
    if (local > cores)
        printf("# warning: %d ranks share %d cores: the times measure the scheduler as much "
               "as chorus\n", local, cores);
    printf("# compute %.2f ms per step (%s), spread over the tensors by size\n",
           o->compute_ms, o->sleep ? "clock_nanosleep" : "busy-wait");
    printf("# order: %s\n", ts_order_text(o));
    printf("# engine: bucket_bytes %zu%s, cycle_ms %g%s\n", o->bucket_bytes,
           o->bucket_bytes ? "" : " (CHORUS_BUCKET_BYTES, or the default or tuned)",
           o->cycle_ms, o->cycle_ms > 0 ? "" : " (CHORUS_CYCLE_MS, or the default or tuned)");
    printf("# %d steps after %d warmup, %s; a step's time is the slowest rank's\n", o->steps,
           o->warmup, o->engine_only ? "the engine alone in each (--engine-only)"
                                     : "the modes in turn in each");
    fflush(stdout);
}

static void ts_print_results(const ts_ctx_t *c, const ts_summary_t *sum)
{
    double bound = ts_no_overlap_s(sum);

    printf("#\n# %-14s %10s %10s %10s %11s %8s\n", "mode", "median_ms", "min_ms", "max_ms",
           "exposed_ms", "hidden");
    for (int m = 0; m < ts_nmodes(c->opts); m++) {
        const ts_stat_t *s = &sum->mode[m];

        printf("  %-14s %10.2f %10.2f %10.2f", ts_modes[m].name, s->median * 1e3,
               s->min * 1e3, s->max * 1e3);
        if (ts_has_overlap(c->opts, (ts_mode_t)m))
            printf(" %11.2f %7.1f%%\n", ts_exposed(sum, (ts_mode_t)m) * 1e3,
                   ts_hidden(sum, (ts_mode_t)m) * 100);
        else
            printf(" %11s %8s\n", "-", "-");
    }
    if (c->opts->engine_only) {
        printf("# results exact on every rank: the engine x %d steps checked, warmup "
               "included\n", c->opts->steps + c->opts->warmup);
        return;
    }
    printf("#\n# exposed = step - compute-only; hidden = (compute-only + fused-only - step) "
           "/ fused-only (medians)\n");
    printf("# engine speedup (their step / the engine's): %.2fx vs per-tensor, %.2fx vs "
           "fused-after, %.2fx vs compute-only + fused-only (%.2f ms)\n",
           ts_engine_speedup(sum, sum->mode[TS_PER_TENSOR].median),
           ts_engine_speedup(sum, sum->mode[TS_FUSED_AFTER].median),
           ts_engine_speedup(sum, bound), bound * 1e3);
    printf("# results exact on every rank: %d modes x %d steps checked, warmup included\n",
           TS_MODES - 1, c->opts->steps + c->opts->warmup);
}

/* s as a JSON string; the host name is the only text that is not ours. */
static void ts_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void ts_json_mode(FILE *f, const ts_ctx_t *c, const ts_summary_t *sum, ts_mode_t m,
                         const double *steps_s)
{
    const ts_stat_t *s = &sum->mode[m];

    fprintf(f, "    {\"mode\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, "
            "\"max_ms\": %.4f", ts_modes[m].name, s->median * 1e3, s->min * 1e3, s->max * 1e3);
    if (ts_has_overlap(c->opts, m))
        fprintf(f, ", \"exposed_ms\": %.4f, \"hidden\": %.4f", ts_exposed(sum, m) * 1e3,
                ts_hidden(sum, m));
    else
        fprintf(f, ", \"exposed_ms\": null, \"hidden\": null");
    fprintf(f, ", \"step_ms\": [");
    for (int k = 0; k < c->opts->steps; k++)
        fprintf(f, "%s%.4f", k ? ", " : "", steps_s[k] * 1e3);
    fprintf(f, "]}");
}

/* The JSON document: the heading's facts, each mode's figures and its times by step. */
static int ts_write_json(const ts_ctx_t *c, const ts_summary_t *sum)
{
    const ts_opts_t *o = c->opts;
    FILE *f = c->json_f;
    char host[256];

    ts_hostname(host, sizeof(host));
    fprintf(f, "{\n  \"program\": \"" TS_PROG "\", \"version\": ");
    ts_json_string(f, chorus_version_string());
    fprintf(f, ", \"host\": ");
    ts_json_string(f, host);
    fprintf(f, ",\n  \"nranks\": %d, \"local_size\": %d, \"cores\": %d,\n", c->nranks,
            chorus_comm_local_size(c->comm), ts_usable_cores());
    fprintf(f, "  \"model\": \"%s\", \"tensors\": %d, \"elements\": %zu, "
            "\"dtype\": \"float32\",\n", ts_model_name(o), c->model.n, c->model.elems);
    fprintf(f, "  \"steps\": %d, \"warmup\": %d, \"compute_ms\": %g, \"compute\": \"%s\", "
            "\"shuffle\": %s, \"engine_only\": %s, \"bucket_bytes\": %zu, \"cycle_ms\": %g,\n",
            o->steps, o->warmup, o->compute_ms, o->sleep ? "sleep" : "busy-wait",
            o->shuffle ? "true" : "false", o->engine_only ? "true" : "false", o->bucket_bytes,
            o->cycle_ms);
    fprintf(f, "  \"definitions\": {\n"
            "    \"step_ms\": \"the slowest rank's time per step; median, min, max over steps\",\n"
            "    \"exposed_ms\": \"step - compute-only (medians)\",\n"
            "    \"hidden\": \"(compute-only + fused-only - step) / fused-only (medians)\",\n"
            "    \"no_overlap_ms\": \"compute-only + fused-only (medians)\",\n"
            "    \"engine_speedup\": \"the other's median step / the engine's\"\n"
            "  },\n  \"modes\": [\n");
    for (int m = 0; m < ts_nmodes(o); m++) {
        ts_json_mode(f, c, sum, (ts_mode_t)m, c->times_s + m * o->steps);
        fprintf(f, "%s\n", m + 1 < ts_nmodes(o) ? "," : "");
    }
    if (o->engine_only) {
        fprintf(f, "  ],\n  \"no_overlap_ms\": null,\n  \"engine_speedup\": null,\n"
                "  \"wrong\": 0\n}\n");
        return ferror(f) ? -1 : 0;
    }
    fprintf(f, "  ],\n  \"no_overlap_ms\": %.4f,\n", ts_no_overlap_s(sum) * 1e3);
    fprintf(f, "  \"engine_speedup\": {\"per-tensor\": %.4f, \"fused-after\": %.4f, "
            "\"no_overlap\": %.4f},\n",
            ts_engine_speedup(sum, sum->mode[TS_PER_TENSOR].median),
            ts_engine_speedup(sum, sum->mode[TS_FUSED_AFTER].median),
            ts_engine_speedup(sum, ts_no_overlap_s(sum)));
    fprintf(f, "  \"wrong\": 0\n}\n");
    return ferror(f) ? -1 : 0;
}

/* Rank 0: the table, and the JSON document with --json. */
static int ts_report(ts_ctx_t *c)
{
    ts_summary_t sum;
    int rc = 0;

    ts_summarize(c, &sum);
    ts_print_results(c, &sum);
    if (c->json_f != NULL) {
        rc = ts_write_json(c, &sum);
        if (fclose(c->json_f) != 0)
            rc = -1;
        c->json_f = NULL;
        if (rc != 0)
            fprintf(stderr, TS_PROG ": writing %s: %s\n", c->opts->json_path, strerror(errno));
    }
    return rc;
}

/* ---- setup ------------------------------------------------------------------------ */

/* Each tensor's share of the compute, and the backward pass's order. */
static void ts_plan(ts_ctx_t *c)
{
    double total_s = c->opts->compute_ms * 1e-3;

    for (int t = 0; t < c->model.n; t++) {
        c->gap_s[t] = total_s * (double)c->model.t[t].count / (double)c->model.elems;
        c->reverse[t] = c->model.n - 1 - t;
    }
}

/* This rank's buffers, and rank 0's JSON file; -1 with a message. */
static int ts_alloc(ts_ctx_t *c)
{
    size_t bytes = c->model.elems * sizeof(float);
    void **bufs[3] = {(void **)&c->send, (void **)&c->recv, (void **)&c->expect};

    for (int k = 0; k < 3; k++) {
        if (posix_memalign(bufs[k], 4096, bytes) != 0) {
            *bufs[k] = NULL;
            fprintf(stderr, TS_PROG ": rank %d: cannot allocate 3 buffers of %zu bytes\n",
                    c->rank, bytes);
            return -1;
        }
    }
    c->times_s = calloc((size_t)TS_MODES * (size_t)c->opts->steps, sizeof(double));
    c->scratch_s = calloc((size_t)c->opts->steps, sizeof(double));
    if (c->times_s == NULL || c->scratch_s == NULL) {
        fprintf(stderr, TS_PROG ": rank %d: out of memory\n", c->rank);
        return -1;
    }
    if (c->rank == 0 && c->opts->json_path != NULL) {
        c->json_f = fopen(c->opts->json_path, "w");
        if (c->json_f == NULL) {
            fprintf(stderr, TS_PROG ": cannot open %s: %s\n", c->opts->json_path,
                    strerror(errno));
            return -1;
        }
    }
    return 0;
}

/*
 * Every rank allocates and fills its buffers; then all learn whether every
 * rank succeeded, so that none waits in a call a failed rank never makes.
 * The engine is created last, once all can use it.
 */
static int ts_setup(ts_ctx_t *c)
{
    chorus_engine_opts_t eo = CHORUS_ENGINE_OPTS_INIT;
    int32_t failed = ts_alloc(c) != 0;

    if (!failed) {
        ts_plan(c);
        ts_fill(c);
    }
    ts_check(c, "chorus_allreduce of the setup's outcome",
             chorus_allreduce(&failed, &failed, 1, CHORUS_INT32, CHORUS_MAX, c->comm, NULL));
    if (failed)
        return -1;
    eo.bucket_bytes = c->opts->bucket_bytes;
    eo.cycle_ms = c->opts->cycle_ms;
    ts_check(c, "chorus_engine_create", chorus_engine_create(c->comm, &eo, &c->engine));
    return 0;
}

static void ts_free(ts_ctx_t *c)
{
    if (c->json_f != NULL)
        fclose(c->json_f);
    free(c->send);
    free(c->recv);
    free(c->expect);
    free(c->times_s);
    free(c->scratch_s);
}

static int ts_main(const ts_opts_t *opts)
{
    ts_ctx_t *c = calloc(1, sizeof(*c));
    chorus_status_t st;
    int rc = 1;

    if (c == NULL) {
        fprintf(stderr, TS_PROG ": out of memory\n");
        return 1;
    }
    c->opts = opts;
    /* Before the communicator: every rank builds the same model and fails alike. */
    if (opts->uniform_n > 0)
        ts_model_build_uniform(&c->model, opts->uniform_n, opts->uniform_bytes);
    else if (ts_model_build_resnet50(&c->model) != 0)
        goto out_ctx;
    if (opts->print_tensors) {
        for (int t = 0; t < c->model.n; t++)
            printf("%s %zu\n", c->model.t[t].name, c->model.t[t].count);
        rc = fflush(stdout) == 0 ? 0 : 1;
        goto out_ctx;
    }
    st = chorus_comm_create_from_env(&c->comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, TS_PROG ": cannot create a communicator from the environment: %s "
                "(start it with chorus-run -n N or another launcher)\n",
                chorus_status_string(st));
        goto out_ctx;
    }
    c->rank = chorus_comm_rank(c->comm);
    c->nranks = chorus_comm_size(c->comm);
    if (ts_setup(c) != 0)
        goto out_bufs;
    if (c->rank == 0)
        ts_print_heading(c);
    if (ts_run_steps(c) == 0)
        rc = c->rank == 0 && ts_report(c) != 0 ? 1 : 0;
    st = chorus_engine_destroy(c->engine);
    if (st != CHORUS_OK) {
        fprintf(stderr, TS_PROG ": rank %d: chorus_engine_destroy failed: %s\n", c->rank,
                chorus_status_string(st));
        rc = 1;
    }
out_bufs:
    ts_free(c);
    st = chorus_comm_destroy(c->comm);
    if (st != CHORUS_OK) {
        fprintf(stderr, TS_PROG ": rank %d: destroying the communicator failed: %s\n",
                c->rank, chorus_status_string(st));
        rc = 1;
    }
out_ctx:
    free(c);
    return rc;
}

int main(int argc, char **argv)
{
    ts_opts_t opts;
    char err[256];

    if (ts_opts_parse(argc, argv, &opts, err, sizeof(err)) != 0) {
        fprintf(stderr, TS_PROG ": %s\nTry '" TS_PROG " --help'.\n", err);
        return 2;
    }
    if (opts.help) {
        fputs(ts_usage_text, stdout);
        return 0;
    }
    if (opts.version) {
        tool_version_print(stdout, TS_PROG, chorus_version_string());
        return 0;
    }
    return ts_main(&opts);
}
