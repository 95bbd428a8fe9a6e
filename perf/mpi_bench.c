/*
 * mpi_bench: the MPI side of perf/compare.py. It times the collectives that
 * chorus-perf times, on the same sizes and with the same conventions, so that
 * chorus can be compared with an MPI library on the same machine.
 *
 * Built by compare.py at run time with each MPI's own compiler wrapper
 * (mpicc.openmpi, mpicc.mpich) and started with that MPI's own mpirun. It
 * uses MPI only; it does not link chorus.
 *
 * Conventions shared with chorus-perf, so that the figures pair up:
 * - float32 sum; a size is the whole buffer (for allgather and
 *   reduce_scatter each rank contributes size / ranks; for alltoall it is
 *   each rank's whole send buffer, size / ranks to every peer);
 * - calls are in place (chorus-perf's in_place variant): MPI_IN_PLACE for
 *   allreduce, allgather, reduce_scatter_block and alltoall, broadcast from
 *   root 0;
 * - each size is checked exactly on integer-valued floats, whose sums are
 *   exact whatever the reduction order, before it is timed;
 * - the timed calls rotate over several buffers so that large sizes are not
 *   cache-warm; time is the slowest rank's average per call.
 *
 * Rank 0 prints one JSON object per line on stdout: a header line, one line
 * per size, and a summary line. Exit codes: 0 ok, 2 usage, 3 wrong results.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_WRONG 3
#define BENCH_MAX_SIZES 64
#define BENCH_MAX_BUFS 16
/* Check values repeat with this period; small integers, so every sum is exact. */
#define BENCH_PERIOD 13
/* Alltoall's check values, 16 (from n + to) + 12, stay below 2^24 up to here. */
#define BENCH_A2A_MAX_RANKS 1024

typedef enum {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_BROADCAST,
    COLL_ALLTOALL
} coll_t;

static const char *const coll_names[] = {"allreduce", "allgather", "reduce_scatter",
                                         "broadcast", "alltoall"};

typedef struct {
    coll_t coll;
    size_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    int iters, warmup;             /* below large_from */
    size_t large_from;             /* sizes from here on use the large_ counts */
    int large_iters, large_warmup;
    int buffers;                   /* rotating buffers per size, at most */
    size_t max_buffer_mem;         /* bytes of rotating buffers per rank, at most */
} bench_opts_t;

typedef struct {
    const bench_opts_t *o;
    int rank, nranks;
    size_t count;                  /* elements per rank's block (whole buffer if unblocked) */
    size_t elems;                  /* elements of one whole buffer */
    float *bufs[BENCH_MAX_BUFS];
    int nbufs;
} bench_case_t;

static const char usage_text[] =
    "usage: mpi_bench -c COLL -s SIZES [-n ITERS] [-w WARMUP] [-L BYTES -N ITERS -W WARMUP]\n"
    "                 [-b BUFFERS] [-m BYTES]\n"
    "  COLL: allreduce allgather reduce_scatter broadcast alltoall\n"
    "        (float32, reductions sum, every call in place)\n"
    "  SIZES: comma-separated whole-buffer sizes in bytes\n"
    "  -L BYTES: sizes from BYTES on run -N timed and -W warmup calls instead\n"
    "  -b: rotating buffers per size (default 4); -m: their bytes per rank at most\n";

static int parse_ull(const char *text, unsigned long long max, unsigned long long *v_p)
{
    char *end;
    unsigned long long v;

    if (text == NULL || *text < '0' || *text > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *v_p = v;
    return 0;
}

static int parse_int_opt(const char *text, int min, int *v_p)
{
    unsigned long long v;

    if (parse_ull(text, 1u << 30, &v) != 0 || (long long)v < min)
        return -1;
    *v_p = (int)v;
    return 0;
}

static int parse_sizes(const char *text, bench_opts_t *o)
{
    char copy[4096], *save = NULL;

    if (strlen(text) >= sizeof(copy))
        return -1;
    strcpy(copy, text);
    o->nsizes = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned long long v;
        if (o->nsizes == BENCH_MAX_SIZES || parse_ull(tok, 1ull << 40, &v) != 0)
            return -1;
        o->sizes[o->nsizes++] = (size_t)v;
    }
    return o->nsizes > 0 ? 0 : -1;
}

