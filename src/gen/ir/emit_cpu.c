/* emit_cpu.c: the generator's CPU driver: the plan as plain C with OpenMP for the cpu backend
 * (docs/abi.md) — a parallel loop over the domain (pointwise), or over the kept points with one
 * serial loop over the reduced axes per pass (reductions: double accumulators, pairs always in two
 * passes), the element code of emit.c inside. It ignores the schedule: every point gives this
 * source, so a sweep runs it once. */
#include "gen_impl.h"

#include <string.h>

/* Coordinates of the axes in list (outermost first) from the flat index `flat`. */
static void emit_coords(kiln_strbuf *b, kg_scope *s, const int *list, int n, const char *flat,
                        const char *indent) {
    const kir *ir = s->plan->ir;
    if (n == 0)
        return;
    if (n == 1) {
        snprintf(s->coord[list[0]], sizeof s->coord[0], "%s", flat);
        return;
    }
    kiln_strbuf_printf(b, "%sint64_t kg_t_%s = %s;\n", indent, flat, flat);
    for (int i = n - 1; i >= 0; i--) {
        int a = list[i];
        snprintf(s->coord[a], sizeof s->coord[a], "kg_c%d", a);
        if (i > 0)
            kiln_strbuf_printf(b, "%sconst int64_t kg_c%d = kg_t_%s %% (%s);\n%skg_t_%s /= (%s);\n",
                               indent, a, flat, ir->axes[a].size, indent, flat, ir->axes[a].size);
        else
            kiln_strbuf_printf(b, "%sconst int64_t kg_c%d = kg_t_%s;\n", indent, a, flat);
    }
    kiln_strbuf_printf(b, "%s(void)kg_t_%s;\n", indent, flat);
}

/* The accumulator of one pass: its declaration, and its update with value `val`. */
static void step_decl(kiln_strbuf *b, const kg_plan *plan, const kg_step *st, const char *in) {
    const kir_node *x = &plan->ir->nodes[st->node];
    const int n = st->node, is_int = kir_dtype_is_int(x->dtype);
    switch (x->op) {
    case KR_SUM:
    case KR_PROD:
        kiln_strbuf_printf(b, "%s%s ka%d = %d;\n", in, is_int ? "int64_t" : "double", n,
                           x->op == KR_PROD);
        break;
    case KR_MAX:
    case KR_MIN:
        if (is_int)
            kiln_strbuf_printf(b, "%sint64_t ka%d = %s;\n", in, n,
                               x->op == KR_MAX ? "INT64_MIN" : "INT64_MAX");
        else
            kiln_strbuf_printf(b, "%sfloat ka%d = %sINFINITY;\n", in, n,
                               x->op == KR_MAX ? "-" : "");
        break;
    case KR_ARGMAX:
    case KR_ARGMIN:
        kiln_strbuf_printf(b, "%sfloat ka%d = %sINFINITY;\n%sint64_t ki%d = 0;\n", in, n,
                           x->op == KR_ARGMAX ? "-" : "", in, n);
        break;
    case KR_SOFTMAX:
        if (st->pass == 0)
            kiln_strbuf_printf(b, "%sfloat ka%d = -INFINITY;\n", in, n);
        else if (x->k[0]) /* logsumexp's exponent is against the max with infinities as 0 */
            kiln_strbuf_printf(b,
                               "%sdouble ks%d = 0;\n%sconst float km%d = kg_isinf(ka%d) ? 0.f : "
                               "ka%d;\n",
                               in, n, in, n, n, n);
        else
            kiln_strbuf_printf(b, "%sdouble ks%d = 0;\n%sconst float km%d = ka%d;\n", in, n, in, n,
                               n);
        break;
    case KR_WELFORD:
        if (st->pass == 0)
            kiln_strbuf_printf(b, "%sdouble ka%d = 0;\n", in, n);
        else
            kiln_strbuf_printf(b,
                               "%sdouble ks%d = 0;\n%sconst double km%d = ka%d / (double)(%s);\n",
                               in, n, in, n, n, plan->red_len);
        break;
    default:
        KILN_ASSERT(!"a reduction the CPU driver does not know");
    }
}

