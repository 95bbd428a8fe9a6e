/*
 * The names of an engine and their agreement: a hash table from name to
 * entry, the agreed entries by id, and the exchange of new names that gives
 * every rank the same ids without a coordinating rank.
 *
 * An announcement record is, in this rank's byte order (every rank of a job
 * runs on the same architecture): a 16-bit name length, the name, then the
 * description (kind, dtype, op, wire, 32-bit root, 64-bit count).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/log.h"

#define RECORD_DESC_BYTES 16

static uint64_t name_hash(const char *name)
{
    uint64_t h = 14695981039346656037ULL;   /* FNV-1a */

    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h;
}

void engine_names_init(engine_names_t *names)
{
    memset(names, 0, sizeof(*names));
}

void engine_names_free(engine_names_t *names)
{
    for (size_t b = 0; b < names->nbuckets; b++) {
        engine_name_t *e = names->buckets[b], *next;

        for (; e != NULL; e = next) {
            next = e->hash_next;
            free(e->name);
            free(e);
        }
    }
    free(names->buckets);
    free(names->by_id);
    engine_names_init(names);
}

engine_name_t *engine_names_find(const engine_names_t *names, const char *name)
{
    if (names->nbuckets == 0)
        return NULL;
    for (engine_name_t *e = names->buckets[name_hash(name) % names->nbuckets]; e != NULL;
         e = e->hash_next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* Twice the buckets once the table holds as many entries as buckets. */
static int names_grow(engine_names_t *names)
{
    size_t n = names->nbuckets ? names->nbuckets * 2 : 256;
    engine_name_t **b = calloc(n, sizeof(*b));

    if (b == NULL)
        return -1;
    for (size_t i = 0; i < names->nbuckets; i++) {
        engine_name_t *e = names->buckets[i], *next;

        for (; e != NULL; e = next) {
            size_t k = name_hash(e->name) % n;

            next = e->hash_next;
            e->hash_next = b[k];
            b[k] = e;
        }
    }
    free(names->buckets);
    names->buckets = b;
    names->nbuckets = n;
    return 0;
}

engine_name_t *engine_names_add(engine_names_t *names, const char *name)
{
    engine_name_t *e;
    size_t k;

    if (names->count >= names->nbuckets && names_grow(names) != 0)
        return NULL;
    e = calloc(1, sizeof(*e));
    if (e == NULL || (e->name = strdup(name)) == NULL) {
        free(e);
        return NULL;
    }
    e->id = -1;
    e->described_by = -1;
    k = name_hash(name) % names->nbuckets;
    e->hash_next = names->buckets[k];
    names->buckets[k] = e;
    names->count++;
    return e;
}

chorus_status_t engine_names_agree(engine_names_t *names, engine_name_t *entry)
{
    if (names->nids >= ENGINE_NAMES_MAX)
        return CHORUS_ERR_INVALID_ARG;
    if (names->nids == names->ids_capacity) {
        size_t cap = names->ids_capacity ? names->ids_capacity * 2 : 256;
        engine_name_t **by_id = realloc(names->by_id, cap * sizeof(*by_id));

        if (by_id == NULL)
            return CHORUS_ERR_NO_MEMORY;
        names->by_id = by_id;
        names->ids_capacity = cap;
    }
    entry->id = (int64_t)names->nids;
    names->by_id[names->nids++] = entry;
    return CHORUS_OK;
}

int engine_desc_equal(const engine_desc_t *a, const engine_desc_t *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->count == b->count && a->wire == b->wire;
}

void engine_desc_format(const engine_desc_t *d, char *buf, size_t len)
{
    const char *dtype = chorus_dtype_name((chorus_dtype_t)d->dtype);

    dtype = dtype ? dtype : "?";
    switch (d->kind) {
    case ENGINE_ALLREDUCE: {
        const char *op = chorus_op_name((chorus_op_t)d->op);

        const char *wire = chorus_dtype_name((chorus_dtype_t)d->wire);

        snprintf(buf, len, "%llu x %s %s%s%s", (unsigned long long)d->count, dtype,
                 op ? op : "?", wire ? " compressed to " : "", wire ? wire : "");
        break;
    }
    case ENGINE_BROADCAST:
        snprintf(buf, len, "%llu x %s broadcast from %d", (unsigned long long)d->count, dtype,
                 (int)d->root);
        break;
    default:
        snprintf(buf, len, "%llu x %s allgather", (unsigned long long)d->count, dtype);
        break;
    }
}

size_t engine_desc_bytes(const engine_desc_t *d, int size)
{
    size_t bytes = (size_t)d->count * chorus_dtype_size((chorus_dtype_t)d->dtype);

    return d->kind == ENGINE_ALLGATHER ? bytes * (size_t)size : bytes;
}

/* ---- the exchange ---------------------------------------------------------- */

static size_t record_bytes(const engine_name_t *e)
{
    return 2 + strlen(e->name) + RECORD_DESC_BYTES;
}

static uint8_t *record_put(uint8_t *p, const char *name, const engine_desc_t *d)
{
    uint16_t len = (uint16_t)strlen(name);

    memcpy(p, &len, 2);
    memcpy(p + 2, name, len);
    p += 2 + len;
    p[0] = d->kind;
    p[1] = d->dtype;
    p[2] = d->op;
    p[3] = d->wire;
    memcpy(p + 4, &d->root, 4);
    memcpy(p + 8, &d->count, 8);
    return p + RECORD_DESC_BYTES;
}

/* The record at *p of at most left bytes: its name (copied, NUL-ended) and description. */
static int record_get(const uint8_t **p, size_t *left, char *name, engine_desc_t *d)
{
    uint16_t len;

    if (*left < 2)
        return -1;
    memcpy(&len, *p, 2);
    if (len == 0 || len > ENGINE_NAME_MAX || *left < 2u + len + RECORD_DESC_BYTES)
        return -1;
    memcpy(name, *p + 2, len);
    name[len] = '\0';
    if (memchr(name, '\0', len) != NULL)
        return -1;
    *p += 2 + len;
    d->kind = (*p)[0];
    d->dtype = (*p)[1];
    d->op = (*p)[2];
    d->wire = (*p)[3];
    memcpy(&d->root, *p + 4, 4);
    memcpy(&d->count, *p + 8, 8);
    *p += RECORD_DESC_BYTES;
    *left -= 2u + len + RECORD_DESC_BYTES;
    return d->kind < ENGINE_KIND_COUNT && d->dtype < CHORUS_DTYPE_COUNT &&
                   (d->wire == CHORUS_FLOAT16 || d->wire == CHORUS_BFLOAT16 ||
                    d->wire == CHORUS_DTYPE_COUNT)
               ? 0
               : -1;
}

chorus_status_t engine_names_pack(chorus_engine_t engine, void **buf_p, size_t *len_p)
{
    engine_names_t *names = &engine->names;
    size_t len = 0;
    uint8_t *buf, *p;

    *buf_p = NULL;
    *len_p = 0;
    for (size_t b = 0; b < names->nbuckets; b++)
        for (engine_name_t *e = names->buckets[b]; e != NULL; e = e->hash_next)
            if (e->pending != NULL && e->pending->announce)
                len += record_bytes(e);
    if (len == 0)
        return CHORUS_OK;
    p = buf = malloc(len);
    if (buf == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (size_t b = 0; b < names->nbuckets; b++)
        for (engine_name_t *e = names->buckets[b]; e != NULL; e = e->hash_next)
            if (e->pending != NULL && e->pending->announce)
                p = record_put(p, e->name, &e->pending->desc);
    *buf_p = buf;
    *len_p = len;
    return CHORUS_OK;
}

/*
 * The current submission of e fails here, or the next one to come does; the
 * name is described afresh by its next submissions. Once per merge.
 */
static void name_conflict(chorus_engine_t engine, engine_name_t *e, int rank,
                          const engine_desc_t *d)
{
    char mine[96], theirs[96];

    if (e->conflict_merge == engine->names.merges)
        return;
    e->conflict_merge = engine->names.merges;
    engine_desc_format(&e->desc, mine, sizeof(mine));
    engine_desc_format(d, theirs, sizeof(theirs));
    chorus_error("rank %d: tensor '%s' differs between ranks: rank %d submitted it "
                 "as %s, rank %d as %s", engine->rank, e->name, e->described_by, mine, rank,
                 theirs);
    engine->counters.conflicts++;
    e->described_by = -1;
    if (e->pending != NULL) {
        engine_sub_t *sub = e->pending;

        e->pending = NULL;
        if (sub->announce)
            engine->nannounce--;
        else
            engine->ready_bytes -= engine_desc_bytes(&sub->desc, engine->size);
        engine_sub_finish(sub, CHORUS_ERR_INVALID_ARG);
    } else {
        e->owed_failures++;
    }
}

/*
 * A round of e described by rank r as d, unlike the last round, which every
 * rank has finished: the new description holds from this round on, on
 * every rank alike. This rank's submission of the round, if it was made
 * under the old description (and so not announced), is announced now: a
 * round that two ranks describe differently conflicts in the next merge.
 */
static void name_redescribe(chorus_engine_t engine, engine_name_t *e, int r,
                            const engine_desc_t *d)
{
    engine_sub_t *sub = e->pending;

    e->desc = *d;
    e->described_by = r;
    e->round_done = 0;
    if (sub != NULL && !sub->announce && !engine_desc_equal(&sub->desc, d)) {
        sub->announce = 1;
        engine->nannounce++;
        engine->ready_bytes -= engine_desc_bytes(&sub->desc, engine->size);
    }
}

chorus_status_t engine_names_merge(chorus_engine_t engine, const uint8_t *all, size_t stride,
                                   const uint64_t *lens)
{
    char name[ENGINE_NAME_MAX + 1];
    engine_desc_t d;

    engine->names.merges++;
    for (int r = 0; r < engine->size; r++) {
        const uint8_t *p = all + (size_t)r * stride;
        size_t left = (size_t)lens[r];

        if (left > stride)
            return CHORUS_ERR_PROTOCOL;
        while (left > 0) {
            engine_name_t *e;
            chorus_status_t status;

            if (record_get(&p, &left, name, &d) != 0) {
                chorus_error("rank %d: a malformed name record from rank %d",
                             engine->rank, r);
                return CHORUS_ERR_PROTOCOL;
            }
            e = engine_names_find(&engine->names, name);
            if (e == NULL && (e = engine_names_add(&engine->names, name)) == NULL)
                return CHORUS_ERR_NO_MEMORY;
            if (e->conflict_merge == engine->names.merges)
                continue;       /* this round of it failed already */
            if (e->id >= 0 && e->described_by >= 0) {
                if (!engine_desc_equal(&e->desc, &d) && !e->round_done)
                    name_conflict(engine, e, r, &d);
                else if (!engine_desc_equal(&e->desc, &d))
                    name_redescribe(engine, e, r, &d);
                continue;
            }
            e->desc = d;
            e->described_by = r;
            e->round_done = 0;
            if (e->id >= 0)
                continue;
            status = engine_names_agree(&engine->names, e);
            if (status == CHORUS_ERR_INVALID_ARG) {
                /* Every rank is full alike: the name fails everywhere and stays without id. */
                chorus_error("rank %d: tensor '%s' from rank %d: the engine holds %u "
                             "names, its most", engine->rank, name, r, ENGINE_NAMES_MAX);
                e->described_by = -1;
                if (e->pending != NULL) {
                    engine_sub_t *sub = e->pending;

                    e->pending = NULL;
                    engine->nannounce -= sub->announce != 0;
                    engine_sub_finish(sub, CHORUS_ERR_INVALID_ARG);
                }
                continue;
            }
            if (status != CHORUS_OK)
                return status;
        }
    }
    /* Submissions waiting to be described that the merge settled. */
    for (size_t b = 0; b < engine->names.nbuckets; b++)
        for (engine_name_t *e = engine->names.buckets[b]; e != NULL; e = e->hash_next) {
            engine_sub_t *sub = e->pending;

            if (sub == NULL || !sub->announce || e->id < 0 || e->described_by < 0 ||
                !engine_desc_equal(&e->desc, &sub->desc))
                continue;
            sub->announce = 0;
            engine->nannounce--;
            engine->ready_bytes += engine_desc_bytes(&sub->desc, engine->size);
        }
    return CHORUS_OK;
}
