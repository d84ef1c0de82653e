/* pool.c: the pool family: adaptive and global average pooling over the two spatial dims of NCHW
 * and channels-last activations (aten::adaptive_avg_pool2d, aten::_adaptive_avg_pool2d, and
 * aten::mean.dim over H and W), for float32, bfloat16 and float16.
 *
 * What the data looks like. A captured activation is stored in its memory order
 * (capture_problem.py): an NCHW tensor as rows of H*W contiguous values, one row per (n, c); a
 * channels-last one as [N, H*W, C], rows of C contiguous channels. Global pooling is then two
 * different reductions: NCHW sums each contiguous row (ResNet's end: 49 values per row, 131072
 * rows), channels-last sums H*W rows of C values into one row (a column reduction). Every byte is
 * read once and the output is 1/(H*W) of the input, so the floor is the input's bytes over the copy
 * bandwidth; what separates a good kernel from eager here is that the read is coalesced, 16 bytes
 * wide and has enough in flight.
 *
 * The algorithms (POOL_ALGO):
 *  - tile (NCHW): a block copies the contiguous range of its THREADS/GROUP rows into shared memory
 *    with aligned 16-byte loads, then each group of GROUP lanes sums one row from shared memory.
 * Rows of 49 floats are 196 bytes, never 16-byte aligned, and a thread per row reading global
 * memory would touch 32 rows 196 bytes apart per warp load; staging makes the global side a plain
 *    streaming copy whatever the row length, and shared memory (eight times the bandwidth of HBM
 * per SM) absorbs the irregular part. Best for short rows.
 *  - direct (NCHW): GROUP lanes (or the whole block) read their row straight from global memory: a
 *    scalar head up to 16-byte alignment, aligned vectors, a scalar tail. Best for long rows (an
 *    early-layer 56x56 map). With SPLIT > 1 the SPLIT blocks of a thread-block cluster share a row
 * and add their partial sums through distributed shared memory, so few long rows still fill 132 SMs
 *    without a second launch or zeroed scratch (whose memset would sit in the timed region).
 *  - channels-last: a thread owns VEC channels (16 bytes) and walks positions; a warp load is a
 *    coalesced run of channels. GROUP lanes per channel vector split the positions (more loads in
 *    flight, more blocks for small batches) and add up in shared memory; SPLIT shares them across a
 *    cluster as above.
 *  - window: general adaptive output sizes, one thread per output (per VEC channels channels-last),
 *    summing its window as PyTorch bounds it. It is also valid, if slower, for global pooling.
 * Sums are fp32 in every algorithm and the mean is rounded once into the output type. The order of
 * additions differs from PyTorch's, well inside the default tolerances (means of up to thousands of
 * values; a tree-shaped sum is more accurate than a running one).
 *
 * The space: SPLIT x THREADS x VBYTES x UNROLL x GROUP x PLAN. PLAN is relative to the variant
 * (0: its primary algorithm, tile for short NCHW rows, direct for long ones, channels-last, window
 * for adaptive sizes; 1: the other NCHW algorithm; 2: window) and VBYTES is the load width in bytes
 * (POOL_VEC = VBYTES / element size), so that the first value of every domain is the expert default
 * for any dtype and variant: point 0, which every even sample of the space (sweep --limit)
 * includes, is the kernel one would write by hand. The parameters a sample spreads are the last
 * ones. check() keeps points distinct (parameters an algorithm ignores must sit at their first
 * value) and drops the ones whose shared memory does not fit or whose threads would mostly idle.
 *
 * The CPU emission ignores the GPU parameters: it is one C loop nest per layout, and its banner
 * names the first point of the space so that sweep's dedupe runs it once. */
#include "family.h"

#include <string.h>

