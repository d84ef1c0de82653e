/* eltwise_emit.c: the eltwise family's emitters: the chain as straight-line fp32 code with eager's
 * roundings, inside the CUDA template's streaming driver (eltwise.cu) or a C loop nest for the cpu
 * backend (eltwise_cpu.c). */
#include "eltwise.h"

#include <math.h>
#include <string.h>

/* C for a constant in fp32 arithmetic (the wrapped Python number cast to the op's float type). */
static void const_expr(double v, char *out, size_t n) {
    if (isnan(v))
        kiln_family_fmt(out, n, "NAN");
    else if (isinf(v))
        kiln_family_fmt(out, n, "%sINFINITY", v < 0 ? "-" : "");
    else
        kiln_family_fmt(out, n, "(float)(%.17g)", v);
}

/* The right-hand side of value x with operands a and b: the table's expression, but the exponents
 * PyTorch's pow kernels special-case and the hardware tanh for a tanh stored in 16 bits. */
static void op_expr(const elt_val *x, const char *a, const char *b, char *out, size_t n) {
    const char *expr = ELT_OP_INFO[x->op].expr;
    if (x->op == OP_TANH && elt_is16(x->dtype))
        expr = "elt_tanh16($a)";
    if (x->op == OP_POW_S) {
        static const struct {
            double exponent;
            const char *expr;
        } special[] = {{2, "$a * $a"},   {3, "$a * $a * $a"},    {1, "$a"},
                       {0, "1.f"},       {0.5, "sqrtf($a)"},     {-0.5, "elt_rsqrt($a)"},
                       {-1, "1.f / $a"}, {-2, "1.f / ($a * $a)"}};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            if (x->k[0] == special[i].exponent)
                expr = special[i].expr;
    }
    char k[2][64];
    const_expr(x->k[0], k[0], sizeof k[0]);
    const_expr(x->k[1], k[1], sizeof k[1]);
    size_t off = 0;
    for (const char *e = expr; *e && off + 1 < n; e++) {
        const char *sub = NULL;
        if (e[0] == '$' && e[1])
            sub = e[1] == 'a' ? a : e[1] == 'b' ? b : e[1] == '0' ? k[0] : k[1];
        if (sub) {
            off += (size_t)snprintf(out + off, n - off, "%s", sub);
            off = off < n ? off : n - 1;
            e++;
        } else {
            out[off++] = *e;
        }
    }
    out[off] = 0;
}

/* Straight-line code computing every live op value from the lane's operands: the inputs are
 * already in `elt_v<id>` (or are scalars/constants), each op becomes `float elt_v<id> = ...;`
 * rounded to its dtype. */
static void emit_ops(kiln_strbuf *b, const kiln_problem *p, const elt_chain *ch, int cuda,
                     const char *indent) {
    int used[ELT_MAX_VALUES] = {0}; /* an operand of another live op */
    for (int v = 0; v < ch->n; v++)
        for (int k = 0; ch->v[v].live && ch->v[v].kind == V_OP && k < ch->v[v].n_a; k++)
            used[ch->v[v].a[k]] = 1;
    for (int v = 0; v < ch->n; v++) {
        const elt_val *x = &ch->v[v];
        if (!x->live || x->kind != V_OP)
            continue;
        char ops[2][96];
        for (int k = 0; k < x->n_a; k++) {
            const elt_val *o = &ch->v[x->a[k]];
            if (o->kind == V_CONST)
                const_expr(o->value, ops[k], sizeof ops[k]);
            else if (o->kind == V_SCALAR)
                kiln_family_fmt(ops[k], sizeof ops[k], "(float)%s%s", cuda ? "sc_" : "",
                                p->inputs[o->input].name);
            else
                kiln_family_fmt(ops[k], sizeof ops[k], "elt_v%d", x->a[k]);
        }
        char rhs[512];
        op_expr(x, ops[0], x->n_a > 1 ? ops[1] : "", rhs, sizeof rhs);
        /* an output that feeds nothing else is rounded once, by its store */
        const char *round = !used[v]                ? ""
                            : x->dtype == KILN_BF16 ? "elt_rbf"
                            : x->dtype == KILN_F16  ? "elt_rhf"
                                                    : "";
        kiln_strbuf_printf(b, "%sconst float elt_v%d = %s(%s);\n", indent, v, round, rhs);
    }
}

