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
    "       chorus-perf fc_weight_grad [--rows R,...] [--in I,...] [--out O,...] [options]\n"
    "\n"
    "Measures a collective over a sweep of message sizes, in the style of nccl-tests.\n"
    "COLLECTIVE: allreduce allgather broadcast reduce_scatter reduce alltoall barrier,\n"
    "or all (each in turn). fc_weight_grad measures chorus_fc_weight_grad for every\n"
    "combination of the shapes given, with each strategy forced and as chosen (below).\n"
    "\n"
    "  -b, --minbytes N     smallest message size in bytes (default 8; K, M, G suffixes)\n"
    "  -e, --maxbytes N     largest message size (default 64M)\n"
    "  -f, --stepfactor N   size multiplier between rows (default 2)\n"
    "  -n, --iters N        timed iterations per row (default 20)\n"
    "  -w, --warmup_iters N untimed iterations before them (default 5)\n"
    "  -c, --check 0|1      check results exactly, in separate iterations (default 1)\n"
    "  -d, --datatype T     int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
    "                       float32 float64, or all (default float32); fc_weight_grad\n"
    "                       takes float16 bfloat16 float32 float64 (all: these four)\n"
    "  -o, --op OP          sum prod min max avg, or all (default sum)\n"
    "  -r, --root R         root of broadcast and reduce, or all (default 0)\n"
    "  --rows N[,N...]      fc_weight_grad: rows of x and e on each rank (default 32)\n"
    "  --in N[,N...]        fc_weight_grad: input features, 1 or more (default 1024)\n"
    "  --out N[,N...]       fc_weight_grad: output features, 1 or more (default 1024)\n"
    "  -np N                start N local ranks of chorus-perf, each on a CPU of its\n"
    "                       own when they fit (default: run as one rank of the job\n"
    "                       that started it; see below)\n"
    "  --compress W         allreduce or reduce_scatter of float32 by sum or avg\n"
    "                       compressed on the wire,\n"
    "                       W fp16 or bf16; results are checked against the bound of\n"
    "                       chorus_allreduce(3) instead of exactly\n"
    "  --mem M              where the buffers are: host (default), chorus (host memory\n"
    "                       from chorus_mem_alloc, which local peers read and write\n"
    "                       directly) or cuda (device memory of GPU rank % GPUs, every\n"
    "                       call made with mem_type CHORUS_MEM_CUDA; a build with CUDA\n"
    "                       only)\n"
    "  --json FILE          also write the results to FILE as JSON\n"
    "  -h, --help           print this help\n"
    "  --version            print the version of chorus-perf and of the library\n"
    "\n"
    "Without -np, chorus-perf is one rank of a job started by chorus-run (which sets\n"
    "CHORUS_RANK, CHORUS_SIZE and CHORUS_ADDR); by torchrun (RANK, WORLD_SIZE, MASTER_ADDR\n"
    "and MASTER_PORT); by a PMIx server (Open MPI's mpirun, srun --mpi=pmix) when the\n"
    "library was built with PMIx (chorus-info lists pmix); or by Open MPI's mpirun,\n"
    "MPICH's mpiexec or srun without PMIx, given CHORUS_ADDR, a host:port where rank 0\n"
    "can listen. Give every rank the same CHORUS_SECRET where the launcher does not make\n"
    "one (chorus-run and PMIx do).\n"
    "\n"
    "Sizes are the whole buffer: for allgather, reduce_scatter and alltoall each rank\n"
    "contributes size / ranks. busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for\n"
    "allgather, reduce_scatter and alltoall, 1 for broadcast and reduce. Time is the\n"
    "slowest rank's average. Sizes run from -b up to -e, -e included; a size that\n"
    "gives no whole element per rank is skipped with a note. The algorithm column names\n"
    "what the library chose for each size (asked of one untimed call).\n"
    "\n"
    "fc_weight_grad prints one row per shape and dtype: the time of a call with the\n"
    "late strategy forced, with allreduce forced, and with the library choosing (auto),\n"
    "then the strategy auto chose and whether it is the faster of the two forced ones.\n"
    "Every iteration runs the three in turn, each after a barrier, so that drift in\n"
    "the machine affects them alike; time is the slowest rank's average. -b, -e, -f,\n"
    "-o and -r do not apply to it, nor --rows, --in and --out to the collectives.\n"
    "\n"
    "The exit code is 1 when any element was wrong, 2 for a usage error.\n";

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

/* What an option applies to: any command, the collectives, or fc_weight_grad. */
enum { FOR_ANY, FOR_COLL, FOR_FC };

/* Options taking a value: short name, long name, what it applies to. */
static const struct {
    const char *short_name, *long_name;
    int scope;
} value_opts[] = {
    {"-b", "--minbytes", FOR_COLL}, {"-e", "--maxbytes", FOR_COLL},
    {"-f", "--stepfactor", FOR_COLL}, {"-n", "--iters", FOR_ANY},
    {"-w", "--warmup_iters", FOR_ANY}, {"-c", "--check", FOR_ANY},
    {"-d", "--datatype", FOR_ANY},  {"-o", "--op", FOR_COLL},
    {"-r", "--root", FOR_COLL},     {"-np", "-np", FOR_ANY},
    {"--json", "--json", FOR_ANY},  {"--rows", "--rows", FOR_FC},
    {"--in", "--in", FOR_FC},       {"--out", "--out", FOR_FC},
    {"--compress", "--compress", FOR_COLL}, {"--mem", "--mem", FOR_COLL},
};

#define VALUE_OPT_COUNT (sizeof(value_opts) / sizeof(value_opts[0]))