static int parse_coll(const char *text, coll_t *coll_p)
{
    for (int i = 0; i < (int)(sizeof(coll_names) / sizeof(coll_names[0])); i++) {
        if (strcmp(text, coll_names[i]) == 0) {
            *coll_p = (coll_t)i;
            return 0;
        }
    }
    return -1;
}

static int parse_opts(int argc, char **argv, bench_opts_t *o)
{
    unsigned long long v;
    int have_coll = 0;

    *o = (bench_opts_t){.iters = 20, .warmup = 5, .large_from = SIZE_MAX,
                        .large_iters = 20, .large_warmup = 5, .buffers = 4,
                        .max_buffer_mem = 1024ul << 20};
    for (int i = 1; i < argc; i += 2) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL;

        if (ok && strcmp(opt, "-c") == 0) {
            ok = parse_coll(val, &o->coll) == 0;
            have_coll = 1;
        } else if (ok && strcmp(opt, "-s") == 0)
            ok = parse_sizes(val, o) == 0;
        else if (ok && strcmp(opt, "-n") == 0)
            ok = parse_int_opt(val, 1, &o->iters) == 0;
        else if (ok && strcmp(opt, "-w") == 0)
            ok = parse_int_opt(val, 0, &o->warmup) == 0;
        else if (ok && strcmp(opt, "-N") == 0)
            ok = parse_int_opt(val, 1, &o->large_iters) == 0;
        else if (ok && strcmp(opt, "-W") == 0)
            ok = parse_int_opt(val, 0, &o->large_warmup) == 0;
        else if (ok && strcmp(opt, "-b") == 0)
            ok = parse_int_opt(val, 1, &o->buffers) == 0 && o->buffers <= BENCH_MAX_BUFS;
        else if (ok && (strcmp(opt, "-L") == 0 || strcmp(opt, "-m") == 0)) {
            ok = parse_ull(val, 1ull << 40, &v) == 0;
            *(opt[1] == 'L' ? &o->large_from : &o->max_buffer_mem) = (size_t)v;
        } else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "mpi_bench: invalid option or value: %s %s\n%s", opt,
                    val ? val : "(missing)", usage_text);
            return -1;
        }
    }
    if (!have_coll || o->nsizes == 0) {
        fprintf(stderr, "mpi_bench: -c and -s are required\n%s", usage_text);
        return -1;
    }
    return 0;
}

static int is_blocked(coll_t coll)
{
    return coll == COLL_ALLGATHER || coll == COLL_REDUCE_SCATTER || coll == COLL_ALLTOALL;
}

