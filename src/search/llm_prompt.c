/* llm_prompt.c: what the llm agent tells the model: the context of a node read from the store (its
 * source and verdict, the evidence of its failed children, the replies for it that held no kernel,
 * the device and its ceilings) and the prompt built from it (problem, signature, workloads, device,
 * node, feedback, the ABI of docs/abi.md, the answer's form).
 *
 * The ABI text is read at run time from kiln_home()/docs/abi.md, the same file people read, so
 * that the model and the documentation cannot drift apart; a kiln installed without its docs/
 * falls back to a summary compiled in below. */
#include <string.h>

#include <cjson/cJSON.h>

#include "../backend/abi.h"
#include "../gate/gate.h"
#include "llm_impl.h"

#define LLM_LOG_TAIL 2500               /* bytes of a compile log shown to the model */
#define LLM_SOURCE_MAX (64 * 1024)      /* bytes of the node's source shown to the model */
#define LLM_CHILD_SOURCE_MAX (8 * 1024) /* of the most recent failed child's source */
#define FENCE_MAX "````````````````````````````````````````````````````````````````"

/* ---------------------------------------------------------------------------------------------
 * The context from the store.
 * --------------------------------------------------------------------------------------------- */

/* What kiln_llm_context_load owns. */
typedef struct {
    char *strings[256];
    int n_strings;
    kiln_llm_feedback *feedback;
    int device_from_store; /* the device fields were filled from the store (and are reset) */
} ctx_owned;

static const char *own(ctx_owned *o, char *s) {
    if (!s)
        return NULL;
    if (o->n_strings == (int)(sizeof o->strings / sizeof o->strings[0])) {
        free(s);
        return "";
    }
    o->strings[o->n_strings++] = s;
    return s;
}

/* The last LLM_LOG_TAIL bytes of a log, from a line start. */
static void add_log_tail(llm_buf *b, const char *log) {
    size_t n = strlen(log);
    const char *s = log;
    if (n > LLM_LOG_TAIL) {
        s = log + n - LLM_LOG_TAIL;
        const char *nl = strchr(s, '\n');
        if (nl && nl[1])
            s = nl + 1;
        llm_buf_puts(b, "[...]\n");
    }
    llm_buf_puts(b, s);
    if (n && log[n - 1] != '\n')
        llm_buf_puts(b, "\n");
}

/* The length of a backtick fence that text cannot close: longer than any backtick run in it. */
static int fence_len(const char *text) {
    int longest = 0, run = 0;
    for (const char *q = text; *q; q++) {
        run = *q == '`' ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    return longest >= 3 ? longest + 1 : 3;
}

/* A gate verdict in words, for the model: the evidence fields of docs/gate.md. */
static char *describe_result(const char *outcome, const char *result_json,
                             const char *compile_log) {
    llm_buf b = {0};
    cJSON *r = result_json ? cJSON_Parse(result_json) : NULL;
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "evidence");
    const cJSON *wi = cJSON_GetObjectItemCaseSensitive(ev, "workload_index");
    if (cJSON_IsNumber(wi)) {
        const cJSON *ws = cJSON_GetObjectItemCaseSensitive(r, "workloads");
        const cJSON *w = cJSON_GetArrayItem(ws, wi->valueint);
        const cJSON *axes = cJSON_GetObjectItemCaseSensitive(w, "axes");
        char *a = axes ? cJSON_PrintUnformatted(axes) : NULL;
        llm_buf_printf(&b, "in workload %d%s%s\n", wi->valueint, a ? " with axes " : "",
                       a ? a : "");
        free(a);
    }
    const cJSON *item;
    const cJSON *log = cJSON_GetObjectItemCaseSensitive(ev, "log");
    cJSON_ArrayForEach(item, ev) {
        if (!item->string || strcmp(item->string, "log") == 0 ||
            strcmp(item->string, "workload") == 0 || strcmp(item->string, "workload_index") == 0)
            continue;
        if (cJSON_IsString(item)) {
            llm_buf_printf(&b, "%s: %.1500s\n", item->string, item->valuestring);
        } else {
            char *v = cJSON_PrintUnformatted(item);
            llm_buf_printf(&b, "%s: %.1500s\n", item->string, v ? v : "?");
            free(v);
        }
    }
    const char *log_text = cJSON_IsString(log) ? log->valuestring : compile_log;
    if (log_text && *log_text) {
        llm_buf_puts(&b, "compiler output (tail):\n");
        add_log_tail(&b, log_text);
    }
    if (!b.n)
        llm_buf_printf(&b, "outcome %s (no further evidence)\n", outcome ? outcome : "?");
    cJSON_Delete(r);
    return llm_buf_take(&b);
}