enum { P_SPLIT, P_THREADS, P_VBYTES, P_UNROLL, P_GROUP, P_PLAN, P_COUNT };
/* The template's algorithms (POOL_ALGO) and the plans of the space (POOL_PLAN): plan 0 is the
 * variant's primary algorithm, 1 the alternative (direct, for NCHW rows), 2 the window. */
enum { ALGO_TILE, ALGO_DIRECT, ALGO_CL, ALGO_WINDOW };
enum { PLAN_PRIMARY, PLAN_ALTERNATIVE, PLAN_WINDOW };
enum { MODE_NCHW, MODE_NHWC };

/* Rows up to this many values are staged through shared memory by default (the tile). */
#define POOL_SHORT_ROW 512
/* Largest dynamic shared memory a block may opt into on sm_90 (227 KiB). */
#define POOL_MAX_SMEM 232448

extern const kiln_family kiln_family_pool;

/* ---- small helpers ---- */

static int dtype_ok(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16;
}

/* The product of stored dims [d0, d1) of t as an expression ("1" when empty). */
static void prod_expr(const kiln_problem *p, const kiln_tensor_spec *t, int d0, int d1, char *out,
                      size_t n) {
    size_t off = 0;
    out[0] = 0;
    for (int d = d0; d < d1; d++) {
        char e[96];
        kiln_tensor_dim_expr(p, t, d, e, sizeof e);
        off += (size_t)snprintf(out + off, off < n ? n - off : 0, "%s(%s)", off ? "*" : "", e);
    }
    if (!out[0])
        snprintf(out, n, "1");
}

/* ---- what the op is: the op chain (a captured call or module, a chain), or op_type ---- */

typedef struct {
    int x;            /* problem input index of the pooled tensor */
    int out_h, out_w; /* 1 and 1 for global pooling */
    int red[2];       /* reduced logical dims (normalised); -1 when "the last two" */
    int n_red;
} pool_op;

/* Integers of a list argument (or one integer) into out; returns the count or -1. */
static int arg_ints(const kiln_arg *a, int *out, int max) {
    if (a && a->kind == KILN_ARG_NUM && a->num == (int)a->num) {
        out[0] = (int)a->num;
        return 1;
    }
    if (!a || a->kind != KILN_ARG_INTS || a->n_ints > max)
        return -1;
    for (int i = 0; i < a->n_ints; i++)
        out[i] = (int)a->ints[i];
    return a->n_ints;
}

/* The pooling a chain of one op computes; how says where it came from. */
static int op_from_chain(const kiln_problem *p, const kiln_opchain *c, pool_op *op, char *how,
                         size_t how_len, char *why, size_t n) {
    const char *cls = kiln_problem_kiln_str(p, "module_class");
    if (c->n_ops != 1 || c->outputs[0].input >= 0) {
        snprintf(why, n, "%s %s is not a single pooling op", c->kind, cls ? cls : "");
        return 0;
    }
    const kiln_op *o = &c->ops[0];
    const int adaptive = kiln_op_is(o, "aten::adaptive_avg_pool2d.default") ||
                         kiln_op_is(o, "aten::_adaptive_avg_pool2d.default");
    if (!adaptive && !kiln_op_is(o, "aten::mean.dim")) {
        snprintf(why, n, "%s is not average pooling", o->aten);
        return 0;
    }
    snprintf(how, how_len, "%s", strcmp(c->kind, "aten") ? c->kind : o->aten);
    op->x = kiln_arg_input(kiln_op_arg(o, 0, "self"));
    if (op->x < 0) {
        snprintf(why, n, "%s: the first argument is not an input tensor", o->aten);
        return 0;
    }
    if (adaptive) {
        int sz[2];
        int k = arg_ints(kiln_op_arg(o, 1, "output_size"), sz, 2);
        if (k == 1)
            sz[1] = sz[0];
        if (k < 1 || sz[0] < 1 || sz[1] < 1) {
            snprintf(why, n, "%s: output_size is not two positive integers", o->aten);
            return 0;
        }
        op->out_h = sz[0];
        op->out_w = sz[1];
        op->n_red = 0; /* the last two logical dims */
        return 1;
    }
    op->n_red = arg_ints(kiln_op_arg(o, 1, "dim"), op->red, 2);
    if (op->n_red != 2) {
        snprintf(why, n, "aten::mean.dim over %s dims, not the two spatial ones",
                 op->n_red < 0    ? "unreadable"
                 : op->n_red == 1 ? "one of the"
                                  : "other");
        return 0;
    }
    op->out_h = op->out_w = 1;
    return 1;
}

