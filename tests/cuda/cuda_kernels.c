/*
 * cuda_kernels: the CUDA kernels of device.h against the CPU kernels, bit for
 * bit. Four groups, one line each:
 *
 *   reduce    every dtype x op x nsrc {1, 2, 3, 4, 16} x count, with dst
 *             apart, dst one of the inputs, and pointers one element off
 *             16-byte alignment (all of them, or the inputs only);
 *   finalize  AVG's division for every dtype, nranks 1, 3 and 4;
 *   convert   every float16 and bfloat16 bit pattern to float32, and about
 *             a million float32 patterns (every class, rounding ties,
 *             overflow and subnormal edges) to both;
 *   invalid   bad arguments are refused and launch nothing.
 *
 * The reference of a reduction is chorus__reduce() applied pairwise in input
 * order; float16 and bfloat16 widen every input, fold in float32 and round
 * once, as the device does. Every run also checks that the elements around
 * dst kept their bytes. Exact bits are required everywhere except where both
 * results are NaN: the GPU's float arithmetic does not keep NaN payloads and
 * signs the way the CPU's does, so such pairs are counted, not failed.
 *
 * --quick leaves out the largest count, --tiny the largest two (for
 * compute-sanitizer's memcheck and its slower racecheck).
 * Exits 77 when no CUDA device is present, 1 when a check failed.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "chorus.h"
#include "reduce/device.h"
#include "reduce/reduce.h"
#include "reduce/reduce_internal.h"

#define BIG_COUNT 1000003
/* Elements checked past the end of dst (and before it, for a shifted dst): a vector's worth. */
#define GUARD 16
/* Elements per input in a pool: the largest count, one of shift, the guard, to 16-byte ends. */
#define POOL_STRIDE ((((size_t)BIG_COUNT + 1 + GUARD) + 15) / 16 * 16)
#define MAX_SRCS CHORUS__DEVICE_REDUCE_MAX_SRCS
#define GUARD_BYTE 0xA5
/* Failures described in full; the rest are only counted. */
#define MAX_REPORTS 20
/* float32 patterns of the conversion check. */
#define CONVERT_COUNT (1u << 20)

static const size_t counts[] = {0, 1, 7, 33, 4097, BIG_COUNT};
/* Counts checked: all of them, or fewer for compute-sanitizer (--quick, --tiny). */
static size_t n_counts = sizeof(counts) / sizeof(counts[0]);
static const int nsrcs[] = {1, 2, 3, 4, 16};
#define N_NSRCS (sizeof(nsrcs) / sizeof(nsrcs[0]))

struct group {
    const char *name;
    long checks;
    long failed;
};

static struct group reduce_group = {"reduce", 0, 0};
static struct group finalize_group = {"finalize", 0, 0};
static struct group convert_group = {"convert", 0, 0};
static struct group invalid_group = {"invalid", 0, 0};
static long reports;
/* Elements where device and host both gave NaN, with other bits. */
static long nan_bit_differences;

/* ---- helpers ------------------------------------------------------------ */

/* A CUDA call of the harness itself failing leaves nothing to check. */
static void cuda_check(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "cuda_kernels: %s: %s\n", what, cudaGetErrorString(err));
        exit(1);
    }
}

