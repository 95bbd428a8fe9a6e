/*
 * The team tests' threaded scenarios (team_threads.h) as a plain program,
 * so that ThreadSanitizer can run them: calls of one team handed between
 * threads, turns skipped from another thread, and several teams of one
 * process driven at once. Exit status 0 when every call was exact.
 */
#include <stdio.h>
#include <stdlib.h>

#include "team_cases.h"
#include "team_threads.h"

#define DEADLINE_S 240.0

static int run(rig_t *rig, const char *name, int nprocs, int (*fn)(rig_t *, int, void *))
{
    int status[RIG_MAX_PROCS], rc = rig_run(rig, nprocs, DEADLINE_S, fn, NULL, status);

    for (int p = 0; p < nprocs; p++) {
        if (status[p] != 0)
            fprintf(stderr, "%s: process %d of %d exited with %d\n", name, p, nprocs,
                    status[p]);
    }
    printf("%s: %s\n", name, rc == 0 ? "ok" : "FAILED");
    return rc;
}

int main(void)
{
    rig_t *rig = rig_create();
    char slot[32];
    int rc;

    if (rig == NULL) {
        fprintf(stderr, "shm_team_threads: no shared board\n");
        return 1;
    }
    snprintf(slot, sizeof(slot), "%d", CASE_SLOT_BYTES);
    setenv("CHORUS_SHM_SLOT_SIZE", slot, 1);
    rc = run(rig, "handoff_and_skips", THREADS_HANDOFF_PROCS, threads_handoff_proc);
    rc |= run(rig, "subsets_two_threads", THREADS_SUBSET_PROCS, threads_subset_proc);
    rig_destroy(rig);
    return rc == 0 ? 0 : 1;
}
