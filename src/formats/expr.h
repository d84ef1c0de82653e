/* expr.h: integer expressions over axis names, used by `expr` axes in definitions and by the launch
 * directives of candidate kernels. Grammar (Python-like, all int64):
 *   expr := term (('+'|'-') term)* ; term := unary (('*'|'/'|'//'|'%') unary)*
 *   unary := ('+'|'-') unary | power ; power := atom ('**' unary)?
 *   atom := INTEGER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
 * (Python's precedence: -2**2 is -4, 2**3**2 is 512; a negative exponent is an error.)
 * '/' and '//' are floor division; '%' is Python's modulo (sign of the divisor). Functions:
 * min(a,b), max(a,b), ceil_div(a,b). Division by zero, overflow and unknown names are errors, never
 * crashes. */
#ifndef KILN_EXPR_H
#define KILN_EXPR_H

#include "../util/common.h"

/* Looks a name up; returns 0 and sets *value when known, -1 when unknown. */
typedef int (*kiln_expr_lookup)(void *ctx, const char *name, size_t name_len, int64_t *value);

int kiln_expr_eval(const char *expr, kiln_expr_lookup lookup, void *ctx, int64_t *out,
                   kiln_err *err);

#endif
