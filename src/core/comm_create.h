/* The ways to create a communicator all end in chorus__comm_create. */
#ifndef CHORUS_CORE_COMM_CREATE_H
#define CHORUS_CORE_COMM_CREATE_H

#include <stddef.h>
#include "chorus.h"

typedef struct {
    int rank;
    int size;
    const char *addr;       /* host:port of the rendezvous store */
    const char *secret;
    size_t secret_len;
    double timeout_s;       /* <= 0: CHORUS_TIMEOUT */
    int host_store;         /* rank 0 hosts the store at addr */
} comm_create_params_t;

chorus_status_t chorus__comm_create(const comm_create_params_t *params, chorus_comm_t *comm_p);

#ifdef HAVE_PMIX
/*
 * Under a PMIx server (launch_pmix.c): rank and size from it, and rank 0's
 * unique id through its key-value store; waits at most timeout_s there.
 */
chorus_status_t chorus__launch_pmix(double timeout_s, chorus_comm_t *comm_p);
#endif

#endif
