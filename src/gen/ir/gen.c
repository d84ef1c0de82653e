/* gen.c: the tensor-expression generator as a kernel family: its schedule space (the parameter
 * table), the constraints that return reasons, the start point from a roofline estimate, bytes
 * and flops from the IR, the matcher (the problem lowers and plans) and the emitters.
 *
 * Why the schedule is the space. The IR says what is computed; how a GPU walks it is the search.
 * A pointwise plan is a stream (threads, vector width, loads in flight, a persistent grid); a
 * reduction plan gives each kept point (a row, a column) a team of threads, optionally split over
 * several blocks (a thread-block cluster exchanging partials through distributed shared memory, or
 * partials in scratch memory combined by the last block to finish), computes the softmax pair and
 * Welford's mean and variance in one pass or two, and keeps a thread's slice of the reduced inputs
 * in registers between passes or reads it again. The parameters are relative to the plan, so that
 * one table serves every problem; the constraints reject the points that cannot run, and the
 * points that would compile to the same source as another (canonical forms), with the reason.
 *
 * The start point. Every valid point gets a time from a roofline model of the H200 (bytes over
 * the copy bandwidth, scaled down when too few bytes are in flight to cover the memory latency;
 * re-reads when the slice is not kept; the cost of the team's and the cluster's exchanges; the
 * launch), and the start rule is the fastest by that estimate. Searches start there and sweeps run
 * it first; the device run measures how good the estimate is (docs/generator.md). */
#include "gen_impl.h"

#include <math.h>
#include <string.h>

/* The H200 as the model sees it. */
#define KG_BW 4.25e12          /* bytes per second, device-to-device copy */
#define KG_INFLIGHT_SM 22528.0 /* bytes in flight per SM that cover ~0.7 us of latency */
#define KG_LAUNCH_S 2e-6

static int64_t fact(const kiln_match *m, const char *key) {
    return (int64_t)kiln_match_get(m, key, 0);
}

/* ---- the match ---- */

