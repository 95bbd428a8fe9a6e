/* Algorithms' prices and selection tables: estimates, coverage, overrides, printing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/select.h"
#include "topology/layout.h"
#include "tuning/tune_config.h"

static const double A = TUNE_DEFAULT_ALPHA, B = TUNE_DEFAULT_BETA, G = TUNE_DEFAULT_GAMMA;

static tune_model_t model_default;

/* Tests share one model: setups reset it. */
static void reset_model(void)
{
    tune_model_default(&model_default);
}

TestSuite(cost, .init = reset_model);
TestSuite(select, .init = reset_model);
TestSuite(override, .init = reset_model);
TestSuite(print, .init = reset_model);
TestSuite(config, .init = reset_model);
TestSuite(node, .init = reset_model);
TestSuite(spread, .init = reset_model);
TestSuite(device, .init = reset_model);

/* p ranks on layout (NULL: not known; one link between every pair), no team. */
static coll_env_t env_of(int p, const topo_layout_t *layout)
{
    return (coll_env_t){.nranks = p, .layout = layout, .model = &model_default,
                        .mem = COLL_MEM_HOST};
}

/* The collective transport of the node teams (shared memory), as the tests describe it. */
static const tl_coll_ops_t *team_ops(void)
{
    cr_assert_not_null(tl_coll_all[0]);
    cr_assert_str_eq(tl_coll_all[0]->name, "shm");
    return tl_coll_all[0];
}

/* Every capability the variants need, or all but single copy. */
/* The flags of every host variant (shm_cma's only with cma); the device variant's apart. */
static uint32_t team_flags(int cma)
{
    const tl_coll_ops_t *ops = team_ops();
    uint32_t flags = TL_TEAM_OK;

    for (int v = 0; v < ops->nvariants; v++) {
        if ((cma || strcmp(ops->variants[v].name, "shm_cma") != 0) &&
            tl_coll_variant_serves(ops, v, COLL_MEM_HOST))
            flags |= ops->variants[v].needs;
    }
    return flags;
}

/* The flags the variant called name needs. */
static uint32_t variant_needs(const char *name)
{
    const tl_coll_ops_t *ops = team_ops();

    for (int v = 0; v < ops->nvariants; v++) {
        if (strcmp(ops->variants[v].name, name) == 0)
            return ops->variants[v].needs;
    }
    cr_assert_fail("no variant %s", name);
    return 0;
}

/* env with a node team of size ranks (the transport's default slot: no context). */
static void env_team(coll_env_t *env, int size, int cores, int cma)
{
    env->team_ops = team_ops();
    env->team_ctx = NULL;
    env->team_desc = (tl_team_desc_t){.size = size, .cores = cores, .flags = team_flags(cma)};
    env->cores = cores;
}

static topo_layout_t *layout_of(const char *ranks_per_node)
{
    topo_layout_t *l = NULL;

    cr_assert_eq(topo_layout_parse(ranks_per_node, &l), CHORUS_OK, "%s", ranks_per_node);
    return l;
}

static coll_select_t *build_env(const coll_env_t *env)
{
    coll_select_t *sel = NULL;

    cr_assert_eq(coll_select_build(env, &sel), CHORUS_OK, "build at p=%d", env->nranks);
    cr_assert_not_null(sel);
    return sel;
}

static coll_select_t *build(int p)
{
    coll_env_t env = env_of(p, NULL);

    return build_env(&env);
}

static double cost(const coll_alg_t *alg, size_t n, int p)
{
    coll_env_t env = env_of(p, NULL);

    return coll_alg_price(alg, &env, n);
}

static const coll_alg_t *lookup(const coll_select_t *sel, coll_type_t coll, size_t bytes)
{
    return coll_select_lookup(sel, coll, COLL_MEM_HOST, bytes);
}

/* The name of the algorithm for (coll, bytes) in host memory, "(none)" when there is none. */
static const char *lookup_name(const coll_select_t *sel, coll_type_t coll, size_t bytes)
{
    const coll_alg_t *alg = lookup(sel, coll, bytes);

    return alg != NULL ? alg->name : "(none)";
}

