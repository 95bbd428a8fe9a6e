/*
 * Unit tests of the reduction kernels and the float16/bfloat16 conversions.
 *
 * Every (dtype, op) kernel runs on random inputs from a fixed seed, at odd
 * counts and with every aliasing the interface allows, and is compared bit
 * for bit with a scalar reference that shares no code with the library:
 * integers wrap through uint64_t, floats go through long double (float64
 * sums and products through plain double, since double rounding from long
 * double could differ), and float16/bfloat16 are decoded and rounded by
 * ldexpl/rintl code written here. float16 kernels run under every
 * instruction-set path this CPU has.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"
#include "reduce/reduce_internal.h"
#include "util/config.h"

/* log.c reads its level through config.c, which wants the list of all config
 * tables; the library defines it, a standalone build of this test does not. */

static const char *const isas[] = {"portable", "f16c", "avx512"};
#define N_ISAS (sizeof(isas) / sizeof(isas[0]))

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic across platforms. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* ---- reference float16 / bfloat16 coding -------------------------------- */

typedef struct {
    int mbits; /* stored mantissa bits */
    int bias;
} ref_fmt_t;

static const ref_fmt_t fmt_f16 = {10, 15};
static const ref_fmt_t fmt_bf16 = {7, 127};

static int ref_emask(ref_fmt_t f)
{
    return (1 << (15 - f.mbits)) - 1;
}

static long double ref_decode(uint16_t bits, ref_fmt_t f)
{
    int e = (bits >> f.mbits) & ref_emask(f);
    int m = bits & ((1 << f.mbits) - 1);
    long double v;

    if (e == ref_emask(f))
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpl(m, 1 - f.bias - f.mbits);
    else
        v = ldexpl(m + (1 << f.mbits), e - f.bias - f.mbits);
    return (bits & 0x8000) ? -v : v;
}

static int ref_is_nan16(uint16_t bits, ref_fmt_t f)
{
    return ((bits >> f.mbits) & ref_emask(f)) == ref_emask(f) &&
           (bits & ((1 << f.mbits) - 1)) != 0;
}

