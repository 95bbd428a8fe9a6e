/* chorus-perf data: dtypes, half-precision conversions, check values. */
#include "perf/perf_data.h"

#include <math.h>
#include <string.h>

static const perf_dtype_info_t dtype_infos[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = {"int8", 1, 0, 0},
    [CHORUS_UINT8] = {"uint8", 1, 0, 1},
    [CHORUS_INT32] = {"int32", 4, 0, 0},
    [CHORUS_UINT32] = {"uint32", 4, 0, 1},
    [CHORUS_INT64] = {"int64", 8, 0, 0},
    [CHORUS_UINT64] = {"uint64", 8, 0, 1},
    [CHORUS_FLOAT16] = {"float16", 2, 1, 0},
    [CHORUS_BFLOAT16] = {"bfloat16", 2, 1, 0},
    [CHORUS_FLOAT32] = {"float32", 4, 1, 0},
    [CHORUS_FLOAT64] = {"float64", 8, 1, 0},
};

static const char *const op_names[CHORUS_OP_COUNT] = {
    [CHORUS_SUM] = "sum", [CHORUS_PROD] = "prod", [CHORUS_MIN] = "min",
    [CHORUS_MAX] = "max", [CHORUS_AVG] = "avg",
};

static const struct {
    const char *alias;
    chorus_dtype_t dtype;
} dtype_aliases[] = {
    {"char", CHORUS_INT8},      {"int", CHORUS_INT32},       {"uint", CHORUS_UINT32},
    {"half", CHORUS_FLOAT16},   {"fp16", CHORUS_FLOAT16},    {"bf16", CHORUS_BFLOAT16},
    {"float", CHORUS_FLOAT32},  {"fp32", CHORUS_FLOAT32},    {"double", CHORUS_FLOAT64},
    {"fp64", CHORUS_FLOAT64},
};

const perf_dtype_info_t *perf_dtype_info(chorus_dtype_t dtype)
{
    if ((int)dtype < 0 || dtype >= CHORUS_DTYPE_COUNT)
        return NULL;
    return &dtype_infos[dtype];
}

const char *perf_op_name(chorus_op_t op)
{
    if ((int)op < 0 || op >= CHORUS_OP_COUNT)
        return "none";
    return op_names[op];
}

int perf_dtype_parse(const char *text)
{
    for (int i = 0; i < CHORUS_DTYPE_COUNT; i++) {
        if (strcmp(text, dtype_infos[i].name) == 0)
            return i;
    }
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++) {
        if (strcmp(text, dtype_aliases[i].alias) == 0)
            return (int)dtype_aliases[i].dtype;
    }
    return -1;
}

int perf_op_parse(const char *text)
{
    for (int i = 0; i < CHORUS_OP_COUNT; i++) {
        if (strcmp(text, op_names[i]) == 0)
            return i;
    }
    return -1;
}

/* ---- float16 and bfloat16 ---------------------------------------------- */

uint16_t perf_float_to_half(float f)
{
    uint32_t x, absx, sign, e, h, rem;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf stays inf; NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* 65520 and above round to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {
        /* Below 2^-14 the result is subnormal: a multiple of 2^-24. Scaling
         * by 2^24 is exact, and rintf rounds to nearest even. */
        float a;
        memcpy(&a, &absx, sizeof(a));
        return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f));
    }
    e = (absx >> 23) - 127 + 15;
    h = (e << 10) | ((absx & 0x7fffffu) >> 13);
    rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right result */
    return (uint16_t)(sign | h);
}

float perf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;

    if (e == 0) {
        f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e - 15 + 127) << 23) | (m << 13);
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t perf_float_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float perf_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;

    memcpy(&f, &x, sizeof(f));
    return f;
}

/* ---- element access ------------------------------------------------------- */

void perf_store(chorus_dtype_t dtype, void *buf, size_t idx, int64_t v)
{
    switch (dtype) {
    case CHORUS_INT8: ((int8_t *)buf)[idx] = (int8_t)v; break;
    case CHORUS_UINT8: ((uint8_t *)buf)[idx] = (uint8_t)v; break;
    case CHORUS_INT32: ((int32_t *)buf)[idx] = (int32_t)v; break;
    case CHORUS_UINT32: ((uint32_t *)buf)[idx] = (uint32_t)v; break;
    case CHORUS_INT64: ((int64_t *)buf)[idx] = v; break;
    case CHORUS_UINT64: ((uint64_t *)buf)[idx] = (uint64_t)v; break;
    /* The check values are far below 2^53: (double)v is exact. */
    default: perf_store_real(dtype, buf, idx, (double)v); break;
    }
}