#define assert_close(got, want) \
    cr_assert(fabs((got) - (want)) <= 1e-12 + 1e-9 * fabs(want), "%s: got %.12g, want %.12g", \
              #got, (double)(got), (double)(want))

/* ---- prices -------------------------------------------------------------- */

Test(cost, allreduce_formulas)
{
    double n = 1000.0;

    assert_close(cost(&coll_ring_allreduce, 1000, 4), 6 * A + 1.5 * n * B + 0.75 * n * G);
    assert_close(cost(&coll_rd_allreduce, 1000, 4), 2 * (A + n * B + n * G));
    /* p = 6 folds onto 4: two extra messages of n bytes and one extra reduction. */
    assert_close(cost(&coll_rd_allreduce, 1000, 6),
                 2 * (A + n * B + n * G) + 2 * (A + n * B) + n * G);
    assert_close(cost(&coll_rabenseifner_allreduce, 1000, 8),
                 6 * A + 2 * 0.875 * n * B + 0.875 * n * G);
    assert_close(cost(&coll_rabenseifner_allreduce, 1000, 6),
                 4 * A + 1.5 * n * B + 0.75 * n * G + 2 * (A + n * B) + n * G);
    assert_close(cost(&coll_ring_allreduce, 1000, 5), 8 * A + 1.6 * n * B + 0.8 * n * G);
}

Test(cost, other_collectives)
{
    double n = 1000.0;

    assert_close(cost(&coll_binomial_broadcast, 1000, 5), 3 * (A + n * B));
    assert_close(cost(&coll_binomial_reduce, 1000, 4), 2 * (A + n * B + n * G));
    /* Sizes of the whole vector: each step moves one rank's block, n / p. */
    assert_close(cost(&coll_ring_allgather, 1000, 4), 3 * (A + 250 * B));
    assert_close(cost(&coll_ring_reduce_scatter, 1000, 4), 3 * (A + 250 * B + 250 * G));
    assert_close(cost(&coll_pairwise_alltoall, 7000, 7), 6 * (A + n * B));
    assert_close(cost(&coll_dissemination_barrier, 12345, 5), 3 * A);
    assert_close(cost(&coll_dissemination_barrier, 0, 8), 3 * A);
}

Test(cost, chain_broadcast_chunks)
{
    double c = 1000.0;

    model_default.chunk_bytes = 1000;
    /* 3.5 chunks round up to 4: (p - 2 + 4) hops of one chunk. */
    assert_close(cost(&coll_chain_broadcast, 3500, 4), 6 * (A + c * B));
    /* A message below one chunk goes in one piece: p - 1 hops. */
    assert_close(cost(&coll_chain_broadcast, 400, 4), 3 * (A + 400 * B));
    assert_close(cost(&coll_chain_broadcast, 0, 4), 3 * A);
    assert_close(cost(&coll_chain_broadcast, 1 << 20, 1), 0.0);
    /* Without a chunk the chain does not pipeline. */
    model_default.chunk_bytes = 0;
    assert_close(cost(&coll_chain_broadcast, 3500, 4), 3 * (A + 3500 * B));
}

/* Every candidate of every collective, a node team of one included, prices one rank at 0. */
Test(cost, one_rank_costs_nothing)
{
    topo_layout_t *l = layout_of("1");
    coll_env_t env = env_of(1, l);
    const coll_alg_t *algs[COLL_CANDIDATES_MAX];

    env_team(&env, 1, 0, 1);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        int n = coll_alg_list((coll_type_t)c, algs, COLL_CANDIDATES_MAX);

        for (int i = 0; i < n; i++) {
            /* The device variant: not on host memory, whatever the size. */
            if (algs[i]->team_ops != NULL &&
                !tl_coll_variant_serves(algs[i]->team_ops, algs[i]->team_variant,
                                        COLL_MEM_HOST)) {
                cr_assert(isinf(coll_alg_price(algs[i], &env, 1 << 20)), "%s", algs[i]->name);
                continue;
            }
            cr_assert_eq(coll_alg_price(algs[i], &env, 1 << 20), 0.0, "%s/%s",
                         coll_type_name((coll_type_t)c), algs[i]->name);
        }
    }
    topo_layout_free(l);
}

/* A registry line without a price could never be chosen: every builder has one. */
Test(cost, every_builder_prices_itself)
{
    for (size_t i = 0; coll_algs[i] != NULL; i++) {
        cr_assert_not_null(coll_algs[i]->build, "%s", coll_algs[i]->name);
        cr_assert_not_null(coll_algs[i]->price, "%s/%s", coll_type_name(coll_algs[i]->coll),
                           coll_algs[i]->name);
        cr_assert(!isnan(cost(coll_algs[i], 1 << 20, 4)), "%s", coll_algs[i]->name);
    }
}

/* Candidates: the builders in registry order, then the team variants. */
Test(cost, candidates_in_registry_order)
{
    static const char *const allreduce[] = {"ring", "rd", "rabenseifner", "hier", "shm",
                                            "shm_slice", "shm_cma", "shm_cuda", "shm_ll"};
    const coll_alg_t *algs[COLL_CANDIDATES_MAX];
    int n = coll_alg_list(COLL_ALLREDUCE, algs, COLL_CANDIDATES_MAX);

    cr_assert_eq(n, 9);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(algs[i]->name, allreduce[i]);
    cr_assert_eq(algs[0], &coll_ring_allreduce);
    cr_assert_not_null(algs[4]->team_ops);
    /* A short array gets the first ones and the count of all. */
    cr_assert_eq(coll_alg_list(COLL_ALLREDUCE, algs, 2), 9);
    /* Alltoall: the pairwise exchange, then the shm team's staging and single copy. */
    cr_assert_eq(coll_alg_list(COLL_ALLTOALL, algs, COLL_CANDIDATES_MAX), 3);
    cr_assert_eq(algs[0], &coll_pairwise_alltoall);
    cr_assert_str_eq(algs[1]->name, "shm");
    cr_assert_eq(coll_alg_list(COLL_BARRIER, algs, COLL_CANDIDATES_MAX), 2);
    cr_assert_str_eq(algs[1]->name, "shm");
    for (int c = 0; c < COLL_TYPE_COUNT; c++)
        cr_assert_leq(coll_alg_list((coll_type_t)c, algs, COLL_CANDIDATES_MAX),
                      COLL_CANDIDATES_MAX);
}

/* Team variants are priced only where a node team holds every rank. */
Test(cost, team_variants_need_a_team_of_every_rank)
{
    const coll_alg_t *shm = coll_alg_find(COLL_ALLREDUCE, "shm");
    topo_layout_t *one = layout_of("4"), *two = layout_of("2,2");
    coll_env_t env = env_of(4, one);
    double want;

    cr_assert_not_null(shm);
    cr_assert(isinf(coll_alg_price(shm, &env, 1024)), "no team");
    env_team(&env, 4, 0, 1);
    want = env.team_ops->price(NULL, &env.team_desc, shm->team_variant, COLL_ALLREDUCE, 1024);
    cr_assert(isfinite(want));
    cr_assert_eq(coll_alg_price(shm, &env, 1024), want, "the transport's price");
    env.mem = COLL_MEM_CUDA;
    cr_assert(isinf(coll_alg_price(shm, &env, 1024)), "host memory only");
    env = env_of(4, two);
    env_team(&env, 2, 0, 1);
    cr_assert(isinf(coll_alg_price(shm, &env, 1024)), "a team of one node of two");
    topo_layout_free(one);
    topo_layout_free(two);
}

