/* Cost model and selection tables: estimates, coverage, overrides, printing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuning/cost_model.h"
#include "tuning/select.h"

static const double A = TUNE_DEFAULT_ALPHA, B = TUNE_DEFAULT_BETA, G = TUNE_DEFAULT_GAMMA;

static tune_model_t default_model(void)
{
    tune_model_t m;

    tune_model_default(&m);
    return m;
}

static tune_table_t *build(int p)
{
    tune_model_t m = default_model();
    tune_table_t *t = NULL;

    cr_assert_eq(tune_table_build(&m, p, &t), CHORUS_OK, "build at p=%d", p);
    cr_assert_not_null(t);
    return t;
}

static double cost(tune_coll_t coll, const char *alg, size_t n, int p)
{
    tune_model_t m = default_model();
    int i = tune_alg_index(coll, alg);

    cr_assert_geq(i, 0, "%s is a candidate of %s", alg, tune_coll_name(coll));
    return tune_cost(&m, coll, i, n, p);
}

#define assert_close(got, want) \
    cr_assert(fabs((got) - (want)) <= 1e-12 + 1e-9 * fabs(want), "%s: got %.12g, want %.12g", \
              #got, (double)(got), (double)(want))

/* ---- cost model ---------------------------------------------------------- */

Test(cost, allreduce_formulas)
{
    double n = 1000.0;

    assert_close(cost(TUNE_COLL_ALLREDUCE, "ring", 1000, 4), 6 * A + 1.5 * n * B + 0.75 * n * G);
    assert_close(cost(TUNE_COLL_ALLREDUCE, "rd", 1000, 4), 2 * (A + n * B + n * G));
    /* p = 6 folds onto 4: two extra messages of n bytes and one extra reduction. */
    assert_close(cost(TUNE_COLL_ALLREDUCE, "rd", 1000, 6),
                 2 * (A + n * B + n * G) + 2 * (A + n * B) + n * G);
    assert_close(cost(TUNE_COLL_ALLREDUCE, "rabenseifner", 1000, 8),
                 6 * A + 2 * 0.875 * n * B + 0.875 * n * G);
    assert_close(cost(TUNE_COLL_ALLREDUCE, "rabenseifner", 1000, 6),
                 4 * A + 1.5 * n * B + 0.75 * n * G + 2 * (A + n * B) + n * G);
    assert_close(cost(TUNE_COLL_ALLREDUCE, "ring", 1000, 5), 8 * A + 1.6 * n * B + 0.8 * n * G);
}

Test(cost, other_collectives)
{
    double n = 1000.0;

    assert_close(cost(TUNE_COLL_BROADCAST, "binomial", 1000, 5), 3 * (A + n * B));
    assert_close(cost(TUNE_COLL_REDUCE, "binomial", 1000, 4), 2 * (A + n * B + n * G));
    /* Sizes of the whole vector: each step moves one rank's block, n / p. */
    assert_close(cost(TUNE_COLL_ALLGATHER, "ring", 1000, 4), 3 * (A + 250 * B));
    assert_close(cost(TUNE_COLL_REDUCE_SCATTER, "ring", 1000, 4), 3 * (A + 250 * B + 250 * G));
    assert_close(cost(TUNE_COLL_ALLTOALL, "pairwise", 7000, 7), 6 * (A + n * B));
    assert_close(cost(TUNE_COLL_BARRIER, "dissemination", 12345, 5), 3 * A);
    assert_close(cost(TUNE_COLL_BARRIER, "dissemination", 0, 8), 3 * A);
}

Test(cost, chain_broadcast_chunks)
{
    tune_model_t m = default_model();
    int chain = tune_alg_index(TUNE_COLL_BROADCAST, "chain");
    double c = 1000.0;

    m.chunk_bytes = 1000;
    /* 3.5 chunks round up to 4: (p - 2 + 4) hops of one chunk. */
    assert_close(tune_cost(&m, TUNE_COLL_BROADCAST, chain, 3500, 4), 6 * (A + c * B));
    /* A message below one chunk goes in one piece: p - 1 hops. */
    assert_close(tune_cost(&m, TUNE_COLL_BROADCAST, chain, 400, 4), 3 * (A + 400 * B));
    assert_close(tune_cost(&m, TUNE_COLL_BROADCAST, chain, 0, 4), 3 * A);
    assert_close(tune_cost(&m, TUNE_COLL_BROADCAST, chain, 1 << 20, 1), 0.0);
    /* Without a chunk the chain does not pipeline. */
    m.chunk_bytes = 0;
    assert_close(tune_cost(&m, TUNE_COLL_BROADCAST, chain, 3500, 4), 3 * (A + 3500 * B));
}