void perf_store_real(chorus_dtype_t dtype, void *buf, size_t idx, double v)
{
    switch (dtype) {
    case CHORUS_FLOAT16: ((uint16_t *)buf)[idx] = perf_float_to_half((float)v); break;
    case CHORUS_BFLOAT16: ((uint16_t *)buf)[idx] = perf_float_to_bf16((float)v); break;
    case CHORUS_FLOAT32: ((float *)buf)[idx] = (float)v; break;
    case CHORUS_FLOAT64: ((double *)buf)[idx] = v; break;
    default: break;
    }
}

double perf_load(chorus_dtype_t dtype, const void *buf, size_t idx)
{
    switch (dtype) {
    case CHORUS_INT8: return ((const int8_t *)buf)[idx];
    case CHORUS_UINT8: return ((const uint8_t *)buf)[idx];
    case CHORUS_INT32: return ((const int32_t *)buf)[idx];
    case CHORUS_UINT32: return ((const uint32_t *)buf)[idx];
    case CHORUS_INT64: return (double)((const int64_t *)buf)[idx];
    case CHORUS_UINT64: return (double)((const uint64_t *)buf)[idx];
    case CHORUS_FLOAT16: return perf_half_to_float(((const uint16_t *)buf)[idx]);
    case CHORUS_BFLOAT16: return perf_bf16_to_float(((const uint16_t *)buf)[idx]);
    case CHORUS_FLOAT32: return ((const float *)buf)[idx];
    case CHORUS_FLOAT64: return ((const double *)buf)[idx];
    default: return NAN;
    }
}

double perf_as_dtype(chorus_dtype_t dtype, int64_t v)
{
    uint64_t tmp;

    perf_store(dtype, &tmp, 0, v);
    return perf_load(dtype, &tmp, 0);
}

double perf_real_as_dtype(chorus_dtype_t dtype, double v)
{
    uint64_t tmp;

    perf_store_real(dtype, &tmp, 0, v);
    return perf_load(dtype, &tmp, 0);
}

void perf_fill_sentinel(chorus_dtype_t dtype, void *buf, size_t count)
{
    const perf_dtype_info_t *info = perf_dtype_info(dtype);

    if (info == NULL || buf == NULL)
        return;
    /* All-ones bits are a NaN in every floating-point format we have. */
    memset(buf, info->is_float ? 0xff : 0xa5, count * info->size);
}

/* ---- check values ----------------------------------------------------------- */

/*
 * Ranks pair up (0,1), (2,3)...; in each pair one adds s and the other -s,
 * so the deltas of all ranks cancel. With an odd rank count the last one
 * adds 0.
 */
static int64_t avg_delta(int rank, int nranks, size_t idx)
{
    int64_t s;

    if (rank == nranks - 1 && nranks % 2 == 1)
        return 0;
    s = ((size_t)((rank / 2) % 2) + idx % 2) % 2 ? 1 : -1;
    return rank % 2 == 0 ? s : -s;
}

int64_t perf_reduce_value(chorus_dtype_t dtype, chorus_op_t op, int rank, int nranks,
                          size_t idx)
{
    static const int64_t prod_signed[3] = {2, -1, -2}, prod_unsigned[3] = {2, 3, 4};
    int uns = perf_dtype_info(dtype) != NULL && perf_dtype_info(dtype)->is_unsigned;
    int64_t t;

    switch (op) {
    case CHORUS_SUM:
        /* Only 128 ranks contribute, so every partial sum stays within
         * +-128 (+256 unsigned), exact even in bfloat16. */
        if (rank >= 128)
            return 0;
        t = (int64_t)(((size_t)rank % 3 + idx % 3) % 3);
        return uns ? t : t - 1;
    case CHORUS_PROD:
        /* One rank per element contributes a factor other than 1. */
        if ((size_t)rank != idx % (size_t)nranks)
            return 1;
        return uns ? prod_unsigned[idx % 3] : prod_signed[idx % 3];
    case CHORUS_MIN:
    case CHORUS_MAX:
        t = (int64_t)(((size_t)rank % 11 * 7 + idx % 11) % 11);
        return uns ? t : t - 5;
    case CHORUS_AVG:
        /* The sum is nranks * a, so the average is the integer a. */
        t = uns ? (int64_t)(idx % 3) + 1 : (int64_t)(idx % 3) - 1;
        return t + avg_delta(rank, nranks, idx);
    default:
        return 0;
    }
}