/* On one node with more ranks than cores, a flat algorithm's ranks share the cores. */
Test(cost, flat_algorithms_share_the_cores)
{
    topo_layout_t *l = layout_of("8");
    coll_env_t env = env_of(8, l), alone = env_of(8, NULL);

    env.cores = 2;
    alone.cores = 2;
    assert_close(coll_alg_price(&coll_ring_allreduce, &env, 1 << 20),
                 4 * cost(&coll_ring_allreduce, 1 << 20, 8));
    /* Without a layout the ranks are not known to share a node. */
    cr_assert_eq(coll_alg_price(&coll_ring_allreduce, &alone, 1 << 20),
                 cost(&coll_ring_allreduce, 1 << 20, 8));
    env.cores = 8;
    cr_assert_eq(coll_alg_price(&coll_ring_allreduce, &env, 1 << 20),
                 cost(&coll_ring_allreduce, 1 << 20, 8));
    topo_layout_free(l);
}

/* ---- tables ------------------------------------------------------------- */

Test(select, p4_small_rd_middle_rabenseifner_large_ring)
{
    coll_select_t *t = build(4);

    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 0), &coll_rd_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 8), &coll_rd_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 1024), &coll_rd_allreduce);
    /* 512 KiB: rabenseifner 611 us, ring 671 us, rd 846 us. */
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 512 << 10), &coll_rabenseifner_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, (size_t)256 << 20), &coll_ring_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, (size_t)1 << 40), &coll_ring_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, SIZE_MAX), &coll_ring_allreduce);
    cr_assert_eq(lookup(t, COLL_BROADCAST, 8), &coll_binomial_broadcast);
    cr_assert_eq(lookup(t, COLL_BROADCAST, (size_t)64 << 20), &coll_chain_broadcast);
    cr_assert_eq(lookup(t, COLL_BARRIER, 0), &coll_dissemination_barrier);
    cr_assert_null(lookup(t, COLL_TYPE_COUNT, 0));
    cr_assert_null(coll_select_lookup(t, COLL_ALLREDUCE, COLL_MEM_TYPE_COUNT, 0));
    cr_assert_null(coll_select_lookup(NULL, COLL_ALLREDUCE, COLL_MEM_HOST, 0));
    coll_select_destroy(t);
}

/* Ranges start at 0, follow each other without gap or overlap, end at infinity. */
static void check_cover(const coll_select_t *t, coll_mem_t mem)
{
    int p = t->env.nranks;

    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        const coll_ranges_t *r = &t->colls[c][mem];
        const char *name = coll_type_name((coll_type_t)c);

        cr_assert_gt(r->count, 0, "p=%d %s has ranges", p, name);
        cr_assert_eq(r->ranges[0].lo, 0, "p=%d %s starts at 0", p, name);
        cr_assert_eq(r->ranges[r->count - 1].hi, COLL_SIZE_INF, "p=%d %s ends at inf", p, name);
        for (size_t i = 0; i < r->count; i++) {
            const coll_range_t *g = &r->ranges[i];

            cr_assert_lt(g->lo, g->hi, "p=%d %s range %zu is not empty", p, name, i);
            if (mem == COLL_MEM_HOST) {
                cr_assert_not_null(g->alg, "p=%d %s has a default at %zu", p, name, g->lo);
                cr_assert_eq(g->alg->coll, (coll_type_t)c);
            }
            if (i + 1 < r->count)
                cr_assert_eq(g->hi, r->ranges[i + 1].lo, "p=%d %s range %zu meets the next",
                             p, name, i);
            cr_assert_eq(coll_select_lookup(t, (coll_type_t)c, mem, g->lo), g->alg);
            cr_assert_eq(coll_select_lookup(t, (coll_type_t)c, mem, g->hi - 1), g->alg);
        }
    }
}

/* Each model range's algorithm is the best at its start, or the first within 5%. */
static void check_model_choice(const coll_select_t *t)
{
    int p = t->env.nranks;

    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        const coll_ranges_t *r = &t->colls[c][COLL_MEM_HOST];

        for (size_t i = 0; i < r->count; i++) {
            const coll_range_t *g = &r->ranges[i];
            int chosen = -1;
            double best = INFINITY;

            cr_assert_eq(g->user, 0);
            for (int a = 0; a < t->ncands[c]; a++) {
                double want = coll_alg_price(t->cands[c][a], &t->env, g->lo);

                cr_assert_eq(g->est[a], want, "estimate kept for p=%d at %zu", p, g->lo);
                best = want < best ? want : best;
                chosen = t->cands[c][a] == g->alg ? a : chosen;
            }
            cr_assert_geq(chosen, 0, "p=%d: %s is a candidate", p, g->alg->name);
            if (chosen == 0)
                cr_assert_leq(g->est[0], best * 1.05, "p=%d %s at %zu", p,
                              coll_type_name((coll_type_t)c), g->lo);
            else
                cr_assert_eq(g->est[chosen], best, "p=%d %s at %zu", p,
                             coll_type_name((coll_type_t)c), g->lo);
            if (i > 0)
                cr_assert_neq(g->alg, r->ranges[i - 1].alg, "adjacent model ranges merged");
        }
    }
}

Test(select, covers_all_sizes_for_p_1_to_64)
{
    for (int p = 1; p <= 64; p++) {
        coll_select_t *t = build(p);

        check_cover(t, COLL_MEM_HOST);
        check_model_choice(t);
        coll_select_destroy(t);
    }
}

/* The same on one node with its team, and on nodes of several ranks. */
Test(select, covers_all_sizes_on_nodes)
{
    static const char *const lists[] = {"2", "4", "7", "2,2", "3,2,1", "1,1,1", "4,4,4,4"};

    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        topo_layout_t *l = layout_of(lists[i]);
        coll_env_t env = env_of(l->size, l);
        coll_select_t *t;

        env_team(&env, l->local_max, 2, 1);
        t = build_env(&env);
        check_cover(t, COLL_MEM_HOST);
        check_model_choice(t);
        coll_select_destroy(t);
        topo_layout_free(l);
    }
}

