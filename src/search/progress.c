/* progress.c: what `kiln optimize` shows while and after it runs: a line per problem on stderr
 * (redrawn in place on a terminal), and the final table on stdout (or one JSON object with
 * --json), both read from the blackboard. */
#include "optimize_impl.h"

#include <string.h>

const char *kiln_opt_problem_name(const kiln_opt_problem *pr) {
    if (pr->p)
        return pr->p->name;
    const char *slash = strrchr(pr->dir, '/');
    return slash ? slash + 1 : pr->dir;
}

typedef struct {
    int made, budget, pending, done, ok, dups, exhausted, draft_active, drafts, llm_only;
    double best_us, best_score, best_sol;
    uint32_t generation;
} progress_row;

static void progress_rows(kiln_opt_ctx *c, progress_row *rows) {
    kiln_bb_lock(c->bb);
    int n = kiln_bb_hdr(c->bb)->n_problems;
    for (int i = 0; i < n; i++) {
        kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
        progress_row *r = &rows[i];
        r->made = P->made;
        r->budget = P->budget;
        r->pending = P->pending;
        r->done = P->done;
        r->ok = P->ok;
        r->dups = P->dups;
        r->exhausted = P->exhausted;
        r->llm_only = P->n_families == 0;
        r->draft_active = P->draft_state == KILN_BB_DRAFT_ACTIVE;
        r->drafts = P->draft_count;
        r->best_us = P->incumbent_node >= 0 ? P->best_time_us : -1;
        r->best_score = P->best_score;
        r->best_sol = P->best_sol_pct;
        r->generation = P->generation;
    }
    kiln_bb_unlock(c->bb);
}

static void progress_line(kiln_opt_ctx *c, int i, const progress_row *r, char *buf, size_t n) {
    const char *name = c->problems[c->of_bb[i]].p->name;
    char bar[21];
    int filled = r->budget > 0 ? (int)(20.0 * r->done / r->budget + 0.5) : 0;
    if (r->exhausted && !r->llm_only && r->pending == 0)
        filled = 20;
    if (filled > 20)
        filled = 20;
    for (int k = 0; k < 20; k++)
        bar[k] = k < filled ? '#' : '.';
    bar[20] = 0;
    char best[64] = "best -";
    if (r->best_us > 0)
        snprintf(best, sizeof best, "best %.2f us", r->best_us);
    char score[32] = "S -";
    if (r->best_score >= 0)
        snprintf(score, sizeof score, "S %.3f", r->best_score);
    snprintf(buf, n, "%-40.40s [%s] %3d/%-3d candidates  %-18s %-8s ok %d, failed %d%s%s", name,
             bar, r->done, r->budget, best, score, r->ok, r->done - r->ok,
             r->llm_only    ? ", llm only"
             : r->exhausted ? ", space exhausted"
                            : "",
             r->draft_active ? ", in a draft" : "");
}

void kiln_opt_progress_draw(kiln_opt_ctx *c, kiln_opt_progress *ps, int force) {
    if (c->opt.quiet)
        return;
    int n = kiln_bb_hdr(c->bb)->n_problems;
    if (n == 0)
        return;
    progress_row *rows = xcalloc((size_t)n, sizeof *rows);
    progress_rows(c, rows);
    char line[512];
    if (ps->tty) {
        if (ps->lines_drawn)
            fprintf(stderr, "\033[%dA", ps->lines_drawn);
        for (int i = 0; i < n; i++) {
            progress_line(c, i, &rows[i], line, sizeof line);
            fprintf(stderr, "\r\033[2K%s\n", line);
        }
        ps->lines_drawn = n;
    } else {
        for (int i = 0; i < n; i++) {
            if (!force && rows[i].generation == ps->seen[i])
                continue;
            ps->seen[i] = rows[i].generation;
            progress_line(c, i, &rows[i], line, sizeof line);
            fprintf(stderr, "%s\n", line);
        }
    }
    fflush(stderr);
    free(rows);
}

