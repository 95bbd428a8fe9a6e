/* The selection table: from the algorithms' prices, then user overrides. */
#include "coll/select.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/config.h"
#include "util/log.h"

/* The grid ends here; the last winner extends to infinity. */
#define SELECT_GRID_END ((size_t)1 << 40)

/*
 * Candidates that move the same bytes in a different number of messages
 * (ring and Rabenseifner at large sizes) differ by less than the model's
 * error. There the first candidate keeps the range unless another is
 * estimated faster by more than this fraction: ring talks to neighbours
 * only and pipelines its chunks, which the model does not credit.
 */
#define SELECT_PREFER_MARGIN 0.05

/* Grid: 0, 1, 2, 3, then m * 2^e for m = 4..7, about 4 points per doubling. */
static size_t grid_next(size_t x)
{
    int e = 0;

    if (x < 4)
        return x + 1;
    while ((x >> e) >= 8)
        e++;
    return x + ((size_t)1 << e);
}

static void estimate(const coll_select_t *sel, coll_type_t coll, coll_mem_t mem, size_t bytes,
                     double *est)
{
    coll_env_t env = sel->env;

    env.mem = mem;
    for (int i = 0; i < COLL_CANDIDATES_MAX; i++)
        est[i] = i < sel->ncands[coll] ? coll_alg_price(sel->cands[coll][i], &env, bytes) : 0.0;
}

/* The candidate the prices choose, or -1 when none can run. */
static int price_choice(int ncands, const double *est)
{
    int best = 0;

    for (int i = 1; i < ncands; i++) {
        if (est[i] < est[best])
            best = i;
    }
    if (ncands == 0 || isinf(est[best]))
        return -1;
    return est[0] <= est[best] * (1.0 + SELECT_PREFER_MARGIN) ? 0 : best;
}

static chorus_status_t ranges_push(coll_ranges_t *r, size_t *cap, const coll_range_t *range)
{
    if (r->count == *cap) {
        size_t ncap = *cap ? 2 * *cap : 8;
        coll_range_t *grown = realloc(r->ranges, ncap * sizeof(*grown));

        if (grown == NULL)
            return CHORUS_ERR_NO_MEMORY;
        r->ranges = grown;
        *cap = ncap;
    }
    r->ranges[r->count++] = *range;
    return CHORUS_OK;
}

static int choice_at(const coll_select_t *sel, coll_type_t coll, coll_mem_t mem, size_t bytes,
                     double *est)
{
    estimate(sel, coll, mem, bytes, est);
    return price_choice(sel->ncands[coll], est);
}

/*
 * The grid finds where the choice changes to within a quarter of a
 * doubling; the range then starts at the first size that changes it,
 * found by bisection between the grid's two points (a variant that takes
 * calls up to a size, such as shm_ll, ends exactly there).
 */
static size_t first_change(const coll_select_t *sel, coll_type_t coll, coll_mem_t mem,
                           size_t same, size_t changed, int prev)
{
    double est[COLL_CANDIDATES_MAX];

    while (changed - same > 1) {
        size_t mid = same + (changed - same) / 2;

        if (choice_at(sel, coll, mem, mid, est) == prev)
            same = mid;
        else
            changed = mid;
    }
    return changed;
}

static chorus_status_t build_ranges(const coll_select_t *sel, coll_type_t coll, coll_mem_t mem,
                                    coll_ranges_t *r)
{
    size_t cap = 0, last = 0;
    int prev = -2;

    for (size_t x = 0; x <= SELECT_GRID_END; last = x, x = grid_next(x)) {
        coll_range_t range = {.lo = x, .hi = COLL_SIZE_INF};
        int alg = choice_at(sel, coll, mem, x, range.est);

        if (alg == prev)
            continue;
        if (prev != -2) {
            range.lo = first_change(sel, coll, mem, last, x, prev);
            alg = choice_at(sel, coll, mem, range.lo, range.est);
        }
        range.alg = alg >= 0 ? sel->cands[coll][alg] : NULL;
        if (ranges_push(r, &cap, &range) != CHORUS_OK)
            return CHORUS_ERR_NO_MEMORY;
        if (r->count > 1)
            r->ranges[r->count - 2].hi = range.lo;
        prev = alg;
    }
    return CHORUS_OK;
}

