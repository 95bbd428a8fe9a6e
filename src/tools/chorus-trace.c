/*
 * chorus-trace: work with the timelines CHORUS_TRACE writes.
 *   chorus-trace merge PREFIX -o FILE   one timeline of every rank's PREFIX.<rank>.json
 *
 * Each rank's file holds its own clock's times, the moment on that clock
 * when every rank finished creating the job's communicator, and its clock
 * domain (the node: processes of one node read one clock). Ranks of rank
 * 0's node keep their times; the ranks of any other node are shifted
 * together by the mean difference between their moments and rank 0's, so
 * that the nodes' events line up although their clocks do not. Each rank
 * gets a track of its own (Chrome trace-event metadata events).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "tools/tool_version.h"
#include "util/json.h"

/* Largest trace file read (a full ring of the largest size is far below). */
#define TRACE_FILE_MAX ((size_t)1 << 30)

typedef struct {
    char *path;
    chorus__json_t *doc;
    const chorus__json_t *events;   /* its traceEvents array */
    double sync_us;                 /* 0: the rank never finished creating the communicator */
    const char *domain;             /* its clock's domain; "" when not known */
    double shift_us;                /* added to its times */
    double dropped;
} rank_trace_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: chorus-trace merge PREFIX -o FILE [--no-align]\n"
            "       chorus-trace --help | --version\n"
            "\n"
            "Merges the per-rank timelines that CHORUS_TRACE=PREFIX wrote (PREFIX.0.json,\n"
            "PREFIX.1.json, ...) into one Chrome trace-event file, one track per rank, that\n"
            "Perfetto (ui.perfetto.dev) and chrome://tracing open.\n"
            "\n"
            "  -o, --output FILE  write the merged timeline to FILE ('-': standard output)\n"
            "  --no-align         keep each rank's own clock instead of aligning the ranks at\n"
            "                     the end of the communicator's creation (ranks of one machine\n"
            "                     already share a clock)\n"
            "  -h, --help         print this help\n"
            "  -V, --version      print the version\n");
}

/* The whole file, NUL-terminated; NULL with a message when it cannot be read. */
static char *read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0, cap = 0;

    if (f == NULL) {
        fprintf(stderr, "chorus-trace: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (len + 1 >= cap) {
            char *more;

            cap = cap ? cap * 2 : 1 << 16;
            if (cap > TRACE_FILE_MAX + 1 || (more = realloc(text, cap)) == NULL) {
                fprintf(stderr, "chorus-trace: %s is too large (more than %zu bytes)\n", path,
                        TRACE_FILE_MAX);
                free(text);
                fclose(f);
                return NULL;
            }
            text = more;
        }
        size_t n = fread(text + len, 1, cap - len - 1, f);

        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "chorus-trace: reading %s failed: %s\n", path, strerror(errno));
        free(text);
        fclose(f);
        return NULL;
    }
    fclose(f);
    text[len] = '\0';
    *len_p = len;
    return text;
}

/* Read and check PREFIX.<rank>.json; size_p: the ranks it says the job has. */
static int rank_load(rank_trace_t *t, const char *prefix, int rank, int *size_p)
{
    const chorus__json_t *other;
    const char *format;
    char err[160];
    size_t len;
    char *text;
    int n = snprintf(NULL, 0, "%s.%d.json", prefix, rank);

    t->path = malloc((size_t)n + 1);
    if (t->path == NULL)
        return -1;
    snprintf(t->path, (size_t)n + 1, "%s.%d.json", prefix, rank);
    if ((text = read_file(t->path, &len)) == NULL)
        return -1;
    if (chorus__json_parse(text, len, &t->doc, err, sizeof(err)) != CHORUS_OK) {
        fprintf(stderr, "chorus-trace: %s is not JSON: %s\n", t->path, err);
        free(text);
        return -1;
    }
    free(text);
    t->events = chorus__json_get(t->doc, "traceEvents");
    other = chorus__json_get(t->doc, "otherData");
    format = chorus__json_string(other, "format");
    if (t->events == NULL || t->events->type != CHORUS__JSON_ARRAY || format == NULL ||
        strcmp(format, "chorus-trace") != 0) {
        fprintf(stderr, "chorus-trace: %s is not a chorus trace (no traceEvents array or no "
                "otherData.format \"chorus-trace\")\n", t->path);
        return -1;
    }
    if (chorus__json_number(other, "rank", -1) != rank) {
        fprintf(stderr, "chorus-trace: %s says it is rank %g's trace, not rank %d's\n", t->path,
                chorus__json_number(other, "rank", -1), rank);
        return -1;
    }
    *size_p = (int)chorus__json_number(other, "size", 0);
    t->sync_us = chorus__json_number(other, "clock_sync_us", 0);
    t->domain = chorus__json_string(other, "clock_domain");
    if (t->domain == NULL)
        t->domain = "";
    t->dropped = chorus__json_number(other, "dropped", 0);
    for (size_t i = 0; i < t->events->n; i++) {
        const chorus__json_t *e = &t->events->items[i];
        const char *ph = chorus__json_string(e, "ph");

        if (ph == NULL || chorus__json_string(e, "name") == NULL ||
            (strcmp(ph, "M") != 0 && chorus__json_get(e, "ts") == NULL) ||
            (chorus__json_get(e, "ts") != NULL &&
             chorus__json_get(e, "ts")->type != CHORUS__JSON_NUMBER)) {
            fprintf(stderr, "chorus-trace: %s: event %zu lacks a name, a phase (ph) or a "
                    "numeric time (ts)\n", t->path, i);
            return -1;
        }
    }
    return 0;
}

