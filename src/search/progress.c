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

/* What the table says about a searched problem: its winner (the store's, what the library ships)
 * with the spreads of its time and of the eager baseline it is compared with. */
typedef struct {
    double best_us, best_spread_pct, eager_us, eager_spread_pct, sol_pct;
    kiln_store_speedup speedup;
} table_row;

static void table_row_read(kiln_store *s, const kiln_opt_problem *pr, const progress_row *r,
                           table_row *t) {
    t->best_us = r->best_us;
    t->sol_pct = r->best_us > 0 ? r->best_sol : -1;
    t->best_spread_pct = t->eager_spread_pct = -1;
    t->eager_us = pr->eager_us;
    kiln_store_winner win;
    kiln_store_result_row res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (s && kiln_store_winner_get(s, pr->store_id, &win, NULL) == KILN_OK && win.result_id > 0 &&
        kiln_store_result_get(s, win.result_id, &res, &found, NULL) == KILN_OK && found) {
        kiln_store_summary sum;
        kiln_store_summary_parse(res.result_json, &sum);
        t->best_us = res.time_us;
        t->best_spread_pct = res.spread_pct;
        t->sol_pct = res.sol_pct;
        kiln_store_baseline_pick(pr->eager_us, &sum, &t->eager_us, &t->eager_spread_pct);
    }
    kiln_store_result_row_free(&res);
    kiln_store_speedup_judge(t->eager_us, t->eager_spread_pct, t->best_us, t->best_spread_pct,
                             &t->speedup);
}

static void pct_cell(char *buf, size_t cap, double pct) {
    if (pct >= 0)
        snprintf(buf, cap, "%.1f%s", pct, pct > KILN_SPREAD_LIMIT_PCT ? "!" : "");
    else
        snprintf(buf, cap, "-");
}

void kiln_opt_print_table(kiln_opt_ctx *c, kiln_store *s, const char *stop_reason) {
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
        cJSON_AddNumberToObject(out, "spread_limit_pct", KILN_SPREAD_LIMIT_PCT);
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
            NUM_OR_NULL("compile_us", pr->compile_us);
            if (pr->bb >= 0) {
                progress_row *r = &rows[pr->bb];
                table_row t;
                table_row_read(s, pr, r, &t);
                NUM_OR_NULL("eager_us", t.eager_us);
                NUM_OR_NULL("eager_spread_pct", t.eager_spread_pct);
                NUM_OR_NULL("best_us", t.best_us);
                NUM_OR_NULL("spread_pct", t.best_us > 0 ? t.best_spread_pct : -1);
                NUM_OR_NULL("speedup", t.speedup.value);
                NUM_OR_NULL("speedup_ratio", t.speedup.ratio);
                cJSON_AddStringToObject(o, "speedup_verdict",
                                        kiln_store_speedup_name(t.speedup.verdict));
                NUM_OR_NULL("sol_pct", t.best_us > 0 ? t.sol_pct : -1);
                NUM_OR_NULL("score", r->best_us > 0 ? r->best_score : -1);
                cJSON_AddNumberToObject(o, "candidates", r->made);
                cJSON_AddNumberToObject(o, "results", r->done);
                cJSON_AddNumberToObject(o, "ok", r->ok);
                cJSON_AddNumberToObject(o, "duplicates", r->dups);
                cJSON_AddNumberToObject(o, "drafts", r->drafts);
                cJSON_AddBoolToObject(o, "exhausted", r->exhausted);
            } else {
                NUM_OR_NULL("eager_us", pr->eager_us);
                cJSON_AddStringToObject(o, "skipped", pr->skip ? pr->skip : "skipped");
            }
#undef NUM_OR_NULL
            cJSON_AddItemToArray(arr, o);
        }
        char *text = cJSON_Print(out);
        printf("%s\n", text);
        free(text);
        cJSON_Delete(out);
        free(rows);
        return;
    }
    printf("%-44s %7s %10s %7s %10s %10s %7s %8s %6s %6s\n", "problem", "share", "eager us",
           "eager ±%", "compile us", "best us", "best ±%", "speedup", "SOL %", "cands");
    int flagged = 0;
    for (int i = 0; i < n; i++) {
        kiln_opt_problem *pr = &c->problems[i];
        char share[16] = "-", eager[24] = "-", espread[16] = "-", comp[24] = "null", best[24] = "-",
             bspread[16] = "-", sp[16] = "-", sol[16] = "-", cands[16] = "-";
        if (pr->share >= 0)
            snprintf(share, sizeof share, "%.1f%%", 100 * pr->share);
        double eager_us = pr->eager_us;
        if (pr->compile_us > 0)
            snprintf(comp, sizeof comp, "%.2f", pr->compile_us);
        if (pr->bb >= 0) {
            progress_row *r = &rows[pr->bb];
            table_row t;
            table_row_read(s, pr, r, &t);
            eager_us = t.eager_us;
            pct_cell(espread, sizeof espread, t.eager_spread_pct);
            snprintf(cands, sizeof cands, "%d", r->made);
            if (t.best_us > 0) {
                snprintf(best, sizeof best, "%.2f", t.best_us);
                pct_cell(bspread, sizeof bspread, t.best_spread_pct);
                kiln_store_speedup_text(&t.speedup, sp, sizeof sp);
                flagged |= t.speedup.verdict != KILN_SPEEDUP_SUPPORTED;
                if (t.sol_pct >= 0)
                    snprintf(sol, sizeof sol, "%.1f", t.sol_pct);
            }
        }
        if (eager_us > 0)
            snprintf(eager, sizeof eager, "%.2f", eager_us);
        printf("%-44.44s %7s %10s %7s %10s %10s %7s %8s %6s %6s", kiln_opt_problem_name(pr), share,
               eager, espread, comp, best, bspread, sp, sol, cands);
        if (pr->bb < 0)
            printf("  skipped: %.100s", pr->skip ? pr->skip : "?");
        printf("\n");
    }
    if (flagged)
        printf(
            "speedup: n.s. = the spreads allow no speedup (the interval contains 1); noisy = the "
            "eager baseline's spread is over %.0f%%, not divided by; ! = a spread over %.0f%%; "
            "- = not timed\n",
            KILN_SPREAD_LIMIT_PCT, KILN_SPREAD_LIMIT_PCT);
    free(rows);
}
