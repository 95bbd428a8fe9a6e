/*
 * Tests of chorus-perf's pure parts: half-precision conversions, the check
 * values and their exactness in any reduction order, the buffer layouts of
 * every collective (simulated here for all ranks in one process), sizes and
 * the command line.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf_check.h"
#include "perf/perf_data.h"
#include "perf/perf_opts.h"
#include "perf/perf_report.h"

/* ---- conversions --------------------------------------------------------- */

Test(perf_data, half_known_values)
{
    cr_expect_eq(perf_float_to_half(1.0f), 0x3c00);
    cr_expect_eq(perf_float_to_half(-2.0f), 0xc000);
    cr_expect_eq(perf_float_to_half(0.5f), 0x3800);
    cr_expect_eq(perf_float_to_half(65504.0f), 0x7bff);
    cr_expect_eq(perf_float_to_half(65519.0f), 0x7bff);
    cr_expect_eq(perf_float_to_half(65520.0f), 0x7c00);
    cr_expect_eq(perf_float_to_half(ldexpf(1.0f, -24)), 0x0001);
    cr_expect_eq(perf_float_to_half(ldexpf(1.0f, -14)), 0x0400);
    cr_expect_eq(perf_float_to_half(2049.0f), 0x6800); /* tie to even: 2048 */
    cr_expect_eq(perf_float_to_half(2051.0f), 0x6802); /* tie to even: 2052 */
    cr_expect_eq(perf_float_to_half(-0.0f), 0x8000);
    cr_expect_eq(perf_float_to_half(INFINITY), 0x7c00);
    cr_expect(isnan(perf_half_to_float(perf_float_to_half(NAN))));
    cr_expect_eq(perf_half_to_float(0x0001), ldexpf(1.0f, -24));
    cr_expect_eq(perf_half_to_float(0xfbff), -65504.0f);
}

Test(perf_data, half_round_trip_every_pattern)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = perf_half_to_float((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(perf_float_to_half(f), h, "pattern 0x%04x", h);
    }
}

Test(perf_data, small_integers_exact)
{
    for (int v = -2048; v <= 2048; v++)
        cr_assert_eq(perf_half_to_float(perf_float_to_half((float)v)), (float)v);
    for (int v = -256; v <= 256; v++)
        cr_assert_eq(perf_bf16_to_float(perf_float_to_bf16((float)v)), (float)v);
    cr_expect_eq(perf_float_to_bf16(1.0f), 0x3f80);
    cr_expect_eq(perf_bf16_to_float(perf_float_to_bf16(257.0f)), 256.0f);
    cr_expect_eq(perf_bf16_to_float(perf_float_to_bf16(259.0f)), 260.0f);
}

Test(perf_data, integer_store_wraps)
{
    cr_expect_eq(perf_as_dtype(CHORUS_INT8, 128), -128.0);
    cr_expect_eq(perf_as_dtype(CHORUS_UINT8, 257), 1.0);
    cr_expect_eq(perf_as_dtype(CHORUS_UINT32, -1), 4294967295.0);
    cr_expect_eq(perf_as_dtype(CHORUS_FLOAT16, 3), 3.0);
}

Test(perf_data, names)
{
    cr_expect_eq(perf_dtype_parse("float32"), CHORUS_FLOAT32);
    cr_expect_eq(perf_dtype_parse("float"), CHORUS_FLOAT32);
    cr_expect_eq(perf_dtype_parse("bf16"), CHORUS_BFLOAT16);
    cr_expect_eq(perf_dtype_parse("float128"), -1);
    cr_expect_eq(perf_op_parse("avg"), CHORUS_AVG);
    cr_expect_eq(perf_op_parse("mean"), -1);
    cr_expect_eq(perf_coll_parse("reduce_scatter"), PERF_REDUCE_SCATTER);
    cr_expect_eq(perf_coll_parse("gather"), -1);
    cr_expect_str_eq(perf_op_name(CHORUS_PROD), "prod");
}

