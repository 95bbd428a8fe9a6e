/*
 * One collective call on a team with its buffers and the exact result
 * every element must have: the reductions against a scalar reduction of
 * the same inputs (tests/coll/expect.c), the copying collectives against a
 * pattern that names each element's source rank, block and index. Bytes a
 * call must not touch (gaps between v-form blocks, an out-of-place send
 * buffer) are checked too.
 */
#ifndef CHORUS_TEST_TEAM_CASES_H
#define CHORUS_TEST_TEAM_CASES_H

#include "team_rig.h"

/* Staging slot of the suites (CHORUS_SHM_SLOT_SIZE): small, so that calls take many rounds. */
#define CASE_SLOT_BYTES 4096

/* Where the blocks of a v-form lie: counts[j] elements at displs[j] of a span. */
typedef struct {
    size_t counts[RIG_MAX_PROCS];
    size_t displs[RIG_MAX_PROCS];
    size_t span;
} case_layout_t;

typedef enum {
    LAYOUT_UNEVEN = 0,      /* long, empty and short blocks, in reverse order with gaps */
    LAYOUT_EMPTY,           /* every block empty: nothing moves */
    LAYOUT_ONE,             /* only the last rank's block has elements */
    LAYOUT_KINDS
} case_layout_kind_t;

/* The layout of kind for n ranks; long blocks have about long_elems elements. */
void case_layout(case_layout_kind_t kind, int n, size_t long_elems, case_layout_t *l);

typedef struct {
    coll_type_t coll;
    int variant;
    int in_place;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    size_t count;
    const case_layout_t *layout;    /* a v-form when set */
    unsigned salt;                  /* varies the data from call to call */
} case_t;

/* A buffer of a call and the bytes it must hold afterwards. */
typedef struct {
    char *at;
    size_t bytes;
    char *want;
} case_area_t;

/*
 * A prepared call: its arguments, and its buffers: a send and a receive
 * buffer out of place, one buffer in place (holding the other where they
 * differ in length).
 */
typedef struct {
    case_t c;
    coll_args_t a;
    size_t esize;
    char *send, *recv;
    case_area_t area[2];
    int nareas;
} case_call_t;

/* Whether variant v runs coll (its v-form when vform) on m's team. */
int case_runs(const rig_member_t *m, int v, coll_type_t coll, int vform);

/* Elements of a count "longer than a slot" for dtype. */
size_t case_long(chorus_dtype_t dtype);

/* Buffers filled, expected bytes computed, arguments for member me of n. 0 or -1. */
int case_prepare(const case_t *c, int me, int n, case_call_t *call);
/* Expect the call to leave every buffer as it is now (a call that is skipped). */
void case_expect_untouched(case_call_t *call);
/* 0 when every checked byte is as expected; else -1, the first difference printed. */
int case_check(const case_call_t *call, const char *who);
void case_release(case_call_t *call);

/* Prepare, run on m's team, check, release: 0 when the call succeeded exactly. */
int case_run(const rig_member_t *m, const case_t *c, const char *who);

/* "allreduce/shm int32 sum n=3 count=7 in place" into buf. */
const char *case_name(const case_t *c, const rig_member_t *m, char *buf, size_t len);

#endif
