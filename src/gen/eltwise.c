/* eltwise.c: the eltwise family: a chain of pointwise aten ops (activations, gates, residual adds,
 * scales, casts) with broadcasting, fused into one pass over the output.
 *
 * Where a chain comes from: the problem's op chain (src/formats/opchain.h): a captured aten call,
 * a captured leaf module whose ops are all pointwise (an activation module, a gate), or a
 * "kind": "chain" written by hand or by the search's fusion agent when it joins neighbouring ops of
 * model.json (docs/families/eltwise.md). eltwise_chain.c turns it into SSA values with dtypes and
 * works out the shapes; eltwise_emit.c writes the kernel.
 *
 * Semantics: eager PyTorch, op by op. Each value has the dtype PyTorch's type promotion gives it
 * (dimensioned tensors outrank 0-d tensors, which outrank Python scalars; bf16 with fp16 is fp32),
 * is computed in fp32 and rounded to its dtype right away, as eager stores it between ops. Rounding
 * a bf16 intermediate costs two instructions and keeps the fused chain within an ulp of the
 * reference instead of drifting by the rounding eager did and we skipped. float64 and integer
 * tensors are declined (models do not use them in these chains).
 *
 * Shapes: the kernel iterates over the output's stored (memory-order) elements. Every input is
 * mapped onto the output's dims through the layouts capture recorded (a channels-last tensor is
 * stored NHWC and its reference permutes it back) and numpy broadcasting, which gives each input a
 * stride per output dim, 0 where it is broadcast. Output dims of size 1 are dropped and adjacent
 * dims that every operand walks contiguously are merged, so a same-shape chain is one flat dim and
 * a bias add is [rows, cols] with the bias at strides (0, 1). Index arithmetic only appears for the
 * dims that remain.
 *
 * Speed: the chain is memory-bound except for long transcendental chains, so the kernel is a
 * streaming copy with math in the middle: ELT_VEC elements per operand move as one or two 16-byte
 * accesses (when the innermost merged dim is contiguous or broadcast for every operand and, with
 * several dims, divisible by ELT_VEC), ELT_UNROLL vectors per thread are loaded before any math so
 * that enough bytes are in flight, loads and stores can carry evict-first / no-L1 hints (data
 * touched once), and the grid is either exact (one chunk per block) or persistent (k x 132 SMs).
 * ELT_FAST computes exp, sigmoid, SiLU and GELU-tanh through __expf and fast division: GELU-tanh
 * is x * sigmoid(2u), which needs no tanh at all; both stay within 1e-6 relative error, so they
 * are allowed for fp32 outputs too, and a tanh rounded to 16 bits right after may use the hardware
 * tanh. With bf16 SiLU·mul or GELU·mul at 4.25 TB/s an SM must finish ~3 elements per clock, which
 * libm's tanhf and IEEE division alone would use most of the issue slots for.
 *
 * The space: FAST x THREADS x HINT x GRID x UNROLL x VBYTES, the vector width given in bytes of
 * the widest operand (ELT_VEC = VBYTES / its element size) so that the first value of every domain
 * is the expert default for any dtype (16-byte accesses, 2 vectors per thread, 256 threads,
 * streaming hints, exact grid, FAST): point 0, which every even sample of the space (sweep --limit)
 * includes, is the kernel one would write by hand; the last parameters are the ones a sample
 * spreads. FAST 0 is declined for chains without an op it changes (the same source).
 *
 * The CPU emission is one OpenMP loop (two for broadcast rows) with the same chain, in C. */
#include "eltwise.h"

/* Bytes of loads a thread may hold in flight (registers: ELT_MAX_INFLIGHT / 4). */
#define ELT_MAX_INFLIGHT 256

/* ---- the match ---- */

static int elt_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    elt_problem *ep = xmalloc(sizeof *ep);
    if (!elt_read(p, ep, why, why_len)) {
        free(ep);
        return 0;
    }
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    int n_ops = 0, fast = 0, vec_ok = 1;
    size_t max_es = 0, min_es = 16, in_bytes = 0;
    char ops[160] = "";
    size_t off = 0;
    for (int v = 0; v < ch->n; v++) {
        const elt_val *x = &ch->v[v];
        if (!x->live || x->kind != V_OP)
            continue;
        n_ops++;
        fast |= elt_op_is_fast(x->op);
        if (off < sizeof ops - 24)
            off += (size_t)snprintf(ops + off, sizeof ops - off, "%s%s", off ? "_" : "",
                                    ELT_OP_INFO[x->op].name);
    }
    for (int i = 0; i < sh->n_in; i++) {
        size_t es = kiln_dtype_size(p->inputs[sh->in_idx[i]].dtype);
        max_es = es > max_es ? es : max_es;
        min_es = es < min_es ? es : min_es;
        if (!sh->inner_bcast[i])
            in_bytes += es;
        vec_ok &= sh->inner_bcast[i] || sh->inner_unit[i];
    }
    for (int o = 0; o < p->n_outputs; o++) {
        size_t es = kiln_dtype_size(p->outputs[o].dtype);
        max_es = es > max_es ? es : max_es;
        min_es = es < min_es ? es : min_es;
    }
    kiln_family_fmt(m->variant, sizeof m->variant, "%s", n_ops ? ops : "copy");
    kiln_match_set(m, "n_ops", n_ops);
    kiln_match_set(m, "n_in", sh->n_in);
    kiln_match_set(m, "dims", sh->D);
    kiln_match_set(m, "vec_ok", vec_ok);
    kiln_match_set(m, "inner_gcd", (double)sh->inner_gcd);
    kiln_match_set(m, "total_max", (double)sh->total_max);
    kiln_match_set(m, "max_esize", (double)max_es);
    kiln_match_set(m, "in_bytes", (double)in_bytes);
    kiln_match_set(m, "fast_ops", fast);
    for (int i = 0; i < sh->n_in && i < 8; i++)
        m->input_of_role[i] = sh->in_idx[i];
    for (int o = 0; o < p->n_outputs && o < 4; o++)
        m->output_of_role[o] = o;
    kiln_family_fmt(m->rows_expr, sizeof m->rows_expr, "%s", sh->total);
    kiln_family_fmt(m->cols_expr, sizeof m->cols_expr, "%s", sh->size[sh->D - 1]);
    kiln_family_fmt(m->how, sizeof m->how,
                    "%s: %d op(s) over %d input tensor(s), %d merged dim(s)%s", ep->how, n_ops,
                    sh->n_in, sh->D, vec_ok ? "" : ", strided innermost");
    free(ep);
    return 1;
}

