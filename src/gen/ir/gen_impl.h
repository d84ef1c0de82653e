/* gen_impl.h: what the generator's files share (private to src/gen/ir): the schedule parameters,
 * the plan of a lowered IR (plan.c: its axes merged and ordered, the kind of kernel, the passes
 * of its reductions), the element emitter both backends use (emit.c), and the CPU and CUDA
 * drivers (emit_cpu.c, emit_cuda.c). */
#ifndef KILN_GEN_IR_GEN_IMPL_H
#define KILN_GEN_IR_GEN_IMPL_H

#include "../family.h"
#include "ir.h"

/* The schedule parameters, in table order (the first varies fastest). */
enum {
    P_THREADS,   /* threads per block */
    P_VBYTES,    /* bytes per access of the widest streamed operand: VEC = VBYTES / its size */
    P_UNROLL,    /* vectors per thread loaded before any is used */
    P_TEAM,      /* reductions: threads per outer point */
    P_SPLIT,     /* reductions: blocks per outer point */
    P_SPLITMODE, /* 0: a thread-block cluster, partials through DSMEM; 1: partials in scratch, the
                    last block to finish combines them */
    P_ONLINE,    /* pair reductions (softmax, Welford) in one pass (1) or two (0) */
    P_CACHE,     /* 1: a thread keeps its slice of the reduced inputs in registers across passes */
    P_PERSIST,   /* 0: a block per work item; k: at most k x 132 blocks, looping */
    P_TILE,      /* pointwise windows: consecutive positions a thread computes along the axis
                    outside the vector axis (kg_tile_axis), their shared taps loaded once */
    P_COUNT
};

/* SMs of the device the persistent grid is sized for (family.h). */
#define KG_SMS KILN_FAMILY_SMS
/* Registers (32-bit words) a thread may spend on cached or in-flight loads. */
#define KG_MAX_WORDS 64
/* Static shared memory for team reductions. */
#define KG_MAX_SMEM (48 * 1024)

extern const kiln_family kiln_family_gen;

typedef enum { KG_POINTWISE, KG_ROWS, KG_COLUMNS } kg_kind;

/* One pass over the reduced axes computes some reductions: a reduction is one step, a pair (the
 * softmax pair, Welford) computed in two passes is two (pass 0: the max or the sum; pass 1: the
 * sum of exponentials or of squared deviations). */
typedef struct {
    int node;
    int pass;
    int phase;
} kg_step;

typedef struct {
    kir *ir; /* lowered, finished, axes merged */
    kg_kind kind;
    int n_kept, kept[KIR_MAX_AXES]; /* domain axes not reduced, outermost first */
    int n_red, red[KIR_MAX_AXES];   /* reduced axes, outermost first */
    int vec_axis;                   /* the axis vectors run along; -1: none */
    int online;
    int n_steps;
    kg_step steps[KIR_MAX_NODES];
    int n_phases;
    int full_out; /* an output moves along the reduced axes */
    /* Outputs along the reduced axes that read no reduction (a residual sum beside the norm of it):
     * a plan that streams its slice stores them in its first pass and its last pass reads them back
     * (early_reread 1: that pass then needs no streamed input) or has nothing left to do (2).
     * early_bytes: their element bytes, read back once. 0 / 0 when it would not save a read. */
    uint32_t early_out;
    int early_reread;
    int early_bytes;
    int pairs; /* a softmax pair or a Welford reduction (ONLINE matters) */
    int live[KIR_MAX_NODES];
    char outer[KIR_EXPR], red_len[KIR_EXPR], total[KIR_EXPR]; /* sizes as expressions */
} kg_plan;

/* Lowers p and plans it for one-pass (online) or two-pass pair reductions: 1, or 0 with the
 * reason. Free with kg_plan_free. */
int kg_plan_make(const kiln_problem *p, int online, kg_plan *plan, char *why, size_t n);
void kg_plan_free(kg_plan *plan);
/* The stride of access c along axis a in workload w. */
int64_t kg_stride(const kg_plan *plan, int c, int a, int w);
/* 1 when node v is a reduction's load along the reduced axes alone beside loads that also move
 * along a kept axis (a causal mask's int64 key positions beside the scores): the same short vector
 * for every outer point, read from cache where it is used (emit_cuda.c) — it neither sets the
 * vector width nor counts among the bytes a thread holds. */
int kg_index_load(const kg_plan *plan, int v);
/* 1 when output o moves along the reduced axes (it is written from inside the passes' loops). */
int kg_output_full(const kir *ir, int o);
/* Access c can move as one vector of vec elements along axis a: unit stride there and every other
 * stride and the offset multiples of vec, in every workload (buffers are 256-byte aligned). */
int kg_vectorizable(const kg_plan *plan, int c, int a, int64_t vec);
/* 1 when window node v of a pointwise plan is computed for the vec lanes of a vector at once
 * (emit.c's kg_window_lanes): a sum (average pooling, a depthwise convolution) over a fixed window
 * that leaves the vector axis alone, of a load that moves along it in vectors of vec — a
 * channels-last depthwise convolution's taps, one vector load each instead of vec scalar ones. */
int kg_lane_window(const kg_plan *plan, int v, int64_t vec);
/* 1 when max pooling node v's index is read (a live KIR_PART of it). */
int kg_window_index_live(const kg_plan *plan, int v);
/* 1 when window node v reads its taps clamped into the input, without a branch around the loads
 * (emit.c's window_code): a sum over a fixed window (average pooling, a convolution), which counts
 * only the taps inside by a flag, or max pooling whose index is not read, with dilation 1 along
 * every axis, where every window of every workload has a tap inside the input: a clamped tap then
 * repeats an element of its window, which does not change the maximum. (With its index, every
 * tap's 64-bit index in flight too spilled at 64 threads a block.) */
