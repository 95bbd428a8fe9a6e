/*
 * MPI_Init and MPI_Finalize, and the chorus communicator behind each MPI
 * communicator. MPI_COMM_WORLD's is created in MPI_Init (every rank is
 * there, and a rendezvous may block); a communicator made by a constructor
 * that is collective over its parent (dup, split, split_type, create, the
 * Cartesian ones) gets its own in that constructor, split from the parent's
 * (no new connection); any other intracommunicator gets one at its first
 * blocking collective chorus would serve, through a rendezvous of its own.
 * The chorus communicator hangs on the MPI communicator as an attribute and
 * goes with it (MPI_Comm_free), or at MPI_Finalize.
 */
#include "pmpi/pmpi.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_config.h"
#include "core/wait_hook.h"
#include "util/log.h"

/* What the attribute holds: comm's chorus communicator, NULL when chorus does not serve it. */
typedef struct pmpi_comm {
    chorus_comm_t chorus;
    struct pmpi_comm *prev, *next;
} pmpi_comm_t;

static int comm_keyval = MPI_KEYVAL_INVALID;
static pmpi_serve_t serve_mode = PMPI_SERVE_NONE;
static int report_at_finalize;
/* Every live attribute, for MPI_Finalize (communicators the program never freed). */
static pmpi_comm_t *live;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const fn_names[] = {
#define PMPI_FN_NAME(id, name) name,
    PMPI_FUNCTIONS(PMPI_FN_NAME)
#undef PMPI_FN_NAME
};
static atomic_llong fn_calls[PMPI_FN_COUNT][2];   /* [fn][served] */

void pmpi_count(pmpi_fn_t fn, int served)
{
    atomic_fetch_add_explicit(&fn_calls[fn][served != 0], 1, memory_order_relaxed);
}

const char *pmpi_fn_name(pmpi_fn_t fn)
{
    return fn_names[fn];
}

pmpi_serve_t pmpi_serve_mode(void)
{
    return serve_mode;
}

int pmpi_error(MPI_Comm comm, const char *fn, chorus_status_t status)
{
    chorus_error("%s: chorus failed the call: %s", fn, chorus_status_string(status));
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

static void comm_attach(MPI_Comm comm, chorus_comm_t chorus)
{
    pmpi_comm_t *pc = calloc(1, sizeof(*pc));

    if (pc == NULL) {
        /* Without the attribute the communicator is only ever passed through. */
        if (chorus != NULL)
            chorus_comm_destroy(chorus);
        return;
    }
    pc->chorus = chorus;
    pthread_mutex_lock(&live_lock);
    pc->next = live;
    if (live != NULL)
        live->prev = pc;
    live = pc;
    pthread_mutex_unlock(&live_lock);
    PMPI_Comm_set_attr(comm, comm_keyval, pc);
}

/* The attribute's delete callback: MPI_Comm_free, or MPI_Finalize for the predefined ones. */
static int comm_detach(MPI_Comm comm, int keyval, void *value, void *extra)
{
    pmpi_comm_t *pc = value;

    (void)comm;
    (void)keyval;
    (void)extra;
    pthread_mutex_lock(&live_lock);
    if (pc->prev != NULL)
        pc->prev->next = pc->next;
    else
        live = pc->next;
    if (pc->next != NULL)
        pc->next->prev = pc->prev;
    pthread_mutex_unlock(&live_lock);
    if (pc->chorus != NULL)
        chorus_comm_destroy(pc->chorus);
    free(pc);
    return MPI_SUCCESS;
}

/* Whether every rank of comm says ok (a failure on one rank is a failure on all). */
static int all_ok(MPI_Comm comm, int ok)
{
    if (PMPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return 0;
    return ok;
}

/* A chorus communicator over comm's ranks, in comm's order, through a rendezvous of its own. */
static chorus_comm_t comm_rendezvous(MPI_Comm comm)
{
    struct {
        int status;
        chorus_unique_id_t id;
    } msg;
    chorus_comm_t chorus = NULL;
    chorus_status_t status;
    int rank, size;

    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(comm, &size);
    memset(&msg, 0, sizeof(msg));
    if (rank == 0)
        msg.status = (int)chorus_unique_id_create(&msg.id);
    if (PMPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, comm) != MPI_SUCCESS)
        msg.status = (int)CHORUS_ERR_SYSTEM;
    status = (chorus_status_t)msg.status;
    if (status == CHORUS_OK)
        status = chorus_comm_create_from_id(rank, size, &msg.id, 0, &chorus);
    if (!all_ok(comm, status == CHORUS_OK)) {
        if (status == CHORUS_OK) {
            chorus_comm_destroy(chorus);
            chorus = NULL;
        }
        chorus_warn("rank %d: no chorus communicator for an MPI communicator of %d ranks (%s "
                    "here); its calls go to the MPI library", rank, size,
                    chorus_status_string(status));
    }
    return chorus;
}

chorus_comm_t pmpi_chorus_comm(MPI_Comm comm, int may_create)
{
    pmpi_comm_t *pc;
    int found = 0, inter = 0, size = 0;
    chorus_comm_t chorus = NULL;

    if (comm_keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL)
        return NULL;
    if (PMPI_Comm_get_attr(comm, comm_keyval, &pc, &found) != MPI_SUCCESS)
        return NULL;
    if (found)
        return pc->chorus;
    if (!may_create)
        return NULL;
    /* Intercommunicators and single ranks stay with the MPI library. */
    if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
        PMPI_Comm_size(comm, &size) == MPI_SUCCESS && size > 1)
        chorus = comm_rendezvous(comm);
    comm_attach(comm, chorus);
    return chorus;
}

