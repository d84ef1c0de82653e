/* rownorm.c: the rmsnorm and layernorm kernel families: normalisation over the last dimension(s) of
 * a contiguous tensor, as models write it (HF cast chains, Gemma's 1 + w, gated SiLU, eps from the
 * module), emitted as CUDA (templates/rownorm.cu) and C (templates/rownorm_cpu.c); the matcher that
 * reads a problem's exact computation is in rownorm_match.c.
 *
 * What is computed. Both families reduce each row of `cols` elements (the product of the normalised
 * dims) to fp32 statistics, then write every element once: rmsnorm n = x * rsqrt(mean(x^2) + eps),
 * layernorm n = (x - mean) * rsqrt(var + eps) (biased variance, as PyTorch), and then the variant's
 * *program*: the exact sequence of multiplications by the weight, additions of the bias, products
 * with a SiLU gate, and roundings to bf16/fp16 that the model's reference performs, in its order.
 * The order matters for rounding: LlamaRMSNorm computes bf16(w * bf16(n)) (two roundings), Gemma
 * and Qwen compute bf16(n * float(w)) or bf16(n * (1 + float(w))) (one), aten's layer_norm rounds
 * once after the affine. A program is a list of steps (STEP_*) over fp32 values, kept in match
 * facts and turned into C expressions (RN_Y_PROG, RN_W_PROG, RN_G_PROG) by the emitter; rounding is
 * idempotent, so a step that rounds to the output's own dtype is harmless before the final store.
 *
 * Geometry. One template serves every row length, and the space is relative to the problem so that
 * most points are valid whatever the row: RN_ITEMS (16-byte vectors each thread holds) fixes the
 * threads per row (RN_TPR: a power of two below a warp, else whole warps); RN_GROUP gives the warps
 * per block (as many rows as fit) or, negative, a thread-block cluster that splits one row (DSMEM
 * reduction); RN_STREAM and RN_PERSIST add evict-first hints and a persistent grid. The vector
 * width, threads per row, rows per block, whether the row stays in registers (RN_KEEP 0: read once)
 * or is read twice (RN_KEEP 1: only rows no register point can hold), and whether every thread
 * holds the same count (RN_EVEN: the predicates fold away) are derived from the problem's longest
 * row and written as #defines after the point's. check() rejects points that cannot work (a block
 * over 1024 threads or under a warp, more than 64 registers of row data per thread, a grid over
 * 2^31-1) and points that can only lose or repeat another (the threads per row of an earlier
 * RN_ITEMS, the block of a smaller RN_GROUP, room for more rows than any workload has, a persistent
 * loop that never turns, a second read of a row that fits in registers), so that a sweep spends its
 * time on distinct candidates that can win.
 */
#include "rownorm.h"

#include <string.h>

/* ---- the space ---- */

enum { P_STREAM, P_WEARLY, P_PERSIST, P_ITEMS, P_GROUP, RN_N_PARAMS };

/* Both families share the template and so the space (RN = rownorm, the template's prefix). The
 * parameters are relative to the problem, so that most points are valid for any row length: the
 * vector width is always the widest that divides every row (16 bytes of x), and the threads per row
 * follow from RN_ITEMS (see rn_decode). The first value of each domain makes the first point, the
 * one a sampled sweep always tries: 8 vectors per thread, one warp per block, is valid for rows
 * from one element to 64K (bf16) and a sound start. The parameters that shape the kernel most,
 * RN_ITEMS and RN_GROUP, come last (vary slowest), so that an even sample of the space (kiln sweep
 * --limit) spreads over them rather than over the hints. */
// clang-format off
#define RN_PARAMS                                                                                  \
    {                                                                                              \
        {"RN_STREAM", 2, {0, 1}, "1: evict-first loads of x and stores of y (touched once)"},     \
        {"RN_WEARLY", 2, {0, 1}, "1: weight/bias loaded with x, held in registers across rows"},  \
        {"RN_PERSIST", 2, {0, 1}, "1: grid capped at the resident blocks, blocks loop over rows"}, \
        {"RN_ITEMS", 8, {8, 1, 2, 3, 4, 6, 12, 16},                                                \
         "vectors of the row each thread holds (threads per row follow from it)"},                 \
        {"RN_GROUP", 10, {1, 2, 4, 8, 16, 32, -2, -4, -8, -16},                                    \
         "> 0: warps per block (as many rows as fit); < 0: one row over a cluster of -RN_GROUP "   \
         "blocks (DSMEM)"},                                                                        \
    }
// clang-format on

