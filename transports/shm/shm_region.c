/*
 * Regions: created as a memfd (mode 0600, no name in any file system),
 * mapped by local peers through /proc/<pid>/fd/<fd>, which only processes
 * allowed to inspect the owner (same user) may open. The token published at
 * the rendezvous proves that the mapped region is the owner's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transports/shm/shm_internal.h"
#include "util/log.h"
#include "util/fence.h"
#include "util/sha256.h"

/* Smallest slot: one cache line per rank of the largest node still fits a piece. */
#define SHM_SLOT_MIN 4096

static size_t region_bytes(size_t slot_bytes)
{
    return SHM_DATA_OFFSET + 2 * slot_bytes;
}

/*
 * Map now the pages of a region's head (its control block and small-call
 * areas) in this process. Each small call uses the next area, so the first
 * SHM_LL_DEPTH calls would each take page faults, in the writer and in every
 * reader: about 80 calls at 2-10 us each instead of 0.4 us. Where the kernel
 * has no MADV_POPULATE_WRITE (before Linux 5.14), a read of each page does it.
 */
static void region_map_head(void *base)
{
    if (madvise(base, SHM_DATA_OFFSET, MADV_POPULATE_WRITE) == 0)
        return;
    for (size_t off = 0; off < SHM_DATA_OFFSET; off += 4096)
        (void)*(volatile const unsigned char *)((const unsigned char *)base + off);
}

chorus_status_t shm_region_create(const shm_config_t *cfg, shm_region_t **region_p,
                                  shm_card_t *card)
{
    shm_region_t *r;
    size_t slot = cfg->slot_bytes;

    card->dev = -1;             /* shm_cuda_card says otherwise */
    memset(card->dev_uuid, 0, sizeof(card->dev_uuid));
    if (slot < SHM_SLOT_MIN || slot % SHM_LINE != 0 || slot > ((size_t)1 << 30)) {
        chorus_error("invalid value %zu for CHORUS_SHM_SLOT_SIZE: must be a multiple of %d "
                     "from %d to 1G", slot, SHM_LINE, SHM_SLOT_MIN);
        return CHORUS_ERR_INVALID_ARG;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return CHORUS_ERR_NO_MEMORY;
    r->bytes = region_bytes(slot);
    r->fd = memfd_create("chorus-shm", MFD_CLOEXEC);
    if (r->fd < 0) {
        chorus_warn("memfd_create failed: %m; node-local shared memory is off");
        goto err_free;
    }
    if (fchmod(r->fd, 0600) != 0 || ftruncate(r->fd, (off_t)r->bytes) != 0) {
        chorus_warn("sizing the shared-memory region (%zu bytes) failed: %m", r->bytes);
        goto err_close;
    }
    r->ctrl = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->ctrl == MAP_FAILED) {
        chorus_warn("mapping the shared-memory region (%zu bytes) failed: %m", r->bytes);
        goto err_close;
    }
    region_map_head(r->ctrl);
    if (chorus__random_bytes(r->ctrl->token, SHM_TOKEN_BYTES) != 0)
        goto err_unmap;
    r->ctrl->pid = (int32_t)getpid();
    r->ctrl->fence_ok = cfg->membarrier && chorus__fence_ready(CHORUS__FENCE_NODE);
    r->ctrl->slot_bytes = slot;
    r->ctrl->self_addr = (uint64_t)(uintptr_t)r->ctrl;
    r->ctrl->magic = SHM_MAGIC;
    card->pid = r->ctrl->pid;
    card->fd = r->fd;
    memcpy(card->token, r->ctrl->token, SHM_TOKEN_BYTES);
    *region_p = r;
    return CHORUS_OK;

err_unmap:
    munmap(r->ctrl, r->bytes);
err_close:
    close(r->fd);
err_free:
    free(r);
    card->fd = -1;
    return CHORUS_ERR_SYSTEM;
}

void shm_region_destroy(shm_region_t *region)
{
    if (region == NULL)
        return;
    if (region->fd >= 0)
        close(region->fd);
    munmap(region->ctrl, region->bytes);
    free(region);
}