Test(cost, one_rank_costs_nothing)
{
    tune_model_t m = default_model();

    m.node_local = m.node_cma = 1;
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (int i = 0; i < tune_coll_nalgs((tune_coll_t)c); i++)
            cr_assert_eq(tune_cost(&m, (tune_coll_t)c, i, 1 << 20, 1), 0.0, "%s/%s",
                         tune_coll_name((tune_coll_t)c), tune_coll_alg((tune_coll_t)c, i));
    }
}

Test(cost, names_and_bad_arguments)
{
    tune_model_t m = default_model();

    cr_assert_eq(tune_coll_from_name("reduce_scatter"), TUNE_COLL_REDUCE_SCATTER);
    cr_assert_eq(tune_coll_from_name("BARRIER"), TUNE_COLL_BARRIER);
    cr_assert_eq(tune_coll_from_name("gather"), TUNE_COLL_COUNT);
    cr_assert_eq(tune_coll_from_name(NULL), TUNE_COLL_COUNT);
    cr_assert_str_eq(tune_coll_name(TUNE_COLL_ALLTOALL), "alltoall");
    cr_assert_null(tune_coll_name(TUNE_COLL_COUNT));
    cr_assert_eq(tune_coll_nalgs(TUNE_COLL_ALLREDUCE), 7);
    cr_assert_eq(tune_alg_index(TUNE_COLL_BROADCAST, "ring"), -1);
    cr_assert_eq(tune_alg_index(TUNE_COLL_ALLREDUCE, "Rabenseifner"), 2);
    cr_assert_null(tune_coll_alg(TUNE_COLL_BARRIER, 2));
    cr_assert_lt(tune_cost(&m, TUNE_COLL_ALLREDUCE, 7, 8, 4), 0.0);
    cr_assert_lt(tune_cost(&m, TUNE_COLL_COUNT, 0, 8, 4), 0.0);
    cr_assert_lt(tune_cost(&m, TUNE_COLL_ALLREDUCE, 0, 8, 0), 0.0);
}

/* ---- model tables -------------------------------------------------------- */

Test(select, p4_small_rd_middle_rabenseifner_large_ring)
{
    tune_table_t *t = build(4);

    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 0), "rd");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 8), "rd");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 1024), "rd");
    /* 512 KiB: rabenseifner 611 us, ring 671 us, rd 846 us. */
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 512 << 10), "rabenseifner");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, (size_t)256 << 20), "ring");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, (size_t)1 << 40), "ring");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, SIZE_MAX), "ring");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_BROADCAST, 8), "binomial");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_BROADCAST, (size_t)64 << 20), "chain");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_BARRIER, 0), "dissemination");
    cr_assert_null(tune_table_lookup(t, TUNE_COLL_COUNT, 0));
    tune_table_destroy(t);
}

/* Ranges start at 0, follow each other without gap or overlap, end at infinity. */
static void check_cover(const tune_table_t *t, int p)
{
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        const tune_ranges_t *r = &t->colls[c];
        const char *name = tune_coll_name((tune_coll_t)c);

        cr_assert_gt(r->count, 0, "p=%d %s has ranges", p, name);
        cr_assert_eq(r->ranges[0].lo, 0, "p=%d %s starts at 0", p, name);
        cr_assert_eq(r->ranges[r->count - 1].hi, TUNE_SIZE_INF, "p=%d %s ends at inf", p, name);
        for (size_t i = 0; i < r->count; i++) {
            const tune_range_t *g = &r->ranges[i];

            cr_assert_lt(g->lo, g->hi, "p=%d %s range %zu is not empty", p, name, i);
            cr_assert_geq(tune_alg_index((tune_coll_t)c, g->alg), 0, "p=%d %s: %s", p, name,
                          g->alg);
            if (i + 1 < r->count)
                cr_assert_eq(g->hi, r->ranges[i + 1].lo, "p=%d %s range %zu meets the next",
                             p, name, i);
            cr_assert_eq(tune_table_lookup(t, (tune_coll_t)c, g->lo), g->alg);
            cr_assert_eq(tune_table_lookup(t, (tune_coll_t)c, g->hi - 1), g->alg);
        }
    }
}

