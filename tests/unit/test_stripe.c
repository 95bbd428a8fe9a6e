/*
 * tcp_stripe.c: which lane takes a payload's next fragment, over simulated
 * links. Each lane drains its socket at its link's rate; a lane whose socket
 * holds a buffer's worth takes nothing until it drains, as a socket that
 * would block; rates are measured only from what the lanes deliver.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "transports/tcp/tcp.h"

#define MiB (1u << 20)
#define STEP 0.0005 /* seconds of simulated time per step */
#define SOCKBUF (4.0 * MiB)

typedef struct {
    int n;
    double link[TL_TCP_STREAMS_MAX];    /* true rate, bytes per second */
    tl_tcp_rate_t rate[TL_TCP_STREAMS_MAX];
    uint64_t held[TL_TCP_STREAMS_MAX];   /* in the socket, not acknowledged */
    uint64_t unsent[TL_TCP_STREAMS_MAX]; /* of the fragment being written, not taken yet */
    uint64_t backlog[TL_TCP_STREAMS_MAX];
    int up[TL_TCP_STREAMS_MAX];
    double carried[TL_TCP_STREAMS_MAX];  /* payload bytes each lane took */
    double t;
} sim_t;

static void sim_init(sim_t *s, int n, const double *link)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    for (int i = 0; i < n; i++) {
        s->link[i] = link[i];
        s->up[i] = 1;
    }
}

/* The socket takes what fits of what the lane has not written yet, as sendmsg would. */
static void sim_write(sim_t *s, int i)
{
    uint64_t room = s->held[i] < SOCKBUF ? (uint64_t)SOCKBUF - s->held[i] : 0;
    uint64_t take = s->unsent[i] < room ? s->unsent[i] : room;

    s->held[i] += take;
    s->unsent[i] -= take;
    s->rate[i].sent += take;
}

/*
 * Send `bytes` in fragments of `frag`; the links change to `later` (when not
 * NULL) once `switch_at` bytes have been dealt. Returns the time until the
 * last byte is delivered; carried[] says who took what (from `from` on, when
 * counting starts at the switch).
 */
static double sim_send(sim_t *s, double bytes, size_t frag, const double *later,
                       double switch_at, double *dealt_at_switch_t)
{
    double dealt = 0, t0 = s->t;
    int switched = later == NULL;

    for (;;) {
        uint64_t left_total = 0;

        for (int i = 0; i < s->n; i++) {
            uint64_t d = (uint64_t)fmin((double)s->held[i], s->link[i] * STEP);

            s->held[i] -= d;
            sim_write(s, i);
            left_total += s->held[i] + s->unsent[i];
        }
        s->t += STEP;
        for (int i = 0; i < s->n; i++)
            s->backlog[i] = tl_tcp_stripe_look(&s->rate[i], s->t, s->held[i], s->unsent[i]);
        if (dealt >= bytes && left_total == 0)
            return s->t - t0;
        while (dealt < bytes) {
            size_t f = bytes - dealt < (double)frag ? (size_t)(bytes - dealt) : frag;
            int k = tl_tcp_stripe_pick(s->rate, s->backlog, s->up, s->n, f, s->t);

            cr_assert(k >= 0 && k < s->n);
            if (s->unsent[k] > 0)
                break; /* the chosen lane is still writing: the fragment waits for it */
            s->unsent[k] = f;
            sim_write(s, k);
            s->backlog[k] += f;
            s->carried[k] += (double)f;
            dealt += (double)f;
            if (!switched && dealt >= switch_at) {
                switched = 1;
                memcpy(s->link, later, sizeof(double) * (size_t)s->n);
                memset(s->carried, 0, sizeof(s->carried));
                *dealt_at_switch_t = s->t;
            }
        }
        cr_assert_lt(s->t - t0, 1000.0, "the simulated transfer never ends");
    }
}

static const double link_600_200[2] = {600e6 / 8, 200e6 / 8};
#define BYTES_600_200 (64.0 * MiB)

/*
 * 64 MiB over links of 600 and 200 Mbit/s, the lanes' rates as in `rates`
 * (NULL: unmeasured) to begin with: the time over the links' ideal.
 */
