/* chorus-perf command line parsing. */
#include "perf/perf_opts.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf_check.h"
#include "perf/perf_data.h"
#include "tools/launch.h"

const char perf_usage_text[] =
    "usage: chorus-perf COLLECTIVE [options]\n"
    "\n"
    "Measures a collective over a sweep of message sizes, in the style of nccl-tests.\n"
    "COLLECTIVE: allreduce allgather broadcast reduce_scatter reduce alltoall barrier,\n"
    "or all (each in turn).\n"
    "\n"
    "  -b, --minbytes N     smallest message size in bytes (default 8; K, M, G suffixes)\n"
    "  -e, --maxbytes N     largest message size (default 64M)\n"
    "  -f, --stepfactor N   size multiplier between rows (default 2)\n"
    "  -n, --iters N        timed iterations per row (default 20)\n"
    "  -w, --warmup_iters N untimed iterations before them (default 5)\n"
    "  -c, --check 0|1      check results exactly, in separate iterations (default 1)\n"
    "  -d, --datatype T     int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
    "                       float32 float64, or all (default float32)\n"
    "  -o, --op OP          sum prod min max avg, or all (default sum)\n"
    "  -r, --root R         root of broadcast and reduce, or all (default 0)\n"
    "  -np N                start N local ranks of chorus-perf (default: run as one\n"
    "                       rank of the job that started it; see below)\n"
    "  --json FILE          also write the results to FILE as JSON\n"
    "  -h, --help           print this help\n"
    "  --version            print the version of chorus-perf and of the library\n"
    "\n"
    "Without -np, chorus-perf is one rank of a job whose launcher sets, for every rank,\n"
    "either CHORUS_RANK, CHORUS_SIZE and CHORUS_ADDR (chorus-run does) or the torchrun\n"
    "variables RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun, or any launcher\n"
    "or script that sets them), with the same CHORUS_SECRET. mpirun and srun set none of\n"
    "these; under them a wrapper can set RANK and WORLD_SIZE from OMPI_COMM_WORLD_RANK\n"
    "and OMPI_COMM_WORLD_SIZE (or SLURM_PROCID and SLURM_NTASKS), and MASTER_ADDR and\n"
    "MASTER_PORT to a free port on the host of rank 0.\n"
    "\n"
    "Sizes are the whole buffer: for allgather, reduce_scatter and alltoall each rank\n"
    "contributes size / ranks. busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for\n"
    "allgather, reduce_scatter and alltoall, 1 for broadcast and reduce. Time is the\n"
    "slowest rank's average. Sizes run from -b up to -e, -e included; a size that\n"
    "gives no whole element per rank is skipped with a note. The algorithm column names\n"
    "what the library chose for each size (asked of one untimed call). The exit code is\n"
    "1 when any element was wrong, 2 for a usage error.\n";

int perf_parse_size(const char *text, size_t *bytes_p)
{
    unsigned long long v, mult = 1;
    char *end;

    if (text == NULL || *text < '0' || *text > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: break;
    }
    if (*end != '\0' || (v != 0 && mult > SIZE_MAX / v))
        return -1;
    *bytes_p = (size_t)(v * mult);
    return 0;
}

static int parse_int(const char *text, int min, int max, int *v_p)
{
    char *end;
    long v;

    if (text == NULL || *text == '\0')
        return -1;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *v_p = (int)v;
    return 0;
}

static int parse_choice(const char *opt, const char *text, int (*parse)(const char *),
                        int *v_p, char *err, size_t errlen)
{
    if (strcmp(text, "all") == 0) {
        *v_p = PERF_ALL;
        return 0;
    }
    *v_p = parse(text);
    if (*v_p < 0) {
        snprintf(err, errlen, "unknown value '%s' for %s", text, opt);
        return -1;
    }
    return 0;
}

/* Options taking a value: short name, long name. */
static const char *const value_opts[][2] = {
    {"-b", "--minbytes"}, {"-e", "--maxbytes"}, {"-f", "--stepfactor"},
    {"-n", "--iters"},    {"-w", "--warmup_iters"}, {"-c", "--check"},
    {"-d", "--datatype"}, {"-o", "--op"},        {"-r", "--root"},
    {"-np", "-np"},       {"--json", "--json"},
};

/* Index in value_opts of arg ("--op=sum" sets *inline_p to "sum"), or -1. */
static int find_value_opt(const char *arg, const char **inline_p)
{
    *inline_p = NULL;
    for (size_t i = 0; i < sizeof(value_opts) / sizeof(value_opts[0]); i++) {
        size_t len = strlen(value_opts[i][1]);
        if (strcmp(arg, value_opts[i][0]) == 0 || strcmp(arg, value_opts[i][1]) == 0)
            return (int)i;
        if (strncmp(arg, value_opts[i][1], len) == 0 && arg[len] == '=' &&
            arg[1] == '-') {
            *inline_p = arg + len + 1;
            return (int)i;
        }
    }
    return -1;
}

