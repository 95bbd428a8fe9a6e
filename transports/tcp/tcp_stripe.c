/*
 * TCP transport: which lane carries a payload's next fragment (tcp.h,
 * "Streams"). No sockets here: tests/unit/test_stripe.c drives these over
 * simulated links of given rates.
 *
 * Fragments are not split in fixed shares. Each goes to the lane that would
 * have it delivered soonest: the bytes its socket still holds plus the
 * fragment, over the rate the lane was seen to deliver at. A faster lane
 * then carries more in proportion to its rate, the lanes' backlogs stay
 * equal in time, and a message's last fragments arrive together on all of
 * them rather than behind the slowest one. When a lane slows, its backlog
 * drains more slowly, and its next fragments go elsewhere before its rate
 * is even measured again.
 *
 * A rate is measured only while the lane is busy, and a lane that gets
 * little is seldom busy: a rate measured too low would starve its lane of
 * the fragments that could correct it. So a rate not measured for a while
 * counts for more and more, up to the fastest lane's, until the lane gets
 * enough to be measured again.
 */
#include "transports/tcp/tcp.h"

#include <math.h>

/* How much of a new measure the rate takes in: a change shows within a few measures. */
#define RATE_FOLLOW 0.5
/* A lane shares a payload in at least this many fragments each, when they stay in bounds. */
#define FRAGS_PER_LANE 16
#define SHARED_FRAG_MAX (256u << 10)

void tl_tcp_rate_sample(tl_tcp_rate_t *r, double now, uint64_t held)
{
    uint64_t acked = r->sent - (held < r->sent ? held : r->sent);
    double measured;

    /*
     * An idle lane delivers nothing for want of bytes, not of speed, and one
     * that holds only a control frame or two is all but idle: a measure
     * covers only time the lane held a fragment's worth (as far as samples
     * see). A count that went back (a socket that could not say what it
     * holds) starts a new measure rather than yield a wrapped one.
     */
    if (held < TL_TCP_RATE_BUSY) {
        r->mark_t = 0;
        return;
    }
    if (r->mark_t == 0 || acked < r->mark_acked) {
        r->mark_t = now;
        r->mark_acked = acked;
        return;
    }
    if (now - r->mark_t < TL_TCP_RATE_PERIOD)
        return;
    measured = (double)(acked - r->mark_acked) / (now - r->mark_t);
    r->rate = r->rate > 0 ? r->rate + RATE_FOLLOW * (measured - r->rate) : measured;
    r->fresh_t = now;
    r->mark_t = now;
    r->mark_acked = acked;
}

uint32_t tl_tcp_stripe_queue(const tl_tcp_rate_t *r)
{
    double bytes = r->rate * TL_TCP_QUEUE_S;

    if (r->rate <= 0)
        return TL_TCP_QUEUE_START;
    if (!(bytes > TL_TCP_QUEUE_MIN))
        return TL_TCP_QUEUE_MIN;
    return bytes < TL_TCP_QUEUE_MAX ? (uint32_t)bytes : TL_TCP_QUEUE_MAX;
}

uint64_t tl_tcp_stripe_look(tl_tcp_rate_t *r, double now, uint64_t held, uint64_t unsent)
{
    /*
     * Only what the socket holds was counted as sent: the frame's rest, not
     * taken yet, would read as acknowledged bytes gone missing (and a measure
     * below zero) if the rate saw it. The pick must see it, though: the lane
     * has it to carry before anything dealt to it now.
     */
    tl_tcp_rate_sample(r, now, held);
    return held + unsent;
}

/*
 * The rate a pick takes a lane at: unmeasured, the fastest's, so that it
 * gets bytes to be measured by; measured long ago, its rate doubled for
 * every further TL_TCP_RATE_STALE, up to the fastest's.
 */
static double pick_rate(const tl_tcp_rate_t *r, double now, double fastest)
{
    double age = now - r->fresh_t;

    if (r->rate <= 0)
        return fastest > 0 ? fastest : 1.0;
    if (age <= TL_TCP_RATE_STALE || r->rate >= fastest)
        return r->rate;
    return fmin(fastest, r->rate * exp2((age - TL_TCP_RATE_STALE) / TL_TCP_RATE_STALE));
}

int tl_tcp_stripe_pick(const tl_tcp_rate_t *rates, const uint64_t *backlog, const int *up,
                       int n, size_t frag, double now)
{
    double fastest = 0, best_t = 0;
    int best = -1;

    for (int i = 0; i < n; i++)
        if (up[i] && rates[i].rate > fastest)
            fastest = rates[i].rate;
    for (int i = 0; i < n; i++) {
        double t;

        if (!up[i])
            continue;
        t = ((double)backlog[i] + (double)frag) / pick_rate(&rates[i], now, fastest);
        if (best < 0 || t < best_t) {
            best = i;
            best_t = t;
        }
    }
    return best;
}

uint32_t tl_tcp_stripe_frag(uint64_t length, int nlanes)
{
    uint64_t want;
    uint32_t frag = TL_TCP_SHARED_FRAG_MIN;

    if (nlanes <= 1)
        return TL_TCP_FRAG_MAX;
    want = length / ((uint64_t)nlanes * FRAGS_PER_LANE);
    while (frag < SHARED_FRAG_MAX && (uint64_t)frag * 2 <= want)
        frag *= 2;
    return frag;
}
