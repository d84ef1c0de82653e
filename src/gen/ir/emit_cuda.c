/* emit_cuda.c: the generator's CUDA driver: one kernel per plan and schedule point, readable CUDA C
 * for NVRTC (sm_90) over gen_math.h and gen.cuh, with the element code of emit.c inside.
 *
 * Pointwise plans stream the domain: a chunk is THREADS x UNROLL vectors of VEC elements along the
 * innermost axis, every vector load of a chunk issued before any math, vector stores. With TILE > 1
 * (a channels-last depthwise convolution) a vector is taken at TILE consecutive positions along W,
 * whose windows share their taps (emit_tiled).
 *
 * Reduction plans give each kept ("outer") point a team of TEAM threads; OPB = THREADS / TEAM outer
 * points share a block. Rows (the reduced axes are contiguous): a team is TEAM consecutive threads
 * walking the reduced elements in vectors of VEC. Columns (a kept axis is contiguous): a team's
 * threads are OPB apart, each thread owns VO = VEC consecutive outer points and walks the reduced
 * elements one at a time, so a warp reads VEC x 32 consecutive elements of one reduced position.
 * Every pass over the reduced elements ends with the team's merge and, with SPLIT > 1, the merge of
 * the blocks that share the outer point: a cluster exchanging through DSMEM (mode 0), or partials
 * in scratch memory merged by the last block to arrive (mode 1, one pass, outputs at the outer
 * points only). With CACHE the thread's vectors are loaded once, before the first pass, and later
 * passes and the outputs along the reduced axes read registers. */
#include "gen_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const kiln_problem *p;
    const kiln_match *m;
    const int64_t *pt;
    const kg_plan *plan;
    kiln_strbuf *b;
    int64_t vec, rv, vo, items;
    int ids;
    int cached;
    uint32_t early;            /* plan->early_out where this point streams its slice, else 0 */
    int reading;               /* emitting the last pass, which reads the early outputs back */
    int vload[KIR_MAX_ACCESS]; /* access c is read in vectors */
    int iload[KIR_MAX_ACCESS]; /* and is the same for every outer point: loaded where it is used */
    int64_t team_bytes;        /* shared memory: the team exchange, */
    int64_t xch_bytes;         /* one of the two cluster exchange buffers, */
    int64_t shared_bytes;      /* and all of it (KG_SHARED_BYTES) */
    uint64_t staged;           /* accesses copied into shared memory first (kg_stage_plan), */
    uint64_t staged_t;         /* of those, the copies with the vector axis innermost */
} cu_ctx;

static const char *elem_type(kiln_dtype t) {
    return kiln_dtype_kernel_type(t, 1).type;
}

/* Largest shared memory the copies of kg_stage_plan take: a third of the 227 KiB an SM has, so that
 * three blocks still fit; and below the 48 KiB of a static array. */
#define KG_STAGE_BYTES (40 * 1024)

/* The elements of input tensor i as stored, as an expression, and their most in any workload. */
static int64_t stored_elements(const kiln_problem *p, int i, char *expr, size_t n) {
    snprintf(expr, n, "1");
    for (int d = 0; d < p->inputs[i].ndim; d++) {
        char dim[KIR_EXPR];
        kiln_tensor_dim_expr(p, &p->inputs[i], d, dim, sizeof dim);
        kir_mul(expr, n, expr, dim);
    }
    int64_t most = 0, shape[KILN_MAX_DIMS];
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t e = kiln_tensor_shape(p, &p->inputs[i], &p->workloads[w], shape);
        most = e > most ? e : most;
    }
    return most;
}

/* A convolution's weight read at each tap is [C, 1, k, k] in memory: along a channels-last
 * activation's vector axis (the channels) lanes read it k * k elements apart, a cache line each,
 * ~25 times the L1 wavefronts of a coalesced load. Small tensors read at the taps that way are
 * copied into shared memory once a block (their whole storage) and read there; a [C, R] one with
 * the channels innermost (kg_staged_t), so that a vector's lanes read one vector. Pointwise plans
 * only. */
uint64_t kg_stage_plan(const kg_plan *plan, uint64_t *transposed, int64_t *bytes_out) {
    const kir *ir = plan->ir;
    uint64_t staged = 0;
    *transposed = 0;
    kir_axes taps = 0;
    for (int v = 0; v < ir->n_nodes; v++)
        if (plan->live[v])
            taps |= kir_taps(ir, &ir->nodes[v]);
    int64_t bytes = 0;
    for (int v = 0; v < ir->n_nodes && taps && plan->vec_axis >= 0; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan->live[v] || x->kind != KIR_LOAD || !(x->axes & taps) || (staged >> x->acc & 1))
            continue;
        int strided = 0;
        for (int w = 0; w < ir->p->n_workloads; w++) {
            const int64_t st = kg_stride(plan, x->acc, plan->vec_axis, w);
            strided |= st != 0 && st != 1;
        }
        const int t = ir->acc[x->acc].tensor;
        char expr[KIR_EXPR];
        const int64_t size = stored_elements(ir->p, t, expr, sizeof expr) *
                             (int64_t)kiln_dtype_size(ir->p->inputs[t].dtype);
        if (!strided || bytes + (size + 15) / 16 * 16 > KG_STAGE_BYTES)
            continue;
        staged |= 1ull << x->acc;
        *transposed |= (uint64_t)kg_staged_t(plan, x->acc) << x->acc;
        bytes += (size + 15) / 16 * 16;
    }
    *bytes_out = bytes;
    return staged;
}

/* The copies of kg_stage_plan, at the kernel's start. */
static void emit_staging(cu_ctx *C, kg_scope *base) {
    const kir *ir = C->plan->ir;
    base->staged = C->staged;
    base->staged_t = C->staged_t;
    if (!C->staged)
        return;
    kiln_strbuf_printf(C->b, "    KG_SHARED_ARRAY(kg_shared);\n");
    int64_t off = 0;
    for (int c = 0; c < ir->n_acc; c++) {
        if (!(C->staged >> c & 1))
            continue;
        const int t = ir->acc[c].tensor;
        const kiln_dtype dt = ir->p->inputs[t].dtype;
        char n[KIR_EXPR];
        const int64_t size = stored_elements(ir->p, t, n, sizeof n) * (int64_t)kiln_dtype_size(dt);
        /* 32-bit indices: the copy is under KG_STAGE_BYTES */
        kiln_strbuf_printf(
            C->b,
            "    %s *const kg_sh%d = (%s *)(kg_shared + %lld); /* %s */\n"
            "    for (int kg_k = threadIdx.x; kg_k < (int)(%s); kg_k += KG_THREADS)\n",
            elem_type(dt), c, elem_type(dt), (long long)off, ir->p->inputs[t].name, n);
        if (C->staged_t >> c & 1) { /* element (v, r) at r * V + v, written in that order */
            const char *v = ir->axes[C->plan->vec_axis].size;
            kiln_strbuf_printf(
                C->b,
                "        kg_sh%d[kg_k] = %s[kg_k %% (int)(%s) * (int)((%s) / (%s)) + "
                "kg_k / (int)(%s)];\n",
                c, ir->p->inputs[t].name, v, n, v, v);
        } else {
            kiln_strbuf_printf(C->b, "        kg_sh%d[kg_k] = %s[kg_k];\n", c,
                               ir->p->inputs[t].name);
        }
        off += (size + 15) / 16 * 16;
    }
    kiln_strbuf_printf(C->b, "    __syncthreads();\n");
}

/* ---- coordinates and lanes ---- */

/* Coordinates of the axes in list from flat index `flat` (its lane-0 element); along axis `tiled`
 * (-1: none) the flat index counts units of `tile` positions, the coordinate is the unit's. */
