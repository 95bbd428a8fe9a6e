/*
 * How many of a node's ranks can run at once, each on a core of its own,
 * from the cores each may run on (its affinity mask). Ranks that share a
 * core take turns on it, so a rank waiting for one of them must give the
 * core up rather than spin; ranks bound one to a core each (as mpirun and
 * srun bind them) can all spin, though each may run on one core only.
 */
#ifndef CHORUS_TUNE_CORES_H
#define CHORUS_TUNE_CORES_H

#include <stdint.h>

/* An affinity mask as bytes, bit c of byte c / 8 for CPU c: the same on every rank. */
#define TUNE_CPU_BYTES 128
typedef struct {
    uint8_t bits[TUNE_CPU_BYTES];
} tune_cpus_t;

/* This process's mask (every online CPU when it cannot be read). */
void tune_cpus_mine(tune_cpus_t *cpus);

/*
 * The cores n ranks with these masks run on, for tune_share: the CPUs
 * their masks cover when each rank can have one of its own, else how many
 * ranks can run at once (the largest set of ranks given distinct CPUs of
 * their masks). At least 1.
 */
int tune_node_cores(const tune_cpus_t *masks, int n);

#endif
