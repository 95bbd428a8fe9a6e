/*
 * Public constructors: from explicit arguments, from the environment
 * (chorus's variables, torchrun's, a PMIx server's, or the rank variables of
 * mpirun and srun), and from a unique id.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"

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

/*
 * Where rank and size come from, in order: chorus's own variables (read
 * through the launch table), torchrun's, Open MPI's, those of MPICH's
 * process managers (PMI), Slurm's.
 */
static const struct {
    const char *rank, *size, *launcher;
    int sets_addr;              /* it sets the rendezvous address too */
} launch_vars[] = {
    {"CHORUS_RANK", "CHORUS_SIZE", "chorus-run", 1},
    {"RANK", "WORLD_SIZE", "torchrun", 1},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun", 0},
    {"PMI_RANK", "PMI_SIZE", "a PMI process manager (MPICH's mpiexec)", 0},
    {"SLURM_PROCID", "SLURM_NTASKS", "srun", 0},
};

/* A variable's value, or NULL when unset or empty; chorus's own come from launch. */
static const char *launch_value(const chorus__launch_config_t *launch, const char *name)
{
    const char *v = strcmp(name, "CHORUS_RANK") == 0   ? launch->rank.s
                    : strcmp(name, "CHORUS_SIZE") == 0 ? launch->size.s
                                                       : getenv(name);

    return v != NULL && *v != '\0' ? v : NULL;
}

/* A non-negative int from variable name's value text. */
static chorus_status_t env_int(const char *text, const char *name, int *value_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 0 || v > INT_MAX) {
        chorus_error("invalid value '%s' for %s: expected a non-negative integer", text, name);
        return CHORUS_ERR_INVALID_ARG;
    }
    *value_p = (int)v;
    return CHORUS_OK;
}

/*
 * The port of chorus's rendezvous store from MASTER_PORT: that port, or the
 * next one under torchrun's agent (TORCHELASTIC_RUN_ID set), whose own store
 * holds MASTER_PORT for the job's life. Every rank sees the same variables,
 * so all agree.
 */
static chorus_status_t torchrun_port(const char *text, unsigned *port_p)
{
    int port;

    if (env_int(text, "MASTER_PORT", &port) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (port < 1 || port > 65535) {
        chorus_error("invalid value '%s' for MASTER_PORT: expected a port, 1 to 65535", text);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (getenv("TORCHELASTIC_RUN_ID") != NULL) {
        if (port == 65535) {
            chorus_error("MASTER_PORT is 65535 under torchrun, whose agent holds it: no next "
                         "port for chorus's rendezvous; set CHORUS_ADDR");
            return CHORUS_ERR_INVALID_ARG;
        }
        chorus_debug("under torchrun's agent, which holds MASTER_PORT %d: chorus's "
                     "rendezvous is at port %d", port, port + 1);
        port++;
    }
    *port_p = (unsigned)port;
    return CHORUS_OK;
}

/* Rank and size from the first launcher whose rank variable is set; *i_p: which. */
static chorus_status_t launch_rank_size(const chorus__launch_config_t *launch, int *rank_p,
                                        int *size_p, size_t *i_p)
{
    const size_t n = sizeof(launch_vars) / sizeof(launch_vars[0]);

    for (size_t i = 0; i < n; i++) {
        const char *rank = launch_value(launch, launch_vars[i].rank);
        const char *size = launch_value(launch, launch_vars[i].size);

        if (rank == NULL)
            continue;
        if (size == NULL) {
            chorus_error("%s is set but %s is not: cannot create a communicator from the "
                         "environment", launch_vars[i].rank, launch_vars[i].size);
            return CHORUS_ERR_INVALID_ARG;
        }
        *i_p = i;
        if (env_int(rank, launch_vars[i].rank, rank_p) != CHORUS_OK ||
            env_int(size, launch_vars[i].size, size_p) != CHORUS_OK)
            return CHORUS_ERR_INVALID_ARG;
        return CHORUS_OK;
    }
    chorus_error("no rank in the environment: set CHORUS_RANK and CHORUS_SIZE (chorus-run "
                 "does), or start the program under torchrun, mpirun or srun");
    return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus_comm_create_from_env(chorus_comm_t *comm_p)
{
    chorus__launch_config_t launch;
    char addr[CHORUS_CONFIG_STR_MAX + 16];
    size_t from = 0;
    unsigned store_port = 0;
    int rank, size;
    chorus_status_t status;

    chorus__log_init();
    if (chorus__config_read(&chorus__launch_config_table, &launch) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    /*
     * Under a PMIx server (Open MPI's mpirun, srun --mpi=pmix), unless chorus's or torchrun's
     * variables say otherwise.
     */
    if (launch_value(&launch, "PMIX_NAMESPACE") != NULL &&
        launch_value(&launch, "PMIX_RANK") != NULL &&
        launch_value(&launch, "CHORUS_RANK") == NULL && launch_value(&launch, "RANK") == NULL) {
#ifdef HAVE_PMIX
        chorus__core_config_t cfg;

        if (chorus__config_read(&chorus__core_config_table, &cfg) != CHORUS_OK)
            return CHORUS_ERR_INVALID_ARG;
        return chorus__launch_pmix(cfg.timeout_s, comm_p);
#else
        chorus_debug("a PMIx server launched this process, but chorus was built without "
                     "PMIx: reading the launcher's rank variables instead");
#endif
    }
    if (launch_rank_size(&launch, &rank, &size, &from) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (launch.addr.s[0] != '\0') {
        snprintf(addr, sizeof(addr), "%s", launch.addr.s);
    } else {
        const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (host == NULL || *host == '\0' || port == NULL || *port == '\0') {
            int hint = !launch_vars[from].sets_addr;

            chorus_error("neither CHORUS_ADDR nor MASTER_ADDR and MASTER_PORT are set: no "
                         "rendezvous address%s%s%s", hint ? " (ranks from " : "",
                         hint ? launch_vars[from].launcher : "",
                         hint ? ", which does not give one: set CHORUS_ADDR to a host:port "
                                "where rank 0 can listen)" : "");
            return CHORUS_ERR_INVALID_ARG;
        }
        if (torchrun_port(port, &store_port) != CHORUS_OK)
            return CHORUS_ERR_INVALID_ARG;
        snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
                 store_port);
    }
    status = create_with_secret(rank, size, addr, launch.secret.s, 0, comm_p);
    if (status == CHORUS_ERR_IN_USE && rank == 0 && store_port != 0 &&
        getenv("TORCHELASTIC_RUN_ID") != NULL)
        chorus_error("under torchrun, chorus's rendezvous is at MASTER_PORT + 1 (%u); when "
                     "another socket holds that port, start torchrun with --master-port P "
                     "where P + 1 is free (below 32768, where Linux's default range gives "
                     "connections no ports), or set CHORUS_ADDR", store_port);
    return status;
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