static void rank_free(rank_trace_t *t)
{
    chorus__json_free(t->doc);
    free(t->path);
}

/* Name the track of each communicator once: "comm 0", "comm 0 setup". */
static void write_thread_names(FILE *out, const rank_trace_t *t, int rank)
{
    long long *seen = NULL;
    size_t nseen = 0;

    for (size_t i = 0; i < t->events->n; i++) {
        double tid = chorus__json_number(&t->events->items[i], "tid", 0);
        long long id = (long long)tid;
        size_t k = 0;

        while (k < nseen && seen[k] != id)
            k++;
        if (k < nseen)
            continue;
        long long *more = realloc(seen, (nseen + 1) * sizeof(*seen));

        if (more == NULL)
            break;
        seen = more;
        seen[nseen++] = id;
        fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%lld,"
                "\"args\":{\"name\":\"comm %lld%s\"}}", rank, id, id & 0x7fffffffLL,
                (id & 0x80000000LL) ? " setup" : "");
    }
    free(seen);
}

static int merge_write(FILE *out, rank_trace_t *ranks, int size)
{
    fprintf(out, "{\"traceEvents\":[\n");
    for (int r = 0; r < size; r++) {
        fprintf(out, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"rank %d\"}},\n{\"name\":\"process_sort_index\","
                "\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
                r ? ",\n" : "", r, r, r, r);
        write_thread_names(out, &ranks[r], r);
    }
    for (int r = 0; r < size; r++) {
        double shift = ranks[r].shift_us;

        for (size_t i = 0; i < ranks[r].events->n; i++) {
            chorus__json_t *e = &ranks[r].events->items[i];
            const char *ph = chorus__json_string(e, "ph");

            if (strcmp(ph, "M") == 0)
                continue;   /* the names above replace the rank's own */
            for (size_t k = 0; k < e->n; k++) {
                if (strcmp(e->items[k].key, "ts") == 0)
                    e->items[k].number += shift;
                else if (strcmp(e->items[k].key, "pid") == 0)
                    e->items[k].number = r;
            }
            fputs(",\n", out);
            chorus__json_write(out, e);
        }
    }
    fprintf(out, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":"
            "\"chorus-trace-merged\",\"version\":1,\"ranks\":%d,\"offsets_us\":[", size);
    for (int r = 0; r < size; r++)
        fprintf(out, "%s%.3f", r ? "," : "", ranks[r].shift_us);
    fprintf(out, "],\"dropped\":[");
    for (int r = 0; r < size; r++)
        fprintf(out, "%s%.0f", r ? "," : "", ranks[r].dropped);
    fprintf(out, "]}}\n");
    return ferror(out) ? -1 : 0;
}

static int same_clock(const rank_trace_t *a, const rank_trace_t *b)
{
    return a->domain[0] != '\0' && strcmp(a->domain, b->domain) == 0;
}

/*
 * Each rank's shift: none on rank 0's node; elsewhere, for every rank of a
 * node alike, the mean of (rank 0's moment - its moment) over the node's ranks.
 */