/* ---- the match ---- */

static int pool_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    pool_op op;
    memset(&op, 0, sizeof op);
    op.x = -1;
    int ok = 0;
    char how[96] = "";
    if (kiln_opchain_described(p)) {
        kiln_opchain *c = NULL;
        kiln_err err;
        if (kiln_opchain_read(p, &c, &err) != KILN_OK)
            snprintf(why, why_len, "%s", err.msg);
        else
            ok = op_from_chain(p, c, &op, how, sizeof how, why, why_len);
        kiln_opchain_free(c);
    } else {
        /* a hand-written problem: NCHW average pooling named by op_type */
        static const char *const names[] = {
            "adaptive_avg_pool2d", "global_avg_pool", "global_avg_pool2d", "avg_pool", "pool",
            "adaptive_avg_pool"};
        for (size_t i = 0; p->op_type && i < sizeof names / sizeof names[0]; i++)
            ok |= strcmp(p->op_type, names[i]) == 0;
        if (!ok)
            snprintf(why, why_len, "no \"kiln\" object and op_type '%s' is not average pooling",
                     p->op_type ? p->op_type : "");
        else if (p->n_inputs < 1 || p->n_outputs != 1)
            ok = 0, snprintf(why, why_len, "pooling wants one input tensor and one output");
        if (ok) {
            op.x = 0;
            const kiln_tensor_spec *o = &p->outputs[0];
            op.out_h = op.out_w = 1;
            if (o->ndim == p->inputs[0].ndim && o->ndim >= 3) {
                /* [..., OH, OW]: literal or const axes give the adaptive size */
                int64_t v[2];
                for (int k = 0; k < 2; k++) {
                    int d = o->ndim - 2 + k;
                    v[k] = o->axis[d] < 0                                ? o->literal[d]
                           : p->axes[o->axis[d]].kind == KILN_AXIS_CONST ? p->axes[o->axis[d]].value
                                                                         : -1;
                }
                if (v[0] < 1 || v[1] < 1)
                    ok = 0, snprintf(why, why_len, "output size of the pooling is not constant");
                op.out_h = (int)v[0];
                op.out_w = (int)v[1];
            }
            snprintf(how, sizeof how, "op_type");
        }
    }
    if (!ok)
        return 0;
    if (op.x < 0 || op.x >= p->n_inputs || p->inputs[op.x].is_scalar) {
        snprintf(why, why_len, "the pooled argument is not an input tensor");
        return 0;
    }
    if (p->n_outputs != 1) {
        snprintf(why, why_len, "pooling has one output, the problem %d", p->n_outputs);
        return 0;
    }
    const kiln_tensor_spec *x = &p->inputs[op.x], *y = &p->outputs[0];
    const int r = x->ndim;
    const int *perm = x->layout.perm; /* stored dim j holds logical dim perm[j] */
    if (!dtype_ok(x->dtype) || !dtype_ok(y->dtype)) {
        snprintf(why, why_len, "dtype %s -> %s (pool handles float32, bfloat16, float16)",
                 kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
        return 0;
    }
    if (r < 2 || r > 4) {
        snprintf(why, why_len, "input %s has %d dims (pool wants 2 to 4)", x->name, r);
        return 0;
    }
    if (x->layout.expanded) {
        snprintf(why, why_len, "input %s is a broadcast (expanded) tensor", x->name);
        return 0;
    }
    /* which stored dims are reduced */
    int red[2];
    if (op.n_red == 0) {
        red[0] = r - 2;
        red[1] = r - 1;
    } else {
        for (int k = 0; k < 2; k++)
            red[k] = op.red[k] < 0 ? op.red[k] + r : op.red[k];
        if (red[0] == red[1] || red[0] < 0 || red[1] < 0 || red[0] >= r || red[1] >= r) {
            snprintf(why, why_len, "mean over dims [%d, %d] of a %d-d tensor", op.red[0], op.red[1],
                     r);
            return 0;
        }
    }
    int at[2] = {-1, -1}; /* stored positions of the reduced logical dims */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < r; j++)
            if (perm[j] == red[k])
                at[k] = j;
    if (at[0] < 0 || at[1] < 0) {
        snprintf(why, why_len, "layout of %s does not name every dim", x->name);
        return 0;
    }
    int lo = at[0] < at[1] ? at[0] : at[1], hi = at[0] < at[1] ? at[1] : at[0];
    int mode;
    if (lo == r - 2 && hi == r - 1)
        mode = MODE_NCHW;
    else if (r >= 3 && lo == r - 3 && hi == r - 2)
        mode = MODE_NHWC;
    else {
        snprintf(why, why_len,
                 "the reduced dims of %s are not its innermost (NCHW) nor the two before the "
                 "channels (channels-last) in memory",
                 x->name);
        return 0;
    }
    const int global = op.out_h == 1 && op.out_w == 1;
    if (!global) {
        /* windows need H and W in their logical order, and the output in the input's order */
        if (at[0] > at[1] && op.n_red == 0) {
            snprintf(why, why_len, "H and W of %s are transposed in memory", x->name);
            return 0;
        }
        int same = y->ndim == r;
        for (int j = 0; same && j < r; j++)
            same = y->layout.perm[j] == perm[j];
        if (!same) {
            snprintf(why, why_len, "output %s is not stored in the order of %s", y->name, x->name);
            return 0;
        }
    }
    /* sizes per workload, in stored order */
    int64_t len_max = 0, rows_max = 0, c_max = 0, c_min = INT64_MAX, c_gcd = 0;
    for (int wi = 0; wi < p->n_workloads; wi++) {
        int64_t xs[KILN_MAX_DIMS], ys[KILN_MAX_DIMS];
        kiln_tensor_shape(p, x, &p->workloads[wi], xs);
        int64_t y_count = kiln_tensor_shape(p, y, &p->workloads[wi], ys);
        int64_t rows = 1, h = xs[lo], w = xs[hi], c = mode == MODE_NHWC ? xs[r - 1] : 1;
        for (int d = 0; d < lo; d++)
            rows *= xs[d];
        if (h < 1 || w < 1 || rows < 1 || c < 1) {
            snprintf(why, why_len, "workload %d: an empty tensor", wi);
            return 0;
        }
        if (y_count != rows * c * op.out_h * op.out_w) {
            snprintf(why, why_len, "workload %d: output %s has %lld values, pooling makes %lld", wi,
                     y->name, (long long)y_count, (long long)(rows * c * op.out_h * op.out_w));
            return 0;
        }
        if (!global && (ys[r - (mode == MODE_NHWC ? 3 : 2)] != op.out_h ||
                        ys[r - (mode == MODE_NHWC ? 2 : 1)] != op.out_w)) {
            snprintf(why, why_len, "workload %d: output %s is not [.., %d, %d]", wi, y->name,
                     op.out_h, op.out_w);
            return 0;
        }
        len_max = h * w > len_max ? h * w : len_max;
        rows_max = rows > rows_max ? rows : rows_max;
        c_max = c > c_max ? c : c_max;
        c_min = c < c_min ? c : c_min;
        c_gcd = kiln_family_gcd(c_gcd, c);
    }
    snprintf(m->variant, sizeof m->variant, "%s_%s", global ? "global" : "adaptive",
             mode == MODE_NCHW ? "nchw" : "channels_last");
    kiln_match_set(m, "mode", mode);
    kiln_match_set(m, "global", global);
    kiln_match_set(m, "out_h", op.out_h);
    kiln_match_set(m, "out_w", op.out_w);
    kiln_match_set(m, "esize_in", (double)kiln_dtype_size(x->dtype));
    kiln_match_set(m, "len_max", (double)len_max);
    kiln_match_set(m, "rows_max", (double)rows_max);
    kiln_match_set(m, "c_max", (double)c_max);
    kiln_match_set(m, "c_min", (double)c_min);
    kiln_match_set(m, "c_gcd", (double)c_gcd);
    m->input_of_role[0] = op.x;
    m->output_of_role[0] = 0;
    prod_expr(p, x, 0, lo, m->extra_expr[0], sizeof m->extra_expr[0]); /* rows (NCHW) / n */
    if (mode == MODE_NHWC)
        kiln_tensor_dim_expr(p, x, r - 1, m->extra_expr[1], sizeof m->extra_expr[1]);
    else
        snprintf(m->extra_expr[1], sizeof m->extra_expr[1], "1");
    kiln_tensor_dim_expr(p, x, lo, m->extra_expr[2], sizeof m->extra_expr[2]);
    kiln_tensor_dim_expr(p, x, hi, m->extra_expr[3], sizeof m->extra_expr[3]);
    kiln_family_fmt(m->rows_expr, sizeof m->rows_expr, "%s*%s", m->extra_expr[0], m->extra_expr[1]);
    kiln_family_fmt(m->cols_expr, sizeof m->cols_expr, "(%s)*(%s)", m->extra_expr[2],
                    m->extra_expr[3]);
    snprintf(m->how, sizeof m->how, "%s on %s (%s), %s", how, x->name,
             mode == MODE_NCHW ? "NCHW rows" : "channels-last", global ? "1x1" : "adaptive");
    return 1;
}

