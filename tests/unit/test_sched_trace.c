/*
 * What a schedule records in the trace (CHORUS_TRACE): the stretches its
 * first unfinished step held it back, for the ranks of a hierarchical
 * allreduce run in one process (tests/unit/sched_sim.c) over two nodes
 * served by teams: transfers with peers ("recv from 2") and node stages
 * ("node reduce_scatter (...)"), one after the other on each rank's track.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched_sim.h"
#include "topology/layout.h"
#include "util/json.h"
#include "util/trace.h"

extern const coll_alg_t coll_hier_allreduce;

#define RANKS 4
#define COUNT 50000

static float in[RANKS][COUNT], out[RANKS][COUNT];

/* Run the hierarchical allreduce on 2 nodes of 2 ranks with a trace; its file, parsed. */
static chorus__json_t *traced_run(char *dir, size_t dirlen)
{
    topo_layout_t *layout = NULL;
    sched_sim_opts_t opts = SCHED_SIM_OPTS_DEFAULT;
    coll_args_t args[RANKS];
    chorus__trace_t *trace;
    chorus__json_t *doc = NULL;
    char prefix[96], path[128], err[160] = "";
    FILE *f;
    char *text;
    long len;

    snprintf(dir, dirlen, "/tmp/chorus_sched_trace_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(prefix, sizeof(prefix), "%s/t", dir);
    cr_assert_eq(topo_layout_parse("2,2", &layout), CHORUS_OK);
    cr_assert_eq(chorus__trace_create(prefix, 0, 1, 4096, "node", &trace), CHORUS_OK);
    for (int r = 0; r < RANKS; r++) {
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r + 1);
        args[r] = (coll_args_t){.coll = COLL_ALLREDUCE, .sendbuf = in[r], .recvbuf = out[r],
                                .count = COUNT, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                                .rank = r, .size = RANKS, .chunk_bytes = 16384};
    }
    opts.layout = layout;
    opts.teams = SCHED_SIM_TEAMS_VFORMS;
    opts.deferred = 1;
    opts.trace = trace;
    cr_assert_eq(sched_sim_run_opts(&coll_hier_allreduce, args, RANKS, &opts, NULL), 0);
    for (int r = 0; r < RANKS; r++)
        cr_assert_eq(out[r][COUNT - 1], 10.0f, "rank %d got %g", r, out[r][COUNT - 1]);
    chorus__trace_destroy(trace);
    topo_layout_free(layout);
    snprintf(path, sizeof(path), "%s.0.json", prefix);
    f = fopen(path, "r");
    cr_assert_not_null(f, "%s not written", path);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    text = malloc((size_t)len + 1);
    cr_assert(text != NULL && fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    text[len] = '\0';
    cr_assert_eq(chorus__json_parse(text, (size_t)len, &doc, err, sizeof(err)), CHORUS_OK,
                 "%s: %s", path, err);
    free(text);
    unlink(path);
    rmdir(dir);
    return doc;
}

Test(sched_trace, hierarchical_stages_and_waits_follow_each_other)
{
    char dir[64];
    chorus__json_t *doc = traced_run(dir, sizeof(dir));
    const chorus__json_t *ev = chorus__json_get(doc, "traceEvents");
    int stages[RANKS] = {0}, waits[RANKS] = {0};
    double last_end[RANKS];

    cr_assert(ev != NULL && ev->type == CHORUS__JSON_ARRAY);
    cr_expect_eq(chorus__json_number(chorus__json_get(doc, "otherData"), "dropped", -1), 0);
    for (int r = 0; r < RANKS; r++)
        last_end[r] = -1;
    /* Written oldest first: each rank's slices in the order they ended. */
    for (size_t i = 0; i < ev->n; i++) {
        const chorus__json_t *e = &ev->items[i];
        const char *cat = chorus__json_string(e, "cat"), *name = chorus__json_string(e, "name");
        int tid = (int)chorus__json_number(e, "tid", -1);
        double ts = chorus__json_number(e, "ts", -1), dur = chorus__json_number(e, "dur", -1);

        if (cat == NULL)
            continue;   /* the process's name */
        cr_assert(tid >= 0 && tid < RANKS, "slice on track %d", tid);
        cr_expect(strcmp(chorus__json_string(e, "ph"), "X") == 0);
        cr_expect_geq(dur, 0);
        /* They nest in the call: never two at once on one rank (to the written nanosecond). */
        cr_expect_geq(ts + 0.001, last_end[tid], "rank %d: %s starts before the last ended",
                      tid, name);
        last_end[tid] = ts + dur;
        if (strcmp(cat, "stage") == 0) {
            cr_expect(strncmp(name, "node reduce_scatter (", 21) == 0 ||
                      strncmp(name, "node allgather (", 16) == 0, "stage named %s", name);
            stages[tid]++;
        } else {
            cr_expect_str_eq(cat, "wait");
            cr_expect(strncmp(name, "recv from ", 10) == 0 || strncmp(name, "send to ", 8) == 0,
                      "wait named %s", name);
            waits[tid]++;
        }
        cr_expect_geq(chorus__json_number(chorus__json_get(e, "args"), "step", -1), 0);
    }
    for (int r = 0; r < RANKS; r++) {
        cr_expect_gt(stages[r], 0, "rank %d traced no node stage", r);
        cr_expect_gt(waits[r], 0, "rank %d traced no wait on a peer", r);
    }
    chorus__json_free(doc);
}