/* Each model range's algorithm is the best at its start, or the first within 5%. */
static void check_model_choice(const tune_table_t *t, int p)
{
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        const tune_ranges_t *r = &t->colls[c];

        for (size_t i = 0; i < r->count; i++) {
            const tune_range_t *g = &r->ranges[i];
            int chosen = tune_alg_index((tune_coll_t)c, g->alg);
            double best = INFINITY;

            cr_assert_eq(g->user, 0);
            for (int a = 0; a < tune_coll_nalgs((tune_coll_t)c); a++) {
                double want = tune_cost(&t->model, (tune_coll_t)c, a, g->lo, p);

                cr_assert_eq(g->est[a], want, "estimate kept for p=%d at %zu", p, g->lo);
                best = want < best ? want : best;
            }
            if (chosen == 0)
                cr_assert_leq(g->est[0], best * 1.05, "p=%d %s at %zu", p,
                              tune_coll_name((tune_coll_t)c), g->lo);
            else
                cr_assert_eq(g->est[chosen], best, "p=%d %s at %zu", p,
                             tune_coll_name((tune_coll_t)c), g->lo);
            if (i > 0)
                cr_assert_neq(g->alg, r->ranges[i - 1].alg, "adjacent model ranges merged");
        }
    }
}

Test(select, covers_all_sizes_for_p_1_to_64)
{
    for (int p = 1; p <= 64; p++) {
        tune_table_t *t = build(p);

        check_cover(t, p);
        check_model_choice(t, p);
        tune_table_destroy(t);
    }
}

Test(select, one_rank_one_range_each)
{
    tune_table_t *t = build(1);

    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        cr_assert_eq(t->colls[c].count, 1);
        cr_assert_str_eq(t->colls[c].ranges[0].alg, tune_coll_alg((tune_coll_t)c, 0));
    }
    tune_table_destroy(t);
}