int kg_window_clamped(const kg_plan *plan, int v);
/* 1 when access c's tensor is [V, R...] along the plan's vector axis (size V, stride S: every other
 * axis it walks stays below S and it has V x S elements, in every workload): a shared-memory copy
 * of it can then be laid out with the vector axis innermost, element (r, v) at r * V + v, so that a
 * vector's lanes read consecutive elements — a [C, 1, k, k] depthwise weight under channels-last
 * lanes, a tap one vector load instead of VEC loads k * k elements apart. */
int kg_staged_t(const kg_plan *plan, int c);
/* The kept axis just outside the vector axis of a pointwise plan where it is the output axis of a
 * window that kg_window_tiles allows (a channels-last convolution's W): a thread's TILE consecutive
 * outputs along it read overlapping taps; else -1. */
int kg_tile_axis(const kg_plan *plan);
/* 1 when window v is a convolution kg_lane_window allows whose last dim's output axis is `axis`:
 * TILE positions along it share its taps (kg_window_lanes with a tile). */
int kg_window_tiles(const kg_plan *plan, int v, int axis);
/* The largest element size (bytes) of what streams along the vector axis (the loads that move
 * along the reduced axes and the outputs along them; everything in a pointwise plan), the bytes per
 * element of the streamed loads along the vector axis and how many such loads there are (index
 * loads left out). */
void kg_stream_sizes(const kg_plan *plan, int *max_esize, int *in_bytes, int *in_loads);

/* ---- the element emitter (emit.c) ---- */

/* A scope of generated code: where each axis's coordinate comes from, which values are already
 * named (reduction results, vector lanes, values of an enclosing scope), and what it has emitted.
 */
typedef struct kg_scope {
    kiln_strbuf *b;
    const kg_plan *plan;
    int cuda;
    const char *indent;
    char coord[KIR_MAX_AXES][64]; /* "" = 0 */
    char name[KIR_MAX_NODES][96]; /* "" = not yet computed here */
    uint64_t staged;              /* accesses read from a shared-memory copy kg_sh<access> */
    uint64_t staged_t; /* of those, copies with the vector axis innermost (kg_staged_t) */
    int id;            /* suffix of the scope's temporaries */
    int *next_id;      /* shared counter for nested scopes */
} kg_scope;

void kg_scope_init(kg_scope *s, kiln_strbuf *b, const kg_plan *plan, int cuda, const char *indent,
                   int *next_id);
/* A child scope: the same coordinates and names, deeper indentation. */
void kg_scope_child(kg_scope *child, const kg_scope *parent, const char *indent);
/* The C expression of node v's value in scope s, emitting what it needs. */
const char *kg_value(kg_scope *s, int v);
/* The offset of access c at s's coordinates ("0 + c1 * n64 + ..."). */
void kg_offset(const kg_scope *s, int c, char *out, size_t n);
/* Where access c reads: tensor[offset], or its shared-memory copy kg_sh<c>[offset] (laid out as
 * kg_staged_t says where s->staged_t has it). */
void kg_load_at(const kg_scope *s, int c, char *out, size_t n);
/* The C type a node computes in: "float", or "int64_t" for integers and bool. */
const char *kg_ctype(kiln_dtype t);
/* An element of dtype t at `ptr[off]` widened to its compute type, and a value rounded to t for
 * a store. */
void kg_load_expr(kiln_dtype t, int cuda, const char *elem, char *out, size_t n);
void kg_store_expr(kiln_dtype t, int cuda, const char *value, char *out, size_t n);
/* The C name of tensor input i / output o in the kernel's parameters. */
const char *kg_tensor_name(const kiln_problem *p, int tensor);
/* Stores every output that the filter accepts (along_red 1: those along the reduced axes, 0: the
 * others, -1: all; only: that output, -1: all) at s's coordinates; guarded so that an output
 * written from several domain points is written from the first. */
void kg_store_outputs(kg_scope *s, int along_red, int only);
/* Values that can be computed in s before a loop over the reduced axes: v itself when it does not
 * move along them and every reduction it needs is named in s, else the same for its operands. */
/* 1 when v can be computed in s now: it does not move along the reduced axes and every reduction
 * it reads is named. */
int kg_ready(const kg_scope *s, int v);
void kg_hoist(kg_scope *s, int v);
/* Window v for `lanes` lanes along the plan's vector axis at once (kg_lane_window(plan, v, lanes)
 * holds): emits the array s->name[v][lanes] (the lanes' scopes name the value <that>[kg_e]); with
 * tile > 1 (a convolution, kg_tile_axis: s's coordinate there is the tile's first position) for
 * that many positions along its last dim, s->name[v][tile][lanes]. */
void kg_window_lanes(kg_scope *s, int v, int64_t lanes, int tile);
/* Names a finished reduction's results in s: the node as `kr<node><index>` and its second result
 * (the PART nodes that read it) as `kr<node>_1<index>` (index "" or "[kg_e]"). */
void kg_name_results(kg_scope *s, int node, const char *index);

/* ---- the drivers ---- */
/* The accesses a pointwise CUDA kernel of plan copies into shared memory at its start (a mask of
 * accesses), of those the ones laid out with the vector axis innermost (*transposed), and the
 * bytes the copies take (*bytes). */
uint64_t kg_stage_plan(const kg_plan *plan, uint64_t *transposed, int64_t *bytes);
/* The source of the plan for the cpu backend / for CUDA at point pt, with family f's banner and
 * defines (f is gen.c's family, and registers gen.c's estimate of the registers a thread of pt
 * needs: passed in so that the drivers do not call back into gen.c). */
char *kg_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                  const kg_plan *plan);
char *kg_emit_cuda(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                   const int64_t *pt, const kg_plan *plan, int64_t registers);

#endif