/* Map local rank j's region and check that it is the one its card names. */
static chorus_status_t node_map_peer(shm_node_t *node, int j, const shm_card_t *card)
{
    char path[64];
    size_t bytes = region_bytes(node->cfg.slot_bytes);
    shm_ctrl_t *c;
    int fd;

    if (card->fd < 0) {
        chorus_warn("local rank %d has no shared-memory region", j);
        return CHORUS_ERR_SYSTEM;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)card->pid, (int)card->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        chorus_warn("local rank %d: cannot open its shared-memory region %s: %m", j, path);
        return CHORUS_ERR_SYSTEM;
    }
    c = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) {
        chorus_warn("local rank %d: mapping its shared-memory region failed: %m", j);
        return CHORUS_ERR_SYSTEM;
    }
    if (c->magic != SHM_MAGIC || c->slot_bytes != node->cfg.slot_bytes ||
        memcmp(c->token, card->token, SHM_TOKEN_BYTES) != 0) {
        chorus_warn("local rank %d: %s is not its region (wrong token or "
                    "CHORUS_SHM_SLOT_SIZE differs between ranks)", j, path);
        munmap(c, bytes);
        return CHORUS_ERR_SYSTEM;
    }
    region_map_head(c);
    node->ctrl[j] = c;
    node->map_bytes[j] = bytes;
    node->pids[j] = card->pid;
    return CHORUS_OK;
}

static chorus_status_t node_alloc(shm_node_t *node, int n)
{
    node->ctrl = calloc((size_t)n, sizeof(*node->ctrl));
    node->map_bytes = calloc((size_t)n, sizeof(*node->map_bytes));
    node->pids = calloc((size_t)n, sizeof(*node->pids));
    node->chunk = node->cfg.slot_bytes;
    node->acc = malloc(node->chunk);
    node->tmp = malloc(node->chunk);
    if (!node->ctrl || !node->map_bytes || !node->pids || !node->acc || !node->tmp)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

chorus_status_t shm_node_create(shm_region_t *own, const shm_card_t *cards, int local_rank,
                                int local_size, const shm_config_t *cfg, shm_node_t **node_p,
                                int *cma_ok_p)
{
    shm_node_t *node = calloc(1, sizeof(*node));
    chorus_status_t status = CHORUS_ERR_NO_MEMORY;
    int cma_ok = cfg->cma;

    *node_p = NULL;
    *cma_ok_p = 0;
    if (node == NULL) {
        shm_region_destroy(own);
        return status;
    }
    node->me = local_rank;
    node->n = local_size;
    node->dead_peer = -1;
    atomic_init(&node->next_ticket, 0);
    atomic_init(&node->serving, 0);
    atomic_init(&node->broken, 0);
    node->cfg = *cfg;
    node->own = *own;
    free(own);
    status = node_alloc(node, local_size);
    for (int j = 0; j < local_size && status == CHORUS_OK; j++) {
        if (j == local_rank) {
            node->ctrl[j] = node->own.ctrl;
            node->pids[j] = node->own.ctrl->pid;
            continue;
        }
        status = node_map_peer(node, j, &cards[j]);
        if (status == CHORUS_OK && cma_ok &&
            !shm_cma_probe(cards[j].pid, node->ctrl[j], node->ctrl[j]->self_addr))
            cma_ok = 0;
    }
    if (status != CHORUS_OK) {
        shm_node_destroy(node);
        return status;
    }
    node->dev = cards[local_rank].dev;
    /* Posts skip their fence only where every peer that may sleep on them makes up for it. */
    node->fence_ready = 1;
    for (int j = 0; j < local_size; j++)
        node->fence_ready &= node->ctrl[j]->fence_ok != 0;
    node->spin_max = node->spin = cfg->spin;
    node->yields = SHM_YIELDS;
    shm_spin_calibrate(node);
    *cma_ok_p = cma_ok;
    *node_p = node;
    return CHORUS_OK;
}

void shm_node_seal(shm_node_t *node, int use_cma, int cores)
{
    node->use_cma = use_cma;
    /* With more ranks than cores, the peer a waiter polls for may need the waiter's core:
     * yield at once instead of spinning, and longer before sleeping. Waiters still sleep
     * often, and a sleeper's barrier on every local rank's CPU (an interrupt to each,
     * dearer still in a virtual machine) costs more than a fence in every post: posts take
     * the fence. Every local rank seals with the same cores (agreed at setup), so posters
     * and sleepers agree. */
    if (cores > 0 && node->n > cores) {
        node->spin_max = node->spin = 0;
        node->yields = SHM_YIELDS_SHARED;
        node->fence_ready = 0;
    }
    if (node->own.fd >= 0)
        close(node->own.fd);
    node->own.fd = -1;
}

void shm_node_destroy(shm_node_t *node)
{
    if (node == NULL)
        return;
    for (int j = 0; node->ctrl != NULL && j < node->n; j++) {
        if (j != node->me && node->ctrl[j] != NULL)
            munmap(node->ctrl[j], node->map_bytes[j]);
    }
    if (node->own.ctrl != NULL) {
        if (node->own.fd >= 0)
            close(node->own.fd);
        munmap(node->own.ctrl, node->own.bytes);
    }
    free(node->ctrl);
    free(node->map_bytes);
    free(node->pids);
    free(node->acc);
    free(node->tmp);
    shm_cuda_node_free(node);
    shm_mem_node_free(node);
    free(node->skipped);
    free(node);
}