Test(select, build_rejects_bad_arguments)
{
    tune_model_t m = default_model();
    tune_table_t *t = NULL;

    cr_assert_eq(tune_table_build(&m, 0, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(tune_table_build(NULL, 4, &t), CHORUS_ERR_INVALID_ARG);
    m.alpha = -1.0;
    cr_assert_eq(tune_table_build(&m, 4, &t), CHORUS_ERR_INVALID_ARG);
    m = default_model();
    m.beta = NAN;
    cr_assert_eq(tune_table_build(&m, 4, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_null(t);
}

/* ---- overrides ----------------------------------------------------------- */

/* Sizes around every boundary the override tests use, and far out. */
static const size_t probe[] = {
    0, 1, 7, 1023, 1024, 1025, 2047, 2048, 65535, 65536, 65537, 100000, 1 << 20,
    (1 << 20) + 1, (size_t)3 << 20, (size_t)1 << 30, (size_t)1 << 40, SIZE_MAX - 1, SIZE_MAX,
};

/* Within [lo, hi) coll must say alg; everywhere else what the model said. */
static void check_override(const char *text, tune_coll_t coll, size_t lo, size_t hi,
                           const char *alg)
{
    tune_table_t *model = build(4), *t = build(4);

    cr_assert_eq(tune_table_override(t, text), CHORUS_OK, "'%s' is accepted", text);
    check_cover(t, 4);
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
            size_t x = probe[i];
            int inside = c == (int)coll && x >= lo && (x < hi || hi == TUNE_SIZE_INF);
            const char *want = inside ? alg : tune_table_lookup(model, (tune_coll_t)c, x);

            cr_assert_str_eq(tune_table_lookup(t, (tune_coll_t)c, x), want,
                             "'%s': %s at %zu", text, tune_coll_name((tune_coll_t)c), x);
        }
    }
    tune_table_destroy(model);
    tune_table_destroy(t);
}

Test(override, whole_range)
{
    check_override("allreduce=ring", TUNE_COLL_ALLREDUCE, 0, TUNE_SIZE_INF, "ring");
    check_override("broadcast=chain", TUNE_COLL_BROADCAST, 0, TUNE_SIZE_INF, "chain");
}

Test(override, bounded_range_only)
{
    check_override("allreduce=ring@0-64K", TUNE_COLL_ALLREDUCE, 0, 65536, "ring");
    check_override("allreduce=rd@1K-2K", TUNE_COLL_ALLREDUCE, 1024, 2048, "rd");
    check_override("allreduce=rabenseifner@1025-1M", TUNE_COLL_ALLREDUCE, 1025, 1 << 20,
                   "rabenseifner");
    check_override("broadcast=chain@0-1", TUNE_COLL_BROADCAST, 0, 1, "chain");
}

Test(override, open_upper_bound)
{
    check_override("allreduce=rd@1M-", TUNE_COLL_ALLREDUCE, 1 << 20, TUNE_SIZE_INF, "rd");
    check_override("broadcast=binomial@1G-", TUNE_COLL_BROADCAST, (size_t)1 << 30,
                   TUNE_SIZE_INF, "binomial");
}

Test(override, spaces_case_and_empty_items)
{
    check_override(" AllReduce = RING @ 1K - 2K ,, ", TUNE_COLL_ALLREDUCE, 1024, 2048, "ring");
}

Test(override, later_items_win_and_ranges_are_marked)
{
    tune_table_t *t = build(4);
    const tune_ranges_t *r = &t->colls[TUNE_COLL_ALLREDUCE];

    cr_assert_eq(tune_table_override(t, "allreduce=rd,allreduce=ring@1K-2K"), CHORUS_OK);
    check_cover(t, 4);
    cr_assert_eq(r->count, 3);
    cr_assert_str_eq(r->ranges[0].alg, "rd");
    cr_assert_str_eq(r->ranges[1].alg, "ring");
    cr_assert_str_eq(r->ranges[2].alg, "rd");
    cr_assert_eq(r->ranges[1].lo, 1024);
    cr_assert_eq(r->ranges[2].lo, 2048);
    for (size_t i = 0; i < r->count; i++) {
        cr_assert_eq(r->ranges[i].user, 1);
        cr_assert_eq(r->ranges[i].est[0],
                     tune_cost(&t->model, TUNE_COLL_ALLREDUCE, 0, r->ranges[i].lo, 4));
    }
    /* Other collectives keep the model's ranges. */
    cr_assert_eq(t->colls[TUNE_COLL_BROADCAST].ranges[0].user, 0);
    tune_table_destroy(t);
}

Test(override, null_and_empty_change_nothing)
{
    tune_table_t *t = build(4);
    size_t count = t->colls[TUNE_COLL_ALLREDUCE].count;

    cr_assert_eq(tune_table_override(t, NULL), CHORUS_OK);
    cr_assert_eq(tune_table_override(t, ""), CHORUS_OK);
    cr_assert_eq(t->colls[TUNE_COLL_ALLREDUCE].count, count);
    cr_assert_eq(tune_table_override(NULL, "allreduce=ring"), CHORUS_ERR_INVALID_ARG);
    tune_table_destroy(t);
}

/*
 * Apply a bad override; it must be rejected, leave the table as the model
 * made it, and log the item's text and the given reason.
 */
static void check_rejected(const char *text, const char *item, const char *why)
{
    tune_table_t *t = build(4);
    char log[2048] = "";
    FILE *tmp = tmpfile();
    int saved = dup(STDERR_FILENO);
    chorus_status_t status;
    size_t n;

    cr_assert_not_null(tmp);
    fflush(stderr);
    dup2(fileno(tmp), STDERR_FILENO);
    status = tune_table_override(t, text);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    n = fread(log, 1, sizeof(log) - 1, tmp);
    log[n] = '\0';
    fclose(tmp);

    cr_assert_eq(status, CHORUS_ERR_INVALID_ARG, "'%s' is rejected", text);
    cr_assert_not_null(strstr(log, item), "log names the item '%s': %s", item, log);
    cr_assert_not_null(strstr(log, why), "log says '%s': %s", why, log);
    /* Nothing was applied, not even the good items before the bad one. */
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c].count; i++)
            cr_assert_eq(t->colls[c].ranges[i].user, 0, "'%s' left the table alone", text);
    }
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 8), "rd");
    tune_table_destroy(t);
}

Test(override, rejects_unknown_collective)
{
    check_rejected("allreduce=ring,gather=ring", "'gather=ring'", "unknown collective 'gather'");
    check_rejected("=ring", "'=ring'", "unknown collective ''");
}

