/*
 * Communicator creation and teardown: rendezvous through the bootstrap
 * store, transport connection, selection table, progress thread.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/comm_create.h"
#include "core/stall.h"
#include "topology/node.h"
#include "topology/topo.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"

#define COMM_NODE_ID_MAX CHORUS_NODE_ID_MAX

/* What each rank publishes at the rendezvous. */
typedef struct {
    char tl_addr[TL_ADDR_MAX];
    char node_id[COMM_NODE_ID_MAX];
    char place[TOPO_PLACE_MAX];     /* CPUs, NUMA, nearest NIC; filled at debug level */
    shm_card_t shm;
} comm_card_t;

/*
 * The local address from which this host reaches the store: a connected
 * UDP socket reveals the route's source address without sending anything.
 */
static chorus_status_t comm_local_host(const char *store_addr, char *host, size_t len)
{
    char name[CHORUS_SOCK_HOST_MAX], port[16];
    int port_num;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    struct sockaddr_storage local;
    socklen_t local_len = sizeof(local);
    chorus_status_t status = CHORUS_ERR_SYSTEM;
    int fd;

    if (chorus__sock_parse_addr(store_addr, name, sizeof(name), &port_num) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    snprintf(port, sizeof(port), "%d", port_num);
    if (getaddrinfo(name, port, &hints, &res) != 0 || res == NULL) {
        chorus_error("cannot resolve rendezvous address '%s'", store_addr);
        return CHORUS_ERR_INVALID_ARG;
    }
    fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 &&
        getnameinfo((struct sockaddr *)&local, local_len, host, (socklen_t)len, NULL, 0,
                    NI_NUMERICHOST) == 0)
        status = CHORUS_OK;
    else
        chorus_error("cannot find the local address that reaches '%s': %m", store_addr);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return status;
}