#define RN_SMS 132           /* H200 (and H100 SXM): the persistent grid's size */
#define RN_MAX_TPR 1024      /* threads of one row in one block */
#define RN_MAX_DATA_WORDS 64 /* 32-bit registers of row data per thread */

/* ---- points: derived geometry and constraints ---- */

extern const kiln_family kiln_family_rmsnorm;
extern const kiln_family kiln_family_layernorm;

typedef struct {
    int items, group, stream, early, persist;                   /* the point */
    int vec, tpr, rows, cluster, keep, block, per_thread, even; /* derived */
    int64_t slice, max_rows; /* vectors per block of the longest row; rows */
    int persist_turns, cap;  /* some grid exceeds the persistent cap */
} rn_point;

static const kiln_tensor_spec *role_spec(const kiln_problem *p, const kiln_match *m, int role) {
    int i = m->input_of_role[role];
    return i >= 0 ? &p->inputs[i] : NULL;
}

static int words_of(const kiln_tensor_spec *t, int vec) {
    return t ? (vec * (int)kiln_dtype_size(t->dtype) + 3) / 4 : 0;
}

/* Threads for `need` vectors at one per thread: a power of two below a warp, else whole warps. */
static int64_t fit_threads(int64_t need) {
    if (need >= 32)
        return (need + 31) / 32 * 32;
    int64_t t = 1;
    while (t < need)
        t *= 2;
    return t;
}

/* Registers of row data a thread holds for `items` vectors: x and the gate, and the weight and bias
 * when they are loaded early (held across the reduction and across rows). */
static int64_t data_words(const kiln_problem *p, const kiln_match *m, int vec, int64_t items,
                          int early) {
    return items *
           (words_of(role_spec(p, m, ROLE_X), vec) + words_of(role_spec(p, m, ROLE_G), vec) +
            (early ? words_of(role_spec(p, m, ROLE_W), vec) + words_of(role_spec(p, m, ROLE_B), vec)
                   : 0));
}

/* Rows per block for RN_GROUP warps (> 0) of RN_TPR-thread rows: as many as fit, at least one. */
static int rows_per_block(int group, int tpr) {
    int r = group > 0 ? 32 * group / tpr : 1;
    return r < 1 ? 1 : r;
}

/* Decodes point and derives the geometry from the problem's longest row: the vector width (the
 * widest that divides every row, 16 bytes of x at most), then RN_TPR = the threads that give each
 * about RN_ITEMS vectors of the block's slice. A row that would need more than RN_MAX_TPR threads
 * is read twice (RN_KEEP 1) with RN_ITEMS vectors in flight per thread. */
static void rn_decode(const kiln_problem *p, const kiln_match *m, const int64_t *point,
                      rn_point *g) {
    memset(g, 0, sizeof *g);
    g->items = (int)point[P_ITEMS];
    g->group = (int)point[P_GROUP];
    g->stream = (int)point[P_STREAM];
    g->early = (int)point[P_WEARLY];
    g->persist = (int)point[P_PERSIST];
    g->cluster = g->group < 0 ? -g->group : 1;
    int k = (int)kiln_match_get(m, "norm_dims", 1);
    int64_t max_cols = 0, min_cols = INT64_MAX, rows, cols, max_groups = 0;
    g->vec = 16 / (int)kiln_dtype_size(role_spec(p, m, ROLE_X)->dtype);
    for (int i = 0; i < p->n_workloads; i++) {
        if (!rn_geometry(p, m->input_of_role[ROLE_X], k, &p->workloads[i], &rows, &cols))
            continue;
        while (cols % g->vec)
            g->vec /= 2;
        max_cols = cols > max_cols ? cols : max_cols;
        min_cols = cols < min_cols ? cols : min_cols;
        g->max_rows = rows > g->max_rows ? rows : g->max_rows;
    }
    g->slice = (max_cols / g->vec + g->cluster - 1) / g->cluster;
    int64_t need = (g->slice + g->items - 1) / g->items;
    g->keep = need > RN_MAX_TPR;
    g->tpr = (int)(g->keep ? RN_MAX_TPR : fit_threads(need));
    g->per_thread = (int)(g->keep ? g->items : (g->slice + g->tpr - 1) / g->tpr);
    g->even = !g->keep && min_cols == max_cols &&
              (max_cols / g->vec) % ((int64_t)g->cluster * g->tpr) == 0;
    g->rows = rows_per_block(g->group, g->tpr);
    g->block = g->tpr * g->rows;
    for (int i = 0; i < p->n_workloads; i++)
        if (rn_geometry(p, m->input_of_role[ROLE_X], k, &p->workloads[i], &rows, &cols)) {
            int64_t groups = (rows + g->rows - 1) / g->rows;
            max_groups = groups > max_groups ? groups : max_groups;
        }
    int per_sm = g->block > 2048 ? 1 : 2048 / g->block;
    g->cap = RN_SMS * (per_sm > 32 ? 32 : per_sm);
    g->persist_turns = max_groups > g->cap;
}