/* ---- constraints ---- */

/* The algorithm a plan means for the matched variant, or -1 with a reason. */
static int plan_algo(const kiln_match *m, int64_t plan, const char **why) {
    const int mode = (int)kiln_match_get(m, "mode", 0),
              global = (int)kiln_match_get(m, "global", 1);
    if (!global) {
        *why = "adaptive pooling has one plan, the window (PLAN 0)";
        return plan == PLAN_PRIMARY ? ALGO_WINDOW : -1;
    }
    if (plan == PLAN_WINDOW)
        return ALGO_WINDOW;
    if (mode == MODE_NHWC) {
        *why = "channels-last has no alternative plan";
        return plan == PLAN_PRIMARY ? ALGO_CL : -1;
    }
    /* NCHW rows: the tile for short rows (a late 7x7 or 14x14 map), direct reads for long ones */
    const int short_rows = kiln_match_get(m, "len_max", 1) <= POOL_SHORT_ROW;
    return (plan == PLAN_PRIMARY) == short_rows ? ALGO_TILE : ALGO_DIRECT;
}

static const char *pool_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    const int mode = (int)kiln_match_get(m, "mode", 0);
    const int64_t esize = (int64_t)kiln_match_get(m, "esize_in", 4);
    const int64_t len_max = (int64_t)kiln_match_get(m, "len_max", 1);
    const int64_t c_max = (int64_t)kiln_match_get(m, "c_max", 1);
    const int64_t c_gcd = (int64_t)kiln_match_get(m, "c_gcd", 1);
    const int64_t threads = pt[P_THREADS], group = pt[P_GROUP], vec = pt[P_VBYTES] / esize;
    const int64_t unroll = pt[P_UNROLL], split = pt[P_SPLIT];
    const int64_t lanes = group == 0 ? threads : group;
    const char *why = "";
    const int algo = plan_algo(m, pt[P_PLAN], &why);
    if (algo < 0)
        return why;
    if (vec < 1)
        return "VBYTES is less than one input element";
    switch (algo) {
    case ALGO_TILE:
        if (group == 0 || group > 32 || group > threads)
            return "tile: GROUP must be 1..32 lanes of a warp";
        if (split != 1)
            return "tile: SPLIT does not apply";
        if ((threads / lanes) * len_max * esize + 16 > POOL_MAX_SMEM)
            return "tile: THREADS/GROUP rows do not fit in shared memory";
        if (lanes > 2 * len_max && group > 1)
            return "tile: more lanes than values per row";
        return NULL;
    case ALGO_DIRECT:
        if (group > threads || group == threads)
            return "direct: GROUP must be below THREADS (0 means the whole block)";
        if (lanes * vec > 2 * len_max && lanes > 1)
            return "direct: most lanes would idle on rows this short";
        if (split > 1 && len_max < 2 * split * lanes * vec)
            return "direct: SPLIT blocks would idle on rows this short";
        return NULL;
    case ALGO_CL:
        if (group == 0 || group > 32 || group > threads)
            return "channels-last: GROUP must be 1..32 lanes along the positions";
        if (c_gcd % vec)
            return "channels-last: VEC (VBYTES / element size) must divide the channel count";
        if ((threads / lanes) * vec > 2 * c_max && threads > 64)
            return "channels-last: most channel threads would idle";
        if (lanes > 2 * len_max && lanes > 1)
            return "channels-last: more lanes than positions";
        if (split > 1 && len_max < split * lanes)
            return "channels-last: SPLIT blocks would idle on this few positions";
        return NULL;
    default: /* window: the parameters it ignores stay at their first value (no duplicates) */
        if (group != kiln_family_pool.params[P_GROUP].values[0] || split != 1 ||
            unroll != kiln_family_pool.params[P_UNROLL].values[0])
            return "window: GROUP, SPLIT and UNROLL do not apply";
        if (mode == MODE_NCHW && pt[P_VBYTES] != kiln_family_pool.params[P_VBYTES].values[0])
            return "window: NCHW reads one value per thread: VBYTES does not apply";
        if (mode == MODE_NHWC && c_gcd % vec)
            return "window: VEC (VBYTES / element size) must divide the channel count";
        return NULL;
    }
}