static int gen_match(const kiln_problem *p, kiln_match *m, char *why, size_t n) {
    kg_plan plan, two;
    if (!kg_plan_make(p, 1, &plan, why, n))
        return 0;
    if (!kg_plan_make(p, 0, &two, why, n)) {
        kg_plan_free(&plan);
        return 0;
    }
    const kir *ir = plan.ir;
    int esize, in_bytes, in_loads;
    kg_stream_sizes(&plan, &esize, &in_bytes, &in_loads);
    int64_t vgcd = 0, tmin = 0, total = 0, outer = 0, red = 0, biggest = 0;
    const int tile_axis = kg_tile_axis(&plan); /* -1: no TILE here */
    for (int w = 0; w < p->n_workloads; w++) {
        if (plan.vec_axis >= 0)
            vgcd = kiln_family_gcd(vgcd, kir_eval(p, ir->axes[plan.vec_axis].size, w));
        if (tile_axis >= 0) {
            const int64_t t = kir_eval(p, ir->axes[tile_axis].size, w);
            tmin = tmin && tmin < t ? tmin : t;
        }
        int64_t t = kir_eval(p, plan.total, w), o = kir_eval(p, plan.outer, w),
                r = kir_eval(p, plan.red_len, w);
        total = t > total ? t : total;
        outer = o > outer ? o : outer;
        red = r > red ? r : red;
        int64_t shape[KILN_MAX_DIMS];
        for (int i = 0; i < p->n_inputs; i++) {
            int64_t e = kiln_tensor_shape(p, &p->inputs[i], &p->workloads[w], shape);
            biggest = e > biggest ? e : biggest;
        }
        for (int o2 = 0; o2 < p->n_outputs; o2++) {
            int64_t e = kiln_tensor_shape(p, &p->outputs[o2], &p->workloads[w], shape);
            biggest = e > biggest ? e : biggest;
        }
    }
    int state = 4, windows = 0, remaps = 0, reds = 0, streams = 0;
    int64_t taps = 0; /* the most taps of a fixed window (an adaptive one is a loop) */
    /* the windows summed a vector a tap (kg_lane_window), their most taps and their kernel along
     * the tile axis (the taps TILE neighbours share) */
    int64_t lane_taps = 0, tile_kernel = 1;
    /* a window whose VEC adjacent outputs measured slow above VEC 2 (the cost model below): max
     * pooling, its taps checked or clamped, a window whose taps are behind their own checks
     * (kg_window_clamped: adaptive), or one whose adjacent outputs along the vector axis share no
     * taps and are not read as one vector a tap (kg_lane_window: a channels-last depthwise conv's
     * lanes are) */
    int narrow = 0;
    const kir_axes streamed = plan.kind == KG_POINTWISE ? ir->domain : ir->red;
    for (int o = 0; o < ir->n_out; o++)
        streams += plan.kind == KG_POINTWISE || kg_output_full(ir, o);
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan.live[v])
            continue;
        streams += x->kind == KIR_LOAD && (x->axes & streamed);
        windows |= x->kind == KIR_WINDOW;
        if (x->kind == KIR_WINDOW) {
            const kir_map *wm = &ir->maps[x->map];
            int shares = 0;
            int64_t t = 1;
            for (int i = 0; i < wm->n; i++) {
                shares |= wm->dst[i] == plan.vec_axis;
                t *= wm->kernel[i];
            }
            narrow |= x->op == KR_MAXPOOL || !kg_window_clamped(&plan, v) ||
                      (!shares && !kg_lane_window(&plan, v, 1));
            if (!wm->adaptive)
                taps = t > taps ? t : taps;
            if (kg_lane_window(&plan, v, 1)) {
                lane_taps = t > lane_taps ? t : lane_taps;
                for (int i = 0; i < wm->n; i++)
                    if (wm->dst[i] == tile_axis && wm->kernel[i] > tile_kernel)
                        tile_kernel = wm->kernel[i];
            }
        }
        remaps |= x->kind == KIR_REMAP;
        if (x->kind != KIR_REDUCE)
            continue;
        reds++;
        int sb = x->op == KR_ARGMAX || x->op == KR_ARGMIN ? 16 : x->op == KR_WELFORD ? 12 : 8;
        state = sb > state ? sb : state;
    }
    static const char *const kinds[] = {"pointwise", "rows", "columns"};
    kiln_family_fmt(m->variant, sizeof m->variant, "%s%s%s", kinds[plan.kind],
                    reds ? (plan.pairs ? "_pairs" : "_reduce") : "",
                    windows  ? "_window"
                    : remaps ? "_gather"
                             : "");
    kiln_match_set(m, "kind", plan.kind);
    kiln_match_set(m, "vgcd", (double)vgcd);
    kiln_match_set(m, "esize", esize);
    kiln_match_set(m, "in_bytes", in_bytes);
    kiln_match_set(m, "in_loads", in_loads);
    kiln_match_set(m, "streams", streams);
    kiln_match_set(m, "total_max", (double)total);
    kiln_match_set(m, "outer_max", (double)outer);
    kiln_match_set(m, "red_max", (double)red);
    kiln_match_set(m, "phases1", plan.n_phases);
    kiln_match_set(m, "phases2", two.n_phases);
    kiln_match_set(m, "steps1", plan.n_steps);
    kiln_match_set(m, "steps2", two.n_steps);
    kiln_match_set(m, "full_out", plan.full_out);
    kiln_match_set(m, "early_reread", plan.early_reread);
    kiln_match_set(m, "early_bytes", plan.early_bytes);
    kiln_match_set(m, "pairs", plan.pairs);
    kiln_match_set(m, "state_bytes", state);
    kiln_match_set(m, "idx64", biggest >= ((int64_t)1 << 31));
    kiln_match_set(m, "windows", windows);
    kiln_match_set(m, "window_taps", (double)taps);
    kiln_match_set(m, "window_narrow", narrow);
    kiln_match_set(m, "lane_taps", (double)lane_taps);
    kiln_match_set(m, "tile_min", (double)tmin);
    kiln_match_set(m, "tile_kernel", (double)tile_kernel);
    uint64_t transposed;
    int64_t stage_bytes = 0;
    if (plan.kind == KG_POINTWISE)
        kg_stage_plan(&plan, &transposed, &stage_bytes);
    kiln_match_set(m, "stage_bytes", (double)stage_bytes);
    for (int i = 0; i < 8; i++)
        m->input_of_role[i] = i < p->n_inputs ? i : -1;
    for (int o = 0; o < 4; o++)
        m->output_of_role[o] = o < p->n_outputs ? o : -1;
    kiln_family_fmt(m->rows_expr, sizeof m->rows_expr, "%s", plan.outer);
    kiln_family_fmt(m->cols_expr, sizeof m->cols_expr, "%s", plan.red_len);
    kiln_family_fmt(m->how, sizeof m->how, "%s; %s plan, %d kept and %d reduced axes", ir->how,
                    kinds[plan.kind], plan.n_kept, plan.n_red);
    kg_plan_free(&plan);
    kg_plan_free(&two);
    return 1;
}