Test(override, rejects_unknown_algorithm)
{
    check_rejected("allreduce=ring,allreduce=tree", "allreduce=tree",
                   "unknown algorithm 'tree' for allreduce");
    /* A real algorithm of another collective is still unknown here. */
    check_rejected("broadcast=ring@0-1K", "broadcast=ring@0-1K",
                   "unknown algorithm 'ring' for broadcast");
    check_rejected("allreduce=", "'allreduce='", "unknown algorithm ''");
}

Test(override, rejects_bad_range)
{
    check_rejected("allreduce=rd@64K", "allreduce=rd@64K", "is not lo-hi");
    check_rejected("allreduce=rd@", "allreduce=rd@", "is not lo-hi");
    check_rejected("allreduce=rd@-64K", "allreduce=rd@-64K", "lower bound '' is not a size");
    check_rejected("allreduce=rd@1X-2K", "allreduce=rd@1X-2K", "lower bound '1X'");
    check_rejected("allreduce=rd@1K-2Q", "allreduce=rd@1K-2Q", "upper bound '2Q'");
    check_rejected("allreduce=rd@1K-2K-3K", "allreduce=rd@1K-2K-3K", "upper bound '2K-3K'");
    check_rejected("allreduce=rd@2K-1K", "allreduce=rd@2K-1K", "range is empty");
    check_rejected("allreduce=rd@1K-1K", "allreduce=rd@1K-1K", "range is empty");
    check_rejected("allreduce=rd@99999999999999999999-", "99999999999999999999",
                   "lower bound");
}

Test(override, rejects_missing_equals)
{
    check_rejected("allreduce", "'allreduce'", "expected collective=algorithm");
    check_rejected("allreduce=rd,broadcast:chain", "'broadcast:chain'",
                   "expected collective=algorithm");
}

/* ---- printing ------------------------------------------------------------ */

Test(print, every_collective_and_overrides_marked)
{
    tune_table_t *t = build(4);
    char *text = NULL, *line;
    size_t len = 0, lines = 0, want_lines = 3;
    FILE *out = open_memstream(&text, &len);

    cr_assert_eq(tune_table_override(t, "allreduce=ring@0-64K"), CHORUS_OK);
    tune_table_print(out, t);
    fclose(out);
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        char start[32];

        snprintf(start, sizeof(start), "\n%s ", tune_coll_name((tune_coll_t)c));
        cr_assert_not_null(strstr(text, start), "output lists %s:\n%s", start + 1, text);
        want_lines += t->colls[c].count;
    }
    cr_assert_not_null(strstr(text, "for 4 ranks"));
    cr_assert_not_null(strstr(text, "[0, 64K)"), "%s", text);
    line = strstr(text, "\nallreduce       [0, 64K)             ring          user   "
                        "ring=180.0us rd=60.0us rabenseifner=120.0us\n");
    cr_assert_not_null(line, "the override's line, with estimates at 0:\n%s", text);
    cr_assert_not_null(strstr(text, "\nallreduce       [64K, 112K)          rd            model "
                              " ring="), "%s", text);
    cr_assert_not_null(strstr(text, "[1280K, inf)"), "%s", text);
    for (char *s = text; *s; s++)
        lines += *s == '\n';
    cr_assert_eq(lines, want_lines, "one line per range plus three of header:\n%s", text);
    free(text);
    tune_table_destroy(t);
}

/* ---- configuration ------------------------------------------------------- */

static void unset_tune_env(void)
{
    for (size_t i = 0; i < tune_config_table.count; i++)
        unsetenv(tune_config_table.vars[i].name);
}

Test(config, defaults_match_the_model)
{
    tune_config_t cfg;
    tune_model_t m, def = default_model();

    unset_tune_env();
    cr_assert_eq(tune_config_table.count, 6);
    cr_assert_str_eq(tune_config_table.vars[0].name, "CHORUS_TUNE");
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    cr_assert_str_eq(cfg.tune.s, "");
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_OK);
    assert_close(m.alpha, def.alpha);
    assert_close(m.beta, def.beta);
    assert_close(m.gamma, def.gamma);
    assert_close(m.net_alpha, def.net_alpha);
    assert_close(m.net_beta, def.net_beta);
    cr_assert_eq(m.chunk_bytes, def.chunk_bytes);
    cr_assert_eq(tune_model_from_config(&cfg, 4096, &m), CHORUS_OK);
    cr_assert_eq(m.chunk_bytes, 4096);
}

