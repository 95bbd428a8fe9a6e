/*
 * mpi_colls: an unmodified MPI program (MPI and the C library only) that runs
 * a fixed series of collectives on several communicators, checks every result
 * exactly and prints one hash per test, so that a native run and a run under
 * an interposer that serves MPI collectives with chorus can be compared with
 * diff.
 *
 * Every input is a small integer computed from (rank, index, test), so each
 * rank knows every rank's inputs, and every sum, product, minimum and maximum
 * is exact in every type and in any order of reduction (up to 42 ranks, where
 * int8 and int16 sums would start to overflow).
 *
 * Besides what an interposer may serve, it calls types and ops that it must
 * pass through to MPI: short, int16, long double, bitwise and/or, MAXLOC on
 * MPI_2INT, user ops (one of them not commutative) and derived types, one of
 * them with gaps that must stay untouched.
 *
 * Output, from world rank 0 on stdout: "<test> <hash>" per test, where hash is
 * a 64-bit FNV-1a over every rank's FNV-1a of its result values, in the rank
 * order of the test's communicator; then "mpi_colls: N tests, M mismatches".
 * Each wrong value is reported on stderr as
 * "MISMATCH <test> rank <world rank> index <i> got <x> want <y>".
 * Exit status 0 only when no rank saw a mismatch.
 *
 *   mpicc -std=c11 -O2 -o mpi_colls mpi_colls.c && mpirun -np 4 ./mpi_colls
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define NAME_LEN 128
#define MAX_TESTS 400
#define MAX_GROUP 12
/* Mismatch lines printed per test and rank; the rest are only counted. */
#define MAX_REPORTED 8
/* Untouched bytes: unwritten results and the gaps of derived types. */
#define SENTINEL 0xA5
#define RING_TAG 77
#define RING_COUNT 1001

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

/* ---- types ---------------------------------------------------------------- */

/* The C type that holds one basic value. */
typedef enum {
    C_INT8, C_UINT8, C_INT16, C_INT32, C_UINT32, C_INT64, C_UINT64, C_INT, C_UNSIGNED,
    C_LONG, C_ULONG, C_LLONG, C_SCHAR, C_UCHAR, C_SHORT, C_FLOAT, C_DOUBLE, C_LDOUBLE
} ctype_t;

/* Indexes into g_types: first those an interposer may serve, then pass-through. */
enum {
    T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_INT, T_UNSIGNED, T_LONG,
    T_ULONG, T_LLONG, T_SCHAR, T_UCHAR, T_FLOAT, T_DOUBLE,
    N_SERVED,
    T_SHORT = N_SERVED, T_INT16, T_LDOUBLE, T_CONTIG3, T_VECTOR,
    N_TYPES
};

typedef struct {
    const char *name;
    MPI_Datatype mpi;
    ctype_t c;
    int is_signed;
    long long scale;           /* inputs are small integers times this power of two */
    int per_elem;              /* basic values in one MPI element */
    int extent;                /* one MPI element's extent, in basic values */
    int offsets[4];            /* where those values sit within an element */
} type_info_t;

static type_info_t g_types[N_TYPES];

#define TY(index) (&g_types[index])

static size_t c_size(ctype_t c)
{
    switch (c) {
    case C_INT8: case C_UINT8: case C_SCHAR: case C_UCHAR: return 1;
    case C_INT16: case C_SHORT: return sizeof(short);
    case C_INT32: case C_UINT32: return 4;
    case C_INT: case C_UNSIGNED: return sizeof(int);
    case C_INT64: case C_UINT64: return 8;
    case C_LONG: case C_ULONG: return sizeof(long);
    case C_LLONG: return sizeof(long long);
    case C_FLOAT: return sizeof(float);
    case C_DOUBLE: return sizeof(double);
    case C_LDOUBLE: return sizeof(long double);
    }
    return 0;
}

static void store(ctype_t c, void *p, long long v)
{
    switch (c) {
    case C_INT8: *(int8_t *)p = (int8_t)v; break;
    case C_UINT8: *(uint8_t *)p = (uint8_t)v; break;
    case C_INT16: *(int16_t *)p = (int16_t)v; break;
    case C_INT32: *(int32_t *)p = (int32_t)v; break;
    case C_UINT32: *(uint32_t *)p = (uint32_t)v; break;
    case C_INT64: *(int64_t *)p = (int64_t)v; break;
    case C_UINT64: *(uint64_t *)p = (uint64_t)v; break;
    case C_INT: *(int *)p = (int)v; break;
    case C_UNSIGNED: *(unsigned *)p = (unsigned)v; break;
    case C_LONG: *(long *)p = (long)v; break;
    case C_ULONG: *(unsigned long *)p = (unsigned long)v; break;
    case C_LLONG: *(long long *)p = v; break;
    case C_SCHAR: *(signed char *)p = (signed char)v; break;
    case C_UCHAR: *(unsigned char *)p = (unsigned char)v; break;
    case C_SHORT: *(short *)p = (short)v; break;
    case C_FLOAT: *(float *)p = (float)v; break;
    case C_DOUBLE: *(double *)p = (double)v; break;
    case C_LDOUBLE: *(long double *)p = (long double)v; break;
    }
}

/* long double holds every value of every type here exactly. */
static long double load(ctype_t c, const void *p)
{
    switch (c) {
    case C_INT8: return *(const int8_t *)p;
    case C_UINT8: return *(const uint8_t *)p;
    case C_INT16: return *(const int16_t *)p;
    case C_INT32: return *(const int32_t *)p;
    case C_UINT32: return *(const uint32_t *)p;
    case C_INT64: return (long double)*(const int64_t *)p;
    case C_UINT64: return (long double)*(const uint64_t *)p;
    case C_INT: return *(const int *)p;
    case C_UNSIGNED: return *(const unsigned *)p;
    case C_LONG: return (long double)*(const long *)p;
    case C_ULONG: return (long double)*(const unsigned long *)p;
    case C_LLONG: return (long double)*(const long long *)p;
    case C_SCHAR: return *(const signed char *)p;
    case C_UCHAR: return *(const unsigned char *)p;
    case C_SHORT: return *(const short *)p;
    case C_FLOAT: return *(const float *)p;
    case C_DOUBLE: return *(const double *)p;
    case C_LDOUBLE: return *(const long double *)p;
    }
    return 0;
}

static type_info_t basic_type(const char *name, MPI_Datatype mpi, ctype_t c)
{
    type_info_t t = {.name = name, .mpi = mpi, .c = c, .per_elem = 1, .extent = 1};
    size_t size = c_size(c);

    t.is_signed = c != C_UINT8 && c != C_UINT32 && c != C_UINT64 && c != C_UNSIGNED &&
                  c != C_ULONG && c != C_UCHAR;
    /* Powers of two keep floats exact and put inputs in the high bytes too. */
    if (c == C_FLOAT)
        t.scale = 1ll << 20;
    else if (c == C_DOUBLE || c == C_LDOUBLE)
        t.scale = 1ll << 40;
    else
        t.scale = size == 1 ? 1 : size == 2 ? 1ll << 8 : size == 4 ? 1ll << 20 : 1ll << 40;
    return t;
}

