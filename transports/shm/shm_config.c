/* Configuration of the node-local shared-memory path. */
#include <stddef.h>

#include "transports/shm/shm.h"

static const chorus__config_var_t shm_vars[] = {
    {"CHORUS_SHM", "1",
     "when every rank of a communicator is on one node, run its collectives through shared "
     "memory (0: over the network transport like any other communicator)",
     chorus__config_parse_bool, offsetof(shm_config_t, enabled)},
    {"CHORUS_SHM_SLOT_SIZE", "256K",
     "bytes per staging slot; each rank has two, and a large call moves through them in "
     "rounds of one slot (a multiple of 64 from 4K to 1G, the same on every rank)",
     chorus__config_parse_size, offsetof(shm_config_t, slot_bytes)},
    {"CHORUS_SHM_CMA", "1",
     "allow single-copy transfers between the ranks' own buffers with cross-memory attach "
     "(process_vm_readv); used only when it works towards every local peer, checked when "
     "the communicator is created",
     chorus__config_parse_bool, offsetof(shm_config_t, cma)},
    {"CHORUS_SHM_NT_THRESHOLD", "8M",
     "calls of at least this many bytes write their results with non-temporal stores, "
     "which bypass the cache (K, M, G suffixes)",
     chorus__config_parse_size, offsetof(shm_config_t, nt_bytes)},
    {"CHORUS_SHM_SPIN", "2000",
     "most polls of a peer's flag before a waiting rank yields its core and then sleeps, "
     "when every local rank has a core of its own (each rank spins twice what its recent "
     "waits took, less after a peer that posted late); with more local ranks than cores a "
     "waiting rank yields at once, and 64 times instead of 8 before it sleeps",
     chorus__config_parse_size, offsetof(shm_config_t, spin)},
    {"CHORUS_SHM_CUDA", "1",
     "let calls on CUDA device buffers that every rank makes with mem_type CHORUS_MEM_CUDA "
     "run on the devices, each rank's kernels reading and writing its local peers' buffers "
     "through CUDA IPC; used only when every local rank has a device that every other "
     "one's kernels reach, checked when the communicator is created (0: such calls are "
     "staged through host memory)",
     chorus__config_parse_bool, offsetof(shm_config_t, cuda)},
    {"CHORUS_SHM_MEMBARRIER", "1",
     "let a rank post its steps without a locked instruction: a peer that goes to sleep "
     "on them makes every local rank's CPU pass a barrier instead (membarrier(2)); used "
     "only when every local rank's kernel allows it and the local ranks have a core each "
     "(0: each post is a full fence)",
     chorus__config_parse_bool, offsetof(shm_config_t, membarrier)},
};

const chorus__config_table_t shm_config_table = {
    "shm", "node-local collectives through shared memory",
    shm_vars, sizeof(shm_vars) / sizeof(shm_vars[0]),
};