/* ---- reductions are exact in any order ---------------------------------- */

/* Stores v into element idx of buf, rounded to dtype (integers wrap). */
static void set_double(chorus_dtype_t dtype, void *buf, size_t idx, double v)
{
    uint16_t h;
    float f;

    switch (dtype) {
    case CHORUS_FLOAT16:
        h = perf_float_to_half((float)v);
        memcpy((char *)buf + 2 * idx, &h, 2);
        break;
    case CHORUS_BFLOAT16:
        h = perf_float_to_bf16((float)v);
        memcpy((char *)buf + 2 * idx, &h, 2);
        break;
    case CHORUS_FLOAT32:
        f = (float)v;
        memcpy((char *)buf + 4 * idx, &f, 4);
        break;
    case CHORUS_FLOAT64: memcpy((char *)buf + 8 * idx, &v, 8); break;
    default: perf_store(dtype, buf, idx, (int64_t)v); break;
    }
}

/* v rounded to dtype, as a library's kernel would store it. */
static double to_dtype(chorus_dtype_t dtype, double v)
{
    uint64_t tmp = 0;

    set_double(dtype, &tmp, 0, v);
    return perf_load(dtype, &tmp, 0);
}

static double combine(chorus_dtype_t dtype, chorus_op_t op, double acc, double v)
{
    switch (op) {
    case CHORUS_PROD: return to_dtype(dtype, acc * v);
    case CHORUS_MIN: return v < acc ? v : acc;
    case CHORUS_MAX: return v > acc ? v : acc;
    default: return to_dtype(dtype, acc + v);
    }
}

static double finish(chorus_dtype_t dtype, chorus_op_t op, double acc, int n)
{
    if (op != CHORUS_AVG)
        return acc;
    if (perf_dtype_info(dtype)->is_float)
        return to_dtype(dtype, acc / n);
    return (double)((int64_t)acc / n);
}

/* vals[r] in dtype precision, reduced forward, backward and pairwise. */
static void reduce_orders(chorus_dtype_t dtype, chorus_op_t op, const double *vals, int n,
                          double out[3])
{
    double tree[64];

    out[0] = vals[0];
    for (int r = 1; r < n; r++)
        out[0] = combine(dtype, op, out[0], vals[r]);
    out[1] = vals[n - 1];
    for (int r = n - 2; r >= 0; r--)
        out[1] = combine(dtype, op, vals[r], out[1]);
    memcpy(tree, vals, (size_t)n * sizeof(double));
    for (int w = n; w > 1; w = (w + 1) / 2) {
        for (int i = 0; i < w / 2; i++)
            tree[i] = combine(dtype, op, tree[2 * i], tree[2 * i + 1]);
        if (w % 2)
            tree[w / 2] = tree[w - 1];
    }
    out[2] = tree[0];
    for (int k = 0; k < 3; k++)
        out[k] = finish(dtype, op, out[k], n);
}

Test(perf_data, expected_exact_in_any_order)
{
    static const int sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 64};

    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
        for (int op = 0; op < CHORUS_OP_COUNT; op++) {
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                int n = sizes[s];
                for (size_t i = 0; i < 40; i++) {
                    double vals[64], got[3];
                    double want = perf_reduce_expected(d, op, n, i);
                    for (int r = 0; r < n; r++)
                        vals[r] = perf_as_dtype(d, perf_reduce_value(d, op, r, n, i));
                    reduce_orders(d, op, vals, n, got);
                    for (int k = 0; k < 3; k++)
                        cr_assert_eq(got[k], want, "%s %s n=%d i=%zu order %d: %g != %g",
                                     perf_dtype_info(d)->name, perf_op_name(op), n, i, k,
                                     got[k], want);
                }
            }
        }
    }
}