static void step_update(kiln_strbuf *b, const kg_plan *plan, const kg_step *st, const char *val,
                        kg_scope *s, const char *in) {
    const kir_node *x = &plan->ir->nodes[st->node];
    const int n = st->node;
    switch (x->op) {
    case KR_SUM:
        kiln_strbuf_printf(b, "%ska%d += %s;\n", in, n, val);
        break;
    case KR_PROD:
        kiln_strbuf_printf(b, "%ska%d *= %s;\n", in, n, val);
        break;
    case KR_MAX:
        kiln_strbuf_printf(b, "%ska%d = kg_max(ka%d, %s);\n", in, n, n, val);
        break;
    case KR_MIN:
        kiln_strbuf_printf(b, "%ska%d = kg_min(ka%d, %s);\n", in, n, n, val);
        break;
    case KR_ARGMAX:
    case KR_ARGMIN: {
        char idx[512];
        kg_offset(s, x->acc, idx, sizeof idx);
        kiln_strbuf_printf(b,
                           "%sif (%s %s ka%d || (%s != %s && ka%d == ka%d)) {\n%s    ka%d = %s;\n"
                           "%s    ki%d = %s;\n%s}\n",
                           in, val, x->op == KR_ARGMAX ? ">" : "<", n, val, val, n, n, in, n, val,
                           in, n, idx, in);
        break;
    }
    case KR_SOFTMAX:
        if (st->pass == 0)
            kiln_strbuf_printf(b, "%ska%d = kg_max(ka%d, %s);\n", in, n, n, val);
        else
            kiln_strbuf_printf(b, "%sks%d += expf(%s - km%d);\n", in, n, val, n);
        break;
    case KR_WELFORD:
        if (st->pass == 0)
            kiln_strbuf_printf(b, "%ska%d += %s;\n", in, n, val);
        else
            kiln_strbuf_printf(b, "%sks%d += (%s - km%d) * (%s - km%d);\n", in, n, val, n, val, n);
        break;
    }
}

/* After the last pass of a reduction: its results, rounded to their dtypes, named in s. */
static void step_finish(kiln_strbuf *b, const kg_plan *plan, const kg_step *st, kg_scope *s,
                        const char *in) {
    const kir_node *x = &plan->ir->nodes[st->node];
    const int n = st->node;
    const int two = (x->op == KR_SOFTMAX || x->op == KR_WELFORD);
    if (two && st->pass == 0)
        return; /* the second pass reads the accumulator itself */
    const char *t = kg_ctype(x->dtype);
    if (x->op == KR_WELFORD)
        kiln_strbuf_printf(b,
                           "%sconst float kr%d = (float)km%d;\n%sconst float kr%d_1 = "
                           "(float)ks%d;\n",
                           in, n, n, in, n, n);
    else if (x->op == KR_SOFTMAX)
        kiln_strbuf_printf(b, "%sconst float kr%d = ka%d;\n%sconst float kr%d_1 = (float)ks%d;\n",
                           in, n, n, in, n, n);
    else if (x->op == KR_ARGMAX || x->op == KR_ARGMIN)
        kiln_strbuf_printf(b, "%sconst float kr%d = ka%d;\n%sconst int64_t kr%d_1 = ki%d;\n", in, n,
                           n, in, n, n);
    else if (x->dtype == KILN_BF16 || x->dtype == KILN_F16)
        kiln_strbuf_printf(b, "%sconst float kr%d = kg_round_%s((float)ka%d);\n", in, n,
                           x->dtype == KILN_BF16 ? "bf16" : "f16", n);
    else
        kiln_strbuf_printf(b, "%sconst %s kr%d = (%s)ka%d;\n", in, t, n, t, n);
    kg_name_results(s, n, "");
}