/* ---- emission ---- */

/* The entry point's prototype with __launch_bounds__ (CUDA). */
static char *emit_cuda(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[0]], *y = &p->outputs[0];
    const int mode = (int)kiln_match_get(m, "mode", 0);
    const int oh = (int)kiln_match_get(m, "out_h", 1), ow = (int)kiln_match_get(m, "out_w", 1);
    const char *N = m->extra_expr[0], *C = m->extra_expr[1], *H = m->extra_expr[2],
               *W = m->extra_expr[3];
    const size_t esize = kiln_dtype_size(x->dtype);
    const int64_t threads = pt[P_THREADS], group = pt[P_GROUP];
    const int64_t split = pt[P_SPLIT], lanes = group == 0 ? threads : group;
    const char *unused;
    const int algo = plan_algo(m, pt[P_PLAN], &unused);
    const int64_t vec =
        algo == ALGO_WINDOW && mode == MODE_NCHW ? 1 : pt[P_VBYTES] / (int64_t)esize;
    KILN_ASSERT(algo >= 0 && vec >= 1); /* check() accepted the point */
    kiln_strbuf b = {0};
    char *defs = kiln_family_defines(&kiln_family_pool, pt);
    kiln_strbuf_printf(
        &b,
        "%s#define POOL_ALGO %d\n#define POOL_VEC %lld\n#define POOL_TIN %s\n#define "
        "POOL_TOUT %s\n#define POOL_ENTRY_DEFINED 1\n",
        defs, algo, (long long)vec, kiln_dtype_kernel_type(x->dtype, 1).type,
        kiln_dtype_kernel_type(y->dtype, 1).type);
    free(defs);
    char call[1024];
    switch (algo) {
    case ALGO_TILE:
        kiln_strbuf_printf(&b,
                           "// kiln: launch pool_kernel grid=ceil_div(%s,%lld) block=%lld "
                           "smem=%lld*%s*%s*%zu+16\n",
                           N, (long long)(threads / lanes), (long long)threads,
                           (long long)(threads / lanes), H, W, esize);
        kiln_family_fmt(call, sizeof call,
                        "pool_tile(%s, %s, (int64_t)(%s), (int64_t)(%s) * (%s));", x->name, y->name,
                        N, H, W);
        break;
    case ALGO_DIRECT:
        kiln_strbuf_printf(&b, "// kiln: launch pool_kernel grid=ceil_div(%s,%lld)*%lld block=%lld",
                           N, (long long)(threads / lanes), (long long)split, (long long)threads);
        if (split > 1)
            kiln_strbuf_printf(&b, " cluster=%lld", (long long)split);
        kiln_strbuf_printf(&b, "\n");
        kiln_family_fmt(call, sizeof call,
                        "pool_direct(%s, %s, (int64_t)(%s), (int64_t)(%s) * (%s));", x->name,
                        y->name, N, H, W);
        break;
    case ALGO_CL:
        kiln_strbuf_printf(
            &b, "// kiln: launch pool_kernel grid=%s*ceil_div(%s,%lld)*%lld block=%lld", N, C,
            (long long)(threads / lanes * vec), (long long)split, (long long)threads);
        if (split > 1)
            kiln_strbuf_printf(&b, " cluster=%lld", (long long)split);
        kiln_strbuf_printf(&b, "\n");
        kiln_family_fmt(call, sizeof call,
                        "pool_cl(%s, %s, (int64_t)(%s), (int64_t)(%s) * (%s), %s);", x->name,
                        y->name, N, H, W, C);
        break;
    default:
        if (mode == MODE_NCHW) {
            kiln_strbuf_printf(&b,
                               "// kiln: launch pool_kernel grid=ceil_div(%s*%d,%lld) block=%lld\n",
                               N, oh * ow, (long long)threads, (long long)threads);
            kiln_family_fmt(call, sizeof call, "pool_window_nchw(%s, %s, %s, %s, %s, %d, %d);",
                            x->name, y->name, N, H, W, oh, ow);
        } else {
            kiln_strbuf_printf(&b,
                               "// kiln: launch pool_kernel grid=ceil_div(%s*%d*(%s/%lld),%lld) "
                               "block=%lld\n",
                               N, oh * ow, C, (long long)vec, (long long)threads,
                               (long long)threads);
            kiln_family_fmt(call, sizeof call, "pool_window_nhwc(%s, %s, %s, %s, %s, %s, %d, %d);",
                            x->name, y->name, N, H, W, C, oh, ow);
        }
    }
    kiln_strbuf_printf(&b, "%s", kiln_family_template("pool.cu"));
    char bounds[32];
    snprintf(bounds, sizeof bounds, "%lld", (long long)threads);
    char *proto = kiln_family_prototype(p, 0, 1, bounds, "pool_kernel");
    kiln_strbuf_printf(&b, "\n%s {\n    %s\n}\n", proto, call);
    free(proto);
    return kiln_family_source(&kiln_family_pool, m, pt, b.s);
}