static const char *rn_check(const kiln_problem *p, const kiln_match *m, const int64_t *point) {
    rn_point g;
    rn_decode(p, m, point, &g);
    if (g.block > 1024)
        return xasprintf("!a block of %d threads (%d per row x %d rows) is over 1024", g.block,
                         g.tpr, g.rows);
    if (g.block < 32)
        return xasprintf("!a cluster of blocks of %d threads: less than a warp each", g.block);
    if (g.group > 1 && rows_per_block(g.group / 2, g.tpr) == g.rows)
        return xasprintf("!rows of %d threads: %d warps hold as many rows as %d", g.tpr, g.group,
                         g.group / 2);
    if (g.group > 1 && rows_per_block(g.group / 2, g.tpr) >= g.max_rows)
        return xasprintf("!no workload has more than %lld rows: RN_GROUP %d has room for them",
                         (long long)g.max_rows, g.group / 2);
    if (g.cluster > 1 && g.persist)
        return "a cluster handles one row: no persistent grid";
    if (g.persist && !g.persist_turns)
        return xasprintf("!every workload's grid is resident at once (at most %d blocks): the "
                         "persistent loop would never turn",
                         g.cap);
    for (int i = 0; i < p->n_workloads; i++) {
        int64_t rows, cols;
        if (rn_geometry(p, m->input_of_role[ROLE_X], (int)kiln_match_get(m, "norm_dims", 1),
                        &p->workloads[i], &rows, &cols) &&
            ((rows + g.rows - 1) / g.rows) * g.cluster > 2147483647LL)
            return xasprintf("!workload %d needs a grid over 2^31-1 blocks", i);
    }
    if (!g.keep) {
        int64_t items = (g.slice + g.tpr - 1) / g.tpr;
        const kiln_family_param *dom = &kiln_family_rmsnorm.params[P_ITEMS];
        for (int i = 0; i < dom->n_values && dom->values[i] != g.items; i++) {
            int64_t need = (g.slice + dom->values[i] - 1) / dom->values[i];
            if (need <= RN_MAX_TPR && fit_threads(need) == g.tpr)
                return xasprintf("!%d threads per row (%lld vectors each): the same kernel as "
                                 "RN_ITEMS %lld",
                                 g.tpr, (long long)items, (long long)dom->values[i]);
        }
        if (g.early && !role_spec(p, m, ROLE_W) && !role_spec(p, m, ROLE_B))
            return "no weight or bias to load early";
        int64_t words = data_words(p, m, g.vec, items, g.early);
        if (words > RN_MAX_DATA_WORDS)
            return xasprintf("!%lld vectors per thread need %lld registers of row data%s (%d at "
                             "most): fewer items",
                             (long long)items, (long long)words,
                             g.early ? " with the weight held" : "", RN_MAX_DATA_WORDS);
        return NULL;
    }
    if (g.early)
        return "a row read twice loads its weight with it: RN_WEARLY does not apply";
    /* a row read twice: only where no register-resident point exists */
    for (int items = 1; items <= 16; items++) {
        int64_t need = (g.slice + items - 1) / items;
        if (need <= RN_MAX_TPR && data_words(p, m, g.vec, items, 0) <= RN_MAX_DATA_WORDS)
            return xasprintf("!the row fits in registers at RN_ITEMS %d: reading it twice can only "
                             "be slower",
                             items);
    }
    if (g.stream)
        return "a row read twice must not be loaded with evict-first hints";
    return NULL;
}

/* ---- emission ---- */

/* What the variant is, for both languages: kind, element types (with the CPU's conversions),
 * which tensors exist, and the programs. */
