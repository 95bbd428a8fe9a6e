/* Memory that peers on the machine can map: see shared_mem.h. */
#include "util/shared_mem.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"
#include "util/sha256.h"

#define SHARED_MAGIC 0x63686f7275736d6dULL   /* "chorusmm" */

/* The first page of every allocation. */
typedef struct {
    uint64_t magic;
    uint64_t id;
    uint64_t bytes;
} shared_header_t;

typedef struct {
    char *map;          /* the mapping: header page, then the caller's bytes */
    size_t map_bytes;
    char *ptr;          /* what the caller got */
    size_t bytes;
    int fd;
    uint64_t id;
    int holds;          /* pending calls using it */
} shared_alloc_t;

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_alloc_t **shared_list;
static size_t shared_n, shared_cap;
static atomic_size_t shared_live;   /* shared_n, read without the lock to skip empty lookups */

static size_t header_bytes(void)
{
    long page = sysconf(_SC_PAGESIZE);

    return page > (long)sizeof(shared_header_t) ? (size_t)page : 4096;
}

/* The allocation [ptr, ptr + bytes) lies in, or NULL (shared_lock held). */
static shared_alloc_t *find_locked(const void *ptr, size_t bytes)
{
    const char *p = ptr;

    for (size_t i = 0; i < shared_n; i++) {
        shared_alloc_t *a = shared_list[i];

        if (p >= a->ptr && p < a->ptr + a->bytes && bytes <= (size_t)(a->ptr + a->bytes - p))
            return a;
    }
    return NULL;
}

static int list_add_locked(shared_alloc_t *a)
{
    if (shared_n == shared_cap) {
        size_t cap = shared_cap ? 2 * shared_cap : 16;
        shared_alloc_t **grown = realloc(shared_list, cap * sizeof(*grown));

        if (grown == NULL)
            return 0;
        shared_list = grown;
        shared_cap = cap;
    }
    shared_list[shared_n++] = a;
    atomic_store(&shared_live, shared_n);
    return 1;
}

chorus_status_t chorus__shared_alloc(size_t bytes, void **ptr_p)
{
    size_t head = header_bytes();
    shared_header_t *h;
    shared_alloc_t *a;

    *ptr_p = NULL;
    if (bytes == 0 || bytes > ((size_t)1 << 46)) {
        chorus_error("chorus_mem_alloc: %zu bytes is not a size that can be allocated "
                     "(1 byte to 64 TiB)", bytes);
        return CHORUS_ERR_INVALID_ARG;
    }
    if ((a = calloc(1, sizeof(*a))) == NULL)
        return CHORUS_ERR_NO_MEMORY;
    a->bytes = bytes;
    a->map_bytes = head + (bytes + head - 1) / head * head;
    a->fd = memfd_create("chorus-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->fd < 0) {
        chorus_error("chorus_mem_alloc: memfd_create failed: %m");
        free(a);
        return CHORUS_ERR_SYSTEM;
    }
    /* Sealed at its size: a peer that maps it can never touch a page past the end (SIGBUS). */
    if (fchmod(a->fd, 0600) != 0 || ftruncate(a->fd, (off_t)a->map_bytes) != 0 ||
        fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        chorus_error("chorus_mem_alloc: sizing %zu bytes of shared memory failed: %m",
                     a->map_bytes);
        goto err_close;
    }
    a->map = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (a->map == MAP_FAILED) {
        chorus_error("chorus_mem_alloc: mapping %zu bytes of shared memory failed: %m",
                     a->map_bytes);
        goto err_close;
    }
    if (chorus__random_bytes(&a->id, sizeof(a->id)) != 0)
        goto err_unmap;
    h = (shared_header_t *)a->map;
    h->id = a->id;
    h->bytes = bytes;
    h->magic = SHARED_MAGIC;
    a->ptr = a->map + head;
    pthread_mutex_lock(&shared_lock);
    if (!list_add_locked(a)) {
        pthread_mutex_unlock(&shared_lock);
        munmap(a->map, a->map_bytes);
        close(a->fd);
        free(a);
        return CHORUS_ERR_NO_MEMORY;
    }
    pthread_mutex_unlock(&shared_lock);
    *ptr_p = a->ptr;
    return CHORUS_OK;

err_unmap:
    munmap(a->map, a->map_bytes);
err_close:
    close(a->fd);
    free(a);
    return CHORUS_ERR_SYSTEM;
}