static double send_600_200(sim_t *s, const tl_tcp_rate_t *rates)
{
    const double ideal = BYTES_600_200 / (link_600_200[0] + link_600_200[1]);

    sim_init(s, 2, link_600_200);
    if (rates != NULL)
        memcpy(s->rate, rates, 2 * sizeof(rates[0]));
    return sim_send(s, BYTES_600_200, tl_tcp_stripe_frag((uint64_t)BYTES_600_200, 2), NULL, 0,
                    NULL) / ideal;
}

/* 600 and 200 Mbit/s: the faster link carries three quarters, and the pair finishes together. */
Test(stripe, unequal_links_share_by_rate)
{
    const double *link = link_600_200;
    const double bytes = BYTES_600_200;
    sim_t s;
    double t = send_600_200(&s, NULL);

    cr_expect_lt(t, 1.05, "%.3f of the links' time", t);
    cr_expect(fabs(s.carried[0] / bytes - 0.75) < 0.03, "fast lane carried %.3f",
              s.carried[0] / bytes);
    cr_expect(fabs(s.rate[0].rate / link[0] - 1) < 0.1 && fabs(s.rate[1].rate / link[1] - 1) < 0.1,
              "measured %.0f and %.0f B/s", s.rate[0].rate, s.rate[1].rate);
}

/* An equal split would take twice the slower link's time: at least 1.9x slower here. */
Test(stripe, beats_an_equal_split)
{
    const double bytes = BYTES_600_200, equal = bytes / 2 / link_600_200[1];
    sim_t s;

    sim_init(&s, 2, link_600_200);
    cr_expect_lt(sim_send(&s, bytes, 256 << 10, NULL, 0, NULL), equal / 1.9);
}

/* Equal links: equal shares; one lane: all of it. */
Test(stripe, equal_links_and_one)
{
    const double link[4] = {1e8, 1e8, 1e8, 1e8};
    const double bytes = 32.0 * MiB;
    sim_t s;

    sim_init(&s, 4, link);
    sim_send(&s, bytes, 256 << 10, NULL, 0, NULL);
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(s.carried[i] / bytes - 0.25) < 0.03, "lane %d carried %.3f", i,
                  s.carried[i] / bytes);
    sim_init(&s, 1, link);
    sim_send(&s, bytes, 256 << 10, NULL, 0, NULL);
    cr_expect_eq(s.carried[0], bytes);
}

/* The links trade rates mid-transfer: the shares follow within the rest of the message. */
Test(stripe, follows_a_change)
{
    const double before[2] = {600e6 / 8, 200e6 / 8}, after[2] = {200e6 / 8, 600e6 / 8};
    const double bytes = 128.0 * MiB;
    double t_switch = 0, t;
    sim_t s;

    sim_init(&s, 2, before);
    t = sim_send(&s, bytes, 256 << 10, after, bytes / 2, &t_switch);
    cr_expect(fabs(s.carried[1] / (bytes / 2) - 0.75) < 0.06,
              "after the change the now faster lane carried %.3f", s.carried[1] / (bytes / 2));
    /* The second half costs little more than it would on links that had always been so. */
    cr_expect_lt(t - t_switch, 1.1 * (bytes / 2) / (after[0] + after[1]) + 0.2,
                 "%.3f s after the change", t - t_switch);
}

/*
 * A lane whose rate was once measured at a tenth of its link's (a measure
 * spoilt by an idle spell) is not starved for good: 600 and 200 Mbit/s,
 * the slow lane believed at 20, still carries near its quarter.
 */
Test(stripe, recovers_from_a_low_measure)
{
    const tl_tcp_rate_t believed[2] = {{.rate = link_600_200[0]},
                                       {.rate = link_600_200[1] / 10}};
    sim_t s;
    double t = send_600_200(&s, believed);

    cr_expect_lt(t, 1.1, "%.3f of the links' time", t);
    cr_expect_gt(s.carried[1] / BYTES_600_200, 0.2, "the slow lane carried %.3f",
                 s.carried[1] / BYTES_600_200);
}