static char *variant_defines(const kiln_problem *p, const kiln_match *m, int cuda) {
    static const char *const in_names[] = {"X", "W", "B", "G"};
    static const char *const out_names[] = {"Y", "MEAN", "RSTD"};
    size_t cap = 8192, off = 0;
    char *s = xmalloc(cap);
    off += (size_t)snprintf(s + off, cap - off, "#define RN_KIND %d\n",
                            (int)kiln_match_get(m, "kind", 0));
    for (int r = ROLE_X; r <= ROLE_G; r++) {
        const kiln_tensor_spec *t = role_spec(p, m, r);
        kiln_dtype dt = t ? t->dtype : KILN_F32;
        if (r != ROLE_X)
            off += (size_t)snprintf(s + off, cap - off, "#define RN_HAS_%s %d\n", in_names[r], !!t);
        const kiln_kernel_type k = kiln_dtype_kernel_type(dt, cuda);
        off += (size_t)snprintf(s + off, cap - off, "#define RN_%s_T %s\n", in_names[r], k.type);
        if (!cuda)
            off += (size_t)snprintf(s + off, cap - off, "#define RN_%s_F(v) %s(v)\n", in_names[r],
                                    k.to_float);
    }
    for (int o = OUT_Y; o <= OUT_RSTD; o++) {
        int idx = m->output_of_role[o];
        kiln_dtype dt = idx >= 0 ? p->outputs[idx].dtype : KILN_F32;
        if (o != OUT_Y)
            off += (size_t)snprintf(s + off, cap - off, "#define RN_HAS_%s %d\n", out_names[o],
                                    idx >= 0);
        const kiln_kernel_type k = kiln_dtype_kernel_type(dt, cuda);
        off += (size_t)snprintf(s + off, cap - off, "#define RN_%s_T %s\n", out_names[o], k.type);
        if (!cuda)
            off += (size_t)snprintf(s + off, cap - off, "#define RN_%s_OF(f) %s(f)\n", out_names[o],
                                    k.from_float);
    }
    static const struct {
        const char *fact, *macro, *base;
    } progs[] = {{"prog_w", "RN_W_PROG(w)", "(w)"},
                 {"prog_b", "RN_B_PROG(b)", "(b)"},
                 {"prog_g", "RN_G_PROG(g)", "(g)"},
                 {"prog_y", "RN_Y_PROG(n, w, b, g)", "(n)"}};
    rn_prog pr[4];
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        char e[1024];
        rn_prog_unpack(kiln_match_get(m, progs[i].fact, 0), &pr[i]);
        rn_prog_render(&pr[i], progs[i].base, 1, e, sizeof e);
        off += (size_t)snprintf(s + off, cap - off, "#define %s %s\n", progs[i].macro, e);
    }
    if (cuda) {
        int y = m->output_of_role[OUT_Y];
        off += (size_t)snprintf(
            s + off, cap - off, "#define RN_SILU_LP %d\n",
            y >= 0 && rn_silu_narrow(&pr[0], &pr[1], &pr[2], &pr[3], p->outputs[y].dtype));
    }
    KILN_ASSERT(off < cap);
    return s;
}

/* The entry point: the problem's exact signature, calling the body with each role's pointer. */
static char *entry_point(const kiln_problem *p, const kiln_match *m, const char *entry, int cuda,
                         int block) {
    char bounds[32];
    snprintf(bounds, sizeof bounds, "%d", block);
    char *head = kiln_family_prototype(p, 0, cuda, bounds, entry);
    static const char *const in_types[] = {"RN_X_T", "RN_W_T", "RN_B_T", "RN_G_T"};
    static const char *const out_types[] = {"RN_Y_T", "RN_MEAN_T", "RN_RSTD_T"};
    char args[1024];
    size_t off = 0;
    for (int r = ROLE_X; r <= ROLE_G; r++) {
        int i = m->input_of_role[r];
        if (i >= 0)
            off += (size_t)snprintf(args + off, sizeof args - off, "%s, ", p->inputs[i].name);
        else
            off += (size_t)snprintf(args + off, sizeof args - off, "(const %s *)0, ", in_types[r]);
    }
    for (int o = OUT_Y; o <= OUT_RSTD; o++) {
        int i = m->output_of_role[o];
        if (i >= 0)
            off += (size_t)snprintf(args + off, sizeof args - off, "%s, ", p->outputs[i].name);
        else
            off += (size_t)snprintf(args + off, sizeof args - off, "(%s *)0, ", out_types[o]);
    }
    int eps_in = m->input_of_role[ROLE_EPS];
    char eps[128];
    if (eps_in >= 0)
        snprintf(eps, sizeof eps, "(float)(%s)", p->inputs[eps_in].name);
    else
        snprintf(eps, sizeof eps, "(float)%.17g", kiln_match_get(m, "eps", 1e-5));
    char *s = xasprintf("%s {\n    %s(%s(int64_t)(%s), (int64_t)(%s), %s);\n}\n", head,
                        cuda ? "rn_rows" : "rn_rows_cpu", args, m->rows_expr, m->cols_expr, eps);
    free(head);
    return s;
}