/*
 * After a constructor that every rank of parent called: newcomm (or
 * MPI_COMM_NULL on ranks outside it) gets a chorus communicator split from
 * parent's. Its color is the parent rank of its rank 0 and its key the rank
 * in it, so the chorus ranks are the MPI ranks.
 */
static void comm_derive(MPI_Comm parent, MPI_Comm newcomm)
{
    chorus_comm_t pchorus = pmpi_chorus_comm(parent, 1), chorus = NULL;
    chorus_status_t status;
    int color = CHORUS_UNDEFINED, key = 0, inter = 0, ok;

    if (pchorus == NULL)
        return;   /* newcomm, if any, gets one of its own at its first blocking collective */
    if (newcomm != MPI_COMM_NULL)
        PMPI_Comm_test_inter(newcomm, &inter);
    if (newcomm != MPI_COMM_NULL && !inter) {
        MPI_Group pgroup, ngroup;
        int zero = 0;

        PMPI_Comm_group(parent, &pgroup);
        PMPI_Comm_group(newcomm, &ngroup);
        PMPI_Group_translate_ranks(ngroup, 1, &zero, pgroup, &color);
        PMPI_Group_free(&pgroup);
        PMPI_Group_free(&ngroup);
        PMPI_Comm_rank(newcomm, &key);
        if (color == MPI_UNDEFINED)
            color = CHORUS_UNDEFINED;
    }
    status = chorus_comm_split(pchorus, color, key, &chorus);
    ok = all_ok(parent, status == CHORUS_OK);
    if (!ok && chorus != NULL) {
        chorus_comm_destroy(chorus);
        chorus = NULL;
    }
    if (!ok)
        chorus_warn("a chorus split for a new MPI communicator failed (%s here); its calls "
                    "go to the MPI library", chorus_status_string(status));
    if (newcomm != MPI_COMM_NULL)
        comm_attach(newcomm, inter ? NULL : chorus);
}

static void pmpi_setup(void)
{
    chorus__pmpi_config_t cfg;

    if (chorus__config_read(&chorus__pmpi_config_table, &cfg) != CHORUS_OK)
        return;   /* logged; everything goes to the MPI library */
    report_at_finalize = cfg.report;
    if (strcmp(cfg.serve.s, "none") == 0)
        return;
    if (strcmp(cfg.serve.s, "all") == 0) {
        serve_mode = PMPI_SERVE_ALL;
    } else if (strcmp(cfg.serve.s, "auto") == 0) {
        serve_mode = PMPI_SERVE_AUTO;
    } else {
        chorus_error("CHORUS_PMPI=%s: must be auto, all or none; every call goes to the MPI "
                     "library", cfg.serve.s);
        return;
    }
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_detach, &comm_keyval, NULL) !=
        MPI_SUCCESS) {
        serve_mode = PMPI_SERVE_NONE;
        return;
    }
    chorus__wait_hook_set(pmpi_progress);
    (void)pmpi_chorus_comm(MPI_COMM_WORLD, 1);
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);

    if (rc == MPI_SUCCESS)
        pmpi_setup();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);

    if (rc == MPI_SUCCESS)
        pmpi_setup();
    return rc;
}

/* Rank 0 prints the calls of every function, summed over the ranks of MPI_COMM_WORLD. */
static void report(void)
{
    long long mine[PMPI_FN_COUNT][2], all[PMPI_FN_COUNT][2];
    int rank, size;

    for (int f = 0; f < PMPI_FN_COUNT; f++) {
        mine[f][0] = atomic_load(&fn_calls[f][0]);
        mine[f][1] = atomic_load(&fn_calls[f][1]);
    }
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (PMPI_Reduce(mine, all, 2 * PMPI_FN_COUNT, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD) !=
            MPI_SUCCESS || rank != 0)
        return;
    fprintf(stderr, "chorus pmpi report: calls summed over %d ranks (CHORUS_PMPI=%s)\n", size,
            serve_mode == PMPI_SERVE_ALL ? "all" : serve_mode == PMPI_SERVE_AUTO ? "auto"
                                                                                 : "none");
    fprintf(stderr, "%-28s %12s %12s\n", "function", "served", "passed");
    for (int f = 0; f < PMPI_FN_COUNT; f++) {
        if (all[f][0] + all[f][1] > 0)
            fprintf(stderr, "%-28s %12lld %12lld\n", fn_names[f], all[f][1], all[f][0]);
    }
    fflush(stderr);
}

int MPI_Finalize(void)
{
    if (report_at_finalize)
        report();
    if (comm_keyval != MPI_KEYVAL_INVALID) {
        /* No rank lets its connections go while a peer may still read from them. */
        PMPI_Barrier(MPI_COMM_WORLD);
        pthread_mutex_lock(&live_lock);
        for (pmpi_comm_t *pc = live; pc != NULL; pc = pc->next) {
            if (pc->chorus != NULL)
                chorus_comm_destroy(pc->chorus);
            pc->chorus = NULL;   /* the delete callbacks that MPI_Finalize runs free the rest */
        }
        pthread_mutex_unlock(&live_lock);
        serve_mode = PMPI_SERVE_NONE;
        chorus__wait_hook_set(NULL);
    }
    return PMPI_Finalize();
}

/* ---- constructors collective over their parent ---------------------------- */

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_dup(comm, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_dup_with_info(comm, info, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_split(comm, color, key, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                        MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_split_type(comm, split_type, key, info, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_create(comm, group, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *newcomm)
{
    int rc = PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}

int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm)
{
    int rc = PMPI_Cart_sub(comm, remain_dims, newcomm);

    if (rc == MPI_SUCCESS)
        comm_derive(comm, *newcomm);
    return rc;
}
