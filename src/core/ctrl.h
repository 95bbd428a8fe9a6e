/*
 * The control channel: the context's messages that are not data of a call.
 * It owns the two reserved tag bits of every space:
 *
 *   TL_TAG_CTRL (bit 63)      control messages: the transports hand each one
 *                             to the channel as it arrives, never to a receive;
 *                             bits 0-7 of the tag name the user it is for.
 *   CHORUS__TAG_HIDDEN (62)   data of the channel's users' own exchanges (the
 *                             debug check's fingerprints), matched like any data
 *                             but never by an algorithm's tags.
 *
 * Users today: stall reports (stall.c) and notices of refused calls
 * (refusal.c, which also answers a notice with a hidden message sent
 * through the channel); the debug check uses hidden tags.
 * Negotiation and the autotuner are meant to be the next. Messages arrive on
 * the progress thread inside the transports' progress; the channel queues
 * them and hands them to their user in its own phase of the loop, so a user
 * may send from its handler.
 */
#ifndef CHORUS_CORE_CTRL_H
#define CHORUS_CORE_CTRL_H

#include <stddef.h>
#include <stdint.h>

#include "core/context.h"

#define CHORUS__TAG_HIDDEN (1ULL << 62)

typedef enum {
    CHORUS__CTRL_STALL = 1,     /* stall reports: queries and answers */
    CHORUS__CTRL_REFUSAL,       /* notices of calls refused for their arguments (refusal.h) */
    CHORUS__CTRL_USERS
} chorus__ctrl_user_t;

chorus_status_t chorus__ctrl_create(chorus__ctx_t *ctx);
/* After the transports are gone: nothing holds the channel's buffers any more. */
void chorus__ctrl_destroy(chorus__ctx_t *ctx);

/* The transports' control handler (tl_ctx_params_t.ctrl), with the context as arg. */
void chorus__ctrl_deliver(void *arg, int peer, uint32_t space, uint64_t tag, const void *data,
                          size_t len);

/* Send len bytes of msg (copied, at most TL_CTRL_MAX) to context rank peer, in space, for user. */
chorus_status_t chorus__ctrl_send(chorus__ctx_t *ctx, int peer, uint32_t space,
                                  chorus__ctrl_user_t user, const void *msg, size_t len);

/*
 * Send len bytes of msg (copied) to context rank peer, in space, as data
 * with tag, which carries CHORUS__TAG_HIDDEN (and not TL_TAG_CTRL): a reply
 * that a user's handler sends to a hidden receive posted by the peer.
 */
chorus_status_t chorus__ctrl_send_hidden(chorus__ctx_t *ctx, int peer, uint32_t space,
                                         uint64_t tag, const void *msg, size_t len);

/* The loop's control phase: hand queued messages to their users, free sent ones. */
int chorus__ctrl_progress(chorus__ctx_t *ctx);

#endif
