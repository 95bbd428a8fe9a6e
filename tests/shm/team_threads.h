/*
 * The team tests' threaded scenarios, run by the Criterion suite
 * test_shm_team and by the plain program shm_team_threads, which
 * ThreadSanitizer can start (Criterion cannot):
 *
 * - threads_subset_proc: teams over subsets of THREADS_SUBSET_PROCS
 *   processes, some processes in two teams, each team driven by its own
 *   thread at the same time, every call checked exactly;
 * - threads_handoff_proc: one team of THREADS_HANDOFF_PROCS members whose
 *   calls are created in order by one thread and driven alternately by two
 *   others (each call waits for the one before, run by the other thread),
 *   while a third skips some calls and finalizes others unrun.
 *
 * Each is a rig_run function: 0 when every call of the process was exact.
 */
#ifndef CHORUS_TEST_TEAM_THREADS_H
#define CHORUS_TEST_TEAM_THREADS_H

#include "team_rig.h"

#define THREADS_SUBSET_PROCS 5
#define THREADS_HANDOFF_PROCS 3

int threads_subset_proc(rig_t *rig, int proc, void *arg);
int threads_handoff_proc(rig_t *rig, int proc, void *arg);

#endif