static void coords_tiled(cu_ctx *C, kg_scope *s, const int *list, int n, const char *flat,
                         const char *in, int tiled, int64_t tile) {
    const kir *ir = C->plan->ir;
    if (n == 0)
        return;
    if (n == 1) {
        snprintf(s->coord[list[0]], sizeof s->coord[0], "%s", flat);
        return;
    }
    int id = C->ids++;
    kiln_strbuf_printf(C->b, "%sint64_t kg_t%d = %s;\n", in, id, flat);
    for (int i = n - 1; i >= 0; i--) {
        int a = list[i];
        snprintf(s->coord[a], sizeof s->coord[a], "kg_c%d_%d", a, id);
        char size[KIR_EXPR + 32];
        if (a == tiled)
            snprintf(size, sizeof size, "((%s) + %lld) / %lld", ir->axes[a].size,
                     (long long)tile - 1, (long long)tile);
        else
            snprintf(size, sizeof size, "%s", ir->axes[a].size);
        if (i > 0)
            kiln_strbuf_printf(C->b,
                               "%sconst int64_t kg_c%d_%d = kg_t%d %% (%s);\n%skg_t%d /= (%s);\n",
                               in, a, id, id, size, in, id, size);
        else
            kiln_strbuf_printf(C->b, "%sconst int64_t kg_c%d_%d = kg_t%d;\n", in, a, id, id);
    }
    kiln_strbuf_printf(C->b, "%s(void)kg_t%d;\n", in, id);
}

static void coords(cu_ctx *C, kg_scope *s, const int *list, int n, const char *flat,
                   const char *in) {
    coords_tiled(C, s, list, n, flat, in, -1, 1);
}

/* The lane scope of element kg_e of a vector: the vector axis's coordinate moves by kg_e, loads
 * read in vectors are lanes of their raw registers `kg_r<c>[u]`. */
static void lane_scope(cu_ctx *C, kg_scope *lane, const kg_scope *base, const char *u,
                       const char *in) {
    const kg_plan *plan = C->plan;
    const kir *ir = plan->ir;
    kg_scope_child(lane, base, in);
    if (plan->vec_axis >= 0 && base->coord[plan->vec_axis][0]) {
        char c[64];
        snprintf(c, sizeof c, "(%s + kg_e)", base->coord[plan->vec_axis]);
        snprintf(lane->coord[plan->vec_axis], sizeof lane->coord[0], "%s", c);
    }
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan->live[v] || x->kind != KIR_LOAD || !C->vload[x->acc])
            continue;
        char elem[96];
        if (C->iload[x->acc])
            snprintf(elem, sizeof elem, "kg_lane<%s>(kg_q%d, kg_e)",
                     elem_type(ir->p->inputs[ir->acc[x->acc].tensor].dtype), x->acc);
        else
            snprintf(elem, sizeof elem, "kg_lane<%s>(kg_r%d[%s], kg_e)",
                     elem_type(ir->p->inputs[ir->acc[x->acc].tensor].dtype), x->acc, u);
        kg_load_expr(x->dtype, 1, elem, lane->name[v], sizeof lane->name[v]);
    }
    for (int o = 0; C->reading && o < ir->n_out; o++) { /* the early outputs' values, read back */
        if (!(C->early >> o & 1))
            continue;
        const kiln_dtype t = ir->p->outputs[o].dtype;
        char elem[600];
        if (C->vec > 1) {
            snprintf(elem, sizeof elem, "kg_lane<%s>(kg_o%d[%s], kg_e)", elem_type(t), o, u);
        } else {
            char off[512];
            kg_offset(lane, ir->out[o].acc, off, sizeof off);
            snprintf(elem, sizeof elem, "%s[%s]", ir->p->outputs[o].name, off);
        }
        kg_load_expr(t, 1, elem, lane->name[ir->out[o].node], sizeof lane->name[0]);
    }
}

/* Declares the raw registers of the vector loads: n per access. */
static void raw_decls(cu_ctx *C, const char *n, const char *in) {
    const kir *ir = C->plan->ir;
    for (int c = 0; c < ir->n_acc && !C->reading; c++)
        if (C->vload[c] && !C->iload[c])
            kiln_strbuf_printf(C->b, "%skg_raw<%lld>::t kg_r%d[%s];\n", in,
                               (long long)(C->vec * (int64_t)kiln_dtype_size(
                                                        ir->p->inputs[ir->acc[c].tensor].dtype)),
                               c, n);
    for (int o = 0; o < ir->n_out && C->reading && C->vec > 1; o++)
        if (C->early >> o & 1)
            kiln_strbuf_printf(
                C->b, "%skg_raw<%lld>::t kg_o%d[%s];\n", in,
                (long long)(C->vec * (int64_t)kiln_dtype_size(ir->p->outputs[o].dtype)), o, n);
}

/* The vector loads at base's coordinates into slot u (index: the loads of what every outer point
 * shares instead, into kg_q<access> where they are used). */
static void raw_loads(cu_ctx *C, const kg_scope *base, const char *u, const char *in, int index) {
    const kir *ir = C->plan->ir;
    for (int o = 0; o < ir->n_out && C->reading && C->vec > 1 && !index; o++) {
        if (!(C->early >> o & 1))
            continue;
        char off[512];
        kg_offset(base, ir->out[o].acc, off, sizeof off);
        const long long bytes =
            (long long)(C->vec * (int64_t)kiln_dtype_size(ir->p->outputs[o].dtype));
        kiln_strbuf_printf(C->b, "%skg_o%d[%s] = kg_ld<%lld>(%s + %s);\n", in, o, u, bytes,
                           ir->p->outputs[o].name, off);
    }
    for (int c = 0; c < ir->n_acc; c++) {
        if (!C->vload[c] || C->iload[c] != index || (C->reading && !index))
            continue;
        char off[512];
        kg_offset(base, c, off, sizeof off);
        kiln_dtype t = ir->p->inputs[ir->acc[c].tensor].dtype;
        const long long bytes = (long long)(C->vec * (int64_t)kiln_dtype_size(t));
        if (index)
            kiln_strbuf_printf(C->b, "%sconst kg_raw<%lld>::t kg_q%d = kg_ld<%lld>(%s + %s);\n", in,
                               bytes, c, bytes, kg_tensor_name(ir->p, ir->acc[c].tensor), off);
        else
            kiln_strbuf_printf(C->b, "%skg_r%d[%s] = kg_ld<%lld>(%s + %s);\n", in, c, u, bytes,
                               kg_tensor_name(ir->p, ir->acc[c].tensor), off);
    }
}

/* Output o can be stored in vectors here. */
static int vstore(cu_ctx *C, int o) {
    return C->vec > 1 &&
           kg_vectorizable(C->plan, C->plan->ir->out[o].acc, C->plan->vec_axis, C->vec);
}

/* Window v is summed for all lanes at once at this VEC (kg_lane_window). */
static int lane_at(const cu_ctx *C, int v) {
    return C->vec > 1 && kg_lane_window(C->plan, v, C->vec);
}

/* The windows lane_at allows, each for all lanes at once, named in s: those that tile along axis
 * `tiled` (kg_window_tiles; -1: none do) for TILE positions at once where `tiles`, else the others.
 */
static void lane_windows(cu_ctx *C, kg_scope *s, int tiled, int tiles) {
    for (int v = 0; v < C->plan->ir->n_nodes; v++) {
        if (!lane_at(C, v))
            continue;
        const int t = kg_window_tiles(C->plan, v, tiled);
        if (t == tiles)
            kg_window_lanes(s, v, C->vec, t ? (int)C->pt[P_TILE] : 1);
    }
}

/* The outputs the filter accepts (as kg_store_outputs), for the VEC lanes of a vector at base's
 * coordinates: lanes gathered into a raw vector and stored at once where the output allows. The
 * windows that kg_lane_window allows are computed first (lane_windows), unless base has them
 * (windows_done). */