/* A stride that needs a variable: not broadcast (0) and not contiguous (1). */
static int stride_var(const char *stride) {
    return strcmp(stride, "0") && strcmp(stride, "1");
}

/* Offsets `elt_o<i>` of every read input for element `e` in `idx` arithmetic: coordinates over
 * the merged dims (none to compute for one dim), then one multiply-add per dim an input walks. */
static void emit_offsets(kiln_strbuf *b, const elt_shape *sh, const char *idx, const char *indent) {
    if (sh->D == 1) {
        kiln_strbuf_printf(b, "%sconst %s elt_c0 = elt_e;\n", indent, idx);
    } else {
        kiln_strbuf_printf(b, "%s%s elt_t = elt_e;\n", indent, idx);
        for (int g = sh->D - 1; g > 0; g--)
            kiln_strbuf_printf(b, "%sconst %s elt_c%d = elt_t %% elt_n%d;\n%selt_t /= elt_n%d;\n",
                               indent, idx, g, g, indent, g);
        kiln_strbuf_printf(b, "%sconst %s elt_c0 = elt_t;\n", indent, idx);
    }
    for (int i = 0; i < sh->n_in; i++) {
        kiln_strbuf_printf(b, "%sconst %s elt_o%d = 0", indent, idx, i);
        for (int g = 0; g < sh->D; g++) {
            if (!strcmp(sh->stride[i][g], "1"))
                kiln_strbuf_printf(b, " + elt_c%d", g);
            else if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(b, " + elt_c%d * elt_st%d_%d", g, i, g);
        }
        kiln_strbuf_printf(b, ";\n");
    }
    kiln_strbuf_printf(b, "%s(void)elt_c0;\n", indent);
}