/* A derived type of ints: per_elem ints at offsets within an extent of ints. */
static type_info_t int_derived_type(const char *name, MPI_Datatype mpi, int per_elem,
                                    int extent, const int *offsets)
{
    type_info_t t = basic_type(name, mpi, C_INT);

    t.per_elem = per_elem;
    t.extent = extent;
    memcpy(t.offsets, offsets, (size_t)per_elem * sizeof(int));
    return t;
}

static void types_init(void)
{
    MPI_Datatype contig3, vector;
    static const int contig3_offsets[] = {0, 1, 2};
    /* vector(2 blocks of 2, stride 3): ints 0 1 _ 3 4, extent 5, int 2 a gap */
    static const int vector_offsets[] = {0, 1, 3, 4};

    MPI_Type_contiguous(3, MPI_INT, &contig3);
    MPI_Type_commit(&contig3);
    MPI_Type_vector(2, 2, 3, MPI_INT, &vector);
    MPI_Type_commit(&vector);
    g_types[T_INT8] = basic_type("int8_t", MPI_INT8_T, C_INT8);
    g_types[T_UINT8] = basic_type("uint8_t", MPI_UINT8_T, C_UINT8);
    g_types[T_INT32] = basic_type("int32_t", MPI_INT32_T, C_INT32);
    g_types[T_UINT32] = basic_type("uint32_t", MPI_UINT32_T, C_UINT32);
    g_types[T_INT64] = basic_type("int64_t", MPI_INT64_T, C_INT64);
    g_types[T_UINT64] = basic_type("uint64_t", MPI_UINT64_T, C_UINT64);
    g_types[T_INT] = basic_type("int", MPI_INT, C_INT);
    g_types[T_UNSIGNED] = basic_type("unsigned", MPI_UNSIGNED, C_UNSIGNED);
    g_types[T_LONG] = basic_type("long", MPI_LONG, C_LONG);
    g_types[T_ULONG] = basic_type("unsigned_long", MPI_UNSIGNED_LONG, C_ULONG);
    g_types[T_LLONG] = basic_type("long_long", MPI_LONG_LONG, C_LLONG);
    g_types[T_SCHAR] = basic_type("signed_char", MPI_SIGNED_CHAR, C_SCHAR);
    g_types[T_UCHAR] = basic_type("unsigned_char", MPI_UNSIGNED_CHAR, C_UCHAR);
    g_types[T_FLOAT] = basic_type("float", MPI_FLOAT, C_FLOAT);
    g_types[T_DOUBLE] = basic_type("double", MPI_DOUBLE, C_DOUBLE);
    g_types[T_SHORT] = basic_type("short", MPI_SHORT, C_SHORT);
    g_types[T_INT16] = basic_type("int16_t", MPI_INT16_T, C_INT16);
    g_types[T_LDOUBLE] = basic_type("long_double", MPI_LONG_DOUBLE, C_LDOUBLE);
    g_types[T_CONTIG3] = int_derived_type("contig3_int", contig3, 3, 3, contig3_offsets);
    g_types[T_VECTOR] = int_derived_type("vector_int", vector, 4, 5, vector_offsets);
}

static void types_free(void)
{
    MPI_Type_free(&g_types[T_CONTIG3].mpi);
    MPI_Type_free(&g_types[T_VECTOR].mpi);
}

static size_t elem_bytes(const type_info_t *t)
{
    return (size_t)t->extent * c_size(t->c);
}

/* Byte offset of basic value j in a buffer of MPI elements of type t. */
static size_t value_offset(const type_info_t *t, size_t j)
{
    size_t elem = j / (size_t)t->per_elem;

    return (elem * (size_t)t->extent + (size_t)t->offsets[j % (size_t)t->per_elem]) *
           c_size(t->c);
}

static void put_value(const type_info_t *t, unsigned char *buf, size_t j, long long v)
{
    store(t->c, buf + value_offset(t, j), v);
}

static long double get_value(const type_info_t *t, const unsigned char *buf, size_t j)
{
    return load(t->c, buf + value_offset(t, j));
}

/* ---- ops ------------------------------------------------------------------ */

typedef enum {
    OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_USER_MAX, OP_USER_FIRST, OP_NONE
} op_kind_t;

static const char *const op_names[] = {"sum", "prod", "min", "max", "band", "bor",
                                       "user_max", "user_first", "none"};

static MPI_Op g_user_max, g_user_first;

/* The user ops take ints or the derived types of ints, whose layout they need. */
static const type_info_t *int_layout_of(MPI_Datatype dt)
{
    static const int candidates[] = {T_INT, T_CONTIG3, T_VECTOR};

    for (int i = 0; i < 3; i++)
        if (g_types[candidates[i]].mpi == dt)
            return &g_types[candidates[i]];
    fprintf(stderr, "mpi_colls: user op called with a datatype it was never given\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
    return NULL;
}

static void user_max_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const type_info_t *t = int_layout_of(*dt);

    for (size_t j = 0; j < (size_t)*len * (size_t)t->per_elem; j++) {
        const int *a = (const int *)((const unsigned char *)in + value_offset(t, j));
        int *b = (int *)((unsigned char *)inout + value_offset(t, j));
        if (*a > *b)
            *b = *a;
    }
}

/* Keeps its left operand: associative, not commutative, so the result is rank 0's. */
static void user_first_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const type_info_t *t = int_layout_of(*dt);

    for (size_t j = 0; j < (size_t)*len * (size_t)t->per_elem; j++)
        memcpy((unsigned char *)inout + value_offset(t, j),
               (const unsigned char *)in + value_offset(t, j), sizeof(int));
}

static MPI_Op mpi_op(op_kind_t op)
{
    switch (op) {
    case OP_SUM: return MPI_SUM;
    case OP_PROD: return MPI_PROD;
    case OP_MIN: return MPI_MIN;
    case OP_MAX: return MPI_MAX;
    case OP_BAND: return MPI_BAND;
    case OP_BOR: return MPI_BOR;
    case OP_USER_MAX: return g_user_max;
    case OP_USER_FIRST: return g_user_first;
    case OP_NONE: break;
    }
    return MPI_OP_NULL;
}

/* ---- inputs and their exact results ---------------------------------------- */

/* Rank src's reduction input at value j: small, so every result is exact. */
static long long reduce_input(const type_info_t *t, op_kind_t op, int src, size_t j, int salt)
{
    unsigned long long mix = (unsigned long long)src * 7u + j * 3u + (unsigned)salt * 13u;

    switch (op) {
    case OP_PROD:
        /* only the first six ranks ever give a 2: |product| <= 64 fits int8 */
        if (src < 6 && mix % 3 == 0)
            return 2;
        return t->is_signed && mix % 5 == 1 ? -1 : 1;
    case OP_BAND:
    case OP_BOR:
        return 0x0f0f ^ (1ll << (mix % 13)) ^ (1ll << ((mix / 13 + (unsigned)src) % 11 + 4));
    default:
        return (t->is_signed ? (long long)(mix % 7) - 3 : (long long)(mix % 4)) * t->scale;
    }
}