static void store_lanes(cu_ctx *C, const kg_scope *base, int along_red, uint32_t outs,
                        const char *u, const char *in, int windows_done) {
    const kg_plan *plan = C->plan;
    const kir *ir = plan->ir;
    char in2[64];
    kiln_family_fmt(in2, sizeof in2, "%s    ", in);
    kg_scope vb;
    kg_scope_child(&vb, base, in);
    if (!windows_done)
        lane_windows(C, &vb, -1, 0);
    uint8_t lanes[KIR_MAX_NODES] = {0};
    for (int v = 0; v < ir->n_nodes; v++)
        lanes[v] = (uint8_t)lane_at(C, v);
    for (int o = 0; o < ir->n_out; o++) {
        if ((along_red >= 0 && kg_output_full(ir, o) != along_red) || !(outs >> o & 1))
            continue;
        kiln_dtype t = ir->p->outputs[o].dtype;
        const int v = vstore(C, o);
        if (v)
            kiln_strbuf_printf(C->b, "%skg_raw<%lld>::t kg_w%d;\n", in,
                               (long long)(C->vec * (int64_t)kiln_dtype_size(t)), o);
        kiln_strbuf_printf(C->b, "%s#pragma unroll\n%sfor (int kg_e = 0; kg_e < %lld; kg_e++) {\n",
                           in, in, (long long)C->vec);
        kg_scope lane;
        lane_scope(C, &lane, base, u, in2);
        for (int w = 0; w < ir->n_nodes; w++)
            if (lanes[w])
                kiln_family_fmt(lane.name[w], sizeof lane.name[w], "%s[kg_e]", vb.name[w]);
        if (v) {
            char st[512];
            kg_store_expr(t, 1, kg_value(&lane, ir->out[o].node), st, sizeof st);
            kiln_strbuf_printf(C->b, "%skg_set_lane<%s>(kg_w%d, kg_e, %s);\n", in2, elem_type(t), o,
                               st);
        } else {
            kg_store_outputs(&lane, -1, o);
        }
        kiln_strbuf_printf(C->b, "%s}\n", in);
        if (v) {
            char off[512];
            kg_offset(base, ir->out[o].acc, off, sizeof off);
            kiln_strbuf_printf(C->b, "%skg_st<%lld>(%s + %s, kg_w%d);\n", in,
                               (long long)(C->vec * (int64_t)kiln_dtype_size(t)),
                               ir->p->outputs[o].name, off, o);
        }
    }
}

/* ---- pointwise ---- */

/* The units of a tiled plan: vectors at TILE positions along the tile axis (W), the last unit of
 * a row ragged where TILE does not divide W. */
static void tile_units(const kg_plan *plan, int tile, char *out, size_t n) {
    const char *w = plan->ir->axes[kg_tile_axis(plan)].size;
    kiln_family_fmt(out, n, "(%s)/(%s)*(((%s)+%d)/%d)", plan->total, w, w, tile - 1,
                    tile); /* no spaces: the launch line */
}

/* TILE > 1: a thread's unit is a vector at TILE consecutive positions along the tile axis
 * (kg_tile_axis): the windows that tile there for all positions at once (their taps in one
 * unrolled loop, where the compiler merges the loads of one address), the inputs and other windows
 * of each position, then the outputs (a store may alias the inputs as far as the compiler knows:
 * no load is merged across one). */
static void emit_tiled(cu_ctx *C) {
    const kg_plan *plan = C->plan;
    kiln_strbuf *b = C->b;
    const int ta = kg_tile_axis(plan);
    const int tile = (int)C->pt[P_TILE];
    KILN_ASSERT(ta >= 0 && tile <= 8); /* check() accepted the point */
    const char *in = "                ";
    kg_scope *at = calloc((size_t)tile + 1, sizeof *at), *unit = &at[tile];
    KILN_ASSERT(at);
    const char *w = plan->ir->axes[ta].size;
    int ragged = 0; /* positions past W in a row's last unit: read clamped, not stored */
    for (int k = 0; k < plan->ir->p->n_workloads; k++)
        ragged |= kir_eval(plan->ir->p, w, k) % tile != 0;
    char units[3 * KIR_EXPR];
    tile_units(plan, tile, units, sizeof units);
    kg_scope_init(unit, b, plan, 1, in, &C->ids);
    emit_staging(C, unit);
    kiln_strbuf_printf(b,
                       "    const int64_t kg_total = %s; /* units of KG_TILE positions */\n"
                       "    const int64_t kg_chunk = (int64_t)KG_THREADS * KG_UNROLL * KG_VEC;\n"
                       "    for (int64_t kg_b = (int64_t)blockIdx.x * kg_chunk; kg_b < kg_total;\n"
                       "         kg_b += (int64_t)gridDim.x * kg_chunk) {\n"
                       "#pragma unroll\n        for (int kg_u = 0; kg_u < KG_UNROLL; kg_u++) {\n"
                       "            const int64_t kg_i = kg_b + ((int64_t)kg_u * KG_THREADS + "
                       "threadIdx.x) * KG_VEC;\n            if (kg_i < kg_total) {\n",
                       units);
    kg_scope_init(unit, b, plan, 1, in, &C->ids);
    unit->staged = C->staged;
    unit->staged_t = C->staged_t;
    coords_tiled(C, unit, plan->kept, plan->n_kept, "kg_i", in, ta, tile);
    char first[40];
    kiln_family_fmt(first, sizeof first, "%s", unit->coord[ta]);
    snprintf(unit->coord[ta], sizeof unit->coord[ta], "(%s * %d)", first, tile);
    lane_windows(C, unit, ta, 1);
    raw_decls(C, "KG_TILE", in);
    for (int t = 0; t < tile; t++) {
        char slot[8];
        kg_scope_child(&at[t], unit, in);
        if (ragged)
            snprintf(at[t].coord[ta], sizeof at[t].coord[ta], "kg_p%d_%d", t, at[t].id);
        else
            snprintf(at[t].coord[ta], sizeof at[t].coord[ta], "(%s * %d + %d)", first, tile, t);
        if (ragged)
            kiln_strbuf_printf(
                b, "%sconst int64_t %s = %s * %d + %d < (%s) ? %s * %d + %d : (%s) - 1;\n", in,
                at[t].coord[ta], first, tile, t, w, first, tile, t, w);
        for (int v = 0; v < plan->ir->n_nodes; v++)
            if (lane_at(C, v) && kg_window_tiles(plan, v, ta))
                kiln_family_fmt(at[t].name[v], sizeof at[t].name[v], "%s[%d]", unit->name[v], t);
        snprintf(slot, sizeof slot, "%d", t);
        raw_loads(C, &at[t], slot, in, 0);
        lane_windows(C, &at[t], ta, 0);
    }
    for (int t = 0; t < tile; t++) {
        char slot[8];
        snprintf(slot, sizeof slot, "%d", t);
        if (ragged)
            kiln_strbuf_printf(b, "%sif (%s * %d + %d < (%s)) { /* position %d of the tile */\n",
                               in, first, tile, t, w, t);
        else
            kiln_strbuf_printf(b, "%s{ /* position %d of the tile */\n", in, t);
        store_lanes(C, &at[t], -1, ~0u, slot, in, 1);
        kiln_strbuf_printf(b, "%s}\n", in);
    }
    kiln_strbuf_printf(b, "            }\n        }\n    }\n");
    free(at);
}