/* ---- constraints ---- */

/* What a point means for the plan: derived quantities shared by check and the model. */
typedef struct {
    int64_t threads, vec, unroll, team, split, mode, online, cache, persist, tile;
    int64_t opb, vo, items, blocks, phases, steps;
    int64_t words;     /* the bytes of loads a thread holds, in words (the budget of gen_check) */
    int64_t reg_words; /* the registers they take: a load's vector rounded up (bf16 at VEC 1: 1) */
} point_info;

static void info_of(const kiln_match *m, const int64_t *pt, point_info *q) {
    const int64_t kind = fact(m, "kind");
    q->threads = pt[P_THREADS];
    q->vec = pt[P_VBYTES] / (fact(m, "esize") ? fact(m, "esize") : 1);
    q->unroll = pt[P_UNROLL];
    q->team = pt[P_TEAM];
    q->split = pt[P_SPLIT];
    q->mode = pt[P_SPLITMODE];
    q->online = pt[P_ONLINE];
    q->cache = pt[P_CACHE];
    q->persist = pt[P_PERSIST];
    q->tile = pt[P_TILE];
    q->phases = q->online ? fact(m, "phases1") : fact(m, "phases2");
    q->steps = q->online ? fact(m, "steps1") : fact(m, "steps2");
    const int64_t vec = q->vec > 0 ? q->vec : 1;
    if (kind == KG_POINTWISE) {
        q->opb = q->vo = 1;
        const int64_t chunk = q->threads * q->unroll * vec * q->tile;
        q->items = q->unroll;
        q->blocks = (fact(m, "total_max") + chunk - 1) / chunk;
    } else {
        q->opb = q->team <= q->threads ? q->threads / q->team : 1;
        q->vo = kind == KG_COLUMNS ? vec : 1;
        const int64_t per = q->split * q->team * (kind == KG_ROWS ? vec : 1);
        q->items = (fact(m, "red_max") + per - 1) / per;
        q->blocks = (fact(m, "outer_max") + q->opb * q->vo - 1) / (q->opb * q->vo) * q->split;
    }
    const int64_t held = q->cache && kind != KG_POINTWISE ? q->items : q->unroll * q->tile;
    const int64_t vec_words = (vec * fact(m, "in_bytes") + 3) / 4, loads = fact(m, "in_loads");
    q->words = (held * vec * fact(m, "in_bytes") + 3) / 4;
    q->reg_words = held * (vec_words > loads ? vec_words : loads);
    if (q->persist && q->blocks > q->persist * KG_SMS)
        q->blocks = q->persist * KG_SMS;
}

/* The registers a thread of point pt needs: its held vectors (each load's rounded up to whole
 * registers), ~48 of indices and temporaries, its states, and a fixed window's taps for each of its
 * UNROLL vectors (a sum's taps are all loaded before its first add: emit.c); the CUDA driver draws
 * KG_MINB from it. Without the taps a 7x7 depthwise convolution at 128 threads spilled. */
static int64_t point_registers(const kiln_match *m, const int64_t *pt) {
    point_info q;
    info_of(m, pt, &q);
    return q.reg_words + 48 + 8 * q.vo * q.steps + q.unroll * fact(m, "window_taps") +
           (q.tile > 1 ? q.unroll * q.tile * q.vec : 0); /* the tile's sums */
}