static long long reduce_expected(const type_info_t *t, op_kind_t op, int nranks, size_t j,
                                 int salt)
{
    long long acc = reduce_input(t, op, 0, j, salt);

    for (int src = 1; src < nranks; src++) {
        long long v = reduce_input(t, op, src, j, salt);
        switch (op) {
        case OP_SUM: acc += v; break;
        case OP_PROD: acc *= v; break;
        case OP_MIN: acc = v < acc ? v : acc; break;
        case OP_MAX:
        case OP_USER_MAX: acc = v > acc ? v : acc; break;
        case OP_BAND: acc &= v; break;
        case OP_BOR: acc |= v; break;
        case OP_USER_FIRST:
        case OP_NONE: break;
        }
    }
    return acc;
}

/* Data that collectives move: names its source rank and its index. */
static long long data_value(const type_info_t *t, int src, size_t j, int salt)
{
    unsigned long long mix = (unsigned long long)src * 31u + j * 7u + (unsigned)salt * 5u;

    return ((long long)(mix % 97) - (t->is_signed ? 48 : 0)) * t->scale;
}

/* ---- hashing and reporting ------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *bytes, size_t len)
{
    const unsigned char *p = bytes;

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* Hashes values, not bytes: long double's padding bytes are undefined. */
static uint64_t hash_values(const type_info_t *t, const unsigned char *buf, size_t nvals)
{
    uint64_t h = FNV_OFFSET;

    for (size_t j = 0; j < nvals; j++) {
        if (t->c == C_LDOUBLE) {
            long long v = (long long)get_value(t, buf, j);
            h = fnv1a(h, &v, sizeof(v));
        } else
            h = fnv1a(h, buf + value_offset(t, j), c_size(t->c));
    }
    return h;
}

static int g_world_rank;
static long long g_mismatches;

static void mismatch(const char *test, int *reported, size_t index, long double got,
                     long double want)
{
    g_mismatches++;
    if (++*reported <= MAX_REPORTED)
        fprintf(stderr, "MISMATCH %s rank %d index %zu got %.21Lg want %.21Lg\n", test,
                g_world_rank, index, got, want);
    else if (*reported == MAX_REPORTED + 1)
        fprintf(stderr, "MISMATCH %s rank %d: more mismatches not shown\n", test,
                g_world_rank);
}

/* ---- a communicator's series of tests --------------------------------------- */

typedef struct {
    MPI_Comm comm;
    const char *label;
    int rank, size;
    int order;                 /* lowest world rank in comm: sorts the printed lines */
    int salt;                  /* next test's salt, the same sequence on every rank */
    int ntests;
    uint64_t hashes[MAX_TESTS];
    char names[MAX_TESTS][NAME_LEN];
    int freed_send[RING_COUNT];     /* a freed request's send buffer */
} battery_t;