static void emit_pointwise(cu_ctx *C) {
    const kg_plan *plan = C->plan;
    kiln_strbuf *b = C->b;
    const char *in = "        ";
    if (C->pt[P_TILE] > 1) {
        emit_tiled(C);
        return;
    }
    kg_scope base;
    kg_scope_init(&base, b, plan, 1, "                ", &C->ids);
    emit_staging(C, &base);
    kiln_strbuf_printf(b,
                       "    const int64_t kg_total = %s;\n"
                       "    const int64_t kg_chunk = (int64_t)KG_THREADS * KG_UNROLL * KG_VEC;\n"
                       "    for (int64_t kg_b = (int64_t)blockIdx.x * kg_chunk; kg_b < kg_total;\n"
                       "         kg_b += (int64_t)gridDim.x * kg_chunk) {\n",
                       plan->total);
    raw_decls(C, "KG_UNROLL", in);
    kiln_strbuf_printf(b, "#pragma unroll\n        for (int kg_u = 0; kg_u < KG_UNROLL; kg_u++) {\n"
                          "            const int64_t kg_i = kg_b + ((int64_t)kg_u * KG_THREADS + "
                          "threadIdx.x) * KG_VEC;\n            if (kg_i < kg_total) {\n");
    kg_scope_init(&base, b, plan, 1, "                ", &C->ids);
    base.staged = C->staged;
    base.staged_t = C->staged_t;
    coords(C, &base, plan->kept, plan->n_kept, "kg_i", "                ");
    raw_loads(C, &base, "kg_u", "                ", 0);
    kiln_strbuf_printf(b, "            }\n        }\n");
    kiln_strbuf_printf(b, "#pragma unroll\n        for (int kg_u = 0; kg_u < KG_UNROLL; kg_u++) {\n"
                          "            const int64_t kg_i = kg_b + ((int64_t)kg_u * KG_THREADS + "
                          "threadIdx.x) * KG_VEC;\n            if (kg_i < kg_total) {\n");
    kg_scope_init(&base, b, plan, 1, "                ", &C->ids);
    base.staged = C->staged;
    base.staged_t = C->staged_t;
    coords(C, &base, plan->kept, plan->n_kept, "kg_i", "                ");
    store_lanes(C, &base, -1, ~0u, "kg_u", "                ", 0);
    kiln_strbuf_printf(b, "            }\n        }\n    }\n");
}

/* ---- reductions ---- */

typedef struct {
    const char *type, *init, *merge;
} cu_state;

static cu_state state_of(const kg_plan *plan, const kg_step *st) {
    const kir_node *x = &plan->ir->nodes[st->node];
    const int is_int = kir_dtype_is_int(x->dtype);
    switch (x->op) {
    case KR_SUM:
        return (cu_state){is_int ? "long long" : "float", "0", "kg_f_sum"};
    case KR_PROD:
        return (cu_state){"float", "1.f", "kg_f_prod"};
    case KR_MAX:
        return (cu_state){is_int ? "long long" : "float", is_int ? "LLONG_MIN" : "-INFINITY",
                          "kg_f_max"};
    case KR_MIN:
        return (cu_state){is_int ? "long long" : "float", is_int ? "LLONG_MAX" : "INFINITY",
                          "kg_f_min"};
    case KR_ARGMAX:
        return (cu_state){"kg_arg", "kg_arg{-INFINITY, LLONG_MAX}", "kg_f_argmax"};
    case KR_ARGMIN:
        return (cu_state){"kg_arg", "kg_arg{INFINITY, LLONG_MAX}", "kg_f_argmin"};
    case KR_SOFTMAX:
        if (plan->online)
            return (cu_state){"kg_smx", "kg_smx{-INFINITY, 0.f}", "kg_f_smx"};
        return st->pass == 0 ? (cu_state){"float", "-INFINITY", "kg_f_max"}
                             : (cu_state){"float", "0.f", "kg_f_sum"};
    case KR_WELFORD:
        if (plan->online)
            return (cu_state){"kg_wf", "kg_wf{0.f, 0.f, 0.f}", "kg_f_wf"};
        return (cu_state){"float", "0.f", "kg_f_sum"};
    default:
        KILN_ASSERT(!"a reduction the CUDA driver does not know");
        return (cu_state){0};
    }
}

/* The state variable of a step: ka<node> (its only or first pass), ks<node> (a second pass). */
static void state_name(const kg_step *st, char *out, size_t n) {
    snprintf(out, n, "k%c%d", st->pass ? 's' : 'a', st->node);
}

/* 1 when a step's elements are gathered a vector at a time (kt<node>[VEC]) and merged once
 * (kg_smx_addv, kg_wf_addv): an online pair or Welford along a row. */
static int step_vectored(const cu_ctx *C, const kg_step *st) {
    const kg_plan *plan = C->plan;
    const int op = plan->ir->nodes[st->node].op;
    return plan->kind == KG_ROWS && plan->online && C->vec > 1 &&
           (op == KR_SOFTMAX || op == KR_WELFORD);
}

/* 1 when a float sum runs compensated (Kahan: kc<node> holds what each addition lost): a thread
 * adds 256 or more elements in sequence, where a plain fp32 sum drifts by ~sqrt(n) ulp of its
 * partial — on the CPU, 4 lanes of 2048 normal values left 15 of 4096 columns outside fp32's
 * tolerance, none compensated. Shorter runs (a norm's sum of squares over its team's share) stay
 * plain. */
static int step_compensated(const cu_ctx *C, const kg_step *st) {
    const kir_node *x = &C->plan->ir->nodes[st->node];
    return x->op == KR_SUM && !kir_dtype_is_int(x->dtype) && C->items * C->rv >= 256;
}

static void step_update(cu_ctx *C, const kg_step *st, kg_scope *lane, const char *si,
                        const char *in) {
    const kg_plan *plan = C->plan;
    const kir_node *x = &plan->ir->nodes[st->node];
    char s[32], idx[512];
    state_name(st, s, sizeof s);
    const char *val = kg_value(lane, x->a[0]);
    const int n = st->node;
    if (step_vectored(C, st)) {
        kiln_strbuf_printf(C->b, "%skt%d[kg_e] = %s;\n", in, n, val);
        return;
    }
    switch (x->op) {
    case KR_SUM:
        if (step_compensated(C, st))
            kiln_strbuf_printf(C->b,
                               "%s{ const float kg_y = %s - kc%d[%s], kg_t = %s[%s] + kg_y; "
                               "kc%d[%s] = kg_t - kg_t == 0.f ? (kg_t - %s[%s]) - kg_y : 0.f; "
                               "%s[%s] = kg_t; }\n",
                               in, val, n, si, s, si, n, si, s, si, s, si);
        else
            kiln_strbuf_printf(C->b, "%s%s[%s] += %s;\n", in, s, si, val);
        break;
    case KR_PROD:
        kiln_strbuf_printf(C->b, "%s%s[%s] *= %s;\n", in, s, si, val);
        break;
    case KR_MAX:
    case KR_MIN:
        kiln_strbuf_printf(C->b, "%s%s[%s] = kg_%s(%s[%s], %s);\n", in, s, si,
                           x->op == KR_MAX ? "max" : "min", s, si, val);
        break;
    case KR_ARGMAX:
    case KR_ARGMIN:
        kg_offset(lane, x->acc, idx, sizeof idx);
        kiln_strbuf_printf(C->b, "%s%s[%s] = kg_%s_add(%s[%s], %s, %s);\n", in, s, si,
                           x->op == KR_ARGMAX ? "argmax" : "argmin", s, si, val, idx);
        break;
    case KR_SOFTMAX:
        if (plan->online)
            kiln_strbuf_printf(C->b, "%s%s[%s] = kg_smx_add(%s[%s], %s);\n", in, s, si, s, si, val);
        else if (st->pass == 0)
            kiln_strbuf_printf(C->b, "%s%s[%s] = kg_max(%s[%s], %s);\n", in, s, si, s, si, val);
        else
            kiln_strbuf_printf(C->b, "%s%s[%s] += kg_exp_neg(%s - km%d[%s]);\n", in, s, si, val, n,
                               si);
        break;
    case KR_WELFORD:
        if (plan->online)
            kiln_strbuf_printf(C->b, "%s%s[%s] = kg_wf_add(%s[%s], %s);\n", in, s, si, s, si, val);
        else if (st->pass == 0)
            kiln_strbuf_printf(C->b, "%s%s[%s] += %s;\n", in, s, si, val);
        else
            kiln_strbuf_printf(C->b,
                               "%s{ const float kg_d = %s - km%d[%s]; %s[%s] += kg_d * kg_d; }\n",
                               in, val, n, si, s, si);
        break;
    }
}