/* The device fields the caller left unset, from a result's "device" object. */
static void device_from(kiln_llm_context *ctx, ctx_owned *o, const char *device_json) {
    cJSON *d = device_json ? cJSON_Parse(device_json) : NULL;
    const cJSON *v;
    if (!ctx->device_name && cJSON_IsString(v = cJSON_GetObjectItem(d, "name"))) {
        ctx->device_name = own(o, llm_utf8_clean(v->valuestring, strlen(v->valuestring)));
        o->device_from_store = 1;
    }
    if (ctx->n_sms <= 0 && cJSON_IsNumber(v = cJSON_GetObjectItem(d, "sms")))
        ctx->n_sms = v->valueint;
    if (ctx->l2_bytes <= 0 && cJSON_IsNumber(v = cJSON_GetObjectItem(d, "l2_bytes")))
        ctx->l2_bytes = v->valuedouble;
    if (ctx->ceiling_gbps <= 0 && cJSON_IsNumber(v = cJSON_GetObjectItem(d, "ceiling_gbps")))
        ctx->ceiling_gbps = v->valuedouble;
    if (ctx->ceiling_gflops <= 0 && cJSON_IsNumber(v = cJSON_GetObjectItem(d, "ceiling_gflops"))) {
        ctx->ceiling_gflops = v->valuedouble;
        if (!ctx->ceiling_gflops_of &&
            cJSON_IsString(v = cJSON_GetObjectItem(d, "ceiling_gflops_of")))
            ctx->ceiling_gflops_of = own(o, llm_utf8_clean(v->valuestring, strlen(v->valuestring)));
    }
    cJSON_Delete(d);
}

/* One failure below the node in words: a reply without a kernel, or a verdict with its evidence
 * (and, for the most recent failure whose source is short, the source its log refers to). */
static char *describe_failure(const kiln_store_failure *f, int *with_source) {
    if (!f->candidate_id)
        return xasprintf("your reply held no kernel: %s\n", f->reason ? f->reason : "?");
    char *d = describe_result(f->outcome, f->result_json, f->compile_log);
    if (!*with_source && f->source && strlen(f->source) <= LLM_CHILD_SOURCE_MAX) {
        int fl = fence_len(f->source);
        char *t = xasprintf("%sits source was:\n%.*s\n%s\n%.*s\n", d, fl, FENCE_MAX, f->source, fl,
                            FENCE_MAX);
        free(d);
        d = t;
        *with_source = 1;
    }
    return d;
}

