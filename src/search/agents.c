/* agents.c: the specialists' proposals: each turns a parent point into a child point of one of the
 * problem's families, in its own way, and every point it returns passes the family's check.
 *
 * A step is taken in value order, not domain order: a family lists a domain in whatever order suits
 * its index (softmax lists threads-per-row as 32..1024 then 16..1), so the neighbour of a value is
 * the next smaller or larger value of its domain. A one-parameter step often breaks a constraint
 * that couples two parameters (threads per block and threads per row); after a dozen tries the
 * agent steps two parameters at once (one of its class and one other). The fusion agent is honest
 * about what it can do today: no family fuses a neighbouring op into a problem it was not captured
 * with, so it reports the opportunities it sees in RUN/model.json (the coordinator records them as
 * events) and proposes a random neighbour, like a geometry or vector step over any parameter. */
#include "agents.h"

#include <string.h>
#include <strings.h>

static const char *const agent_names[KILN_AGENT_COUNT] = {"geometry", "vector", "algorithm",
                                                          "fusion",   "random", "llm"};

const char *kiln_agent_name(int kind) {
    return kind >= 0 && kind < KILN_AGENT_COUNT ? agent_names[kind] : "other";
}

int kiln_agent_parse(const char *name) {
    for (int i = 0; i < KILN_AGENT_COUNT; i++)
        if (strcmp(agent_names[i], name) == 0)
            return i;
    return -1;
}

static int has_word(const char *name, const char *word) {
    size_t n = strlen(word);
    for (const char *s = name; *s; s++)
        if (strncasecmp(s, word, n) == 0)
            return 1;
    return 0;
}

kiln_param_class kiln_agent_param_class(const char *param_name) {
    static const char *const vector[] = {"VEC", "UNROLL", "WIDTH", "ITEMS"};
    static const char *const geometry[] = {"THREADS", "ROWS",  "CLUSTER", "SPLIT", "BLOCK",
                                           "TPR",     "GROUP", "GRID",    "WARP",  "TILE"};
    for (size_t i = 0; i < sizeof vector / sizeof vector[0]; i++)
        if (has_word(param_name, vector[i]))
            return KILN_PARAM_VECTOR;
    for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
        if (has_word(param_name, geometry[i]))
            return KILN_PARAM_GEOMETRY;
    return KILN_PARAM_ALGORITHM;
}

