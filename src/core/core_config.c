/* Configuration tables of the core, and the list of every table of the library. */
#include "core/core_config.h"

#include <stddef.h>

#include "engine/engine_config.h"
#include "topology/topo.h"
#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "tuning/tune_config.h"
#include "util/log.h"

static const chorus__config_var_t core_vars[] = {
    {"CHORUS_TIMEOUT", "300",
     "seconds any wait may last (rendezvous, connection setup, each collective) before it "
     "fails with CHORUS_ERR_TIMEOUT; a silent or dead peer is reported within this bound",
     chorus__config_parse_double, offsetof(chorus__core_config_t, timeout_s)},
    {"CHORUS_CHUNK_SIZE", "256K",
     "bytes per pipeline chunk: large messages are split so that sending one chunk "
     "overlaps reducing the previous one (K, M, G suffixes)",
     chorus__config_parse_size, offsetof(chorus__core_config_t, chunk_bytes)},
    {"CHORUS_TRANSPORT", "auto",
     "transport between ranks: tcp; ucx, where chorus was built with UCX (chorus-info lists "
     "those built in); auto, ucx where every rank's UCX finds an RDMA device that UCX_TLS "
     "allows, else tcp",
     chorus__config_parse_string, offsetof(chorus__core_config_t, transport)},
    {"CHORUS_IFADDR", "",
     "numeric local address the transport listens on; empty: the local address of the "
     "connection to the rendezvous store",
     chorus__config_parse_string, offsetof(chorus__core_config_t, ifaddr)},
    {"CHORUS_STALL_WARN", "60",
     "seconds a collective may wait before a warning names it (sequence number, "
     "collective, count, dtype) and the ranks that have not started it, found by asking "
     "every peer directly; repeated every as many seconds while it still waits; 0 turns "
     "the reports off; also, while communicator creation waits at the rendezvous, how "
     "often each rank logs which ranks have joined and which have not, as the store sees "
     "them",
     chorus__config_parse_double, offsetof(chorus__core_config_t, stall_warn_s)},
    {"CHORUS_DEBUG_CHECK", "0",
     "before each collective, every rank compares its call (collective, sequence number, "
     "count, dtype, op, root, whether it runs on the devices) with every other rank's; a mismatch fails the call on every "
     "rank with CHORUS_ERR_INVALID_ARG and a message naming both ranks and their calls, "
     "before any data moves (costs one small allgather per call; set it on every rank or "
     "on none)",
     chorus__config_parse_bool, offsetof(chorus__core_config_t, debug_check)},
    {"CHORUS_TRACE", "",
     "file prefix of a timeline: each rank writes PREFIX.<rank>.json (its rank in the job) "
     "in the Chrome trace-event format (Perfetto, chrome://tracing): a slice per "
     "collective with its stages and waits on peers, instant events for errors and stall "
     "reports; written when the last communicator is destroyed, on a fault, an abort or a "
     "failed call; chorus-trace merge puts the ranks on one timeline; empty: no trace",
     chorus__config_parse_string, offsetof(chorus__core_config_t, trace)},
    {"CHORUS_TRACE_EVENTS", "64K",
     "events the trace keeps per process (about 300 bytes each); when full the oldest are "
     "dropped and the file counts them (K, M suffixes)",
     chorus__config_parse_size, offsetof(chorus__core_config_t, trace_events)},
    {"CHORUS_PROGRESS_CALLER", "1",
     "a blocking collective that goes through the network runs the progress loop in the "
     "calling thread while it waits, when no other thread runs it then, so that the call "
     "costs no hand-over to the progress thread and no wake-up back; 0: the progress "
     "thread runs every such call and wakes the caller",
     chorus__config_parse_bool, offsetof(chorus__core_config_t, progress_caller)},
};

const chorus__config_table_t chorus__core_config_table = {
    "core", "timeouts, pipelining, transport",
    core_vars, sizeof(core_vars) / sizeof(core_vars[0]),
};

static const chorus__config_var_t launch_vars[] = {
    {"CHORUS_RANK", "",
     "this process's rank, 0 to size-1 (else torchrun's RANK)",
     chorus__config_parse_string, offsetof(chorus__launch_config_t, rank)},
    {"CHORUS_SIZE", "",
     "number of ranks in the job (else torchrun's WORLD_SIZE)",
     chorus__config_parse_string, offsetof(chorus__launch_config_t, size)},
    {"CHORUS_ADDR", "",
     "host:port of the rendezvous store, hosted by rank 0 (else MASTER_ADDR:MASTER_PORT)",
     chorus__config_parse_string, offsetof(chorus__launch_config_t, addr)},
    {"CHORUS_SECRET", "",
     "job secret every peer proves it holds (chorus-run makes one per job); when empty a "
     "value derived from the rendezvous address is used and a warning says that peers are "
     "not authenticated against outsiders",
     chorus__config_parse_string, offsetof(chorus__launch_config_t, secret)},
};

const chorus__config_table_t chorus__launch_config_table = {
    "launch", "how a communicator is created from the environment",
    launch_vars, sizeof(launch_vars) / sizeof(launch_vars[0]),
};

static const chorus__config_var_t pmpi_vars[] = {
    {"CHORUS_PMPI", "auto",
     "which MPI collectives an interposer (libchorus_pmpi_openmpi.so, "
     "libchorus_pmpi_mpich.so) serves with chorus: auto, those it can serve at the sizes "
     "where chorus was measured faster than that MPI; all, every one it can serve; none, "
     "every call goes to the MPI library",
     chorus__config_parse_string, offsetof(chorus__pmpi_config_t, serve)},
    {"CHORUS_PMPI_REPORT", "0",
     "1: at MPI_Finalize, rank 0 of an interposed program prints, per MPI function, how "
     "many calls chorus served and how many went to the MPI library, summed over the ranks",
     chorus__config_parse_bool, offsetof(chorus__pmpi_config_t, report)},
};

const chorus__config_table_t chorus__pmpi_config_table = {
    "pmpi", "the MPI interposers, which serve unmodified MPI programs' collectives",
    pmpi_vars, sizeof(pmpi_vars) / sizeof(pmpi_vars[0]),
};

size_t chorus__config_tables(const chorus__config_table_t **tables, size_t max)
{
    const chorus__config_table_t *fixed[] = {
        &chorus__launch_config_table, &chorus__log_config_table, &chorus__core_config_table,
    };
    size_t n = 0;

#define CONFIG_ADD(t)                        \
    do {                                     \
        if ((t) != NULL && n + 1 < max)      \
            tables[n++] = (t);               \
    } while (0)
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        CONFIG_ADD(fixed[i]);
    for (size_t i = 0; tl_p2p_all[i] != NULL; i++)
        CONFIG_ADD(tl_p2p_all[i]->config);
    for (size_t i = 0; tl_coll_all[i] != NULL; i++)
        CONFIG_ADD(tl_coll_all[i]->config);
    CONFIG_ADD(&topo_config_table);
    CONFIG_ADD(&tune_config_table);
    CONFIG_ADD(&engine_config_table);
    CONFIG_ADD(&chorus__pmpi_config_table);
#undef CONFIG_ADD
    tables[n] = NULL;
    return n;
}
