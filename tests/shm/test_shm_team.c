/*
 * The shared-memory collective transport on its own: forked processes make
 * teams with the transport's three steps and run every collective and
 * variant as tasks, each element checked exactly (team_cases.h).
 *
 * - every_call: teams of 1 to 5 members, every collective and variant,
 *   every dtype and op of the reductions, counts 0, 1, odd and longer than
 *   a slot (4 KiB slots: many rounds), in place and out of place, the
 *   v-forms with uneven, empty and misplaced blocks;
 * - subsets_two_threads: teams over subsets of five processes, two teams
 *   in some processes, each driven by its own thread at the same time;
 * - handoff_and_skips: one team's calls created in order by one thread and
 *   driven by two others alternately, with calls skipped on every member
 *   and calls finalized unrun, from a third thread while the others run;
 * - mismatched calls (counts, block layouts) fail on every member;
 * - calls a team cannot run are refused before they take a turn.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team_cases.h"
#include "team_threads.h"
#include "transports/shm/shm.h"
#include "transports/shm/shm_internal.h"

#define DEADLINE_S 240.0

static const tl_coll_ops_t *ops = &tl_shm_coll_ops;

static void setup_env(void)
{
    char slot[32];

    snprintf(slot, sizeof(slot), "%d", CASE_SLOT_BYTES);
    setenv("CHORUS_SHM_SLOT_SIZE", slot, 1);
    setenv("CHORUS_SHM_CMA", "1", 1);
    setenv("CHORUS_SHM", "1", 1);
}

/* Run fn in nprocs processes and expect every one to pass; the board, for its notes. */
static rig_t *run_procs(int nprocs, int (*fn)(rig_t *, int, void *), void *arg)
{
    rig_t *rig = rig_create();
    int status[RIG_MAX_PROCS];

    cr_assert_not_null(rig, "no shared board");
    setup_env();
    rig_run(rig, nprocs, DEADLINE_S, fn, arg, status);
    for (int p = 0; p < nprocs; p++)
        cr_expect_eq(status[p], 0, "process %d of %d exited with %d (see its messages above; "
                     "-1: killed at the deadline)", p, nprocs, status[p]);
    return rig;
}


/* ---- every call on a team of every size ---------------------------------- */

static int every_reduction(const rig_member_t *m, coll_type_t coll, int v, unsigned *salt)
{
    int rc = 0;

    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
        /* 221: a part over many of a small call's lines, in the area for every type of a
         * copy (1768 bytes of float64 at most) and for the narrow types of a reduction. */
        size_t counts[] = {0, 1, 7, 221, case_long((chorus_dtype_t)d)};

        for (int o = 0; o < CHORUS_OP_COUNT; o++) {
            for (size_t i = 0; i < 5; i++) {
                for (int ip = 0; ip < 2 && rc == 0; ip++) {
                    case_t c = {.coll = coll, .variant = v, .in_place = ip,
                                .dtype = (chorus_dtype_t)d, .op = (chorus_op_t)o,
                                .root = (int)(*salt % (unsigned)m->size), .count = counts[i],
                                .salt = (*salt)++};
                    rc = case_run(m, &c, "every_call");
                }
            }
        }
    }
    return rc;
}

static int every_copy(const rig_member_t *m, coll_type_t coll, int v, unsigned *salt)
{
    int rc = 0;

    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
        size_t counts[] = {0, 1, 7, 221, case_long((chorus_dtype_t)d)};

        for (size_t i = 0; i < 5; i++) {
            for (int ip = 0; ip < 2 && rc == 0; ip++) {
                case_t c = {.coll = coll, .variant = v, .in_place = ip,
                            .dtype = (chorus_dtype_t)d, .root = (int)(*salt % (unsigned)m->size),
                            .count = counts[i], .salt = (*salt)++};
                rc = case_run(m, &c, "every_call");
            }
        }
    }
    return rc;
}

/* The v-forms: every layout kind, every dtype, every op for reduce_scatter. */
static int every_vform(const rig_member_t *m, coll_type_t coll, int v, unsigned *salt)
{
    int rc = 0, nops = coll == COLL_REDUCE_SCATTER ? CHORUS_OP_COUNT : 1;

    for (int kind = 0; kind < LAYOUT_KINDS; kind++) {
        for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
            case_layout_t l;

            case_layout((case_layout_kind_t)kind, m->size, case_long((chorus_dtype_t)d), &l);
            for (int o = 0; o < nops; o++) {
                for (int ip = 0; ip < 2 && rc == 0; ip++) {
                    case_t c = {.coll = coll, .variant = v, .in_place = ip,
                                .dtype = (chorus_dtype_t)d, .op = (chorus_op_t)o,
                                .layout = &l, .salt = (*salt)++};
                    rc = case_run(m, &c, "every_call");
                }
            }
        }
    }
    return rc;
}