/* Nearest representable value, ties to even (rintl in the default mode). */
static uint16_t ref_encode(long double v, ref_fmt_t f)
{
    int emax = ref_emask(f) - 1 - f.bias, emin = 1 - f.bias;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    long double a = fabsl(v), q;
    int k;

    if (isnan(v))
        return (uint16_t)((ref_emask(f) << f.mbits) | (1 << (f.mbits - 1)));
    if (a >= ldexpl(2.0L - ldexpl(1.0L, -(f.mbits + 1)), emax))
        return sign | (uint16_t)(ref_emask(f) << f.mbits);
    if (a < ldexpl(1.0L, emin))
        return sign | (uint16_t)rintl(ldexpl(a, f.bias - 1 + f.mbits));
    frexpl(a, &k);
    k -= 1; /* a is in [2^k, 2^(k+1)) */
    q = rintl(ldexpl(a, f.mbits - k));
    if (q == ldexpl(1.0L, f.mbits + 1)) {
        q = ldexpl(1.0L, f.mbits);
        k++;
    }
    return sign | (uint16_t)(((k + f.bias) << f.mbits) | ((long)q - (1L << f.mbits)));
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- dtype.c -------------------------------------------------------------- */

Test(dtype, sizes_and_names)
{
    static const struct {
        chorus_dtype_t d;
        size_t size;
        const char *name;
    } want[] = {
        {CHORUS_INT8, 1, "int8"},       {CHORUS_UINT8, 1, "uint8"},
        {CHORUS_INT32, 4, "int32"},     {CHORUS_UINT32, 4, "uint32"},
        {CHORUS_INT64, 8, "int64"},     {CHORUS_UINT64, 8, "uint64"},
        {CHORUS_FLOAT16, 2, "float16"}, {CHORUS_BFLOAT16, 2, "bfloat16"},
        {CHORUS_FLOAT32, 4, "float32"}, {CHORUS_FLOAT64, 8, "float64"},
    };
    static const char *const ops[] = {"sum", "prod", "min", "max", "avg"};

    cr_assert_eq(sizeof(want) / sizeof(want[0]), CHORUS_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_expect_eq(chorus_dtype_size(want[i].d), want[i].size, "%s", want[i].name);
        cr_expect_str_eq(chorus_dtype_name(want[i].d), want[i].name);
    }
    for (int op = 0; op < CHORUS_OP_COUNT; op++)
        cr_expect_str_eq(chorus_op_name((chorus_op_t)op), ops[op]);
    cr_expect_eq(chorus_dtype_size(CHORUS_DTYPE_COUNT), 0);
    cr_expect_eq(chorus_dtype_size((chorus_dtype_t)-1), 0);
    cr_expect_null(chorus_dtype_name(CHORUS_DTYPE_COUNT));
    cr_expect_null(chorus_dtype_name((chorus_dtype_t)-1));
    cr_expect_null(chorus_op_name(CHORUS_OP_COUNT));
    cr_expect_null(chorus_op_name((chorus_op_t)-1));
}

/* ---- dispatch ------------------------------------------------------------- */

Test(reduce, invalid_pairs)
{
    int32_t x = 1;

    cr_expect_null(chorus__reduce_kernel(CHORUS_DTYPE_COUNT, CHORUS_SUM));
    cr_expect_null(chorus__reduce_kernel((chorus_dtype_t)-1, CHORUS_SUM));
    cr_expect_null(chorus__reduce_kernel(CHORUS_INT32, CHORUS_OP_COUNT));
    cr_expect_null(chorus__reduce_kernel(CHORUS_INT32, (chorus_op_t)-1));
    cr_expect_eq(chorus__reduce(CHORUS_DTYPE_COUNT, CHORUS_SUM, &x, &x, &x, 1),
                 CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(chorus__reduce(CHORUS_INT32, CHORUS_OP_COUNT, &x, &x, &x, 1),
                 CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(x, 1);
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
        for (int op = 0; op < CHORUS_OP_COUNT; op++)
            cr_expect_not_null(chorus__reduce_kernel((chorus_dtype_t)d, (chorus_op_t)op));
        cr_expect_eq(chorus__reduce_kernel((chorus_dtype_t)d, CHORUS_AVG),
                     chorus__reduce_kernel((chorus_dtype_t)d, CHORUS_SUM));
    }
}

Test(reduce, isa_hooks)
{
    const char *isa = chorus__reduce_isa();
    int known = 0;

    for (size_t i = 0; i < N_ISAS; i++)
        known |= strcmp(isa, isas[i]) == 0;
    cr_assert(known, "unknown isa '%s'", isa);
    cr_expect_eq(chorus__reduce_force_isa("portable"), CHORUS_OK);
    cr_expect_str_eq(chorus__reduce_isa(), "portable");
    cr_expect_eq(chorus__reduce_force_isa("no-such-isa"), CHORUS_ERR_INVALID_ARG);
    cr_expect_str_eq(chorus__reduce_isa(), "portable");
    cr_expect_eq(chorus__reduce_force_isa(NULL), CHORUS_OK);
    cr_expect_str_eq(chorus__reduce_isa(), isa);
    chorus__reduce_force_portable(1);
    cr_expect_str_eq(chorus__reduce_isa(), "portable");
    chorus__reduce_force_portable(0);
    cr_expect_str_eq(chorus__reduce_isa(), isa);
    cr_log_info("float16 path on this cpu: %s", isa);
}

/* ---- conversions -------------------------------------------------------- */

/* Every float16 widens exactly, and narrows back to itself; NaN comes out quiet. */
Test(convert, half_exhaustive)
{
    static float wide[65536];
    static uint16_t all[65536];

    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t got = fbits(chorus__half_to_float((uint16_t)h));
        uint32_t want;
        uint16_t back = chorus__float_to_half(bitsf(got));

        all[h] = (uint16_t)h;
        if (ref_is_nan16((uint16_t)h, fmt_f16)) {
            want = ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
            cr_assert_eq(back, h | 0x200u, "nan %04x narrowed back to %04x", h, back);
        } else {
            want = fbits((float)ref_decode((uint16_t)h, fmt_f16));
            cr_assert_eq(back, h, "%04x round-tripped to %04x", h, back);
            cr_assert_eq(ref_encode(ref_decode((uint16_t)h, fmt_f16), fmt_f16), h);
        }
        cr_assert_eq(got, want, "half %04x widened to %08x, want %08x", h, got, want);
    }
    for (size_t i = 0; i < N_ISAS; i++) {
        if (chorus__reduce_force_isa(isas[i]) != CHORUS_OK)
            continue;
        memset(wide, 0, sizeof(wide));
        chorus__half_to_float_n(wide, all, 65536);
        for (uint32_t h = 0; h < 65536; h++)
            cr_assert_eq(fbits(wide[h]), fbits(chorus__half_to_float((uint16_t)h)),
                         "%s: bulk widening of %04x differs", isas[i], h);
    }
    chorus__reduce_force_isa(NULL);
}

Test(convert, bf16_exhaustive)
{
    static float wide[65536];
    static uint16_t all[65536], narrow[65536];

    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t got = fbits(chorus__bf16_to_float((uint16_t)b));
        uint16_t back = chorus__float_to_bf16(bitsf(got));

        all[b] = (uint16_t)b;
        if (ref_is_nan16((uint16_t)b, fmt_bf16)) {
            cr_assert_eq(got, (b << 16) | 0x00400000u, "bf16 nan %04x -> %08x", b, got);
            cr_assert_eq(back, b | 0x40u, "bf16 nan %04x narrowed back to %04x", b, back);
        } else {
            cr_assert_eq(got, fbits((float)ref_decode((uint16_t)b, fmt_bf16)));
            cr_assert_eq(back, b, "bf16 %04x round-tripped to %04x", b, back);
        }
    }
    chorus__bf16_to_float_n(wide, all, 65536);
    chorus__float_to_bf16_n(narrow, wide, 65536);
    for (uint32_t b = 0; b < 65536; b++) {
        cr_assert_eq(fbits(wide[b]), fbits(chorus__bf16_to_float((uint16_t)b)));
        cr_assert_eq(narrow[b], chorus__float_to_bf16(wide[b]));
    }
}

