/*
 * Multi-process test harness: fork N ranks on this machine, each with a
 * communicator created from explicit arguments (a fresh port on 127.0.0.1
 * and a fresh secret), run a function on every rank, and collect exit codes
 * with a deadline so a hung rank fails the test instead of hanging it.
 */
#ifndef CHORUS_TEST_HARNESS_H
#define CHORUS_TEST_HARNESS_H

#include <sys/types.h>

#include "chorus.h"

typedef int (*harness_rank_fn)(chorus_comm_t comm, int rank, int size, void *arg);

typedef struct {
    int nranks;
    double timeout_s;       /* communicator timeout (CHORUS_TIMEOUT of the ranks) */
    double deadline_s;      /* the harness kills every rank after this long */
    int kill_rank;          /* rank to SIGKILL after kill_after_s, or -1 */
    double kill_after_s;
    /*
     * Optional, NULL when unused: called by the parent about every 2 ms while
     * ranks run, with each rank's pid (0 once it has exited) and the seconds
     * since the ranks were forked, so that a test can inject a fault (a signal,
     * a link change) at a moment of its choosing.
     */
    void (*tick)(const pid_t *pids, int nranks, double elapsed_s, void *tick_arg);
    void *tick_arg;
} harness_opts_t;

/*
 * Run fn on every rank. status_out[r] receives rank r's exit code (0..255),
 * 128+signal when killed, or -1 when it had to be killed at the deadline.
 * elapsed_out[r] (may be NULL) receives how long rank r ran, in seconds.
 * Returns 0 when every rank that was not deliberately killed exited 0.
 *
 * When CHORUS_TEST_NETNS lists network namespaces ("a,b,c", names under
 * /var/run/netns as tests/netns/testbed.sh --harness creates them), rank r
 * of N enters namespace r * m / N of the m listed before it creates its
 * communicator and listens on that namespace's address, so the ranks run as
 * m emulated nodes; the rendezvous is in the first namespace (-1 when it
 * cannot be entered). Without the variable, every rank uses 127.0.0.1.
 */
int harness_run(const harness_opts_t *opts, harness_rank_fn fn, void *arg, int *status_out,
                double *elapsed_out);

/* Seconds on the monotonic clock. */
double harness_now(void);

/* A free TCP port on 127.0.0.1 (bound then released). */
int harness_free_port(void);

/* 0 when got is want; else 1, with a message naming rank, what and both statuses. */
int harness_expect_status(chorus_status_t got, chorus_status_t want, const char *what,
                          int rank);

#endif