static char *emit_cpu(const kiln_problem *p, const kiln_match *m) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[0]], *y = &p->outputs[0];
    const int mode = (int)kiln_match_get(m, "mode", 0);
    const int global = (int)kiln_match_get(m, "global", 1);
    const int oh = (int)kiln_match_get(m, "out_h", 1), ow = (int)kiln_match_get(m, "out_w", 1);
    const char *N = m->extra_expr[0], *C = m->extra_expr[1], *H = m->extra_expr[2],
               *W = m->extra_expr[3];
    const kiln_kernel_type ti = kiln_dtype_kernel_type(x->dtype, 0);
    const kiln_kernel_type to = kiln_dtype_kernel_type(y->dtype, 0);
    kiln_strbuf b = {0};
    kiln_strbuf_printf(
        &b,
        "// cpu: the GPU parameters do not apply\n#define POOL_TIN %s\n#define POOL_LOAD(v) "
        "%s(v)\n#define POOL_TOUT %s\n#define POOL_STORE(f) %s(f)\n",
        ti.type, ti.to_float, to.type, to.from_float);
    kiln_strbuf_printf(&b, "%s", kiln_family_template("pool_cpu.c"));
    char *proto = kiln_family_prototype(p, 0, 0, NULL, "pool_kernel");
    kiln_strbuf_printf(&b, "\n// kiln: launch pool_kernel\n%s {\n    ", proto);
    free(proto);
    if (!global)
        kiln_strbuf_printf(&b, "pool_cpu_window(%s, %s, %s, %s, %s, %s, %d, %d, %d);", x->name,
                           y->name, N, H, W, C, oh, ow, mode == MODE_NHWC);
    else if (mode == MODE_NHWC)
        kiln_strbuf_printf(&b, "pool_cpu_cl(%s, %s, %s, (%s) * (%s), %s);", x->name, y->name, N, H,
                           W, C);
    else
        kiln_strbuf_printf(&b, "pool_cpu_rows(%s, %s, %s, (%s) * (%s));", x->name, y->name, N, H,
                           W);
    kiln_strbuf_printf(&b, "\n}\n");
    int64_t first[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(&kiln_family_pool, 0, first);
    return kiln_family_source(&kiln_family_pool, m, first, b.s);
}

