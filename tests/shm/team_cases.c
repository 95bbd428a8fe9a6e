/* Team calls with exactly known results: see team_cases.h. */
#include "team_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/expect.h"

/* Bytes no call may write. */
#define SENTINEL 0xee

void case_layout(case_layout_kind_t kind, int n, size_t long_elems, case_layout_t *l)
{
    size_t at = 2;

    memset(l, 0, sizeof(*l));
    for (int j = 0; j < n; j++) {
        switch (kind) {
        case LAYOUT_UNEVEN:
            l->counts[j] = j % 3 == 1 ? 0 : j % 3 == 0 ? long_elems + (size_t)j : 2 * (size_t)j + 1;
            break;
        case LAYOUT_ONE:
            l->counts[j] = j == n - 1 ? long_elems : 0;
            break;
        default:
            l->counts[j] = 0;
            break;
        }
    }
    /* Blocks in reverse rank order, three elements apart: anywhere, not in rank order. */
    for (int j = n - 1; j >= 0; j--) {
        l->displs[j] = at;
        at += l->counts[j] + 3;
    }
    l->span = at;
}

int case_runs(const rig_member_t *m, int v, coll_type_t coll, int vform)
{
    return tl_coll_variant_runs(m->ops, v, coll, m->flags, vform);
}

size_t case_long(chorus_dtype_t dtype)
{
    return 2 * CASE_SLOT_BYTES / chorus_dtype_size(dtype) + 3;
}

/* The bytes of element i of block b that rank r sends, for the copying collectives. */
static void pattern(char *dst, size_t esize, int r, int b, size_t i, unsigned salt)
{
    uint64_t h = ((uint64_t)r << 48) ^ ((uint64_t)b << 32) ^ (uint64_t)i ^
                 ((uint64_t)salt << 40);

    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    memcpy(dst, &h, esize);
}

static void fill_pattern(char *dst, size_t esize, int r, int b, size_t count, unsigned salt)
{
    for (size_t i = 0; i < count; i++)
        pattern(dst + i * esize, esize, r, b, i, salt);
}

static void fill_inputs(const case_t *c, int r, char *dst, size_t count)
{
    for (size_t i = 0; i < count; i++)
        expect_store(c->dtype, dst, i, expect_input(c->op, c->dtype, r, i + c->salt));
}

/* dst[i] = the reduction over n ranks of input element first + i, as a scalar reference. */
static void fill_reduced(const case_t *c, int n, char *dst, size_t first, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        double v = expect_reduced(c->op, c->dtype, n, first + i + c->salt);

        if (c->op == CHORUS_AVG)
            expect_store_avg(c->dtype, dst, i, v, n);
        else
            expect_store(c->dtype, dst, i, v);
    }
}

static size_t block_of(const case_t *c, int j)
{
    return c->layout != NULL ? c->layout->counts[j] : c->count;
}

static size_t displ_of(const case_t *c, int j)
{
    return c->layout != NULL ? c->layout->displs[j] : (size_t)j * c->count;
}

static size_t span_of(const case_t *c, int n)
{
    return c->layout != NULL ? c->layout->span : (size_t)n * c->count;
}

/* The bytes that area's expected copy holds where at lies in the area. */
static char *want_of(case_call_t *k, const char *at)
{
    for (int i = 0; i < k->nareas; i++) {
        if (at >= k->area[i].at && at <= k->area[i].at + k->area[i].bytes)
            return k->area[i].want + (at - k->area[i].at);
    }
    return NULL;
}

static int area_add(case_call_t *k, size_t bytes)
{
    case_area_t *ar = &k->area[k->nareas++];

    ar->bytes = bytes;
    ar->at = malloc(bytes + 1);
    ar->want = malloc(bytes + 1);
    if (ar->at == NULL || ar->want == NULL)
        return -1;
    memset(ar->at, SENTINEL, bytes);
    return 0;
}

/* Buffers of send_elems and recv_elems; in place, the shorter lies inside the longer. */
static int case_alloc(case_call_t *k, size_t send_elems, size_t recv_elems)
{
    const case_t *c = &k->c;
    size_t es = k->esize, mine = displ_of(c, k->a.rank) * es;

    if (!c->in_place) {
        if (area_add(k, send_elems * es) != 0 || area_add(k, recv_elems * es) != 0)
            return -1;
        k->send = k->area[0].at;
        k->recv = k->area[1].at;
        return 0;
    }
    if (area_add(k, (send_elems > recv_elems ? send_elems : recv_elems) * es) != 0)
        return -1;
    k->send = k->recv = k->area[0].at;
    if (c->coll == COLL_REDUCE_SCATTER)
        k->recv += mine;
    else if (c->coll == COLL_ALLGATHER)
        k->send += mine;
    return 0;
}

/* Every area's expected bytes start as what it holds before the call. */
static void want_now(case_call_t *k)
{
    for (int i = 0; i < k->nareas; i++)
        memcpy(k->area[i].want, k->area[i].at, k->area[i].bytes);
}

static void prepare_reduction(case_call_t *k, int me, int n)
{
    const case_t *c = &k->c;
    int scatter = c->coll == COLL_REDUCE_SCATTER;

    fill_inputs(c, me, k->send, scatter ? span_of(c, n) : c->count);
    want_now(k);
    if (c->coll == COLL_REDUCE && me != c->root) {
        if (!c->in_place) {
            k->recv = NULL;     /* a non-root has no result: nothing to pass */
            k->nareas = 1;
        }
        return;
    }
    fill_reduced(c, n, want_of(k, k->recv), scatter ? displ_of(c, me) : 0,
                 scatter ? block_of(c, me) : c->count);
}

