/*
 * The first communicator of a job: every rank meets at the bootstrap store,
 * which exchanges what each rank publishes (the transports' addresses, its
 * node's identity, at debug level its place on the machine). From that the
 * context is built (its transports listen before the exchange, so the
 * addresses are live when published), and the communicator of every rank
 * opens over it.
 */
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/comm_create.h"
#include "topology/node.h"
#include "topology/topo.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"

#define RDV_NODE_ID_MAX CHORUS_NODE_ID_MAX
/* Secrets shorter than this many bytes are warned about. */
#define RDV_SECRET_MIN 16

/* What each rank publishes at the rendezvous. */
typedef struct {
    char tl_addr[CHORUS__LANES_MAX][TL_ADDR_MAX];
    char node_id[RDV_NODE_ID_MAX];
    char place[TOPO_PLACE_MAX];     /* CPUs, NUMA, nearest NIC; filled at debug level */
} rdv_card_t;

/*
 * The local address from which this host reaches the store: a connected
 * UDP socket reveals the route's source address without sending anything.
 */
static chorus_status_t rdv_local_host(const char *store_addr, char *host, size_t len)
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

static chorus_status_t rdv_check_args(int rank, int size, const char *addr, double timeout_s)
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

/* At debug level, where this rank runs (the map costs a hwloc discovery, tens of ms). */
static void rdv_place(char *place, size_t len)
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
static void rdv_log_places(int rank, int size, const topo_layout_t *layout,
                           const rdv_card_t *cards)
{
    if (rank != 0 || !chorus_log_enabled(CHORUS_LOG_DEBUG))
        return;
    for (int r = 0; r < size; r++)
        chorus_debug("rank %d: node %d (%s), local rank %d, %s", r, layout->node_of[r],
                     cards[r].node_id, layout->local_index[r],
                     cards[r].place[0] ? cards[r].place : "place not reported");
}

/* Exchange cards through the store; returns the job's layout and every rank's addresses. */
static chorus_status_t rdv_exchange(chorus__ctx_t *ctx, const comm_create_params_t *p,
                                    const char *local_host, topo_layout_t **layout_p,
                                    char **addrs_p)
{
    const size_t lanes = (size_t)CHORUS__LANES_MAX * TL_ADDR_MAX;
    const chorus__boot_client_params_t client = {
        .addr = p->addr, .secret = p->secret, .secret_len = p->secret_len, .rank = p->rank,
        .size = p->size, .timeout_s = ctx->cfg.timeout_s, .report_s = ctx->cfg.stall_warn_s};
    rdv_card_t card, *cards;
    const char **ids;
    uint8_t session_key[32];
    char host_seen[256], *addrs = NULL;
    chorus_status_t status;

    memset(&card, 0, sizeof(card));
    status = chorus__ctx_address(ctx, card.tl_addr[0]);
    if (status != CHORUS_OK)
        return status;
    if (chorus__node_identity(card.node_id, sizeof(card.node_id)) != CHORUS_OK)
        snprintf(card.node_id, sizeof(card.node_id), "unknown-node");
    rdv_place(card.place, sizeof(card.place));
    cards = calloc((size_t)p->size, sizeof(*cards));
    ids = calloc((size_t)p->size, sizeof(*ids));
    addrs = calloc((size_t)p->size, lanes);
    if (cards == NULL || ids == NULL || addrs == NULL) {
        status = CHORUS_ERR_NO_MEMORY;
        goto out;
    }
    status = chorus__bootstrap_exchange(&client, &card, sizeof(card), cards, session_key,
                                        host_seen, sizeof(host_seen));
    if (status != CHORUS_OK)
        goto out;
    for (int r = 0; r < p->size; r++) {
        cards[r].node_id[RDV_NODE_ID_MAX - 1] = '\0';
        cards[r].place[TOPO_PLACE_MAX - 1] = '\0';
        ids[r] = cards[r].node_id;
        memcpy(addrs + (size_t)r * lanes, cards[r].tl_addr, lanes);
    }
    status = topo_layout_build(ids, p->size, layout_p);
    if (status != CHORUS_OK)
        goto out;
    if (p->rank == 0 && (*layout_p)->nnodes > 1 && chorus_log_enabled(CHORUS_LOG_INFO)) {
        char shape[128];
        topo_layout_shape(*layout_p, shape, sizeof(shape));
        chorus_info("%d ranks on %d nodes (ranks per node %s)", p->size, (*layout_p)->nnodes,
                    shape);
    }
    rdv_log_places(p->rank, p->size, *layout_p, cards);
    chorus_debug("rank %d: rendezvous done at %s (local %s, seen by store as %s)", p->rank,
                 p->addr, local_host, host_seen);
    *addrs_p = addrs;
    addrs = NULL;
out:
    free(addrs);
    free(ids);
    free(cards);
    return status;
}

