/* Selection tables: built from the cost model, then user overrides. */
#include "tuning/select.h"

#include <ctype.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "tuning/cost_shm.h"
#include "util/log.h"

/* The model's grid ends here; the last winner extends to infinity. */
#define TUNE_GRID_END ((size_t)1 << 40)

/*
 * Candidates that move the same bytes in a different number of messages
 * (ring and Rabenseifner at large sizes) differ by less than the model's
 * error. There the first candidate keeps the range unless another is
 * estimated faster by more than this fraction: ring talks to neighbours
 * only and pipelines its chunks, which the model does not credit.
 */
#define TUNE_PREFER_MARGIN 0.05

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

static void estimate(const tune_table_t *t, tune_coll_t coll, size_t bytes, double *est)
{
    for (int i = 0; i < TUNE_ALGS_MAX; i++)
        est[i] = i < tune_coll_nalgs(coll) ? tune_cost(&t->model, coll, i, bytes, t->nranks) : 0.0;
}

static int model_choice(tune_coll_t coll, const double *est)
{
    int best = 0;

    for (int i = 1; i < tune_coll_nalgs(coll); i++) {
        if (est[i] < est[best])
            best = i;
    }
    return est[0] <= est[best] * (1.0 + TUNE_PREFER_MARGIN) ? 0 : best;
}

static chorus_status_t ranges_push(tune_ranges_t *r, size_t *cap, const tune_range_t *range)
{
    if (r->count == *cap) {
        size_t ncap = *cap ? 2 * *cap : 8;
        tune_range_t *grown = realloc(r->ranges, ncap * sizeof(*grown));

        if (grown == NULL)
            return CHORUS_ERR_NO_MEMORY;
        r->ranges = grown;
        *cap = ncap;
    }
    r->ranges[r->count++] = *range;
    return CHORUS_OK;
}

static chorus_status_t build_coll(const tune_table_t *t, tune_coll_t coll, tune_ranges_t *r)
{
    size_t cap = 0;
    int prev = -1;

    for (size_t x = 0; x <= TUNE_GRID_END; x = grid_next(x)) {
        tune_range_t range = {.lo = x, .hi = TUNE_SIZE_INF};
        int alg;

        estimate(t, coll, x, range.est);
        alg = model_choice(coll, range.est);
        if (alg == prev)
            continue;
        range.alg = tune_coll_alg(coll, alg);
        if (ranges_push(r, &cap, &range) != CHORUS_OK)
            return CHORUS_ERR_NO_MEMORY;
        if (r->count > 1)
            r->ranges[r->count - 2].hi = x;
        prev = alg;
    }
    return CHORUS_OK;
}

static int model_valid(const tune_model_t *m)
{
    return isfinite(m->alpha) && m->alpha >= 0.0 && isfinite(m->beta) && m->beta >= 0.0
           && isfinite(m->gamma) && m->gamma >= 0.0;
}

chorus_status_t tune_table_build(const tune_model_t *model, int p, tune_table_t **table_p)
{
    tune_table_t *t;

    if (model == NULL || !model_valid(model)) {
        chorus_error("invalid cost model: alpha %g s, beta %g s/B, gamma %g s/B",
                     model ? model->alpha : 0.0, model ? model->beta : 0.0,
                     model ? model->gamma : 0.0);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (p < 1) {
        chorus_error("invalid rank count %d for the selection table", p);
        return CHORUS_ERR_INVALID_ARG;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    t->model = *model;
    t->nranks = p;
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        if (build_coll(t, (tune_coll_t)c, &t->colls[c]) != CHORUS_OK) {
            tune_table_destroy(t);
            return CHORUS_ERR_NO_MEMORY;
        }
    }
    *table_p = t;
    return CHORUS_OK;
}

void tune_table_destroy(tune_table_t *table)
{
    if (table == NULL)
        return;
    for (int c = 0; c < TUNE_COLL_COUNT; c++)
        free(table->colls[c].ranges);
    free(table);
}

const char *tune_table_lookup(const tune_table_t *table, tune_coll_t coll, size_t bytes)
{
    const tune_ranges_t *r;

    if (table == NULL || (unsigned)coll >= TUNE_COLL_COUNT)
        return NULL;
    /* A handful of ranges per collective: a linear scan beats a search. */
    r = &table->colls[coll];
    for (size_t i = 0; i < r->count; i++) {
        if (bytes < r->ranges[i].hi)
            return r->ranges[i].alg;
    }
    return r->count ? r->ranges[r->count - 1].alg : NULL;
}

/* ---- overrides ----------------------------------------------------------- */

typedef struct {
    tune_coll_t coll;
    int alg;
    size_t lo;
    size_t hi;
} tune_override_t;

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

/* "a, b, c": the collectives, or the candidates of coll when coll is valid. */
static void list_names(tune_coll_t coll, char *buf, size_t len)
{
    int n = coll < TUNE_COLL_COUNT ? tune_coll_nalgs(coll) : TUNE_COLL_COUNT;
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        const char *name = coll < TUNE_COLL_COUNT ? tune_coll_alg(coll, i)
                                                  : tune_coll_name((tune_coll_t)i);
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", name);

        used += w > 0 ? (size_t)w : 0;
    }
}