Test(perf_data, values_are_periodic)
{
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
        for (int op = 0; op < CHORUS_OP_COUNT; op++) {
            for (int n = 1; n <= 9; n++) {
                size_t p = perf_reduce_period(op, n);
                for (int r = 0; r < n; r++) {
                    for (size_t i = 0; i < 3 * p; i++)
                        cr_assert_eq(perf_reduce_value(d, op, r, n, i),
                                     perf_reduce_value(d, op, r, n, i + p + 1000 * p));
                }
            }
        }
        for (int r = 0; r < 5; r++) {
            for (size_t i = 0; i < 200; i++)
                cr_assert_eq(perf_copy_value(d, r, i),
                             perf_copy_value(d, r, i + 7 * PERF_COPY_PERIOD));
        }
    }
}

Test(perf_data, values_depend_on_rank)
{
    /* A collective that returned one rank's own data must not pass. */
    for (int n = 2; n <= 9; n++) {
        for (int op = 0; op < CHORUS_OP_COUNT; op++) {
            for (size_t i = 0; i < 6; i++) {
                double want = perf_reduce_expected(CHORUS_FLOAT32, op, n, i);
                int differs = 0;
                for (int r = 0; r < n; r++)
                    differs |= perf_reduce_value(CHORUS_FLOAT32, op, r, n, i) != want;
                cr_expect(differs || op == CHORUS_MIN || op == CHORUS_MAX,
                          "%s n=%d i=%zu: every rank holds the result", perf_op_name(op), n, i);
            }
        }
    }
    cr_expect_neq(perf_copy_value(CHORUS_INT32, 0, 5), perf_copy_value(CHORUS_INT32, 1, 5));
    cr_expect_neq(perf_reduce_value(CHORUS_FLOAT32, CHORUS_AVG, 0, 4, 1),
                  perf_reduce_value(CHORUS_FLOAT32, CHORUS_AVG, 1, 4, 1));
    cr_expect_eq(perf_reduce_expected(CHORUS_FLOAT32, CHORUS_PROD, 3, 0), 2.0);
    cr_expect_eq(perf_reduce_expected(CHORUS_INT32, CHORUS_PROD, 3, 1), -1.0);
    cr_expect_eq(perf_reduce_expected(CHORUS_UINT8, CHORUS_PROD, 3, 1), 3.0);
    cr_expect_eq(perf_reduce_expected(CHORUS_FLOAT16, CHORUS_PROD, 3, 2), -2.0);
    cr_expect_eq(perf_reduce_expected(CHORUS_INT32, CHORUS_MIN, 16, 0), -5.0);
    cr_expect_eq(perf_reduce_expected(CHORUS_INT32, CHORUS_MAX, 16, 0), 5.0);
}

/* ---- collectives simulated for all ranks -------------------------------- */

#define SIM_MAX_RANKS 8

typedef struct {
    perf_args_t a[SIM_MAX_RANKS];
    void *send_base[SIM_MAX_RANKS], *recv_base[SIM_MAX_RANKS];
    void *send[SIM_MAX_RANKS], *recv[SIM_MAX_RANKS];
    void *result[SIM_MAX_RANKS]; /* what the collective writes, computed first */
    size_t out_elems;            /* elements each rank's recv pointer gets */
    int in_place;
} sim_t;

static void sim_setup(sim_t *s, perf_coll_t coll, chorus_dtype_t dtype, chorus_op_t op,
                      int root, int n, size_t count, int in_place)
{
    memset(s, 0, sizeof(*s));
    s->in_place = in_place;
    for (int r = 0; r < n; r++) {
        perf_args_t *a = &s->a[r];
        size_t es = perf_dtype_info(dtype)->size;
        *a = (perf_args_t){coll, dtype, op, root, r, n, count, 0};
        /* +1: a non-NULL allocation even for count 0 */
        s->send_base[r] = calloc(perf_send_elems(a) + 1, es);
        s->recv_base[r] = calloc(perf_recv_elems(a) + 1, es);
        s->result[r] = calloc(perf_recv_elems(a) + 1, es);
        perf_fill(a, in_place, s->send_base[r], s->recv_base[r]);
        perf_buffers(a, in_place, s->send_base[r], s->recv_base[r], &s->send[r], &s->recv[r]);
    }
}

