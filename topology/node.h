/*
 * Node identity: which ranks share a machine instance (one kernel), so that
 * node-local transports and hierarchical algorithms can group them.
 */
#ifndef CHORUS_TOPOLOGY_NODE_H
#define CHORUS_TOPOLOGY_NODE_H

#include <stddef.h>
#include <stdint.h>
#include "chorus.h"

/* Longest identity, with its terminating NUL. */
#define CHORUS_NODE_ID_MAX 160

/*
 * This machine's identity: "<host name>:<kernel boot id>:<network namespace>",
 * leaving out a part that cannot be read. Characters outside [A-Za-z0-9._-]
 * become '_'. len must be at least CHORUS_NODE_ID_MAX; out is written only
 * on success.
 */
chorus_status_t chorus__node_identity(char *out, size_t len);

/*
 * The identity made of host, boot_id and netns (NULL or "" for none),
 * sanitized and bounded as above; out needs CHORUS_NODE_ID_MAX bytes.
 * Separate from chorus__node_identity so it can be tested without the machine.
 */
void chorus__node_identity_format(const char *host, const char *boot_id, const char *netns,
                                  char *out);

/*
 * Which machine instance (one kernel: host name and boot id, whatever its
 * network namespace) this process runs on, as a 64-bit hash: ranks with the
 * same one share its cores, even where they are different nodes of an
 * emulated test bed.
 */
uint64_t chorus__machine_id(void);

/*
 * Position of rank among the ranks whose identity equals its own, ordered
 * by rank, and how many such ranks there are. ids[i] is rank i's identity.
 * Outputs are written only on success.
 */
chorus_status_t chorus__local_ranks(const char *const *ids, int size, int rank,
                                    int *local_rank_p, int *local_size_p);

#endif
