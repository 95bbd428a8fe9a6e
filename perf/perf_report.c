/* chorus-perf output: table and JSON. */
#include "perf/perf_report.h"

#include <math.h>
#include <string.h>

#include "perf/perf_data.h"

void perf_row_bandwidth(perf_row_t *row, int nranks)
{
    double factor = perf_busbw_factor(row->coll, nranks);

    for (int k = 0; k < 2; k++) {
        /* bytes / (us * 1e-6) / 1e9 = bytes / us / 1e3 */
        row->algbw[k] = row->time_us[k] > 0 ? (double)row->bytes / row->time_us[k] / 1e3 : 0;
        row->busbw[k] = row->algbw[k] * factor;
    }
}

static const char *row_type(const perf_row_t *row)
{
    const perf_dtype_info_t *info = perf_dtype_info(row->dtype);
    return row->coll == PERF_BARRIER || info == NULL ? "none" : info->name;
}

static const char *row_op(const perf_row_t *row)
{
    return row->op < 0 ? "none" : perf_op_name((chorus_op_t)row->op);
}

/* The first lines of every table: what runs, on how many ranks, on which nodes. */
static void print_title(FILE *f, const char *name, const perf_run_info_t *run)
{
    fprintf(f, "# chorus-perf: %s, nranks %d (%d on this node)\n", name, run->nranks,
            run->local_size);
    fprintf(f, "# nodes: %s\n", run->nodes);
}

void perf_print_header(FILE *f, const perf_opts_t *opts, perf_coll_t coll,
                       const perf_run_info_t *run)
{
    int rooted = perf_coll_info(coll)->rooted;

    print_title(f, perf_coll_info(coll)->name, run);
    if (coll == PERF_BARRIER)
        fprintf(f, "# no data, %d iterations after %d warmup, check %d\n", opts->iters,
                opts->warmup, opts->check);
    else
        fprintf(f, "# sizes %zu to %zu bytes, factor %zu, %d iterations after %d warmup, "
                "check %d\n", opts->minbytes, opts->maxbytes, opts->factor, opts->iters,
                opts->warmup, opts->check);
    if (opts->compress)
        fprintf(f, "# compressed to %s on the wire: checked within the bound of "
                "chorus_allreduce(3)\n", opts->compress == CHORUS_COMPRESS_FP16 ? "float16"
                                                                                : "bfloat16");
    fprintf(f, "#\n");
    /* The labels start over the time column of each half. */
    fprintf(f, "%-*s   %-31s   %s\n", rooted ? 50 : 44, "#", "out-of-place", "in-place");
    fprintf(f, "# %10s  %12s  %8s  %6s", "size", "count", "type", "redop");
    if (rooted)
        fprintf(f, "  %4s", "root");
    fprintf(f, "   %8s %7s %7s %6s   %8s %7s %7s %6s   %s\n", "time", "algbw", "busbw",
            "#wrong", "time", "algbw", "busbw", "#wrong", "algorithm");
    fprintf(f, "# %10s  %12s  %8s  %6s", "(B)", "(elements)", "", "");
    if (rooted)
        fprintf(f, "  %4s", "");
    fprintf(f, "   %8s %7s %7s %6s   %8s %7s %7s %6s\n", "(us)", "(GB/s)", "(GB/s)", "",
            "(us)", "(GB/s)", "(GB/s)", "");
    fflush(f);
}

/* A time in width characters: hundredths while they fit. */
static void print_time(FILE *f, int width, double us)
{
    fprintf(f, "%*.*f", width, us < 1e5 ? 2 : 0, us);
}

/* A count of wrong elements in 6 characters; N/A when not checked (-1). */
static void print_wrong(FILE *f, long long wrong)
{
    if (wrong < 0)
        fprintf(f, "%6s", "N/A");
    else
        fprintf(f, "%6lld", wrong);
}

static void print_half(FILE *f, const perf_row_t *row, int k)
{
    fprintf(f, "   ");
    print_time(f, 8, row->time_us[k]);
    fprintf(f, " %7.2f %7.2f ", row->algbw[k], row->busbw[k]);
    print_wrong(f, row->wrong[k]);
}