static void sim_free(sim_t *s)
{
    for (int r = 0; r < s->a[0].nranks; r++) {
        free(s->send_base[r]);
        free(s->recv_base[r]);
        free(s->result[r]);
    }
}

static void sim_set(const perf_args_t *a, void *buf, size_t idx, double v)
{
    set_double(a->dtype, buf, idx, v);
}

/* Reduction over all ranks of element idx of their send pointers. */
static double sim_reduce(const sim_t *s, size_t idx)
{
    const perf_args_t *a = &s->a[0];
    double vals[SIM_MAX_RANKS], out[3];

    for (int q = 0; q < a->nranks; q++)
        vals[q] = perf_load(a->dtype, s->send[q], idx);
    reduce_orders(a->dtype, a->op, vals, a->nranks, out);
    return out[0];
}

/* Computes every rank's output from the inputs, then writes it. */
static void sim_run(sim_t *s)
{
    int n = s->a[0].nranks;
    size_t c = s->a[0].count;

    for (int r = 0; r < n; r++) {
        const perf_args_t *a = &s->a[r];
        switch (a->coll) {
        case PERF_ALLREDUCE:
        case PERF_REDUCE:
            s->out_elems = (a->coll == PERF_REDUCE && r != a->root) ? 0 : c;
            for (size_t i = 0; i < s->out_elems; i++)
                sim_set(a, s->result[r], i, sim_reduce(s, i));
            break;
        case PERF_REDUCE_SCATTER:
            s->out_elems = c;
            for (size_t k = 0; k < c; k++)
                sim_set(a, s->result[r], k, sim_reduce(s, (size_t)r * c + k));
            break;
        case PERF_BROADCAST:
            s->out_elems = c;
            for (size_t i = 0; i < c; i++)
                sim_set(a, s->result[r], i, perf_load(a->dtype, s->send[a->root], i));
            break;
        case PERF_ALLGATHER:
        case PERF_ALLTOALL:
            s->out_elems = (size_t)n * c;
            for (int j = 0; j < n; j++) {
                size_t from = a->coll == PERF_ALLGATHER ? 0 : (size_t)r * c;
                for (size_t k = 0; k < c; k++)
                    sim_set(a, s->result[r], (size_t)j * c + k,
                            perf_load(a->dtype, s->send[j], from + k));
            }
            break;
        default:
            s->out_elems = 0;
        }
        if (a->coll == PERF_REDUCE)
            s->out_elems = c; /* for the copy below, on root */
    }
    for (int r = 0; r < n; r++) {
        const perf_args_t *a = &s->a[r];
        if (a->coll == PERF_REDUCE && r != a->root)
            continue;
        memcpy(s->recv[r], s->result[r], s->out_elems * perf_dtype_info(a->dtype)->size);
    }
}

static size_t sim_wrong(const sim_t *s)
{
    size_t wrong = 0;
    for (int r = 0; r < s->a[0].nranks; r++)
        wrong += perf_check(&s->a[r], s->in_place, s->send_base[r], s->recv_base[r]);
    return wrong;
}