static void emit_pointwise(kiln_strbuf *b, const kg_plan *plan, int *ids) {
    kg_scope s;
    kg_scope_init(&s, b, plan, 0, "        ", ids);
    kiln_strbuf_printf(b,
                       "    const int64_t kg_total = %s;\n"
                       "#pragma omp parallel for schedule(static) if (kg_total > 16384)\n"
                       "    for (int64_t kg_e = 0; kg_e < kg_total; kg_e++) {\n",
                       plan->total);
    emit_coords(b, &s, plan->kept, plan->n_kept, "kg_e", "        ");
    kg_store_outputs(&s, -1, -1);
    kiln_strbuf_printf(b, "    }\n");
}

static void emit_reduction(kiln_strbuf *b, const kg_plan *plan, int *ids) {
    const kir *ir = plan->ir;
    kg_scope s;
    kg_scope_init(&s, b, plan, 0, "        ", ids);
    kiln_strbuf_printf(b,
                       "    const int64_t kg_outer = %s, kg_red = %s;\n"
                       "#pragma omp parallel for schedule(static) if (kg_outer * kg_red > 16384)\n"
                       "    for (int64_t kg_o = 0; kg_o < kg_outer; kg_o++) {\n",
                       plan->outer, plan->red_len);
    emit_coords(b, &s, plan->kept, plan->n_kept, "kg_o", "        ");
    for (int ph = 0; ph <= plan->n_phases; ph++) {
        const int last = ph == plan->n_phases;
        if (last && !plan->full_out)
            break;
        kiln_strbuf_printf(b, "        /* %s */\n",
                           last ? "the outputs along the reduced axes"
                                : "a pass over the reduced axes");
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph) {
                step_decl(b, plan, &plan->steps[k], "        ");
                kg_hoist(&s, ir->nodes[plan->steps[k].node].a[0]);
            }
        if (last)
            for (int o = 0; o < ir->n_out; o++)
                kg_hoist(&s, ir->out[o].node);
        kiln_strbuf_printf(b, "        for (int64_t kg_k = 0; kg_k < kg_red; kg_k++) {\n");
        kg_scope in;
        kg_scope_child(&in, &s, "            ");
        emit_coords(b, &in, plan->red, plan->n_red, "kg_k", "            ");
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph)
                step_update(b, plan, &plan->steps[k],
                            kg_value(&in, ir->nodes[plan->steps[k].node].a[0]), &in,
                            "            ");
        if (last)
            kg_store_outputs(&in, 1, -1);
        kiln_strbuf_printf(b, "        }\n");
        for (int k = 0; k < plan->n_steps; k++)
            if (plan->steps[k].phase == ph)
                step_finish(b, plan, &plan->steps[k], &s, "        ");
    }
    kg_store_outputs(&s, 0, -1);
    kiln_strbuf_printf(b, "    }\n");
}

char *kg_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                  const kg_plan *plan) {
    kiln_strbuf b = {0}, ir_text = {0};
    kir_print(plan->ir, &ir_text);
    kiln_strbuf_printf(&b, "// cpu: the schedule does not apply (one source for every point)\n"
                           "/* the IR (docs/generator.md):\n");
    for (const char *l = ir_text.s; l && *l;) {
        const char *e = strchr(l, '\n');
        kiln_strbuf_printf(&b, " *   %.*s\n", (int)(e ? e - l : (long)strlen(l)), l);
        l = e ? e + 1 : l + strlen(l);
    }
    free(ir_text.s);
    kiln_strbuf_printf(&b, " */\n%s\n", kiln_family_template("gen_math.h"));
    char *proto = kiln_family_prototype(p, 0, 0, NULL, "kg_kernel");
    kiln_strbuf_printf(&b, "// kiln: launch kg_kernel\n%s {\n", proto);
    free(proto);
    int ids = 0;
    if (plan->kind == KG_POINTWISE)
        emit_pointwise(&b, plan, &ids);
    else
        emit_reduction(&b, plan, &ids);
    kiln_strbuf_printf(&b, "}\n");
    int64_t first[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(f, 0, first);
    return kiln_family_source(f, m, first, b.s);
}