static void record_test(battery_t *b, const char *name, uint64_t hash)
{
    if (b->ntests == MAX_TESTS) {
        fprintf(stderr, "mpi_colls: more than %d tests on one communicator\n", MAX_TESTS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    snprintf(b->names[b->ntests], NAME_LEN, "%s", name);
    b->hashes[b->ntests++] = hash;
}

/* ---- one collective call: prepare, start, check ------------------------------ */

typedef enum {
    COLL_ALLREDUCE, COLL_REDUCE, COLL_BCAST, COLL_ALLGATHER, COLL_REDUCE_SCATTER,
    COLL_ALLTOALL, COLL_BARRIER
} coll_t;

static const char *const coll_names[] = {"allreduce", "reduce", "bcast", "allgather",
                                         "reduce_scatter_block", "alltoall", "barrier"};

typedef enum { ROOT_NONE, ROOT_FIRST, ROOT_MID, ROOT_LAST } root_t;

static const char *const root_names[] = {"", "root0", "root_mid", "root_last"};

typedef struct {
    coll_t coll;
    const type_info_t *t;      /* NULL for barrier */
    op_kind_t op;
    size_t count;              /* MPI elements per call, per block where blocked */
    int root;
    int in_place;
    int salt;
    char name[NAME_LEN];
    unsigned char *send, *recv;
    MPI_Request req;
} coll_case_t;

static coll_case_t make_case(battery_t *b, coll_t coll, int type, op_kind_t op, size_t count,
                             root_t root, int in_place, const char *how)
{
    coll_case_t c = {.coll = coll, .t = coll == COLL_BARRIER ? NULL : TY(type), .op = op,
                     .count = count, .in_place = in_place, .salt = b->salt++,
                     .req = MPI_REQUEST_NULL};
    int len;

    c.root = root == ROOT_MID ? b->size / 2 : root == ROOT_LAST ? b->size - 1 : 0;
    len = snprintf(c.name, NAME_LEN, "%s.%s", b->label, coll_names[coll]);
    if (c.t != NULL)
        len += snprintf(c.name + len, NAME_LEN - (size_t)len, ".%s", c.t->name);
    if (op != OP_NONE)
        len += snprintf(c.name + len, NAME_LEN - (size_t)len, ".%s", op_names[op]);
    if (coll != COLL_BARRIER)
        len += snprintf(c.name + len, NAME_LEN - (size_t)len, ".n%zu", count);
    if (root != ROOT_NONE)
        len += snprintf(c.name + len, NAME_LEN - (size_t)len, ".%s", root_names[root]);
    if (in_place)
        len += snprintf(c.name + len, NAME_LEN - (size_t)len, ".in_place");
    if (how != NULL)
        snprintf(c.name + len, NAME_LEN - (size_t)len, ".%s", how);
    return c;
}

/* Reduce is in place only at its root; the others still send. */
static int in_place_here(const battery_t *b, const coll_case_t *c)
{
    return c->in_place && (c->coll != COLL_REDUCE || b->rank == c->root);
}

static size_t send_elems(const battery_t *b, const coll_case_t *c)
{
    switch (c->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
    case COLL_ALLGATHER: return c->count;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL: return c->count * (size_t)b->size;
    default: return 0;
    }
}

static size_t recv_elems(const battery_t *b, const coll_case_t *c)
{
    switch (c->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
    case COLL_BCAST: return c->count;
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:    /* in place, the whole input comes in recv */
    case COLL_ALLTOALL: return c->count * (size_t)b->size;
    default: return 0;
    }
}

static unsigned char *alloc_sentinel(size_t bytes)
{
    unsigned char *p = malloc(bytes > 0 ? bytes : 1);

    if (p == NULL) {
        fprintf(stderr, "mpi_colls: out of memory for %zu bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, SENTINEL, bytes > 0 ? bytes : 1);
    return p;
}

static void case_prepare(const battery_t *b, coll_case_t *c)
{
    const type_info_t *t = c->t;
    size_t block = t ? c->count * (size_t)t->per_elem : 0;  /* values per block */
    size_t n = (size_t)b->size;
    unsigned char *in;

    c->send = alloc_sentinel(t ? send_elems(b, c) * elem_bytes(t) : 0);
    c->recv = alloc_sentinel(t ? recv_elems(b, c) * elem_bytes(t) : 0);
    in = in_place_here(b, c) ? c->recv : c->send;
    switch (c->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
    case COLL_REDUCE_SCATTER:
        for (size_t j = 0; j < block * (c->coll == COLL_REDUCE_SCATTER ? n : 1); j++)
            put_value(t, in, j, reduce_input(t, c->op, b->rank, j, c->salt));
        break;
    case COLL_BCAST:
        if (b->rank == c->root)
            for (size_t j = 0; j < block; j++)
                put_value(t, c->recv, j, data_value(t, c->root, j, c->salt));
        break;
    case COLL_ALLGATHER:
        /* in place, this rank's block already sits at its place in recv */
        for (size_t j = 0; j < block; j++)
            put_value(t, in, (in == c->recv ? (size_t)b->rank * block : 0) + j,
                      data_value(t, b->rank, j, c->salt));
        break;
    case COLL_ALLTOALL:
        /* value j goes to rank j / block: it names sender and destination */
        for (size_t j = 0; j < block * n; j++)
            put_value(t, in, j, data_value(t, b->rank, j, c->salt));
        break;
    case COLL_BARRIER:
        break;
    }
}

static void case_start(const battery_t *b, coll_case_t *c, int nonblocking)
{
    MPI_Comm comm = b->comm;
    MPI_Datatype dt = c->t ? c->t->mpi : MPI_DATATYPE_NULL;
    MPI_Op op = mpi_op(c->op);
    int count = (int)c->count, in_place = in_place_here(b, c);
    void *sbuf = in_place ? MPI_IN_PLACE : (void *)c->send;
    /* with MPI_IN_PLACE the send count and type are ignored */
    int scount = in_place ? 0 : count;
    MPI_Datatype stype = in_place ? MPI_DATATYPE_NULL : dt;
    MPI_Request *req = &c->req;

    switch (c->coll) {
    case COLL_ALLREDUCE:
        if (nonblocking)
            MPI_Iallreduce(sbuf, c->recv, count, dt, op, comm, req);
        else
            MPI_Allreduce(sbuf, c->recv, count, dt, op, comm);
        break;
    case COLL_REDUCE:
        if (nonblocking)
            MPI_Ireduce(sbuf, c->recv, count, dt, op, c->root, comm, req);
        else
            MPI_Reduce(sbuf, c->recv, count, dt, op, c->root, comm);
        break;
    case COLL_BCAST:
        if (nonblocking)
            MPI_Ibcast(c->recv, count, dt, c->root, comm, req);
        else
            MPI_Bcast(c->recv, count, dt, c->root, comm);
        break;
    case COLL_ALLGATHER:
        if (nonblocking)
            MPI_Iallgather(sbuf, scount, stype, c->recv, count, dt, comm, req);
        else
            MPI_Allgather(sbuf, scount, stype, c->recv, count, dt, comm);
        break;
    case COLL_REDUCE_SCATTER:
        if (nonblocking)
            MPI_Ireduce_scatter_block(sbuf, c->recv, count, dt, op, comm, req);
        else
            MPI_Reduce_scatter_block(sbuf, c->recv, count, dt, op, comm);
        break;
    case COLL_ALLTOALL:
        if (nonblocking)
            MPI_Ialltoall(sbuf, scount, stype, c->recv, count, dt, comm, req);
        else
            MPI_Alltoall(sbuf, scount, stype, c->recv, count, dt, comm);
        break;
    case COLL_BARRIER:
        if (nonblocking)
            MPI_Ibarrier(comm, req);
        else
            MPI_Barrier(comm);
        break;
    }
}

/* The gaps of a derived type's elements [0, nelems) must still hold the sentinel. */
static void check_gaps(const coll_case_t *c, size_t nelems, int *reported)
{
    const type_info_t *t = c->t;
    size_t unit = c_size(t->c);
    unsigned char untouched[sizeof(long double)];
    char gap_name[NAME_LEN + 8];

    if (t->per_elem == t->extent)
        return;
    memset(untouched, SENTINEL, sizeof(untouched));
    snprintf(gap_name, sizeof(gap_name), "%s.gap", c->name);
    for (size_t e = 0; e < nelems; e++) {
        for (int u = 0; u < t->extent; u++) {
            int is_data = 0;
            for (int k = 0; k < t->per_elem; k++)
                is_data |= t->offsets[k] == u;
            /* index: the gap's place in the buffer, in basic values */
            size_t at = e * (size_t)t->extent + (size_t)u;
            if (!is_data && memcmp(c->recv + at * unit, untouched, unit) != 0)
                mismatch(gap_name, reported, at, load(t->c, c->recv + at * unit),
                         load(t->c, untouched));
        }
    }
}

/* Checks the result against its formula, records its hash and frees the buffers. */
static void case_finish(battery_t *b, coll_case_t *c)
{
    const type_info_t *t = c->t;
    size_t block = t ? c->count * (size_t)t->per_elem : 0;
    size_t n = (size_t)b->size, rank = (size_t)b->rank, nvals = 0;
    int reported = 0;
    uint64_t hash = FNV_OFFSET;

    switch (c->coll) {
    case COLL_ALLREDUCE:
    case COLL_BCAST:
    case COLL_REDUCE_SCATTER: nvals = block; break;
    case COLL_REDUCE: nvals = b->rank == c->root ? block : 0; break;
    case COLL_ALLGATHER:
    case COLL_ALLTOALL: nvals = block * n; break;
    case COLL_BARRIER: break;
    }
    for (size_t j = 0; j < nvals; j++) {
        long long want = 0;
        switch (c->coll) {
        case COLL_ALLREDUCE:
        case COLL_REDUCE: want = reduce_expected(t, c->op, b->size, j, c->salt); break;
        case COLL_REDUCE_SCATTER:
            want = reduce_expected(t, c->op, b->size, rank * block + j, c->salt);
            break;
        case COLL_BCAST: want = data_value(t, c->root, j, c->salt); break;
        case COLL_ALLGATHER: want = data_value(t, (int)(j / block), j % block, c->salt); break;
        case COLL_ALLTOALL:
            want = data_value(t, (int)(j / block), rank * block + j % block, c->salt);
            break;
        case COLL_BARRIER: break;
        }
        long double got = get_value(t, c->recv, j);
        if (got != (long double)want)
            mismatch(c->name, &reported, j, got, (long double)want);
    }
    if (t != NULL) {
        check_gaps(c, nvals / (size_t)t->per_elem, &reported);
        hash = hash_values(t, c->recv, nvals);
    }
    record_test(b, c->name, hash);
    free(c->send);
    free(c->recv);
    c->send = c->recv = NULL;
}

/* ---- ways to run and complete calls ---------------------------------------- */

static void run_blocking(battery_t *b, coll_case_t c)
{
    case_prepare(b, &c);
    case_start(b, &c, 0);
    case_finish(b, &c);
}

static void run_wait(battery_t *b, coll_case_t c)
{
    case_prepare(b, &c);
    case_start(b, &c, 1);
    MPI_Wait(&c.req, MPI_STATUS_IGNORE);
    case_finish(b, &c);
}

static void run_test_loop(battery_t *b, coll_case_t c)
{
    int done = 0;

    case_prepare(b, &c);
    case_start(b, &c, 1);
    while (!done)
        MPI_Test(&c.req, &done, MPI_STATUS_IGNORE);
    case_finish(b, &c);
}

/* A point-to-point exchange around the ring, in flight with the collectives. */
typedef struct {
    int sendbuf[RING_COUNT], recvbuf[RING_COUNT];
    int salt;
} ring_t;

static void ring_start(battery_t *b, ring_t *r, MPI_Request reqs[2])
{
    int right = (b->rank + 1) % b->size, left = (b->rank + b->size - 1) % b->size;

    r->salt = b->salt++;
    for (size_t j = 0; j < RING_COUNT; j++) {
        r->sendbuf[j] = (int)data_value(TY(T_INT), b->rank, j, r->salt);
        r->recvbuf[j] = -1;
    }
    MPI_Irecv(r->recvbuf, RING_COUNT, MPI_INT, left, RING_TAG, b->comm, &reqs[0]);
    MPI_Isend(r->sendbuf, RING_COUNT, MPI_INT, right, RING_TAG, b->comm, &reqs[1]);
}

static void ring_finish(battery_t *b, ring_t *r, const char *how)
{
    int left = (b->rank + b->size - 1) % b->size, reported = 0;
    char name[NAME_LEN];

    snprintf(name, sizeof(name), "%s.ring_isend_irecv.int.n%d.%s", b->label, RING_COUNT, how);
    for (size_t j = 0; j < RING_COUNT; j++) {
        long long want = data_value(TY(T_INT), left, j, r->salt);
        if (r->recvbuf[j] != want)
            mismatch(name, &reported, j, r->recvbuf[j], (long double)want);
    }
    record_test(b, name, fnv1a(FNV_OFFSET, r->recvbuf, sizeof(r->recvbuf)));
}

typedef enum { DONE_WAITALL, DONE_WAITANY, DONE_TESTALL, DONE_WAITSOME } completion_t;

/*
 * Starts every case (and the ring exchange, if given), completes them all the
 * given way, then checks them in start order: checking records through the
 * communicator, so every rank must check in the same order whatever order its
 * requests completed in.
 */
static void run_group(battery_t *b, coll_case_t *cases, int ncases, completion_t how,
                      ring_t *ring)
{
    static const char *const how_names[] = {"waitall", "waitany", "testall", "waitsome"};
    MPI_Request reqs[MAX_GROUP + 2];
    /* real statuses: gcc mistakes MPICH's MPI_STATUSES_IGNORE for an empty array */
    MPI_Status statuses[MAX_GROUP + 2];
    int nreqs = 0, done = 0;

    for (int i = 0; i < ncases; i++) {
        case_prepare(b, &cases[i]);
        case_start(b, &cases[i], 1);
        reqs[nreqs++] = cases[i].req;
    }
    if (ring != NULL) {
        ring_start(b, ring, &reqs[nreqs]);
        nreqs += 2;
    }
    switch (how) {
    case DONE_WAITALL:
        MPI_Waitall(nreqs, reqs, statuses);
        break;
    case DONE_WAITANY:
        for (int i = 0; i < nreqs; i++) {
            int index;
            MPI_Waitany(nreqs, reqs, &index, MPI_STATUS_IGNORE);
        }
        break;
    case DONE_TESTALL:
        while (!done)
            MPI_Testall(nreqs, reqs, &done, statuses);
        break;
    case DONE_WAITSOME:
        for (int left = nreqs; left > 0;) {
            int outcount, indices[MAX_GROUP + 2];
            MPI_Waitsome(nreqs, reqs, &outcount, indices, statuses);
            if (outcount == MPI_UNDEFINED)
                break;
            left -= outcount;
        }
        break;
    }
    for (int i = 0; i < ncases; i++)
        case_finish(b, &cases[i]);
    if (ring != NULL)
        ring_finish(b, ring, how_names[how]);
}

/* ---- pass-through: MAXLOC on MPI_2INT --------------------------------------- */

typedef struct {
    int value, loc;
} int_loc_t;

static int_loc_t maxloc_input(int src, size_t j, int salt)
{
    /* few distinct values, so ties are common and the lowest loc must win */
    int_loc_t v = {(int)(((unsigned long long)src * 7u + j * 3u + (unsigned)salt) % 4), src};
    return v;
}

static void run_maxloc(battery_t *b, size_t count, root_t root, int in_place)
{
    coll_case_t c = make_case(b, root == ROOT_NONE ? COLL_ALLREDUCE : COLL_REDUCE, T_INT,
                              OP_NONE, count, root, in_place, NULL);
    int_loc_t *send = malloc((count + 1) * sizeof(int_loc_t));
    int_loc_t *recv = malloc((count + 1) * sizeof(int_loc_t));
    int is_root = root == ROOT_NONE || b->rank == c.root, reported = 0;
    char name[NAME_LEN];

    /* the generic name says int and no op: this one is MPI_2INT with MPI_MAXLOC */
    snprintf(name, sizeof(name), "%s.%s.2int.maxloc.n%zu%s%s%s", b->label,
             coll_names[c.coll], count, root == ROOT_NONE ? "" : ".",
             root_names[root], in_place ? ".in_place" : "");
    for (size_t j = 0; j < count; j++) {
        send[j] = maxloc_input(b->rank, j, c.salt);
        recv[j] = in_place ? send[j] : (int_loc_t){-1, -1};
    }
    void *sbuf = in_place && is_root ? MPI_IN_PLACE : (void *)send;
    if (root == ROOT_NONE)
        MPI_Allreduce(sbuf, recv, (int)count, MPI_2INT, MPI_MAXLOC, b->comm);
    else
        MPI_Reduce(sbuf, recv, (int)count, MPI_2INT, MPI_MAXLOC, c.root, b->comm);
    for (size_t j = 0; is_root && j < count; j++) {
        int_loc_t want = maxloc_input(0, j, c.salt);
        for (int src = 1; src < b->size; src++) {
            int_loc_t v = maxloc_input(src, j, c.salt);
            if (v.value > want.value)
                want = v;
        }
        if (recv[j].value != want.value)
            mismatch(name, &reported, j, recv[j].value, want.value);
        if (recv[j].loc != want.loc)
            mismatch(name, &reported, j, recv[j].loc, want.loc);
    }
    record_test(b, name, fnv1a(FNV_OFFSET, recv, is_root ? count * sizeof(int_loc_t) : 0));
    free(send);
    free(recv);
}

/* ---- the series --------------------------------------------------------------- */

/* Rank and size as the constructor promised them (-1: no promise). */
static void check_layout(battery_t *b, int want_rank, int want_size)
{
    char name[NAME_LEN];
    int reported = 0, layout[3] = {b->rank, b->size, g_world_rank};

    snprintf(name, sizeof(name), "%s.layout", b->label);
    if (want_rank >= 0 && b->rank != want_rank)
        mismatch(name, &reported, 0, b->rank, want_rank);
    if (want_size >= 0 && b->size != want_size)
        mismatch(name, &reported, 1, b->size, want_size);
    record_test(b, name, fnv1a(FNV_OFFSET, layout, sizeof(layout)));
}

static void run_blocking_series(battery_t *b)
{
    static const size_t counts[] = {1, 7, 1001};

    /* every servable type with every op; counts and in place vary along */
    for (int ti = 0; ti < N_SERVED; ti++)
        for (int op = OP_SUM; op <= OP_MAX; op++)
            run_blocking(b, make_case(b, COLL_ALLREDUCE, ti, (op_kind_t)op,
                                      counts[(ti + op) % 3], ROOT_NONE, (ti + op) % 2, NULL));
    for (int ti = 0; ti < N_SERVED; ti++) {
        run_blocking(b, make_case(b, COLL_REDUCE, ti, (op_kind_t)(ti % 4), counts[ti % 3],
                                  ROOT_LAST, 0, NULL));
        run_blocking(b, make_case(b, COLL_REDUCE, ti, (op_kind_t)((ti + 1) % 4),
                                  counts[(ti + 1) % 3], ROOT_FIRST, ti % 2, NULL));
        run_blocking(b, make_case(b, COLL_BCAST, ti, OP_NONE, counts[(ti + 2) % 3], ROOT_MID,
                                  0, NULL));
        run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, ti, (op_kind_t)((ti + 2) % 4),
                                  counts[ti % 3], ROOT_NONE, ti % 2, NULL));
    }
    /* data movement: each size of element, out of place and in place */
    static const int movers[] = {T_INT8, T_UINT8, T_INT32, T_INT64, T_FLOAT, T_DOUBLE,
                                 T_UCHAR, T_ULONG};
    for (int k = 0; k < 8; k++) {
        run_blocking(b, make_case(b, COLL_ALLGATHER, movers[k], OP_NONE, counts[k % 3],
                                  ROOT_NONE, k % 2, NULL));
        run_blocking(b, make_case(b, COLL_ALLTOALL, movers[k], OP_NONE, counts[(k + 1) % 3],
                                  ROOT_NONE, (k / 2) % 2, NULL));
    }

    /* large messages, for the libraries' (and chorus's) large-message paths */
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_FLOAT, OP_SUM, 65537, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT32, OP_MAX, 65537, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_DOUBLE, OP_SUM, 65539, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_INT64, OP_SUM, 65537, ROOT_LAST, 0, NULL));
    run_blocking(b, make_case(b, COLL_BCAST, T_UINT8, OP_NONE, 262147, ROOT_MID, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLGATHER, T_FLOAT, OP_NONE, 16411, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, T_INT32, OP_SUM, 16411, ROOT_NONE, 1,
                              NULL));
    run_blocking(b, make_case(b, COLL_ALLTOALL, T_DOUBLE, OP_NONE, 4099, ROOT_NONE, 1, NULL));

    /* count 0 */
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT, OP_SUM, 0, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_DOUBLE, OP_MAX, 0, ROOT_LAST, 0, NULL));
    run_blocking(b, make_case(b, COLL_BCAST, T_INT64, OP_NONE, 0, ROOT_MID, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLGATHER, T_FLOAT, OP_NONE, 0, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, T_UINT32, OP_SUM, 0, ROOT_NONE, 0,
                              NULL));
    run_blocking(b, make_case(b, COLL_ALLTOALL, T_INT8, OP_NONE, 0, ROOT_NONE, 0, NULL));

    run_blocking(b, make_case(b, COLL_BARRIER, 0, OP_NONE, 0, ROOT_NONE, 0, NULL));
}