Test(config, environment_reaches_the_table)
{
    tune_config_t cfg;
    tune_table_t *t = NULL;

    unset_tune_env();
    setenv("CHORUS_TUNE", "allreduce=rabenseifner@0-1K", 1);
    setenv("CHORUS_TUNE_BANDWIDTH_GBS", "10", 1);
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(tune_table_create(&cfg, 4, 0, &t), CHORUS_OK);
    assert_close(t->model.beta, 1e-10);
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 1023), "rabenseifner");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 1024), "rd");
    tune_table_destroy(t);
    unset_tune_env();
}

Test(config, bad_values_are_rejected)
{
    tune_config_t cfg = {.alpha_us = 30, .bandwidth_gbs = 2, .reduce_gbs = 4,
                         .net_alpha_us = 50, .net_bandwidth_gbs = 1.25};
    tune_model_t m;
    tune_table_t *t = NULL;

    cfg.bandwidth_gbs = 0;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_ERR_INVALID_ARG);
    cfg.bandwidth_gbs = 2;
    cfg.reduce_gbs = -1;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_ERR_INVALID_ARG);
    cfg.reduce_gbs = 4;
    cfg.alpha_us = -5;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_ERR_INVALID_ARG);
    cfg.alpha_us = 30;
    cfg.net_bandwidth_gbs = 0;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_ERR_INVALID_ARG);
    cfg.net_bandwidth_gbs = 1.25;
    cfg.net_alpha_us = NAN;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_ERR_INVALID_ARG);
    cfg.net_alpha_us = 50;
    cr_assert_eq(tune_model_from_config(&cfg, 0, &m), CHORUS_OK);
    snprintf(cfg.tune.s, sizeof(cfg.tune.s), "allreduce=nope");
    cr_assert_eq(tune_table_create(&cfg, 4, 0, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_null(t);
}

/* On one node the shared-memory candidates win; elsewhere they are never chosen. */
Test(config, node_local_table)
{
    tune_config_t cfg;
    tune_node_t node = {.cma = 1, .slot_bytes = 256 << 10};
    tune_table_t *t = NULL;

    unset_tune_env();
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(tune_table_create_node(&cfg, 4, 0, &node, &t), CHORUS_OK);
    /* A core per rank: staging through slots, each rank reducing a slice when large. */
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 8), "shm");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 16 << 10), "shm_slice");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64 << 20), "shm_slice");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_BARRIER, 0), "shm");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLTOALL, 1 << 20), "pairwise");
    tune_table_destroy(t);
    /* Twice as many ranks as cores: every wait is a trip through the scheduler, so the
     * slice path (two waits a round) pays off only from larger sizes. */
    node.cores = 2;
    cr_assert_eq(tune_table_create_node(&cfg, 4, 0, &node, &t), CHORUS_OK);
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 16 << 10), "shm");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64 << 10), "shm_slice");
    /* Single copy is priced, but kernel copies cost more than copies through slots. */
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64 << 20), "shm_slice");
    tune_table_destroy(t);
    node.cma = 0;
    cr_assert_eq(tune_table_create(&cfg, 4, 0, &t), CHORUS_OK);
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c].count; i++)
            cr_assert_null(strstr(t->colls[c].ranges[i].alg, "shm"), "%s",
                           t->colls[c].ranges[i].alg);
    }
    tune_table_destroy(t);
    /* An override that cannot run here is refused. */
    snprintf(cfg.tune.s, sizeof(cfg.tune.s), "allreduce=shm_cma");
    t = NULL;
    cr_assert_eq(tune_table_create(&cfg, 4, 0, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_null(t);
    cr_assert_eq(tune_table_create_node(&cfg, 4, 0, &node, &t), CHORUS_ERR_INVALID_ARG);
    node.cma = 1;
    cr_assert_eq(tune_table_create_node(&cfg, 4, 0, &node, &t), CHORUS_OK);
    tune_table_destroy(t);
}

/* ---- ranks on several nodes ---------------------------------------------- */

static tune_table_t *spread_table(int p, int nnodes, int lmin, int lmax, int crossings)
{
    tune_config_t cfg;
    tune_spread_t spread = {nnodes, lmin, lmax, crossings};
    tune_table_t *t = NULL;

    unset_tune_env();
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(tune_table_create_job(&cfg, p, 0, NULL, &spread, &t), CHORUS_OK);
    return t;
}

/* Two nodes of two ranks: the hierarchical algorithms carry large vectors, by default. */
Test(spread, hierarchical_chosen_for_large_vectors)
{
    tune_table_t *t = spread_table(4, 2, 2, 2, 1);

    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64 << 20), "hier");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLGATHER, 64 << 20), "hier");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 8), "rd");
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_REDUCE_SCATTER, 64 << 20), "hier");
    /* Nothing hierarchical for the collectives that have no such algorithm. */
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_REDUCE, 64 << 20), "binomial");
    tune_table_destroy(t);
    /* Uneven nodes (3,2,1) and many nodes of two (8 x 2) too. */
    t = spread_table(6, 3, 1, 3, 1);
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 256 << 20), "hier");
    tune_table_destroy(t);
    t = spread_table(16, 8, 2, 2, 1);
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64 << 20), "hier");
    tune_table_destroy(t);
}