static const char *gen_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    point_info q;
    info_of(m, pt, &q);
    const int64_t kind = fact(m, "kind"), vgcd = fact(m, "vgcd");
    if (q.vec < 1)
        return "VBYTES is less than one element of the widest operand";
    if (q.vec > 1 && (vgcd == 0 || vgcd % q.vec))
        return "VEC must divide the vector axis in every workload";
    /* what else a thread holds: ~48 registers of indices and temporaries, and its states */
    if (q.words > KG_MAX_WORDS || q.words + 48 + 8 * q.vo * q.steps > 65536 / q.threads)
        return "the loads a thread holds exceed the register budget (64 words, and room for its "
               "states and indices in the block's share)";
    if (q.tile > 1 && (kind != KG_POINTWISE || q.vec < 2 || fact(m, "tile_min") < q.tile))
        return "TILE > 1 needs vectors (VEC > 1) and a channels-last convolution's output axis of "
               "at least TILE";
    if (kind == KG_POINTWISE) {
        if (q.team != 1 || q.split != 1 || q.mode != 0 || !q.online || !q.cache)
            return "pointwise: the reduction parameters are at their first values";
        const int64_t chunk = q.threads * q.unroll * q.vec * q.tile;
        if (chunk > fact(m, "total_max") && q.threads > 64)
            return "one block covers the whole output: THREADS beyond 64 only idle";
        if (q.persist && q.persist * KG_SMS >= (fact(m, "total_max") + chunk - 1) / chunk)
            return "a persistent grid that never caps is the exact grid (PERSIST 0)";
        return NULL;
    }
    const int64_t red = fact(m, "red_max"), outer = fact(m, "outer_max");
    if (q.team > q.threads)
        return "TEAM is larger than the block";
    if (!fact(m, "pairs") && !q.online)
        return "ONLINE 0 is ONLINE 1 here: no softmax pair or Welford reduction";
    if (q.split == 1 && q.mode != 0)
        return "SPLITMODE applies to split reductions only";
    if (kind == KG_ROWS && q.team > 1 && q.team * q.vec > 2 * red)
        return "over half of the team has no element";
    if (kind == KG_COLUMNS && q.team > 1 && q.team > 2 * red)
        return "over half of the team has no element";
    if (q.opb > 1 && q.opb * q.vo > 2 * outer)
        return "over half of the block's outer points do not exist";
    if (q.split > 1 && q.split * q.team * (kind == KG_ROWS ? q.vec : 1) > red)
        return "a split that leaves blocks without elements";
    if (q.split > 1 && q.mode == 0 && q.split > 16)
        return "a cluster of more than 16 blocks";
    if (q.split > 1 && q.mode == 1 && (q.phases > 1 || fact(m, "full_out")))
        return "partials in scratch need one pass and no output along the reduced axes";
    if (q.cache && q.unroll != 2)
        return "UNROLL does not apply when the slice is kept (every load is issued at once)";
    if (!q.cache && q.phases + fact(m, "full_out") <= 1 && q.items <= q.unroll)
        return "CACHE 0 is CACHE 1 here: one pass whose loads all fit in flight";
    if (q.threads * q.vo * fact(m, "state_bytes") > KG_MAX_SMEM)
        return "the team exchange exceeds 48 KiB of shared memory";
    if (q.persist) {
        const int64_t need = (outer + q.opb * q.vo - 1) / (q.opb * q.vo) * q.split;
        if (q.persist * KG_SMS >= need)
            return "a persistent grid that never caps is the exact grid (PERSIST 0)";
        if (q.split > 1 && q.mode == 1)
            return "a persistent grid with partials in scratch";
    }
    return NULL;
}

/* ---- the roofline model and the start point ---- */

/* Estimated seconds of point pt on the largest workload the facts keep: the larger of the memory
 * roof (bytes over the bandwidth that the bytes in flight sustain) and the issue roof (a few
 * instructions per element, and an address per vector), plus the exchanges of the reduction
 * passes and the launch. */
