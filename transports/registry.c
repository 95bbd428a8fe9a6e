/*
 * The transports built into chorus: one list of point-to-point transports,
 * in order of preference (a peer is reached over the first that reaches it),
 * and one of collective transports. Adding a transport is a folder, a line
 * here and its lines in Makefile.am; nothing above names it.
 */
#include "config.h"

#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "transports/shm/shm.h"
#include "transports/tcp/tcp.h"
#ifdef HAVE_UCX
#include "transports/ucx/ucx.h"
#endif

const tl_ops_t *const tl_p2p_all[] = {
    &tl_tcp_ops,
#ifdef HAVE_UCX
    &tl_ucx_ops,
#endif
    NULL,
};

const tl_coll_ops_t *const tl_coll_all[] = {
    &tl_shm_coll_ops,
    NULL,
};