static void device_sync(void)
{
    /* Waits for every stream, the library's non-blocking one included. */
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

static void *device_alloc(size_t bytes)
{
    void *p = NULL;
    cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "cuda_kernels: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void upload(void *dst, const void *src, size_t bytes)
{
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

static void download(void *dst, const void *src, size_t bytes)
{
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

static uint64_t xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

static void check(struct group *g, int ok)
{
    g->checks++;
    if (!ok)
        g->failed++;
}

static int is_half_dtype(chorus_dtype_t dtype)
{
    return dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16;
}

static int is_signed_dtype(chorus_dtype_t dtype)
{
    return dtype == CHORUS_INT8 || dtype == CHORUS_INT32 || dtype == CHORUS_INT64;
}

static uint64_t element_bits(const void *buf, size_t i, size_t size)
{
    const unsigned char *p = (const unsigned char *)buf + i * size;
    uint8_t b8;
    uint16_t b16;
    uint32_t b32;
    uint64_t b64;

    switch (size) {
    case 1:
        memcpy(&b8, p, 1);
        return b8;
    case 2:
        memcpy(&b16, p, 2);
        return b16;
    case 4:
        memcpy(&b32, p, 4);
        return b32;
    default:
        memcpy(&b64, p, 8);
        return b64;
    }
}

static void store_bits(void *buf, size_t i, size_t size, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + i * size;
    uint8_t b8 = (uint8_t)bits;
    uint16_t b16 = (uint16_t)bits;
    uint32_t b32 = (uint32_t)bits;

    switch (size) {
    case 1:
        memcpy(p, &b8, 1);
        break;
    case 2:
        memcpy(p, &b16, 2);
        break;
    case 4:
        memcpy(p, &b32, 4);
        break;
    default:
        memcpy(p, &bits, 8);
        break;
    }
}

static int is_nan_bits(chorus_dtype_t dtype, uint64_t bits)
{
    switch (dtype) {
    case CHORUS_FLOAT16:
        return (bits & 0x7FFFu) > 0x7C00u;
    case CHORUS_BFLOAT16:
        return (bits & 0x7FFFu) > 0x7F80u;
    case CHORUS_FLOAT32:
        return (bits & 0x7FFFFFFFu) > 0x7F800000u;
    case CHORUS_FLOAT64:
        return (bits & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
    default:
        return 0;
    }
}

/*
 * Index of the first element where got and want differ, or count when none
 * does. nan_ok accepts any two NaNs (the reductions' float arithmetic);
 * without it the bits must match exactly (the bit conversions).
 */
static size_t first_mismatch(chorus_dtype_t dtype, const void *got, const void *want,
                             size_t count, int nan_ok)
{
    size_t size = chorus_dtype_size(dtype);

    if (count == 0 || memcmp(got, want, count * size) == 0)
        return count;
    size_t first = count;
    for (size_t i = 0; i < count; i++) {
        uint64_t g = element_bits(got, i, size);
        uint64_t w = element_bits(want, i, size);
        if (g == w)
            continue;
        if (nan_ok && is_nan_bits(dtype, g) && is_nan_bits(dtype, w)) {
            nan_bit_differences++;
            continue;
        }
        if (first == count)
            first = i;
    }
    return first;
}

/* Index of the first byte of buf[from, to) that is not expect[from, to), or to. */
static size_t first_changed_byte(const unsigned char *buf, const unsigned char *expect,
                                 size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (buf[i] != expect[i])
            return i;
    }
    return to;
}

static void report(const char *fmt_case, const char *detail)
{
    if (reports++ < MAX_REPORTS)
        printf("cuda_kernels: FAIL %s: %s\n", fmt_case, detail);
    else if (reports == MAX_REPORTS + 1)
        printf("cuda_kernels: further failures are counted, not described\n");
}

/*
 * The outcome of one device run: status, the count elements at dst_off of
 * got against want, and got's other bytes of [0, span) against around.
 */
static int judge(const char *what, chorus_dtype_t dtype, chorus_status_t status,
                 const unsigned char *got, const unsigned char *around, size_t dst_off,
                 size_t count, size_t span, const void *want, int nan_ok)
{
    size_t size = chorus_dtype_size(dtype);
    char detail[256];

    if (status != CHORUS_OK) {
        snprintf(detail, sizeof(detail), "returned %s", chorus_status_string(status));
        report(what, detail);
        return 0;
    }
    size_t bad = first_mismatch(dtype, got + dst_off * size, want, count, nan_ok);
    if (bad < count) {
        int digits = (int)(2 * size);
        snprintf(detail, sizeof(detail), "element %zu: device 0x%0*" PRIx64 ", host 0x%0*" PRIx64,
                 bad, digits, element_bits(got + dst_off * size, bad, size), digits,
                 element_bits(want, bad, size));
        report(what, detail);
        return 0;
    }
    size_t byte = first_changed_byte(got, around, 0, dst_off * size);
    if (byte == dst_off * size)
        byte = first_changed_byte(got, around, (dst_off + count) * size, span * size);
    if (byte < span * size) {
        snprintf(detail, sizeof(detail), "byte %zu outside dst (%zu elements from %zu) changed",
                 byte, count, dst_off);
        report(what, detail);
        return 0;
    }
    return 1;
}

/* ---- input values ------------------------------------------------------- */

/*
 * A random float of ebits exponent and mbits mantissa bits, as bits. Mostly
 * normal numbers of moderate size (for prod near 1, so that products of 16
 * stay finite); a few NaNs (quiet and signaling), infinities, signed zeros,
 * subnormals, and for sums values near the top of the range.
 */
static uint64_t random_float_bits(uint64_t *rng, int ebits, int mbits, int for_prod)
{
    uint64_t r = xorshift(rng);
    uint64_t sign = r >> 63;
    uint64_t emax = (1ull << ebits) - 1;
    uint64_t bias = emax >> 1;
    uint64_t mant = xorshift(rng) & ((1ull << mbits) - 1);
    unsigned kind = (unsigned)(r & 0xFF);
    uint64_t exp;

    if (kind == 0) {
        exp = emax; /* NaN: quiet or signaling, random payload */
        if (mant == 0)
            mant = 1;
    } else if (kind == 1) {
        exp = emax; /* infinity */
        mant = 0;
    } else if (kind < 4) {
        exp = 0; /* zero */
        mant = 0;
    } else if (kind < 8) {
        exp = 0; /* subnormal */
        if (mant == 0)
            mant = 1;
    } else if (kind < 10 && !for_prod) {
        exp = emax - 1 - ((r >> 8) & 1); /* near the largest finite values */
    } else {
        uint64_t spread = for_prod ? 1 : (bias - 1 < 12 ? bias - 1 : 12);
        exp = bias - spread + ((r >> 16) % (2 * spread + 1));
    }
    return (sign << (ebits + mbits)) | (exp << mbits) | mant;
}

/* n values of dtype: full-range bits for most ops, small magnitudes for prod. */
static void fill_values(void *buf, chorus_dtype_t dtype, size_t n, int for_prod, uint64_t *rng)
{
    size_t size = chorus_dtype_size(dtype);

    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        switch (dtype) {
        case CHORUS_FLOAT16:
            bits = random_float_bits(rng, 5, 10, for_prod);
            break;
        case CHORUS_BFLOAT16:
            bits = random_float_bits(rng, 8, 7, for_prod);
            break;
        case CHORUS_FLOAT32:
            bits = random_float_bits(rng, 8, 23, for_prod);
            break;
        case CHORUS_FLOAT64:
            bits = random_float_bits(rng, 11, 52, for_prod);
            break;
        default:
            bits = xorshift(rng);
            if (for_prod) {
                /* 1 to 3, negative half the time for signed types, now and then 0 */
                uint64_t r = bits;
                int64_t v = (r & 0x1F) == 0 ? 0 : 1 + (int64_t)((r >> 8) % 3);
                if (is_signed_dtype(dtype) && ((r >> 16) & 1))
                    v = -v;
                bits = (uint64_t)v;
            }
            break;
        }
        store_bits(buf, i, size, bits);
    }
}

/* ---- reduce ------------------------------------------------------------- */

/* MAX_SRCS inputs of POOL_STRIDE elements each, on the host and on the device. */
struct pool {
    unsigned char *host;
    unsigned char *dev;
};

/* Where dst goes in one run. */
enum placement {
    DST_APART,     /* its own buffer, shifted like the inputs */
    DST_ALIAS,     /* dst is srcs[0] */
    DST_ALIGNED,   /* its own buffer, unshifted while the inputs are shifted */
    DST_TWO,       /* two outputs in one pass: srcs[0], and a buffer of its own */
};

static const char *const placement_names[] = {
    [DST_APART] = "dst apart",
    [DST_ALIAS] = "dst == srcs[0]",
    [DST_ALIGNED] = "dst aligned, srcs not",
    [DST_TWO] = "dsts srcs[0] and apart",
};

struct buffers {
    unsigned char *dev_dst;     /* POOL_STRIDE elements of the widest dtype */
    unsigned char *dev_scratch; /* the same: a copy of an input to reduce into */
    unsigned char *got;         /* host copy of what came back */
    unsigned char *around;      /* host: what dst's surroundings must still hold */
    unsigned char *want;        /* host reference */
    float *facc;                /* host float32 fold of float16/bfloat16 */
    float *ftmp;
};

static void run_reduce(struct buffers *b, const struct pool *pool, chorus_dtype_t dtype,
                       chorus_op_t op, int nsrc, size_t count, size_t shift,
                       enum placement placement)
{
    size_t size = chorus_dtype_size(dtype);
    size_t span = shift + count + GUARD;
    const void *srcs[MAX_SRCS];
    unsigned char *base;
    size_t dst_off = shift;

    for (int j = 0; j < nsrc; j++)
        srcs[j] = pool->dev + ((size_t)j * POOL_STRIDE + shift) * size;
    if (placement == DST_ALIAS || placement == DST_TWO) {
        base = b->dev_scratch;
        cuda_check(cudaMemcpy(base, pool->dev, span * size, cudaMemcpyDeviceToDevice),
                   "cudaMemcpy device to device");
        memcpy(b->around, pool->host, span * size);
        srcs[0] = base + shift * size;
    } else {
        base = b->dev_dst;
        cuda_check(cudaMemset(base, GUARD_BYTE, span * size), "cudaMemset");
        memset(b->around, GUARD_BYTE, span * size);
        if (placement == DST_ALIGNED)
            dst_off = 0;
    }
    if (placement == DST_TWO)
        cuda_check(cudaMemset(b->dev_dst, GUARD_BYTE, span * size), "cudaMemset");
    device_sync();

    void *dsts[2] = {base + dst_off * size, b->dev_dst + dst_off * size};
    chorus_status_t status =
        placement == DST_TWO
            ? chorus__device_reduce_to(dtype, op, dsts, 2, srcs, nsrc, count, NULL)
            : chorus__device_reduce(dtype, op, dsts[0], srcs, nsrc, count, NULL);
    device_sync();
    download(b->got, base, span * size);

    char what[160];
    if (placement == DST_TWO) {
        /* The second output, apart: guards around it, the result inside. */
        unsigned char *around = malloc(span * size), *got = malloc(span * size);

        if (around == NULL || got == NULL) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        memset(around, GUARD_BYTE, span * size);
        download(got, b->dev_dst, span * size);
        snprintf(what, sizeof(what), "reduce %s %s nsrc %d count %zu shift %zu, second dst",
                 chorus_dtype_name(dtype), chorus_op_name(op), nsrc, count, shift);
        check(&reduce_group,
              judge(what, dtype, status, got, around, dst_off, count, span, b->want, 1));
        free(around);
        free(got);
    }
    snprintf(what, sizeof(what), "reduce %s %s nsrc %d count %zu shift %zu, %s",
             chorus_dtype_name(dtype), chorus_op_name(op), nsrc, count, shift,
             placement_names[placement]);
    check(&reduce_group,
          judge(what, dtype, status, b->got, b->around, dst_off, count, span, b->want, 1));
}

/*
 * The host fold of input j into the reference. Inputs arrive in order, so
 * the reference for nsrc is ready once input nsrc - 1 is folded (and, for
 * float16 and bfloat16, rounded by finish_reference).
 */
static void fold_reference(struct buffers *b, const struct pool *pool, chorus_dtype_t dtype,
                           chorus_op_t op, int j, size_t count, size_t shift)
{
    size_t size = chorus_dtype_size(dtype);
    const unsigned char *src = pool->host + ((size_t)j * POOL_STRIDE + shift) * size;

    if (!is_half_dtype(dtype)) {
        if (j == 0)
            memcpy(b->want, src, count * size);
        else
            chorus__reduce(dtype, op, b->want, b->want, src, count);
        return;
    }
    void (*widen)(float *, const uint16_t *, size_t) =
        dtype == CHORUS_FLOAT16 ? chorus__half_to_float_n : chorus__bf16_to_float_n;
    if (j == 0) {
        widen(b->facc, (const uint16_t *)src, count);
    } else {
        widen(b->ftmp, (const uint16_t *)src, count);
        chorus__reduce(CHORUS_FLOAT32, op, b->facc, b->facc, b->ftmp, count);
    }
}

/* float16 and bfloat16 round the float32 fold once, into the reference. */
static void finish_reference(struct buffers *b, chorus_dtype_t dtype, size_t count)
{
    if (dtype == CHORUS_FLOAT16)
        chorus__float_to_half_n((uint16_t *)b->want, b->facc, count);
    else if (dtype == CHORUS_BFLOAT16)
        chorus__float_to_bf16_n((uint16_t *)b->want, b->facc, count);
}

static void check_reduce_dtype(struct buffers *b, const struct pool pools[2],
                               chorus_dtype_t dtype)
{
    for (int op = 0; op < CHORUS_OP_COUNT; op++) {
        const struct pool *pool = &pools[op == CHORUS_PROD];
        for (size_t c = 0; c < n_counts; c++) {
            size_t count = counts[c];
            int big = count == BIG_COUNT;
            for (size_t shift = 0; shift <= 1; shift++) {
                int folded = 0;
                for (size_t k = 0; k < N_NSRCS; k++) {
                    int nsrc = nsrcs[k];
                    for (; folded < nsrc; folded++)
                        fold_reference(b, pool, dtype, (chorus_op_t)op, folded, count, shift);
                    finish_reference(b, dtype, count);
                    /* The largest count runs the paths that differ in their vectors only. */
                    run_reduce(b, pool, dtype, (chorus_op_t)op, nsrc, count, shift, DST_APART);
                    if (shift == 1 || !big)
                        run_reduce(b, pool, dtype, (chorus_op_t)op, nsrc, count, shift,
                                   DST_ALIAS);
                    if (shift == 1 && !big) {
                        run_reduce(b, pool, dtype, (chorus_op_t)op, nsrc, count, shift,
                                   DST_ALIGNED);
                        run_reduce(b, pool, dtype, (chorus_op_t)op, nsrc, count, shift,
                                   DST_TWO);
                    }
                }
            }
        }
    }
}

/* ---- finalize ----------------------------------------------------------- */

static void check_finalize_dtype(struct buffers *b, const struct pool *pool,
                                 chorus_dtype_t dtype)
{
    static const int nranks_list[] = {1, 3, 4};
    size_t size = chorus_dtype_size(dtype);
    char what[160];

    for (size_t c = 0; c < n_counts; c++) {
        size_t count = counts[c];
        for (size_t r = 0; r < sizeof(nranks_list) / sizeof(nranks_list[0]); r++) {
            int nranks = nranks_list[r];
            for (size_t shift = 0; shift <= 1; shift++) {
                size_t span = shift + count + GUARD;
                cuda_check(cudaMemcpy(b->dev_scratch, pool->dev, span * size,
                                      cudaMemcpyDeviceToDevice),
                           "cudaMemcpy device to device");
                device_sync();
                chorus_status_t status =
                    chorus__device_finalize(dtype, CHORUS_AVG, b->dev_scratch + shift * size,
                                            count, nranks, NULL);
                device_sync();
                download(b->got, b->dev_scratch, span * size);

                memcpy(b->want, pool->host + shift * size, count * size);
                chorus__reduce_finalize(dtype, CHORUS_AVG, b->want, count, nranks);
                snprintf(what, sizeof(what), "finalize %s avg nranks %d count %zu shift %zu",
                         chorus_dtype_name(dtype), nranks, count, shift);
                check(&finalize_group, judge(what, dtype, status, b->got, pool->host, shift,
                                             count, span, b->want, 1));
            }
        }
    }

    /* Other ops leave the buffer alone. */
    size_t count = 4097;
    size_t span = count + GUARD;
    cuda_check(cudaMemcpy(b->dev_scratch, pool->dev, span * size, cudaMemcpyDeviceToDevice),
               "cudaMemcpy device to device");
    device_sync();
    chorus_status_t status =
        chorus__device_finalize(dtype, CHORUS_SUM, b->dev_scratch, count, 3, NULL);
    device_sync();
    download(b->got, b->dev_scratch, span * size);
    snprintf(what, sizeof(what), "finalize %s sum (no-op) count %zu", chorus_dtype_name(dtype),
             count);
    check(&finalize_group,
          judge(what, dtype, status, b->got, pool->host, 0, count, span, pool->host, 0));
}

/* ---- convert ------------------------------------------------------------ */

typedef void (*host_convert_fn)(void *dst, const void *src, size_t n);

static void host_half_to_float(void *dst, const void *src, size_t n)
{
    chorus__half_to_float_n(dst, src, n);
}

static void host_bf16_to_float(void *dst, const void *src, size_t n)
{
    chorus__bf16_to_float_n(dst, src, n);
}

static void host_float_to_half(void *dst, const void *src, size_t n)
{
    chorus__float_to_half_n(dst, src, n);
}

static void host_float_to_bf16(void *dst, const void *src, size_t n)
{
    chorus__float_to_bf16_n(dst, src, n);
}

/*
 * One conversion of count elements from src_off of the input, written at
 * dst_off of a guarded output. dev_src holds the host input host_src.
 */
static void run_convert(struct buffers *b, chorus_dtype_t to, chorus_dtype_t from,
                        host_convert_fn host_fn, const unsigned char *host_src,
                        const unsigned char *dev_src, size_t count, size_t src_off,
                        size_t dst_off)
{
    size_t in_size = chorus_dtype_size(from);
    size_t out_size = chorus_dtype_size(to);
    size_t span = dst_off + count + GUARD;
    char what[160];

    cuda_check(cudaMemset(b->dev_dst, GUARD_BYTE, span * out_size), "cudaMemset");
    memset(b->around, GUARD_BYTE, span * out_size);
    device_sync();
    chorus_status_t status = chorus__device_convert(to, b->dev_dst + dst_off * out_size, from,
                                                    dev_src + src_off * in_size, count, NULL);
    device_sync();
    download(b->got, b->dev_dst, span * out_size);
    host_fn(b->want, host_src + src_off * in_size, count);

    snprintf(what, sizeof(what), "convert %s to %s count %zu src shift %zu dst shift %zu",
             chorus_dtype_name(from), chorus_dtype_name(to), count, src_off, dst_off);
    check(&convert_group,
          judge(what, to, status, b->got, b->around, dst_off, count, span, b->want, 0));
}

/* Every placement of input and output, at the full count and at a few short ones. */
static void run_convert_all(struct buffers *b, chorus_dtype_t to, chorus_dtype_t from,
                            host_convert_fn host_fn, const unsigned char *host_src,
                            const unsigned char *dev_src, size_t full)
{
    static const size_t offsets[][2] = {{0, 0}, {1, 1}, {1, 0}, {0, 1}, {3, 1}};
    static const size_t short_counts[] = {0, 1, 7, 33};

    for (size_t k = 0; k < sizeof(offsets) / sizeof(offsets[0]); k++) {
        size_t src_off = offsets[k][0], dst_off = offsets[k][1];
        run_convert(b, to, from, host_fn, host_src, dev_src, full - src_off, src_off, dst_off);
        for (size_t c = 0; c < sizeof(short_counts) / sizeof(short_counts[0]); c++)
            run_convert(b, to, from, host_fn, host_src, dev_src, short_counts[c], src_off,
                        dst_off);
    }
}

/* Bit patterns of float32 for the narrowing conversions. */
static size_t float32_patterns(uint32_t *out, size_t cap, uint64_t *rng)
{
    static const uint32_t edges[] = {
        0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, /* zero, float32 subnormals */
        0x33000000u, 0x33000001u, 0x32FFFFFFu, 0x33800000u, /* half: 2^-25 tie, 2^-24 */
        0x33C00000u, 0x34200000u, 0x387FC000u, 0x387FE000u, /* half subnormal ties */
        0x387FFFFFu, 0x38800000u, 0x38801000u, 0x38803000u, /* half: smallest normal, ties */
        0x3F800000u, 0x3F801000u, 0x3F803000u, 0x3F808000u, /* 1 and ties of both types */
        0x3F818000u, 0x3F808001u, 0x3F807FFFu, 0x3FFFFFFFu,
        0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u, /* half: 65504, 65520 */
        0x47800000u, 0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu, /* overflow of both */
        0x7F800000u, 0x7F800001u, 0x7F802000u, 0x7F810000u, /* infinity, signaling NaNs */
        0x7FBFFFFFu, 0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu, /* quiet NaNs */
        0x7F801FFFu, 0x7F80FFFFu,
    };
    size_t n = 0;

    /* Each edge, its neighbours and their negatives. */
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        for (int d = -1; d <= 1; d++) {
            uint32_t v = edges[i] + (uint32_t)d;
            if (n + 2 <= cap) {
                out[n++] = v;
                out[n++] = v ^ 0x80000000u;
            }
        }
    }
    /* Every bfloat16 value with the tie below it and its neighbours. */
    for (uint32_t p = 0; p < 0x10000u && n + 3 <= cap; p++) {
        out[n++] = (p << 16) | 0x8000u;
        out[n++] = (p << 16) | 0x7FFFu;
        out[n++] = (p << 16) | 0x8001u;
    }
    /* Every float16 value, widened, with the tie above it: its half ulp in float32 bits. */
    for (uint32_t h = 0; h < 0x10000u && n + 2 <= cap; h++) {
        float f = chorus__half_to_float((uint16_t)h);
        uint32_t bits;
        memcpy(&bits, &f, sizeof(bits));
        if (((h >> 10) & 0x1Fu) == 0) {
            /* subnormal float16: the unit is 2^-24, a half unit 2^-25 beside the value */
            float tie = f + (h & 0x8000u ? -0x1p-25f : 0x1p-25f);
            memcpy(&bits, &tie, sizeof(bits));
            out[n++] = bits;
            out[n++] = bits + 1;
            continue;
        }
        /* normal float16: 13 more mantissa bits in float32, so half a unit is 0x1000 */
        out[n++] = bits + 0x1000u;
        out[n++] = bits + 0x0FFFu;
    }
    /* The rest random: half uniform over every pattern, half near float16's range. */
    while (n < cap) {
        uint64_t r = xorshift(rng);
        uint32_t v = (uint32_t)r;
        if (n % 2 == 0) {
            uint32_t exp = 96 + (uint32_t)((r >> 32) % 56);
            v = (v & 0x807FFFFFu) | (exp << 23);
        }
        out[n++] = v;
    }
    return n;
}

static void check_convert(struct buffers *b, uint64_t *rng)
{
    /* Widening: every 16-bit pattern. */
    size_t n16 = 0x10000;
    uint16_t *h16 = host_alloc((n16 + GUARD) * sizeof(uint16_t));
    for (size_t i = 0; i < n16 + GUARD; i++)
        h16[i] = (uint16_t)i;
    unsigned char *d16 = device_alloc((n16 + GUARD) * sizeof(uint16_t));
    upload(d16, h16, (n16 + GUARD) * sizeof(uint16_t));
    run_convert_all(b, CHORUS_FLOAT32, CHORUS_FLOAT16, host_half_to_float,
                    (unsigned char *)h16, d16, n16);
    run_convert_all(b, CHORUS_FLOAT32, CHORUS_BFLOAT16, host_bf16_to_float,
                    (unsigned char *)h16, d16, n16);
    cuda_check(cudaFree(d16), "cudaFree");
    free(h16);

    /* Narrowing: float32 patterns of every class. */
    uint32_t *h32 = host_alloc((CONVERT_COUNT + GUARD) * sizeof(uint32_t));
    size_t n32 = float32_patterns(h32, CONVERT_COUNT, rng);
    memset(h32 + n32, 0, GUARD * sizeof(uint32_t));
    unsigned char *d32 = device_alloc((n32 + GUARD) * sizeof(uint32_t));
    upload(d32, h32, (n32 + GUARD) * sizeof(uint32_t));
    run_convert_all(b, CHORUS_FLOAT16, CHORUS_FLOAT32, host_float_to_half,
                    (unsigned char *)h32, d32, n32);
    run_convert_all(b, CHORUS_BFLOAT16, CHORUS_FLOAT32, host_float_to_bf16,
                    (unsigned char *)h32, d32, n32);
    cuda_check(cudaFree(d32), "cudaFree");
    free(h32);
}

/* ---- invalid arguments -------------------------------------------------- */

static void expect_status(const char *what, chorus_status_t got, chorus_status_t want)
{
    char detail[128];
    int ok = got == want;

    if (!ok) {
        snprintf(detail, sizeof(detail), "returned %s, expected %s", chorus_status_string(got),
                 chorus_status_string(want));
        report(what, detail);
    }
    check(&invalid_group, ok);
}

static void check_invalid(struct buffers *b)
{
    const void *srcs[MAX_SRCS + 1];
    void *dst = b->dev_dst;
    const chorus_status_t invalid = CHORUS_ERR_INVALID_ARG;

    for (int j = 0; j <= MAX_SRCS; j++)
        srcs[j] = b->dev_scratch;
    expect_status("reduce dtype DTYPE_COUNT",
                  chorus__device_reduce(CHORUS_DTYPE_COUNT, CHORUS_SUM, dst, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce dtype -1",
                  chorus__device_reduce((chorus_dtype_t)-1, CHORUS_SUM, dst, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce op OP_COUNT",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_OP_COUNT, dst, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce op -1",
                  chorus__device_reduce(CHORUS_FLOAT32, (chorus_op_t)-1, dst, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce nsrc 0",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, srcs, 0, 8, NULL),
                  invalid);
    expect_status("reduce nsrc 17",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, srcs, MAX_SRCS + 1, 8,
                                        NULL),
                  invalid);
    expect_status("reduce nsrc -1",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, srcs, -1, 8, NULL),
                  invalid);
    expect_status("reduce dst NULL",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, NULL, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce srcs NULL",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, NULL, 2, 8, NULL),
                  invalid);
    void *dsts[MAX_SRCS + 1];
    for (int j = 0; j <= MAX_SRCS; j++)
        dsts[j] = dst;
    expect_status("reduce_to ndst 0",
                  chorus__device_reduce_to(CHORUS_FLOAT32, CHORUS_SUM, dsts, 0, srcs, 2, 8, NULL),
                  invalid);
    expect_status("reduce_to ndst 17",
                  chorus__device_reduce_to(CHORUS_FLOAT32, CHORUS_SUM, dsts, MAX_SRCS + 1, srcs,
                                           2, 8, NULL),
                  invalid);
    expect_status("reduce_to dsts NULL",
                  chorus__device_reduce_to(CHORUS_FLOAT32, CHORUS_SUM, NULL, 2, srcs, 2, 8, NULL),
                  invalid);
    void *dst_null[2] = {dst, NULL};
    expect_status("reduce_to dsts[1] NULL",
                  chorus__device_reduce_to(CHORUS_FLOAT32, CHORUS_SUM, dst_null, 2, srcs, 2, 8,
                                           NULL),
                  invalid);
    const void *with_null[2] = {b->dev_scratch, NULL};
    expect_status("reduce srcs[1] NULL",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, with_null, 2, 8, NULL),
                  invalid);
    /* An int32 pointer off its 4-byte alignment would fault the device: refused. */
    const void *odd[2] = {b->dev_scratch, b->dev_scratch + 1};
    expect_status("reduce int32 src at an odd byte",
                  chorus__device_reduce(CHORUS_INT32, CHORUS_SUM, dst, odd, 2, 8, NULL), invalid);
    expect_status("reduce int32 dst at byte 2",
                  chorus__device_reduce(CHORUS_INT32, CHORUS_SUM, b->dev_dst + 2, srcs, 2, 8,
                                        NULL),
                  invalid);
    expect_status("reduce count 0",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, srcs, 2, 0, NULL),
                  CHORUS_OK);
    expect_status("reduce count 0, NULL pointers",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, NULL, NULL, 2, 0, NULL),
                  CHORUS_OK);
    expect_status("reduce count 0, nsrc 0",
                  chorus__device_reduce(CHORUS_FLOAT32, CHORUS_SUM, dst, srcs, 0, 0, NULL),
                  invalid);

    expect_status("finalize dtype DTYPE_COUNT",
                  chorus__device_finalize(CHORUS_DTYPE_COUNT, CHORUS_AVG, dst, 8, 2, NULL),
                  invalid);
    expect_status("finalize op OP_COUNT",
                  chorus__device_finalize(CHORUS_FLOAT32, CHORUS_OP_COUNT, dst, 8, 2, NULL),
                  invalid);
    expect_status("finalize nranks 0",
                  chorus__device_finalize(CHORUS_FLOAT32, CHORUS_AVG, dst, 8, 0, NULL), invalid);
    expect_status("finalize nranks -1",
                  chorus__device_finalize(CHORUS_FLOAT32, CHORUS_AVG, dst, 8, -1, NULL), invalid);
    expect_status("finalize buf NULL",
                  chorus__device_finalize(CHORUS_FLOAT32, CHORUS_AVG, NULL, 8, 2, NULL), invalid);
    expect_status("finalize sum, NULL buf",
                  chorus__device_finalize(CHORUS_FLOAT32, CHORUS_SUM, NULL, 8, 2, NULL),
                  CHORUS_OK);

    expect_status("convert int32 to float16",
                  chorus__device_convert(CHORUS_FLOAT16, dst, CHORUS_INT32, srcs[0], 8, NULL),
                  invalid);
    expect_status("convert float32 to float32",
                  chorus__device_convert(CHORUS_FLOAT32, dst, CHORUS_FLOAT32, srcs[0], 8, NULL),
                  invalid);
    expect_status("convert float16 to bfloat16",
                  chorus__device_convert(CHORUS_BFLOAT16, dst, CHORUS_FLOAT16, srcs[0], 8, NULL),
                  invalid);
    expect_status("convert float32 to float64",
                  chorus__device_convert(CHORUS_FLOAT64, dst, CHORUS_FLOAT32, srcs[0], 8, NULL),
                  invalid);
    expect_status("convert dtype -1",
                  chorus__device_convert(CHORUS_FLOAT16, dst, (chorus_dtype_t)-1, srcs[0], 8,
                                         NULL),
                  invalid);
    expect_status("convert src NULL",
                  chorus__device_convert(CHORUS_FLOAT16, dst, CHORUS_FLOAT32, NULL, 8, NULL),
                  invalid);
    expect_status("convert float32 src at an odd byte",
                  chorus__device_convert(CHORUS_FLOAT16, dst, CHORUS_FLOAT32, b->dev_scratch + 2,
                                         8, NULL),
                  invalid);
    expect_status("convert count 0",
                  chorus__device_convert(CHORUS_FLOAT16, dst, CHORUS_FLOAT32, srcs[0], 0, NULL),
                  CHORUS_OK);

    /* Nothing above may have launched a kernel that failed. */
    device_sync();
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        report("invalid arguments", cudaGetErrorString(err));
    check(&invalid_group, err == cudaSuccess);
}