static double model_time(const kiln_match *m, const int64_t *pt, double bytes) {
    point_info q;
    info_of(m, pt, &q);
    const int64_t kind = fact(m, "kind");
    double work = 1; /* the share of threads that have elements */
    if (kind == KG_ROWS)
        work = fmin(1, (double)fact(m, "red_max") / (double)(q.split * q.team * q.vec));
    else if (kind == KG_COLUMNS)
        work = fmin(1, (double)fact(m, "red_max") / (double)(q.split * q.team));
    const double regs = 32 + 1.5 * (double)q.words;
    const double per_sm_threads = fmin(2048, fmin(32.0 * (double)q.threads, 65536 / regs));
    const double blocks_per_sm = fmax(1, floor(per_sm_threads / (double)q.threads));
    const double resident = fmin((double)q.blocks, KG_SMS * blocks_per_sm) * (double)q.threads;
    const double held =
        q.cache && kind != KG_POINTWISE ? (double)q.items : fmin((double)q.unroll, (double)q.items);
    /* a warp request under 128 bytes takes a miss slot for less: it covers less of the latency
     * (a warp reads one segment of TEAM threads in rows, of OPB threads in columns) */
    const double lanes = kind == KG_ROWS      ? fmin(32, (double)q.team)
                         : kind == KG_COLUMNS ? fmin(32, (double)q.opb)
                                              : 32;
    const double request = fmin(1, lanes * (double)(q.vec * fact(m, "esize")) / 128);
    const double inflight =
        resident * work * held * (double)(q.vec * fact(m, "in_bytes")) * request;
    double bw = KG_BW * fmin(1, fmax(inflight, 1) / (KG_SMS * KG_INFLIGHT_SM));
    const double warps = fmin(64, resident / KG_SMS / 32); /* resident warps per SM */
    /* too few warps to overlap loads, math and stores; a pooling window's taps are gathers behind
     * their own bounds checks, which only more warps hide: on the H200 max_pool2d 3x3/2 took
     * 132 us with a persistent grid of 512 threads a block (16 warps an SM) against 57 us with
     * a block per 512 outputs */
    const double want = fact(m, "windows") ? 48 : 16;
    if (warps < want)
        bw *= 0.5 + 0.5 * warps / want;
    /* a block that reads its slice, then writes it, overlaps only with other blocks on its SM */
    if (kind != KG_POINTWISE && fact(m, "full_out") && blocks_per_sm < 2)
        bw *= 0.75;
    /* and a persistent one starts its next group's loads only after its stores, where the block
     * scheduler starts a fresh block at once: on the H200 persistent grids of such reductions were
     * 6-9 % slower than a block per group (RMSNorm over channels 151 vs 138 us, the causal-mask
     * chain 324 vs 305 us) */
    if (kind != KG_POINTWISE && fact(m, "full_out") && q.persist)
        bw *= 0.92;
    /* every persistent grid measured on a pooling window was slower than a block per chunk (the
     * fastest of 8 and 10 points was PERSIST 0 in both sweeps of 2026-12-04) */
    if (fact(m, "windows") && q.persist)
        bw *= 0.92;
    /* a thread's VEC adjacent windows are VEC times the gathers behind their own checks: on the
     * H200 max_pool2d 3x3/2 fp32 took 49-53 us at VEC 2, 55-58 at VEC 1 and 78-85 at VEC 4
     * (18 points, 2026-12-04). A sum's taps are read clamped, without checks, and adjacent
     * windows along the vector axis share them: on the H100 a 3x3 depthwise conv bf16
     * [32,144,56,56] was best at VEC 4 (41.3 us), 44.5 at VEC 8 and 56.4 at VEC 2 (385 points,
     * 2026-12-06). Max pooling read clamped stays best at VEC 1 or 2: on the H100 53.2, 53.4 and
     * 60.3 us at VEC 1, 2 and 4 (285 points, 2026-12-07) */
    if (fact(m, "window_narrow") && q.vec > 2)
        bw *= 0.65;
    double moved = bytes;
    /* a streaming plan with early outputs (plan_early) stores them in its first pass: its last pass
     * reads them back instead of the inputs (1), or is not needed (2) */
    const int64_t early = q.cache ? 0 : fact(m, "early_reread");
    const double full_pass = early == 2 ? 0 : (double)fact(m, "full_out");
    if (kind != KG_POINTWISE && !q.cache) { /* the reduced inputs are read once per pass */
        const double passes = (double)q.phases + full_pass;
        const double slice = (double)fact(m, "red_max") * (double)fact(m, "outer_max");
        moved += (passes - 1) * slice * (double)fact(m, "in_bytes");
        if (early == 1)
            moved -= slice * (double)(fact(m, "in_bytes") - fact(m, "early_bytes"));
    }
    const double elements = kind == KG_POINTWISE
                                ? (double)fact(m, "total_max")
                                : (double)fact(m, "red_max") * (double)fact(m, "outer_max");
    /* The issue roof: ~4 instructions of math per element and pass, ~12 per vector access (its
     * int64 offset, the load or store, the lanes' moves) for every streamed operand in every pass
     * that reads it; the loads and the math do not overlap perfectly, so a quarter of the smaller
     * roof adds to the larger. At VEC 1 this is what makes a bf16 stream instruction-bound: it was
     * a tie with 16-byte vectors, and the start took 2-byte loads (RMSNorm over channels). */
    const double out_passes = kind == KG_POINTWISE ? 1 : (double)q.phases + full_pass;
    const double load_passes = kind == KG_POINTWISE || q.cache ? 1 : out_passes;
    const double accesses = (double)fact(m, "streams") * load_passes;
    double issue =
        elements * (4 * out_passes + 12 * accesses / (double)q.vec) / (KG_SMS * 128 * 1.98e9);
    /* a window summed a vector a tap: per element and tap an FMA and a select, the lane's convert,
     * and a vector's ~7 instructions of address, clamp and loads over VEC lanes; the last two
     * once for the taps that TILE neighbours share */
    if (fact(m, "lane_taps")) {
        const double k = (double)fact(m, "tile_kernel"),
                     share = (k + (double)q.tile - 1) / (k * (double)q.tile);
        const double w = (double)fact(m, "tile_min"), /* positions past the axis, computed too */
            ragged = q.tile > 1 ? ceil(w / (double)q.tile) * (double)q.tile / w : 1;
        issue += elements * ragged * (double)fact(m, "lane_taps") *
                 (2 + (1 + 7 / (double)q.vec) * share) / (KG_SMS * 128 * 1.98e9);
    }
    const double mem = moved / bw;
    double t = fmax(mem, issue) + 0.25 * fmin(mem, issue) + KG_LAUNCH_S;
    if (kind != KG_POINTWISE) {
        /* the passes' exchanges, once per group a block slot works through */
        const double groups = (double)(fact(m, "outer_max") + q.opb * q.vo - 1) /
                              (double)(q.opb * q.vo) * (double)q.split;
        const double rounds = ceil(groups / (KG_SMS * blocks_per_sm));
        t += rounds * (double)q.phases *
             (log2((double)q.team + 1) * 20e-9 + (q.split > 1 ? (q.mode ? 1.5e-6 : 0.4e-6) : 0));
        if (q.split > 1 && q.mode == 1)
            t += 1e-6;
    }
    if (!q.persist) /* block scheduling, per wave */
        t += ceil((double)q.blocks / (KG_SMS * blocks_per_sm)) * 50e-9;
    /* every block first copies the staged tensors (kg_stage_plan), the transposed copy reading an
     * element a line: ~0.5 SM cycles an element. (A [192, 1, 7, 7] weight copied by each of 37632
     * blocks of 64 threads took 2.7 ms on the H100 when the copy's shared-memory writes were the
     * scattered side, 2026-12-06; the reads are now, not timed alone. Persistent grids and large
     * blocks were the fastest points of that sweep either way.) */
    if (fact(m, "stage_bytes"))
        t += (double)q.blocks * (double)fact(m, "stage_bytes") / (double)fact(m, "esize") * 0.5 /
             (KG_SMS * 1.98e9);
    return t;
}

