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
 */
#include "transports/tcp/tcp.h"

/* How much of a new measure the rate takes in: a change shows within a few measures. */
#define RATE_FOLLOW 0.5
/* A lane shares a payload in at least this many fragments each, when they stay in bounds. */
#define FRAGS_PER_LANE 16
#define SHARED_FRAG_MIN (64u << 10)
#define SHARED_FRAG_MAX (256u << 10)

void tl_tcp_rate_sample(tl_tcp_rate_t *r, double now, uint64_t held)
{
    uint64_t acked = r->sent - (held < r->sent ? held : r->sent);
    double measured;

    /*
     * An idle lane delivers nothing for want of bytes, not of speed: a
     * measure covers only time the lane had a backlog (as far as samples see).
     * A count that went back (a socket that could not say what it holds)
     * starts a new measure rather than yield a wrapped one.
     */
    if (held == 0) {
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
    r->mark_t = now;
    r->mark_acked = acked;
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

int tl_tcp_stripe_pick(const tl_tcp_rate_t *rates, const uint64_t *backlog, const int *up,
                       int n, size_t frag)
{
    double fastest = 0, best_t = 0;
    int best = -1;

    for (int i = 0; i < n; i++)
        if (up[i] && rates[i].rate > fastest)
            fastest = rates[i].rate;
    for (int i = 0; i < n; i++) {
        double rate, t;

        if (!up[i])
            continue;
        /* Unmeasured: as fast as the fastest, so that it gets bytes to be measured by. */
        rate = rates[i].rate > 0 ? rates[i].rate : fastest > 0 ? fastest : 1.0;
        t = ((double)backlog[i] + (double)frag) / rate;
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
    uint32_t frag = SHARED_FRAG_MIN;

    if (nlanes <= 1)
        return TL_TCP_FRAG_MAX;
    want = length / ((uint64_t)nlanes * FRAGS_PER_LANE);
    while (frag < SHARED_FRAG_MAX && (uint64_t)frag * 2 <= want)
        frag *= 2;
    return frag;
}