/* ---- main --------------------------------------------------------------- */

static void print_group(const struct group *g)
{
    printf("cuda_kernels: %s: %ld checks, %ld failed\n", g->name, g->checks, g->failed);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "--quick") == 0)
        n_counts -= 1;
    else if (argc > 1 && strcmp(argv[1], "--tiny") == 0)
        n_counts -= 2;
    if (!chorus__device_present()) {
        printf("cuda_kernels: no CUDA device, skipped\n");
        return 77;
    }

    struct buffers b;
    size_t max_bytes = POOL_STRIDE * sizeof(uint64_t);
    b.dev_dst = device_alloc(max_bytes);
    b.dev_scratch = device_alloc(max_bytes);
    b.got = host_alloc(max_bytes);
    b.around = host_alloc(max_bytes);
    b.want = host_alloc(max_bytes);
    b.facc = host_alloc(POOL_STRIDE * sizeof(float));
    b.ftmp = host_alloc(POOL_STRIDE * sizeof(float));

    uint64_t rng = 0x9E3779B97F4A7C15ull;
    check_invalid(&b);

    struct pool pools[2];
    size_t pool_bytes = MAX_SRCS * POOL_STRIDE * sizeof(uint64_t);
    for (int p = 0; p < 2; p++) {
        pools[p].host = host_alloc(pool_bytes);
        pools[p].dev = device_alloc(pool_bytes);
    }
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++) {
        size_t bytes = MAX_SRCS * POOL_STRIDE * chorus_dtype_size((chorus_dtype_t)dtype);
        for (int p = 0; p < 2; p++) {
            fill_values(pools[p].host, (chorus_dtype_t)dtype, MAX_SRCS * POOL_STRIDE, p, &rng);
            upload(pools[p].dev, pools[p].host, bytes);
        }
        check_reduce_dtype(&b, pools, (chorus_dtype_t)dtype);
        check_finalize_dtype(&b, &pools[0], (chorus_dtype_t)dtype);
    }
    for (int p = 0; p < 2; p++) {
        cuda_check(cudaFree(pools[p].dev), "cudaFree");
        free(pools[p].host);
    }

    check_convert(&b, &rng);

    print_group(&reduce_group);
    print_group(&finalize_group);
    print_group(&convert_group);
    print_group(&invalid_group);
    if (nan_bit_differences > 0)
        printf("cuda_kernels: note: %ld results were NaN on both sides with other bits "
               "(accepted)\n",
               nan_bit_differences);

    cuda_check(cudaFree(b.dev_dst), "cudaFree");
    cuda_check(cudaFree(b.dev_scratch), "cudaFree");
    free(b.got);
    free(b.around);
    free(b.want);
    free(b.facc);
    free(b.ftmp);

    long failed = reduce_group.failed + finalize_group.failed + convert_group.failed +
                  invalid_group.failed;
    return failed > 0 ? 1 : 0;
}