static int align_clocks(rank_trace_t *ranks, int size)
{
    for (int r = 0; r < size; r++) {
        double sum = 0;
        int n = 0;

        if (same_clock(&ranks[r], &ranks[0]))
            continue;
        for (int q = 0; q < size; q++) {
            if (q != r && !same_clock(&ranks[q], &ranks[r]))
                continue;
            if (ranks[q].sync_us <= 0 || ranks[0].sync_us <= 0) {
                fprintf(stderr, "chorus-trace: %s has no clock point (the rank never finished "
                        "creating its communicator); use --no-align\n",
                        ranks[q].sync_us <= 0 ? ranks[q].path : ranks[0].path);
                return -1;
            }
            sum += ranks[0].sync_us - ranks[q].sync_us;
            n++;
        }
        ranks[r].shift_us = sum / n;
    }
    return 0;
}

static int merge(const char *prefix, const char *output, int align)
{
    rank_trace_t *ranks = calloc(1, sizeof(*ranks)), *more;
    int size = 0, held = 1, rc = 1;
    FILE *out;

    if (ranks == NULL || rank_load(&ranks[0], prefix, 0, &size) != 0)
        goto done;
    if (size < 1 || size > (1 << 20)) {
        fprintf(stderr, "chorus-trace: %s gives no valid job size (otherData.size)\n",
                ranks[0].path);
        goto done;
    }
    more = realloc(ranks, (size_t)size * sizeof(*ranks));
    if (more == NULL)
        goto done;
    ranks = more;
    memset(ranks + 1, 0, (size_t)(size - 1) * sizeof(*ranks));
    held = size;
    for (int r = 1; r < size; r++) {
        int other = 0;

        if (rank_load(&ranks[r], prefix, r, &other) != 0)
            goto done;
        if (other != size) {
            fprintf(stderr, "chorus-trace: %s says the job has %d ranks, %s says %d\n",
                    ranks[r].path, other, ranks[0].path, size);
            goto done;
        }
    }
    if (align && align_clocks(ranks, size) != 0)
        goto done;
    out = strcmp(output, "-") == 0 ? stdout : fopen(output, "w");
    if (out == NULL) {
        fprintf(stderr, "chorus-trace: cannot write %s: %s\n", output, strerror(errno));
        goto done;
    }
    rc = merge_write(out, ranks, size);
    if ((out != stdout && fclose(out) != 0) || rc != 0) {
        fprintf(stderr, "chorus-trace: writing %s failed: %s\n", output, strerror(errno));
        rc = 1;
    }
done:
    /* Entries never loaded are zero: freeing them frees nothing. */
    for (int r = 0; ranks != NULL && r < held; r++)
        rank_free(&ranks[r]);
    free(ranks);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"no-align", no_argument, NULL, 'A'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *output = NULL;
    int align = 1, c;

    /* Options may come before or after "merge PREFIX" (getopt_long permutes). */
    /* Long options only by their whole names: getopt would take "--versio" for --version. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        size_t len = strcspn(argv[i], "=");
        int known = strncmp(argv[i], "--", 2) != 0;

        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            i++;    /* its value is a file name, whatever it looks like */
            continue;
        }
        for (const struct option *o = longopts; !known && o->name != NULL; o++)
            known = len == strlen(o->name) + 2 && strncmp(argv[i] + 2, o->name, len - 2) == 0;
        if (!known) {
            fprintf(stderr, "chorus-trace: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    opterr = 0;     /* the messages below name the option as it was given */
    while ((c = getopt_long(argc, argv, ":o:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'A':
            align = 0;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            tool_version_print(stdout, "chorus-trace", chorus_version_string());
            return 0;
        case ':':
            fprintf(stderr, "chorus-trace: option '%s' needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "chorus-trace: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "chorus-trace: no command given (merge)\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[optind], "merge") != 0) {
        fprintf(stderr, "chorus-trace: unknown command '%s' (merge)\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "chorus-trace: merge takes one PREFIX (got %d arguments)\n",
                argc - optind - 1);
        return 2;
    }
    if (output == NULL) {
        fprintf(stderr, "chorus-trace: merge needs -o FILE\n");
        return 2;
    }
    return merge(argv[optind + 1], output, align);
}