static char *rn_emit(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                     const int64_t *point, int cuda) {
    char *entry = xasprintf("%s_rows", f->name);
    char *variant = variant_defines(p, m, cuda);
    char *body;
    int64_t canonical[KILN_FAMILY_MAX_PARAMS];
    if (cuda) {
        rn_point g;
        rn_decode(p, m, point, &g);
        char *params = kiln_family_defines(f, point);
        char *defines =
            xasprintf("%s/* derived from the point and the problem's longest row */\n"
                      "#define RN_VEC %d\n#define RN_TPR %d\n#define RN_PER_THREAD %d\n"
                      "#define RN_ROWS %d\n#define RN_CLUSTER %d\n#define RN_KEEP %d\n"
                      "#define RN_EVEN %d\n",
                      params, g.vec, g.tpr, g.per_thread, g.rows, g.cluster, g.keep, g.even);
        free(params);
        char grid[640], launch[1024];
        if (g.persist)
            snprintf(grid, sizeof grid, "min(ceil_div(%s,%d),%d)", m->rows_expr, g.rows, g.cap);
        else
            snprintf(grid, sizeof grid, "ceil_div(%s,%d)*%d", m->rows_expr, g.rows, g.cluster);
        int n = snprintf(launch, sizeof launch, "// kiln: launch %s grid=%s block=%d", entry, grid,
                         g.block);
        if (g.cluster > 1)
            snprintf(launch + n, sizeof launch - (size_t)n, " cluster=%d", g.cluster);
        char *tail = entry_point(p, m, entry, 1, g.block);
        body = xasprintf("%s%s%s\n\n%s\n%s", defines, variant, launch,
                         kiln_family_template("rownorm.cu"), tail);
        free(defines);
        free(tail);
        for (int i = 0; i < f->n_params; i++)
            canonical[i] = point[i];
    } else {
        char *tail = entry_point(p, m, entry, 0, 0);
        body = xasprintf("// cpu: one source for every point (the GPU geometry does not apply)\n"
                         "%s// kiln: launch %s\n\n%s\n%s",
                         variant, entry, kiln_family_template("rownorm_cpu.c"), tail);
        free(tail);
        for (int i = 0; i < f->n_params; i++)
            canonical[i] = f->params[i].values[0];
    }
    free(variant);
    free(entry);
    return kiln_family_source(f, m, canonical, body);
}

static char *rms_emit(const kiln_problem *p, const kiln_match *m, const int64_t *point, int cuda) {
    return rn_emit(&kiln_family_rmsnorm, p, m, point, cuda);
}

static char *ln_emit(const kiln_problem *p, const kiln_match *m, const int64_t *point, int cuda) {
    return rn_emit(&kiln_family_layernorm, p, m, point, cuda);
}

/* ---- speed of light ---- */

/* Every input read once (the weight and bias once, not once per row) and every output written once:
 * exactly what a register-kept row moves. */
static double rn_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    return kiln_problem_min_bytes(p, w);
}

/* The default tolerance: fp32 statistics and the model's own rounding order stay well inside it. */
static kiln_tolerance rn_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

/* ---- the two families: one matcher (rownorm_match.c), one space, one template ---- */

static int rms_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    return rn_match(p, m, why, why_len, 0);
}

static int ln_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    return rn_match(p, m, why, why_len, 1);
}

const kiln_family kiln_family_rmsnorm = {
    .name = "rmsnorm",
    .summary = "RMSNorm over the last dim(s): HF cast chains, Gemma's 1 + w, SiLU gates, "
               "aten rms_norm; fp32 statistics, one read, one write",
    .n_params = RN_N_PARAMS,
    .params = RN_PARAMS,
    .match = rms_match,
    .check = rn_check,
    .emit = rms_emit,
    .min_bytes = rn_min_bytes,
    .tolerance = rn_tolerance,
};

const kiln_family kiln_family_layernorm = {
    .name = "layernorm",
    .summary = "LayerNorm over the last dim(s), affine or not, with aten's mean/rstd outputs; "
               "Welford/Chan statistics in fp32, one read, one write",
    .n_params = RN_N_PARAMS,
    .params = RN_PARAMS,
    .match = ln_match,
    .check = rn_check,
    .emit = ln_emit,
    .min_bytes = rn_min_bytes,
    .tolerance = rn_tolerance,
};
