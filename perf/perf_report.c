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

void perf_print_header(FILE *f, const perf_opts_t *opts, perf_coll_t coll, int nranks,
                       int local_size, const char *nodes)
{
    fprintf(f, "# chorus-perf: %s, nranks %d (%d on this node)\n",
            perf_coll_info(coll)->name, nranks, local_size);
    fprintf(f, "# nodes: %s\n", nodes);
    fprintf(f, "# sizes %zu to %zu bytes, factor %zu, %d iterations after %d warmup, "
            "check %d\n", opts->minbytes, opts->maxbytes, opts->factor, opts->iters,
            opts->warmup, opts->check);
    fprintf(f, "#\n");
    /* The labels start over the time column of each half. */
    fprintf(f, "%-50s   %-31s   %s\n", "#", "out-of-place", "in-place");
    fprintf(f, "# %10s  %12s  %8s  %6s  %4s   %8s %7s %7s %6s   %8s %7s %7s %6s\n",
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong");
    fprintf(f, "# %10s  %12s  %8s  %6s  %4s   %8s %7s %7s %6s   %8s %7s %7s %6s\n",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
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
    fprintf(f, "  %10zu  %12zu  %8s  %6s  %4d", row->bytes, row->elems, row_type(row),
            row_op(row), row->root);
    print_half(f, row, 0);
    print_half(f, row, 1);
    fprintf(f, "\n");
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

/* ---- JSON ------------------------------------------------------------------- */

/* JSON has no inf or NaN; timings are finite, but guard anyway. */
static double finite_or_zero(double v)
{
    return isfinite(v) ? v : 0.0;
}

void perf_json_begin(perf_json_t *j, FILE *f, const perf_opts_t *opts, int nranks)
{
    j->f = f;
    j->nrows = 0;
    fprintf(f, "{\n  \"tool\": \"chorus-perf\",\n  \"nranks\": %d,\n", nranks);
    fprintf(f, "  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"stepfactor\": %zu,\n",
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
            "\"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, ",
            j->nrows > 0 ? "," : "", perf_coll_info(row->coll)->name, row->bytes,
            row->elems, row_type(row), row_op(row), row->root);
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