/* The values that stay fixed along the reduced axes but feed what moves along them (a reduction's
 * result turned into a scale, a row's query position), once they can be computed: once per outer
 * point into kh<node>[KG_VO], named in the group's scope, where the element code would compute them
 * again at every element (nvcc does not hoist them out of the guarded, unrolled loads). */
static void hoist_kept(cu_ctx *C, kg_scope *group) {
    const kg_plan *plan = C->plan;
    const kir *ir = plan->ir;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan->live[v] || group->name[v][0] || x->kind == KIR_CONST || x->kind == KIR_SCALAR ||
            !kg_ready(group, v))
            continue;
        int feeds = 0;
        for (int u = v + 1; u < ir->n_nodes && !feeds; u++)
            if (plan->live[u] && (ir->nodes[u].axes & ir->red))
                for (int i = 0; i < ir->nodes[u].n_a; i++)
                    feeds |= ir->nodes[u].a[i] == v;
        if (!feeds)
            continue;
        kiln_strbuf_printf(C->b,
                           "        %s kh%d[KG_VO] = {};\n        if (kg_live) {\n#pragma unroll\n"
                           "            for (int kg_e = 0; kg_e < KG_VO; kg_e++) {\n",
                           kg_ctype(x->dtype), v);
        kg_scope lane;
        kg_scope_child(&lane, group, "                ");
        if (plan->kind == KG_COLUMNS && plan->vec_axis >= 0 && group->coord[plan->vec_axis][0])
            snprintf(lane.coord[plan->vec_axis], sizeof lane.coord[0], "(%s + kg_e)",
                     group->coord[plan->vec_axis]);
        const char *val = kg_value(&lane, v);
        kiln_strbuf_printf(C->b, "                kh%d[kg_e] = %s;\n            }\n        }\n", v,
                           val);
        snprintf(group->name[v], sizeof group->name[v], "kh%d%s", v,
                 plan->kind == KG_ROWS ? "[0]" : "[kg_e]");
    }
}

/* After a step's merges: its results (kr<node>, kr<node>_1) and, between two passes, km<node>. */
static void step_finish(cu_ctx *C, const kg_step *st, const char *in) {
    const kg_plan *plan = C->plan;
    const kir_node *x = &plan->ir->nodes[st->node];
    const int n = st->node;
    char s[32];
    state_name(st, s, sizeof s);
    kiln_strbuf *b = C->b;
    kiln_strbuf_printf(b, "%s#pragma unroll\n%sfor (int kg_e = 0; kg_e < KG_VO; kg_e++) {\n", in,
                       in);
    switch (x->op) {
    case KR_ARGMAX:
    case KR_ARGMIN:
        kiln_strbuf_printf(b, "%s    kr%d[kg_e] = %s[kg_e].v;\n%s    kr%d_1[kg_e] = %s[kg_e].i;\n",
                           in, n, s, in, n, s);
        break;
    case KR_SOFTMAX: {
        /* an infinite max: what the two-pass sum is (NaN; logsumexp's form: 0 or inf) */
        const char *inf = x->k[0] ? "(%s[kg_e]%s < 0 ? 0.f : INFINITY)" : "NAN";
        char at_inf[96];
        snprintf(at_inf, sizeof at_inf, inf, s, plan->online ? ".m" : "");
        if (plan->online)
            kiln_strbuf_printf(b,
                               "%s    kr%d[kg_e] = %s[kg_e].m;\n%s    kr%d_1[kg_e] = "
                               "kg_isinf(%s[kg_e].m) ? %s : %s[kg_e].s;\n",
                               in, n, s, in, n, s, at_inf, s);
        else if (st->pass == 0 && x->k[0]) /* the exponent is against the max, infinities as 0 */
            kiln_strbuf_printf(b,
                               "%s    kr%d[kg_e] = %s[kg_e];\n%s    km%d[kg_e] = "
                               "kg_isinf(%s[kg_e]) ? 0.f : %s[kg_e];\n",
                               in, n, s, in, n, s, s);
        else if (st->pass == 0)
            kiln_strbuf_printf(b, "%s    km%d[kg_e] = kr%d[kg_e] = %s[kg_e];\n", in, n, n, s);
        else
            kiln_strbuf_printf(b, "%s    kr%d_1[kg_e] = %s[kg_e];\n", in, n, s);
        break;
    }
    case KR_WELFORD:
        if (plan->online)
            kiln_strbuf_printf(b,
                               "%s    kr%d[kg_e] = %s[kg_e].mean;\n%s    kr%d_1[kg_e] = "
                               "%s[kg_e].m2;\n",
                               in, n, s, in, n, s);
        else if (st->pass == 0)
            kiln_strbuf_printf(b, "%s    km%d[kg_e] = kr%d[kg_e] = %s[kg_e] / (float)(%s);\n", in,
                               n, n, s, plan->red_len);
        else
            kiln_strbuf_printf(b, "%s    kr%d_1[kg_e] = %s[kg_e];\n", in, n, s);
        break;
    default: {
        char r[128], e[64];
        snprintf(e, sizeof e, "%s[kg_e]", s);
        if (x->dtype == KILN_BF16 || x->dtype == KILN_F16)
            snprintf(r, sizeof r, "kg_round_%s(%s)", x->dtype == KILN_BF16 ? "bf16" : "f16", e);
        else
            snprintf(r, sizeof r, "%s", e);
        kiln_strbuf_printf(b, "%s    kr%d[kg_e] = %s;\n", in, n, r);
    }
    }
    kiln_strbuf_printf(b, "%s}\n", in);
}

/* The largest state of the plan's steps, in bytes. */
static int state_bytes(const kg_plan *plan) {
    int n = 4;
    for (int k = 0; k < plan->n_steps; k++) {
        const char *t = state_of(plan, &plan->steps[k]).type;
        int b = !strcmp(t, "kg_arg")      ? 16
                : !strcmp(t, "kg_wf")     ? 12
                : !strcmp(t, "kg_smx")    ? 8
                : !strcmp(t, "long long") ? 8
                                          : 4;
        n = b > n ? b : n;
    }
    return n;
}

/* The payload of one element group of the reduced axes at base's coordinates (slot u of the
 * vector registers): the updates of the steps of `phase`, or (phase < 0) the outputs along the
 * reduced axes. */
static void payload(cu_ctx *C, const kg_scope *base, int phase, const char *u, const char *in) {
    const kg_plan *plan = C->plan;
    if (phase < 0) {
        /* the early ones went out in the first pass */
        store_lanes(C, base, 1, ~C->early, u, in, 0);
        return;
    }
    char in2[64];
    kiln_family_fmt(in2, sizeof in2, "%s    ", in);
    for (int k = 0; k < plan->n_steps; k++)
        if (plan->steps[k].phase == phase && step_vectored(C, &plan->steps[k]))
            kiln_strbuf_printf(C->b, "%sfloat kt%d[%lld];\n", in, plan->steps[k].node,
                               (long long)C->vec);
    kiln_strbuf_printf(C->b, "%s#pragma unroll\n%sfor (int kg_e = 0; kg_e < %lld; kg_e++) {\n", in,
                       in, (long long)C->vec);
    kg_scope lane;
    lane_scope(C, &lane, base, u, in2);
    for (int k = 0; k < plan->n_steps; k++)
        if (plan->steps[k].phase == phase)
            step_update(C, &plan->steps[k], &lane, plan->kind == KG_ROWS ? "0" : "kg_e", in2);
    kiln_strbuf_printf(C->b, "%s}\n", in);
    for (int k = 0; k < plan->n_steps; k++) {
        const kg_step *st = &plan->steps[k];
        if (st->phase != phase || !step_vectored(C, st))
            continue;
        char s[32];
        state_name(st, s, sizeof s);
        kiln_strbuf_printf(C->b, "%s%s[0] = kg_%s_addv(%s[0], kt%d);\n", in, s,
                           plan->ir->nodes[st->node].op == KR_SOFTMAX ? "smx" : "wf", s, st->node);
    }
}