/* One rank per node, or one node: the hierarchical candidates cannot help and are never chosen. */
Test(spread, not_chosen_without_nodes_of_several_ranks)
{
    tune_model_t m = default_model();
    int hier = tune_alg_index(TUNE_COLL_ALLREDUCE, "hier");
    tune_table_t *t = spread_table(3, 3, 1, 1, 1);

    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c].count; i++)
            cr_assert_str_neq(t->colls[c].ranges[i].alg, "hier");
    }
    tune_table_destroy(t);
    cr_assert(isinf(tune_cost(&m, TUNE_COLL_ALLREDUCE, hier, 1 << 20, 4)));
    cr_assert(tune_alg_spread(TUNE_COLL_ALLREDUCE, hier));
    cr_assert(!tune_alg_spread(TUNE_COLL_ALLREDUCE, 0));
}

/*
 * A flat ring on several nodes goes at the speed of the node links its
 * edges share; the hierarchical allreduce sends 2 (N-1)/N of the vector
 * through each node link, so at large sizes it approaches 1.5x on 2 x 2.
 */
Test(spread, flat_algorithms_pay_the_node_link)
{
    tune_model_t m = default_model();
    int ring = tune_alg_index(TUNE_COLL_ALLREDUCE, "ring");
    int hier = tune_alg_index(TUNE_COLL_ALLREDUCE, "hier");
    double n = (double)(1 << 30), A = 50e-6, B = 1.0 / 0.125e9;
    double r;

    m.nnodes = 2;
    m.local_min = m.local_max = 2;
    m.ring_crossings = 1;
    m.net_alpha = A;
    m.net_beta = B;
    m.gamma = 0.0;
    assert_close(tune_cost(&m, TUNE_COLL_ALLREDUCE, ring, (size_t)n, 4),
                 6 * A + 1.5 * n * B);
    r = tune_cost(&m, TUNE_COLL_ALLREDUCE, ring, (size_t)n, 4) /
        tune_cost(&m, TUNE_COLL_ALLREDUCE, hier, (size_t)n, 4);
    cr_assert(r > 1.45 && r <= 1.5, "ring / hier = %g", r);
    /* Ranks placed round robin: every ring edge leaves its node, two per link. */
    m.ring_crossings = 2;
    assert_close(tune_cost(&m, TUNE_COLL_ALLREDUCE, ring, (size_t)n, 4),
                 6 * A + 1.5 * n * 2 * B);
}

/* A hierarchical override runs anywhere (the builders take any layout). */
Test(spread, hierarchical_override_allowed_on_one_node)
{
    tune_config_t cfg;
    tune_node_t node = {.cma = 1, .slot_bytes = 256 << 10};
    tune_table_t *t = NULL;

    unset_tune_env();
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    snprintf(cfg.tune.s, sizeof(cfg.tune.s), "allreduce=hier,broadcast=hier");
    cr_assert_eq(tune_table_create_node(&cfg, 4, 0, &node, &t), CHORUS_OK);
    cr_assert_str_eq(tune_table_lookup(t, TUNE_COLL_ALLREDUCE, 64), "hier");
    tune_table_destroy(t);
}