/*
 * Floats that probe rounding: every representable value of the format, the
 * midpoints between neighbours (exact ties) and the floats either side of
 * them, then a sweep over the float32 bit patterns. Returns the count.
 */
static size_t rounding_probes(float *out, ref_fmt_t f)
{
    size_t n = 0;

    for (uint32_t h = 0; h < 0x8000u; h++) {
        long double lo = ref_decode((uint16_t)h, f);
        long double hi = ref_decode((uint16_t)(h + 1), f);
        if (isnan(lo))
            continue;
        float mid = (float)((lo + (isinf(hi) ? lo + (lo - ref_decode((uint16_t)(h - 1), f))
                                             : hi)) / 2);
        float v[] = {(float)lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (size_t k = 0; k < 4; k++) {
            out[n++] = v[k];
            out[n++] = -v[k];
        }
    }
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4099)
        out[n++] = bitsf((uint32_t)u);
    return n;
}

#define N_PROBES (0x8000 * 8 + (0x100000000ULL / 4099 + 1))

static void check_narrowing(ref_fmt_t f, uint16_t (*scalar)(float),
                            void (*bulk)(uint16_t *, const float *, size_t), const char *what)
{
    float *in = malloc(N_PROBES * sizeof(*in));
    uint16_t *got = malloc(N_PROBES * sizeof(*got));
    size_t n = rounding_probes(in, f);

    cr_assert(in != NULL && got != NULL && n <= N_PROBES);
    for (size_t i = 0; i < n; i++) {
        uint16_t s = scalar(in[i]), want;
        uint32_t b = fbits(in[i]);
        if (isnan(in[i]))
            want = (uint16_t)(((b >> 16) & 0x8000u) | (ref_emask(f) << f.mbits) |
                              (1u << (f.mbits - 1)) | ((b & 0x7FFFFFu) >> (23 - f.mbits)));
        else
            want = ref_encode(in[i], f);
        cr_assert_eq(s, want, "%s: float %08x (%a) -> %04x, want %04x", what, b,
                     (double)in[i], s, want);
    }
    for (size_t k = 0; k < N_ISAS; k++) {
        if (f.mbits == 10 && chorus__reduce_force_isa(isas[k]) != CHORUS_OK)
            continue;
        bulk(got, in, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(got[i], scalar(in[i]), "%s %s: bulk narrowing of %08x differs",
                         what, isas[k], fbits(in[i]));
        if (f.mbits != 10)
            break;
    }
    chorus__reduce_force_isa(NULL);
    free(got);
    free(in);
}

Test(convert, half_rounding)
{
    check_narrowing(fmt_f16, chorus__float_to_half, chorus__float_to_half_n, "float16");
}

Test(convert, bf16_rounding)
{
    check_narrowing(fmt_bf16, chorus__float_to_bf16, chorus__float_to_bf16_n, "bfloat16");
}

/* Hand-picked cases, so the rules do not rest on the reference code alone. */
Test(convert, half_known_values)
{
    cr_expect_eq(chorus__float_to_half(1.0f), 0x3C00);
    cr_expect_eq(chorus__float_to_half(1.0f + 0x1p-11f), 0x3C00);     /* tie -> even */
    cr_expect_eq(chorus__float_to_half(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie -> even */
    cr_expect_eq(chorus__float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    cr_expect_eq(chorus__float_to_half(2049.0f), 0x6800);
    cr_expect_eq(chorus__float_to_half(2051.0f), 0x6802);
    cr_expect_eq(chorus__float_to_half(65504.0f), 0x7BFF);
    cr_expect_eq(chorus__float_to_half(65519.99f), 0x7BFF);
    cr_expect_eq(chorus__float_to_half(65520.0f), 0x7C00); /* overflow by rounding */
    cr_expect_eq(chorus__float_to_half(-65520.0f), 0xFC00);
    cr_expect_eq(chorus__float_to_half(1e6f), 0x7C00);
    cr_expect_eq(chorus__float_to_half(FLT_MAX), 0x7C00);
    cr_expect_eq(chorus__float_to_half(INFINITY), 0x7C00);
    cr_expect_eq(chorus__float_to_half(-INFINITY), 0xFC00);
    cr_expect_eq(chorus__float_to_half(-0.0f), 0x8000);
    cr_expect_eq(chorus__float_to_half(0x1p-24f), 0x0001);      /* smallest subnormal */
    cr_expect_eq(chorus__float_to_half(0x1p-25f), 0x0000);      /* tie -> even (0) */
    cr_expect_eq(chorus__float_to_half(-0x1p-25f), 0x8000);
    cr_expect_eq(chorus__float_to_half(0x1.000002p-25f), 0x0001);
    cr_expect_eq(chorus__float_to_half(3 * 0x1p-25f), 0x0002);  /* tie -> even (2) */
    cr_expect_eq(chorus__float_to_half(0x1p-14f - 0x1p-25f), 0x0400);
    cr_expect_eq(chorus__float_to_half(0x1p-14f), 0x0400);      /* smallest normal */
    cr_expect_eq(chorus__float_to_half(FLT_TRUE_MIN), 0x0000);
    cr_expect_eq(chorus__float_to_half(bitsf(0x7F800001u)), 0x7E00); /* snan quieted */
    cr_expect_eq(chorus__float_to_half(bitsf(0xFFC02000u)), 0xFE01);
    cr_expect_eq(fbits(chorus__half_to_float(0x0001)), fbits(0x1p-24f));
    cr_expect_eq(fbits(chorus__half_to_float(0x03FF)), fbits(0x3FFp-24f));
    cr_expect_eq(fbits(chorus__half_to_float(0x7BFF)), fbits(65504.0f));
    cr_expect_eq(fbits(chorus__half_to_float(0xFC00)), fbits(-INFINITY));
    cr_expect_eq(fbits(chorus__half_to_float(0x7C01)), 0x7FC02000u);
}

Test(convert, bf16_known_values)
{
    cr_expect_eq(chorus__float_to_bf16(1.0f), 0x3F80);
    cr_expect_eq(chorus__float_to_bf16(1.0f + 0x1p-8f), 0x3F80);     /* tie -> even */
    cr_expect_eq(chorus__float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82); /* tie -> even */
    cr_expect_eq(chorus__float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    cr_expect_eq(chorus__float_to_bf16(FLT_MAX), 0x7F80);            /* rounds to inf */
    cr_expect_eq(chorus__float_to_bf16(0x1.fep127f), 0x7F7F);
    cr_expect_eq(chorus__float_to_bf16(-INFINITY), 0xFF80);
    cr_expect_eq(chorus__float_to_bf16(-0.0f), 0x8000);
    cr_expect_eq(chorus__float_to_bf16(0x1p-133f), 0x0001);          /* subnormal */
    cr_expect_eq(chorus__float_to_bf16(0x1p-134f), 0x0000);          /* tie -> even */
    cr_expect_eq(chorus__float_to_bf16(bitsf(0x7F800001u)), 0x7FC0);
    cr_expect_eq(chorus__float_to_bf16(bitsf(0xFFFFFFFFu)), 0xFFFF);
    cr_expect_eq(fbits(chorus__bf16_to_float(0x0001)), fbits(0x1p-133f));
    cr_expect_eq(fbits(chorus__bf16_to_float(0x7F81)), 0x7FC10000u); /* quieted */
}

/* ---- kernels against the reference ------------------------------------- */

static int is_int(chorus_dtype_t d)
{
    return d <= CHORUS_UINT64;
}

static int is_signed(chorus_dtype_t d)
{
    return d == CHORUS_INT8 || d == CHORUS_INT32 || d == CHORUS_INT64;
}

static uint64_t load_elem(const void *p, size_t size)
{
    uint8_t b[8] = {0};
    uint64_t v = 0;

    memcpy(b, p, size);
    for (size_t i = 0; i < size; i++)
        v |= (uint64_t)b[i] << (8 * i); /* x86 and arm64 are little endian */
    return v;
}

static void store_elem(void *p, size_t size, uint64_t v)
{
    for (size_t i = 0; i < size; i++)
        ((uint8_t *)p)[i] = (uint8_t)(v >> (8 * i));
}

static int64_t sign_extend(uint64_t v, size_t size)
{
    unsigned sh = (unsigned)(64 - 8 * size);
    return sh ? (int64_t)(v << sh) >> sh : (int64_t)v;
}

static uint64_t ref_int_op(chorus_dtype_t d, chorus_op_t op, uint64_t a, uint64_t b)
{
    size_t size = chorus_dtype_size(d);
    int64_t sa = sign_extend(a, size), sb = sign_extend(b, size);
    int a_less = is_signed(d) ? sa < sb : a < b;

    switch (op) {
    case CHORUS_SUM:
    case CHORUS_AVG:
        return a + b; /* store_elem keeps the low bits: wrap modulo 2^n */
    case CHORUS_PROD:
        return a * b;
    case CHORUS_MIN:
        return a_less ? a : b;
    default:
        return a_less ? b : a;
    }
}

/* min/max on values: NaN wins, -0 is below +0. */
static long double ref_flt_op(chorus_op_t op, long double x, long double y)
{
    if (op == CHORUS_SUM || op == CHORUS_AVG)
        return x + y;
    if (op == CHORUS_PROD)
        return x * y;
    if (isnan(x) || isnan(y))
        return NAN;
    if (x != y)
        return (op == CHORUS_MIN) == (x < y) ? x : y;
    if (x != 0)
        return x;
    if (op == CHORUS_MIN)
        return (signbit(x) || signbit(y)) ? -0.0L : 0.0L;
    return (signbit(x) && signbit(y)) ? -0.0L : 0.0L;
}

static long double decode(chorus_dtype_t d, uint64_t v)
{
    switch (d) {
    case CHORUS_FLOAT16:
        return ref_decode((uint16_t)v, fmt_f16);
    case CHORUS_BFLOAT16:
        return ref_decode((uint16_t)v, fmt_bf16);
    case CHORUS_FLOAT32:
        return bitsf((uint32_t)v);
    default: {
        double x;
        memcpy(&x, &v, 8);
        return x;
    }
    }
}

static uint64_t encode(chorus_dtype_t d, long double v)
{
    switch (d) {
    case CHORUS_FLOAT16:
        return ref_encode(v, fmt_f16);
    case CHORUS_BFLOAT16:
        return ref_encode(v, fmt_bf16);
    case CHORUS_FLOAT32:
        return fbits((float)v);
    default: {
        double x = (double)v;
        uint64_t u;
        memcpy(&u, &x, 8);
        return u;
    }
    }
}

static uint64_t ref_op(chorus_dtype_t d, chorus_op_t op, uint64_t a, uint64_t b)
{
    if (is_int(d))
        return ref_int_op(d, op, a, b);
    if (d == CHORUS_FLOAT64 && op != CHORUS_MIN && op != CHORUS_MAX) {
        /* Plain double: long double would round twice. */
        double x = (double)decode(d, a), y = (double)decode(d, b);
        return encode(d, op == CHORUS_PROD ? x * y : x + y);
    }
    return encode(d, ref_flt_op(op, decode(d, a), decode(d, b)));
}

/* NaN of the dtype with the quiet bit set; any payload. */
static int is_quiet_nan(chorus_dtype_t d, uint64_t v)
{
    switch (d) {
    case CHORUS_FLOAT16:
        return ref_is_nan16((uint16_t)v, fmt_f16) && (v & 0x200);
    case CHORUS_BFLOAT16:
        return ref_is_nan16((uint16_t)v, fmt_bf16) && (v & 0x40);
    case CHORUS_FLOAT32:
        return isnan(bitsf((uint32_t)v)) && (v & 0x400000);
    default:
        return isnan(decode(d, v)) && (v >> 51 & 1);
    }
}

static uint64_t random_elem(chorus_dtype_t d, uint64_t *rng)
{
    static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0,
                                      65504.0, 1e-7, 3.4e38, -1e300};
    uint64_t r = rng_next(rng), pick = r % 16;

    if (is_int(d) || d == CHORUS_FLOAT16 || d == CHORUS_BFLOAT16) {
        /* Raw bits cover every class; a few fixed values add exact ties. */
        if (pick == 0)
            return is_int(d) ? (uint64_t)1 << (8 * chorus_dtype_size(d) - 1) : 0x8000;
        return rng_next(rng);
    }
    if (pick < 2)
        return encode(d, specials[rng_next(rng) % (sizeof(specials) / sizeof(specials[0]))]);
    if (pick < 8)
        return encode(d, (double)(int64_t)(rng_next(rng) % 2001) / 8 - 125); /* ties, zeros */
    return rng_next(rng); /* raw bits: huge, tiny, subnormal, NaN payloads */
}

typedef struct {
    chorus_dtype_t dtype;
    chorus_op_t op;
} kernel_case_t;

ParameterizedTestParameters(kernel, matches_reference)
{
    static kernel_case_t cases[CHORUS_DTYPE_COUNT * CHORUS_OP_COUNT];
    size_t n = 0;

    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)
        for (int op = 0; op < CHORUS_OP_COUNT; op++)
            cases[n++] = (kernel_case_t){(chorus_dtype_t)d, (chorus_op_t)op};
    return cr_make_param_array(kernel_case_t, cases, n);
}

enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL, ALIAS_COUNT };
static const char *const alias_names[] = {"out-of-place", "dst==a", "dst==b", "dst==a==b"};

/* Compares dst with the reference of a op b; returns the first wrong index or -1. */
static long check_result(kernel_case_t c, const uint8_t *a, const uint8_t *b,
                         const uint8_t *dst, size_t count, char *msg)
{
    size_t size = chorus_dtype_size(c.dtype);

    for (size_t i = 0; i < count; i++) {
        uint64_t x = load_elem(a + i * size, size), y = load_elem(b + i * size, size);
        uint64_t want = ref_op(c.dtype, c.op, x, y), got = load_elem(dst + i * size, size);
        if (size < 8)
            want &= ((uint64_t)1 << (8 * size)) - 1;
        int ok = is_int(c.dtype) || !isnan(decode(c.dtype, want)) ? got == want
                                                                    : is_quiet_nan(c.dtype, got);
        if (!ok) {
            snprintf(msg, 256, "a=%#llx b=%#llx got %#llx want %#llx", (unsigned long long)x,
                     (unsigned long long)y, (unsigned long long)got,
                     (unsigned long long)want);
            return (long)i;
        }
    }
    return -1;
}

/* Runs one case; returns the index of the first wrong element or -1. */
static long run_case(kernel_case_t c, size_t count, int alias, uint64_t seed, char *msg)
{
    size_t size = chorus_dtype_size(c.dtype), bytes = (count + 1) * size;
    uint8_t *a = malloc(bytes), *b = malloc(bytes), *dst = malloc(bytes), *b0 = malloc(bytes);
    long bad = -1;

    cr_assert(a && b && dst && b0);
    for (size_t i = 0; i <= count; i++) {
        store_elem(a + i * size, size, random_elem(c.dtype, &seed));
        store_elem(b + i * size, size, alias == ALIAS_ALL ? load_elem(a + i * size, size)
                                                          : random_elem(c.dtype, &seed));
        store_elem(dst + i * size, size, 0x5A5A5A5A5A5A5A5AULL);
    }
    memcpy(b0, b, bytes);
    if (alias == ALIAS_DST_A || alias == ALIAS_ALL)
        memcpy(dst, a, bytes);
    if (alias == ALIAS_DST_B)
        memcpy(dst, b, bytes);
    cr_assert_eq(chorus__reduce(c.dtype, c.op, dst,
                                alias == ALIAS_DST_A || alias == ALIAS_ALL ? dst : a,
                                alias == ALIAS_DST_B || alias == ALIAS_ALL ? dst : b, count),
                 CHORUS_OK);
    bad = check_result(c, a, b, dst, count, msg);
    /* The element past the end is untouched, and so is b when it is not dst. */
    if (bad < 0 && alias != ALIAS_DST_B && alias != ALIAS_ALL && memcmp(b, b0, bytes) != 0) {
        bad = (long)count;
        snprintf(msg, 256, "input b was modified");
    }
    if (bad < 0 && alias == ALIAS_NONE &&
        load_elem(dst + count * size, size) != (0x5A5A5A5A5A5A5A5AULL >> (64 - 8 * size))) {
        bad = (long)count;
        snprintf(msg, 256, "wrote past the end");
    }
    free(a);
    free(b);
    free(dst);
    free(b0);
    return bad;
}

ParameterizedTest(kernel_case_t *c, kernel, matches_reference)
{
    static const size_t counts[] = {0, 1, 7, 33, 1023, 4099};
    char msg[256];

    for (size_t k = 0; k < N_ISAS; k++) {
        if (chorus__reduce_force_isa(isas[k]) != CHORUS_OK)
            continue;
        for (size_t n = 0; n < sizeof(counts) / sizeof(counts[0]); n++) {
            for (int alias = 0; alias < ALIAS_COUNT; alias++) {
                uint64_t seed = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)c->dtype << 40) ^
                                ((uint64_t)c->op << 32) ^ (counts[n] << 4) ^ (uint64_t)alias;
                long bad = run_case(*c, counts[n], alias, seed, msg);
                cr_assert(bad < 0, "%s %s isa=%s count=%zu %s: element %ld: %s",
                          chorus_dtype_name(c->dtype), chorus_op_name(c->op), isas[k],
                          counts[n], alias_names[alias], bad, msg);
            }
        }
        /* Only float16 has paths of its own; the other dtypes need one pass. */
        if (c->dtype != CHORUS_FLOAT16)
            break;
    }
    chorus__reduce_force_isa(NULL);
}