/* This thread's elements of the reduced axes, from registers (CACHE) or streamed UNROLL vectors
 * at a time; load_only: fill the registers. */
static void red_loop(cu_ctx *C, const kg_scope *group, int phase, int load_only) {
    const kg_plan *plan = C->plan;
    kiln_strbuf *b = C->b;
    const char *in = C->cached ? "            " : "                ";
    char in3[80];
    kiln_family_fmt(in3, sizeof in3, "%s    ", in);
    kiln_strbuf_printf(b, "        if (kg_live) {\n");
    if (!C->cached) {
        kiln_strbuf_printf(b, "            for (int64_t kg_kb = kg_k0 + kg_lk * KG_RV; kg_kb < "
                              "kg_k1; kg_kb += (int64_t)KG_TEAM * KG_RV * KG_UNROLL) {\n");
        raw_decls(C, "KG_UNROLL", "                ");
    }
    for (int round = C->cached ? 1 : 0; round < 2; round++) {
        const int loads = C->cached ? load_only : round == 0;
        kiln_strbuf_printf(b, "%s#pragma unroll\n%sfor (int kg_u = 0; kg_u < %s; kg_u++) {\n", in,
                           in, C->cached ? "KG_ITEMS" : "KG_UNROLL");
        kiln_strbuf_printf(b, "%s    const int64_t kg_kk = %s + (int64_t)kg_u * KG_TEAM * KG_RV;\n",
                           in, C->cached ? "kg_k0 + kg_lk * KG_RV" : "kg_kb");
        kiln_strbuf_printf(b, "%s    if (kg_kk < kg_k1) {\n", in);
        kg_scope base;
        kg_scope_child(&base, group, in3);
        coords(C, &base, plan->red, plan->n_red, "kg_kk", in3);
        if (loads) {
            raw_loads(C, &base, "kg_u", in3, 0);
        } else {
            raw_loads(C, &base, "kg_u", in3, 1);
            payload(C, &base, phase, "kg_u", in3);
            if (phase == 0 && C->early)
                store_lanes(C, &base, 1, C->early, "kg_u", in3, 0);
        }
        kiln_strbuf_printf(b, "%s    }\n%s}\n", in, in);
    }
    if (!C->cached)
        kiln_strbuf_printf(b, "            }\n");
    kiln_strbuf_printf(b, "        }\n");
}

/* The merges of a step's states after its pass: the team, then the blocks of the split. */
static void step_merge(cu_ctx *C, const kg_step *st) {
    cu_state cs = state_of(C->plan, st);
    char s[32];
    state_name(st, s, sizeof s);
    kiln_strbuf_printf(C->b,
                       "        kg_team<KG_TEAM, KG_OPB, KG_VO, KG_KFAST>(%s, %s(), "
                       "reinterpret_cast<%s *>(kg_sm));\n",
                       s, cs.merge, cs.type);
    if (C->pt[P_SPLIT] > 1 && C->pt[P_SPLITMODE] == 0) {
        kiln_strbuf_printf(
            C->b,
            "        kg_cluster<KG_SPLIT, KG_VO>(%s, %s(), reinterpret_cast<%s "
            "*>(kg_xch + kg_buf * %lld), kg_lo, kg_lk == 0);\n        kg_buf ^= 1;\n",
            s, cs.merge, cs.type, (long long)C->xch_bytes);
    }
}

/* Split mode 1: the team results go to scratch; the last block of the outer point to arrive
 * merges every block's partials in rank order (the others go on to their next group). */
static void scratch_merge(cu_ctx *C) {
    const kg_plan *plan = C->plan;
    kiln_strbuf *b = C->b;
    for (int k = 0; k < plan->n_steps; k++) {
        char s[32];
        state_name(&plan->steps[k], s, sizeof s);
        kiln_strbuf_printf(b,
                           "        %s *kg_p%d = reinterpret_cast<%s *>(kg_parts + %d * "
                           "kg_part_bytes);\n",
                           state_of(plan, &plan->steps[k]).type, k,
                           state_of(plan, &plan->steps[k]).type, k);
        kiln_strbuf_printf(b,
                           "        if (kg_live && kg_lk == 0)\n#pragma unroll\n"
                           "            for (int kg_e = 0; kg_e < KG_VO; kg_e++)\n"
                           "                kg_p%d[((kg_g * KG_OPB + kg_lo) * KG_VO + kg_e) * "
                           "KG_SPLIT + kg_rank] = %s[kg_e];\n",
                           k, s);
    }
    kiln_strbuf_printf(b,
                       "        __threadfence();\n        __syncthreads();\n"
                       "        if (threadIdx.x == 0)\n"
                       "            *kg_last = atomicAdd(&kg_count[kg_g], 1u) == KG_SPLIT - 1;\n"
                       "        __syncthreads();\n        if (!*kg_last)\n            continue;\n"
                       "        __threadfence();\n");
    for (int k = 0; k < plan->n_steps; k++) {
        char s[32];
        state_name(&plan->steps[k], s, sizeof s);
        kiln_strbuf_printf(
            b,
            "#pragma unroll\n        for (int kg_e = 0; kg_e < KG_VO; kg_e++) {\n"
            "            const int64_t kg_at = ((kg_g * KG_OPB + kg_lo) * KG_VO + "
            "kg_e) * KG_SPLIT;\n            %s[kg_e] = kg_ld_partial(&kg_p%d[kg_at]);\n"
            "            for (int kg_r = 1; kg_r < KG_SPLIT; kg_r++)\n"
            "                %s[kg_e] = %s()(%s[kg_e], kg_ld_partial(&kg_p%d[kg_at + "
            "kg_r]));\n        }\n",
            s, k, s, state_of(plan, &plan->steps[k]).merge, s, k);
    }
}