static int set_value(perf_opts_t *o, int which, const char *opt, const char *v,
                     char *err, size_t errlen)
{
    int ok = 0, f;

    switch (which) {
    case 0: ok = perf_parse_size(v, &o->minbytes) == 0; break;
    case 1: ok = perf_parse_size(v, &o->maxbytes) == 0; break;
    case 2:
        ok = parse_int(v, 2, 1 << 20, &f) == 0;
        o->factor = ok ? (size_t)f : o->factor;
        break;
    case 3: ok = parse_int(v, 1, 1 << 30, &o->iters) == 0; break;
    case 4: ok = parse_int(v, 0, 1 << 30, &o->warmup) == 0; break;
    case 5: ok = parse_int(v, 0, 1, &o->check) == 0; break;
    case 6: return parse_choice(opt, v, perf_dtype_parse, &o->dtype, err, errlen);
    case 7: return parse_choice(opt, v, perf_op_parse, &o->op, err, errlen);
    case 8:
        ok = strcmp(v, "all") == 0 || parse_int(v, 0, LAUNCH_MAX_RANKS - 1, &o->root) == 0;
        o->root = strcmp(v, "all") == 0 ? PERF_ALL : o->root;
        break;
    case 9: ok = launch_parse_nranks(v, &o->nranks) == 0; break;
    case 10: ok = *v != '\0'; o->json_path = v; break;
    default: break;
    }
    if (!ok)
        snprintf(err, errlen, "invalid value '%s' for %s", v, opt);
    return ok ? 0 : -1;
}

static void set_defaults(perf_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->coll = -2; /* not given yet */
    o->minbytes = 8;
    o->maxbytes = 64u << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->dtype = CHORUS_FLOAT32;
    o->op = CHORUS_SUM;
    o->root = 0;
}

static int set_collective(perf_opts_t *o, const char *arg, char *err, size_t errlen)
{
    if (o->coll != -2) {
        snprintf(err, errlen, "unexpected argument '%s' (the collective is already given)",
                 arg);
        return -1;
    }
    if (strcmp(arg, "all") == 0) {
        o->coll = PERF_ALL;
        return 0;
    }
    o->coll = perf_coll_parse(arg);
    if (o->coll < 0) {
        snprintf(err, errlen, "unknown collective '%s' (expected allreduce, allgather, "
                 "broadcast, reduce_scatter, reduce, alltoall, barrier or all)", arg);
        return -1;
    }
    return 0;
}

int perf_opts_parse(int argc, char **argv, perf_opts_t *o, char *err, size_t errlen)
{
    set_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        int which;

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            o->help = 1;
            return 0;
        }
        if (strcmp(arg, "--version") == 0) {
            o->version = 1;
            return 0;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (set_collective(o, arg, err, errlen) != 0)
                return -1;
            continue;
        }
        which = find_value_opt(arg, &value);
        if (which < 0) {
            snprintf(err, errlen, "unknown option '%s'", arg);
            return -1;
        }
        if (value == NULL && i + 1 >= argc) {
            snprintf(err, errlen, "option %s needs a value", arg);
            return -1;
        }
        if (which == 9) {
            if (o->np_argi != 0) {
                snprintf(err, errlen, "option -np given twice");
                return -1;
            }
            o->np_argi = i;
        }
        if (set_value(o, which, arg, value ? value : argv[++i], err, errlen) != 0)
            return -1;
    }
    if (o->coll == -2) {
        snprintf(err, errlen, "no collective given");
        return -1;
    }
    if (o->minbytes > o->maxbytes) {
        snprintf(err, errlen, "minbytes %zu is larger than maxbytes %zu", o->minbytes,
                 o->maxbytes);
        return -1;
    }
    return 0;
}

size_t perf_next_size(const perf_opts_t *opts, size_t prev, int *done_p)
{
    *done_p = prev >= opts->maxbytes;
    if (*done_p)
        return 0;
    if (prev == 0)
        return 1;
    /*
     * prev * factor, but never past maxbytes: where it would pass, the sweep ends on
     * maxbytes itself, the size the header announces. Written so it cannot overflow.
     */
    if (prev > opts->maxbytes / opts->factor)
        return opts->maxbytes;
    return prev * opts->factor;
}

char **perf_opts_strip_np(int argc, char **argv, const perf_opts_t *opts)
{
    char **out = calloc((size_t)argc + 1, sizeof(char *));
    int k = 0;

    if (out == NULL)
        return NULL;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && i == opts->np_argi) {
            i++; /* and its value */
            continue;
        }
        out[k++] = argv[i];
    }
    out[k] = NULL;
    return out;
}