/* The choice itself: least time to deliver; unmeasured lanes as the fastest; lanes down skipped. */
Test(stripe, pick)
{
    tl_tcp_rate_t r[3] = {{.rate = 100}, {.rate = 300}, {.rate = 0}};
    uint64_t backlog[3] = {0, 200, 0};
    int up[3] = {1, 1, 0};

    /* (0 + 100) / 100 = 1 s against (200 + 100) / 300 = 1 s: the first wins a tie. */
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 3, 100, 0), 0);
    backlog[1] = 150;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 3, 100, 0), 1);
    /* Lane 2 comes up unmeasured: taken at 300, with nothing queued it goes first. */
    up[2] = 1;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 3, 100, 0), 2);
    up[0] = up[1] = up[2] = 0;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 3, 100, 0), -1);
    /* None measured: the least backlog. */
    memset(r, 0, sizeof(r));
    up[0] = up[1] = up[2] = 1;
    backlog[0] = 10, backlog[1] = 5, backlog[2] = 7;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 3, 100, 0), 1);
}

/* A measure needs a backlog throughout; an idle lane keeps the rate it had. */
#define KiB 1024u

Test(stripe, rate_sample)
{
    tl_tcp_rate_t r = {0};

    r.sent = 1000 * KiB;
    tl_tcp_rate_sample(&r, 1.0, 1000 * KiB);  /* starts a measure: nothing acknowledged yet */
    tl_tcp_rate_sample(&r, 1.001, 900 * KiB); /* too soon */
    cr_expect_eq(r.rate, 0);
    tl_tcp_rate_sample(&r, 1.01, 500 * KiB);  /* 500 KiB in 10 ms */
    cr_expect(fabs(r.rate - 50000 * KiB) < 1, "%f", r.rate);
    cr_expect_eq(r.fresh_t, 1.01);
    tl_tcp_rate_sample(&r, 2.0, 0);           /* drained: no measure, the rate stays */
    cr_expect(fabs(r.rate - 50000 * KiB) < 1);
    r.sent += 2000 * KiB;
    tl_tcp_rate_sample(&r, 3.0, 2000 * KiB);
    tl_tcp_rate_sample(&r, 3.01, 1000 * KiB); /* 1000 KiB in 10 ms: halfway to 100000 KiB/s */
    cr_expect(fabs(r.rate - 75000 * KiB) < 1, "%f", r.rate);
    cr_expect_eq(r.fresh_t, 3.01);
}

/* A lane holding less than a fragment's worth is all but idle: nothing is measured. */
Test(stripe, rate_sample_needs_a_busy_lane)
{
    tl_tcp_rate_t r = {0};

    r.sent = 10 * TL_TCP_RATE_BUSY;
    tl_tcp_rate_sample(&r, 1.0, TL_TCP_RATE_BUSY - 1);
    tl_tcp_rate_sample(&r, 1.1, 100); /* a control frame trickling out, then idle */
    cr_expect_eq(r.rate, 0, "%g", r.rate);
    cr_expect_eq(r.mark_t, 0);
    tl_tcp_rate_sample(&r, 2.0, 3 * TL_TCP_RATE_BUSY);
    tl_tcp_rate_sample(&r, 2.5, 2 * TL_TCP_RATE_BUSY); /* busy throughout: measured */
    cr_expect(fabs(r.rate - 2.0 * TL_TCP_RATE_BUSY) < 1, "%g", r.rate);
}

/*
 * A rate measured long ago counts for more: doubled for every further
 * TL_TCP_RATE_STALE, up to the fastest lane's, so a lane starved by a low
 * measure is given fragments again.
 */
Test(stripe, stale_rate_counts_for_more)
{
    tl_tcp_rate_t r[2] = {{.rate = 1000, .fresh_t = 10.0}, {.rate = 100, .fresh_t = 10.0}};
    uint64_t backlog[2] = {1000, 0};
    int up[2] = {1, 1};
    const double s = TL_TCP_RATE_STALE;

    /* Fresh: (1000 + 100) / 1000 = 1.1 s against 100 / 100 = 1 s; then 1.5 s. */
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 2, 100, 10.0), 1);
    backlog[1] = 50;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 2, 100, 10.0 + s), 0);
    /* Two periods further on lane 1 counts at 400: 150 / 400 s, but the fresh lane 0... */
    r[0].fresh_t = 10.0 + 3 * s;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 2, 100, 10.0 + 3 * s), 1);
    /* ...is never outdone by more than its own rate: at most the fastest's. */
    backlog[0] = 0, backlog[1] = 1;
    cr_expect_eq(tl_tcp_stripe_pick(r, backlog, up, 2, 100, 100.0), 0);
}