static void emit_reduction(cu_ctx *C) {
    const kg_plan *plan = C->plan;
    const kir *ir = plan->ir;
    kiln_strbuf *b = C->b;
    const int64_t split = C->pt[P_SPLIT], mode = C->pt[P_SPLITMODE];
    /* shared memory, one array: the team exchange, two cluster buffers, the last-block flag */
    kiln_strbuf_printf(b, "    KG_SHARED_ARRAY(kg_shared);\n"
                          "    unsigned char *const kg_sm = kg_shared; /* the team exchange */\n");
    if (split > 1 && mode == 0)
        kiln_strbuf_printf(b,
                           "    unsigned char *const kg_xch = kg_shared + %lld; /* 2 x %lld bytes: "
                           "the cluster exchange */\n    int kg_buf = 0;\n",
                           (long long)C->team_bytes, (long long)C->xch_bytes);
    if (split > 1 && mode == 1)
        kiln_strbuf_printf(b,
                           "    int *const kg_last = reinterpret_cast<int *>(kg_shared + %lld);\n",
                           (long long)C->team_bytes);
    kiln_strbuf_printf(b,
                       "    const int kg_lk = KG_KFAST ? threadIdx.x %% KG_TEAM : threadIdx.x / "
                       "KG_OPB; /* lane along the reduced axes */\n"
                       "    const int kg_lo = KG_KFAST ? threadIdx.x / KG_TEAM : threadIdx.x %% "
                       "KG_OPB; /* outer point in the block */\n"
                       "    const int64_t kg_outer = %s, kg_red = %s;\n"
                       "    const int64_t kg_groups = (kg_outer + KG_OPB * KG_VO - 1) / (KG_OPB * "
                       "KG_VO);\n",
                       plan->outer, plan->red_len);
    kiln_strbuf_printf(b, "    const int kg_rank = %s;\n",
                       split == 1  ? "0"
                       : mode == 0 ? "(int)kg_cluster_rank()"
                                   : "blockIdx.x % KG_SPLIT");
    kiln_strbuf_printf(b,
                       "    const int64_t kg_chunk = ((kg_red + KG_SPLIT - 1) / KG_SPLIT + KG_RV - "
                       "1) / KG_RV * KG_RV;\n"
                       "    const int64_t kg_k0 = kg_rank * kg_chunk;\n"
                       "    const int64_t kg_k1 = kg_k0 + kg_chunk < kg_red ? kg_k0 + kg_chunk : "
                       "kg_red;\n"
                       "    (void)kg_rank;\n");
    if (split > 1 && mode == 1)
        kiln_strbuf_printf(b, "    unsigned *kg_count = static_cast<unsigned *>(kiln_scratch);\n"
                              "    const int64_t kg_part_bytes = kg_groups * KG_OPB * KG_VO * "
                              "KG_SPLIT * 16;\n"
                              "    unsigned char *kg_parts = static_cast<unsigned char "
                              "*>(kiln_scratch) + (kg_groups * 4 + 255) / 256 * 256;\n");
    kiln_strbuf_printf(b,
                       "    for (int64_t kg_g = blockIdx.x / KG_SPLIT; kg_g < kg_groups; kg_g += "
                       "gridDim.x / KG_SPLIT) {\n"
                       "        const int64_t kg_o = (kg_g * KG_OPB + kg_lo) * KG_VO;\n"
                       "        const bool kg_live = kg_o < kg_outer;\n");
    kg_scope group;
    kg_scope_init(&group, b, plan, 1, "        ", &C->ids);
    coords(C, &group, plan->kept, plan->n_kept, "kg_o", "        ");
    /* the results, one per outer point of the thread */
    for (int k = 0; k < plan->n_steps; k++) {
        const kg_step *st = &plan->steps[k];
        const kir_node *x = &ir->nodes[st->node];
        if (st->pass)
            continue;
        kiln_strbuf_printf(b, "        %s kr%d[KG_VO];\n", kg_ctype(x->dtype), st->node);
        if (KIR_RED_INFO[x->op].parts > 1)
            kiln_strbuf_printf(b, "        %s kr%d_1[KG_VO];\n",
                               x->op == KR_ARGMAX || x->op == KR_ARGMIN ? "int64_t" : "float",
                               st->node);
        if (!plan->online && (x->op == KR_SOFTMAX || x->op == KR_WELFORD))
            kiln_strbuf_printf(b, "        float km%d[KG_VO];\n", st->node);
    }
    if (C->cached) {
        raw_decls(C, "KG_ITEMS", "        ");
        red_loop(C, &group, 0, 1);
    }
    hoist_kept(C, &group);
    for (int ph = 0; ph < plan->n_phases; ph++) {
        kiln_strbuf_printf(b, "        /* pass %d over the reduced axes */\n", ph + 1);
        for (int k = 0; k < plan->n_steps; k++) {
            const kg_step *st = &plan->steps[k];
            if (st->phase != ph)
                continue;
            cu_state cs = state_of(plan, st);
            char s[32];
            state_name(st, s, sizeof s);
            kiln_strbuf_printf(b,
                               "        %s %s[KG_VO];\n#pragma unroll\n        for (int kg_e = 0; "
                               "kg_e < KG_VO; kg_e++)\n            %s[kg_e] = %s;\n",
                               cs.type, s, s, cs.init);
            if (step_compensated(C, st))
                kiln_strbuf_printf(b, "        float kc%d[KG_VO] = {};\n", st->node);
        }
        red_loop(C, &group, ph, 0);
        for (int k = 0; k < plan->n_steps; k++) {
            const kg_step *st = &plan->steps[k];
            if (st->phase != ph)
                continue;
            if (step_compensated(C, st)) { /* the lost low parts back in before the merges */
                char s[32];
                state_name(st, s, sizeof s);
                kiln_strbuf_printf(b,
                                   "#pragma unroll\n        for (int kg_e = 0; kg_e < KG_VO; "
                                   "kg_e++)\n            %s[kg_e] -= kc%d[kg_e];\n",
                                   s, st->node);
            }
            step_merge(C, st);
        }
        if (split > 1 && mode == 1)
            scratch_merge(C);
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph)
                step_finish(C, &plan->steps[k], "        ");
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph && (plan->steps[k].pass == 1 || !plan->n_steps ||
                                               !(ir->nodes[plan->steps[k].node].op == KR_SOFTMAX ||
                                                 ir->nodes[plan->steps[k].node].op == KR_WELFORD) ||
                                               plan->online))
                kg_name_results(&group, plan->steps[k].node,
                                plan->kind == KG_ROWS ? "[0]" : "[kg_e]");
        /* a two-pass pair's first result is read by its second pass */
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph && plan->steps[k].pass == 0)
                snprintf(group.name[plan->steps[k].node], sizeof group.name[0], "kr%d%s",
                         plan->steps[k].node, plan->kind == KG_ROWS ? "[0]" : "[kg_e]");
        hoist_kept(C, &group);
    }
    /* the outputs at the outer points: one writer per team (and per split) */
    kiln_strbuf_printf(b, "        if (kg_live && kg_lk == 0%s) {\n",
                       split > 1 && mode == 0 ? " && kg_rank == 0" : "");
    kiln_strbuf_printf(b,
                       "#pragma unroll\n            for (int kg_e = 0; kg_e < KG_VO; kg_e++) {\n");
    kg_scope lane;
    kg_scope_child(&lane, &group, "                ");
    if (plan->kind == KG_COLUMNS && plan->vec_axis >= 0 && group.coord[plan->vec_axis][0])
        snprintf(lane.coord[plan->vec_axis], sizeof lane.coord[0], "(%s + kg_e)",
                 group.coord[plan->vec_axis]);
    kg_store_outputs(&lane, 0, -1);
    kiln_strbuf_printf(b, "            }\n        }\n");
    if (plan->full_out && !(C->early && plan->early_reread == 2)) {
        kiln_strbuf_printf(b, "        /* the outputs along the reduced axes%s */\n",
                           C->early ? ", the early ones read back" : "");
        C->reading = C->early != 0;
        red_loop(C, &group, -1, 0);
        C->reading = 0;
    }
    kiln_strbuf_printf(b, "    }\n");
    if (split > 1 && mode == 0)
        kiln_strbuf_printf(b, "    kg_cluster_sync(); /* no block leaves while another may read "
                              "its shared memory */\n");
}

/* The problem's const axes as compile-time constants, in a block that shadows the parameters of
 * the same names (the launch still passes them): a coordinate's division by a size, and the
 * strides' products, fold at compile time (a power of two is a shift), where a division by an
 * int64 parameter is a ~70-instruction call per vector. Opens the block; 1 when it did. */
static int const_axes(kiln_strbuf *b, const kiln_problem *p) {
    int n = 0;
    for (int i = 0; i < p->n_axes; i++) {
        if (p->axes[i].kind != KILN_AXIS_CONST)
            continue;
        if (!n++)
            kiln_strbuf_printf(b, "    { /* the const axes, folded */\n");
        kiln_strbuf_printf(b, "    constexpr int64_t %s = %lld;\n    (void)%s;\n", p->axes[i].name,
                           (long long)p->axes[i].value, p->axes[i].name);
    }
    return n > 0;
}