Test(select, one_rank_one_range_each)
{
    coll_select_t *t = build(1);

    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        cr_assert_eq(t->colls[c][COLL_MEM_HOST].count, 1);
        cr_assert_eq(t->colls[c][COLL_MEM_HOST].ranges[0].alg, t->cands[c][0]);
    }
    coll_select_destroy(t);
}

Test(select, build_rejects_bad_arguments)
{
    coll_env_t env = env_of(0, NULL);
    coll_select_t *t = NULL;

    cr_assert_eq(coll_select_build(&env, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(coll_select_build(NULL, &t), CHORUS_ERR_INVALID_ARG);
    env = env_of(4, NULL);
    env.model = NULL;
    cr_assert_eq(coll_select_build(&env, &t), CHORUS_ERR_INVALID_ARG);
    env = env_of(4, NULL);
    model_default.alpha = -1.0;
    cr_assert_eq(coll_select_build(&env, &t), CHORUS_ERR_INVALID_ARG);
    reset_model();
    model_default.beta = NAN;
    cr_assert_eq(coll_select_build(&env, &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_null(t);
}

/* The table keeps its own model and environment: the caller's may change after. */
Test(select, keeps_its_own_copy_of_the_model)
{
    coll_env_t env = env_of(4, NULL);
    coll_select_t *t = build_env(&env);

    model_default.alpha = 1.0;
    cr_assert_eq(t->env.model, &t->model);
    cr_assert_eq(t->model.alpha, A);
    coll_select_destroy(t);
}

/* ---- overrides ----------------------------------------------------------- */

/* Sizes around every boundary the override tests use, and far out. */
static const size_t probe[] = {
    0, 1, 7, 1023, 1024, 1025, 2047, 2048, 65535, 65536, 65537, 100000, 1 << 20,
    (1 << 20) + 1, (size_t)3 << 20, (size_t)1 << 30, (size_t)1 << 40, SIZE_MAX - 1, SIZE_MAX,
};

/* Within [lo, hi) coll must say alg; everywhere else what the prices said. */
static void check_override(const char *text, coll_type_t coll, size_t lo, size_t hi,
                           const coll_alg_t *alg)
{
    coll_select_t *model = build(4), *t = build(4);

    cr_assert_eq(coll_select_override(t, text), CHORUS_OK, "'%s' is accepted", text);
    check_cover(t, COLL_MEM_HOST);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
            size_t x = probe[i];
            int inside = c == (int)coll && x >= lo && (x < hi || hi == COLL_SIZE_INF);
            const coll_alg_t *want = inside ? alg : lookup(model, (coll_type_t)c, x);

            cr_assert_eq(lookup(t, (coll_type_t)c, x), want, "'%s': %s at %zu: %s", text,
                         coll_type_name((coll_type_t)c), x, lookup_name(t, (coll_type_t)c, x));
        }
    }
    /* Device memory has nothing to override. */
    for (int c = 0; c < COLL_TYPE_COUNT; c++)
        cr_assert_null(coll_select_lookup(t, (coll_type_t)c, COLL_MEM_CUDA, 0));
    coll_select_destroy(model);
    coll_select_destroy(t);
}

Test(override, whole_range)
{
    check_override("allreduce=ring", COLL_ALLREDUCE, 0, COLL_SIZE_INF, &coll_ring_allreduce);
    check_override("broadcast=chain", COLL_BROADCAST, 0, COLL_SIZE_INF, &coll_chain_broadcast);
}

Test(override, bounded_range_only)
{
    check_override("allreduce=ring@0-64K", COLL_ALLREDUCE, 0, 65536, &coll_ring_allreduce);
    check_override("allreduce=rd@1K-2K", COLL_ALLREDUCE, 1024, 2048, &coll_rd_allreduce);
    check_override("allreduce=rabenseifner@1025-1M", COLL_ALLREDUCE, 1025, 1 << 20,
                   &coll_rabenseifner_allreduce);
    check_override("broadcast=chain@0-1", COLL_BROADCAST, 0, 1, &coll_chain_broadcast);
}

Test(override, open_upper_bound)
{
    check_override("allreduce=rd@1M-", COLL_ALLREDUCE, 1 << 20, COLL_SIZE_INF,
                   &coll_rd_allreduce);
    check_override("broadcast=binomial@1G-", COLL_BROADCAST, (size_t)1 << 30, COLL_SIZE_INF,
                   &coll_binomial_broadcast);
}

Test(override, spaces_case_and_empty_items)
{
    check_override(" AllReduce = RING @ 1K - 2K ,, ", COLL_ALLREDUCE, 1024, 2048,
                   &coll_ring_allreduce);
}

Test(override, later_items_win_and_ranges_are_marked)
{
    coll_select_t *t = build(4);
    const coll_ranges_t *r = &t->colls[COLL_ALLREDUCE][COLL_MEM_HOST];

    cr_assert_eq(coll_select_override(t, "allreduce=rd,allreduce=ring@1K-2K"), CHORUS_OK);
    check_cover(t, COLL_MEM_HOST);
    cr_assert_eq(r->count, 3);
    cr_assert_eq(r->ranges[0].alg, &coll_rd_allreduce);
    cr_assert_eq(r->ranges[1].alg, &coll_ring_allreduce);
    cr_assert_eq(r->ranges[2].alg, &coll_rd_allreduce);
    cr_assert_eq(r->ranges[1].lo, 1024);
    cr_assert_eq(r->ranges[2].lo, 2048);
    for (size_t i = 0; i < r->count; i++) {
        cr_assert_eq(r->ranges[i].user, 1);
        cr_assert_eq(r->ranges[i].est[0],
                     coll_alg_price(&coll_ring_allreduce, &t->env, r->ranges[i].lo));
    }
    /* Other collectives keep the prices' ranges. */
    cr_assert_eq(t->colls[COLL_BROADCAST][COLL_MEM_HOST].ranges[0].user, 0);
    coll_select_destroy(t);
}

Test(override, null_and_empty_change_nothing)
{
    coll_select_t *t = build(4);
    size_t count = t->colls[COLL_ALLREDUCE][COLL_MEM_HOST].count;

    cr_assert_eq(coll_select_override(t, NULL), CHORUS_OK);
    cr_assert_eq(coll_select_override(t, ""), CHORUS_OK);
    cr_assert_eq(t->colls[COLL_ALLREDUCE][COLL_MEM_HOST].count, count);
    cr_assert_eq(coll_select_override(NULL, "allreduce=ring"), CHORUS_ERR_INVALID_ARG);
    coll_select_destroy(t);
}

/* What stderr received while a call ran. */
typedef struct {
    FILE *tmp;
    int saved;
} capture_t;

static void capture_begin(capture_t *c)
{
    c->tmp = tmpfile();
    cr_assert_not_null(c->tmp);
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    dup2(fileno(c->tmp), STDERR_FILENO);
}

static void capture_end(capture_t *c, char *log, size_t len)
{
    size_t n;

    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    rewind(c->tmp);
    n = fread(log, 1, len - 1, c->tmp);
    log[n] = '\0';
    fclose(c->tmp);
}

/*
 * Apply a bad override; it must be rejected, leave the table as the prices
 * made it, and log the item's text and the given reason.
 */
static void check_rejected(const char *text, const char *item, const char *why)
{
    coll_select_t *t = build(4);
    char log[2048];
    capture_t cap;
    chorus_status_t status;

    capture_begin(&cap);
    status = coll_select_override(t, text);
    capture_end(&cap, log, sizeof(log));
    cr_assert_eq(status, CHORUS_ERR_INVALID_ARG, "'%s' is rejected", text);
    cr_assert_not_null(strstr(log, item), "log names the item '%s': %s", item, log);
    cr_assert_not_null(strstr(log, why), "log says '%s': %s", why, log);
    /* Nothing was applied, not even the good items before the bad one. */
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c][COLL_MEM_HOST].count; i++)
            cr_assert_eq(t->colls[c][COLL_MEM_HOST].ranges[i].user, 0,
                         "'%s' left the table alone", text);
    }
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 8), &coll_rd_allreduce);
    coll_select_destroy(t);
}