/* ---- finalize ------------------------------------------------------------ */

Test(finalize, avg_integers_truncate_toward_zero)
{
    int8_t i8[] = {-7, 7, -128, 127, 5, -1, 0};
    int32_t i32[] = {-7, 7, INT32_MIN, INT32_MAX, -2, 2};
    int64_t i64[] = {-7, 7, INT64_MIN, INT64_MAX, -3, 3};
    uint8_t u8[] = {255, 7, 1};
    uint64_t u64[] = {UINT64_MAX, 7, 2};

    chorus__reduce_finalize(CHORUS_INT8, CHORUS_AVG, i8, 7, 2);
    cr_expect(i8[0] == -3 && i8[1] == 3 && i8[2] == -64 && i8[3] == 63 && i8[4] == 2 &&
              i8[5] == 0 && i8[6] == 0);
    chorus__reduce_finalize(CHORUS_INT32, CHORUS_AVG, i32, 6, 3);
    cr_expect(i32[0] == -2 && i32[1] == 2 && i32[2] == -715827882 &&
              i32[3] == 715827882 && i32[4] == 0 && i32[5] == 0);
    chorus__reduce_finalize(CHORUS_INT64, CHORUS_AVG, i64, 6, 3);
    cr_expect(i64[0] == -2 && i64[1] == 2 && i64[2] == -3074457345618258602LL &&
              i64[3] == 3074457345618258602LL && i64[4] == -1 && i64[5] == 1);
    chorus__reduce_finalize(CHORUS_UINT8, CHORUS_AVG, u8, 3, 200);
    cr_expect(u8[0] == 1 && u8[1] == 0 && u8[2] == 0);
    chorus__reduce_finalize(CHORUS_UINT64, CHORUS_AVG, u64, 3, 2);
    cr_expect(u64[0] == UINT64_MAX / 2 && u64[1] == 3 && u64[2] == 1);
}