static void sim_one(perf_coll_t coll, chorus_dtype_t d, chorus_op_t op, int root, int n,
                    size_t count, int in_place)
{
    sim_t s;
    int check_rank = coll == PERF_REDUCE ? root : n - 1;
    size_t outs;

    sim_setup(&s, coll, d, op, root, n, count, in_place);
    /* Untouched outputs hold the sentinel: every element is wrong. */
    outs = perf_check(&s.a[check_rank], in_place, s.send_base[check_rank],
                      s.recv_base[check_rank]);
    if (!in_place && count > 0)
        cr_assert_eq(outs, perf_recv_elems(&s.a[0]) / (coll == PERF_REDUCE_SCATTER ? n : 1),
                     "%s: sentinel not detected", perf_coll_info(coll)->name);
    sim_run(&s);
    cr_assert_eq(sim_wrong(&s), 0, "%s %s %s root %d n %d count %zu in_place %d",
                 perf_coll_info(coll)->name, perf_dtype_info(d)->name, perf_op_name(op),
                 root, n, count, in_place);
    if (count > 0) {
        /* One corrupted output element is exactly one wrong element. */
        void *recv = s.recv[check_rank];
        size_t last = (coll == PERF_ALLGATHER || coll == PERF_ALLTOALL) ? n * count - 1
                                                                      : count - 1;
        sim_set(&s.a[check_rank], recv, last, perf_load(d, recv, last) + 1);
        cr_assert_eq(sim_wrong(&s), 1, "%s: corruption not detected",
                     perf_coll_info(coll)->name);
    }
    sim_free(&s);
}

Test(perf_check, every_collective_dtype_op_layout)
{
    static const int nranks[] = {1, 2, 3, 5, 8};
    static const size_t counts[] = {0, 1, 7};

    for (int coll = 0; coll < PERF_BARRIER; coll++) {
        const perf_coll_info_t *info = perf_coll_info(coll);
        for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
            for (int op = 0; op < (info->reduces ? CHORUS_OP_COUNT : 1); op++) {
                for (size_t ni = 0; ni < 5; ni++) {
                    int n = nranks[ni];
                    for (int root = 0; root < (info->rooted ? n : 1); root += 2) {
                        for (size_t ci = 0; ci < 3; ci++) {
                            sim_one(coll, d, op, root, n, counts[ci], 0);
                            sim_one(coll, d, op, root, n, counts[ci], 1);
                        }
                    }
                }
            }
        }
    }
}

Test(perf_check, in_place_pointers)
{
    perf_args_t a = {PERF_ALLGATHER, CHORUS_FLOAT32, CHORUS_SUM, 0, 2, 4, 10, 0};
    char send[1], recv[160];
    void *s, *r;

    perf_buffers(&a, 1, send, recv, &s, &r);
    cr_expect_eq(r, recv);
    cr_expect_eq(s, recv + 2 * 10 * 4);
    a.coll = PERF_REDUCE_SCATTER;
    perf_buffers(&a, 1, send, recv, &s, &r);
    cr_expect_eq(s, recv);
    cr_expect_eq(r, recv + 2 * 10 * 4);
    a.coll = PERF_ALLREDUCE;
    perf_buffers(&a, 0, send, recv, &s, &r);
    cr_expect_eq(s, send);
    cr_expect_eq(r, recv);
}

/* ---- sizes and bandwidth -------------------------------------------------- */

Test(perf_check, sizes_follow_nccl_tests)
{
    perf_args_t a = {PERF_ALLGATHER, CHORUS_FLOAT32, CHORUS_SUM, 0, 0, 4, 0, 0};

    a.count = perf_count_for_bytes(PERF_ALLGATHER, CHORUS_FLOAT32, 4, 1024);
    cr_expect_eq(a.count, 64);
    cr_expect_eq(perf_msg_bytes(&a), 1024);
    cr_expect_eq(perf_msg_elems(&a), 256);
    cr_expect_eq(perf_count_for_bytes(PERF_ALLGATHER, CHORUS_FLOAT32, 3, 1024), 85);
    cr_expect_eq(perf_count_for_bytes(PERF_ALLREDUCE, CHORUS_FLOAT64, 3, 1024), 128);
    cr_expect_eq(perf_count_for_bytes(PERF_ALLREDUCE, CHORUS_FLOAT64, 3, 7), 0);
    cr_expect_float_eq(perf_busbw_factor(PERF_ALLREDUCE, 4), 1.5, 1e-12);
    cr_expect_float_eq(perf_busbw_factor(PERF_ALLTOALL, 4), 0.75, 1e-12);
    cr_expect_float_eq(perf_busbw_factor(PERF_REDUCE_SCATTER, 8), 0.875, 1e-12);
    cr_expect_float_eq(perf_busbw_factor(PERF_BROADCAST, 8), 1.0, 1e-12);
    cr_expect_float_eq(perf_busbw_factor(PERF_REDUCE, 8), 1.0, 1e-12);
}

