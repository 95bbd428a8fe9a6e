/* tune_node_cores: how many of a node's ranks run at once, from their affinity masks. */
#include <criterion/criterion.h>
#include <string.h>

#include "tuning/cores.h"

static tune_cpus_t cpus(const char *list)
{
    tune_cpus_t m;

    memset(&m, 0, sizeof(m));
    for (const char *p = list; *p != '\0'; p++) {
        if (*p >= '0' && *p <= '9')
            m.bits[(*p - '0') / 8] |= (uint8_t)(1u << ((*p - '0') % 8));
    }
    return m;
}

/* The same mask everywhere: its CPUs, and all of them once the ranks outnumber them. */
Test(cores, identical_masks)
{
    tune_cpus_t m[4] = {cpus("01"), cpus("01"), cpus("01"), cpus("01")};

    cr_assert_eq(tune_node_cores(m, 2), 2);
    cr_assert_eq(tune_node_cores(m, 4), 2);
    m[0] = m[1] = m[2] = m[3] = cpus("012345");
    cr_assert_eq(tune_node_cores(m, 4), 6);
}

/* Bound one to a CPU each, as mpirun and chorus-run bind them: every rank runs at once. */
Test(cores, bound_one_each)
{
    tune_cpus_t m[3] = {cpus("0"), cpus("1"), cpus("2")};

    cr_assert_eq(tune_node_cores(m, 3), 3);
}

/* Two bound to one CPU take turns: fewer cores than ranks, whatever the others may use. */
Test(cores, bound_to_one_cpu)
{
    tune_cpus_t m[3] = {cpus("0"), cpus("0"), cpus("0123")};

    cr_assert_eq(tune_node_cores(m, 3), 2);
    m[2] = cpus("0");
    cr_assert_eq(tune_node_cores(m, 3), 1);
}

/* A placement exists only by moving a rank already placed: found, so all run at once. */
Test(cores, placement_needs_a_move)
{
    tune_cpus_t m[3] = {cpus("01"), cpus("0"), cpus("12")};

    cr_assert_eq(tune_node_cores(m, 3), 3);
}

/* Nothing known: at least one core. */
Test(cores, empty)
{
    tune_cpus_t m[2] = {cpus(""), cpus("")};

    cr_assert_eq(tune_node_cores(m, 2), 1);
    cr_assert_eq(tune_node_cores(m, 0), 1);
}

/* This process's own mask is never empty. */
Test(cores, mine)
{
    tune_cpus_t m;
    int any = 0;

    tune_cpus_mine(&m);
    for (int i = 0; i < TUNE_CPU_BYTES; i++)
        any |= m.bits[i] != 0;
    cr_assert(any);
    cr_assert_geq(tune_node_cores(&m, 1), 1);
}