Test(finalize, avg_int8_with_more_ranks_than_int8_holds)
{
    int8_t v[] = {-128, 127, -100};

    chorus__reduce_finalize(CHORUS_INT8, CHORUS_AVG, v, 3, 1000);
    cr_expect(v[0] == 0 && v[1] == 0 && v[2] == 0);
    v[0] = -128;
    chorus__reduce_finalize(CHORUS_INT8, CHORUS_AVG, v, 1, 100);
    cr_expect_eq(v[0], -1);
}

Test(finalize, avg_floats)
{
    float f[] = {1.0f, -3.0f, INFINITY, -0.0f, 1e-45f};
    double g[] = {1.0, -3.0, NAN, 0.1};

    chorus__reduce_finalize(CHORUS_FLOAT32, CHORUS_AVG, f, 5, 3);
    cr_expect(f[0] == 1.0f / 3.0f && f[1] == -1.0f && f[2] == INFINITY);
    cr_expect(f[3] == 0.0f && signbit(f[3]) && f[4] == 0.0f);
    chorus__reduce_finalize(CHORUS_FLOAT64, CHORUS_AVG, g, 4, 3);
    cr_expect(g[0] == 1.0 / 3.0 && g[1] == -1.0 && isnan(g[2]) && g[3] == 0.1 / 3.0);
}