Test(perf_report, bandwidth)
{
    perf_row_t row = {.coll = PERF_ALLREDUCE, .bytes = 1000000, .time_us = {100.0, 0.0}};

    perf_row_bandwidth(&row, 4);
    cr_expect_float_eq(row.algbw[0], 10.0, 1e-9); /* 1e6 B / 100 us = 10 GB/s */
    cr_expect_float_eq(row.busbw[0], 15.0, 1e-9);
    cr_expect_eq(row.algbw[1], 0.0);
}

/* The table printed for row into a string (free it). */
static char *print_table(perf_coll_t coll, const perf_row_t *row)
{
    perf_opts_t o = {.minbytes = 8, .maxbytes = 64, .factor = 2, .iters = 1, .check = 1};
    perf_run_info_t run = {.version = "0", .host = "h", .cores = 2, .nranks = 4,
                           .local_size = 4, .nodes = "1 (ranks per node 4)"};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    perf_print_header(f, &o, coll, &run);
    perf_print_row(f, row);
    fclose(f);
    return text;
}

Test(perf_report, root_column_only_for_rooted_collectives)
{
    perf_row_t row = {.coll = PERF_ALLREDUCE, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                      .root = -1, .bytes = 64, .elems = 16, .wrong = {0, 0},
                      .algorithm = "ring"};
    char *text = print_table(PERF_ALLREDUCE, &row);

    cr_expect(strstr(text, " root ") == NULL, "%s", text);
    cr_expect(strstr(text, "   algorithm\n") != NULL, "%s", text);
    cr_expect(strstr(text, "        64            16   float32     sum   ") != NULL, "%s",
              text);
    cr_expect(strstr(text, "-1") == NULL, "%s", text);
    cr_expect(strstr(text, "   ring\n") != NULL, "%s", text);
    free(text);

    row.coll = PERF_BROADCAST;
    row.op = -1;
    row.root = 3;
    row.algorithm = NULL;
    text = print_table(PERF_BROADCAST, &row);
    cr_expect(strstr(text, " root ") != NULL, "%s", text);
    cr_expect(strstr(text, "  float32    none     3   ") != NULL, "%s", text);
    cr_expect(strstr(text, "   ?\n") != NULL, "%s", text);
    free(text);
}

Test(perf_report, json_names_the_run_and_each_algorithm)
{
    perf_opts_t o = {.minbytes = 8, .maxbytes = 64, .factor = 2, .iters = 1, .check = 1};
    perf_run_info_t run = {.version = "9.8.7", .host = "a\"b", .cores = 3, .nranks = 5,
                           .local_size = 5, .nodes = "1 (ranks per node 5)"};
    perf_row_t row = {.coll = PERF_ALLREDUCE, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                      .root = -1, .bytes = 64, .elems = 16, .algorithm = "shm_slice"};
    perf_json_t j;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    perf_json_begin(&j, f, &o, &run);
    perf_json_row(&j, &row);
    perf_json_end(&j, 0, 0.0, 1);
    fclose(f);
    cr_expect(strstr(text, "\"version\": \"9.8.7\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\"host\": \"a\\\"b\"") != NULL, "%s", text);
    cr_expect(strstr(text, "\"cores\": 3,") != NULL, "%s", text);
    cr_expect(strstr(text, "\"nranks\": 5,") != NULL, "%s", text);
    cr_expect(strstr(text, "\"root\": null, \"algorithm\": \"shm_slice\"") != NULL, "%s",
              text);
    free(text);
}

