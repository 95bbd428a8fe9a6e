/* The shared-memory collective transport's own structures (shm_team.c, shm_price.c). */
#ifndef CHORUS_SHM_TEAM_H
#define CHORUS_SHM_TEAM_H

#include "transports/shm/shm.h"

/* The configuration every team of the process is made with. */
const shm_config_t *shm_ctx_config(const tl_coll_ctx_t *ctx);

double shm_price(const tl_coll_ctx_t *ctx, const tl_team_desc_t *team, int variant,
                 coll_type_t coll, size_t bytes);

#endif
