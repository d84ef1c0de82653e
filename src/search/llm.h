/* llm.h: the `llm` agent: asks any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama,
 * hosted APIs) for one candidate kernel, given the problem, the device, the node's kernel and the
 * failures of its children; every reply is untrusted and every failure is an outcome (llm.c's
 * essay; docs/agents.md). */
#ifndef KILN_LLM_H
#define KILN_LLM_H

#include <stdint.h>

#include "../formats/problem.h"
#include "../store/store.h"

/* ---- configuration ---- */

typedef struct {
    const char *url;     /* base URL: http://127.0.0.1:8000, .../v1, or .../v1/chat/completions */
    const char *model;   /* the served model name; NULL or "": the first of GET <base>/models */
    const char *key_env; /* name of the environment variable with the API key; NULL: the default
                            KILN_LLM_API_KEY. The key is sent as "Authorization: Bearer KEY" and is
                            never stored, logged or put in a message. */
    double temperature;  /* default 0.2 */
    int max_tokens;      /* the reply's limit; default 8192 */
    double connect_timeout_s; /* default 10 */
    double timeout_s;         /* one whole request (connect + reply); default 300 */
    int retries; /* extra attempts after a 5xx, 429, timeout or lost connection; default 2 */
    double
        backoff_s; /* wait before the first retry, doubled each time, capped at 30 s; default 2 */
    int64_t token_budget;   /* no request once the run's total_tokens (the replies' usage) reached
                               it; <= 0: no limit */
    size_t max_reply_bytes; /* a longer reply body is abandoned: no_kernel "reply too large";
                               default 1 MiB */
    int max_feedback;       /* failed children described in the prompt; default 6 */

    /* Where exchanges go (optional). With a store, every request and reply is a row of the
     * store's llm_exchange and the token budget counts the whole run, across processes and
     * resumes; without one, it counts this process. A kernel's exchange is linked to the candidate
     * it became with kiln_store_llm_exchange_link. */
    kiln_store *store;
    int64_t problem_id; /* the store's problem id (with a store) */

    /* Optional: asked about once a second while a request is in flight or a retry waits; when it
     * returns non-zero the request is abandoned (outcome KILN_LLM_CANCELLED). kiln optimize stops
     * its llm agents with it instead of waiting out a reply. */
    int (*cancelled)(void *arg);
    void *cancel_arg;
} kiln_llm_config;

/* The defaults above; url and model NULL (then the agent is off). The command line's --llm-*
 * options (src/cli/options.c) set the fields within their bounds. */
void kiln_llm_config_default(kiln_llm_config *cfg);

/* The longest wait between two attempts, in seconds: a server's Retry-After is cut to it, and so
 * is the doubled back-off. */
#define KILN_LLM_BACKOFF_CAP_S 30.0
/* The environment variable the API key is read from when key_env is NULL. */
#define KILN_LLM_DEFAULT_KEY_ENV "KILN_LLM_API_KEY"

/* ---- what the agent is told ---- */

/* One failed child of the node (or a reply of the model that held no kernel). */
typedef struct {
    int64_t candidate_id; /* 0 for a reply without a kernel */
    const char *outcome;  /* "compile_error", "mismatch", ..., or "no_kernel" */
    const char *detail;   /* the evidence in words: log tail, error statistics, timeout reason */
} kiln_llm_feedback;

typedef struct {
    const kiln_problem *problem;
    const char *backend; /* "cuda" or "cpu" */
    /* the device; < 0 or NULL where unknown */
    const char *device_name;
    int cc_major, cc_minor, n_sms;
    double l2_bytes;
    double ceiling_gbps;   /* measured copy bandwidth */
    double ceiling_gflops; /* the flops ceiling the gate's speed of light uses for this problem */
    const char *ceiling_gflops_of; /* what it is ("bfloat16 tensor cores (arch table)"); NULL:
                                      the fp32 FMA rate */
    /* the node being expanded: NULL source for the problem's root (write one from scratch) */
    int64_t node_candidate_id;
    const char *node_source;
    double node_time_us; /* geomean of the medians over workloads, < 0 unknown */
    double node_sol_pct; /* geomean SOL %, < 0 unknown */
    double ref_time_us;  /* PyTorch eager (geomean), < 0 unknown */
    /* the problem's incumbent (its fastest proved kernel), 0 / <= 0 when there is none: at the
     * root the model is asked for a new kernel that beats it instead of a first one */
    int64_t best_candidate_id;
    double best_time_us;
    int n_feedback;
    const kiln_llm_feedback *feedback; /* most recent first */
    const char
        *task; /* optional: a line of direction from the caller ("try a one-pass algorithm") */

    void *owned; /* what kiln_llm_context_load allocated; kiln_llm_context_clear frees it */
} kiln_llm_context;