static double gen_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);

static int gen_start(const kiln_problem *p, const kiln_match *m, int64_t *point) {
    const double bytes = gen_min_bytes(p, m, &p->workloads[0]);
    const kiln_family *f = &kiln_family_gen;
    const int64_t size = kiln_family_space_size(f);
    double best = INFINITY;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    for (int64_t i = 0; i < size; i++) {
        kiln_family_point(f, i, pt);
        if (gen_check(p, m, pt))
            continue;
        const double t = model_time(m, pt, bytes);
        if (t < best * (1 - 1e-9)) {
            best = t;
            memcpy(point, pt, sizeof pt);
        }
    }
    return isinf(best) ? -1 : 0;
}

/* ---- costs, emission, tolerance ---- */

static double gen_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    if (p->min_bytes >= 0)
        return p->min_bytes;
    kir *ir;
    char why[256];
    if (!kir_lower(p, &ir, why, sizeof why))
        return kiln_problem_min_bytes(p, w);
    double b = kir_bytes(ir, (int)(w - p->workloads));
    kir_free(ir);
    return b;
}

static double gen_flops(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    kir *ir;
    char why[256];
    if (!kir_lower(p, &ir, why, sizeof why))
        return 0;
    double f = kir_flops(ir, (int)(w - p->workloads));
    kir_free(ir);
    return f;
}