/* The candidates of every collective, each within COLL_CANDIDATES_MAX. */
static chorus_status_t list_candidates(coll_select_t *sel)
{
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        int n = coll_alg_list((coll_type_t)c, sel->cands[c], COLL_CANDIDATES_MAX);

        if (n > COLL_CANDIDATES_MAX) {
            chorus_error("%s has %d algorithms, more than the selection holds (%d)",
                         coll_type_name((coll_type_t)c), n, COLL_CANDIDATES_MAX);
            return CHORUS_ERR_INTERNAL;
        }
        sel->ncands[c] = n;
    }
    return CHORUS_OK;
}

static chorus_status_t check_env(const coll_env_t *env)
{
    const tune_model_t *m = env != NULL ? env->model : NULL;

    if (m == NULL || !tune_model_valid(m)) {
        chorus_error("invalid cost model: alpha %g s, beta %g s/B, gamma %g s/B",
                     m ? m->alpha : 0.0, m ? m->beta : 0.0, m ? m->gamma : 0.0);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (env->nranks < 1) {
        chorus_error("invalid rank count %d for the selection table", env->nranks);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

chorus_status_t coll_select_build(const coll_env_t *env, coll_select_t **sel_p)
{
    chorus_status_t status = check_env(env);
    coll_select_t *sel;

    if (status != CHORUS_OK)
        return status;
    sel = calloc(1, sizeof(*sel));
    if (sel == NULL)
        return CHORUS_ERR_NO_MEMORY;
    sel->model = *env->model;
    sel->env = *env;
    sel->env.model = &sel->model;
    sel->env.node_team = NULL;
    status = list_candidates(sel);
    for (int c = 0; c < COLL_TYPE_COUNT && status == CHORUS_OK; c++) {
        for (int m = 0; m < COLL_MEM_TYPE_COUNT && status == CHORUS_OK; m++)
            status = build_ranges(sel, (coll_type_t)c, (coll_mem_t)m, &sel->colls[c][m]);
    }
    if (status != CHORUS_OK) {
        coll_select_destroy(sel);
        return status;
    }
    *sel_p = sel;
    return CHORUS_OK;
}

void coll_select_destroy(coll_select_t *sel)
{
    if (sel == NULL)
        return;
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (int m = 0; m < COLL_MEM_TYPE_COUNT; m++)
            free(sel->colls[c][m].ranges);
    }
    free(sel);
}

/* The range that serves bytes (the last one beyond them), or NULL for an empty table. */
static coll_range_t *select_range(const coll_select_t *sel, coll_type_t coll, coll_mem_t mem,
                                  size_t bytes)
{
    const coll_ranges_t *r;

    if (sel == NULL || (unsigned)coll >= COLL_TYPE_COUNT || (unsigned)mem >= COLL_MEM_TYPE_COUNT)
        return NULL;
    /* A handful of ranges per collective: a linear scan beats a search. */
    r = &sel->colls[coll][mem];
    for (size_t i = 0; i < r->count; i++) {
        if (bytes < r->ranges[i].hi)
            return &r->ranges[i];
    }
    return r->count ? &r->ranges[r->count - 1] : NULL;
}

const coll_alg_t *coll_select_lookup(const coll_select_t *sel, coll_type_t coll,
                                     coll_mem_t mem, size_t bytes)
{
    const coll_range_t *r = select_range(sel, coll, mem, bytes);

    return r != NULL ? r->alg : NULL;
}

static void format_size(char *buf, size_t len, size_t n);

const coll_alg_t *coll_select_call(coll_select_t *sel, coll_type_t coll, coll_mem_t mem,
                                   size_t bytes, int rank)
{
    coll_range_t *r = select_range(sel, coll, mem, bytes);
    const coll_alg_t *alg = r != NULL ? r->alg : NULL;
    char lo[32], hi[32];

    if (alg == NULL || !chorus_log_enabled(CHORUS_LOG_INFO))
        return alg;
    /*
     * Calls of several threads may race to the first use: one of them logs.
     * The table is shared and otherwise read-only, hence the builtins on a
     * plain field that the table's copies and reallocations carry along.
     */
    if (__atomic_load_n(&r->used, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&r->used, 1, __ATOMIC_RELAXED))
        return alg;
    format_size(lo, sizeof(lo), r->lo);
    format_size(hi, sizeof(hi), r->hi);
    chorus_info("rank %d: %s of %zu bytes in %s memory runs %s, chosen by %s for [%s, %s)",
                rank, coll_type_name(coll), bytes, coll_mem_name(mem), alg->name,
                r->user ? "CHORUS_TUNE" : "the model", lo, hi);
    return alg;
}

/* ---- overrides ----------------------------------------------------------- */

typedef struct {
    coll_type_t coll;           /* COLL_TYPE_COUNT: the fc_weight_grad item */
    const coll_alg_t *alg;
    size_t lo;
    size_t hi;
    coll_fc_strategy_t fc;
} select_override_t;

static char *trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Whether alg runs on host memory: what overrides choose among. */
static int serves_host(const coll_alg_t *alg)
{
    return alg->team_ops == NULL ||
           tl_coll_variant_serves(alg->team_ops, alg->team_variant, COLL_MEM_HOST);
}

/* "a, b, c": the collectives, or the host candidates of coll when coll is valid. */
static void list_names(const coll_select_t *sel, coll_type_t coll, char *buf, size_t len)
{
    int n = coll < COLL_TYPE_COUNT ? sel->ncands[coll] : COLL_TYPE_COUNT;
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        const char *name = coll < COLL_TYPE_COUNT ? sel->cands[coll][i]->name
                                                  : coll_type_name((coll_type_t)i);
        int w;

        if (coll < COLL_TYPE_COUNT && !serves_host(sel->cands[coll][i]))
            continue;
        w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* The host candidate of coll called name (case-insensitive), or NULL. */
static const coll_alg_t *find_candidate(const coll_select_t *sel, coll_type_t coll,
                                        const char *name)
{
    for (int i = 0; i < sel->ncands[coll]; i++) {
        if (strcasecmp(name, sel->cands[coll][i]->name) == 0 && serves_host(sel->cands[coll][i]))
            return sel->cands[coll][i];
    }
    return NULL;
}

static chorus_status_t parse_range(char *text, select_override_t *ov, char *why, size_t len)
{
    char *dash = strchr(text, '-');
    char *lo, *hi;

    if (dash == NULL) {
        snprintf(why, len, "range '%s' is not lo-hi", text);
        return CHORUS_ERR_INVALID_ARG;
    }
    *dash = '\0';
    lo = trim(text);
    hi = trim(dash + 1);
    if (chorus__config_parse_size(lo, &ov->lo) != CHORUS_OK) {
        snprintf(why, len, "lower bound '%s' is not a size (digits, then K, M or G)", lo);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (*hi != '\0' && chorus__config_parse_size(hi, &ov->hi) != CHORUS_OK) {
        snprintf(why, len, "upper bound '%s' is not a size (digits, then K, M or G)", hi);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (ov->lo >= ov->hi) {
        snprintf(why, len, "range is empty: %zu is not below %zu", ov->lo, ov->hi);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Parse "coll=alg[@lo-hi]" in place; why says what is wrong. */
static chorus_status_t parse_item(const coll_select_t *sel, char *item, select_override_t *ov,
                                  char *why, size_t len)
{
    char names[256];
    char *eq = strchr(item, '=');
    char *alg, *at;

    if (eq == NULL) {
        snprintf(why, len, "expected collective=algorithm[@lo-hi]");
        return CHORUS_ERR_INVALID_ARG;
    }
    *eq = '\0';
    alg = eq + 1;
    at = strchr(alg, '@');
    if (at != NULL)
        *at = '\0';
    item = trim(item);
    alg = trim(alg);
    if (strcasecmp(item, "fc_weight_grad") == 0) {
        ov->coll = COLL_TYPE_COUNT;
        ov->fc = coll_fc_strategy_from_name(alg);
        if (ov->fc == COLL_FC_STRATEGY_COUNT || at != NULL) {
            snprintf(why, len, "fc_weight_grad takes late, allreduce or auto, with no range");
            return CHORUS_ERR_INVALID_ARG;
        }
        return CHORUS_OK;
    }
    ov->coll = coll_type_from_name(item);
    if (ov->coll == COLL_TYPE_COUNT) {
        list_names(sel, COLL_TYPE_COUNT, names, sizeof(names));
        snprintf(why, len, "unknown collective '%s' (one of %s, fc_weight_grad)", item, names);
        return CHORUS_ERR_INVALID_ARG;
    }
    ov->alg = find_candidate(sel, ov->coll, alg);
    if (ov->alg == NULL) {
        list_names(sel, ov->coll, names, sizeof(names));
        snprintf(why, len, "unknown algorithm '%s' for %s (one of %s)", alg,
                 coll_type_name(ov->coll), names);
        return CHORUS_ERR_INVALID_ARG;
    }
    ov->lo = 0;
    ov->hi = COLL_SIZE_INF;
    return at != NULL ? parse_range(at + 1, ov, why, len) : CHORUS_OK;
}

/*
 * Split text at commas into ovs (room for every comma + 1); empty items
 * are skipped. Logs the first bad item with its text.
 */
static chorus_status_t parse_overrides(const coll_select_t *sel, const char *text,
                                       select_override_t *ovs, size_t *nov_p)
{
    char *copy = strdup(text);
    char *item, *next;
    size_t nov = 0;

    if (copy == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (item = copy; item != NULL; item = next) {
        const char *orig = text + (item - copy);
        char why[512];
        size_t len;

        next = strchr(item, ',');
        len = next ? (size_t)(next - item) : strlen(item);
        if (next != NULL)
            *next++ = '\0';
        item = trim(item);
        if (*item == '\0')
            continue;
        if (parse_item(sel, item, &ovs[nov], why, sizeof(why)) != CHORUS_OK) {
            chorus_error("invalid CHORUS_TUNE item '%.*s': %s", (int)len, orig, why);
            free(copy);
            return CHORUS_ERR_INVALID_ARG;
        }
        nov++;
    }
    free(copy);
    *nov_p = nov;
    return CHORUS_OK;
}

/* Append the parts of r inside [a, b), re-estimated where a range is cut. */
static chorus_status_t clip_into(const coll_select_t *sel, coll_type_t coll,
                                 const coll_ranges_t *r, size_t a, size_t b, coll_ranges_t *out,
                                 size_t *cap)
{
    for (size_t i = 0; i < r->count; i++) {
        coll_range_t piece = r->ranges[i];

        piece.lo = piece.lo > a ? piece.lo : a;
        piece.hi = piece.hi < b ? piece.hi : b;
        if (piece.lo >= piece.hi)
            continue;
        if (piece.lo != r->ranges[i].lo)
            estimate(sel, coll, COLL_MEM_HOST, piece.lo, piece.est);
        if (ranges_push(out, cap, &piece) != CHORUS_OK)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* Neighbours chosen the same way by the same party become one range. */
static void merge_ranges(coll_ranges_t *r)
{
    size_t k = 0;

    for (size_t i = 1; i < r->count; i++) {
        if (r->ranges[i].alg == r->ranges[k].alg && r->ranges[i].user == r->ranges[k].user)
            r->ranges[k].hi = r->ranges[i].hi;
        else
            r->ranges[++k] = r->ranges[i];
    }
    r->count = r->count ? k + 1 : 0;
}

/* Replace r with: r below lo, the override, r from hi on. */
static chorus_status_t apply_override(const coll_select_t *sel, const select_override_t *ov,
                                      coll_ranges_t *r)
{
    coll_ranges_t out = {0};
    size_t cap = 0;
    coll_range_t mine = {.lo = ov->lo, .hi = ov->hi, .alg = ov->alg, .user = 1};
    chorus_status_t status;

    estimate(sel, ov->coll, COLL_MEM_HOST, ov->lo, mine.est);
    status = clip_into(sel, ov->coll, r, 0, ov->lo, &out, &cap);
    if (status == CHORUS_OK)
        status = ranges_push(&out, &cap, &mine);
    if (status == CHORUS_OK && ov->hi != COLL_SIZE_INF)
        status = clip_into(sel, ov->coll, r, ov->hi, COLL_SIZE_INF, &out, &cap);
    if (status != CHORUS_OK) {
        free(out.ranges);
        return status;
    }
    merge_ranges(&out);
    free(r->ranges);
    *r = out;
    return CHORUS_OK;
}

/* Apply ovs to a copy of the host tables, so a failure changes nothing. */
static chorus_status_t apply_overrides(coll_select_t *sel, const select_override_t *ovs,
                                       size_t nov)
{
    coll_ranges_t work[COLL_TYPE_COUNT] = {{0}};
    coll_fc_strategy_t fc = sel->fc;
    chorus_status_t status = CHORUS_OK;

    for (int c = 0; c < COLL_TYPE_COUNT && status == CHORUS_OK; c++) {
        const coll_ranges_t *r = &sel->colls[c][COLL_MEM_HOST];
        size_t bytes = r->count * sizeof(coll_range_t);

        work[c].ranges = malloc(bytes);
        work[c].count = r->count;
        if (work[c].ranges == NULL)
            status = CHORUS_ERR_NO_MEMORY;
        else
            memcpy(work[c].ranges, r->ranges, bytes);
    }
    for (size_t i = 0; i < nov && status == CHORUS_OK; i++) {
        if (ovs[i].coll == COLL_TYPE_COUNT)
            fc = ovs[i].fc;
        else
            status = apply_override(sel, &ovs[i], &work[ovs[i].coll]);
    }
    if (status == CHORUS_OK)
        sel->fc = fc;
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        if (status == CHORUS_OK) {
            free(sel->colls[c][COLL_MEM_HOST].ranges);
            sel->colls[c][COLL_MEM_HOST] = work[c];
        } else {
            free(work[c].ranges);
        }
    }
    return status;
}

/*
 * Overrides name host memory's algorithms. Device memory has one way to
 * run a declared device call where it has any (the node team's kernels),
 * and staging otherwise: nothing to choose between there.
 */
chorus_status_t coll_select_override(coll_select_t *sel, const char *overrides)
{
    select_override_t *ovs;
    size_t n = 1, nov = 0;
    chorus_status_t status;

    if (sel == NULL)
        return CHORUS_ERR_INVALID_ARG;
    if (overrides == NULL || *overrides == '\0')
        return CHORUS_OK;
    for (const char *s = overrides; *s; s++)
        n += *s == ',';
    ovs = calloc(n, sizeof(*ovs));
    if (ovs == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = parse_overrides(sel, overrides, ovs, &nov);
    if (status == CHORUS_OK)
        status = apply_overrides(sel, ovs, nov);
    free(ovs);
    return status;
}

/* Why team variant alg cannot run in env. */
static void why_not_runnable(const coll_env_t *env, const coll_alg_t *alg, char *buf, size_t len)
{
    const tl_coll_variant_t *v = &alg->team_ops->variants[alg->team_variant];

    if (!coll_env_team_of_all(env) || env->team_ops != alg->team_ops)
        snprintf(buf, len, "no %s team holds every rank: the ranks do not all share one node, "
                 "or the %s transport is off", alg->team_ops->name, alg->team_ops->name);
    else
        snprintf(buf, len, "the %s team lacks what the variant needs (team flags 0x%x, "
                 "needed 0x%x)", alg->team_ops->name, env->team_desc.flags, v->needs);
}

/* A schedule builder runs on any layout (a hierarchical one only slower where not spread). */
chorus_status_t coll_select_check(const coll_select_t *sel)
{
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        const coll_ranges_t *r = &sel->colls[c][COLL_MEM_HOST];

        for (size_t i = 0; i < r->count; i++) {
            const coll_alg_t *alg = r->ranges[i].alg;
            char why[256];

            if (!r->ranges[i].user || alg->team_ops == NULL ||
                !isinf(coll_alg_price(alg, &sel->env, r->ranges[i].lo)))
                continue;
            why_not_runnable(&sel->env, alg, why, sizeof(why));
            chorus_error("invalid value for CHORUS_TUNE: %s=%s cannot run here (%s)",
                         coll_type_name((coll_type_t)c), alg->name, why);
            return CHORUS_ERR_INVALID_ARG;
        }
    }
    return CHORUS_OK;
}

chorus_status_t coll_select_create(const coll_env_t *env, const char *overrides,
                                   coll_select_t **sel_p)
{
    coll_select_t *sel;
    chorus_status_t status = coll_select_build(env, &sel);

    if (status != CHORUS_OK)
        return status;
    status = coll_select_override(sel, overrides);
    if (status == CHORUS_OK)
        status = coll_select_check(sel);
    if (status != CHORUS_OK) {
        coll_select_destroy(sel);
        return status;
    }
    *sel_p = sel;
    return CHORUS_OK;
}

/* ---- printing ------------------------------------------------------------ */

/* Exact, in the override grammar's units, so a line can become an override. */
static void format_size(char *buf, size_t len, size_t n)
{
    static const char units[] = "GMK";

    if (n == COLL_SIZE_INF) {
        snprintf(buf, len, "inf");
        return;
    }
    for (int u = 0; u < 3 && n != 0; u++) {
        size_t scale = (size_t)1 << (10 * (3 - u));

        if (n % scale == 0) {
            snprintf(buf, len, "%zu%c", n / scale, units[u]);
            return;
        }
    }
    snprintf(buf, len, "%zu", n);
}

static void format_time(char *buf, size_t len, double seconds)
{
    if (seconds < 1e-3)
        snprintf(buf, len, "%.1fus", seconds * 1e6);
    else if (seconds < 1.0)
        snprintf(buf, len, "%.2fms", seconds * 1e3);
    else
        snprintf(buf, len, "%.2fs", seconds);
}

static void print_range(FILE *out, const coll_select_t *sel, coll_type_t coll,
                        const coll_range_t *r)
{
    char lo[32], hi[32], span[72], t[32];

    format_size(lo, sizeof(lo), r->lo);
    format_size(hi, sizeof(hi), r->hi);
    snprintf(span, sizeof(span), "[%s, %s)", lo, hi);
    fprintf(out, "%-15s %-20s %-13s %-6s", coll_type_name(coll), span,
            r->alg ? r->alg->name : "(none)", r->user ? "user" : "model");
    for (int i = 0; i < sel->ncands[coll]; i++) {
        if (isinf(r->est[i]))
            continue;   /* not a candidate here (the team variants on several nodes) */
        format_time(t, sizeof(t), r->est[i]);
        fprintf(out, " %s=%s", sel->cands[coll][i]->name, t);
    }
    fputc('\n', out);
}

/* The variants of env's team transport that its team can run, comma-separated. */
static void team_variants(const coll_env_t *env, char *buf, size_t len)
{
    const tl_coll_ops_t *ops = env->team_ops;
    size_t used = 0;

    buf[0] = '\0';
    for (int v = 0; v < ops->nvariants && used < len; v++) {
        int w;

        if ((ops->variants[v].needs & env->team_desc.flags) != ops->variants[v].needs)
            continue;
        w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", ops->variants[v].name);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* The model's rates, where the ranks lie and what serves a node. */
static void print_heading(FILE *out, const coll_select_t *sel)
{
    const coll_env_t *env = &sel->env;
    const tune_model_t *m = &sel->model;
    tune_shape_t shape;
    char names[128];

    coll_price_shape(env, &shape);
    fprintf(out, "# algorithm selection for %d ranks: alpha %.1f us, wire %.3g GB/s, "
            "reduce %.3g GB/s, chunk %zu bytes\n", env->nranks, m->alpha * 1e6,
            m->beta > 0.0 ? 1e-9 / m->beta : INFINITY,
            m->gamma > 0.0 ? 1e-9 / m->gamma : INFINITY, m->chunk_bytes);
    if (coll_env_team_of_all(env)) {
        team_variants(env, names, sizeof(names));
        fprintf(out, "# every rank on one node: the %s team's variants %s, priced by the "
                "transport\n", env->team_ops->name, names);
    } else if (env->team_ops != NULL) {
        fprintf(out, "# ranks on %d nodes: node-local stages on %s teams of up to %d ranks\n",
                shape.nnodes, env->team_ops->name, env->team_desc.size);
    } else if (shape.nnodes == 1) {
        fprintf(out, "# every rank on one node, no node team: network transport only\n");
    } else {
        fprintf(out, "# ranks on several nodes: network transport only\n");
    }
    if (shape.nnodes == 1 && tune_share(env->nranks, env->cores) > 1.0)
        fprintf(out, "# %d ranks on %d cores: every rank's work %.3gx (ranks share the cores)\n",
                env->nranks, env->cores, tune_share(env->nranks, env->cores));
    fprintf(out, "# %-13s %-20s %-13s %-6s %s\n", "collective", "bytes", "algorithm", "by",
            "model estimates at the range's start");
}

/* Whether some algorithm serves some call on mem. */
static int mem_served(const coll_select_t *sel, coll_mem_t mem)
{
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        for (size_t i = 0; i < sel->colls[c][mem].count; i++) {
            if (sel->colls[c][mem].ranges[i].alg != NULL)
                return 1;
        }
    }
    return 0;
}

void coll_select_print(FILE *out, const coll_select_t *sel)
{
    print_heading(out, sel);
    for (int m = 0; m < COLL_MEM_TYPE_COUNT; m++) {
        if (m != COLL_MEM_HOST && !mem_served(sel, (coll_mem_t)m)) {
            fprintf(out, "# %s memory: no algorithm runs on the devices (such calls are "
                    "staged through host memory)\n", coll_mem_name((coll_mem_t)m));
            continue;
        }
        if (m != COLL_MEM_HOST)
            fprintf(out, "# %s memory, calls every rank declares so (mem_type); calls not "
                    "declared, and where (none), are staged through host memory:\n",
                    coll_mem_name((coll_mem_t)m));
        for (int c = 0; c < COLL_TYPE_COUNT; c++) {
            for (size_t i = 0; i < sel->colls[c][m].count; i++)
                print_range(out, sel, (coll_type_t)c, &sel->colls[c][m].ranges[i]);
        }
    }
}