char *kg_emit_cuda(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                   const int64_t *pt, const kg_plan *plan, int64_t registers) {
    kiln_strbuf b = {0}, ir_text = {0};
    int esize, in_bytes, in_loads;
    kg_stream_sizes(plan, &esize, &in_bytes, &in_loads);
    cu_ctx C = {.p = p, .m = m, .pt = pt, .plan = plan, .b = &b};
    C.vec = pt[P_VBYTES] / esize;
    KILN_ASSERT(C.vec >= 1); /* check() accepted the point */
    const int red = plan->kind != KG_POINTWISE;
    C.rv = plan->kind == KG_ROWS ? C.vec : 1;
    C.vo = plan->kind == KG_COLUMNS ? C.vec : 1;
    C.cached = red && pt[P_CACHE];
    const int64_t split = pt[P_SPLIT], team = pt[P_TEAM], threads = pt[P_THREADS];
    const int64_t opb = red ? threads / team : 1;
    int64_t red_max = 0;
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t r = kir_eval(p, plan->red_len, w);
        red_max = r > red_max ? r : red_max;
    }
    const int64_t chunk = ((red_max + split - 1) / split + C.rv - 1) / C.rv * C.rv;
    C.items = (chunk + team * C.rv - 1) / (team * C.rv);
    if (red) {
        const int64_t sb = state_bytes(plan);
        const int64_t slots =
            plan->kind == KG_ROWS ? (team > 32 ? threads / 32 : 1) : threads * C.vo;
        C.team_bytes = (slots * sb + 15) / 16 * 16;
        C.xch_bytes = (opb * C.vo * sb + 15) / 16 * 16;
        C.shared_bytes = C.team_bytes + (split > 1 ? (pt[P_SPLITMODE] ? 16 : 2 * C.xch_bytes) : 0);
    } else {
        C.staged = kg_stage_plan(plan, &C.staged_t, &C.shared_bytes);
    }
    const kir *ir = plan->ir;
    kir_axes streamed = red ? ir->red : ir->domain;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        /* at VEC 1 a kept slice is still loaded into registers (one element a register): without
         * them CACHE 1 read the slice again in every pass, which the model counts as free; as at
         * any VEC, only the loads along the vector axis (kg_stream_sizes counts those). A load
         * along a window's own axes (its input, read at the taps) is never read at the domain's
         * points: no vector there. */
        if (plan->live[v] && x->kind == KIR_LOAD && (x->axes & streamed) &&
            !(x->axes & ~ir->domain) &&
            C.vec * (int64_t)kiln_dtype_size(p->inputs[ir->acc[x->acc].tensor].dtype) <= 64)
            C.vload[x->acc] =
                C.vec > 1 ? kg_vectorizable(plan, x->acc, plan->vec_axis, C.vec)
                          : C.cached && plan->vec_axis >= 0 && (x->axes >> plan->vec_axis & 1);
    }
    /* outputs that read no reduction go out in the first pass and are read back in the last
     * (plan_early); in vectors where the inputs stream in vectors */
    C.early = red && !C.cached ? plan->early_out : 0;
    for (int o = 0; o < ir->n_out; o++)
        if ((C.early >> o & 1) && C.vec > 1 && !vstore(&C, o))
            C.early = 0;
    /* a causal mask's key positions beside the scores: loaded where they are used, not held */
    for (int v = 0; v < ir->n_nodes; v++)
        if (ir->nodes[v].kind == KIR_LOAD && C.vload[ir->nodes[v].acc] && kg_index_load(plan, v))
            C.iload[ir->nodes[v].acc] = 1;

    kir_print(ir, &ir_text);
    kiln_strbuf_printf(&b, "/* the IR (docs/generator.md):\n");
    for (const char *l = ir_text.s; l && *l;) {
        const char *e = strchr(l, '\n');
        kiln_strbuf_printf(&b, " *   %.*s\n", (int)(e ? e - l : (long)strlen(l)), l);
        l = e ? e + 1 : l + strlen(l);
    }
    free(ir_text.s);
    static const char *const kinds[] = {"pointwise", "rows", "columns"};
    kiln_strbuf_printf(&b, " * plan: %s */\n", kinds[plan->kind]);
    char *defs = kiln_family_defines(f, pt);
    kiln_strbuf_printf(&b, "%s#define KG_VEC %lld\n#define KG_SHARED_BYTES %lld\n", defs,
                       (long long)C.vec, (long long)(C.shared_bytes > 16 ? C.shared_bytes : 16));
    free(defs);
    if (red)
        kiln_strbuf_printf(&b,
                           "#define KG_RV %lld /* elements per step along the reduced axes */\n"
                           "#define KG_VO %lld /* outer points per thread */\n"
                           "#define KG_OPB %lld /* outer points (teams) per block */\n"
                           "#define KG_KFAST %d /* a team is consecutive threads */\n"
                           "#define KG_ITEMS %lld /* vectors per thread when cached */\n",
                           (long long)C.rv, (long long)C.vo, (long long)opb, plan->kind == KG_ROWS,
                           (long long)C.items);
    /* Blocks an SM must hold at least: ptxas may then use no more than 128 registers a thread
     * where the point's own estimate (gen.c's register budget: the held loads, ~48 of indices and
     * temporaries, the states) fits them, else what that estimate needs. Left at 1, ptxas spends
     * up to 255 on issuing loads early (a causal mask's key positions, a whole cached slice) and
     * the SM holds one block of 8 warps. */
    int64_t minb = registers <= 128 ? 512 / threads : 65536 / (threads * registers);
    minb = minb < 1 ? 1 : minb;
    kiln_strbuf_printf(&b, "#define KG_MINB %lld /* blocks an SM holds at least */\n",
                       (long long)minb);
    const int64_t cap = pt[P_PERSIST] * KG_SMS / split * split;
    char grid[700];
    char units[3 * KIR_EXPR];
    if (pt[P_TILE] > 1)
        tile_units(plan, (int)pt[P_TILE], units, sizeof units);
    else
        kiln_family_fmt(units, sizeof units, "%s", plan->total);
    if (!red)
        snprintf(grid, sizeof grid, "ceil_div(%s,%lld)", units,
                 (long long)(threads * pt[P_UNROLL] * C.vec));
    else
        snprintf(grid, sizeof grid, "ceil_div(%s,%lld)*%lld", plan->outer, (long long)(opb * C.vo),
                 (long long)split);
    if (pt[P_PERSIST]) {
        char capped[720];
        snprintf(capped, sizeof capped, "min(%lld,%s)", (long long)cap, grid);
        kiln_family_fmt(grid, sizeof grid, "%s", capped);
    }
    kiln_strbuf_printf(&b, "// kiln: launch kg_kernel grid=%s block=%lld", grid,
                       (long long)threads);
    if (red && split > 1 && pt[P_SPLITMODE] == 0)
        kiln_strbuf_printf(&b, " cluster=%lld", (long long)split);
    kiln_strbuf_printf(&b, "\n");
    const int scratch = red && split > 1 && pt[P_SPLITMODE] == 1;
    if (scratch)
        kiln_strbuf_printf(
            &b,
            "// kiln: scratch ceil_div(ceil_div(%s,%lld)*4,256)*256+%d*ceil_div(%s,%lld)*%lld\n",
            plan->outer, (long long)(opb * C.vo), plan->n_steps, plan->outer,
            (long long)(opb * C.vo), (long long)(opb * C.vo * split * 16));
    kiln_strbuf_printf(&b, "%s\n%s\n", kiln_family_template("gen_math.h"),
                       kiln_family_template("gen.cuh"));
    char *proto = kiln_family_prototype(p, scratch, 1, "KG_THREADS, KG_MINB", "kg_kernel");
    kiln_strbuf_printf(&b, "%s {\n", proto);
    free(proto);
    const int consts = const_axes(&b, p);
    if (red)
        emit_reduction(&C);
    else
        emit_pointwise(&C);
    kiln_strbuf_printf(&b, "%s}\n", consts ? "    }\n" : "");
    return kiln_family_source(f, m, pt, b.s);
}
