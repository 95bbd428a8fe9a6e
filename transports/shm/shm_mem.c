/*
 * Buffers in chorus_mem_alloc memory (util/shared_mem.h), reached where
 * they are. A staging call's first round tells, beside the fingerprint in
 * the slot's line, whether this rank's buffers that peers would reach are
 * such memory (a rank whose buffers no peer reaches says yes); a rank that
 * says so publishes where they are and copies nothing in. Once every rank's
 * marks are seen, all ranks decide alike: every rank marked, and the call
 * runs as a single-copy call whose moves and reductions read and write the
 * mapped buffers directly (shm_cma.c); some did, and those that skipped a
 * copy in make it after all, one step later, and the call stages.
 *
 * Each peer's allocations are mapped here on first use and kept (a few per
 * peer, the least recently used replaced); an allocation at addresses that
 * a newer one of the same peer overlaps was freed, and is unmapped then.
 */
#include <stdlib.h>

#include "transports/shm/shm_internal.h"
#include "util/log.h"

#define SHM_MEM_KEEP 8          /* allocations kept mapped per peer */

typedef struct {
    uint64_t id;                /* 0: empty */
    uint64_t base;              /* the owner's address of its first byte */
    uint64_t bytes;
    char *local;                /* where it is mapped here */
    uint64_t used;              /* the node's clock at its last use */
} shm_mapped_t;

struct shm_mem {
    shm_mapped_t *maps;         /* [n][SHM_MEM_KEEP] */
    uint64_t clock;
};

static int markable(const coll_args_t *a)
{
    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:
    case COLL_BROADCAST:
        return a->counts == NULL;
    default:
        return 0;
    }
}

uint64_t shm_mem_mark(shm_op_t *op)
{
    shm_node_t *node = op->node;
    const coll_args_t *a = &op->args;
    const shm_desc_t *mine = &node->ctrl[node->me]->desc;
    unsigned need = 0;

    if (!markable(a) || op->round != 0)
        return 0;
    if (shm_peer_reads_send(a, node->me))
        need |= SHM_BUF_SEND;
    /* A single-copy broadcast's ranks read the root's data into their own buffers. */
    if (shm_peer_writes_recv(a, node->me) && a->coll != COLL_BROADCAST)
        need |= SHM_BUF_RECV;
    /*
     * A rank whose buffers no peer reaches (a broadcast's other ranks) agrees
     * to a single-copy call whatever its memory, and has nothing to copy in.
     */
    if (need != 0 && chorus__shared_count() == 0)
        return 0;
    shm_desc_publish(node, a, op->fp);
    if ((need & ~mine->mem) != 0)
        return 0;
    return need != 0 ? SHM_FP_MEM | SHM_FP_SKIP : SHM_FP_MEM;
}

static void unmap_entry(shm_mapped_t *m)
{
    chorus__shared_unmap(m->local, m->bytes);
    m->id = 0;
    m->local = NULL;
}

/* The mapping of peer's allocation ref, mapped now if it is not yet. */
static int mapped(shm_node_t *node, int peer, const chorus__shared_ref_t *ref, char **local_p)
{
    shm_mapped_t *row, *slot = NULL;
    void *local;
    int rc;

    if (node->mem == NULL) {
        node->mem = calloc(1, sizeof(*node->mem));
        if (node->mem == NULL ||
            (node->mem->maps = calloc((size_t)node->n * SHM_MEM_KEEP, sizeof(shm_mapped_t))) ==
                NULL) {
            free(node->mem);
            node->mem = NULL;
            return CHORUS_ERR_NO_MEMORY;
        }
    }
    row = node->mem->maps + (size_t)peer * SHM_MEM_KEEP;
    node->mem->clock++;
    for (int i = 0; i < SHM_MEM_KEEP; i++) {
        if (row[i].id == ref->id && row[i].base == ref->base && row[i].bytes == ref->bytes) {
            row[i].used = node->mem->clock;
            *local_p = row[i].local;
            return 0;
        }
    }
    if ((rc = chorus__shared_map(node->pids[peer], ref, &local)) != CHORUS_OK) {
        chorus_error("local rank %d: its chorus_mem_alloc memory at 0x%llx (%llu bytes) "
                     "could not be mapped%s", peer, (unsigned long long)ref->base,
                     (unsigned long long)ref->bytes,
                     rc == CHORUS_ERR_PROTOCOL ? ": the file it names is not that memory" : "");
        return rc;
    }
    for (int i = 0; i < SHM_MEM_KEEP; i++) {
        shm_mapped_t *m = &row[i];

        /* Its addresses are the new one's now: it was freed. */
        if (m->id != 0 && m->base < ref->base + ref->bytes && ref->base < m->base + m->bytes)
            unmap_entry(m);
        if (slot == NULL || m->id == 0 || (slot->id != 0 && m->used < slot->used))
            slot = m;
    }
    if (slot->id != 0)
        unmap_entry(slot);
    slot->id = ref->id;
    slot->base = ref->base;
    slot->bytes = ref->bytes;
    slot->local = local;
    slot->used = node->mem->clock;
    *local_p = local;
    return 0;
}

int shm_mem_resolve(shm_node_t *node, int peer, uint64_t remote, size_t bytes, void **local_p)
{
    const shm_desc_t *d = &node->ctrl[peer]->desc;
    const chorus__shared_ref_t *refs[2] = {&d->send_mem, &d->recv_mem};
    unsigned mem = d->mem;

    *local_p = NULL;
    for (int w = 0; w < 2; w++) {
        /* A copy: the peer's words are not read twice. */
        chorus__shared_ref_t ref = *refs[w];
        char *local = NULL;
        int rc;

        if (!(mem & (w == 0 ? SHM_BUF_SEND : SHM_BUF_RECV)) || remote < ref.base ||
            remote - ref.base > ref.bytes || bytes > ref.bytes - (remote - ref.base))
            continue;
        if ((rc = mapped(node, peer, &ref, &local)) < 0)
            return node->use_cma && rc != CHORUS_ERR_NO_MEMORY ? 0 : rc;
        *local_p = local + (remote - ref.base);
        return 0;
    }
    return 0;
}

void shm_mem_node_free(shm_node_t *node)
{
    if (node->mem == NULL)
        return;
    for (size_t i = 0; i < (size_t)node->n * SHM_MEM_KEEP; i++) {
        if (node->mem->maps[i].id != 0)
            unmap_entry(&node->mem->maps[i]);
    }
    free(node->mem->maps);
    free(node->mem);
    node->mem = NULL;
}