/* Members that differ in working in place: every other one does, then the others. */
static int every_mixed(const rig_member_t *m, coll_type_t coll, int v, unsigned *salt)
{
    int rc = 0;

    for (int flip = 0; flip < 2; flip++) {
        for (int i = 0; i < 2 && rc == 0; i++) {
            case_t c = {.coll = coll, .variant = v, .in_place = (m->me + flip) % 2,
                        .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM, .root = m->size - 1,
                        .count = i == 0 ? 7 : case_long(CHORUS_FLOAT32), .salt = (*salt)++};
            rc = case_run(m, &c, "every_call (mixed in place)");
        }
    }
    return rc;
}

static int every_call_proc(rig_t *rig, int proc, void *arg)
{
    int nprocs = *(int *)arg, rc = 0;
    tl_coll_ctx_t *ctx;
    rig_member_t m;
    unsigned salt = 0;

    if (rig_ctx(ops, proc, nprocs, &ctx) != 0 || rig_team_make(rig, 0, ops, ctx, nprocs, proc,
                                                               &m) != 0)
        return 2;
    for (int v = 0; v < ops->nvariants && rc == 0; v++) {
        for (int coll = 0; coll < COLL_TYPE_COUNT && rc == 0; coll++) {
            if (!case_runs(&m, v, (coll_type_t)coll, 0))
                continue;
            if (coll == COLL_BARRIER) {
                case_t c = {.coll = COLL_BARRIER, .variant = v, .dtype = CHORUS_UINT8};
                rc = case_run(&m, &c, "every_call");
            } else if (coll_type_reduces((coll_type_t)coll)) {
                rc = every_reduction(&m, (coll_type_t)coll, v, &salt);
            } else {
                rc = every_copy(&m, (coll_type_t)coll, v, &salt);
            }
            if (rc == 0 && coll != COLL_BARRIER)
                rc = every_mixed(&m, (coll_type_t)coll, v, &salt);
            if (rc == 0 && case_runs(&m, v, (coll_type_t)coll, 1) &&
                (coll == COLL_ALLGATHER || coll == COLL_REDUCE_SCATTER))
                rc = every_vform(&m, (coll_type_t)coll, v, &salt);
        }
    }
    if (!(m.flags & SHM_TEAM_CMA) && proc == 0)
        fprintf(stderr, "every_call: %d members: no single copy on this machine (flags 0x%x)\n",
                nprocs, (unsigned)m.flags);
    rig_team_destroy(&m);
    ops->ctx_destroy(ctx);
    return rc == 0 ? 0 : 1;
}

ParameterizedTestParameters(shm_team, every_call)
{
    static int sizes[] = {1, 2, 3, 4, 5};
    return cr_make_param_array(int, sizes, sizeof(sizes) / sizeof(sizes[0]));
}

ParameterizedTest(int *nprocs, shm_team, every_call, .timeout = 300)
{
    rig_destroy(run_procs(*nprocs, every_call_proc, nprocs));
}

/* ---- the threaded scenarios (team_threads.c) ---------------------------- */

Test(shm_team, subsets_two_threads, .timeout = 300)
{
    rig_destroy(run_procs(THREADS_SUBSET_PROCS, threads_subset_proc, NULL));
}

Test(shm_team, handoff_and_skips, .timeout = 300)
{
    rig_destroy(run_procs(THREADS_HANDOFF_PROCS, threads_handoff_proc, NULL));
}

/* ---- members that call differently --------------------------------------- */

#define MISMATCH_PROCS 3

typedef struct {
    const char *what;
    coll_type_t coll;
    const char *variant;
} mismatch_t;

static const mismatch_t mismatches[] = {
    {"count", COLL_ALLREDUCE, "shm"},           {"count", COLL_ALLTOALL, "shm"},
    {"count", COLL_ALLTOALL, "shm_cma"},        {"displs", COLL_ALLGATHER, "shm"},
    {"counts", COLL_ALLGATHER, "shm_cma"},      {"counts", COLL_REDUCE_SCATTER, "shm"},
    {"displs", COLL_REDUCE_SCATTER, "shm_cma"}, {"op", COLL_ALLREDUCE, "shm_cma"},
    {"count", COLL_ALLREDUCE, "shm_ll"},        {"root", COLL_BROADCAST, "shm_ll"},
    {"variant", COLL_ALLGATHER, "shm_ll"},      {"op", COLL_REDUCE, "shm_ll"},
};
#define NMISMATCHES (int)(sizeof(mismatches) / sizeof(mismatches[0]))

/*
 * Outcomes noted on the board: what each member's call ended with; after a
 * success, NOTE_LATER plus what the same call made again ended with.
 */