/*
 * A look counts the rest of a frame the socket has not taken in the backlog,
 * but not in the rate: taken and delivered later, it is not delivered twice.
 */
Test(stripe, look_measures_what_the_socket_took)
{
    tl_tcp_rate_t r = {0};

    r.sent = 10000 * KiB;
    /* The socket holds 1000 KiB; 500 more of the frame wait to be taken. */
    cr_expect_eq(tl_tcp_stripe_look(&r, 1.0, 1000 * KiB, 500 * KiB), 1500 * KiB);
    /* 10 ms on: the socket took the 500 and delivered 500: 50000 KiB/s, not 100000. */
    r.sent += 500 * KiB;
    cr_expect_eq(tl_tcp_stripe_look(&r, 1.01, 1000 * KiB, 0), 1000 * KiB);
    cr_expect(fabs(r.rate - 50000 * KiB) < 1, "%f", r.rate);
}

/* A socket that says it holds more than it did while nothing was sent: a new measure, no wrap. */
Test(stripe, rate_sample_count_going_back)
{
    tl_tcp_rate_t r = {0};

    r.sent = 5000 * KiB;
    tl_tcp_rate_sample(&r, 1.0, 1000 * KiB);
    tl_tcp_rate_sample(&r, 1.01, 2000 * KiB);
    cr_expect_eq(r.rate, 0, "%g", r.rate);
    tl_tcp_rate_sample(&r, 1.02, 1500 * KiB); /* 500 KiB in 10 ms since the new mark */
    cr_expect(fabs(r.rate - 50000 * KiB) < 1, "%f", r.rate);
}

/* Whole 1 MiB fragments on one lane; 64-256 KiB, at least 16 per lane, when shared. */
Test(stripe, fragment_size)
{
    cr_expect_eq(tl_tcp_stripe_frag(64 * MiB, 1), TL_TCP_FRAG_MAX);
    cr_expect_eq(tl_tcp_stripe_frag(100, 2), 64u << 10);
    cr_expect_eq(tl_tcp_stripe_frag(4 * MiB, 2), 128u << 10);
    cr_expect_eq(tl_tcp_stripe_frag(64 * MiB, 2), 256u << 10);
    cr_expect_eq(tl_tcp_stripe_frag(UINT64_C(1) << 40, 8), 256u << 10);
    for (int n = 2; n <= TL_TCP_STREAMS_MAX; n++) {
        uint32_t f = tl_tcp_stripe_frag(8 * MiB, n);

        cr_expect(f >= TL_TCP_FRAG_MIN && f <= TL_TCP_FRAG_MAX && (f & (f - 1)) == 0);
    }
}

/* A socket's queue bound: the start value until a measure, then 2 ms of the rate in bounds. */
Test(stripe, queue_bound_follows_the_rate)
{
    tl_tcp_rate_t r = {0};

    cr_expect_eq(tl_tcp_stripe_queue(&r), TL_TCP_QUEUE_START);
    r.rate = 100e6 / 8;     /* 100 Mbit/s: 25 KB in 2 ms, below the least bound */
    cr_expect_eq(tl_tcp_stripe_queue(&r), TL_TCP_QUEUE_MIN);
    r.rate = 10e9 / 8;      /* 10 Gbit/s: 2.5 MB in 2 ms */
    cr_expect_eq(tl_tcp_stripe_queue(&r), (uint32_t)(10e9 / 8 * TL_TCP_QUEUE_S));
    r.rate = 100e9 / 8;     /* 100 Gbit/s: 25 MB, above the most */
    cr_expect_eq(tl_tcp_stripe_queue(&r), TL_TCP_QUEUE_MAX);
    cr_expect(TL_TCP_QUEUE_MIN <= TL_TCP_QUEUE_START && TL_TCP_QUEUE_START <= TL_TCP_QUEUE_MAX);
}