int kiln_llm_context_load(kiln_store *s, int64_t problem_id, int64_t node_candidate_id,
                          int max_feedback, kiln_llm_context *ctx, kiln_err *err) {
    KILN_ASSERT(s && ctx);
    if (ctx->owned && ((ctx_owned *)ctx->owned)->device_from_store) {
        ctx->device_name = NULL;
        ctx->cc_major = ctx->cc_minor = ctx->n_sms = 0;
        ctx->l2_bytes = ctx->ceiling_gbps = ctx->ceiling_gflops = 0;
        ctx->ceiling_gflops_of = NULL;
    }
    kiln_llm_context_clear(ctx);
    ctx_owned *o = xcalloc(1, sizeof *o);
    ctx->owned = o;
    ctx->node_candidate_id = node_candidate_id;
    ctx->node_source = NULL;
    ctx->node_time_us = ctx->node_sol_pct = ctx->ref_time_us = ctx->best_time_us = -1;
    ctx->best_candidate_id = 0;
    ctx->n_feedback = 0;
    ctx->feedback = NULL;
    int rc = KILN_OK, found = 0;

    /* the node: its source and verdict */
    if (node_candidate_id > 0) {
        kiln_store_candidate_row c;
        if ((rc = kiln_store_candidate_get(s, node_candidate_id, &c, &found, err)))
            return rc;
        if (!found || c.problem_id != problem_id) {
            kiln_store_candidate_row_free(&c);
            return kiln_errf(err, KILN_ERR_INVALID, "%s: candidate %lld is not one of problem %lld",
                             kiln_store_path(s), (long long)node_candidate_id,
                             (long long)problem_id);
        }
        ctx->node_source = own(o, c.source);
        c.source = NULL;
        kiln_store_candidate_row_free(&c);
        kiln_store_result_row r;
        if ((rc = kiln_store_result_latest(s, node_candidate_id, &r, &found, err)))
            return rc;
        if (found) {
            ctx->node_time_us = r.time_us;
            ctx->node_sol_pct = r.sol_pct;
        }
        kiln_store_result_row_free(&r);
    }

    /* the reference's time, and the incumbent when its verdict is ok */
    kiln_store_problem_row p;
    if ((rc = kiln_store_problem_get(s, problem_id, &p, &found, err)))
        return rc;
    if (found) {
        ctx->ref_time_us = p.eager_us;
        kiln_store_result_row r;
        int have = 0;
        if (p.incumbent_id > 0 &&
            (rc = kiln_store_result_latest(s, p.incumbent_id, &r, &have, err))) {
            kiln_store_problem_row_free(&p);
            return rc;
        }
        if (p.incumbent_id > 0 && have && strcmp(r.outcome, "ok") == 0 && r.time_us > 0) {
            ctx->best_candidate_id = p.incumbent_id;
            ctx->best_time_us = r.time_us;
        }
        if (p.incumbent_id > 0)
            kiln_store_result_row_free(&r);
    }
    kiln_store_problem_row_free(&p);

    /* the device, from the most recent verdict that names one (the problem's own first) */
    char *device = NULL;
    if ((rc = kiln_store_latest_device(s, problem_id, &device, err)))
        return rc;
    device_from(ctx, o, device);
    free(device);

    /* failed children, and replies for this node that held no kernel, most recent first */
    if (max_feedback > 0) {
        kiln_store_failure *fs = NULL;
        int n = 0, with_source = 0;
        if ((rc = kiln_store_llm_failures(s, problem_id, node_candidate_id, max_feedback, &fs, &n,
                                          err)))
            return rc;
        o->feedback = xcalloc((size_t)max_feedback, sizeof *o->feedback);
        for (int i = 0; i < n; i++) {
            kiln_llm_feedback *f = &o->feedback[i];
            f->candidate_id = fs[i].candidate_id;
            f->outcome = own(o, fs[i].outcome);
            fs[i].outcome = NULL;
            f->detail = own(o, describe_failure(&fs[i], &with_source));
            kiln_store_failure_free(&fs[i]);
        }
        free(fs);
        ctx->feedback = o->feedback;
        ctx->n_feedback = n;
    }
    return KILN_OK;
}