static void run_nonblocking_series(battery_t *b)
{
    coll_case_t group[MAX_GROUP];
    ring_t ring;

    /* one at a time, MPI_Wait */
    run_wait(b, make_case(b, COLL_ALLREDUCE, T_INT32, OP_SUM, 7, ROOT_NONE, 0, "wait"));
    run_wait(b, make_case(b, COLL_REDUCE, T_DOUBLE, OP_MAX, 1001, ROOT_LAST, 0, "wait"));
    run_wait(b, make_case(b, COLL_BCAST, T_INT64, OP_NONE, 7, ROOT_MID, 0, "wait"));
    run_wait(b, make_case(b, COLL_ALLGATHER, T_FLOAT, OP_NONE, 7, ROOT_NONE, 0, "wait"));
    run_wait(b, make_case(b, COLL_REDUCE_SCATTER, T_UINT32, OP_SUM, 7, ROOT_NONE, 0, "wait"));
    run_wait(b, make_case(b, COLL_ALLTOALL, T_INT, OP_NONE, 7, ROOT_NONE, 0, "wait"));
    run_wait(b, make_case(b, COLL_BARRIER, 0, OP_NONE, 0, ROOT_NONE, 0, "wait"));

    /* several in flight with a ring exchange, MPI_Waitall */
    group[0] = make_case(b, COLL_ALLREDUCE, T_FLOAT, OP_SUM, 1001, ROOT_NONE, 1, "waitall");
    group[1] = make_case(b, COLL_BCAST, T_UINT8, OP_NONE, 1001, ROOT_MID, 0, "waitall");
    group[2] = make_case(b, COLL_ALLTOALL, T_INT64, OP_NONE, 7, ROOT_NONE, 0, "waitall");
    group[3] = make_case(b, COLL_REDUCE, T_UINT64, OP_SUM, 7, ROOT_FIRST, 1, "waitall");
    run_group(b, group, 4, DONE_WAITALL, &ring);

    /* MPI_Test loops */
    run_test_loop(b, make_case(b, COLL_REDUCE, T_INT64, OP_SUM, 1001, ROOT_FIRST, 1, "test"));
    run_test_loop(b, make_case(b, COLL_ALLREDUCE, T_UINT8, OP_MAX, 65537, ROOT_NONE, 0, "test"));

    /* MPI_Waitany */
    group[0] = make_case(b, COLL_ALLGATHER, T_INT32, OP_NONE, 7, ROOT_NONE, 1, "waitany");
    group[1] = make_case(b, COLL_REDUCE_SCATTER, T_DOUBLE, OP_SUM, 7, ROOT_NONE, 0, "waitany");
    group[2] = make_case(b, COLL_ALLTOALL, T_FLOAT, OP_NONE, 7, ROOT_NONE, 1, "waitany");
    group[3] = make_case(b, COLL_ALLREDUCE, T_DOUBLE, OP_SUM, 65537, ROOT_NONE, 1, "waitany");
    run_group(b, group, 4, DONE_WAITANY, NULL);

    /* MPI_Testall loop, with count 0 calls among them */
    group[0] = make_case(b, COLL_ALLREDUCE, T_DOUBLE, OP_PROD, 7, ROOT_NONE, 0, "testall");
    group[1] = make_case(b, COLL_BCAST, T_FLOAT, OP_NONE, 1001, ROOT_MID, 0, "testall");
    group[2] = make_case(b, COLL_BARRIER, 0, OP_NONE, 0, ROOT_NONE, 0, "testall");
    group[3] = make_case(b, COLL_REDUCE, T_ULONG, OP_MAX, 7, ROOT_LAST, 0, "testall");
    group[4] = make_case(b, COLL_ALLREDUCE, T_INT, OP_SUM, 0, ROOT_NONE, 0, "testall");
    group[5] = make_case(b, COLL_BCAST, T_INT, OP_NONE, 0, ROOT_FIRST, 0, "testall");
    run_group(b, group, 6, DONE_TESTALL, NULL);

    /* MPI_Waitsome */
    group[0] = make_case(b, COLL_ALLREDUCE, T_UINT8, OP_SUM, 1001, ROOT_NONE, 0, "waitsome");
    group[1] = make_case(b, COLL_ALLGATHER, T_INT64, OP_NONE, 1, ROOT_NONE, 0, "waitsome");
    group[2] = make_case(b, COLL_ALLTOALL, T_FLOAT, OP_NONE, 7, ROOT_NONE, 1, "waitsome");
    group[3] = make_case(b, COLL_REDUCE_SCATTER, T_INT32, OP_MAX, 1, ROOT_NONE, 1, "waitsome");
    group[4] = make_case(b, COLL_ALLGATHER, T_SCHAR, OP_NONE, 0, ROOT_NONE, 0, "waitsome");
    run_group(b, group, 5, DONE_WAITSOME, NULL);

    /*
     * A freed request. MPI forbids MPI_Request_free on a nonblocking
     * collective's request (MPI-4.0 6.12; Open MPI and MPICH both reject it),
     * so the freed one is a ring send's: a request the interposer did not make
     * and must pass through. Its receive completes it in practice; the barrier
     * after keeps its buffer (in the battery) alive past that.
     */
    MPI_Request recv_req, freed;
    int right = (b->rank + 1) % b->size, left = (b->rank + b->size - 1) % b->size;
    int salt = b->salt++, reported = 0, received[RING_COUNT];
    char name[NAME_LEN];

    for (size_t j = 0; j < RING_COUNT; j++) {
        b->freed_send[j] = (int)data_value(TY(T_INT), b->rank, j, salt);
        received[j] = -1;
    }
    MPI_Irecv(received, RING_COUNT, MPI_INT, left, RING_TAG, b->comm, &recv_req);
    MPI_Isend(b->freed_send, RING_COUNT, MPI_INT, right, RING_TAG, b->comm, &freed);
    MPI_Request_free(&freed);
    run_wait(b, make_case(b, COLL_ALLREDUCE, T_LLONG, OP_MIN, 7, ROOT_NONE, 0,
                          "with_freed_send"));
    MPI_Wait(&recv_req, MPI_STATUS_IGNORE);
    snprintf(name, sizeof(name), "%s.ring_isend_freed.int.n%d.wait", b->label, RING_COUNT);
    for (size_t j = 0; j < RING_COUNT; j++) {
        long long want = data_value(TY(T_INT), left, j, salt);
        if (received[j] != want)
            mismatch(name, &reported, j, received[j], (long double)want);
    }
    record_test(b, name, fnv1a(FNV_OFFSET, received, sizeof(received)));
    MPI_Barrier(b->comm);
}

