/*
 * The names in /dev/shm, before and after a test, and which of the new ones
 * the test may blame on chorus. chorus's shared memory is memfds only, so a
 * new entry is a leak, except the files that the test framework's other
 * programs, running beside this one under a parallel make check, create and
 * remove on their own (Criterion's "bxfi_<pid>").
 */
#ifndef CHORUS_TEST_DEV_SHM_H
#define CHORUS_TEST_DEV_SHM_H

#define DEV_SHM_MAX_NAMES 512
#define DEV_SHM_NAME_LEN 256

typedef struct {
    int n;
    char names[DEV_SHM_MAX_NAMES][DEV_SHM_NAME_LEN];
} dev_shm_list_t;

/* The entries of /dev/shm, "." and ".." aside, into list; 0, or -1 when it cannot be read. */
int dev_shm_list(dev_shm_list_t *list);

/* Whether list holds name. */
int dev_shm_listed(const dev_shm_list_t *list, const char *name);

/* Whether name is a test framework's own file rather than something a test could leave. */
int dev_shm_is_framework(const char *name);

/*
 * The entries of now that before lacks, framework files aside, each named
 * on stderr after prefix; returns how many.
 */
int dev_shm_new_entries(const dev_shm_list_t *before, const dev_shm_list_t *now,
                        const char *prefix);

#endif
