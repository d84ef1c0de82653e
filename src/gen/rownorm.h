/* rownorm.h: what the rmsnorm/layernorm families share between their matcher (rownorm_match.c) and
 * their generator (rownorm.c): the roles of inputs and outputs, the rounding programs, and the
 * match. */
#ifndef KILN_ROWNORM_H
#define KILN_ROWNORM_H

#include "family.h"

/* kiln_match.input_of_role / output_of_role indices */
enum { ROLE_X, ROLE_W, ROLE_B, ROLE_G, ROLE_EPS };
enum { OUT_Y, OUT_MEAN, OUT_RSTD };

/* Steps of a program, applied in order to an fp32 value (see rownorm_match.c). */
enum {
    STEP_ROUND_BF16 = 1,
    STEP_ROUND_F16 = 2,
    STEP_MUL_W = 3,
    STEP_ADD_B = 4,
    STEP_MUL_G = 5,
    STEP_ADD_ONE = 6,
    STEP_SILU = 7,
};
#define RN_MAX_STEPS 16

/* A program. Packed base 8 in a match fact (16 steps fit in 48 bits, exact in a double); step codes
 * are never 0, so the packing is unambiguous. */
typedef struct {
    int n;
    unsigned char step[RN_MAX_STEPS];
} rn_prog;

double rn_prog_pack(const rn_prog *p);
void rn_prog_unpack(double v, rn_prog *p);
/* The program as an expression over `base`: C for the templates (c_style), or short text. */
void rn_prog_render(const rn_prog *p, const char *base, int c_style, char *out, size_t cap);

/* 1 when the programs have a SiLU and every SiLU reaches y's store, y of 16 bits (ydt), only
 * through products and roundings: its ~2 ulp of fp32 with __expf and __fdividef then vanish in the
 * rounding (the CUDA emission's RN_SILU_LP). */
int rn_silu_narrow(const rn_prog *w, const rn_prog *b, const rn_prog *g, const rn_prog *y,
                   kiln_dtype ydt);

/* Rows and columns (the product of the last k dims of input x_input) of workload w; 0 when empty.
 */
int rn_geometry(const kiln_problem *p, int x_input, int k, const kiln_workload *w, int64_t *rows,
                int64_t *cols);

/* The matcher of both families (layer selects LayerNorm): fills m with the variant, the roles, the
 * facts "kind", "eps", "norm_dims", "prog_y", "prog_w", "prog_b", "prog_g" and the row/column
 * expressions; or returns 0 with the reason in why. */
int rn_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len, int layer);

#endif