void perf_print_row(FILE *f, const perf_row_t *row)
{
    fprintf(f, "  %10zu  %12zu  %8s  %6s", row->bytes, row->elems, row_type(row),
            row_op(row));
    if (row->root >= 0)
        fprintf(f, "  %4d", row->root);
    print_half(f, row, 0);
    print_half(f, row, 1);
    fprintf(f, "   %s\n", row->algorithm != NULL ? row->algorithm : "?");
    fflush(f);
}

void perf_print_skipped(FILE *f, const perf_args_t *a, size_t bytes)
{
    const perf_dtype_info_t *info = perf_dtype_info(a->dtype);

    if (perf_coll_info(a->coll)->blocks)
        fprintf(f, "# %zu bytes skipped: less than one %s element for each of %d ranks\n",
                bytes, info ? info->name : "?", a->nranks);
    else
        fprintf(f, "# %zu bytes skipped: less than one %s element\n", bytes,
                info ? info->name : "?");
    fflush(f);
}

/* "# WHAT wrong elements total: N", or N/A where nothing was checked. */
static void print_wrong_total(FILE *f, const char *what, long long wrong_total, int checked)
{
    if (checked)
        fprintf(f, "# %s wrong elements total: %lld\n", what, wrong_total);
    else
        fprintf(f, "# %s wrong elements total: N/A (not checked)\n", what);
}

void perf_print_footer(FILE *f, long long wrong_total, double avg_busbw, int checked)
{
    print_wrong_total(f, "out-of-place/in-place", wrong_total, checked);
    fprintf(f, "# avg bus bandwidth: %.4f GB/s\n", avg_busbw);
    fflush(f);
}

void perf_print_rounded(FILE *f, const perf_args_t *a, size_t bytes)
{
    const perf_dtype_info_t *info = perf_dtype_info(a->dtype);

    fprintf(f, "# %zu bytes ran as %zu: whole %s elements%s\n", bytes, perf_msg_bytes(a),
            info ? info->name : "?",
            perf_coll_info(a->coll)->blocks ? ", the same number for every rank" : "");
    fflush(f);
}

/* ---- fc_weight_grad ----------------------------------------------------------- */

static const char *const fc_variant_names[PERF_FC_VARIANTS] = {
    [PERF_FC_LATE] = "late", [PERF_FC_ALLREDUCE] = "allreduce", [PERF_FC_AUTO] = "auto",
};

const char *perf_fc_variant_name(perf_fc_variant_t v)
{
    return (unsigned)v < PERF_FC_VARIANTS ? fc_variant_names[v] : "?";
}

int perf_fc_chose_faster(const perf_fc_row_t *row)
{
    int late;

    if (row->chosen == NULL)
        return -1;
    /* The library names its strategies as the forced variants are named here. */
    late = strcmp(row->chosen, fc_variant_names[PERF_FC_LATE]) == 0;
    if (!late && strcmp(row->chosen, fc_variant_names[PERF_FC_ALLREDUCE]) != 0)
        return -1;
    /* A tie counts as the faster: nothing was lost by the choice. */
    return late ? row->time_us[PERF_FC_LATE] <= row->time_us[PERF_FC_ALLREDUCE]
                : row->time_us[PERF_FC_ALLREDUCE] <= row->time_us[PERF_FC_LATE];
}

/* The sum of the variants' wrong elements; -1 when they were not checked. */
static long long fc_row_wrong(const perf_fc_row_t *row)
{
    long long sum = 0;

    for (int v = 0; v < PERF_FC_VARIANTS; v++) {
        if (row->wrong[v] < 0)
            return -1;
        sum += row->wrong[v];
    }
    return sum;
}

/* "4,0,32" */
static void print_list(FILE *f, const perf_size_list_t *list)
{
    for (int k = 0; k < list->n; k++)
        fprintf(f, "%s%zu", k ? "," : "", list->v[k]);
}

