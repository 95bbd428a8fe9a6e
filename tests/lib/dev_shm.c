/* The names in /dev/shm and the new ones a test may blame on chorus: see dev_shm.h. */
#include "dev_shm.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

int dev_shm_list(dev_shm_list_t *list)
{
    DIR *dir = opendir("/dev/shm");
    struct dirent *e;

    list->n = 0;
    if (dir == NULL)
        return -1;
    while ((e = readdir(dir)) != NULL && list->n < DEV_SHM_MAX_NAMES) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(list->names[list->n++], DEV_SHM_NAME_LEN, "%s", e->d_name);
    }
    closedir(dir);
    return 0;
}

int dev_shm_is_framework(const char *name)
{
    const char *p = name + strlen("bxfi_");

    if (strncmp(name, "bxfi_", strlen("bxfi_")) != 0 || *p == '\0')
        return 0;
    return strspn(p, "0123456789") == strlen(p);
}

int dev_shm_listed(const dev_shm_list_t *list, const char *name)
{
    for (int i = 0; i < list->n; i++)
        if (strcmp(list->names[i], name) == 0)
            return 1;
    return 0;
}

int dev_shm_new_entries(const dev_shm_list_t *before, const dev_shm_list_t *now,
                        const char *prefix)
{
    int fresh = 0;

    for (int i = 0; i < now->n; i++) {
        if (dev_shm_listed(before, now->names[i]) || dev_shm_is_framework(now->names[i]))
            continue;
        fprintf(stderr, "%snew entry /dev/shm/%s\n", prefix, now->names[i]);
        fresh++;
    }
    return fresh;
}
