/* plan.c: where the time of `kiln optimize` goes, and the plan it announces at its start.
 *
 * A run with a time limit cannot give every problem its whole budget, so the agents spend their
 * next candidate where it can save the most of the model's time: on the problem whose share of
 * the model times its headroom is largest. The headroom is how far the problem's time today is
 * above its speed of light, as a fraction of its eager time: (min(best, eager) - sol) / eager.
 * Before any candidate proved ok that is the eager time itself (headroom 1: the speed of light is
 * known only from a gate result); once one has, its time and SOL % say it. A problem whose kernel
 * reached the speed of light has nothing left to give and waits until the others are spent; one
 * without a share comes after every problem with one. Budgets still cap each problem, so a
 * problem that stops improving cannot take the whole run. */
#include "optimize_impl.h"

#include <string.h>

double kiln_opt_priority(const kiln_opt_ctx *c, int bb_index) {
    const kiln_bb_problem *P = kiln_bb_problem_at(c->bb, bb_index);
    const kiln_opt_problem *pr = &c->problems[c->of_bb[bb_index]];
    double share = pr->share > 0 ? pr->share : 0;
    if (P->incumbent_node < 0 || !(P->best_time_us > 0))
        return share;
    double best = P->best_time_us, eager = pr->eager_us;
    double now = eager > 0 && eager < best ? eager : best;
    double sol = P->best_sol_pct > 0 ? best * P->best_sol_pct / 100 : 0;
    double headroom = (now - sol) / (eager > 0 ? eager : best);
    if (headroom < 0)
        headroom = 0;
    if (headroom > 1)
        headroom = 1;
    return share * headroom;
}

void kiln_opt_plan_announce(kiln_opt_ctx *c, kiln_store *s, int n_active) {
    const kiln_optimize_options *o = &c->opt;
    char limit[96];
    if (o->time_s > 0)
        snprintf(limit, sizeof limit, "for up to %.0f s (--time)", o->time_s);
    else
        snprintf(limit, sizeof limit, "without a time limit");
    size_t cap = 4096, len = 0;
    char *text = xmalloc(cap);
    len = (size_t)snprintf(text, cap,
                           "plan: %d of %d problems searched %s, each up to its budget; candidates "
                           "go first where share x headroom to the speed of light is largest",
                           n_active, c->n_problems, limit);
    kiln_bb_lock(c->bb);
    for (int b = 0; b < n_active; b++) {
        const kiln_bb_problem *P = kiln_bb_problem_at(c->bb, b);
        const kiln_opt_problem *pr = &c->problems[c->of_bb[b]];
        char share[24] = "share -", eager[32] = "eager -";
        if (pr->share >= 0)
            snprintf(share, sizeof share, "share %.1f%%", 100 * pr->share);
        if (pr->eager_us > 0)
            snprintf(eager, sizeof eager, "eager %.2f us", pr->eager_us);
        int left = P->budget - P->made;
        char line[512];
        int n = snprintf(line, sizeof line, "\n  %-40.40s %-12s %-18s %d candidates (%d made)%s",
                         pr->p->name, share, eager, left > 0 ? left : 0, P->made,
                         P->n_families == 0 ? ", llm agents only" : "");
        if (len + (size_t)n + 1 > cap) {
            cap = 2 * (len + (size_t)n + 1);
            text = xrealloc(text, cap);
        }
        memcpy(text + len, line, (size_t)n + 1);
        len += (size_t)n;
    }
    kiln_bb_unlock(c->bb);
    kiln_store_event(s, 0, "plan", text, NULL);
    if (!o->quiet)
        fprintf(stderr, "kiln optimize: %s\n", text);
    free(text);
}