double perf_reduce_expected(chorus_dtype_t dtype, chorus_op_t op, int nranks, size_t idx)
{
    const perf_dtype_info_t *info = perf_dtype_info(dtype);
    int64_t acc = perf_reduce_value(dtype, op, 0, nranks, idx);

    for (int r = 1; r < nranks; r++) {
        int64_t v = perf_reduce_value(dtype, op, r, nranks, idx);
        switch (op) {
        case CHORUS_PROD: acc *= v; break;
        case CHORUS_MIN: acc = v < acc ? v : acc; break;
        case CHORUS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == CHORUS_AVG) {
        if (info != NULL && info->is_float)
            return perf_as_dtype(dtype, acc / nranks); /* acc is a multiple of nranks */
        /* Integers: the sum as the dtype holds it, then division toward zero. */
        return (double)((int64_t)perf_as_dtype(dtype, acc) / nranks);
    }
    return perf_as_dtype(dtype, acc);
}

size_t perf_reduce_period(chorus_op_t op, int nranks)
{
    switch (op) {
    case CHORUS_SUM: return 3;
    case CHORUS_PROD: return 3 * (size_t)nranks; /* idx % 3 and idx % nranks */
    case CHORUS_MIN:
    case CHORUS_MAX: return 11;
    default: return 6; /* avg: idx % 3 and idx % 2 */
    }
}

int64_t perf_copy_value(chorus_dtype_t dtype, int rank, size_t idx)
{
    int uns = perf_dtype_info(dtype) != NULL && perf_dtype_info(dtype)->is_unsigned;
    int64_t t = (int64_t)(((size_t)rank % PERF_COPY_PERIOD * 31 + idx % PERF_COPY_PERIOD) %
                          PERF_COPY_PERIOD);

    return uns ? t : t - 48;
}

/* ---- fc_weight_grad check values ---------------------------------------------- */

/* The values repeat every FC_ROW_PERIOD rows of the job; a prime, unlike the columns'. */
#define FC_ROW_PERIOD 17

int64_t perf_fc_x_value(size_t job_row, size_t i)
{
    if (job_row >= PERF_FC_ROWS_MAX)
        return 0;
    return (int64_t)((job_row % FC_ROW_PERIOD * 3 + i % PERF_FC_PERIOD_IN * 7) %
                     FC_ROW_PERIOD) - 8;
}

int64_t perf_fc_e_value(size_t job_row, size_t o)
{
    return (int64_t)((job_row % FC_ROW_PERIOD * 5 + o % PERF_FC_PERIOD_OUT * 4 + 3) %
                     FC_ROW_PERIOD) - 8;
}

/*
 * Below PERF_FC_ROWS_MAX both values depend on the row through its residue
 * only: each residue's product counts once per row that has it, so a check
 * costs the same for any number of rows.
 */
int64_t perf_fc_expected(size_t total_rows, size_t o, size_t i)
{
    size_t n = total_rows < PERF_FC_ROWS_MAX ? total_rows : PERF_FC_ROWS_MAX;
    int64_t sum = 0;

    for (size_t k = 0; k < FC_ROW_PERIOD; k++) {
        size_t rows = n / FC_ROW_PERIOD + (k < n % FC_ROW_PERIOD);
        sum += (int64_t)rows * perf_fc_e_value(k, o) * perf_fc_x_value(k, i);
    }
    return sum;
}

/* rows x cols of buf from value(job_row, column) in eighths, rows from first_row on. */
static void fc_fill_matrix(chorus_dtype_t dtype, void *buf, size_t first_row, size_t rows,
                           size_t cols, int64_t (*value)(size_t, size_t))
{
    for (size_t r = 0; r < rows; r++) {
        for (size_t j = 0; j < cols; j++)
            perf_store_real(dtype, buf, r * cols + j,
                            (double)value(first_row + r, j) / 8.0);
    }
}

void perf_fc_fill(const perf_fc_args_t *a, void *x, void *e, void *grad)
{
    size_t first = (size_t)a->rank * a->rows;

    fc_fill_matrix(a->dtype, x, first, a->rows, a->in, perf_fc_x_value);
    fc_fill_matrix(a->dtype, e, first, a->rows, a->out, perf_fc_e_value);
    perf_fill_sentinel(a->dtype, grad, a->out * a->in);
}

size_t perf_fc_check(const perf_fc_args_t *a, const void *grad)
{
    /* The gradient repeats with the periods of its columns and rows: look it up. */
    double want[PERF_FC_PERIOD_OUT][PERF_FC_PERIOD_IN];
    size_t total = (size_t)a->nranks * a->rows, wrong = 0;

    for (size_t o = 0; o < PERF_FC_PERIOD_OUT; o++) {
        for (size_t i = 0; i < PERF_FC_PERIOD_IN; i++)
            want[o][i] = perf_real_as_dtype(a->dtype,
                                            (double)perf_fc_expected(total, o, i) / 64.0);
    }
    for (size_t o = 0; o < a->out; o++) {
        const double *w = want[o % PERF_FC_PERIOD_OUT];
        for (size_t i = 0; i < a->in; i++)
            wrong += perf_load(a->dtype, grad, o * a->in + i) != w[i % PERF_FC_PERIOD_IN];
    }
    return wrong;
}