Test(override, rejects_unknown_collective)
{
    check_rejected("allreduce=ring,gather=ring", "'gather=ring'", "unknown collective 'gather'");
    check_rejected("=ring", "'=ring'", "unknown collective ''");
    check_rejected("gather=ring", "'gather=ring'", "(one of allreduce, allgather, broadcast, "
                   "reduce_scatter, reduce, alltoall, barrier, fc_weight_grad)");
}

/* fc_weight_grad=late|allreduce|auto: chorus_fc_weight_grad's strategy, no range. */
Test(override, fc_weight_grad_strategy)
{
    coll_select_t *t = build(4);

    cr_assert_eq(t->fc, COLL_FC_AUTO);
    cr_assert_eq(coll_select_override(t, "fc_weight_grad=late"), CHORUS_OK);
    cr_assert_eq(t->fc, COLL_FC_LATE);
    /* The later item wins; the collectives' items around it still apply. */
    cr_assert_eq(coll_select_override(t, "fc_weight_grad=late,allreduce=rd,"
                                         "FC_WEIGHT_GRAD=allreduce"), CHORUS_OK);
    cr_assert_eq(t->fc, COLL_FC_ALLREDUCE);
    cr_assert_str_eq(coll_select_lookup(t, COLL_ALLREDUCE, COLL_MEM_HOST, 1 << 20)->name, "rd");
    cr_assert_eq(coll_select_override(t, "fc_weight_grad=auto"), CHORUS_OK);
    cr_assert_eq(t->fc, COLL_FC_AUTO);
    coll_select_destroy(t);
    check_rejected("fc_weight_grad=ring", "'fc_weight_grad=ring'",
                   "fc_weight_grad takes late, allreduce or auto, with no range");
    check_rejected("fc_weight_grad=late@0-1K", "'fc_weight_grad=late@0-1K'",
                   "fc_weight_grad takes late, allreduce or auto, with no range");
    /* A bad item after it leaves the strategy as it was, as it leaves the tables. */
    t = build(4);
    cr_assert_eq(coll_select_override(t, "fc_weight_grad=late,gather=ring"),
                 CHORUS_ERR_INVALID_ARG);
    cr_assert_eq(t->fc, COLL_FC_AUTO);
    coll_select_destroy(t);
}

Test(override, rejects_unknown_algorithm)
{
    check_rejected("allreduce=ring,allreduce=tree", "allreduce=tree",
                   "unknown algorithm 'tree' for allreduce");
    check_rejected("allreduce=tree", "allreduce=tree",
                   "(one of ring, rd, rabenseifner, hier, shm, shm_slice, shm_cma, shm_ll)");
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

static char *print_table(const coll_select_t *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    cr_assert_not_null(out);
    coll_select_print(out, t);
    fclose(out);
    return text;
}

Test(print, every_collective_and_overrides_marked)
{
    coll_select_t *t = build(4);
    char *text, *line;
    size_t lines = 0, want_lines = 4;

    cr_assert_eq(coll_select_override(t, "allreduce=ring@0-64K"), CHORUS_OK);
    text = print_table(t);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        char start[32];

        snprintf(start, sizeof(start), "\n%s ", coll_type_name((coll_type_t)c));
        cr_assert_not_null(strstr(text, start), "output lists %s:\n%s", start + 1, text);
        want_lines += t->colls[c][COLL_MEM_HOST].count;
    }
    cr_assert_not_null(strstr(text, "for 4 ranks"));
    cr_assert_not_null(strstr(text, "[0, 64K)"), "%s", text);
    line = strstr(text, "\nallreduce       [0, 64K)             ring          user   "
                        "ring=180.0us rd=60.0us rabenseifner=120.0us\n");
    cr_assert_not_null(line, "the override's line, with estimates at 0:\n%s", text);
    cr_assert_not_null(strstr(text, "\nallreduce       [64K, 106667)        rd            model "
                              " ring="), "%s", text);
    cr_assert_not_null(strstr(text, "[1125K, inf)"), "%s", text);
    cr_assert_not_null(strstr(text, "# ranks on several nodes: network transport only\n"));
    cr_assert_not_null(strstr(text, "\n# cuda memory: no algorithm"), "%s", text);
    for (char *s = text; *s; s++)
        lines += *s == '\n';
    cr_assert_eq(lines, want_lines, "one line per range plus four of headings:\n%s", text);
    free(text);
    coll_select_destroy(t);
}