static char *gen_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    kg_plan plan;
    char why[256];
    int ok = kg_plan_make(p, cuda ? (int)pt[P_ONLINE] : 0, &plan, why, sizeof why);
    KILN_ASSERT(ok); /* emit is only called on what match accepted */
    const kiln_family *f = &kiln_family_gen;
    char *src = cuda ? kg_emit_cuda(f, p, m, pt, &plan, point_registers(m, pt))
                     : kg_emit_cpu(f, p, m, &plan);
    kg_plan_free(&plan);
    return src;
}

static kiln_tolerance gen_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_gen = {
    .name = "gen",
    .summary = "the tensor-expression generator: pointwise chains, reductions over any axes, "
               "windows; the schedule is the space",
    .n_params = P_COUNT,
    .params =
        {
            [P_THREADS] = {"KG_THREADS", 5, {256, 128, 512, 1024, 64}, "threads per block"},
            [P_VBYTES] = {"KG_VBYTES",
                          5,
                          {16, 8, 4, 2, 1},
                          "bytes per access of the widest streamed operand (VEC = VBYTES / its "
                          "element size; a reduction's operand along the reduced axes alone does "
                          "not count)"},
            [P_UNROLL] = {"KG_UNROLL", 4, {2, 4, 1, 8}, "vectors per thread in flight"},
            [P_TEAM] = {"KG_TEAM",
                        11,
                        {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
                        "reductions: threads per outer point"},
            [P_SPLIT] = {"KG_SPLIT", 5, {1, 2, 4, 8, 16}, "reductions: blocks per outer point"},
            [P_SPLITMODE] = {"KG_SPLITMODE",
                             2,
                             {0, 1},
                             "split reductions: 0 a cluster exchanging partials through DSMEM, 1 "
                             "partials in scratch combined by the last block"},
            [P_ONLINE] = {"KG_ONLINE",
                          2,
                          {1, 0},
                          "softmax pair and Welford: 1 one pass (online), 0 two passes"},
            [P_CACHE] = {"KG_CACHE",
                         2,
                         {1, 0},
                         "1: a thread keeps its slice of the reduced inputs in registers"},
            [P_PERSIST] = {"KG_PERSIST",
                           5,
                           {0, 1, 2, 4, 8},
                           "0: a block per work item; k: at most k x 132 blocks, looping"},
            [P_TILE] = {"KG_TILE",
                        4,
                        {1, 2, 4, 8},
                        "channels-last windows: consecutive outputs a thread computes along the "
                        "axis outside the channels, sharing their taps"},
        },
    .match = gen_match,
    .check = gen_check,
    .emit = gen_emit,
    .min_bytes = gen_min_bytes,
    .flops = gen_flops,
    .tolerance = gen_tolerance,
    .start = gen_start,
};