/* Index in value_opts of arg ("--op=sum" sets *inline_p to "sum"), or -1. */
static int find_value_opt(const char *arg, const char **inline_p)
{
    *inline_p = NULL;
    for (size_t i = 0; i < VALUE_OPT_COUNT; i++) {
        size_t len = strlen(value_opts[i].long_name);
        if (strcmp(arg, value_opts[i].short_name) == 0 ||
            strcmp(arg, value_opts[i].long_name) == 0)
            return (int)i;
        if (strncmp(arg, value_opts[i].long_name, len) == 0 && arg[len] == '=' &&
            arg[1] == '-') {
            *inline_p = arg + len + 1;
            return (int)i;
        }
    }
    return -1;
}

/*
 * "4,0,1K" into list: sizes as perf_parse_size reads them, each at least min,
 * at most PERF_LIST_MAX of them; -1 when any is invalid or missing.
 */
static int parse_size_list(const char *text, size_t min, perf_size_list_t *list)
{
    perf_size_list_t got = {.n = 0};
    char item[32];

    for (const char *p = text;; p++) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof(item) || got.n == PERF_LIST_MAX)
            return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (perf_parse_size(item, &got.v[got.n]) != 0 || got.v[got.n] < min)
            return -1;
        got.n++;
        p += len;
        if (*p == '\0')
            break;
    }
    *list = got;
    return 0;
}

/* set_value for --rows, --in and --out: the message says what a list holds. */
static int set_list(const char *opt, const char *v, size_t min, perf_size_list_t *list,
                    char *err, size_t errlen)
{
    if (parse_size_list(v, min, list) == 0)
        return 0;
    snprintf(err, errlen, "invalid value '%s' for %s (expected up to %d sizes of %zu or more, "
             "separated by commas)", v, opt, PERF_LIST_MAX, min);
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
    case 11: return set_list(opt, v, 0, &o->rows, err, errlen);
    case 12: return set_list(opt, v, 1, &o->in, err, errlen);
    case 13: return set_list(opt, v, 1, &o->out, err, errlen);
    case 14:
        o->compress = strcmp(v, "fp16") == 0   ? CHORUS_COMPRESS_FP16
                      : strcmp(v, "bf16") == 0 ? CHORUS_COMPRESS_BF16
                                               : 0;
        ok = o->compress != 0;
        break;
    case 15:
        ok = strcmp(v, "host") == 0 || strcmp(v, "cuda") == 0 || strcmp(v, "chorus") == 0;
        o->mem_cuda = strcmp(v, "cuda") == 0;
        o->mem_chorus = strcmp(v, "chorus") == 0;
        break;
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
    o->rows = (perf_size_list_t){.v = {32}, .n = 1};
    o->in = (perf_size_list_t){.v = {1024}, .n = 1};
    o->out = (perf_size_list_t){.v = {1024}, .n = 1};
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
    if (strcmp(arg, "fc_weight_grad") == 0) {
        o->coll = PERF_FC_WEIGHT_GRAD;
        return 0;
    }
    o->coll = perf_coll_parse(arg);
    if (o->coll < 0) {
        snprintf(err, errlen, "unknown collective '%s' (expected allreduce, allgather, "
                 "broadcast, reduce_scatter, reduce, alltoall, barrier, all or "
                 "fc_weight_grad)", arg);
        return -1;
    }
    return 0;
}

/* "-b/--minbytes", or "-np" where both names are one. */
static void opt_names(int which, char *buf, size_t len)
{
    if (strcmp(value_opts[which].short_name, value_opts[which].long_name) == 0)
        snprintf(buf, len, "%s", value_opts[which].long_name);
    else
        snprintf(buf, len, "%s/%s", value_opts[which].short_name,
                 value_opts[which].long_name);
}

/*
 * The options given (given[i] for value_opts[i]) against the command: an
 * option that the command would ignore, or a dtype it does not take, is
 * refused, so that nobody reads a result as measured with it.
 */
static int check_command(const perf_opts_t *o, const int *given, char *err, size_t errlen)
{
    int fc = o->coll == PERF_FC_WEIGHT_GRAD;
    char names[32];

    for (size_t i = 0; i < VALUE_OPT_COUNT; i++) {
        if (!given[i] || value_opts[i].scope == FOR_ANY ||
            (value_opts[i].scope == FOR_FC) == fc)
            continue;
        opt_names((int)i, names, sizeof(names));
        if (fc)
            snprintf(err, errlen, "option %s does not apply to fc_weight_grad", names);
        else
            snprintf(err, errlen, "option %s applies to fc_weight_grad only", names);
        return -1;
    }
    if (o->compress != 0 &&
        ((o->coll != PERF_ALLREDUCE && o->coll != PERF_REDUCE_SCATTER) ||
         o->dtype != CHORUS_FLOAT32 || (o->op != CHORUS_SUM && o->op != CHORUS_AVG))) {
        snprintf(err, errlen, "--compress takes allreduce or reduce_scatter of float32 by sum "
                 "or avg only");
        return -1;
    }
    if (fc && o->dtype != PERF_ALL && !perf_dtype_info((chorus_dtype_t)o->dtype)->is_float) {
        snprintf(err, errlen, "fc_weight_grad takes float16, bfloat16, float32 or float64, "
                 "not %s", perf_dtype_info((chorus_dtype_t)o->dtype)->name);
        return -1;
    }
    return 0;
}

int perf_opts_parse(int argc, char **argv, perf_opts_t *o, char *err, size_t errlen)
{
    int given[VALUE_OPT_COUNT] = {0};

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
        given[which] = 1;
    }
    if (o->coll == -2) {
        snprintf(err, errlen, "no collective given");
        return -1;
    }
    if (check_command(o, given, err, errlen) != 0)
        return -1;
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