static void prepare_copying(case_call_t *k, int me, int n)
{
    const case_t *c = &k->c;
    size_t es = k->esize;

    if (c->coll == COLL_ALLGATHER)
        fill_pattern(k->send, es, me, 0, block_of(c, me), c->salt);
    else if (c->coll == COLL_BROADCAST && me == c->root)
        fill_pattern(k->send, es, me, 0, c->count, c->salt);
    for (int j = 0; c->coll == COLL_ALLTOALL && j < n; j++)
        fill_pattern(k->send + (size_t)j * c->count * es, es, me, j, c->count, c->salt);
    want_now(k);
    for (int j = 0; j < n; j++) {
        if (c->coll == COLL_ALLGATHER)
            fill_pattern(want_of(k, k->recv) + displ_of(c, j) * es, es, j, 0, block_of(c, j),
                         c->salt);
        else if (c->coll == COLL_ALLTOALL)
            fill_pattern(want_of(k, k->recv) + (size_t)j * c->count * es, es, j, me, c->count,
                         c->salt);
    }
    if (c->coll == COLL_BROADCAST)
        fill_pattern(want_of(k, k->recv), es, c->root, 0, c->count, c->salt);
}

int case_prepare(const case_t *c, int me, int n, case_call_t *k)
{
    size_t send_elems = c->count, recv_elems = c->count;

    memset(k, 0, sizeof(*k));
    k->c = *c;
    k->esize = chorus_dtype_size(c->dtype);
    k->a = (coll_args_t){.coll = c->coll, .count = c->layout ? 0 : c->count, .dtype = c->dtype,
                         .op = c->op, .root = c->root, .rank = me, .size = n,
                         .chunk_bytes = 1 << 18, .mem = COLL_MEM_HOST,
                         .counts = c->layout ? c->layout->counts : NULL,
                         .displs = c->layout ? c->layout->displs : NULL};
    if (c->coll == COLL_REDUCE_SCATTER || c->coll == COLL_ALLTOALL)
        send_elems = span_of(c, n);
    if (c->coll == COLL_REDUCE_SCATTER)
        recv_elems = block_of(c, me);
    else if (c->coll == COLL_ALLTOALL)
        recv_elems = send_elems;
    if (c->coll == COLL_ALLGATHER) {
        send_elems = block_of(c, me);
        recv_elems = span_of(c, n);
    }
    if (c->coll == COLL_BARRIER)
        send_elems = recv_elems = 0;
    if (case_alloc(k, send_elems, recv_elems) != 0) {
        case_release(k);
        return -1;
    }
    if (coll_type_reduces(c->coll))
        prepare_reduction(k, me, n);
    else if (c->coll != COLL_BARRIER)
        prepare_copying(k, me, n);
    k->a.sendbuf = k->send;
    k->a.recvbuf = k->recv;
    return 0;
}

void case_expect_untouched(case_call_t *k)
{
    want_now(k);
}

int case_check(const case_call_t *k, const char *who)
{
    for (int i = 0; i < k->nareas; i++) {
        const case_area_t *ar = &k->area[i];

        for (size_t b = 0; b < ar->bytes; b++) {
            if (ar->at[b] == ar->want[b])
                continue;
            fprintf(stderr, "%s: %s buffer, byte %zu of %zu (element %zu): got 0x%02x, want "
                    "0x%02x\n", who, k->nareas == 1 ? "the in-place" : i == 0 ? "send" : "receive",
                    b, ar->bytes, b / k->esize, (unsigned char)ar->at[b],
                    (unsigned char)ar->want[b]);
            return -1;
        }
    }
    return 0;
}

void case_release(case_call_t *k)
{
    /* A reduce's non-root out of place dropped its second area from the count only. */
    for (int i = 0; i < 2; i++) {
        free(k->area[i].at);
        free(k->area[i].want);
    }
    memset(k, 0, sizeof(*k));
}

const char *case_name(const case_t *c, const rig_member_t *m, char *buf, size_t len)
{
    snprintf(buf, len, "member %d of %d: %s%s/%s %s %s root=%d count=%zu salt=%u%s", m->me,
             m->size, coll_type_name(c->coll), c->layout ? "-v" : "",
             m->ops->variants[c->variant].name, chorus_dtype_name(c->dtype),
             coll_type_reduces(c->coll) ? chorus_op_name(c->op) : "-", c->root,
             c->layout ? c->layout->span : c->count, c->salt,
             c->in_place ? " in place" : "");
    return buf;
}

int case_run(const rig_member_t *m, const case_t *c, const char *who)
{
    case_call_t k;
    chorus_status_t status;
    char name[200];
    int rc;

    if (case_prepare(c, m->me, m->size, &k) != 0) {
        fprintf(stderr, "%s: no memory for the buffers\n", who);
        return -1;
    }
    status = rig_call(m, &k.a, c->variant);
    rc = status == CHORUS_OK ? 0 : -1;
    case_name(c, m, name, sizeof(name));
    if (status != CHORUS_OK)
        fprintf(stderr, "%s: %s: %s\n", who, name, chorus_status_string(status));
    else if (case_check(&k, name) != 0)
        rc = -1;
    case_release(&k);
    return rc;
}
