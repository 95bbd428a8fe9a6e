/*
 * The cores a node's ranks run on at once: a largest matching of ranks to
 * distinct CPUs of their masks (augmenting paths), which counts ranks bound
 * to a core each as running at once and ranks bound to the same core as
 * taking turns.
 */
#include "tuning/cores.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TUNE_CPUS (TUNE_CPU_BYTES * 8)

static int has(const tune_cpus_t *m, int c)
{
    return (m->bits[c / 8] >> (c % 8)) & 1;
}

void tune_cpus_mine(tune_cpus_t *cpus)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int any = 0;

    memset(cpus, 0, sizeof(*cpus));
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < TUNE_CPUS && c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &set)) {
                cpus->bits[c / 8] |= (uint8_t)(1u << (c % 8));
                any = 1;
            }
        }
    }
    for (int c = 0; !any && c < TUNE_CPUS && c < (online > 0 ? online : 1); c++)
        cpus->bits[c / 8] |= (uint8_t)(1u << (c % 8));
}

/* Kuhn's step: give rank r a CPU, moving ranks already placed where that frees one. */
static int place(const tune_cpus_t *masks, int r, int *owner, uint8_t *seen)
{
    for (int c = 0; c < TUNE_CPUS; c++) {
        if (!has(&masks[r], c) || seen[c])
            continue;
        seen[c] = 1;
        if (owner[c] < 0 || place(masks, owner[c], owner, seen)) {
            owner[c] = r;
            return 1;
        }
    }
    return 0;
}

int tune_node_cores(const tune_cpus_t *masks, int n)
{
    int owner[TUNE_CPUS], placed = 0, covered = 0;
    uint8_t seen[TUNE_CPUS];

    for (int c = 0; c < TUNE_CPUS; c++) {
        owner[c] = -1;
        for (int r = 0; r < n; r++) {
            if (has(&masks[r], c)) {
                covered++;
                break;
            }
        }
    }
    for (int r = 0; r < n; r++) {
        memset(seen, 0, sizeof(seen));
        placed += place(masks, r, owner, seen);
    }
    if (placed == n)
        return covered > 0 ? covered : 1;
    return placed > 0 ? placed : 1;
}
