/*
 * Public constructors: from explicit arguments, from the environment
 * (chorus's variables or torchrun's), and from a unique id.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm_create.h"
#include "core/core_config.h"
#include "util/log.h"
#include "util/sha256.h"

#define UNIQUE_ID_MAGIC "chorus-id-1"
#define INSECURE_PREFIX "chorus-unauthenticated:"

/* Without a secret, peers only prove they know the address: say so once, on rank 0. */
static const char *derive_secret(const char *secret, const char *addr, int rank, char *buf,
                                 size_t len)
{
    if (secret != NULL && *secret != '\0')
        return secret;
    if (rank == 0)
        chorus_warn("no CHORUS_SECRET set: using a secret derived from the rendezvous address "
                    "%s, so peers are not authenticated against outsiders (chorus-run sets "
                    "one per job)", addr);
    snprintf(buf, len, INSECURE_PREFIX "%s", addr);
    return buf;
}

static chorus_status_t create_with_secret(int rank, int size, const char *addr,
                                          const char *secret, double timeout_s,
                                          chorus_comm_t *comm_p)
{
    char derived[CHORUS_CONFIG_STR_MAX + sizeof(INSECURE_PREFIX)];
    comm_create_params_t p = {
        .rank = rank, .size = size, .addr = addr, .timeout_s = timeout_s, .host_store = 1,
    };

    chorus__log_init();
    if (addr == NULL) {
        chorus_error("invalid argument addr=NULL: expected host:port");
        return CHORUS_ERR_INVALID_ARG;
    }
    p.secret = derive_secret(secret, addr, rank, derived, sizeof(derived));
    p.secret_len = strlen(p.secret);
    return chorus__comm_create(&p, comm_p);
}

chorus_status_t chorus_comm_create(int rank, int size, const char *addr, const char *secret,
                                   double timeout_s, chorus_comm_t *comm_p)
{
    chorus__launch_config_t launch;

    if (secret == NULL || *secret == '\0') {
        chorus__log_init();
        if (chorus__config_read(&chorus__launch_config_table, &launch) != CHORUS_OK)
            return CHORUS_ERR_INVALID_ARG;
        secret = launch.secret.s;
    }
    return create_with_secret(rank, size, addr, secret, timeout_s, comm_p);
}

/* An integer variable: CHORUS_X (already read into text) or the torchrun name. */
static chorus_status_t env_int(const char *text, const char *chorus_name, const char *torch_name,
                               int *value_p)
{
    const char *name = chorus_name;
    char *end;
    long v;

    if (text[0] == '\0') {
        text = getenv(torch_name);
        name = torch_name;
    }
    if (text == NULL || *text == '\0') {
        chorus_error("neither %s nor %s is set: cannot create a communicator from the "
                     "environment", chorus_name, torch_name);
        return CHORUS_ERR_INVALID_ARG;
    }
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 0 || v > INT_MAX) {
        chorus_error("invalid value '%s' for %s: expected a non-negative integer", text, name);
        return CHORUS_ERR_INVALID_ARG;
    }
    *value_p = (int)v;
    return CHORUS_OK;
}

chorus_status_t chorus_comm_create_from_env(chorus_comm_t *comm_p)
{
    chorus__launch_config_t launch;
    char addr[CHORUS_CONFIG_STR_MAX + 16];
    int rank, size;

    chorus__log_init();
    if (chorus__config_read(&chorus__launch_config_table, &launch) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (env_int(launch.rank.s, "CHORUS_RANK", "RANK", &rank) != CHORUS_OK ||
        env_int(launch.size.s, "CHORUS_SIZE", "WORLD_SIZE", &size) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (launch.addr.s[0] != '\0') {
        snprintf(addr, sizeof(addr), "%s", launch.addr.s);
    } else {
        const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (host == NULL || *host == '\0' || port == NULL || *port == '\0') {
            chorus_error("neither CHORUS_ADDR nor MASTER_ADDR and MASTER_PORT are set: no "
                         "rendezvous address");
            return CHORUS_ERR_INVALID_ARG;
        }
        snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
    }
    return create_with_secret(rank, size, addr, launch.secret.s, 0, comm_p);
}

/* The address other hosts reach this one at: CHORUS_IFADDR, the host name's, or loopback. */
static void unique_id_host(char *host, size_t len)
{
    char name[256];
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    const char *ifaddr = getenv("CHORUS_IFADDR");

    if (ifaddr != NULL && *ifaddr != '\0') {
        snprintf(host, len, "%s", ifaddr);
        return;
    }
    snprintf(host, len, "127.0.0.1");
    if (gethostname(name, sizeof(name)) != 0 || getaddrinfo(name, NULL, &hints, &res) != 0)
        return;
    if (res != NULL)
        getnameinfo(res->ai_addr, res->ai_addrlen, host, (socklen_t)len, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
}

chorus_status_t chorus_unique_id_create(chorus_unique_id_t *id_p)
{
    chorus__core_config_t cfg;
    chorus__store_t *store;
    uint8_t raw[32];
    char host[128], listen_addr[160], bound[160], secret[2 * sizeof(raw) + 1];
    chorus_status_t status;

    chorus__log_init();
    if (id_p == NULL) {
        chorus_error("invalid argument id_p=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    status = chorus__config_read(&chorus__core_config_table, &cfg);
    if (status != CHORUS_OK)
        return status;
    if (chorus__random_bytes(raw, sizeof(raw)) != 0)
        return CHORUS_ERR_SYSTEM;
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(secret + 2 * i, 3, "%02x", raw[i]);
    unique_id_host(host, sizeof(host));
    snprintf(listen_addr, sizeof(listen_addr), strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    status = chorus__store_start(listen_addr, secret, strlen(secret), cfg.timeout_s, 1, bound,
                                 sizeof(bound), &store);
    if (status != CHORUS_OK)
        return status;
    memset(id_p, 0, sizeof(*id_p));
    snprintf(id_p->bytes, sizeof(id_p->bytes), "%s %s %s", UNIQUE_ID_MAGIC, bound, secret);
    return CHORUS_OK;
}

chorus_status_t chorus_comm_create_from_id(int rank, int size, const chorus_unique_id_t *id,
                                           double timeout_s, chorus_comm_t *comm_p)
{
    char magic[16], addr[160], secret[80];
    comm_create_params_t p = {.rank = rank, .size = size, .timeout_s = timeout_s};

    chorus__log_init();
    if (id == NULL || memchr(id->bytes, '\0', sizeof(id->bytes)) == NULL ||
        sscanf(id->bytes, "%15s %159s %79s", magic, addr, secret) != 3 ||
        strcmp(magic, UNIQUE_ID_MAGIC) != 0) {
        chorus_error("invalid argument id: not made by chorus_unique_id_create");
        return CHORUS_ERR_INVALID_ARG;
    }
    p.addr = addr;
    p.secret = secret;
    p.secret_len = strlen(secret);
    return chorus__comm_create(&p, comm_p);
}