chorus_status_t chorus__shared_free(void *ptr)
{
    shared_alloc_t *a = NULL;
    size_t i;

    pthread_mutex_lock(&shared_lock);
    for (i = 0; i < shared_n && shared_list[i]->ptr != ptr; i++)
        ;
    if (i < shared_n)
        a = shared_list[i];
    if (a == NULL || a->holds > 0) {
        int holds = a != NULL ? a->holds : 0;

        pthread_mutex_unlock(&shared_lock);
        if (a == NULL) {
            chorus_error("chorus_mem_free: %p is not memory from chorus_mem_alloc (or was "
                         "freed already)", ptr);
            return CHORUS_ERR_INVALID_ARG;
        }
        chorus_error("chorus_mem_free: %p is a buffer of %d pending call%s; wait for %s "
                     "before freeing it", ptr, holds, holds == 1 ? "" : "s",
                     holds == 1 ? "it" : "them");
        return CHORUS_ERR_IN_USE;
    }
    shared_list[i] = shared_list[--shared_n];
    atomic_store(&shared_live, shared_n);
    pthread_mutex_unlock(&shared_lock);
    munmap(a->map, a->map_bytes);
    close(a->fd);
    free(a);
    return CHORUS_OK;
}

int chorus__shared_find(const void *ptr, size_t bytes, chorus__shared_ref_t *ref)
{
    shared_alloc_t *a;

    if (ptr == NULL || atomic_load_explicit(&shared_live, memory_order_relaxed) == 0)
        return 0;
    pthread_mutex_lock(&shared_lock);
    a = find_locked(ptr, bytes);
    if (a != NULL && ref != NULL) {
        memset(ref, 0, sizeof(*ref));
        ref->fd = a->fd;
        ref->id = a->id;
        ref->base = (uint64_t)(uintptr_t)a->ptr;
        ref->bytes = a->bytes;
    }
    pthread_mutex_unlock(&shared_lock);
    return a != NULL;
}

void *chorus__shared_hold(const void *ptr)
{
    shared_alloc_t *a;

    if (ptr == NULL || atomic_load_explicit(&shared_live, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&shared_lock);
    if ((a = find_locked(ptr, 1)) != NULL)
        a->holds++;
    pthread_mutex_unlock(&shared_lock);
    return a;
}

void chorus__shared_release(void *held)
{
    shared_alloc_t *a = held;

    if (a == NULL)
        return;
    pthread_mutex_lock(&shared_lock);
    a->holds--;
    pthread_mutex_unlock(&shared_lock);
}

size_t chorus__shared_count(void)
{
    return atomic_load(&shared_live);
}

chorus_status_t chorus__shared_map(pid_t pid, const chorus__shared_ref_t *ref, void **ptr_p)
{
    size_t head = header_bytes(), map_bytes;
    const shared_header_t *h;
    struct stat st;
    char path[64];
    char *map;
    int fd;

    *ptr_p = NULL;
    if (ref->bytes == 0 || ref->bytes > ((uint64_t)1 << 46))
        return CHORUS_ERR_PROTOCOL;
    map_bytes = head + ((size_t)ref->bytes + head - 1) / head * head;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)ref->fd);
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
        chorus_error("cannot open the chorus_mem_alloc memory of process %d (%s): %m",
                     (int)pid, path);
        return CHORUS_ERR_SYSTEM;
    }
    /* Only a sealed file of the right size is mapped: nothing past its end can be touched. */
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != map_bytes ||
        fcntl(fd, F_GET_SEALS) != (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
        close(fd);
        return CHORUS_ERR_PROTOCOL;
    }
    map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        chorus_error("mapping %zu bytes of chorus_mem_alloc memory of process %d failed: %m",
                     map_bytes, (int)pid);
        return CHORUS_ERR_SYSTEM;
    }
    h = (const shared_header_t *)map;
    if (h->magic != SHARED_MAGIC || h->id != ref->id || h->bytes != ref->bytes) {
        munmap(map, map_bytes);
        return CHORUS_ERR_PROTOCOL;
    }
    *ptr_p = map + head;
    return CHORUS_OK;
}

void chorus__shared_unmap(void *ptr, size_t bytes)
{
    size_t head = header_bytes();

    if (ptr != NULL)
        munmap((char *)ptr - head, head + (bytes + head - 1) / head * head);
}