/* One node: the team's variants that its flags allow, and how the ranks share the cores. */
Test(print, node_team_heading)
{
    topo_layout_t *l = layout_of("8");
    coll_env_t env = env_of(8, l);
    coll_select_t *t;
    char *text;

    env_team(&env, 8, 2, 0);
    t = build_env(&env);
    text = print_table(t);
    cr_assert_not_null(strstr(text, "# every rank on one node: the shm team's variants shm, "
                              "shm_slice, shm_ll, priced by the transport\n"), "%s", text);
    cr_assert_not_null(strstr(text, "# 8 ranks on 2 cores: every rank's work 4x"), "%s", text);
    cr_assert_not_null(strstr(text, " shm_slice="), "%s", text);
    cr_assert_null(strstr(text, " shm_cma="), "no estimate where it cannot run:\n%s", text);
    free(text);
    coll_select_destroy(t);
    topo_layout_free(l);
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
    tune_model_t m, def;

    tune_model_default(&def);
    unset_tune_env();
    cr_assert_eq(tune_config_table.count, 7);
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
    coll_env_t env = env_of(4, NULL);
    coll_select_t *t = NULL;

    unset_tune_env();
    setenv("CHORUS_TUNE", "allreduce=rabenseifner@0-1K", 1);
    setenv("CHORUS_TUNE_BANDWIDTH_GBS", "10", 1);
    cr_assert_eq(chorus__config_read(&tune_config_table, &cfg), CHORUS_OK);
    cr_assert_eq(tune_model_from_config(&cfg, 0, &model_default), CHORUS_OK);
    cr_assert_eq(coll_select_create(&env, cfg.tune.s, &t), CHORUS_OK);
    assert_close(t->model.beta, 1e-10);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 1023), &coll_rabenseifner_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 1024), &coll_rd_allreduce);
    coll_select_destroy(t);
    unset_tune_env();
}

Test(config, bad_values_are_rejected)
{
    tune_config_t cfg = {.alpha_us = 30, .bandwidth_gbs = 2, .reduce_gbs = 4,
                         .net_alpha_us = 50, .net_bandwidth_gbs = 1.25};
    coll_env_t env = env_of(4, NULL);
    tune_model_t m;
    coll_select_t *t = NULL;

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
    cr_assert_eq(coll_select_create(&env, "allreduce=nope", &t), CHORUS_ERR_INVALID_ARG);
    cr_assert_null(t);
}

/* ---- one node ------------------------------------------------------------ */

/* On one node the team's variants win; without a team they are never chosen. */
Test(node, team_variants_chosen)
{
    topo_layout_t *l = layout_of("4");
    coll_env_t env = env_of(4, l);
    coll_select_t *t;

    /* A core per rank: small calls on the flags' lines, then staging through slots, each
     * rank reducing a slice when large. */
    env_team(&env, 4, 0, 1);
    t = build_env(&env);
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 8), "shm_ll");
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 552), "shm_ll");
    /* Ranges start where the choice changes, not at the grid's next point. */
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 553), "shm");
    /* A copy's part may fill the small-call area; a reduction's only its first lines. */
    cr_assert_str_eq(lookup_name(t, COLL_ALLGATHER, 4 * 1784), "shm_ll");
    cr_assert_str_eq(lookup_name(t, COLL_ALLGATHER, 4 * 1784 + 1), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_BROADCAST, 1784), "shm_ll");
    cr_assert_str_eq(lookup_name(t, COLL_BROADCAST, 1785), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 1024), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_BROADCAST, 64), "shm_ll");
    cr_assert_str_eq(lookup_name(t, COLL_ALLGATHER, 4 * 110), "shm_ll");
    /* A reduce_scatter's part is its whole vector. */
    cr_assert_str_eq(lookup_name(t, COLL_REDUCE_SCATTER, 552), "shm_ll");
    cr_assert_str_eq(lookup_name(t, COLL_REDUCE_SCATTER, 553), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 16 << 10), "shm_slice");
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 64 << 20), "shm_slice");
    cr_assert_str_eq(lookup_name(t, COLL_BARRIER, 0), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_ALLTOALL, 1 << 20), "shm");
    cr_assert_eq(lookup(t, COLL_ALLTOALL, 1 << 20)->team_ops, env.team_ops);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 8)->team_ops, env.team_ops);
    coll_select_destroy(t);
    /* Twice as many ranks as cores: every wait is a trip through the scheduler, so the
     * slice path (two waits a round) pays off only from larger sizes. */
    env_team(&env, 4, 2, 1);
    t = build_env(&env);
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 16 << 10), "shm");
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 64 << 10), "shm_slice");
    /* Single copy is priced, but kernel copies cost more than copies through slots. */
    cr_assert_str_eq(lookup_name(t, COLL_ALLREDUCE, 64 << 20), "shm_slice");
    coll_select_destroy(t);
    env = env_of(4, l);
    t = build_env(&env);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c][COLL_MEM_HOST].count; i++)
            cr_assert_null(t->colls[c][COLL_MEM_HOST].ranges[i].alg->team_ops, "%s",
                           t->colls[c][COLL_MEM_HOST].ranges[i].alg->name);
    }
    coll_select_destroy(t);
    topo_layout_free(l);
}