void perf_print_fc_header(FILE *f, const perf_opts_t *opts, const perf_run_info_t *run)
{
    print_title(f, "fc_weight_grad", run);
    fprintf(f, "# rows ");
    print_list(f, &opts->rows);
    fprintf(f, " per rank, in ");
    print_list(f, &opts->in);
    fprintf(f, ", out ");
    print_list(f, &opts->out);
    fprintf(f, "; %d iterations after %d warmup, check %d\n", opts->iters, opts->warmup,
            opts->check);
    fprintf(f, "#\n");
    fprintf(f, "# %10s  %10s  %10s  %8s  %10s  %10s  %10s  %6s  %-9s  %s\n", "rows", "in",
            "out", "type", "late", "allreduce", "auto", "#wrong", "chosen", "faster");
    fprintf(f, "# %10s  %10s  %10s  %8s  %10s  %10s  %10s\n", "(per rank)", "", "", "",
            "(us)", "(us)", "(us)");
    fflush(f);
}

void perf_print_fc_row(FILE *f, const perf_fc_row_t *row)
{
    static const char *const answers[] = {"?", "no", "yes"};
    const perf_dtype_info_t *info = perf_dtype_info(row->dtype);

    fprintf(f, "  %10zu  %10zu  %10zu  %8s", row->rows, row->in, row->out,
            info != NULL ? info->name : "?");
    for (int v = 0; v < PERF_FC_VARIANTS; v++) {
        fprintf(f, "  ");
        print_time(f, 10, row->time_us[v]);
    }
    fprintf(f, "  ");
    print_wrong(f, fc_row_wrong(row));
    fprintf(f, "  %-9s  %s\n", row->chosen != NULL ? row->chosen : "?",
            answers[perf_fc_chose_faster(row) + 1]);
    fflush(f);
}

void perf_print_fc_footer(FILE *f, long long wrong_total, int faster, int shapes,
                          int checked)
{
    print_wrong_total(f, "late/allreduce/auto", wrong_total, checked);
    fprintf(f, "# auto chose the faster strategy for %d of %d shape%s\n", faster, shapes,
            shapes == 1 ? "" : "s");
    fflush(f);
}

/* ---- JSON ------------------------------------------------------------------- */

/* JSON has no inf or NaN; timings are finite, but guard anyway. */
static double finite_or_zero(double v)
{
    return isfinite(v) ? v : 0.0;
}

/* text as a JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *text)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* "name": [4, 0] */
static void json_list(FILE *f, const char *name, const perf_size_list_t *list)
{
    fprintf(f, "  \"%s\": [", name);
    for (int k = 0; k < list->n; k++)
        fprintf(f, "%s%zu", k ? ", " : "", list->v[k]);
    fprintf(f, "],\n");
}

/* fc_weight_grad's options in place of the sizes of a sweep. */
static void json_shapes(FILE *f, const perf_opts_t *opts)
{
    json_list(f, "rows", &opts->rows);
    json_list(f, "in", &opts->in);
    json_list(f, "out", &opts->out);
}

void perf_json_begin(perf_json_t *j, FILE *f, const perf_opts_t *opts,
                     const perf_run_info_t *run)
{
    j->f = f;
    j->nrows = 0;
    fprintf(f, "{\n  \"tool\": \"chorus-perf\",\n  \"version\": ");
    json_string(f, run->version);
    fprintf(f, ",\n  \"host\": ");
    json_string(f, run->host);
    fprintf(f, ",\n  \"cores\": %d,\n  \"nranks\": %d,\n  \"local_ranks\": %d,\n",
            run->cores, run->nranks, run->local_size);
    fprintf(f, "  \"nodes\": ");
    json_string(f, run->nodes);
    fprintf(f, ",\n");
    if (opts->coll == PERF_FC_WEIGHT_GRAD)
        json_shapes(f, opts);
    else
        fprintf(f, "  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"stepfactor\": %zu,\n",
                opts->minbytes, opts->maxbytes, opts->factor);
    fprintf(f, "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n",
            opts->iters, opts->warmup, opts->check);
    fprintf(f, "  \"compress\": %s,\n", opts->compress == CHORUS_COMPRESS_FP16   ? "\"fp16\""
                                          : opts->compress == CHORUS_COMPRESS_BF16 ? "\"bf16\""
                                                                                   : "null");
    fprintf(f, "  \"results\": [");
}