void kiln_llm_context_clear(kiln_llm_context *ctx) {
    if (!ctx || !ctx->owned)
        return;
    ctx_owned *o = ctx->owned;
    for (int i = 0; i < o->n_strings; i++)
        free(o->strings[i]);
    free(o->feedback);
    free(o);
    ctx->owned = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The prompt.
 * --------------------------------------------------------------------------------------------- */

static const char system_prompt[] =
    "You are an expert GPU kernel engineer working inside kiln, an autonomous kernel optimiser. "
    "You write one candidate kernel at a time for one problem. kiln compiles it, proves it on "
    "every workload against the PyTorch reference (outputs are poisoned first; every element must "
    "be written and within tolerance), and only then times it against the speed of light. Answer "
    "with exactly one fenced code block that holds the whole candidate file, including its "
    "`// kiln: launch` lines; keep any explanation short and outside the block.";

static const char abi_fallback[] =
    "(docs/abi.md was not found beside this kiln; the essentials:)\n"
    "- Parameters of every entry point, in order: inputs (tensors as `const T*`, scalars by "
    "value), "
    "outputs (`T*`), every axis as `int64_t`, then `void* kiln_scratch` if `// kiln: scratch "
    "BYTES` is declared.\n"
    "- Tensors are dense, contiguous, row-major; outputs arrive filled with NaN poison and every "
    "element must be written; inputs must not be written.\n"
    "- CUDA: `extern \"C\" __global__ void NAME(...)`, and one line per launch: `// kiln: launch "
    "NAME grid=EXPR block=EXPR [smem=BYTES] [cluster=EXPR]` where EXPR is an integer expression "
    "over the axis names (+ - * / % min max ceil_div; / is floor division; tuples as (x, y)).\n"
    "- CPU: a plain C function `void NAME(...)` (not static), `// kiln: launch NAME`; "
    "kiln_cpu.h, stdint.h, stdbool.h, math.h and omp.h are included; parallelise with OpenMP.\n"
    "- No state from call to call: CUDA kernels may not use the device heap (declare scratch); "
    "CPU kernels may call only the math library, OpenMP, malloc/calloc/realloc/free (a heap "
    "emptied after every call), memcpy/memmove/memset/memcmp and printf.\n";

static const char *dtype_name(kiln_dtype t) {
    const char *n = kiln_dtype_name(t);
    return n ? n : "?";
}

static void add_tensor(llm_buf *b, const kiln_problem *p, const kiln_tensor_spec *t) {
    llm_buf_printf(b, "- `%s`: %s", t->name, dtype_name(t->dtype));
    if (t->is_scalar) {
        llm_buf_puts(b, " scalar (passed by value)\n");
        return;
    }
    llm_buf_puts(b, " [");
    for (int d = 0; d < t->ndim; d++) {
        if (d)
            llm_buf_puts(b, ", ");
        if (t->axis[d] >= 0)
            llm_buf_puts(b, p->axes[t->axis[d]].name);
        else
            llm_buf_printf(b, "%lld", (long long)t->literal[d]);
    }
    llm_buf_puts(b, "]\n");
}

static void add_fenced(llm_buf *b, const char *lang, const char *text, size_t max) {
    int fence = fence_len(text);
    for (int i = 0; i < fence; i++)
        llm_buf_puts(b, "`");
    llm_buf_printf(b, "%s\n", lang);
    size_t n = strlen(text);
    llm_buf_add(b, text, n > max ? max : n);
    if (n > max)
        llm_buf_printf(b, "\n[... %zu more bytes not shown]", n - max);
    if (n && text[n > max ? max - 1 : n - 1] != '\n')
        llm_buf_puts(b, "\n");
    for (int i = 0; i < fence; i++)
        llm_buf_puts(b, "`");
    llm_buf_puts(b, "\n");
}

static char *read_abi_doc(void) {
    char *path = xasprintf("%s/docs/abi.md", kiln_home());
    char *text = NULL;
    if (kiln_read_file(path, &text, NULL, NULL) != KILN_OK)
        text = NULL;
    free(path);
    return text;
}

char *kiln_llm_prompt(const kiln_llm_context *ctx) {
    KILN_ASSERT(ctx && ctx->problem);
    const kiln_problem *p = ctx->problem;
    int cuda = ctx->backend && strcmp(ctx->backend, "cuda") == 0;
    const char *lang = cuda ? "cuda" : "c";
    llm_buf b = {0};

    llm_buf_printf(&b, "# Problem `%s`", p->name);
    if (p->op_type)
        llm_buf_printf(&b, " (op_type %s)", p->op_type);
    llm_buf_puts(&b, "\n\nThe PyTorch reference; `run` computes the outputs from the inputs:\n");
    add_fenced(&b, "python", p->reference ? p->reference : "", 16384);
    llm_buf_puts(&b, "\nAxes:");
    for (int i = 0; i < p->n_axes; i++) {
        const kiln_axis *a = &p->axes[i];
        llm_buf_printf(&b, " `%s`", a->name);
        if (a->kind == KILN_AXIS_CONST)
            llm_buf_printf(&b, " = %lld (const)", (long long)a->value);
        else if (a->kind == KILN_AXIS_EXPR)
            llm_buf_printf(&b, " = %s (expr)", a->expression ? a->expression : "?");
        else
            llm_buf_puts(&b, " (var)");
        llm_buf_puts(&b, i + 1 < p->n_axes ? "," : "\n");
    }
    llm_buf_puts(&b, "\nInputs:\n");
    for (int i = 0; i < p->n_inputs; i++)
        add_tensor(&b, p, &p->inputs[i]);
    llm_buf_puts(&b, "Outputs:\n");
    for (int i = 0; i < p->n_outputs; i++) {
        add_tensor(&b, p, &p->outputs[i]);
        kiln_tolerance t = kiln_problem_output_tolerance(p, -1, i);
        llm_buf_printf(&b,
                       "  tolerance: |out - ref| <= %g + %g * |ref| elementwise, and relative L2 "
                       "error <= %g\n",
                       t.atol, t.rtol, t.rel_l2);
    }
    for (int i = 0; i < p->n_constraints; i++)
        llm_buf_printf(&b, "Constraint: `%s`\n", p->constraints[i]);

    kiln_signature sig;
    kiln_abi_signature(p, 0, cuda, &sig);
    char *proto = kiln_abi_prototype(&sig, "NAME", cuda);
    llm_buf_puts(&b, "\nEvery entry point takes exactly these parameters, in this order:\n");
    add_fenced(&b, lang, proto, 4096);
    free(proto);

    llm_buf_printf(&b, "\nWorkloads (%d; the kernel must be right on all and is timed on all)",
                   p->n_workloads);
    if (ctx->ceiling_gbps > 0)
        llm_buf_puts(&b, ", with the minimum bytes each must move and its speed-of-light time");
    llm_buf_puts(&b, ":\n");
    int shown = p->n_workloads < 16 ? p->n_workloads : 16;
    for (int w = 0; w < shown; w++) {
        llm_buf_puts(&b, "-");
        for (int i = 0; i < p->n_axes; i++)
            llm_buf_printf(&b, " %s=%lld", p->axes[i].name,
                           (long long)p->workloads[w].axis_values[i]);
        double bytes = kiln_problem_min_bytes(p, &p->workloads[w]);
        double flops = kiln_problem_flops(p, &p->workloads[w]);
        if (bytes > 0 && ctx->ceiling_gbps > 0) {
            /* the gate's T_sol, with the ceilings the gate reported for this problem (its
             * ceiling_gflops is already the one p's flops take) */
            kiln_ceilings c = {.copy_gbps = ctx->ceiling_gbps, .fma_gflops = ctx->ceiling_gflops};
            double sol_us = kiln_sol_time_us(&c, p, bytes, flops);
            llm_buf_printf(&b, ": %.0f bytes", bytes);
            if (flops > 0)
                llm_buf_printf(&b, ", %.0f flops", flops);
            llm_buf_printf(&b, ", speed of light %.3g us", sol_us);
        }
        llm_buf_puts(&b, "\n");
    }
    if (shown < p->n_workloads)
        llm_buf_printf(&b, "- ... and %d more\n", p->n_workloads - shown);

    llm_buf_puts(&b, "\n# Target\n\n");
    if (cuda)
        llm_buf_puts(&b,
                     "CUDA C++ compiled at run time by NVRTC for sm_90 (Hopper); launches on one "
                     "stream as the `// kiln: launch` lines say.\n");
    else
        llm_buf_puts(&b,
                     "C11 for the CPU, compiled by the system compiler with -O3 -march=native "
                     "-fopenmp; kiln calls the entry point on one thread: parallelise with OpenMP "
                     "inside it.\n");
    llm_buf_printf(&b, "Device: %s", ctx->device_name ? ctx->device_name : "(not measured yet)");
    if (ctx->cc_major > 0)
        llm_buf_printf(&b, ", compute capability %d.%d", ctx->cc_major, ctx->cc_minor);
    if (ctx->n_sms > 0)
        llm_buf_printf(&b, ", %d %s", ctx->n_sms, cuda ? "SMs" : "cores");
    if (ctx->l2_bytes > 0)
        llm_buf_printf(&b, ", last-level cache %.0f MiB", ctx->l2_bytes / 1048576.0);
    llm_buf_puts(&b, ".\n");
    if (ctx->ceiling_gbps > 0 || ctx->ceiling_gflops > 0)
        llm_buf_printf(
            &b,
            "Ceilings: copy bandwidth %.1f GB/s (measured; bytes read + written), flops %.1f "
            "GFLOP/s (%s). Speed of light = max(bytes / bandwidth, flops / peak); SOL %% = "
            "100 * T_sol / T.\n",
            ctx->ceiling_gbps, ctx->ceiling_gflops,
            ctx->ceiling_gflops_of ? ctx->ceiling_gflops_of : "fp32 FMA (measured)");
    if (ctx->ref_time_us > 0)
        llm_buf_printf(&b, "PyTorch eager takes %.3f us (geomean over the workloads).\n",
                       ctx->ref_time_us);

    if (ctx->node_source) {
        llm_buf_printf(&b, "\n# The current kernel (candidate %lld)\n\n",
                       (long long)ctx->node_candidate_id);
        if (ctx->node_time_us > 0)
            llm_buf_printf(&b, "It is correct and takes %.3f us (geomean over the workloads)",
                           ctx->node_time_us);
        else
            llm_buf_puts(&b, "It has no time (it did not pass the gate)");
        if (ctx->node_sol_pct > 0)
            llm_buf_printf(&b, ", %.3g%% of the speed of light", ctx->node_sol_pct);
        llm_buf_puts(&b, ".\n");
        add_fenced(&b, lang, ctx->node_source, LLM_SOURCE_MAX);
        llm_buf_puts(&b,
                     "\nWrite a faster kernel for the same problem. It must stay correct on every "
                     "workload.\n");
    } else if (ctx->best_candidate_id > 0 && ctx->best_time_us > 0) {
        llm_buf_printf(&b,
                       "\n# Task\n\nThe fastest kernel for this problem so far (candidate %lld) "
                       "takes %.3f us. Write a new one from scratch, by another approach if you "
                       "can, that is correct and faster.\n",
                       (long long)ctx->best_candidate_id, ctx->best_time_us);
    } else {
        llm_buf_puts(
            &b, "\n# Task\n\nThere is no kernel for this problem yet. Write a correct and fast "
                "one.\n");
    }
    if (ctx->task && *ctx->task)
        llm_buf_printf(&b, "Direction: %s\n", ctx->task);

    if (ctx->n_feedback > 0) {
        llm_buf_printf(&b,
                       "\n# Earlier attempts from this point that failed (most recent first)\n\n"
                       "Do not repeat these mistakes.\n");
        for (int i = 0; i < ctx->n_feedback; i++) {
            const kiln_llm_feedback *f = &ctx->feedback[i];
            if (f->candidate_id > 0)
                llm_buf_printf(&b, "\n## Candidate %lld: %s\n", (long long)f->candidate_id,
                               f->outcome ? f->outcome : "?");
            else
                llm_buf_printf(&b, "\n## A reply: %s\n", f->outcome ? f->outcome : "?");
            if (f->detail)
                llm_buf_puts(&b, f->detail);
        }
    }

    llm_buf_puts(&b, "\n# The contract (kiln's docs/abi.md)\n\n");
    char *abi = read_abi_doc();
    llm_buf_puts(&b, abi ? abi : abi_fallback);
    free(abi);

    llm_buf_printf(
        &b,
        "\n# Your answer\n\nExactly one fenced code block, ```%s, holding the whole %s file "
        "with its `// kiln: launch` line(s) and entry point(s) as the ABI above says. Nothing "
        "else is compiled.\n",
        lang, cuda ? "CUDA" : "C");
    return llm_buf_take(&b);
}

const char *llm_system_prompt(void) {
    return system_prompt;
}