static double busbw_factor(coll_t coll, int n)
{
    switch (coll) {
    case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* ---- inputs and their exact results --------------------------------------- */

static float pattern(size_t i, int offset)
{
    return (float)(i % BENCH_PERIOD) + (float)offset;
}

/*
 * Alltoall: element k of the block that rank i sends to rank j holds
 * 16 (i n + j) + k % 13, so every value names its sender and its destination.
 */
static float a2a_value(int from, int to, int n, size_t k)
{
    return (float)(16 * ((long)from * n + to)) + (float)(k % BENCH_PERIOD);
}

/*
 * Known inputs in buffer b. Allgather's blocks differ per rank (100 * rank);
 * reductions add the rank, so element i of the sum is n * (i % 13) + n(n-1)/2.
 * Every value stays below 2^24, so float32 holds it exactly (alltoall: up to
 * BENCH_A2A_MAX_RANKS ranks, which main checks).
 */
static void fill(bench_case_t *c, float *b)
{
    size_t own = (size_t)c->rank * c->count;

    switch (c->o->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < c->elems; i++)
            b[i] = pattern(i, c->rank);
        break;
    case COLL_ALLGATHER:
        for (size_t i = 0; i < c->elems; i++)
            b[i] = -1.0f;
        for (size_t i = 0; i < c->count; i++)
            b[own + i] = pattern(i, 100 * c->rank);
        break;
    case COLL_BROADCAST:
        for (size_t i = 0; i < c->elems; i++)
            b[i] = c->rank == 0 ? pattern(i, 1) : -1.0f;
        break;
    case COLL_ALLTOALL:
        for (int j = 0; j < c->nranks; j++)
            for (size_t k = 0; k < c->count; k++)
                b[(size_t)j * c->count + k] = a2a_value(c->rank, j, c->nranks, k);
        break;
    }
}

/* Elements of buffer b that differ from the exact result on this rank. */
static long long count_wrong(const bench_case_t *c, const float *b)
{
    int n = c->nranks;
    float base = (float)(n * (n - 1) / 2);
    size_t own = (size_t)c->rank * c->count;
    long long bad = 0;

    switch (c->o->coll) {
    case COLL_ALLREDUCE:
        for (size_t i = 0; i < c->elems; i++)
            bad += b[i] != (float)(n * (int)(i % BENCH_PERIOD)) + base;
        break;
    case COLL_REDUCE_SCATTER:
        /* MPI_IN_PLACE: this rank's block of the sum lands at the start of b */
        for (size_t i = 0; i < c->count; i++)
            bad += b[i] != (float)(n * (int)((own + i) % BENCH_PERIOD)) + base;
        break;
    case COLL_ALLGATHER:
        for (size_t i = 0; i < c->elems; i++)
            bad += b[i] != pattern(i % c->count, 100 * (int)(i / c->count));
        break;
    case COLL_BROADCAST:
        for (size_t i = 0; i < c->elems; i++)
            bad += b[i] != pattern(i, 1);
        break;
    case COLL_ALLTOALL:
        /* block j now holds what rank j sent to this rank */
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < c->count; k++)
                bad += b[(size_t)j * c->count + k] != a2a_value(j, c->rank, n, k);
        break;
    }
    return bad;
}

/* ---- calls and timing ----------------------------------------------------- */

static int call(const bench_case_t *c, float *b)
{
    int cnt = (int)c->count;

    switch (c->o->coll) {
    case COLL_ALLREDUCE:
        return MPI_Allreduce(MPI_IN_PLACE, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case COLL_ALLGATHER:
        return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, cnt, MPI_FLOAT,
                             MPI_COMM_WORLD);
    case COLL_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(MPI_IN_PLACE, b, cnt, MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD);
    case COLL_BROADCAST:
        return MPI_Bcast(b, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
    case COLL_ALLTOALL:
        return MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, cnt, MPI_FLOAT,
                            MPI_COMM_WORLD);
    }
    return MPI_ERR_ARG;
}