enum { NOTE_SKIPPED = 1, NOTE_INVALID, NOTE_PEER_FAILED, NOTE_OTHER, NOTE_LATER = 10 };

static int note_of(chorus_status_t status)
{
    return status == CHORUS_ERR_INVALID_ARG   ? NOTE_INVALID
           : status == CHORUS_ERR_PEER_FAILED ? NOTE_PEER_FAILED
                                              : NOTE_OTHER;
}

/* Member `odd` of the call changes what the mismatch names. */
static void mismatch_case(const mismatch_t *mm, const rig_member_t *m, case_layout_t *l,
                          case_t *c)
{
    int odd = m->me == 1;

    case_layout(LAYOUT_UNEVEN, m->size, case_long(CHORUS_INT32), l);
    *c = (case_t){.coll = mm->coll, .variant = rig_variant(ops, mm->variant),
                  .dtype = CHORUS_INT32, .op = CHORUS_SUM, .count = 1000};
    /* Small calls are small: larger ones stage. */
    if (strcmp(mm->variant, "shm_ll") == 0)
        c->count = 20;
    if (strcmp(mm->what, "count") == 0)
        c->count += (size_t)odd;
    else if (strcmp(mm->what, "root") == 0)
        c->root = odd;      /* member 1 takes itself for the root, the others member 0 */
    else if (strcmp(mm->what, "variant") == 0)
        c->variant = odd ? rig_variant(ops, "shm") : c->variant;
    else if (strcmp(mm->what, "op") == 0)
        c->op = odd ? CHORUS_MAX : CHORUS_SUM;
    else
        c->layout = l;
    if (odd && strcmp(mm->what, "displs") == 0)
        l->displs[0]++;     /* the same lengths, one block placed elsewhere */
    if (odd && strcmp(mm->what, "counts") == 0)
        l->counts[2]++;
}

static int mismatch_proc(rig_t *rig, int proc, void *arg)
{
    tl_coll_ctx_t *ctx;

    (void)arg;
    if (rig_ctx(ops, proc, MISMATCH_PROCS, &ctx) != 0)
        return 2;
    for (int i = 0; i < NMISMATCHES; i++) {
        case_layout_t l;
        case_call_t k;
        rig_member_t m;
        case_t c;
        chorus_status_t status;

        if (rig_team_make(rig, i, ops, ctx, MISMATCH_PROCS, proc, &m) != 0)
            return 2;
        mismatch_case(&mismatches[i], &m, &l, &c);
        if (!case_runs(&m, c.variant, c.coll, c.layout != NULL)) {
            *rig_note(rig, i, proc) = NOTE_SKIPPED;
            rig_team_destroy(&m);
            continue;
        }
        if (case_prepare(&c, m.me, m.size, &k) != 0)
            return 2;
        status = rig_call(&m, &k.a, c.variant);
        /* A small call's member that read nothing from the odd one may return first: one of
         * its next SHM_LL_AHEAD calls on the team checks the fingerprints it did not wait
         * for (the peers that failed post no more, so none can return later than that). */
        if (status == CHORUS_OK) {
            chorus_status_t later = CHORUS_OK;

            for (int again = 0; later == CHORUS_OK && again < SHM_LL_AHEAD; again++)
                later = rig_call(&m, &k.a, c.variant);
            *rig_note(rig, i, proc) = NOTE_LATER + note_of(later);
        } else {
            *rig_note(rig, i, proc) = note_of(status);
        }
        case_release(&k);
        /* A member tears its team down only once every member's call is over. */
        rig_barrier(rig, i, MISMATCH_PROCS);
        rig_team_destroy(&m);
    }
    ops->ctx_destroy(ctx);
    return 0;
}

Test(shm_team, mismatched_calls_fail_every_member, .timeout = 120)
{
    rig_t *rig = run_procs(MISMATCH_PROCS, mismatch_proc, NULL);

    for (int i = 0; i < NMISMATCHES; i++) {
        const mismatch_t *mm = &mismatches[i];
        int invalid = 0;

        if (*rig_note(rig, i, 0) == NOTE_SKIPPED) {
            cr_log_warn("%s/%s with different %s: not run (no single copy here)",
                        coll_type_name(mm->coll), mm->variant, mm->what);
            continue;
        }
        for (int p = 0; p < MISMATCH_PROCS; p++) {
            int note = *rig_note(rig, i, p), first = note < NOTE_LATER;
            int reads_all = !(strcmp(mm->variant, "shm_ll") == 0 &&
                              (mm->coll == COLL_BROADCAST ||
                               (mm->coll == COLL_REDUCE && p != 0)));

            if (!first)
                note -= NOTE_LATER;
            cr_expect((note == NOTE_INVALID || note == NOTE_PEER_FAILED) && (first || !reads_all),
                      "%s/%s with different %s: process %d's %s call ended with note %d (2: "
                      "invalid argument, 3: peer failed, 4: another status or success)",
                      coll_type_name(mm->coll), mm->variant, mm->what, p,
                      first ? "first" : "a later", note);
            invalid += note == NOTE_INVALID;
        }
        cr_expect_geq(invalid, 1, "%s/%s with different %s: no member named the mismatch",
                      coll_type_name(mm->coll), mm->variant, mm->what);
    }
    rig_destroy(rig);
}