void kiln_opt_print_table(kiln_opt_ctx *c, const char *stop_reason) {
    int n = c->n_problems;
    progress_row *rows = NULL;
    int nb = c->bb ? kiln_bb_hdr(c->bb)->n_problems : 0;
    rows = xcalloc((size_t)(nb + 1), sizeof *rows);
    if (c->bb)
        progress_rows(c, rows);
    if (c->opt.json) {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "run", c->run_dir);
        cJSON_AddStringToObject(out, "backend", c->backend);
        cJSON_AddStringToObject(out, "stopped", stop_reason);
        cJSON *arr = cJSON_AddArrayToObject(out, "problems");
        for (int i = 0; i < n; i++) {
            kiln_opt_problem *pr = &c->problems[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "problem", kiln_opt_problem_name(pr));
#define NUM_OR_NULL(key, v)                                                                        \
    do {                                                                                           \
        if ((v) >= 0)                                                                              \
            cJSON_AddNumberToObject(o, key, v);                                                    \
        else                                                                                       \
            cJSON_AddNullToObject(o, key);                                                         \
    } while (0)
            NUM_OR_NULL("share", pr->share);
            NUM_OR_NULL("eager_us", pr->eager_us);
            NUM_OR_NULL("compile_us", pr->compile_us);
            if (pr->bb >= 0) {
                progress_row *r = &rows[pr->bb];
                NUM_OR_NULL("best_us", r->best_us);
                NUM_OR_NULL("speedup",
                            r->best_us > 0 && pr->eager_us > 0 ? pr->eager_us / r->best_us : -1);
                NUM_OR_NULL("sol_pct", r->best_us > 0 ? r->best_sol : -1);
                NUM_OR_NULL("score", r->best_us > 0 ? r->best_score : -1);
                cJSON_AddNumberToObject(o, "candidates", r->made);
                cJSON_AddNumberToObject(o, "results", r->done);
                cJSON_AddNumberToObject(o, "ok", r->ok);
                cJSON_AddNumberToObject(o, "duplicates", r->dups);
                cJSON_AddNumberToObject(o, "drafts", r->drafts);
                cJSON_AddBoolToObject(o, "exhausted", r->exhausted);
            } else {
                cJSON_AddStringToObject(o, "skipped", pr->skip ? pr->skip : "skipped");
            }
#undef NUM_OR_NULL
            cJSON_AddItemToArray(arr, o);
        }
        char *s = cJSON_Print(out);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(out);
        free(rows);
        return;
    }
    printf("%-44s %7s %10s %10s %10s %8s %6s %6s\n", "problem", "share", "eager us", "compile us",
           "best us", "speedup", "SOL %", "cands");
    for (int i = 0; i < n; i++) {
        kiln_opt_problem *pr = &c->problems[i];
        char share[16] = "-", eager[24] = "-", comp[24] = "null", best[24] = "-", sp[16] = "-",
             sol[16] = "-", cands[16] = "-";
        if (pr->share >= 0)
            snprintf(share, sizeof share, "%.1f%%", 100 * pr->share);
        if (pr->eager_us > 0)
            snprintf(eager, sizeof eager, "%.2f", pr->eager_us);
        if (pr->compile_us > 0)
            snprintf(comp, sizeof comp, "%.2f", pr->compile_us);
        if (pr->bb >= 0) {
            progress_row *r = &rows[pr->bb];
            snprintf(cands, sizeof cands, "%d", r->made);
            if (r->best_us > 0) {
                snprintf(best, sizeof best, "%.2f", r->best_us);
                if (pr->eager_us > 0)
                    snprintf(sp, sizeof sp, "%.2fx", pr->eager_us / r->best_us);
                if (r->best_sol >= 0)
                    snprintf(sol, sizeof sol, "%.1f", r->best_sol);
            }
        }
        printf("%-44.44s %7s %10s %10s %10s %8s %6s %6s", kiln_opt_problem_name(pr), share, eager,
               comp, best, sp, sol, cands);
        if (pr->bb < 0)
            printf("  skipped: %.100s", pr->skip ? pr->skip : "?");
        printf("\n");
    }
    free(rows);
}