/* Create with overrides; the status, with what was logged in log. */
static chorus_status_t create_logged(const coll_env_t *env, const char *text, char *log,
                                     size_t len)
{
    coll_select_t *t = NULL;
    capture_t cap;
    chorus_status_t status;

    capture_begin(&cap);
    status = coll_select_create(env, text, &t);
    capture_end(&cap, log, len);
    cr_assert((status == CHORUS_OK) == (t != NULL));
    coll_select_destroy(t);
    return status;
}

/* An override naming a team variant that cannot run here is refused at creation. */
Test(node, unrunnable_override_refused)
{
    topo_layout_t *l = layout_of("4"), *two = layout_of("2,2");
    coll_env_t env = env_of(4, l);
    char log[1024];

    cr_assert_eq(create_logged(&env, "allreduce=shm_cma", log, sizeof(log)),
                 CHORUS_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(log, "CHORUS_TUNE: allreduce=shm_cma cannot run here (no shm "
                              "team holds every rank"), "%s", log);
    env_team(&env, 4, 0, 0);
    cr_assert_eq(create_logged(&env, "allreduce=shm_cma", log, sizeof(log)),
                 CHORUS_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(log, "allreduce=shm_cma cannot run here (the shm team lacks"),
                       "%s", log);
    cr_assert_eq(create_logged(&env, "allreduce=shm_slice@1M-", log, sizeof(log)), CHORUS_OK);
    env_team(&env, 4, 0, 1);
    cr_assert_eq(create_logged(&env, "allreduce=shm_cma", log, sizeof(log)), CHORUS_OK);
    /* On several nodes the node teams never run a whole call. */
    env = env_of(4, two);
    env_team(&env, 2, 0, 1);
    cr_assert_eq(create_logged(&env, "barrier=shm", log, sizeof(log)), CHORUS_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(log, "barrier=shm cannot run here"), "%s", log);
    topo_layout_free(l);
    topo_layout_free(two);
}

/* ---- ranks on several nodes ---------------------------------------------- */

static coll_select_t *spread_table(const char *list)
{
    topo_layout_t *l = layout_of(list);
    coll_env_t env = env_of(l->size, l);
    coll_select_t *t = build_env(&env);

    /* The table prices with its copy of env, layout included: keep it for the test's life. */
    cr_assert_eq(t->env.layout, l);
    return t;
}

static void spread_destroy(coll_select_t *t)
{
    topo_layout_free((topo_layout_t *)t->env.layout);
    coll_select_destroy(t);
}

/* Two nodes of two ranks: the hierarchical algorithms carry large vectors, by default. */
Test(spread, hierarchical_chosen_for_large_vectors)
{
    coll_select_t *t = spread_table("2,2");

    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 64 << 20), &coll_hier_allreduce);
    cr_assert_eq(lookup(t, COLL_ALLGATHER, 64 << 20), &coll_hier_allgather);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 8), &coll_rd_allreduce);
    cr_assert_eq(lookup(t, COLL_REDUCE_SCATTER, 64 << 20), &coll_hier_reduce_scatter);
    /* Nothing hierarchical for the collectives that have no such algorithm. */
    cr_assert_eq(lookup(t, COLL_REDUCE, 64 << 20), &coll_binomial_reduce);
    spread_destroy(t);
    /* Uneven nodes (3,2,1) and many nodes of two (8 x 2) too. */
    t = spread_table("3,2,1");
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 256 << 20), &coll_hier_allreduce);
    cr_assert_eq(lookup(t, COLL_BROADCAST, 64 << 20), &coll_hier_broadcast);
    spread_destroy(t);
    t = spread_table("2,2,2,2,2,2,2,2");
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 64 << 20), &coll_hier_allreduce);
    spread_destroy(t);
}

/* One rank per node, or one node: the hierarchical candidates cannot help and are never chosen. */
Test(spread, not_chosen_without_nodes_of_several_ranks)
{
    coll_select_t *t = spread_table("1,1,1");

    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c][COLL_MEM_HOST].count; i++)
            cr_assert_str_neq(t->colls[c][COLL_MEM_HOST].ranges[i].alg->name, "hier");
    }
    spread_destroy(t);
    cr_assert(isinf(cost(&coll_hier_allreduce, 1 << 20, 4)));
    cr_assert_eq(cost(&coll_hier_allreduce, 1 << 20, 1), 0.0);
}

/*
 * A flat ring on several nodes goes at the speed of the node links its
 * edges share; the hierarchical allreduce sends 2 (N-1)/N of the vector
 * through each node link, so at large sizes it approaches 1.5x on 2 x 2.
 */
Test(spread, flat_algorithms_pay_the_node_link)
{
    static const int round_robin[] = {0, 1, 0, 1};
    topo_layout_t *l = layout_of("2,2"), *rr = NULL;
    coll_env_t env = env_of(4, l);
    double n = (double)(1 << 30), NA = 50e-6, NB = 1.0 / 0.125e9, r;

    model_default.net_alpha = NA;
    model_default.net_beta = NB;
    model_default.gamma = 0.0;
    assert_close(coll_alg_price(&coll_ring_allreduce, &env, (size_t)n), 6 * NA + 1.5 * n * NB);
    r = coll_alg_price(&coll_ring_allreduce, &env, (size_t)n) /
        coll_alg_price(&coll_hier_allreduce, &env, (size_t)n);
    cr_assert(r > 1.45 && r <= 1.5, "ring / hier = %g", r);
    /* Ranks placed round robin: every ring edge leaves its node, two per link. */
    cr_assert_eq(topo_layout_from_nodes(round_robin, 4, &rr), CHORUS_OK);
    cr_assert_eq(rr->ring_crossings, 2);
    env.layout = rr;
    assert_close(coll_alg_price(&coll_ring_allreduce, &env, (size_t)n),
                 6 * NA + 1.5 * n * 2 * NB);
    /* Recursive doubling: every rank of a node at once. */
    assert_close(coll_alg_price(&coll_rd_allreduce, &env, (size_t)n), 2 * (NA + n * 2 * NB));
    topo_layout_free(l);
    topo_layout_free(rr);
}