static void run_passthrough_series(battery_t *b)
{
    coll_case_t group[MAX_GROUP];

    /* types an interposer does not serve */
    for (int op = OP_SUM; op <= OP_MAX; op++)
        run_blocking(b, make_case(b, COLL_ALLREDUCE, T_SHORT, (op_kind_t)op, op % 2 ? 7 : 1001,
                                  ROOT_NONE, op / 2, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_SHORT, OP_SUM, 7, ROOT_LAST, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, T_SHORT, OP_MIN, 7, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT16, OP_SUM, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_INT16, OP_SUM, 1001, ROOT_FIRST, 1, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_LDOUBLE, OP_SUM, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_LDOUBLE, OP_SUM, 1001, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_LDOUBLE, OP_SUM, 7, ROOT_LAST, 0, NULL));

    /* ops an interposer does not serve */
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT, OP_BAND, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT, OP_BOR, 1001, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_INT, OP_BAND, 7, ROOT_FIRST, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, T_INT, OP_BOR, 7, ROOT_NONE, 0, NULL));
    run_maxloc(b, 7, ROOT_NONE, 0);
    run_maxloc(b, 1001, ROOT_NONE, 1);
    run_maxloc(b, 7, ROOT_LAST, 0);
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT, OP_USER_MAX, 1001, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_INT, OP_USER_MAX, 7, ROOT_LAST, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE_SCATTER, T_INT, OP_USER_MAX, 7, ROOT_NONE, 1,
                              NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_INT, OP_USER_FIRST, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_REDUCE, T_INT, OP_USER_FIRST, 1001, ROOT_FIRST, 1,
                              NULL));

    /*
     * derived types: contiguous, and a vector whose gaps must stay untouched.
     * Reductions on them take user ops: Open MPI and MPICH both refuse MPI_SUM
     * on a derived type (MPI_ERR_OP).
     */
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_CONTIG3, OP_USER_FIRST, 7, ROOT_NONE, 0,
                              NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_CONTIG3, OP_USER_MAX, 7, ROOT_NONE, 1,
                              NULL));
    run_blocking(b, make_case(b, COLL_BCAST, T_CONTIG3, OP_NONE, 7, ROOT_MID, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLGATHER, T_CONTIG3, OP_NONE, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLTOALL, T_CONTIG3, OP_NONE, 3, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_VECTOR, OP_USER_MAX, 7, ROOT_NONE, 1, NULL));
    run_blocking(b, make_case(b, COLL_ALLREDUCE, T_VECTOR, OP_USER_FIRST, 7, ROOT_NONE, 0,
                              NULL));
    run_blocking(b, make_case(b, COLL_BCAST, T_VECTOR, OP_NONE, 7, ROOT_MID, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLGATHER, T_VECTOR, OP_NONE, 7, ROOT_NONE, 0, NULL));
    run_blocking(b, make_case(b, COLL_ALLGATHER, T_VECTOR, OP_NONE, 5, ROOT_NONE, 1, NULL));

    /* and the same kinds, non-blocking */
    run_wait(b, make_case(b, COLL_ALLREDUCE, T_SHORT, OP_SUM, 7, ROOT_NONE, 0, "wait"));
    group[0] = make_case(b, COLL_ALLREDUCE, T_LDOUBLE, OP_SUM, 7, ROOT_NONE, 1, "waitall");
    group[1] = make_case(b, COLL_BCAST, T_VECTOR, OP_NONE, 7, ROOT_MID, 0, "waitall");
    group[2] = make_case(b, COLL_ALLGATHER, T_CONTIG3, OP_NONE, 7, ROOT_NONE, 0, "waitall");
    group[3] = make_case(b, COLL_ALLREDUCE, T_INT, OP_USER_MAX, 1001, ROOT_NONE, 0, "waitall");
    group[4] = make_case(b, COLL_REDUCE, T_INT, OP_BAND, 7, ROOT_LAST, 0, "waitall");
    group[5] = make_case(b, COLL_ALLREDUCE, T_INT16, OP_SUM, 7, ROOT_NONE, 0, "waitall");
    run_group(b, group, 6, DONE_WAITALL, NULL);
}