static chorus_status_t parse_range(char *text, tune_override_t *ov, char *why, size_t len)
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
static chorus_status_t parse_item(char *item, tune_override_t *ov, char *why, size_t len)
{
    char names[128];
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
    ov->coll = tune_coll_from_name(item);
    if (ov->coll == TUNE_COLL_COUNT) {
        list_names(TUNE_COLL_COUNT, names, sizeof(names));
        snprintf(why, len, "unknown collective '%s' (one of %s)", item, names);
        return CHORUS_ERR_INVALID_ARG;
    }
    ov->alg = tune_alg_index(ov->coll, alg);
    if (ov->alg < 0) {
        list_names(ov->coll, names, sizeof(names));
        snprintf(why, len, "unknown algorithm '%s' for %s (one of %s)", alg,
                 tune_coll_name(ov->coll), names);
        return CHORUS_ERR_INVALID_ARG;
    }
    ov->lo = 0;
    ov->hi = TUNE_SIZE_INF;
    return at != NULL ? parse_range(at + 1, ov, why, len) : CHORUS_OK;
}

/*
 * Split text at commas into ovs (room for every comma + 1); empty items
 * are skipped. Logs the first bad item with its text.
 */
static chorus_status_t parse_overrides(const char *text, tune_override_t *ovs, size_t *nov_p)
{
    char *copy = strdup(text);
    char *item, *next;
    size_t nov = 0;

    if (copy == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (item = copy; item != NULL; item = next) {
        const char *orig = text + (item - copy);
        char why[256];
        size_t len;

        next = strchr(item, ',');
        len = next ? (size_t)(next - item) : strlen(item);
        if (next != NULL)
            *next++ = '\0';
        item = trim(item);
        if (*item == '\0')
            continue;
        if (parse_item(item, &ovs[nov], why, sizeof(why)) != CHORUS_OK) {
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
static chorus_status_t clip_into(const tune_table_t *t, tune_coll_t coll, const tune_ranges_t *r,
                                 size_t a, size_t b, tune_ranges_t *out, size_t *cap)
{
    for (size_t i = 0; i < r->count; i++) {
        tune_range_t piece = r->ranges[i];

        piece.lo = piece.lo > a ? piece.lo : a;
        piece.hi = piece.hi < b ? piece.hi : b;
        if (piece.lo >= piece.hi)
            continue;
        if (piece.lo != r->ranges[i].lo)
            estimate(t, coll, piece.lo, piece.est);
        if (ranges_push(out, cap, &piece) != CHORUS_OK)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* Neighbours chosen the same way by the same party become one range. */
static void merge_ranges(tune_ranges_t *r)
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
static chorus_status_t apply_override(const tune_table_t *t, const tune_override_t *ov,
                                      tune_ranges_t *r)
{
    tune_ranges_t out = {0};
    size_t cap = 0;
    tune_range_t mine = {.lo = ov->lo, .hi = ov->hi, .user = 1};
    chorus_status_t status;

    mine.alg = tune_coll_alg(ov->coll, ov->alg);
    estimate(t, ov->coll, ov->lo, mine.est);
    status = clip_into(t, ov->coll, r, 0, ov->lo, &out, &cap);
    if (status == CHORUS_OK)
        status = ranges_push(&out, &cap, &mine);
    if (status == CHORUS_OK && ov->hi != TUNE_SIZE_INF)
        status = clip_into(t, ov->coll, r, ov->hi, TUNE_SIZE_INF, &out, &cap);
    if (status != CHORUS_OK) {
        free(out.ranges);
        return status;
    }
    merge_ranges(&out);
    free(r->ranges);
    *r = out;
    return CHORUS_OK;
}

/* Apply ovs to a copy of the table's ranges, so a failure changes nothing. */
static chorus_status_t apply_overrides(tune_table_t *table, const tune_override_t *ovs,
                                       size_t nov)
{
    tune_ranges_t work[TUNE_COLL_COUNT] = {{0}};
    chorus_status_t status = CHORUS_OK;

    for (int c = 0; c < TUNE_COLL_COUNT && status == CHORUS_OK; c++) {
        size_t bytes = table->colls[c].count * sizeof(tune_range_t);

        work[c].ranges = malloc(bytes);
        work[c].count = table->colls[c].count;
        if (work[c].ranges == NULL)
            status = CHORUS_ERR_NO_MEMORY;
        else
            memcpy(work[c].ranges, table->colls[c].ranges, bytes);
    }
    for (size_t i = 0; i < nov && status == CHORUS_OK; i++)
        status = apply_override(table, &ovs[i], &work[ovs[i].coll]);
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        if (status == CHORUS_OK) {
            free(table->colls[c].ranges);
            table->colls[c] = work[c];
        } else {
            free(work[c].ranges);
        }
    }
    return status;
}

chorus_status_t tune_table_override(tune_table_t *table, const char *overrides)
{
    tune_override_t *ovs;
    size_t n = 1, nov = 0;
    chorus_status_t status;

    if (table == NULL)
        return CHORUS_ERR_INVALID_ARG;
    if (overrides == NULL || *overrides == '\0')
        return CHORUS_OK;
    for (const char *s = overrides; *s; s++)
        n += *s == ',';
    ovs = calloc(n, sizeof(*ovs));
    if (ovs == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = parse_overrides(overrides, ovs, &nov);
    if (status == CHORUS_OK)
        status = apply_overrides(table, ovs, nov);
    free(ovs);
    return status;
}

/* ---- printing ------------------------------------------------------------ */

/* Exact, in the override grammar's units, so a line can become an override. */
static void format_size(char *buf, size_t len, size_t n)
{
    static const char units[] = "GMK";

    if (n == TUNE_SIZE_INF) {
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

static void print_range(FILE *out, tune_coll_t coll, const tune_range_t *r)
{
    char lo[32], hi[32], span[72], t[32];

    format_size(lo, sizeof(lo), r->lo);
    format_size(hi, sizeof(hi), r->hi);
    snprintf(span, sizeof(span), "[%s, %s)", lo, hi);
    fprintf(out, "%-15s %-20s %-13s %-6s", tune_coll_name(coll), span, r->alg,
            r->user ? "user" : "model");
    for (int i = 0; i < tune_coll_nalgs(coll); i++) {
        if (isinf(r->est[i]))
            continue;   /* not a candidate here (node-local ones on several nodes) */
        format_time(t, sizeof(t), r->est[i]);
        fprintf(out, " %s=%s", tune_coll_alg(coll, i), t);
    }
    fputc('\n', out);
}

void tune_table_print(FILE *out, const tune_table_t *table)
{
    const tune_model_t *m = &table->model;

    fprintf(out, "# algorithm selection for %d ranks: alpha %.1f us, wire %.3g GB/s, "
            "reduce %.3g GB/s, chunk %zu bytes\n", table->nranks, m->alpha * 1e6,
            m->beta > 0.0 ? 1e-9 / m->beta : INFINITY,
            m->gamma > 0.0 ? 1e-9 / m->gamma : INFINITY, m->chunk_bytes);
    if (m->node_local) {
        fprintf(out, "# every rank on one node: shared-memory candidates (steps %.1f us, copies "
                "%.3g GB/s, reduce %.3g GB/s, single copy %s at %.3g GB/s, slot %zu bytes)\n",
                m->shm_alpha * 1e6, m->shm_beta > 0.0 ? 1e-9 / m->shm_beta : INFINITY,
                m->shm_gamma > 0.0 ? 1e-9 / m->shm_gamma : INFINITY,
                m->node_cma ? "available" : "not available",
                m->cma_beta > 0.0 ? 1e-9 / m->cma_beta : INFINITY, m->shm_slot);
        if (m->node_cores > 0 && table->nranks > m->node_cores)
            fprintf(out, "# %d ranks on %d cores: steps %.0f us, every rank's work %.3gx "
                    "(ranks share the cores)\n", table->nranks, m->node_cores,
                    m->shm_alpha_oversub * 1e6, tune_shm_share(m, table->nranks));
    } else
        fprintf(out, "# ranks on several nodes: network transport only\n");
    fprintf(out, "# %-13s %-20s %-13s %-6s %s\n", "collective", "bytes", "algorithm", "by",
            "model estimates at the range's start");
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < table->colls[c].count; i++)
            print_range(out, (tune_coll_t)c, &table->colls[c].ranges[i]);
    }
}

/* ---- configuration ------------------------------------------------------- */

static const chorus__config_var_t tune_config_vars[] = {
    {
        .name = "CHORUS_TUNE",
        .default_value = "",
        .help = "overrides of the algorithm selection: coll=alg[@lo-hi],... with sizes in "
                "bytes (K, M, G suffixes; an empty hi means no bound), e.g. "
                "allreduce=rd@0-64K,broadcast=chain; chorus-info prints the table",
        .parse = chorus__config_parse_string,
        .offset = offsetof(tune_config_t, tune),
    },
    {
        .name = "CHORUS_TUNE_ALPHA_US",
        .default_value = "30",
        .help = "cost model: latency of one message, in microseconds",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, alpha_us),
    },
    {
        .name = "CHORUS_TUNE_BANDWIDTH_GBS",
        .default_value = "2",
        .help = "cost model: bandwidth of one link, in GB/s (1e9 bytes per second)",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, bandwidth_gbs),
    },
    {
        .name = "CHORUS_TUNE_REDUCE_GBS",
        .default_value = "4",
        .help = "cost model: reduction speed, in GB/s of input reduced",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, reduce_gbs),
    },
    {
        .name = "CHORUS_TUNE_NET_ALPHA_US",
        .default_value = "50",
        .help = "cost model, ranks on several nodes: latency of one message between nodes, "
                "in microseconds",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, net_alpha_us),
    },
    {
        .name = "CHORUS_TUNE_NET_BANDWIDTH_GBS",
        .default_value = "1.25",
        .help = "cost model, ranks on several nodes: bandwidth of one node's network link in "
                "GB/s, shared by the node's ranks (CHORUS_TUNE_BANDWIDTH_GBS is then the link "
                "between ranks of one node)",
        .parse = chorus__config_parse_double,
        .offset = offsetof(tune_config_t, net_bandwidth_gbs),
    },
};

const chorus__config_table_t tune_config_table = {
    .component = "tune",
    .description = "algorithm selection",
    .vars = tune_config_vars,
    .count = sizeof(tune_config_vars) / sizeof(tune_config_vars[0]),
};

/* A rate variable: finite, and above 0 (rates) or at least 0 (latencies). */
static int rate_valid(const char *name, double v, int positive)
{
    if (isfinite(v) && (positive ? v > 0.0 : v >= 0.0))
        return 1;
    chorus_error("invalid %s %g: must be %s", name, v, positive ? "above 0" : "0 or more");
    return 0;
}

chorus_status_t tune_model_from_config(const tune_config_t *config, size_t chunk_bytes,
                                       tune_model_t *model_p)
{
    if (!rate_valid("CHORUS_TUNE_ALPHA_US", config->alpha_us, 0) ||
        !rate_valid("CHORUS_TUNE_BANDWIDTH_GBS", config->bandwidth_gbs, 1) ||
        !rate_valid("CHORUS_TUNE_REDUCE_GBS", config->reduce_gbs, 1) ||
        !rate_valid("CHORUS_TUNE_NET_ALPHA_US", config->net_alpha_us, 0) ||
        !rate_valid("CHORUS_TUNE_NET_BANDWIDTH_GBS", config->net_bandwidth_gbs, 1))
        return CHORUS_ERR_INVALID_ARG;
    tune_model_default(model_p);
    model_p->net_alpha = config->net_alpha_us * 1e-6;
    model_p->net_beta = 1.0 / (config->net_bandwidth_gbs * 1e9);
    model_p->alpha = config->alpha_us * 1e-6;
    model_p->beta = 1.0 / (config->bandwidth_gbs * 1e9);
    model_p->gamma = 1.0 / (config->reduce_gbs * 1e9);
    model_p->chunk_bytes = chunk_bytes ? chunk_bytes : TUNE_DEFAULT_CHUNK_BYTES;
    return CHORUS_OK;
}

chorus_status_t tune_table_create(const tune_config_t *config, int p, size_t chunk_bytes,
                                  tune_table_t **table_p)
{
    return tune_table_create_node(config, p, chunk_bytes, NULL, table_p);
}

/* An override that names a candidate the model cannot run here. */
static chorus_status_t check_runnable(const tune_table_t *t)
{
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        for (size_t i = 0; i < t->colls[c].count; i++) {
            const tune_range_t *r = &t->colls[c].ranges[i];
            int alg = tune_alg_index((tune_coll_t)c, r->alg);

            /* A hierarchical algorithm runs on any layout, only slower where not spread. */
            if (r->user && !tune_alg_spread((tune_coll_t)c, alg) &&
                isinf(tune_cost(&t->model, (tune_coll_t)c, alg, r->lo, t->nranks))) {
                chorus_error("invalid value for CHORUS_TUNE: %s=%s cannot run here (%s)",
                             tune_coll_name((tune_coll_t)c), r->alg,
                             t->model.node_local ? "cross-memory attach is not available"
                                                 : "the ranks do not all share one node, or "
                                                   "CHORUS_SHM=0");
                return CHORUS_ERR_INVALID_ARG;
            }
        }
    }
    return CHORUS_OK;
}

int tune_usable_cores(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
        return 1;
    return CPU_COUNT(&set);
}

chorus_status_t tune_table_create_node(const tune_config_t *config, int p, size_t chunk_bytes,
                                       const tune_node_t *node, tune_table_t **table_p)
{
    return tune_table_create_job(config, p, chunk_bytes, node, NULL, table_p);
}

void tune_spread_of(const topo_layout_t *layout, tune_spread_t *spread)
{
    spread->nnodes = layout->nnodes;
    spread->local_min = layout->local_min;
    spread->local_max = layout->local_max;
    spread->ring_crossings = layout->ring_crossings;
}

chorus_status_t tune_table_create_job(const tune_config_t *config, int p, size_t chunk_bytes,
                                      const tune_node_t *node, const tune_spread_t *spread,
                                      tune_table_t **table_p)
{
    tune_model_t model;
    tune_table_t *table;
    chorus_status_t status;

    status = tune_model_from_config(config, chunk_bytes, &model);
    if (status != CHORUS_OK)
        return status;
    if (node != NULL) {
        model.node_local = 1;
        model.node_cma = node->cma;
        model.shm_slot = node->slot_bytes;
        model.node_cores = node->cores;
    }
    if (spread != NULL && spread->nnodes > 1) {
        model.nnodes = spread->nnodes;
        model.local_min = spread->local_min;
        model.local_max = spread->local_max;
        model.ring_crossings = spread->ring_crossings;
    }
    status = tune_table_build(&model, p, &table);
    if (status != CHORUS_OK)
        return status;
    status = tune_table_override(table, config->tune.s);
    if (status == CHORUS_OK)
        status = check_runnable(table);
    if (status != CHORUS_OK) {
        tune_table_destroy(table);
        return status;
    }
    *table_p = table;
    return CHORUS_OK;
}