/* Fills ctx from the store for the node whose candidate is node_candidate_id (0: the root): its
 * source and latest verdict, the feedback of its failed children and of the model's replies for it
 * that held no kernel (most recent first, at most max_feedback), the device and ceilings of the
 * problem's most recent gate result that names them, the reference's time, and the problem's
 * incumbent with its time. ctx must start
 * zeroed (or be one this function filled before); ctx->problem, ctx->backend and ctx->task are the
 * caller's; device fields the caller set (> 0 / non-NULL) are kept. KILN_ERR_INVALID when the
 * candidate is not one of the problem's. */
int kiln_llm_context_load(kiln_store *s, int64_t problem_id, int64_t node_candidate_id,
                          int max_feedback, kiln_llm_context *ctx, kiln_err *err);
/* Frees what kiln_llm_context_load allocated (the pointers into it become invalid). */
void kiln_llm_context_clear(kiln_llm_context *ctx);

/* The user message kiln sends (problem, signature, workloads, device, node, feedback, the ABI of
 * docs/abi.md, the answer's form). Heap string; the caller frees. */
char *kiln_llm_prompt(const kiln_llm_context *ctx);

/* ---- asking ---- */

typedef enum {
    KILN_LLM_KERNEL,      /* a kernel came back (it still has to pass the gate) */
    KILN_LLM_NO_KERNEL,   /* a reply, but no kernel in it (prose, cut off, too large, not JSON) */
    KILN_LLM_TIMEOUT,     /* no reply within timeout_s, on every attempt */
    KILN_LLM_HTTP_ERROR,  /* the endpoint answered with an error status (after the retries) */
    KILN_LLM_UNREACHABLE, /* no connection (refused, DNS, TLS) on every attempt */
    KILN_LLM_BUDGET,      /* the token budget is spent: nothing was asked */
    KILN_LLM_CANCELLED,   /* cfg->cancelled said stop before a reply came */
    KILN_LLM_OUTCOME_COUNT
} kiln_llm_outcome;

/* "kernel", "no_kernel", "timeout", "http_error", "unreachable", "budget", "cancelled". */
const char *kiln_llm_outcome_name(kiln_llm_outcome o);

typedef struct {
    kiln_llm_outcome outcome;
    char reason[512]; /* for people: "reply too large (over 1048576 bytes)", "HTTP 500 ..." */
    int http_status;  /* of the last attempt; 0 when none */
    int attempts;     /* requests sent */
    int64_t prompt_tokens, completion_tokens, total_tokens; /* the reply's usage, -1 unknown */
    int64_t run_tokens;  /* tokens used by the run (or this process) after this exchange */
    double latency_ms;   /* from the first request to the last byte, back-off included */
    int64_t exchange_id; /* the llm_exchange row, 0 when not stored */
} kiln_llm_status;

/* Asks the endpoint for one kernel for ctx. Returns KILN_OK whenever there is an outcome (any value
 * of status->outcome, failures included: they are data), and then *kernel_source is a heap string
 * (the whole candidate file; caller frees) exactly when the outcome is KILN_LLM_KERNEL, else NULL.
 * Returns KILN_ERR_INVALID (with err) only for a configuration that cannot work: no url, no model
 * and none listed, a malformed url. Never aborts on anything the endpoint sends. */
int kiln_llm_propose(const kiln_llm_config *cfg, const kiln_llm_context *ctx, char **kernel_source,
                     kiln_llm_status *status, kiln_err *err);

/* ---- parts, exposed for tests ---- */

/* The one kernel in a model's message text: the first fenced code block (``` or ~~~, any info
 * string) that holds "// kiln: launch", `extern "C"`, __global__ or kiln_kernel. Text inside
 * <think>...</think> is ignored. Returns a heap copy of the block's body, or NULL with why in
 * reason. Safe on any bytes. */
char *kiln_llm_extract_kernel(const char *text, size_t len, char *reason, size_t reason_len);

/* The chat-completions URL for a base URL (docs/agents.md: URL forms). Heap string. */
char *kiln_llm_endpoint(const char *base, const char *suffix);

#endif