/* A failed call leaves the other ranks waiting in theirs: end the whole job. */
static void call_or_abort(const bench_case_t *c, float *b, size_t bytes)
{
    int rc = call(c, b), len = 0;
    char msg[MPI_MAX_ERROR_STRING];

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "mpi_bench: rank %d: %s of %zu bytes failed: %s\n", c->rank,
            coll_names[c->o->coll], bytes, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int case_alloc(bench_case_t *c, size_t bytes)
{
    size_t room = c->o->max_buffer_mem / (bytes > 0 ? bytes : 1);

    c->nbufs = room < 1 ? 1 : room > (size_t)c->o->buffers ? c->o->buffers : (int)room;
    for (int k = 0; k < c->nbufs; k++) {
        if (posix_memalign((void **)&c->bufs[k], 4096, bytes > 0 ? bytes : 4) != 0) {
            fprintf(stderr, "mpi_bench: rank %d: cannot allocate %d buffers of %zu bytes\n",
                    c->rank, c->nbufs, bytes);
            for (int j = 0; j < k; j++)
                free(c->bufs[j]);
            return -1;
        }
    }
    return 0;
}

static void case_free(bench_case_t *c)
{
    for (int k = 0; k < c->nbufs; k++)
        free(c->bufs[k]);
    c->nbufs = 0;
}

/* The slowest rank's average time per call in microseconds (valid on rank 0). */
static double time_calls(bench_case_t *c, size_t bytes, int iters, int warmup)
{
    double t0, us, max_us = 0;

    for (int i = 0; i < warmup; i++)
        call_or_abort(c, c->bufs[i % c->nbufs], bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        call_or_abort(c, c->bufs[i % c->nbufs], bytes);
    us = (MPI_Wtime() - t0) * 1e6 / iters;
    MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return max_us;
}

/* Checks then times one size; prints its line on rank 0. Returns wrong elements or -1. */
static long long run_size(const bench_opts_t *o, int rank, int nranks, size_t size)
{
    bench_case_t c = {.o = o, .rank = rank, .nranks = nranks};
    int large = size >= o->large_from;
    int iters = large ? o->large_iters : o->iters, warmup = large ? o->large_warmup : o->warmup;
    long long wrong = 0, all_wrong = 0;
    size_t bytes;
    double us, algbw;

    c.count = size / sizeof(float) / (is_blocked(o->coll) ? (size_t)nranks : 1);
    c.elems = c.count * (is_blocked(o->coll) ? (size_t)nranks : 1);
    bytes = c.elems * sizeof(float);
    if (c.count == 0 || c.count > INT32_MAX) {
        if (rank == 0)
            fprintf(stderr, "mpi_bench: size %zu gives %zu elements per call for %s on %d "
                    "ranks: skipped\n", size, c.count, coll_names[o->coll], nranks);
        return 0;
    }
    if (case_alloc(&c, bytes) != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    fill(&c, c.bufs[0]);
    call_or_abort(&c, c.bufs[0], bytes);
    wrong = count_wrong(&c, c.bufs[0]);
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    /* Timed calls run on check values too, so that no NaN or denormal skews them. */
    for (int k = 0; k < c.nbufs; k++)
        fill(&c, c.bufs[k]);
    us = all_wrong == 0 ? time_calls(&c, bytes, iters, warmup) : 0;
    algbw = us > 0 ? (double)bytes / us / 1e3 : 0;
    if (rank == 0)
        printf("{\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"buffers\": %d, "
               "\"iters\": %d, \"warmup\": %d, \"time_us\": %.3f, \"algbw\": %.6f, "
               "\"busbw\": %.6f, \"wrong\": %lld}\n", coll_names[o->coll], bytes, c.count,
               c.nbufs, iters, warmup, us, algbw, algbw * busbw_factor(o->coll, nranks),
               all_wrong);
    fflush(stdout);
    case_free(&c);
    return all_wrong;
}

static void print_header(const bench_opts_t *o, int nranks)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;

    MPI_Get_library_version(version, &len);
    /* some libraries append their whole configure line: the first words name it */
    if (len > 120)
        len = 120;
    version[len] = '\0';
    /* JSON strings cannot hold raw newlines or quotes */
    for (int i = 0; i < len; i++)
        if (version[i] == '\n' || version[i] == '"' || version[i] == '\\' ||
            (unsigned char)version[i] < 0x20)
            version[i] = ' ';
    printf("{\"tool\": \"mpi_bench\", \"collective\": \"%s\", \"nranks\": %d, "
           "\"in_place\": true, \"type\": \"float32\", \"op\": \"sum\", "
           "\"library\": \"%s\"}\n", coll_names[o->coll], nranks, version);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    int rank, nranks;
    long long wrong_total = 0, w;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (parse_opts(argc, argv, &o) != 0) {
        MPI_Finalize();
        return BENCH_EXIT_USAGE;
    }
    if (o.coll == COLL_ALLTOALL && nranks > BENCH_A2A_MAX_RANKS) {
        if (rank == 0)
            fprintf(stderr, "mpi_bench: alltoall checks up to %d ranks exactly, not %d\n",
                    BENCH_A2A_MAX_RANKS, nranks);
        MPI_Finalize();
        return BENCH_EXIT_USAGE;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 0)
        print_header(&o, nranks);
    for (int i = 0; i < o.nsizes; i++) {
        w = run_size(&o, rank, nranks, o.sizes[i]);
        wrong_total += w;
        if (w != 0)
            break; /* wrong results: nothing after them is worth timing */
    }
    if (rank == 0)
        printf("{\"wrong_total\": %lld}\n", wrong_total);
    fflush(stdout);
    MPI_Finalize();
    return wrong_total != 0 ? BENCH_EXIT_WRONG : 0;
}