uint64_t kiln_agent_rand(uint64_t *state) {
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ULL;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static int rand_below(uint64_t *rng, int n) {
    return n <= 1 ? 0 : (int)(kiln_agent_rand(rng) % (uint64_t)n);
}

/* Whether point passes the check of family slot for the problem. */
static int point_valid(const kiln_agent_problem *ap, int slot, const int64_t *point) {
    return kiln_family_point_ok(ap->fams[slot], ap->p, &ap->matches[slot], point);
}

int kiln_agent_random_point(const kiln_agent_problem *ap, int slot, uint64_t *rng, int64_t *point) {
    const kiln_family *f = ap->fams[slot];
    for (int t = 0; t < 256; t++) {
        for (int i = 0; i < f->n_params; i++)
            point[i] = f->params[i].values[rand_below(rng, f->params[i].n_values)];
        if (point_valid(ap, slot, point))
            return 0;
    }
    /* a constrained space: walk the index space from a random start */
    int64_t size = kiln_family_space_size(f);
    int64_t start = size > 0 ? (int64_t)(kiln_agent_rand(rng) % (uint64_t)size) : 0;
    int64_t scan = size < 20000 ? size : 20000;
    for (int64_t k = 0; k < scan; k++) {
        kiln_family_point(f, (start + k) % size, point);
        if (point_valid(ap, slot, point))
            return 0;
    }
    return -1;
}

int kiln_agent_start_point(const kiln_agent_problem *ap, int slot, uint64_t *rng, int64_t *point) {
    const kiln_family *f = ap->fams[slot];
    int64_t index = kiln_family_start_index(f, ap->p, &ap->matches[slot], 20000, NULL);
    if (index >= 0) {
        kiln_family_point(f, index, point);
        return 0;
    }
    return kiln_agent_random_point(ap, slot, rng, point);
}

/* The value next to point[i] in value order, dir -1 or +1; returns 0 when there is none that way.
 */
static int step_value(const kiln_family_param *prm, int64_t cur, int dir, int64_t *out) {
    int found = 0;
    int64_t best = 0;
    for (int j = 0; j < prm->n_values; j++) {
        int64_t v = prm->values[j];
        if (dir > 0 && v > cur && (!found || v < best)) {
            best = v;
            found = 1;
        }
        if (dir < 0 && v < cur && (!found || v > best)) {
            best = v;
            found = 1;
        }
    }
    if (found)
        *out = best;
    return found;
}

/* Steps parameter i of point by one neighbouring value, a random direction first. */
static int step_param(const kiln_family *f, int i, int64_t *point, uint64_t *rng) {
    int dir = rand_below(rng, 2) ? 1 : -1;
    int64_t v;
    if (step_value(&f->params[i], point[i], dir, &v) ||
        step_value(&f->params[i], point[i], -dir, &v)) {
        point[i] = v;
        return 1;
    }
    return 0;
}

/* Params of family f in class cls (or every param when cls < 0); returns how many. */
static int params_of_class(const kiln_family *f, int cls, int *idx) {
    int n = 0;
    for (int i = 0; i < f->n_params; i++)
        if (f->params[i].n_values > 1 &&
            (cls < 0 || (int)kiln_agent_param_class(f->params[i].name) == cls))
            idx[n++] = i;
    return n;
}

/* Whether one step of one of the params idx[0..n) leads from parent to a valid point. */
static int any_valid_step(const kiln_agent_problem *ap, int slot, const int64_t *parent,
                          const int *idx, int n) {
    const kiln_family *f = ap->fams[slot];
    for (int k = 0; k < n; k++)
        for (int dir = -1; dir <= 1; dir += 2) {
            int64_t pt[KILN_FAMILY_MAX_PARAMS], v;
            memcpy(pt, parent, sizeof pt);
            if (!step_value(&f->params[idx[k]], parent[idx[k]], dir, &v))
                continue;
            pt[idx[k]] = v;
            if (point_valid(ap, slot, pt))
                return 1;
        }
    return 0;
}

/* One or two steps from parent in the params of class cls (any param when none of its class can
 * move alone); valid points only. */
static int neighbour(const kiln_agent_problem *ap, int slot, const int64_t *parent, int cls,
                     int attempt, uint64_t *rng, kiln_proposal *out) {
    const kiln_family *f = ap->fams[slot];
    int idx[KILN_FAMILY_MAX_PARAMS], all[KILN_FAMILY_MAX_PARAMS];
    int n = params_of_class(f, cls, idx);
    int n_all = params_of_class(f, -1, all);
    if (n_all == 0) {
        snprintf(out->note, sizeof out->note, "family %s has no parameter to step", f->name);
        return -1;
    }
    const char *fallback = "";
    if (n == 0) {
        memcpy(idx, all, sizeof idx);
        n = n_all;
        fallback = " (no param of its class: any param)";
    } else if (!any_valid_step(ap, slot, parent, idx, n)) {
        /* e.g. the vector agent at a point that holds the row in registers (no unrolled loop) and
         * uses the only vector width that divides the rows: its class cannot move alone */
        memcpy(idx, all, sizeof idx);
        n = n_all;
        fallback = " (no valid step of its class here: any param)";
    }
    /* later attempts start further away, so that a retry after a duplicate moves on */
    int extra = attempt > 3 ? 3 : attempt;
    for (int t = 0; t < 36; t++) {
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        memcpy(pt, parent, sizeof pt);
        int i = idx[rand_below(rng, n)];
        if (!step_param(f, i, pt, rng))
            continue;
        int steps = 1 + extra + (t >= 12) + (t >= 24);
        int j = i;
        for (int s = 1; s < steps; s++) {
            j = all[rand_below(rng, n_all)];
            step_param(f, j, pt, rng);
        }
        if (memcmp(pt, parent, sizeof pt) == 0 || !point_valid(ap, slot, pt))
            continue;
        memcpy(out->point, pt, sizeof pt);
        out->slot = slot;
        snprintf(out->note, sizeof out->note, "%s %lld -> %lld%s%s", f->params[i].name,
                 (long long)parent[i], (long long)pt[i], steps > 1 ? " (+ other steps)" : "",
                 fallback);
        return 0;
    }
    snprintf(out->note, sizeof out->note, "no valid neighbour of the parent in %s after 36 tries",
             f->name);
    return -1;
}

static int start(const kiln_agent_problem *ap, int slot, int attempt, uint64_t *rng,
                 kiln_proposal *out) {
    int rc = attempt == 0 ? kiln_agent_start_point(ap, slot, rng, out->point)
                          : kiln_agent_random_point(ap, slot, rng, out->point);
    out->slot = slot;
    snprintf(out->note, sizeof out->note, "%s point of %s", attempt == 0 ? "starting" : "random",
             ap->fams[slot]->name);
    if (rc)
        snprintf(out->note, sizeof out->note, "no valid point of %s", ap->fams[slot]->name);
    return rc;
}

int kiln_agent_propose(int kind, const kiln_agent_problem *ap, int parent_slot,
                       const int64_t *parent_point, int attempt, uint64_t *rng,
                       kiln_proposal *out) {
    memset(out, 0, sizeof *out);
    out->used = kind;
    if (kind == KILN_AGENT_LLM) {
        snprintf(out->note, sizeof out->note, "the llm agent writes kernels, not points");
        return -1;
    }
    if (ap->n_families <= 0) {
        snprintf(out->note, sizeof out->note, "no family matches the problem");
        return -1;
    }
    if (parent_slot < 0 || parent_slot >= ap->n_families) {
        /* the root: where the tree starts */
        int slot = 0;
        if (kind == KILN_AGENT_ALGORITHM || kind == KILN_AGENT_RANDOM || attempt > 0)
            slot = rand_below(rng, ap->n_families);
        if (kind == KILN_AGENT_RANDOM)
            attempt = attempt > 0 ? attempt : 1; /* a random point, never the first one */
        return start(ap, slot, attempt, rng, out);
    }
    /* A third try at one selection: the parent's neighbourhood gave two duplicates, so it is mostly
     * seen. A uniform draw of the family's space goes on from there (credited to the random agent):
     * on a small space (a depthwise convolution's 170 points) the specialists' steps alone ended
     * the problem as exhausted at 39 candidates of a budget of 50, with 867 duplicates. */
    if (attempt >= 2 && kind != KILN_AGENT_RANDOM) {
        kind = KILN_AGENT_RANDOM;
        out->used = kind;
    }
    switch (kind) {
    case KILN_AGENT_GEOMETRY:
        return neighbour(ap, parent_slot, parent_point, KILN_PARAM_GEOMETRY, attempt, rng, out);
    case KILN_AGENT_VECTOR:
        return neighbour(ap, parent_slot, parent_point, KILN_PARAM_VECTOR, attempt, rng, out);
    case KILN_AGENT_ALGORITHM:
        /* another family when there is one (half the time), else an algorithm parameter */
        if (ap->n_families > 1 && rand_below(rng, 2) == 0) {
            int slot = rand_below(rng, ap->n_families - 1);
            if (slot >= parent_slot)
                slot++;
            int rc = start(ap, slot, attempt, rng, out);
            if (rc == 0) {
                char *note = xasprintf("switch %s -> %s (%s)", ap->fams[parent_slot]->name,
                                       ap->fams[slot]->name, out->note);
                snprintf(out->note, sizeof out->note, "%s", note);
                free(note);
                return 0;
            }
        }
        return neighbour(ap, parent_slot, parent_point, KILN_PARAM_ALGORITHM, attempt, rng, out);
    case KILN_AGENT_RANDOM: {
        out->slot = parent_slot;
        if (kiln_agent_random_point(ap, parent_slot, rng, out->point) == 0) {
            snprintf(out->note, sizeof out->note, "random point of %s",
                     ap->fams[parent_slot]->name);
            return 0;
        }
        snprintf(out->note, sizeof out->note, "no valid point of %s", ap->fams[parent_slot]->name);
        return -1;
    }
    case KILN_AGENT_FUSION:
    default:
        /* no family fuses neighbours yet: a neighbour in any parameter */
        return neighbour(ap, parent_slot, parent_point, -1, attempt, rng, out);
    }
}

static const char *str_field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int int_field(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

/* Ops are listed with "id" = position; look by id, falling back to a scan when they are not. */
static const cJSON *op_by_id(const cJSON *ops, int id) {
    const cJSON *o = cJSON_GetArrayItem(ops, id);
    if (o && int_field(o, "id", -1) == id)
        return o;
    cJSON_ArrayForEach(o, ops) if (int_field(o, "id", -1) == id) return o;
    return NULL;
}

static char *describe(const cJSON *op, int id) {
    const char *aten = str_field(op, "aten");
    const char *module = str_field(op, "module");
    return xasprintf("%s (op %d%s%s)", aten ? aten : "?", id, module && module[0] ? ", " : "",
                     module && module[0] ? module : "");
}

int kiln_agent_fusion_scan(const cJSON *model, const char *name, char **lines, int max) {
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(model, "ops");
    const cJSON *edges = cJSON_GetObjectItemCaseSensitive(model, "edges");
    if (!cJSON_IsArray(ops) || !cJSON_IsArray(edges) || max <= 0)
        return 0;
    /* the problem's first call: one op for an aten problem ("problem"), the contiguous run of ops
     * of the first module call for a module problem ("module_problem") */
    int first = -1, n_mine = 0, by_module = 0;
    int mine[256];
    const cJSON *op;
    cJSON_ArrayForEach(op, ops) {
        const char *pr = str_field(op, "problem");
        const char *mp = str_field(op, "module_problem");
        int as_op = pr && strcmp(pr, name) == 0;
        int as_module = mp && strcmp(mp, name) == 0;
        int id = int_field(op, "id", -1);
        if (first < 0) {
            if (!as_op && !as_module)
                continue;
            first = id;
            by_module = !as_op;
            mine[n_mine++] = id;
            if (!by_module)
                break;
        } else if (as_module && n_mine < 256) {
            mine[n_mine++] = id;
        } else {
            break;
        }
    }
    if (first < 0)
        return 0;
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, edges) {
        if (n >= max)
            break;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 3)
            continue;
        int prod = cJSON_GetArrayItem(e, 0)->valueint, cons = cJSON_GetArrayItem(e, 1)->valueint;
        int tensor = cJSON_GetArrayItem(e, 2)->valueint;
        int p_in = 0, c_in = 0;
        for (int i = 0; i < n_mine; i++) {
            p_in |= mine[i] == prod;
            c_in |= mine[i] == cons;
        }
        if (p_in == c_in)
            continue; /* inside the problem, or unrelated */
        const cJSON *po = op_by_id(ops, prod), *co = op_by_id(ops, cons);
        if (!po || !co)
            continue;
        char *pd = describe(po, prod), *cd = describe(co, cons);
        lines[n++] = xasprintf("fusion opportunity: producer %s -> consumer %s via tensor %d "
                               "(%s %s); no family fuses it yet",
                               pd, cd, tensor, p_in ? "output of" : "input of", name);
        free(pd);
        free(cd);
    }
    return n;
}
