/*
 * One rank of a fault test started by a script (for example inside a network
 * namespace with "ip netns exec"): create a communicator from the
 * environment (CHORUS_RANK, CHORUS_SIZE, CHORUS_ADDR, CHORUS_SECRET,
 * CHORUS_TIMEOUT, CHORUS_IFADDR), loop an int32 sum allreduce of COUNT
 * elements checking every result, and end at the first failed call.
 *
 * Usage: fault_rank COUNT MAX_SECONDS
 * Prints "rank R: looping" once the first call was exact, then one line
 * "rank R: <status> after N exact calls; the failing call took S s".
 * Exit: 0 the loop ended with CHORUS_ERR_TIMEOUT or CHORUS_ERR_PEER_FAILED,
 * 3 another status, 20 wrong data, 22 no failure within MAX_SECONDS,
 * 23 no memory, 100 the communicator could not be created, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fault_case.h"
#include "fault_loop.h"

int main(int argc, char **argv)
{
    fault_case_t c = {.coll = FC_ALLREDUCE, .dtype = CHORUS_INT32, .op = CHORUS_SUM};
    fault_bufs_t b;
    chorus_comm_t comm;
    chorus_status_t status = CHORUS_OK;
    double max_s, start, post = 0;
    int calls = 0, rc = FAULT_RC_NO_ERROR;
    char label[64];

    if (argc != 3 || (c.count = strtoul(argv[1], NULL, 0)) == 0 ||
        (max_s = strtod(argv[2], NULL)) <= 0) {
        fprintf(stderr, "usage: %s COUNT MAX_SECONDS\n", argv[0]);
        return 2;
    }
    status = chorus_comm_create_from_env(&comm);
    if (status != CHORUS_OK) {
        fprintf(stderr, "fault_rank: chorus_comm_create_from_env: %s\n",
                chorus_status_string(status));
        return 100;
    }
    c.rank = chorus_comm_rank(comm);
    c.size = chorus_comm_size(comm);
    snprintf(label, sizeof(label), "rank %d/%d: allreduce", c.rank, c.size);
    if (fault_case_setup(&c, &b) != 0) {
        chorus_comm_destroy(comm);
        return FAULT_RC_NO_MEMORY;
    }
    for (start = fault_now(); fault_now() - start < max_s; calls++) {
        post = fault_now();
        status = fault_case_call(&c, comm, &b);
        if (status != CHORUS_OK)
            break;
        if (fault_case_check(&c, &b, label) != 0) {
            rc = FAULT_RC_WRONG_DATA;
            break;
        }
        if (calls == 0) {
            printf("rank %d: looping\n", c.rank);
            fflush(stdout);
        }
    }
    if (status != CHORUS_OK) {
        printf("rank %d: %s after %d exact calls; the failing call took %.3f s\n", c.rank,
               chorus_status_string(status), calls, fault_now() - post);
        rc = status == CHORUS_ERR_TIMEOUT || status == CHORUS_ERR_PEER_FAILED ? 0 : 3;
    }
    fflush(stdout);
    fault_case_free(&b);
    chorus_comm_destroy(comm);
    return rc;
}