/* ---- calls a team cannot run --------------------------------------------- */

static int refused_proc(rig_t *rig, int proc, void *arg)
{
    static const size_t counts[2] = {3, 4}, displs[2] = {0, 3};
    tl_coll_ctx_t *ctx;
    rig_member_t m;
    chorus__task_t *task = NULL;
    coll_args_t bad[6];
    int rc = 0;

    (void)arg;
    setenv("CHORUS_SHM_CMA", "0", 1);   /* a team without single copy */
    if (rig_ctx(ops, proc, 2, &ctx) != 0 || rig_team_make(rig, 0, ops, ctx, 2, proc, &m) != 0)
        return 2;
    for (int i = 0; i < 6; i++)
        bad[i] = (coll_args_t){.coll = COLL_ALLREDUCE, .count = 4, .dtype = CHORUS_INT32,
                               .rank = proc, .size = 2};
    bad[1].coll = COLL_ALLTOALL;            /* shm_slice runs no alltoall */
    bad[2].counts = counts;                 /* allreduce has no v-form */
    bad[2].displs = displs;
    bad[3].coll = COLL_ALLGATHER;           /* a v-form without displs */
    bad[3].counts = counts;
    bad[4].rank = 1 - proc;                 /* not this member's position */
    for (int i = 0; i < 6; i++) {
        int variant = i == 0 ? 99 : i == 1 ? rig_variant(ops, "shm_slice")
                                : i == 5 ? rig_variant(ops, "shm_cma") : rig_variant(ops, "shm");
        chorus_status_t status = ops->task_create(m.team, &bad[i], variant, &task);

        if (status != CHORUS_ERR_INVALID_ARG) {
            fprintf(stderr, "refused: case %d: task_create gave %s\n", i,
                    chorus_status_string(status));
            rc = 1;
        }
    }
    /* No refused call took a turn: the next one runs. */
    for (int i = 0; i < 2 && rc == 0; i++) {
        case_t c = {.coll = COLL_ALLTOALL, .variant = rig_variant(ops, "shm"),
                    .dtype = CHORUS_INT32, .count = 5, .salt = (unsigned)i};
        rc = case_run(&m, &c, "refused");
    }
    rig_team_destroy(&m);
    ops->ctx_destroy(ctx);
    return rc;
}

Test(shm_team, refused_calls_take_no_turn, .timeout = 60)
{
    rig_destroy(run_procs(2, refused_proc, NULL));
}

/* ---- prices --------------------------------------------------------------- */

/* Alltoall is priced on both data paths, single copy only where the team has it. */
Test(shm_team, alltoall_priced_where_it_runs)
{
    tl_team_desc_t cma = {.size = 4, .cores = 2, .flags = TL_TEAM_OK | SHM_TEAM_CMA};
    tl_team_desc_t flat = {.size = 4, .cores = 2, .flags = TL_TEAM_OK};
    int v_flat = rig_variant(ops, "shm"), v_slice = rig_variant(ops, "shm_slice");
    int v_cma = rig_variant(ops, "shm_cma");

    for (size_t bytes = 1024; bytes <= ((size_t)64 << 20); bytes *= 16) {
        double f = ops->price(NULL, &cma, v_flat, COLL_ALLTOALL, bytes);
        double c = ops->price(NULL, &cma, v_cma, COLL_ALLTOALL, bytes);

        cr_expect(f > 0 && f < INFINITY, "shm alltoall of %zu bytes priced %g", bytes, f);
        cr_expect(c > 0 && c < INFINITY, "shm_cma alltoall of %zu bytes priced %g", bytes, c);
        cr_expect(ops->price(NULL, &cma, v_flat, COLL_ALLTOALL, 2 * bytes) > f,
                  "shm alltoall of %zu bytes costs no more than half as much", 2 * bytes);
        cr_expect_eq(ops->price(NULL, &flat, v_cma, COLL_ALLTOALL, bytes), INFINITY);
        cr_expect_eq(ops->price(NULL, &cma, v_slice, COLL_ALLTOALL, bytes), INFINITY);
    }
    cr_expect(ops->variants[v_flat].vforms && ops->variants[v_cma].vforms,
              "the flat and single-copy variants run the v-forms");
    cr_expect(!ops->variants[v_slice].vforms);
}
