/* agents.h: the specialists of `kiln optimize`: each proposes a child of a search-tree node in its
 * own way (a step in launch geometry, in vector width and unrolling, a change of algorithm or
 * family, a fusion hint, or a random point). Pure functions of the problem, the parent's point and
 * a random state; the agent process loop that calls them is worker_agent.c (the llm agent's,
 * worker_llm.c, asks a language model, llm.h, for a whole kernel instead of a point). */
#ifndef KILN_AGENTS_H
#define KILN_AGENTS_H

#include <cjson/cJSON.h>

#include "../gen/family.h"

typedef enum {
    KILN_AGENT_GEOMETRY,  /* threads / rows per block / cluster / split: one step of one param */
    KILN_AGENT_VECTOR,    /* vector width / unroll / items per thread: one step of one param */
    KILN_AGENT_ALGORITHM, /* another family that matches, or one step of an algorithm param */
    KILN_AGENT_FUSION,    /* reads RUN/model.json; records fusion opportunities; else a neighbour */
    KILN_AGENT_RANDOM,    /* a random valid point: drafts' restarts and the baseline */
    KILN_AGENT_LLM,       /* a whole kernel from an OpenAI-compatible endpoint (llm.h): only with
                             --llm-url, never through kiln_agent_propose */
    KILN_AGENT_COUNT
} kiln_agent_kind;

/* "geometry", "vector", "algorithm", "fusion", "random", "llm". */
const char *kiln_agent_name(int kind);
/* The kind with this name, or -1. */
int kiln_agent_parse(const char *name);

/* How a parameter is classified, by its #define name (case-insensitive substrings, first match
 * wins): VEC, UNROLL, WIDTH, ITEMS -> vector; THREADS, ROWS, CLUSTER, SPLIT, BLOCK, TPR, GROUP,
 * GRID, WARP, TILE -> geometry; anything else (MODE, ALGO, ONLINE, CACHE, PERSIST, STREAM...) ->
 * algorithm. */
typedef enum { KILN_PARAM_GEOMETRY, KILN_PARAM_VECTOR, KILN_PARAM_ALGORITHM } kiln_param_class;
kiln_param_class kiln_agent_param_class(const char *param_name);

/* What an agent knows about one problem: the families that match it, in registry order. */
typedef struct {
    const kiln_problem *p;
    int n_families;
    const kiln_family *const *fams;
    const kiln_match *matches;
} kiln_agent_problem;

/* A proposal: a point of one of the problem's families. */
typedef struct {
    int slot;                              /* index into kiln_agent_problem.fams */
    int64_t point[KILN_FAMILY_MAX_PARAMS]; /* one value per param of that family */
    int used;                              /* the kiln_agent_kind that actually made it */
    char note[256];                        /* what was done, for logs ("SMX_THREADS 128 -> 256") */
} kiln_proposal;

/* A tiny deterministic generator (xorshift64*), so that agents are reproducible per seed. */
uint64_t kiln_agent_rand(uint64_t *state);

/* Proposes a child of the node whose point is (parent_slot, parent_point); parent_slot -1 means the
 * problem's root (a starting point: the first valid point of a family in index order on attempt 0,
 * a random valid point after). attempt counts the caller's retries for this node (0, 1, ...), so
 * that a retry after a duplicate moves further. Every proposal passes the family's check. Returns
 * 0, or -1 when no valid point was found or kind is KILN_AGENT_LLM (out->note says why). Never
 * aborts on a family's answers. */
int kiln_agent_propose(int kind, const kiln_agent_problem *ap, int parent_slot,
                       const int64_t *parent_point, int attempt, uint64_t *rng, kiln_proposal *out);

/* Where family slot starts on the problem: its start rule's point when that passes check, else the
 * first valid point in index order (scanning at most 20000), else a random valid one. Returns 0 or
 * -1. */
int kiln_agent_start_point(const kiln_agent_problem *ap, int slot, uint64_t *rng, int64_t *point);
/* A uniformly random point of family slot that passes check. Returns 0 or -1. */
int kiln_agent_random_point(const kiln_agent_problem *ap, int slot, uint64_t *rng, int64_t *point);

/* The fusion opportunities of problem `name` in a parsed RUN/model.json: one line per neighbour op
 * of the problem's first call ("fusion opportunity: producer aten::X (op 12) -> consumer
 * aten::_softmax.default (op 13) via tensor 40"). Returns how many were written (at most max);
 * lines are heap strings the caller frees. */
int kiln_agent_fusion_scan(const cJSON *model, const char *name, char **lines, int max);

#endif