/* float16/bfloat16: divided in float32 and rounded once, which is the correctly
 * rounded quotient, so the reference divides in long double. */
Test(finalize, avg_half_and_bf16_all_values)
{
    static uint16_t buf[65536];
    static const int ranks[] = {1, 3, 7, 1000};

    for (size_t k = 0; k < N_ISAS * 2; k++) {
        chorus_dtype_t d = k < N_ISAS ? CHORUS_FLOAT16 : CHORUS_BFLOAT16;
        ref_fmt_t f = d == CHORUS_FLOAT16 ? fmt_f16 : fmt_bf16;
        if (d == CHORUS_FLOAT16 && chorus__reduce_force_isa(isas[k]) != CHORUS_OK)
            continue;
        for (size_t r = 0; r < sizeof(ranks) / sizeof(ranks[0]); r++) {
            for (uint32_t h = 0; h < 65536; h++)
                buf[h] = (uint16_t)h;
            chorus__reduce_finalize(d, CHORUS_AVG, buf, 65536, ranks[r]);
            for (uint32_t h = 0; h < 65536; h++) {
                if (ref_is_nan16((uint16_t)h, f)) {
                    cr_assert(ref_is_nan16(buf[h], f), "%s nan %04x lost", chorus_dtype_name(d), h);
                    continue;
                }
                uint16_t want = ref_encode(ref_decode((uint16_t)h, f) / ranks[r], f);
                cr_assert_eq(buf[h], want, "%s %04x / %d = %04x, want %04x",
                             chorus_dtype_name(d), h, ranks[r], buf[h], want);
            }
        }
    }
    chorus__reduce_force_isa(NULL);
}

