/*
 * A rank body for fault tests run with tests/coll/harness.h: loop one
 * collective (fault_case.h), check every result exactly, and stop at the
 * first failed call, recording its status and times in memory the parent
 * shares, so that the parent can pick the moment of a fault and judge how
 * fast each rank noticed it.
 */
#ifndef CHORUS_TEST_FAULT_LOOP_H
#define CHORUS_TEST_FAULT_LOOP_H

#include "fault_case.h"
#include "coll/harness.h"

#define FAULT_MAX_RANKS 8
#define FAULT_MAX_CONNS 16

/* Exit codes of fault_loop_rank. */
enum { FAULT_RC_ENDED = 0,          /* a call failed: the status is in final_status */
       FAULT_RC_WRONG_DATA = 20,    /* a call returned CHORUS_OK with a wrong result */
       FAULT_RC_NO_ERROR = 22,      /* no call failed within max_s */
       FAULT_RC_NO_MEMORY = 23,
       FAULT_RC_COMM_ERROR = 24 };  /* chorus_comm_get_error disagrees with the call */

typedef struct {
    volatile int in_loop;
    volatile int calls_ok;
    volatile int final_status;
    volatile double final_post_t, final_t;     /* fault_now() of the failed call */
    volatile int nconns;                        /* this rank's TCP connections: */
    volatile int conns[FAULT_MAX_CONNS][2];     /* local and remote port */
} fault_rank_state_t;

typedef struct {
    fault_case_t c;         /* rank and size are filled in on each rank */
    double max_s;           /* a rank gives up after this long in the loop */
    fault_rank_state_t *states;     /* FAULT_MAX_RANKS of them, shared (fault_shared_alloc) */
} fault_loop_t;

/*
 * The loop of the injection tests: allreduces (sum) of 1<<18 elements of
 * dtype for up to 30 s, with rank states shared with the parent, and
 * harness options for nranks ranks (a 60 s deadline, no rank killed; the
 * caller sets its tick). 0, or -1 when the shared states cannot be allocated.
 */
int fault_loop_init(fault_loop_t *loop, chorus_dtype_t dtype, harness_opts_t *opts,
                    int nranks, double timeout_s);
void fault_loop_free(fault_loop_t *loop);

/* harness_rank_fn: arg is a fault_loop_t. */
int fault_loop_rank(chorus_comm_t comm, int rank, int size, void *arg);

/* Zeroed memory shared with the ranks forked later; NULL on failure. */
void *fault_shared_alloc(size_t bytes);
void fault_shared_free(void *p, size_t bytes);

/* 1 when the first n ranks have entered their loop. */
int fault_all_in_loop(const fault_rank_state_t *states, int n);

/*
 * The connected IPv4 TCP sockets among this process's descriptors, as
 * {local port, remote port}; returns how many (at most max).
 */
int fault_tcp_conns(int (*conns)[2], int max);

#endif