char *elt_emit_cuda(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                    const int64_t *pt, const elt_problem *ep) {
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    const int64_t threads = pt[P_THREADS], unroll = pt[P_UNROLL], grid = pt[P_GRID];
    const int64_t vec = pt[P_VBYTES] / (int64_t)kiln_match_get(m, "max_esize", 4);
    KILN_ASSERT(vec >= 1); /* check() accepted the point */
    const int idx64 = sh->total_max + threads * unroll * vec * 2 > ((int64_t)1 << 31);
    const char *idx = "elt_idx";
    kiln_strbuf b = {0};
    char *defs = kiln_family_defines(f, pt);
    kiln_strbuf_printf(
        &b, "%s#define ELT_VEC %lld\n#define ELT_IDX64 %d\n#define ELT_CHAIN_DEFINED 1\n", defs,
        (long long)vec, idx64);
    free(defs);
    if (grid == 0)
        kiln_strbuf_printf(&b, "// kiln: launch elt_kernel grid=ceil_div(%s,%lld) block=%lld\n",
                           sh->total, (long long)(threads * unroll * vec), (long long)threads);
    else
        kiln_strbuf_printf(
            &b, "// kiln: launch elt_kernel grid=min(%lld,ceil_div(%s,%lld)) block=%lld\n",
            (long long)(grid * ELT_SMS), sh->total, (long long)(threads * unroll * vec),
            (long long)threads);
    kiln_strbuf_printf(&b, "%s", kiln_family_template("eltwise.cu"));
    /* the chain */
    kiln_strbuf_printf(&b, "\nstruct elt_chain {\n");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        kiln_strbuf_printf(&b, "    const %s *__restrict__ in%d;\n",
                           kiln_dtype_kernel_type(t, 1).type, i);
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "    %s r%d[ELT_UNROLL];\n", kiln_dtype_kernel_type(t, 1).type,
                               i);
        else
            kiln_strbuf_printf(&b, "    elt_raw<ELT_VEC * %zu>::t r%d[ELT_UNROLL];\n",
                               kiln_dtype_size(t), i);
        for (int g = 0; g < sh->D; g++)
            if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(&b, "    %s elt_st%d_%d;\n", idx, i, g);
    }
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "    %s *__restrict__ out%d;\n",
                           kiln_dtype_kernel_type(p->outputs[o].dtype, 1).type, o);
    for (int g = 1; g < sh->D; g++)
        kiln_strbuf_printf(&b, "    %s elt_n%d;\n", idx, g);
    for (int i = 0; i < p->n_inputs; i++)
        if (p->inputs[i].is_scalar)
            kiln_strbuf_printf(&b, "    float sc_%s;\n", p->inputs[i].name);
    /* load(u, e) */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void load(int u, %s elt_e) {\n", idx);
    emit_offsets(&b, sh, idx, "        ");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "        r%d[u] = elt_ldb(in%d + elt_o%d);\n", i, i, i);
        else
            kiln_strbuf_printf(&b, "        r%d[u] = elt_ld<ELT_VEC * %zu>(in%d + elt_o%d);\n", i,
                               kiln_dtype_size(t), i, i);
    }
    kiln_strbuf_printf(&b, "    }\n");
    /* compute_store(u, e) */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void compute_store(int u, %s elt_e) {\n",
                       idx);
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        elt_raw<ELT_VEC * %zu>::t w%d;\n",
                           kiln_dtype_size(p->outputs[o].dtype), o);
    kiln_strbuf_printf(&b, "#pragma unroll\n        for (int k = 0; k < ELT_VEC; k++) {\n");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "            const float elt_v%d = elt_f(r%d[u]);\n",
                               sh->in_val[i], i);
        else
            kiln_strbuf_printf(&b,
                               "            const float elt_v%d = elt_f(reinterpret_cast<const %s "
                               "*>(&r%d[u])[k]);\n",
                               sh->in_val[i], kiln_dtype_kernel_type(t, 1).type, i);
    }
    emit_ops(&b, p, ch, 1, "            ");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b,
                           "            reinterpret_cast<%s *>(&w%d)[k] = elt_to<%s>(elt_v%d);\n",
                           kiln_dtype_kernel_type(p->outputs[o].dtype, 1).type, o,
                           kiln_dtype_kernel_type(p->outputs[o].dtype, 1).type, ch->out_val[o]);
    kiln_strbuf_printf(&b, "        }\n");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        elt_st<ELT_VEC * %zu>(out%d + elt_e, w%d);\n",
                           kiln_dtype_size(p->outputs[o].dtype), o, o);
    kiln_strbuf_printf(&b, "    }\n");
    /* scalar(e): one element, the tail of a flat output */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void scalar(%s elt_e) {\n", idx);
    emit_offsets(&b, sh, idx, "        ");
    for (int i = 0; i < sh->n_in; i++)
        kiln_strbuf_printf(&b, "        const float elt_v%d = elt_f(in%d[elt_o%d]);\n",
                           sh->in_val[i], i, i);
    emit_ops(&b, p, ch, 1, "        ");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        out%d[elt_e] = elt_to<%s>(elt_v%d);\n", o,
                           kiln_dtype_kernel_type(p->outputs[o].dtype, 1).type, ch->out_val[o]);
    kiln_strbuf_printf(&b, "    }\n};\n\n");
    /* the entry point */
    char bounds[32];
    snprintf(bounds, sizeof bounds, "%lld", (long long)threads);
    char *proto = kiln_family_prototype(p, 0, 1, bounds, "elt_kernel");
    kiln_strbuf_printf(&b, "%s {\n    elt_chain elt_obj;\n", proto);
    free(proto);
    for (int i = 0; i < sh->n_in; i++) {
        kiln_strbuf_printf(&b, "    elt_obj.in%d = %s;\n", i, p->inputs[sh->in_idx[i]].name);
        for (int g = 0; g < sh->D; g++)
            if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(&b, "    elt_obj.elt_st%d_%d = (%s)(%s);\n", i, g, idx,
                                   sh->stride[i][g]);
    }
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "    elt_obj.out%d = %s;\n", o, p->outputs[o].name);
    for (int g = 1; g < sh->D; g++)
        kiln_strbuf_printf(&b, "    elt_obj.elt_n%d = (%s)(%s);\n", g, idx, sh->size[g]);
    for (int i = 0; i < p->n_inputs; i++)
        if (p->inputs[i].is_scalar)
            kiln_strbuf_printf(&b, "    elt_obj.sc_%s = (float)%s;\n", p->inputs[i].name,
                               p->inputs[i].name);
    kiln_strbuf_printf(&b, "    elt_drive(elt_obj, (%s)(%s));\n}\n", idx, sh->total);
    return kiln_family_source(f, m, pt, b.s);
}