static chorus_status_t comm_check_args(int rank, int size, const char *addr, double timeout_s)
{
    if (size < 1) {
        chorus_error("invalid argument size=%d: must be at least 1", size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (rank < 0 || rank >= size) {
        chorus_error("invalid argument rank=%d: must be in [0, %d)", rank, size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (addr == NULL || *addr == '\0' || strchr(addr, ':') == NULL) {
        chorus_error("invalid argument addr='%s': expected host:port", addr ? addr : "(null)");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (timeout_s != timeout_s) {
        chorus_error("invalid argument timeout_s=nan");
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

static chorus_status_t comm_read_config(chorus_comm_t comm, double timeout_s)
{
    chorus_status_t status = chorus__config_read(&chorus__core_config_table, &comm->cfg);

    if (status != CHORUS_OK)
        return status;
    if (timeout_s > 0)
        comm->cfg.timeout_s = timeout_s;
    if (comm->cfg.timeout_s <= 0) {
        chorus_error("invalid value %g for CHORUS_TIMEOUT: must be positive", comm->cfg.timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (comm->cfg.chunk_bytes < 64) {
        chorus_error("invalid value %zu for CHORUS_CHUNK_SIZE: must be at least 64",
                     comm->cfg.chunk_bytes);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(comm->cfg.stall_warn_s >= 0)) {
        chorus_error("invalid value %g for CHORUS_STALL_WARN: must be 0 (off) or positive "
                     "seconds", comm->cfg.stall_warn_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    comm->tl = tl_find(comm->cfg.transport.s);
    if (comm->tl == NULL) {
        chorus_error("invalid value '%s' for CHORUS_TRANSPORT: not built in (built in: tcp)",
                     comm->cfg.transport.s);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* At debug level, where this rank runs (the map costs a hwloc discovery, tens of ms). */
static void comm_place(char *place, size_t len)
{
    topo_config_t cfg;
    topo_node_t *node = NULL;

    if (!chorus_log_enabled(CHORUS_LOG_DEBUG))
        return;
    if (chorus__config_read(&topo_config_table, &cfg) != CHORUS_OK ||
        topo_node_create(&cfg, &node) != CHORUS_OK)
        node = NULL;
    topo_place_self(node, place, len);
    topo_node_free(node);
}

/* Rank 0 at debug level: every rank's node and place. */
static void comm_log_places(chorus_comm_t comm, const comm_card_t *cards)
{
    if (comm->rank != 0 || !chorus_log_enabled(CHORUS_LOG_DEBUG))
        return;
    for (int r = 0; r < comm->size; r++)
        chorus_debug("rank %d: node %d (%s), local rank %d, %s", r, comm->layout->node_of[r],
                     cards[r].node_id, comm->layout->local_index[r],
                     cards[r].place[0] ? cards[r].place : "place not reported");
}

/* Exchange cards through the store; fills local rank/size and the transport addresses. */
static chorus_status_t comm_rendezvous(chorus_comm_t comm, const comm_create_params_t *p,
                                       const char *local_host, char *tl_addrs,
                                       uint8_t session_key[32])
{
    comm_card_t card, *cards;
    const char **ids;
    size_t len = sizeof(card.tl_addr);
    char host_seen[256];
    chorus_status_t status;

    memset(&card, 0, sizeof(card));
    status = comm->tl->get_address(comm->tl_ctx, card.tl_addr, &len);
    if (status != CHORUS_OK)
        return status;
    if (chorus__node_identity(card.node_id, sizeof(card.node_id)) != CHORUS_OK)
        snprintf(card.node_id, sizeof(card.node_id), "unknown-node");
    comm_place(card.place, sizeof(card.place));
    status = chorus__shm_region_open(comm, &card.shm);
    if (status != CHORUS_OK)
        return status;
    cards = calloc((size_t)comm->size, sizeof(*cards));
    ids = calloc((size_t)comm->size, sizeof(*ids));
    if (cards == NULL || ids == NULL) {
        status = CHORUS_ERR_NO_MEMORY;
        goto out;
    }
    status = chorus__bootstrap_exchange(p->addr, p->secret, p->secret_len, comm->rank,
                                        comm->size, comm->cfg.timeout_s, &card, sizeof(card),
                                        cards, session_key, host_seen, sizeof(host_seen));
    if (status != CHORUS_OK)
        goto out;
    for (int r = 0; r < comm->size; r++) {
        cards[r].node_id[COMM_NODE_ID_MAX - 1] = '\0';
        cards[r].place[TOPO_PLACE_MAX - 1] = '\0';
        ids[r] = cards[r].node_id;
        memcpy(tl_addrs + (size_t)r * TL_ADDR_MAX, cards[r].tl_addr, TL_ADDR_MAX);
    }
    status = topo_layout_build(ids, comm->size, &comm->layout);
    if (status == CHORUS_OK) {
        comm->local_rank = comm->layout->local_index[comm->rank];
        comm->local_size = topo_layout_node_size(comm->layout,
                                                 comm->layout->node_of[comm->rank]);
    }
    if (status == CHORUS_OK && comm->rank == 0 && comm->layout->nnodes > 1 &&
        chorus_log_enabled(CHORUS_LOG_INFO)) {
        char shape[128];
        topo_layout_shape(comm->layout, shape, sizeof(shape));
        chorus_info("%d ranks on %d nodes (ranks per node %s)", comm->size,
                    comm->layout->nnodes, shape);
    }
    if (status == CHORUS_OK)
        comm_log_places(comm, cards);
    /* One node holds every rank: keep the shared-memory cards (local rank = rank). */
    if (status == CHORUS_OK && comm->local_size == comm->size && comm->size > 1) {
        comm->shm_cards = calloc((size_t)comm->size, sizeof(*comm->shm_cards));
        if (comm->shm_cards == NULL)
            status = CHORUS_ERR_NO_MEMORY;
        for (int r = 0; comm->shm_cards != NULL && r < comm->size; r++)
            comm->shm_cards[r] = cards[r].shm;
    }
    chorus_debug("rank %d: rendezvous done at %s (local %s, seen by store as %s), local rank "
                 "%d of %d", comm->rank, p->addr, local_host, host_seen, comm->local_rank,
                 comm->local_size);
out:
    free(ids);
    free(cards);
    return status;
}

/*
 * The key transport connections prove they hold: derived from the job secret
 * and the rendezvous address, so it is known before the rendezvous (the
 * transport listens before its address is published) and differs per job.
 */
static void comm_transport_key(const comm_create_params_t *p, uint8_t key[CHORUS_SHA256_BYTES])
{
    char label[512];
    int len = snprintf(label, sizeof(label), "chorus transport key %s", p->addr);

    chorus__hmac_sha256(p->secret, p->secret_len, label, (size_t)len, key);
}

static chorus_status_t comm_connect(chorus_comm_t comm, const comm_create_params_t *p)
{
    tl_ctx_params_t tlp;
    uint8_t session_key[32], tl_key[CHORUS_SHA256_BYTES];
    char local_host[256], *tl_addrs;
    chorus_status_t status;

    if (comm->cfg.ifaddr.s[0] != '\0')
        snprintf(local_host, sizeof(local_host), "%s", comm->cfg.ifaddr.s);
    else if ((status = comm_local_host(p->addr, local_host, sizeof(local_host))) != CHORUS_OK)
        return status;
    memset(&tlp, 0, sizeof(tlp));
    tlp.rank = comm->rank;
    tlp.size = comm->size;
    tlp.bind_host = local_host;
    tlp.timeout_s = comm->cfg.timeout_s;
    comm_transport_key(p, tl_key);
    tlp.auth_key = tl_key;
    tlp.auth_key_len = sizeof(tl_key);
    status = comm->tl->ctx_create(&tlp, &comm->tl_ctx);
    if (status != CHORUS_OK)
        return status;
    tl_addrs = calloc((size_t)comm->size, TL_ADDR_MAX);
    if (tl_addrs == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = comm_rendezvous(comm, p, local_host, tl_addrs, session_key);
    if (status == CHORUS_OK)
        status = comm->tl->connect_all(comm->tl_ctx, tl_addrs);
    free(tl_addrs);
    return status;
}

/* Rank 0 at debug level: the job's layout and the selection table, as chorus-info prints them. */
static void comm_log_tune(chorus_comm_t comm)
{
    char *text = NULL, *line, *save = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL)
        return;
    topo_layout_print(f, comm->layout, NULL, "");
    tune_table_print(f, comm->tune);
    fclose(f);
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        chorus_debug("%s", line);
    free(text);
}

static chorus_status_t comm_build_tune(chorus_comm_t comm)
{
    tune_config_t tcfg;
    tune_spread_t spread;
    chorus_status_t status = chorus__config_read(&tune_config_table, &tcfg);

    if (status != CHORUS_OK)
        return status;
    tune_spread_of(comm->layout, &spread);
    status = tune_table_create_job(&tcfg, comm->size, comm->cfg.chunk_bytes,
                                   comm->shm != NULL ? &comm->shm_agreed : NULL, &spread,
                                   &comm->tune);
    if (status == CHORUS_OK && comm->rank == 0 && chorus_log_enabled(CHORUS_LOG_DEBUG))
        comm_log_tune(comm);
    return status;
}

chorus_status_t chorus__comm_create(const comm_create_params_t *p, chorus_comm_t *comm_p)
{
    chorus__store_t *store = NULL;
    char store_addr[CHORUS_SOCK_ADDR_MAX];
    chorus_comm_t comm;
    chorus_status_t status;

    chorus__log_init();
    if (comm_p == NULL) {
        chorus_error("invalid argument comm_p=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    status = comm_check_args(p->rank, p->size, p->addr, p->timeout_s);
    if (status != CHORUS_OK)
        return status;
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return CHORUS_ERR_NO_MEMORY;
    comm->rank = p->rank;
    comm->size = p->size;
    comm->local_rank = 0;
    comm->local_size = 1;
    comm->epoll_fd = comm->wake_fd = -1;
    pthread_mutex_init(&comm->lock, NULL);
    coll_pool_init(&comm->scratch_pool);
    {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&comm->cond, &attr);
        pthread_condattr_destroy(&attr);
    }
    status = comm_read_config(comm, p->timeout_s);
    if (status != CHORUS_OK)
        goto err_free;
    if (p->host_store && p->rank == 0) {
        status = chorus__store_start(p->addr, p->secret, p->secret_len, comm->cfg.timeout_s,
                                     0, store_addr, sizeof(store_addr), &store);
        if (status != CHORUS_OK)
            goto err_free;
    }
    status = comm_connect(comm, p);
    if (store != NULL) {
        chorus_status_t store_status = chorus__store_join(store);
        if (status == CHORUS_OK)
            status = store_status;
    }
    if (status != CHORUS_OK)
        goto err_tl;
    status = chorus__progress_start(comm);
    if (status != CHORUS_OK)
        goto err_tl;
    /* After the progress thread: the ranks agree over the transport whether shm works. */
    status = chorus__shm_setup(comm);
    if (status == CHORUS_OK)
        status = comm_build_tune(comm);
    if (status != CHORUS_OK)
        goto err_progress;
    chorus_info("rank %d of %d: communicator ready (local rank %d of %d, transport %s)",
                comm->rank, comm->size, comm->local_rank, comm->local_size, comm->tl->name);
    *comm_p = comm;
    return CHORUS_OK;

err_progress:
    chorus__progress_stop(comm);
    chorus__shm_close(comm);
    comm->tl->ctx_destroy(comm->tl_ctx);
    chorus__stall_destroy(comm->stall);
    goto err_free;
err_tl:
    chorus__shm_close(comm);
    if (comm->tl_ctx)
        comm->tl->ctx_destroy(comm->tl_ctx);
err_free:
    topo_layout_free(comm->layout);
    coll_pool_destroy(&comm->scratch_pool);
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
    return status;
}

chorus_status_t chorus_comm_destroy(chorus_comm_t comm)
{
    chorus_status_t status = CHORUS_OK;
    double deadline;

    if (comm == NULL) {
        chorus_error("chorus_comm_destroy: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    deadline = chorus__now() + comm->cfg.timeout_s;
    pthread_mutex_lock(&comm->lock);
    while (comm->outstanding > 0 && chorus__now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&comm->cond, &comm->lock, &ts);
    }
    if (comm->outstanding > 0) {
        chorus_error("rank %d: destroying the communicator with %d operations still pending",
                     comm->rank, comm->outstanding);
        status = CHORUS_ERR_TIMEOUT;
    }
    pthread_mutex_unlock(&comm->lock);
    chorus__progress_stop(comm);
    comm->tl->ctx_destroy(comm->tl_ctx);
    /* After the transport: it held the control receives' buffers until then. */
    chorus__stall_destroy(comm->stall);
    tune_table_destroy(comm->tune);
    topo_layout_free(comm->layout);
    chorus__shm_close(comm);
    coll_pool_destroy(&comm->scratch_pool);
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
    return status;
}

chorus_status_t chorus_comm_abort(chorus_comm_t comm)
{
    if (comm == NULL) {
        chorus_error("chorus_comm_abort: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    chorus__comm_set_error(comm, CHORUS_ERR_ABORTED);
    atomic_store(&comm->aborted, 1);
    chorus__progress_wake(comm);
    return CHORUS_OK;
}

chorus_status_t chorus_comm_get_error(chorus_comm_t comm)
{
    if (comm == NULL) {
        chorus_error("chorus_comm_get_error: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    return (chorus_status_t)atomic_load(&comm->error);
}

int chorus_comm_rank(chorus_comm_t comm) { return comm ? comm->rank : -1; }
int chorus_comm_size(chorus_comm_t comm) { return comm ? comm->size : -1; }
int chorus_comm_local_rank(chorus_comm_t comm) { return comm ? comm->local_rank : -1; }
int chorus_comm_local_size(chorus_comm_t comm) { return comm ? comm->local_size : -1; }
int chorus_comm_node_count(chorus_comm_t comm) { return comm ? comm->layout->nnodes : -1; }

int chorus_comm_node(chorus_comm_t comm, int rank)
{
    if (comm == NULL || rank < 0 || rank >= comm->size)
        return -1;
    return comm->layout->node_of[rank];
}
