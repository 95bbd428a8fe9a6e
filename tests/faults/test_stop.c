/*
 * A hung rank: SIGSTOP one rank in the middle of an allreduce loop. Its
 * peers' calls must fail with CHORUS_ERR_TIMEOUT within CHORUS_TIMEOUT + 1 s
 * of the call's start (not before CHORUS_TIMEOUT: a stopped peer is slow,
 * not dead). Then SIGCONT: the woken rank must fail its own call too and
 * exit; SIGKILL only if it does not.
 *
 * With three ranks, the first survivor to time out fails its communicator
 * and closes its connections (ARCHITECTURE.md, "Faults fail the
 * communicator"), so the other survivor may see CHORUS_ERR_PEER_FAILED
 * from that close before its own deadline: one TIMEOUT is required there,
 * and PEER_FAILED is accepted from the others.
 *
 * Exit: 0 passed, 1 failed.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_loop.h"
#include "coll/harness.h"

#define STOP_TIMEOUT_S 3.0
#define STOP_SLACK_S 1.0
#define STOP_CONT_BOUND_S 5.0   /* the woken rank exits this soon after SIGCONT */

typedef struct {
    fault_loop_t loop;
    int nranks, victim;
    double delay_s, ready_t, stop_t, cont_t, kill_t;
} stop_ctx_t;

static int stop_survivors_done(const pid_t *pids, int nranks, int victim)
{
    for (int r = 0; r < nranks; r++)
        if (r != victim && pids[r] > 0)
            return 0;
    return 1;
}

static void stop_tick(const pid_t *pids, int nranks, double elapsed_s, void *arg)
{
    stop_ctx_t *s = arg;
    double now = fault_now();
    pid_t victim = pids[s->victim];

    (void)elapsed_s;
    if (victim <= 0 || s->kill_t > 0)
        return;
    if (s->ready_t == 0) {
        if (fault_all_in_loop(s->loop.states, nranks))
            s->ready_t = now;
        return;
    }
    if (s->stop_t == 0 && now - s->ready_t >= s->delay_s) {
        kill(victim, SIGSTOP);
        s->stop_t = fault_now();
    } else if (s->stop_t > 0 && s->cont_t == 0 && stop_survivors_done(pids, nranks, s->victim)) {
        kill(victim, SIGCONT);
        s->cont_t = fault_now();
    } else if (s->cont_t > 0 && now - s->cont_t > STOP_CONT_BOUND_S) {
        kill(victim, SIGKILL);
        s->kill_t = fault_now();
    }
}

/* Judge rank r; *timeouts counts the survivors that saw CHORUS_ERR_TIMEOUT. */
static int stop_judge(const stop_ctx_t *s, int r, int status, int *timeouts)
{
    const fault_rank_state_t *st = &s->loop.states[r];
    chorus_status_t got = (chorus_status_t)st->final_status;
    double from = st->final_post_t > s->stop_t ? st->final_post_t : s->stop_t;
    double took = st->final_t - from, call = st->final_t - st->final_post_t;
    int ok = status == FAULT_RC_ENDED;

    printf("  rank %d%s: exit %d, %d calls exact, then %s: the call took %.3f s, %.3f s after "
           "the %s\n", r, r == s->victim ? " (stopped)" : "", status, st->calls_ok,
           st->final_t > 0 ? chorus_status_string(got) : "-", call, took,
           st->final_post_t > s->stop_t ? "call's start" : "SIGSTOP");
    if (!ok)
        return 0;
    if (r == s->victim) {
        ok = (got == CHORUS_ERR_TIMEOUT || got == CHORUS_ERR_PEER_FAILED) &&
             st->final_t - s->cont_t <= STOP_CONT_BOUND_S;
        if (!ok)
            printf("  FAIL: the woken rank must fail its call within %.1f s of SIGCONT\n",
                   STOP_CONT_BOUND_S);
        return ok;
    }
    *timeouts += got == CHORUS_ERR_TIMEOUT;
    if (got == CHORUS_ERR_TIMEOUT && call < STOP_TIMEOUT_S - 0.05) {
        printf("  FAIL: timed out after %.3f s, before CHORUS_TIMEOUT %.1f s\n", call,
               STOP_TIMEOUT_S);
        return 0;
    }
    if (took > STOP_TIMEOUT_S + STOP_SLACK_S) {
        printf("  FAIL: over CHORUS_TIMEOUT + %.1f s\n", STOP_SLACK_S);
        return 0;
    }
    if (got == CHORUS_ERR_TIMEOUT || (got == CHORUS_ERR_PEER_FAILED && s->nranks > 2))
        return 1;
    printf("  FAIL: expected %s\n", chorus_status_string(CHORUS_ERR_TIMEOUT));
    return 0;
}

static int stop_scenario(int nranks, int victim, double delay_s)
{
    stop_ctx_t s;
    harness_opts_t opts;
    int status[FAULT_MAX_RANKS], pass = 1, timeouts = 0;

    memset(&s, 0, sizeof(s));
    s.nranks = nranks;
    s.victim = victim;
    s.delay_s = delay_s;
    if (fault_loop_init(&s.loop, CHORUS_FLOAT32, &opts, nranks, STOP_TIMEOUT_S) != 0)
        return 0;
    opts.tick = stop_tick;
    opts.tick_arg = &s;
    printf("%d ranks: SIGSTOP rank %d %.3f s into a loop of %zu-element float32 allreduces, "
           "CHORUS_TIMEOUT %.1f s\n", nranks, victim, delay_s, s.loop.c.count, STOP_TIMEOUT_S);
    fflush(stdout);
    harness_run(&opts, fault_loop_rank, &s.loop, status, NULL);
    if (s.stop_t == 0 || s.cont_t == 0) {
        printf("  FAIL: the rank was %s\n", s.stop_t == 0 ? "never stopped" : "never woken");
        pass = 0;
    }
    for (int r = 0; r < nranks && pass; r++)
        pass &= stop_judge(&s, r, status[r], &timeouts);
    if (pass && timeouts == 0) {
        printf("  FAIL: no survivor saw %s\n", chorus_status_string(CHORUS_ERR_TIMEOUT));
        pass = 0;
    }
    if (s.kill_t > 0) {
        printf("  FAIL: the stopped rank had to be killed after SIGCONT\n");
        pass = 0;
    }
    printf("  %s\n", pass ? "PASS" : "FAIL");
    fault_loop_free(&s.loop);
    return pass;
}

int main(void)
{
    unsigned seed = (unsigned)getpid();
    int pass = 1;

    /* The moment within the loop is random; the seed is printed to replay it. */
    printf("test_stop: seed %u\n", seed);
    srand(seed);
    pass &= stop_scenario(2, 1, (double)(rand() % 500) / 1000.0);
    pass &= stop_scenario(3, rand() % 3, (double)(rand() % 500) / 1000.0);
    return pass ? 0 : 1;
}