/* A count of wrong elements, null when not checked (-1). */
static void json_wrong(FILE *f, long long wrong)
{
    if (wrong < 0)
        fprintf(f, "null");
    else
        fprintf(f, "%lld", wrong);
}

/* A string, or null for NULL. */
static void json_string_or_null(FILE *f, const char *text)
{
    if (text != NULL)
        json_string(f, text);
    else
        fprintf(f, "null");
}

static void json_half(FILE *f, const char *name, const perf_row_t *row, int k)
{
    fprintf(f, "\"%s\": {\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
            "\"wrong\": ", name, finite_or_zero(row->time_us[k]),
            finite_or_zero(row->algbw[k]), finite_or_zero(row->busbw[k]));
    json_wrong(f, row->wrong[k]);
    fprintf(f, "}");
}

void perf_json_row(perf_json_t *j, const perf_row_t *row)
{
    FILE *f = j->f;

    fprintf(f, "%s\n    {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, "
            "\"type\": \"%s\", \"redop\": \"%s\", ",
            j->nrows > 0 ? "," : "", perf_coll_info(row->coll)->name, row->bytes,
            row->elems, row_type(row), row_op(row));
    if (row->root >= 0)
        fprintf(f, "\"root\": %d, ", row->root);
    else
        fprintf(f, "\"root\": null, ");
    fprintf(f, "\"algorithm\": ");
    json_string_or_null(f, row->algorithm);
    fprintf(f, ", ");
    json_half(f, "out_of_place", row, 0);
    fprintf(f, ", ");
    json_half(f, "in_place", row, 1);
    fprintf(f, "}");
    j->nrows++;
}

/* Closes the results and opens the totals with wrong_total (null when not checked). */
static void json_wrong_total(perf_json_t *j, long long wrong_total, int checked)
{
    fprintf(j->f, "\n  ],\n  \"wrong_total\": ");
    json_wrong(j->f, checked ? wrong_total : -1);
}

void perf_json_end(perf_json_t *j, long long wrong_total, double avg_busbw, int checked)
{
    json_wrong_total(j, wrong_total, checked);
    fprintf(j->f, ",\n  \"avg_busbw_gbs\": %.6f\n}\n", finite_or_zero(avg_busbw));
}

void perf_json_fc_row(perf_json_t *j, const perf_fc_row_t *row)
{
    static const char *const answers[] = {"null", "false", "true"};
    const perf_dtype_info_t *info = perf_dtype_info(row->dtype);
    FILE *f = j->f;

    fprintf(f, "%s\n    {\"collective\": \"fc_weight_grad\", \"rows\": %zu, \"in\": %zu, "
            "\"out\": %zu, \"type\": \"%s\", \"chosen\": ", j->nrows > 0 ? "," : "",
            row->rows, row->in, row->out, info != NULL ? info->name : "?");
    json_string_or_null(f, row->chosen);
    fprintf(f, ", \"chose_faster\": %s", answers[perf_fc_chose_faster(row) + 1]);
    for (int v = 0; v < PERF_FC_VARIANTS; v++) {
        fprintf(f, ", \"%s\": {\"time_us\": %.3f, \"wrong\": ", fc_variant_names[v],
                finite_or_zero(row->time_us[v]));
        json_wrong(f, row->wrong[v]);
        fprintf(f, "}");
    }
    fprintf(f, "}");
    j->nrows++;
}

void perf_json_fc_end(perf_json_t *j, long long wrong_total, int faster, int shapes,
                      int checked)
{
    json_wrong_total(j, wrong_total, checked);
    fprintf(j->f, ",\n  \"shapes\": %d,\n  \"chose_faster_shapes\": %d\n}\n", shapes,
            faster);
}