Test(finalize, only_avg_and_valid_ranks)
{
    int32_t v[] = {10, -10};
    float f = 6.0f;

    for (int op = 0; op < CHORUS_OP_COUNT; op++)
        if (op != CHORUS_AVG)
            chorus__reduce_finalize(CHORUS_INT32, (chorus_op_t)op, v, 2, 2);
    cr_expect(v[0] == 10 && v[1] == -10);
    chorus__reduce_finalize(CHORUS_INT32, CHORUS_AVG, v, 2, 0);
    chorus__reduce_finalize(CHORUS_INT32, CHORUS_AVG, v, 2, -2);
    chorus__reduce_finalize(CHORUS_DTYPE_COUNT, CHORUS_AVG, v, 2, 2);
    cr_expect(v[0] == 10 && v[1] == -10);
    chorus__reduce_finalize(CHORUS_FLOAT32, CHORUS_AVG, &f, 0, 2);
    cr_expect_eq(f, 6.0f);
    chorus__reduce_finalize(CHORUS_FLOAT32, CHORUS_AVG, &f, 1, 4);
    cr_expect_eq(f, 1.5f);
}

/* Every pair of special values, for every float dtype and op (random inputs
 * rarely meet a +0/-0 pair or two infinities). */
Test(kernel, float_special_pairs)
{
    static const chorus_dtype_t dts[] = {CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32,
                                         CHORUS_FLOAT64};
    /* Per dtype: signaling NaN, smallest subnormal, smallest normal, largest finite. */
    static const uint64_t raw[][4] = {
        {0x7C01, 0x0001, 0x0400, 0x7BFF},
        {0x7F81, 0x0001, 0x0080, 0x7F7F},
        {0x7F800001, 0x00000001, 0x00800000, 0x7F7FFFFF},
        {0x7FF0000000000001ULL, 1, 0x0010000000000000ULL, 0x7FEFFFFFFFFFFFFFULL},
    };
    static const long double values[] = {0.0L, INFINITY, NAN, 1.0L, 0.5L, 3.0L,
                                         1.0009765625L, 1024.5L};
    enum { NV = sizeof(values) / sizeof(values[0]) + 4, NB = 2 * NV };
    uint8_t a[NB * NB * 8], b[NB * NB * 8], dst[NB * NB * 8];
    uint64_t base[NB];
    char msg[256];

    for (size_t t = 0; t < sizeof(dts) / sizeof(dts[0]); t++) {
        kernel_case_t c = {dts[t], CHORUS_SUM};
        size_t size = chorus_dtype_size(c.dtype), n = NB * NB;
        for (size_t v = 0; v < NV; v++) {
            base[v] = v < 4 ? raw[t][v] : encode(c.dtype, values[v - 4]);
            base[NV + v] = base[v] | (uint64_t)1 << (8 * size - 1); /* negated */
        }
        for (size_t i = 0; i < n; i++) {
            store_elem(a + i * size, size, base[i / NB]);
            store_elem(b + i * size, size, base[i % NB]);
        }
        for (size_t k = 0; k < N_ISAS; k++) {
            if (c.dtype == CHORUS_FLOAT16 && chorus__reduce_force_isa(isas[k]) != CHORUS_OK)
                continue;
            for (int op = 0; op < CHORUS_OP_COUNT; op++) {
                c.op = (chorus_op_t)op;
                chorus__reduce(c.dtype, c.op, dst, a, b, n);
                long bad = check_result(c, a, b, dst, n, msg);
                cr_expect(bad < 0, "%s %s isa=%s: %s", chorus_dtype_name(c.dtype),
                          chorus_op_name(c.op), isas[k], msg);
            }
            if (c.dtype != CHORUS_FLOAT16)
                break;
        }
    }
    chorus__reduce_force_isa(NULL);
}