/* ---- output ------------------------------------------------------------------ */

typedef struct {
    char name[NAME_LEN];
    uint64_t hash;
    int order, seq;
} record_t;

static int record_cmp(const void *a, const void *b)
{
    const record_t *x = a, *y = b;

    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/*
 * Every world rank calls this once per communicator; only the communicators'
 * rank 0s bring records. World rank 0 prints them sorted by communicator and
 * test, so the lines do not depend on timing. Returns the lines printed.
 */
static int print_records(const record_t *mine, int nmine, int world_size)
{
    int nbytes = nmine * (int)sizeof(record_t), total = 0, *counts = NULL, *displs = NULL;
    record_t *all = NULL;

    if (g_world_rank == 0) {
        counts = malloc((size_t)world_size * sizeof(int));
        displs = malloc((size_t)world_size * sizeof(int));
    }
    MPI_Gather(&nbytes, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (g_world_rank == 0) {
        for (int r = 0; r < world_size; r++) {
            displs[r] = total;
            total += counts[r];
        }
        all = malloc(total > 0 ? (size_t)total : 1);
    }
    MPI_Gatherv(mine, nbytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    int nrecords = total / (int)sizeof(record_t);
    if (g_world_rank == 0) {
        qsort(all, (size_t)nrecords, sizeof(record_t), record_cmp);
        for (int i = 0; i < nrecords; i++)
            printf("%s %016" PRIx64 "\n", all[i].name, all[i].hash);
        fflush(stdout);
    }
    free(counts);
    free(displs);
    free(all);
    return nrecords;
}

static int lowest_world_rank(MPI_Comm comm)
{
    MPI_Group world_group, group;
    int n, lowest = -1;

    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Comm_group(comm, &group);
    MPI_Group_size(group, &n);
    int *ranks = malloc((size_t)n * sizeof(int)), *world = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    MPI_Group_translate_ranks(group, n, ranks, world_group, world);
    for (int i = 0; i < n; i++)
        if (lowest < 0 || world[i] < lowest)
            lowest = world[i];
    free(ranks);
    free(world);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    return lowest;
}

/*
 * Runs the whole series on comm (MPI_COMM_NULL: this rank is not in it) and
 * prints its lines. Collective over MPI_COMM_WORLD. Returns the lines printed.
 */
static int run_on(MPI_Comm comm, const char *label, int want_rank, int want_size,
                  int world_size)
{
    record_t *records = NULL;
    int nrecords = 0;

    if (comm != MPI_COMM_NULL) {
        battery_t *b = calloc(1, sizeof(*b));
        uint64_t *all = NULL;

        b->comm = comm;
        b->label = label;
        MPI_Comm_rank(comm, &b->rank);
        MPI_Comm_size(comm, &b->size);
        b->order = lowest_world_rank(comm);
        check_layout(b, want_rank, want_size);
        run_blocking_series(b);
        run_nonblocking_series(b);
        run_passthrough_series(b);

        /* each rank's hashes to the communicator's rank 0, one per test */
        if (b->rank == 0)
            all = malloc((size_t)b->size * (size_t)b->ntests * sizeof(uint64_t));
        MPI_Gather(b->hashes, b->ntests, MPI_UINT64_T, all, b->ntests, MPI_UINT64_T, 0, comm);
        if (b->rank == 0) {
            records = calloc((size_t)b->ntests, sizeof(record_t));
            for (int k = 0; k < b->ntests; k++) {
                uint64_t h = FNV_OFFSET;
                for (int r = 0; r < b->size; r++)
                    h = fnv1a(h, &all[(size_t)r * (size_t)b->ntests + (size_t)k],
                              sizeof(uint64_t));
                snprintf(records[k].name, NAME_LEN, "%s", b->names[k]);
                records[k].hash = h;
                records[k].order = b->order;
                records[k].seq = k;
            }
            nrecords = b->ntests;
        }
        free(all);
        free(b);
    }
    int printed = print_records(records, nrecords, world_size);
    free(records);
    return printed;
}

/* World ranks in reverse order, without world rank 1 when there are 3 or more. */
static MPI_Comm create_reversed(int world_size, int *want_rank, int *want_size)
{
    MPI_Group world_group, group;
    MPI_Comm comm;
    int *ranks = malloc((size_t)world_size * sizeof(int)), n = 0;

    *want_rank = -1;
    for (int r = world_size - 1; r >= 0; r--) {
        if (r == 1 && world_size >= 3)
            continue;
        if (r == g_world_rank)
            *want_rank = n;
        ranks[n++] = r;
    }
    *want_size = n;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, n, ranks, &group);
    MPI_Comm_create(MPI_COMM_WORLD, group, &comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    free(ranks);
    return comm;
}

int main(int argc, char **argv)
{
    int world_size, tests = 0;
    long long all_mismatches = 0;
    MPI_Comm dup, half, reversed, shared;
    int reversed_rank, reversed_size, half_rank = 0, half_size = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    types_init();
    MPI_Op_create(user_max_fn, 1, &g_user_max);
    MPI_Op_create(user_first_fn, 0, &g_user_first);

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    /* key -rank: the highest world rank of each half becomes its rank 0 */
    MPI_Comm_split(MPI_COMM_WORLD, g_world_rank % 2, -g_world_rank, &half);
    for (int r = g_world_rank % 2; r < world_size; r += 2) {
        half_size++;
        half_rank += r > g_world_rank;
    }
    reversed = create_reversed(world_size, &reversed_rank, &reversed_size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);

    tests += run_on(MPI_COMM_WORLD, "world", g_world_rank, world_size, world_size);
    tests += run_on(dup, "dup", g_world_rank, world_size, world_size);
    tests += run_on(half, g_world_rank % 2 ? "split_odd" : "split_even", half_rank, half_size,
                    world_size);
    tests += run_on(reversed, "create_reversed", reversed_rank, reversed_size, world_size);
    tests += run_on(shared, "split_type_shared", -1, -1, world_size);

    MPI_Allreduce(&g_mismatches, &all_mismatches, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (g_world_rank == 0) {
        printf("mpi_colls: %d tests, %lld mismatches\n", tests, all_mismatches);
        fflush(stdout);
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    if (reversed != MPI_COMM_NULL)
        MPI_Comm_free(&reversed);
    MPI_Comm_free(&shared);
    MPI_Op_free(&g_user_max);
    MPI_Op_free(&g_user_first);
    types_free();
    MPI_Finalize();
    return all_mismatches == 0 ? 0 : 1;
}