/*
 * The key transport connections prove they hold: derived from the job secret
 * and the rendezvous address, so it is known before the rendezvous (the
 * transport listens before its address is published) and differs per job.
 */
static void rdv_transport_key(const comm_create_params_t *p, uint8_t key[CHORUS_SHA256_BYTES])
{
    char label[512];
    int len = snprintf(label, sizeof(label), "chorus transport key %s", p->addr);

    chorus__hmac_sha256(p->secret, p->secret_len, label, (size_t)len, key);
}

/* The context of the job, started: transports listening and reaching every peer. */
static chorus_status_t rdv_context(const comm_create_params_t *p, chorus__ctx_t **ctx_p)
{
    uint8_t tl_key[CHORUS_SHA256_BYTES];
    char local_host[256], *addrs = NULL;
    chorus__ctx_params_t cp = {.rank = p->rank, .size = p->size, .bind_host = local_host,
                               .tl_key = tl_key, .tl_key_len = sizeof(tl_key)};
    topo_layout_t *layout = NULL;
    chorus__ctx_t *ctx;
    chorus_status_t status;
    chorus__core_config_t cfg;

    status = chorus__config_read(&chorus__core_config_table, &cfg);
    if (status != CHORUS_OK)
        return status;
    if (cfg.ifaddr.s[0] != '\0')
        snprintf(local_host, sizeof(local_host), "%s", cfg.ifaddr.s);
    else if ((status = rdv_local_host(p->addr, local_host, sizeof(local_host))) != CHORUS_OK)
        return status;
    rdv_transport_key(p, tl_key);
    status = chorus__ctx_create(&cp, p->timeout_s, &ctx);
    if (status != CHORUS_OK)
        return status;
    status = rdv_exchange(ctx, p, local_host, &layout, &addrs);
    if (status == CHORUS_OK)
        status = chorus__ctx_start(ctx, addrs, layout);
    else
        topo_layout_free(layout);
    free(addrs);
    if (status != CHORUS_OK) {
        /* No communicator holds it yet: one reference, dropped at once, frees it. */
        ctx->refs = 1;
        chorus__ctx_release(ctx);
        return status;
    }
    *ctx_p = ctx;
    return CHORUS_OK;
}

/*
 * A short secret can be guessed offline from one recorded handshake; say so
 * once per process, whichever rank or communicator uses it first.
 */
static void rdv_check_secret(const comm_create_params_t *p)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;

    if (p->secret_len >= RDV_SECRET_MIN || atomic_flag_test_and_set(&warned))
        return;
    chorus_warn("rank %d: the job secret has %zu bytes; use at least %d random bytes (e.g. "
                "32 hex digits), since a short one can be guessed from a recorded rendezvous",
                p->rank, p->secret_len, RDV_SECRET_MIN);
}

chorus_status_t chorus__comm_create(const comm_create_params_t *p, chorus_comm_t *comm_p)
{
    chorus__store_t *store = NULL;
    char store_addr[CHORUS_SOCK_ADDR_MAX];
    chorus__ctx_t *ctx = NULL;
    chorus_status_t status;
    int *ranks;

    chorus__log_init();
    if (comm_p == NULL) {
        chorus_error("invalid argument comm_p=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    status = rdv_check_args(p->rank, p->size, p->addr, p->timeout_s);
    if (status != CHORUS_OK)
        return status;
    rdv_check_secret(p);
    if (p->host_store && p->rank == 0) {
        chorus__core_config_t cfg;
        double timeout = p->timeout_s;

        if (timeout <= 0 && chorus__config_read(&chorus__core_config_table, &cfg) == CHORUS_OK)
            timeout = cfg.timeout_s;
        status = chorus__store_start(p->addr, p->secret, p->secret_len, timeout, 0, store_addr,
                                     sizeof(store_addr), &store);
        if (status != CHORUS_OK)
            return status;
    }
    status = rdv_context(p, &ctx);
    if (store != NULL) {
        chorus_status_t store_status = chorus__store_join(store);
        if (status == CHORUS_OK)
            status = store_status;
    }
    if (status != CHORUS_OK) {
        if (ctx != NULL) {
            ctx->refs = 1;
            chorus__ctx_release(ctx);
        }
        return status;
    }
    ranks = malloc((size_t)p->size * sizeof(*ranks));
    if (ranks == NULL) {
        ctx->refs = 1;
        chorus__ctx_release(ctx);
        return CHORUS_ERR_NO_MEMORY;
    }
    for (int r = 0; r < p->size; r++)
        ranks[r] = r;
    /* The communicator of every rank of the job; its failure frees the context. */
    status = chorus__comm_open(ctx, ranks, p->size, 0, comm_p);
    if (status == CHORUS_OK)
        chorus_info("rank %d of %d: communicator ready (local rank %d of %d, transport %s)",
                    p->rank, p->size, (*comm_p)->local_rank, (*comm_p)->local_size,
                    chorus__ctx_net_name(ctx));
    return status;
}
