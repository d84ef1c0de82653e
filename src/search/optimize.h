/* optimize.h: `kiln optimize RUN`: the coordinator of the search (optimize.c's essay describes the
 * processes; docs/search.md the whole design and its numbers). */
#ifndef KILN_OPTIMIZE_H
#define KILN_OPTIMIZE_H

#include <stdint.h>

#include "../util/common.h"
#include "llm.h"

typedef struct {
    const char *run_dir; /* RUN: holds kiln.db, candidates/, library/ (created if missing) */
    int n_problem_dirs;  /* problem directories given on the command line; 0: RUN/problems */
    const char **problem_dirs;
    int budget;              /* candidates per problem, across resumed runs; default 50 */
    double time_s;           /* wall-clock limit of this run; <= 0: none */
    int agents;              /* agent processes; <= 0: 2 on cpu, 4 on cuda */
    const char *specialists; /* comma list of agent kinds, cycled over the agents; NULL: default */
    const char *backend;     /* "cuda" or "cpu"; NULL: kiln_backend_default() */
    int top;                 /* keep the hottest P problems; <= 0: all */
    const char *family;      /* only this family's candidates (kiln_family_find); NULL: all */
    int plateau;             /* P of the draft rule; default 8; 0 disables drafts */
    int iters;               /* gate timing runs; <= 0: the backend's default */
    int sets;                /* input sets proved per workload; <= 0: all */
    double timeout_s;        /* the gate's limit per candidate run; <= 0: the gate's default */
    int retime_rounds;       /* rounds of the interleaved re-timing; default 3 */
    int gates;               /* gate processes; <= 0: one per visible GPU (cuda), 1 (cpu) */
    uint64_t seed;           /* agents' random seed; default fixed */
    int json;                /* print the final table as one JSON object on stdout */
    int quiet;               /* no progress lines */
    /* The llm agent (docs/agents.md): off while llm.url is NULL. Its store, problem and
     * cancellation are set per agent process; the rest is the command line's --llm-* options. */
    kiln_llm_config llm;
    int llm_agents; /* agent processes that are llm agents; <= 0: 1 (with llm.url) */
} kiln_optimize_options;

void kiln_optimize_options_default(kiln_optimize_options *o);

/* Runs (or resumes) the search over the problems and writes RUN/library. Returns the exit status:
 * 0 done (whatever the candidates' outcomes), 1 the run failed (no problem could be optimised, the
 * gate cannot evaluate at all), 2 bad input: a store that is locked by another run or corrupt, no
 * problems, bad options. err says why whenever the status is not 0. */
int kiln_optimize_run(const kiln_optimize_options *o, kiln_err *err);

#endif