char *elt_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                   const elt_problem *ep) {
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    kiln_strbuf b = {0};
    kiln_strbuf_printf(&b, "// cpu: the GPU parameters do not apply\n%s",
                       kiln_family_template("eltwise_cpu.c"));
    char *proto = kiln_family_prototype(p, 0, 0, NULL, "elt_kernel");
    kiln_strbuf_printf(&b, "\n// kiln: launch elt_kernel\n%s {\n", proto);
    free(proto);
    kiln_strbuf_printf(&b, "    const int64_t elt_total = %s;\n", sh->total);
    const char *ind;
    if (sh->D == 1) {
        kiln_strbuf_printf(
            &b, "#pragma omp parallel for simd schedule(static) if (elt_total > "
                "ELT_CPU_PAR_MIN)\n    for (int64_t elt_e = 0; elt_e < elt_total; elt_e++) {\n");
        for (int i = 0; i < sh->n_in; i++)
            kiln_strbuf_printf(&b, "        const int64_t elt_o%d = elt_e * (%s);\n", i,
                               sh->stride[i][0]);
        ind = "        ";
    } else {
        const int D = sh->D;
        for (int g = 0; g < D; g++)
            kiln_strbuf_printf(&b, "    const int64_t elt_n%d = %s;\n", g, sh->size[g]);
        for (int i = 0; i < sh->n_in; i++)
            for (int g = 0; g < D; g++)
                kiln_strbuf_printf(&b, "    const int64_t elt_st%d_%d = %s;\n", i, g,
                                   sh->stride[i][g]);
        kiln_strbuf_printf(
            &b,
            "#pragma omp parallel for schedule(static) if (elt_total > ELT_CPU_PAR_MIN)\n"
            "    for (int64_t elt_r = 0; elt_r < elt_total / elt_n%d; elt_r++) {\n"
            "        int64_t elt_t = elt_r;\n",
            D - 1);
        for (int g = D - 2; g > 0; g--)
            kiln_strbuf_printf(
                &b,
                "        const int64_t elt_c%d = elt_t %% elt_n%d;\n        elt_t /= elt_n%d;\n", g,
                g, g);
        kiln_strbuf_printf(&b, "        const int64_t elt_c0 = elt_t;\n");
        for (int i = 0; i < sh->n_in; i++) {
            kiln_strbuf_printf(&b, "        const int64_t elt_b%d = 0", i);
            for (int g = 0; g < D - 1; g++)
                kiln_strbuf_printf(&b, " + elt_c%d * elt_st%d_%d", g, i, g);
            kiln_strbuf_printf(&b, ";\n");
        }
        kiln_strbuf_printf(
            &b,
            "#pragma omp simd\n        for (int64_t elt_j = 0; elt_j < elt_n%d; elt_j++) "
            "{\n            const int64_t elt_e = elt_r * elt_n%d + elt_j;\n",
            D - 1, D - 1);
        for (int i = 0; i < sh->n_in; i++)
            kiln_strbuf_printf(
                &b, "            const int64_t elt_o%d = elt_b%d + elt_j * elt_st%d_%d;\n", i, i, i,
                D - 1);
        ind = "            ";
    }
    for (int i = 0; i < sh->n_in; i++) {
        const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
        kiln_strbuf_printf(&b, "%sconst float elt_v%d = %s(%s[elt_o%d]);\n", ind, sh->in_val[i],
                           kiln_dtype_kernel_type(t->dtype, 0).to_float, t->name, i);
    }
    emit_ops(&b, p, ch, 0, ind);
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "%s%s[elt_e] = %s(elt_v%d);\n", ind, p->outputs[o].name,
                           kiln_dtype_kernel_type(p->outputs[o].dtype, 0).from_float,
                           ch->out_val[o]);
    if (sh->D > 1)
        kiln_strbuf_printf(&b, "        }\n");
    kiln_strbuf_printf(&b, "    }\n}\n");
    int64_t first[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(f, 0, first);
    return kiln_family_source(f, m, first, b.s);
}