/* ---- command line ----------------------------------------------------------- */

Test(perf_opts, sizes)
{
    size_t b;

    cr_expect_eq(perf_parse_size("64M", &b), 0);
    cr_expect_eq(b, 64u << 20);
    cr_expect_eq(perf_parse_size("8", &b), 0);
    cr_expect_eq(b, 8);
    cr_expect_eq(perf_parse_size("2k", &b), 0);
    cr_expect_eq(b, 2048);
    cr_expect_eq(perf_parse_size("1G", &b), 0);
    cr_expect_eq(b, 1u << 30);
    cr_expect_eq(perf_parse_size("0", &b), 0);
    cr_expect_eq(b, 0);
    cr_expect_eq(perf_parse_size("-8", &b), -1);
    cr_expect_eq(perf_parse_size("8X", &b), -1);
    cr_expect_eq(perf_parse_size("M", &b), -1);
    cr_expect_eq(perf_parse_size("99999999999999999999", &b), -1);
    cr_expect_eq(perf_parse_size("17179869184G", &b), -1);
}

static int parse(perf_opts_t *o, char *err, const char *line)
{
    char buf[512], *argv[32];
    int argc = 0;

    snprintf(buf, sizeof(buf), "%s", line);
    for (char *t = strtok(buf, " "); t != NULL && argc < 31; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    return perf_opts_parse(argc, argv, o, err, 256);
}

Test(perf_opts, defaults_and_values)
{
    perf_opts_t o;
    char err[256];

    cr_assert_eq(parse(&o, err, "chorus-perf allreduce"), 0);
    cr_expect_eq(o.coll, PERF_ALLREDUCE);
    cr_expect_eq(o.minbytes, 8);
    cr_expect_eq(o.maxbytes, 64u << 20);
    cr_expect_eq(o.factor, 2);
    cr_expect_eq(o.iters, 20);
    cr_expect_eq(o.warmup, 5);
    cr_expect_eq(o.check, 1);
    cr_expect_eq(o.dtype, CHORUS_FLOAT32);
    cr_expect_eq(o.op, CHORUS_SUM);
    cr_expect_eq(o.root, 0);
    cr_expect_eq(o.nranks, 0);
    cr_assert_eq(parse(&o, err, "p -b 1K -e 1M -f 4 -n 3 -w 0 -c 0 -d all -o max -r all "
                       "-np 3 --json out.json broadcast"), 0, "%s", err);
    cr_expect_eq(o.coll, PERF_BROADCAST);
    cr_expect_eq(o.minbytes, 1024);
    cr_expect_eq(o.maxbytes, 1u << 20);
    cr_expect_eq(o.factor, 4);
    cr_expect_eq(o.iters, 3);
    cr_expect_eq(o.warmup, 0);
    cr_expect_eq(o.check, 0);
    cr_expect_eq(o.dtype, PERF_ALL);
    cr_expect_eq(o.op, CHORUS_MAX);
    cr_expect_eq(o.root, PERF_ALL);
    cr_expect_eq(o.nranks, 3);
    cr_expect_str_eq(o.json_path, "out.json");
    cr_assert_eq(parse(&o, err, "p all --op=avg --datatype=bf16"), 0, "%s", err);
    cr_expect_eq(o.coll, PERF_ALL);
    cr_expect_eq(o.op, CHORUS_AVG);
    cr_expect_eq(o.dtype, CHORUS_BFLOAT16);
    cr_assert_eq(parse(&o, err, "p -h"), 0);
    cr_expect_eq(o.help, 1);
}

Test(perf_opts, errors_name_the_argument)
{
    perf_opts_t o;
    char err[256];

    cr_expect_eq(parse(&o, err, "p"), -1);
    cr_expect(strstr(err, "no collective") != NULL, "%s", err);
    cr_expect_eq(parse(&o, err, "p allfoo"), -1);
    cr_expect(strstr(err, "allfoo") != NULL, "%s", err);
    cr_expect_eq(parse(&o, err, "p allreduce -np 0"), -1);
    cr_expect(strstr(err, "'0'") != NULL && strstr(err, "-np") != NULL, "%s", err);
    cr_expect_eq(parse(&o, err, "p allreduce -d float128"), -1);
    cr_expect(strstr(err, "float128") != NULL, "%s", err);
    cr_expect_eq(parse(&o, err, "p allreduce -c 2"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce -f 1"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce -n 0"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce -r -1"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce -b 2M -e 1M"), -1);
    cr_expect(strstr(err, "minbytes") != NULL, "%s", err);
    cr_expect_eq(parse(&o, err, "p allreduce -e"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce --bogus"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce reduce"), -1);
    cr_expect_eq(parse(&o, err, "p allreduce -np 2 -np 3"), -1);
}

Test(perf_opts, size_sweep)
{
    perf_opts_t o;
    char err[256];
    size_t got[64], n = 0, s;
    int done = 0;

    cr_assert_eq(parse(&o, err, "p allreduce -b 0 -e 40 -f 3"), 0);
    for (s = o.minbytes; !done && n < 64; s = perf_next_size(&o, s, &done))
        got[n++] = s;
    /* The sweep ends on the maximum it announces, even off the factor's steps. */
    cr_assert_eq(n, 6);
    cr_expect_eq(got[0], 0);
    cr_expect_eq(got[1], 1);
    cr_expect_eq(got[2], 3);
    cr_expect_eq(got[3], 9);
    cr_expect_eq(got[4], 27);
    cr_expect_eq(got[5], 40);
    cr_assert_eq(parse(&o, err, "p allreduce -b 8 -e 1M -f 4"), 0);
    n = 0;
    done = 0;
    for (s = o.minbytes; !done && n < 64; s = perf_next_size(&o, s, &done))
        got[n++] = s;
    cr_assert_eq(n, 10);
    cr_expect_eq(got[8], 512u << 10);
    cr_expect_eq(got[9], 1u << 20);
    cr_assert_eq(parse(&o, err, "p allreduce -b 16 -e 16"), 0);
    n = 0;
    done = 0;
    for (s = o.minbytes; !done && n < 64; s = perf_next_size(&o, s, &done))
        n++;
    cr_expect_eq(n, 1);
    /* Near SIZE_MAX the sweep ends on SIZE_MAX instead of wrapping around. */
    o.maxbytes = SIZE_MAX;
    cr_expect_eq(perf_next_size(&o, SIZE_MAX / 2 + 1, &done), SIZE_MAX);
    cr_expect_eq(done, 0);
    perf_next_size(&o, SIZE_MAX, &done);
    cr_expect_eq(done, 1);
}

Test(perf_opts, version)
{
    perf_opts_t o;
    char err[256];

    cr_assert_eq(parse(&o, err, "p --version"), 0, "%s", err);
    cr_expect_eq(o.version, 1);
    cr_expect_eq(o.help, 0);
    cr_expect_eq(parse(&o, err, "p allreduce --verbose"), -1);
    cr_expect(strstr(err, "--verbose") != NULL, "%s", err);
}

Test(perf_opts, strip_np)
{
    char *argv[] = {"chorus-perf", "-np", "4", "allreduce", "--json", "-np", NULL};
    perf_opts_t o;
    char err[256], **out;

    cr_assert_eq(perf_opts_parse(6, argv, &o, err, sizeof(err)), 0, "%s", err);
    cr_expect_str_eq(o.json_path, "-np");
    out = perf_opts_strip_np(6, argv, &o);
    cr_assert_not_null(out);
    cr_expect_str_eq(out[0], "chorus-perf");
    cr_expect_str_eq(out[1], "allreduce");
    cr_expect_str_eq(out[2], "--json");
    cr_expect_str_eq(out[3], "-np");
    cr_expect_null(out[4]);
    free(out);
}