/* ---- constraints ---- */

static const char *elt_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    const int64_t max_es = (int64_t)kiln_match_get(m, "max_esize", 4);
    const int64_t threads = pt[P_THREADS], vec = pt[P_VBYTES] / max_es, unroll = pt[P_UNROLL];
    const int64_t grid = pt[P_GRID], fast = pt[P_FAST];
    const int64_t in_bytes = (int64_t)kiln_match_get(m, "in_bytes", 4);
    const int64_t total = (int64_t)kiln_match_get(m, "total_max", 1);
    const int64_t inner_gcd = (int64_t)kiln_match_get(m, "inner_gcd", 1);
    const int dims = (int)kiln_match_get(m, "dims", 1);
    if (vec < 1)
        return "VBYTES is less than one element of the widest operand";
    if (vec > 1 && !kiln_match_get(m, "vec_ok", 0))
        return "an input is strided along the innermost dim: VBYTES must be one element";
    if (vec > 1 && dims > 1 && inner_gcd % vec)
        return "VEC must divide the innermost dim of every workload";
    if (unroll * vec * in_bytes > ELT_MAX_INFLIGHT)
        return "UNROLL*VEC input bytes in flight exceed the register budget";
    if (!fast && !kiln_match_get(m, "fast_ops", 0))
        return "FAST 0 is FAST 1 here: the chain has no exp, sigmoid, tanh, SiLU or GELU-tanh";
    const int64_t chunk = threads * unroll * vec;
    if (chunk > total && threads > 64)
        return "one block covers the whole output: THREADS beyond 64 only idle";
    if (grid > 0 && (total + chunk - 1) / chunk <= grid * ELT_SMS)
        return "a persistent grid larger than the work is the exact grid (GRID 0)";
    return NULL;
}

static char *elt_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    elt_problem *ep = xmalloc(sizeof *ep);
    char why[256];
    int ok = elt_read(p, ep, why, sizeof why);
    KILN_ASSERT(ok); /* emit is only called on what match accepted */
    char *src = cuda ? elt_emit_cuda(&kiln_family_eltwise, p, m, pt, ep)
                     : elt_emit_cpu(&kiln_family_eltwise, p, m, ep);
    free(ep);
    return src;
}

/* The inputs the chain reads (an operand of type_as is only looked at for its dtype) once, the
 * outputs written once. */
static double elt_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    if (p->min_bytes >= 0)
        return p->min_bytes;
    double bytes = 0;
    int64_t shape[KILN_MAX_DIMS];
    if (kiln_match_get(m, "n_in", 0) > 8) /* more inputs than roles: every input */
        return kiln_problem_min_bytes(p, w);
    for (int i = 0; i < 8 && m->input_of_role[i] >= 0; i++) {
        const kiln_tensor_spec *t = &p->inputs[m->input_of_role[i]];
        bytes += (double)kiln_tensor_shape(p, t, w, shape) * (double)kiln_dtype_size(t->dtype);
    }
    for (int o = 0; o < p->n_outputs; o++)
        bytes += (double)kiln_tensor_shape(p, &p->outputs[o], w, shape) *
                 (double)kiln_dtype_size(p->outputs[o].dtype);
    return bytes;
}

static kiln_tolerance elt_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_eltwise = {
    .name = "eltwise",
    .summary = "fused chains of pointwise aten ops with broadcasting and casts, 16-byte vectors",
    .n_params = P_COUNT,
    .params =
        {
            /* first values: the expert default, which a sparse sample (sweep --limit) always
             * includes; the slow parameters (last) are the ones a sample spreads */
            [P_FAST] = {"ELT_FAST",
                        2,
                        {1, 0},
                        "1: exp/sigmoid/SiLU/GELU-tanh via __expf and fast division"},
            [P_THREADS] = {"ELT_THREADS", 5, {256, 512, 128, 1024, 64}, "threads per block"},
            [P_HINT] = {"ELT_HINT",
                        3,
                        {1, 2, 0},
                        "1 streaming (evict-first) loads/stores, 2 no-L1 loads with 256-byte L2 "
                        "prefetch, 0 plain"},
            [P_GRID] = {"ELT_GRID",
                        6,
                        {0, 4, 2, 8, 1, 16},
                        "0: one chunk per block; k: persistent grid-stride loop over k*132 blocks"},
            [P_UNROLL] = {"ELT_UNROLL", 4, {2, 4, 1, 8}, "vectors per thread, loads in flight"},
            [P_VBYTES] = {"ELT_VBYTES",
                          5,
                          {16, 32, 8, 4, 2},
                          "bytes per access of the widest operand (ELT_VEC = VBYTES / its "
                          "element size)"},
        },
    .match = elt_match,
    .check = elt_check,
    .emit = elt_emit,
    .min_bytes = elt_min_bytes,
    .tolerance = elt_tolerance,
};
