/* chorus-perf output: table and JSON. */
#include "perf/perf_report.h"

#include <math.h>

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

void perf_print_header(FILE *f, const perf_opts_t *opts, perf_coll_t coll,
                       const perf_run_info_t *run)
{
    int rooted = perf_coll_info(coll)->rooted;

    fprintf(f, "# chorus-perf: %s, nranks %d (%d on this node)\n",
            perf_coll_info(coll)->name, run->nranks, run->local_size);
    fprintf(f, "# nodes: %s\n", run->nodes);
    if (coll == PERF_BARRIER)
        fprintf(f, "# no data, %d iterations after %d warmup, check %d\n", opts->iters,
                opts->warmup, opts->check);
    else
        fprintf(f, "# sizes %zu to %zu bytes, factor %zu, %d iterations after %d warmup, "
                "check %d\n", opts->minbytes, opts->maxbytes, opts->factor, opts->iters,
                opts->warmup, opts->check);
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

static void print_half(FILE *f, const perf_row_t *row, int k)
{
    fprintf(f, "   %8.*f %7.2f %7.2f ", row->time_us[k] < 1e5 ? 2 : 0, row->time_us[k],
            row->algbw[k], row->busbw[k]);
    if (row->wrong[k] < 0)
        fprintf(f, "%6s", "N/A");
    else
        fprintf(f, "%6lld", row->wrong[k]);
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

void perf_print_footer(FILE *f, long long wrong_total, double avg_busbw, int checked)
{
    if (checked)
        fprintf(f, "# out-of-place/in-place wrong elements total: %lld\n", wrong_total);
    else
        fprintf(f, "# out-of-place/in-place wrong elements total: N/A (not checked)\n");
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
    fprintf(f, ",\n  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"stepfactor\": %zu,\n",
            opts->minbytes, opts->maxbytes, opts->factor);
    fprintf(f, "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n",
            opts->iters, opts->warmup, opts->check);
    fprintf(f, "  \"results\": [");
}

static void json_half(FILE *f, const char *name, const perf_row_t *row, int k)
{
    fprintf(f, "\"%s\": {\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
            "\"wrong\": ", name, finite_or_zero(row->time_us[k]),
            finite_or_zero(row->algbw[k]), finite_or_zero(row->busbw[k]));
    if (row->wrong[k] < 0)
        fprintf(f, "null}");
    else
        fprintf(f, "%lld}", row->wrong[k]);
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
    if (row->algorithm != NULL)
        json_string(f, row->algorithm);
    else
        fprintf(f, "null");
    fprintf(f, ", ");
    json_half(f, "out_of_place", row, 0);
    fprintf(f, ", ");
    json_half(f, "in_place", row, 1);
    fprintf(f, "}");
    j->nrows++;
}

void perf_json_end(perf_json_t *j, long long wrong_total, double avg_busbw, int checked)
{
    fprintf(j->f, "\n  ],\n  \"wrong_total\": ");
    if (checked)
        fprintf(j->f, "%lld", wrong_total);
    else
        fprintf(j->f, "null");
    fprintf(j->f, ",\n  \"avg_busbw_gbs\": %.6f\n}\n", finite_or_zero(avg_busbw));
}