static char *pool_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    return cuda ? emit_cuda(p, m, pt) : emit_cpu(p, m);
}

/* Every input value read once and every output written once is all pooling must move. */
static double pool_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    return kiln_problem_min_bytes(p, w);
}

static kiln_tolerance pool_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_pool = {
    .name = "pool",
    .summary = "adaptive/global average pooling over H,W (NCHW rows, channels-last columns)",
    .n_params = P_COUNT,
    .params =
        {
            /* first values: the expert default, which a sparse sample (sweep --limit) always
             * includes; the slow parameters (last) are the ones a sample spreads */
            [P_SPLIT] = {"POOL_SPLIT",
                         4,
                         {1, 2, 4, 8},
                         "blocks of a cluster sharing one reduction over DSMEM (direct, "
                         "channels-last)"},
            [P_THREADS] = {"POOL_THREADS", 5, {256, 128, 512, 1024, 64}, "threads per block"},
            [P_VBYTES] = {"POOL_VBYTES",
                          4,
                          {16, 8, 4, 2},
                          "bytes per input load (POOL_VEC = VBYTES / element size)"},
            [P_UNROLL] = {"POOL_UNROLL", 3, {4, 2, 1}, "loads in flight per thread"},
            [P_GROUP] = {"POOL_GROUP",
                         7,
                         {4, 1, 2, 8, 16, 32, 0},
                         "lanes per row (tile, direct; 0: the block) or along the positions per "
                         "channel vector (channels-last)"},
            [P_PLAN] = {"POOL_PLAN",
                        3,
                        {PLAN_PRIMARY, PLAN_ALTERNATIVE, PLAN_WINDOW},
                        "0 the variant's primary algorithm (NCHW: tile for rows up to 512 "
                        "values, else direct; channels-last; adaptive: window), 1 the other NCHW "
                        "one, 2 window"},
        },
    .match = pool_match,
    .check = pool_check,
    .emit = pool_emit,
    .min_bytes = pool_min_bytes,
    .tolerance = pool_tolerance,
};