/* With node teams, the hierarchical algorithms' node-local stages cost what the team says. */
Test(spread, node_local_stages_priced_by_the_team)
{
    topo_layout_t *l = layout_of("2,2");
    coll_env_t env = env_of(4, l), team;
    size_t n = 64 << 20;
    double shard = n / 2.0, net, local, want;

    team = env;
    env_team(&team, 2, 0, 1);
    local = coll_price_team(&team, COLL_REDUCE_SCATTER, (double)n) +
            coll_price_team(&team, COLL_ALLGATHER, (double)n);
    cr_assert(isfinite(local));
    cr_assert_lt(local, 2.0 * shard * B + shard * G, "shared memory beats the transport");
    /* 2 x 2: one ring per shard between the two nodes, and segments of 2 chunks. */
    net = n * model_default.net_beta + 0.5 * shard * G;
    want = 2.0 * model_default.net_alpha + net +
           local * (TUNE_DEFAULT_CHUNK_BYTES * 2.0 * 2 * 2 / (double)n);
    assert_close(coll_alg_price(&coll_hier_allreduce, &team, n), want);
    cr_assert_lt(coll_alg_price(&coll_hier_allgather, &team, n),
                 coll_alg_price(&coll_hier_allgather, &env, n));
    cr_assert_lt(coll_alg_price(&coll_hier_broadcast, &team, n),
                 coll_alg_price(&coll_hier_broadcast, &env, n));
    cr_assert_lt(coll_alg_price(&coll_hier_reduce_scatter, &team, n),
                 coll_alg_price(&coll_hier_reduce_scatter, &env, n));
    /* Without a team no stage runs on one. */
    cr_assert(isinf(coll_price_team(&env, COLL_ALLGATHER, 1024.0)));
    topo_layout_free(l);
}

/* A hierarchical override runs anywhere (the builders take any layout). */
Test(spread, hierarchical_override_allowed_on_one_node)
{
    topo_layout_t *l = layout_of("4");
    coll_env_t env = env_of(4, l);
    coll_select_t *t = NULL;

    env_team(&env, 4, 0, 1);
    cr_assert_eq(coll_select_create(&env, "allreduce=hier,broadcast=hier", &t), CHORUS_OK);
    cr_assert_eq(lookup(t, COLL_ALLREDUCE, 64), &coll_hier_allreduce);
    cr_assert_eq(lookup(t, COLL_BROADCAST, 64), &coll_hier_broadcast);
    coll_select_destroy(t);
    topo_layout_free(l);
}

/* ---- device memory ------------------------------------------------------- */

/* Without a team whose devices reach each other, no algorithm runs on device memory. */
Test(device, no_algorithm_for_device_memory)
{
    topo_layout_t *l = layout_of("4");
    coll_env_t env = env_of(4, l);
    coll_select_t *t;
    char *text;

    env_team(&env, 4, 0, 1);
    t = build_env(&env);
    check_cover(t, COLL_MEM_CUDA);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        cr_assert_eq(t->colls[c][COLL_MEM_CUDA].count, 1);
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++)
            cr_assert_null(coll_select_lookup(t, (coll_type_t)c, COLL_MEM_CUDA, probe[i]),
                           "%s at %zu", coll_type_name((coll_type_t)c), probe[i]);
        cr_assert_not_null(lookup(t, (coll_type_t)c, 1024));
    }
    env.mem = COLL_MEM_CUDA;
    for (size_t i = 0; coll_algs[i] != NULL; i++)
        cr_assert(isinf(coll_alg_price(coll_algs[i], &env, 1024)), "%s", coll_algs[i]->name);
    text = print_table(t);
    cr_assert_not_null(strstr(text, "\n# cuda memory: no algorithm runs on the devices (such "
                              "calls are staged through host memory)\n"), "%s", text);
    free(text);
    coll_select_destroy(t);
    topo_layout_free(l);
}

/*
 * A node team whose devices reach each other: shm_cuda serves device calls of
 * every collective it runs, at every size, and nothing on host memory.
 */
Test(device, node_team_kernels_for_device_memory)
{
    static const coll_type_t runs[] = {COLL_ALLREDUCE, COLL_REDUCE, COLL_REDUCE_SCATTER,
                                       COLL_ALLGATHER, COLL_BROADCAST};
    topo_layout_t *l = layout_of("3");
    coll_env_t env = env_of(3, l);
    coll_select_t *t;
    char *text;

    env_team(&env, 3, 0, 1);
    env.team_desc.flags |= variant_needs("shm_cuda");
    t = build_env(&env);
    check_cover(t, COLL_MEM_CUDA);
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        int served = 0;

        for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++)
            served |= runs[k] == (coll_type_t)c;
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
            const coll_alg_t *alg = coll_select_lookup(t, (coll_type_t)c, COLL_MEM_CUDA,
                                                       probe[i]);

            if (served)
                cr_assert(alg != NULL && strcmp(alg->name, "shm_cuda") == 0, "%s at %zu",
                          coll_type_name((coll_type_t)c), probe[i]);
            else
                cr_assert_null(alg, "%s at %zu", coll_type_name((coll_type_t)c), probe[i]);
            alg = coll_select_lookup(t, (coll_type_t)c, COLL_MEM_HOST, probe[i]);
            cr_assert(alg == NULL || strcmp(alg->name, "shm_cuda") != 0);
        }
    }
    text = print_table(t);
    cr_assert_not_null(strstr(text, "\n# cuda memory, calls every rank declares so (mem_type)"),
                       "%s", text);
    free(text);
    /* CHORUS_TUNE sets host memory's algorithms: the device variant is not one of them. */
    cr_assert_eq(coll_select_override(t, "allreduce=shm_cuda"), CHORUS_ERR_INVALID_ARG);
    coll_select_destroy(t);
    topo_layout_free(l);
}
