/* A rank body that loops a collective until a fault: see fault_loop.h. */
#include "fault_loop.h"

#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

int fault_tcp_conns(int (*conns)[2], int max)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (dir == NULL)
        return 0;
    while (n < max && (e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name), type = 0;
        socklen_t len = sizeof(type);
        struct sockaddr_in local, remote;
        socklen_t llen = sizeof(local), rlen = sizeof(remote);

        if (e->d_name[0] == '.' || fd == dirfd(dir))
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
            continue;
        if (getsockname(fd, (struct sockaddr *)&local, &llen) != 0 ||
            getpeername(fd, (struct sockaddr *)&remote, &rlen) != 0 ||
            local.sin_family != AF_INET || remote.sin_family != AF_INET)
            continue;
        conns[n][0] = ntohs(local.sin_port);
        conns[n++][1] = ntohs(remote.sin_port);
    }
    closedir(dir);
    return n;
}

static int loop_end(chorus_comm_t comm, fault_rank_state_t *st, chorus_status_t status,
                    double post)
{
    st->final_post_t = post;
    st->final_t = fault_now();
    st->final_status = status;
    return chorus_comm_get_error(comm) == status ? FAULT_RC_ENDED : FAULT_RC_COMM_ERROR;
}

int fault_loop_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const fault_loop_t *loop = arg;
    fault_rank_state_t *st = &loop->states[rank];
    fault_case_t c = loop->c;
    fault_bufs_t b;
    char label[96];
    double start;
    int conns[FAULT_MAX_CONNS][2], rc = FAULT_RC_NO_ERROR;

    c.rank = rank;
    c.size = size;
    snprintf(label, sizeof(label), "rank %d/%d: %s %s", rank, size, fault_coll_name(c.coll),
             chorus_dtype_name(c.dtype));
    if (fault_case_setup(&c, &b) != 0)
        return FAULT_RC_NO_MEMORY;
    st->nconns = fault_tcp_conns(conns, FAULT_MAX_CONNS);
    for (int i = 0; i < st->nconns; i++) {
        st->conns[i][0] = conns[i][0];
        st->conns[i][1] = conns[i][1];
    }
    st->in_loop = 1;
    start = fault_now();
    while (fault_now() - start < loop->max_s) {
        double post = fault_now();
        chorus_status_t status = fault_case_call(&c, comm, &b);

        if (status != CHORUS_OK) {
            rc = loop_end(comm, st, status, post);
            break;
        }
        if (fault_case_check(&c, &b, label) != 0) {
            rc = FAULT_RC_WRONG_DATA;
            break;
        }
        st->calls_ok++;
    }
    fault_case_free(&b);
    return rc;
}

int fault_loop_init(fault_loop_t *loop, chorus_dtype_t dtype, harness_opts_t *opts,
                    int nranks, double timeout_s)
{
    memset(loop, 0, sizeof(*loop));
    loop->c.coll = FC_ALLREDUCE;
    loop->c.dtype = dtype;
    loop->c.op = CHORUS_SUM;
    loop->c.count = 1 << 18;
    loop->max_s = 30;
    loop->states = fault_shared_alloc(FAULT_MAX_RANKS * sizeof(fault_rank_state_t));
    if (loop->states == NULL)
        return -1;
    memset(opts, 0, sizeof(*opts));
    opts->nranks = nranks;
    opts->timeout_s = timeout_s;
    opts->deadline_s = 60;
    opts->kill_rank = -1;
    return 0;
}

void fault_loop_free(fault_loop_t *loop)
{
    fault_shared_free(loop->states, FAULT_MAX_RANKS * sizeof(fault_rank_state_t));
    loop->states = NULL;
}

void *fault_shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void fault_shared_free(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes);
}

int fault_all_in_loop(const fault_rank_state_t *states, int n)
{
    for (int r = 0; r < n; r++)
        if (!states[r].in_loop)
            return 0;
    return 1;
}
