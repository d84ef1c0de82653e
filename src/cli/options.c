/* options.c: the table of every command-line option of the C commands, the parser that reads argv
 * by it, and the help format generated from it (options.h says how a command uses them). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../gen/family.h"
#include "options.h"

/* What an option's value is, as parsed and checked. */
typedef enum {
    KIND_FLAG, /* no value: the field becomes 1 */
    KIND_INT,  /* a decimal integer in [min, max] */
    KIND_U64,  /* an unsigned 64-bit integer, decimal or 0x hex */
    KIND_REAL, /* a number in [min, max], or (min, max] with min_open */
    KIND_TEXT  /* a string, kept by pointer (argv outlives the command) */
} value_kind;

/* How the field the value lands in is declared (size_t counts as uint64_t: kiln is built LP64). */
typedef enum { C_INT, C_I64, C_U64, C_DOUBLE, C_STR } field_type;

/* The field_type of field f of struct T, found by the compiler, so that a row cannot disagree with
 * the struct it writes into (a field of another type does not compile). */
#define CTYPE_OF(T, f)                                                                             \
    _Generic(((T *)0)->f,                                                                          \
        int: C_INT,                                                                                \
        int64_t: C_I64,                                                                            \
        uint64_t: C_U64,                                                                           \
        double: C_DOUBLE,                                                                          \
        const char *: C_STR)

/* Which struct of kiln_cli_args holds the field. */
typedef enum { HOME_CLI, HOME_GATE, HOME_LLM, HOME_OPTIMIZE, HOME_WEB } value_home;

typedef struct {
    const char *name; /* the long option without its dashes */
    value_kind kind;
    const char *arg; /* the value's name in the help */
    double min, max; /* KIND_INT and KIND_REAL */
    int min_open;    /* KIND_REAL: min itself is refused */
    const char *choices;
    value_home home;
    size_t at; /* offsetof the field in its home */
    field_type ctype;
    int show_default; /* the help prints the field's value before parsing as the default */
    const char *dflt; /* the default in words, where a value would not say it */
    const char *help;
    /* A rule beyond the kind (a URL, the name of an environment variable): 0 when value passes,
     * else 1 with why filled. */
    int (*check)(const char *value, char *why, size_t cap);
    int optional_value; /* --serve[=PORT]: given alone, the field keeps its default */
} row;

#define BIG 1e9 /* the bound of counts that have no natural one */
#define HELP_COLUMN 24
#define HELP_WIDTH 100

static int check_backend(const char *value, char *why, size_t cap) {
    if (kiln_backend_find(value))
        return 0;
    snprintf(why, cap, "unknown backend '%s' (use cuda or cpu)", value);
    return 1;
}

static int check_family(const char *value, char *why, size_t cap) {
    if (kiln_family_find(value))
        return 0;
    size_t off = (size_t)snprintf(why, cap, "unknown family '%.100s'; families:", value);
    for (int i = 0; i < kiln_family_count() && off < cap; i++)
        off += (size_t)snprintf(why + off, cap - off, " %s", kiln_family_at(i)->name);
    return 1;
}

static int check_parent(const char *value, char *why, size_t cap) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (strcmp(value, "incumbent") == 0 || strcmp(value, "root") == 0 ||
        (value[0] && !*end && !errno && v >= 1))
        return 0;
    snprintf(why, cap, "--parent wants incumbent, root or a candidate id, got '%.200s'", value);
    return 1;
}

static int check_url(const char *value, char *why, size_t cap) {
    if (strstr(value, "://"))
        return 0;
    snprintf(why, cap, "--llm-url wants http://HOST:PORT[/v1], got '%.200s'", value);
    return 1;
}

static int check_env_name(const char *value, char *why, size_t cap) {
    if (value[0] && !strchr(value, '='))
        return 0;
    snprintf(why, cap,
             "--llm-key-env wants the NAME of an environment variable (the key itself never goes "
             "on the command line)");
    return 1;
}

#define FIELD(h, T, f) .home = h, .at = offsetof(T, f), .ctype = CTYPE_OF(T, f)
#define CLI(f) FIELD(HOME_CLI, kiln_cli_values, f)
#define GATE(f) FIELD(HOME_GATE, kiln_gate_options, f)
#define LLM(f) FIELD(HOME_LLM, kiln_llm_config, f)
#define OPTIMIZE(f) FIELD(HOME_OPTIMIZE, kiln_optimize_options, f)
#define WEB(f) FIELD(HOME_WEB, kiln_web_options, f)

static const row table[KILN_OPT_COUNT] = {
    [KILN_OPT_BACKEND] = {"backend", KIND_TEXT, "cuda|cpu", CLI(backend),
                          .help = "where candidates run", .check = check_backend},
    [KILN_OPT_DEVICE] = {"device", KIND_INT, "N", 0, 1024, GATE(device), .show_default = 1,
                         .help = "GPU ordinal"},
    [KILN_OPT_ITERS] = {"iters", KIND_INT, "N", 1, 100000, GATE(iters),
                        .dflt = "the gate's, per backend; docs/gate.md",
                        .help = "timed runs per workload"},
    [KILN_OPT_WARMUP] = {"warmup", KIND_INT, "N", 0, 100000, GATE(warmup),
                         .dflt = "the gate's, per backend; docs/gate.md",
                         .help = "untimed runs before timing"},
    [KILN_OPT_SETS] = {"sets", KIND_INT, "N", 1, 1000, GATE(max_sets),
                       .dflt = "all of the reference data's",
                       .help = "input sets proved per workload"},
    [KILN_OPT_TIMEOUT] = {"timeout", KIND_REAL, "S", 0, 86400, .min_open = 1, GATE(timeout_s),
                          .show_default = 1,
                          .help = "the longest one run of a kernel may take, in seconds"},
    [KILN_OPT_SEED] = {"seed", KIND_U64, "S", CLI(seed), .show_default = 1,
                       .help = "the seed of the command's random draws"},
    [KILN_OPT_REF_DIR] = {"ref-dir", KIND_TEXT, "DIR", CLI(ref_dir),
                          .dflt = "the problem's own kiln/ directory",
                          .help = "where the reference data lives or is written"},
    [KILN_OPT_NO_TIME] = {"no-time", KIND_FLAG, NULL, GATE(no_time), .help = "prove only"},
    [KILN_OPT_RETIME_NOISY] = {"retime-noisy", KIND_FLAG, NULL, GATE(retime_noisy),
                               .help = "on cpu too, time a workload whose spread is over 5 % once "
                                       "more and keep the steadier timing (always done on cuda)"},
    [KILN_OPT_JSON] = {"json", KIND_FLAG, NULL, CLI(json),
                       .help = "print the result as one JSON object on stdout"},
    [KILN_OPT_QUIET] = {"quiet", KIND_FLAG, NULL, CLI(quiet), .help = "no progress lines"},
    [KILN_OPT_FAMILY] = {"family", KIND_TEXT, "NAME", CLI(family),
                         .dflt = "every family that matches", .help = "only this family",
                         .check = check_family},
    [KILN_OPT_LIMIT] = {"limit", KIND_INT, "N", 1, BIG, CLI(limit), .dflt = "all of them",
                        .help = "at most N points per family"},
    [KILN_OPT_SAMPLE] = {"sample", KIND_TEXT, "even|random", .choices = "even|random", CLI(sample),
                         .show_default = 1,
                         .help = "how --limit picks the points: spread evenly over the valid "
                                 "space, or drawn uniformly at random"},
    [KILN_OPT_WHERE] = {"where", KIND_TEXT, "'NAME=V[,V..] ...'", CLI(where),
                        .help = "only the points whose parameters have these values (e.g. "
                                "'GW_WS=1 GW_BN=192,256'); the start point with these values "
                                "runs first and --limit takes the points nearest it"},
    [KILN_OPT_OUT] = {"out", KIND_TEXT, "DIR", CLI(out),
                      .dflt = "PROBLEM_DIR/kiln/sweep, or a temporary directory when that is not "
                              "writable",
                      .help = "where generated sources go"},
    [KILN_OPT_JSONL] = {"jsonl", KIND_TEXT, "FILE", CLI(jsonl),
                        .help = "also append each row to FILE as one JSON line as soon as it is "
                                "measured (a sweep cut short keeps its rows)"},
    [KILN_OPT_RESUME] = {"resume", KIND_FLAG, NULL, CLI(resume),
                         .help = "with --jsonl: points that FILE already has a verdict for are not "
                                 "run again (their rows join the table)"},
    [KILN_OPT_LIST] = {"list", KIND_FLAG, NULL, CLI(list),
                       .help = "print the matching families, their spaces and where a search "
                               "starts (--limit runs it first); run nothing"},
    [KILN_OPT_BUDGET] = {"budget", KIND_INT, "N", 1, BIG, OPTIMIZE(budget), .show_default = 1,
                         .help = "candidates per problem, across resumed runs"},
    [KILN_OPT_TIME] = {"time", KIND_REAL, "S", 0, BIG, .min_open = 1, OPTIMIZE(time_s),
                       .dflt = "no limit",
                       .help =
                           "stop making candidates S seconds after the command started (preparing "
                           "the problems counts); the library is written as at any end"},
    [KILN_OPT_AGENTS] = {"agents", KIND_INT, "K", 1, BIG, OPTIMIZE(agents),
                         .dflt = "2 on cpu, 4 on cuda", .help = "agent processes"},
    [KILN_OPT_SPECIALISTS] = {"specialists", KIND_TEXT, "LIST", OPTIMIZE(specialists),
                              .dflt = "geometry,algorithm,vector,fusion,random",
                              .help = "agent kinds, cycled over the agents: geometry, vector, "
                                      "algorithm, fusion, random"},
    [KILN_OPT_GATES] = {"gates", KIND_INT, "N", 1, BIG, OPTIMIZE(gates),
                        .dflt = "one per visible GPU; 1 on cpu", .help = "gate processes"},
    [KILN_OPT_TOP] = {"top", KIND_INT, "P", 1, BIG, OPTIMIZE(top), .dflt = "all",
                      .help = "only the P hottest problems that an agent can search (a family "
                              "matches; any with --llm-url), and those hotter than them, listed "
                              "as skipped"},
    [KILN_OPT_PLATEAU] = {"plateau", KIND_INT, "P", 0, BIG, OPTIMIZE(plateau), .show_default = 1,
                          .help = "results without a 1% gain before a draft opens; 0: no drafts"},
    [KILN_OPT_RETIME_ROUNDS] = {"retime-rounds", KIND_INT, "N", 1, BIG, OPTIMIZE(retime_rounds),
                                .show_default = 1,
                                .help = "rounds of the interleaved re-timing of a challenger"},
    [KILN_OPT_SERVE] = {"serve", KIND_INT, "[=PORT]", 0, 65535, WEB(port), .show_default = 1,
                        .optional_value = 1,
                        .help = "serve the dashboard (kiln serve) on 127.0.0.1:PORT while the "
                                "run goes"},
    [KILN_OPT_N] = {"n", KIND_INT, "N", 1, 100000, CLI(n_rounds), .show_default = 1,
                    .help = "proposals"},
    [KILN_OPT_PARENT] = {"parent", KIND_TEXT, "WHICH", CLI(parent), .show_default = 1,
                         .help = "the kernel the model improves: incumbent (the incumbent when "
                                 "there is one, else the root), root (always a kernel from "
                                 "scratch), or a candidate id",
                         .check = check_parent},
    [KILN_OPT_PORT] = {"port", KIND_INT, "P", 0, 65535, WEB(port), .show_default = 1,
                       .help = "port to listen on; 0 picks a free one"},
    [KILN_OPT_HOST] = {"host", KIND_TEXT, "H", WEB(host), .show_default = 1,
                       .help = "address to bind. The dashboard is served on loopback only unless H "
                               "says otherwise; another address makes it reachable from other "
                               "machines (kiln warns then)"},
    [KILN_OPT_POLL_MS] = {"poll-ms", KIND_INT, "N", 50, 60000, WEB(poll_ms), .show_default = 1,
                          .help = "how often the live feed looks at the store, in milliseconds"},
    [KILN_OPT_LLM_AGENTS] = {"llm-agents", KIND_INT, "N", 1, 16, OPTIMIZE(llm_agents), .dflt = "1",
                             .help = "agent processes that are llm agents (docs/agents.md); with "
                                     "--agents K they are N of the K, and at least one built-in "
                                     "agent stays"},
    [KILN_OPT_LLM_URL] = {"llm-url", KIND_TEXT, "URL", LLM(url), .dflt = "none: no llm agent",
                          .help = "OpenAI-compatible endpoint: http://HOST:PORT, .../v1 or "
                                  ".../v1/chat/completions (vLLM, llama.cpp server, Ollama, a "
                                  "hosted API)",
                          .check = check_url},
    [KILN_OPT_LLM_MODEL] = {"llm-model", KIND_TEXT, "NAME", LLM(model),
                            .dflt = "the first of GET /v1/models", .help = "the served model name"},
    [KILN_OPT_LLM_KEY_ENV] = {"llm-key-env", KIND_TEXT, "NAME", LLM(key_env),
                              .dflt = KILN_LLM_DEFAULT_KEY_ENV,
                              .help = "environment variable holding the API key, sent as a Bearer "
                                      "token and never stored",
                              .check = check_env_name},
    [KILN_OPT_LLM_TEMPERATURE] = {"llm-temperature", KIND_REAL, "T", 0, 2, LLM(temperature),
                                  .show_default = 1, .help = "sampling temperature"},
    [KILN_OPT_LLM_MAX_TOKENS] = {"llm-max-tokens", KIND_INT, "N", 16, 1000000, LLM(max_tokens),
                                 .show_default = 1, .help = "the reply's token limit"},
    [KILN_OPT_LLM_TIMEOUT] = {"llm-timeout", KIND_REAL, "S", 0.001, 86400, LLM(timeout_s),
                              .show_default = 1, .help = "seconds for one request, reply included"},
    [KILN_OPT_LLM_CONNECT_TIMEOUT] = {"llm-connect-timeout", KIND_REAL, "S", 0.001, 3600,
                                      LLM(connect_timeout_s), .show_default = 1,
                                      .help = "seconds to connect"},
    [KILN_OPT_LLM_RETRIES] = {"llm-retries", KIND_INT, "N", 0, 10, LLM(retries), .show_default = 1,
                              .help = "retries after a 5xx, 429, timeout or lost connection"},
    [KILN_OPT_LLM_BACKOFF] = {"llm-backoff", KIND_REAL, "S", 0, KILN_LLM_BACKOFF_CAP_S,
                              LLM(backoff_s), .show_default = 1,
                              .help = "seconds before the first retry, doubled for each next one "
                                      "up to the bound"},
    [KILN_OPT_LLM_TOKEN_BUDGET] = {"llm-token-budget", KIND_INT, "N", 0, 1e12, LLM(token_budget),
                                   .dflt = "no limit",
                                   .help = "ask no more once the run used N tokens; 0: no limit"},
    [KILN_OPT_LLM_MAX_REPLY] = {"llm-max-reply", KIND_INT, "BYTES", 1024, (double)(1 << 30),
                                LLM(max_reply_bytes), .show_default = 1,
                                .help = "a longer reply is no_kernel"},
    [KILN_OPT_LLM_FEEDBACK] = {"llm-feedback", KIND_INT, "N", 0, 64, LLM(max_feedback),
                               .show_default = 1,
                               .help = "failed children described in the prompt"},
};

void kiln_cli_args_init(kiln_cli_args *a) {
    memset(a, 0, sizeof *a);
    a->cli.sample = "even";
    a->cli.parent = "incumbent";
    a->cli.n_rounds = 3;
}

const char *kiln_cli_option_name(kiln_opt opt) {
    KILN_ASSERT((unsigned)opt < KILN_OPT_COUNT);
    return table[opt].name;
}

/* The field of row r in a, or NULL when the command gave no struct for its home. */
static void *field(const kiln_cli_args *a, const row *r) {
    char *base = NULL;
    switch (r->home) {
    case HOME_CLI:
        base = (char *)&a->cli;
        break;
    case HOME_GATE:
        base = (char *)a->gate;
        break;
    case HOME_LLM:
        base = (char *)a->llm;
        break;
    case HOME_OPTIMIZE:
        base = (char *)a->optimize;
        break;
    case HOME_WEB:
        base = (char *)a->web;
        break;
    }
    return base ? base + r->at : NULL;
}

/* "an integer in [1, 100000]": what the value must be, for the help and the error alike; "" when
 * the kind says nothing more than the help. */
static void bound_text(const row *r, char *out, size_t cap) {
    out[0] = 0;
    if (r->kind == KIND_INT)
        snprintf(out, cap, "an integer in [%.0f, %.0f]", r->min, r->max);
    else if (r->kind == KIND_REAL)
        snprintf(out, cap, "a number in %c%.15g, %.15g]", r->min_open ? '(' : '[', r->min, r->max);
    else if (r->kind == KIND_U64)
        snprintf(out, cap, "an unsigned 64-bit integer, decimal or 0x hex");
    else if (r->choices)
        snprintf(out, cap, "one of %s", r->choices);
}

/* Reads value into row r's field; 0, or 1 with why filled. */
static int set_value(const row *r, const char *value, kiln_cli_args *a, char *why, size_t cap) {
    void *f = field(a, r);
    KILN_ASSERT(f != NULL); /* a command listed a row whose home it did not give */
    /* a row whose kind does not fit its field's type is a mistake in the table */
    KILN_ASSERT(r->kind == KIND_INT    ? r->ctype != C_DOUBLE && r->ctype != C_STR
                : r->kind == KIND_U64  ? r->ctype == C_U64
                : r->kind == KIND_REAL ? r->ctype == C_DOUBLE
                : r->kind == KIND_TEXT ? r->ctype == C_STR
                                       : r->ctype == C_INT);
    if (r->kind == KIND_FLAG) {
        *(int *)f = 1;
        return 0;
    }
    if (!value) /* an optional value left out: the field keeps its default */
        return 0;
    char bound[160];
    bound_text(r, bound, sizeof bound);
    char *end = NULL;
    errno = 0;
    switch (r->kind) {
    case KIND_INT: {
        long long v = strtoll(value, &end, 10);
        if (!value[0] || *end || errno || (double)v < r->min || (double)v > r->max)
            goto bad;
        if (r->ctype == C_INT)
            *(int *)f = (int)v;
        else if (r->ctype == C_I64)
            *(int64_t *)f = v;
        else
            *(uint64_t *)f = (uint64_t)v;
        return 0;
    }
    case KIND_U64: {
        int hex = value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
        const char *digits = hex ? value + 2 : value;
        if (!(hex ? isxdigit((unsigned char)digits[0]) : isdigit((unsigned char)digits[0])))
            goto bad;
        unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
        if (*end || errno)
            goto bad;
        *(uint64_t *)f = v;
        return 0;
    }
    case KIND_REAL: {
        double v = strtod(value, &end);
        if (!value[0] || *end || !isfinite(v) || v < r->min || (r->min_open && v <= r->min) ||
            v > r->max)
            goto bad;
        *(double *)f = v;
        return 0;
    }
    case KIND_TEXT:
        if (r->check && r->check(value, why, cap))
            return 1;
        if (r->choices) {
            size_t n = strlen(value);
            const char *c = r->choices;
            int found = 0;
            while (*c && !found) {
                size_t k = strcspn(c, "|");
                found = n > 0 && k == n && strncmp(c, value, n) == 0;
                c += k + (c[k] == '|');
            }
            if (!found)
                goto bad;
        }
        *(const char **)f = value;
        return 0;
    case KIND_FLAG:
        break;
    }
bad:
    snprintf(why, cap, "--%s wants %s, got '%.200s'", r->name, bound, value);
    return 1;
}

int kiln_cli_usage_error(const kiln_cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see kiln %s --help\n", cmd->name);
    va_end(ap);
    return 2;
}

/* The line for an option getopt did not take: unknown, ambiguous (a prefix of several), a flag
 * given a value, a value left out. */
static int option_error(const kiln_cli_command *cmd, int c, const char *arg) {
    if (optopt >= 256) {
        const row *r = &table[cmd->use[optopt - 256].opt];
        if (c == ':')
            return kiln_cli_usage_error(cmd, "--%s wants a value", r->name);
        return kiln_cli_usage_error(cmd, "--%s takes no value", r->name);
    }
    if (optopt > 0 && optopt < 256)
        return kiln_cli_usage_error(cmd, "unknown option '-%c'", optopt);
    size_t n = strcspn(arg, "=");
    char matches[512] = "";
    int n_match = 0;
    if (n > 2 && strncmp(arg, "--", 2) == 0)
        for (int i = 0; i < cmd->n_use; i++) {
            const char *name = table[cmd->use[i].opt].name;
            if (strncmp(name, arg + 2, n - 2) == 0) {
                size_t off = strlen(matches);
                snprintf(matches + off, sizeof matches - off, "%s--%s", n_match ? ", " : "", name);
                n_match++;
            }
        }
    if (n_match > 1)
        return kiln_cli_usage_error(cmd, "ambiguous option '%.*s' (%s)", (int)n, arg, matches);
    return kiln_cli_usage_error(cmd, "unknown option '%.*s'", (int)n, arg);
}

int kiln_cli_parse(const kiln_cli_command *cmd, int argc, char **argv, kiln_cli_args *a,
                   int *first) {
    struct option *longopts = xcalloc((size_t)cmd->n_use + 2, sizeof *longopts);
    for (int i = 0; i < cmd->n_use; i++) {
        const row *r = &table[cmd->use[i].opt];
        longopts[i].name = r->name;
        longopts[i].has_arg = r->kind == KIND_FLAG ? no_argument
                              : r->optional_value  ? optional_argument
                                                   : required_argument;
        longopts[i].val = 256 + i;
    }
    longopts[cmd->n_use] = (struct option){"help", no_argument, 0, 'h'};
    int status = KILN_CLI_CONTINUE, c;
    optind = 1;
    opterr = 0;
    while (status == KILN_CLI_CONTINUE &&
           (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            kiln_cli_help(cmd, a, stdout);
            status = 0;
        } else if (c == '?' || c == ':') {
            status = option_error(cmd, c, argv[optind - 1]);
        } else {
            kiln_opt id = cmd->use[c - 256].opt;
            char why[512];
            if (set_value(&table[id], optarg, a, why, sizeof why)) {
                fprintf(stderr, "kiln %s: %s\n", cmd->name, why);
                status = 2;
            }
            a->given[id] = 1;
        }
    }
    free(longopts);
    *first = optind;
    return status;
}

/* ---------------------------------------------------------------------------------------------
 * The help format.
 * --------------------------------------------------------------------------------------------- */

/* Prints text word-wrapped to HELP_WIDTH, every line after the first indented by indent; the first
 * starts at column col (already printed). */
static void wrap(FILE *f, const char *text, int col, int indent) {
    const char *s = text;
    int at = col, fresh = 1;
    while (*s) {
        while (*s == ' ')
            s++;
        size_t n = strcspn(s, " ");
        if (!n)
            break;
        if (!fresh && at + 1 + (int)n > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            at = indent;
            fresh = 1;
        }
        if (!fresh) {
            fputc(' ', f);
            at++;
        }
        fprintf(f, "%.*s", (int)n, s);
        at += (int)n;
        fresh = 0;
        s += n;
    }
    fputc('\n', f);
}

/* The default of row r as the help shows it, or "" for none. */
static void default_text(const row *r, const kiln_cli_use *u, const kiln_cli_args *a, char *out,
                         size_t cap) {
    out[0] = 0;
    if (u->dflt || r->dflt) {
        snprintf(out, cap, "%s", u->dflt ? u->dflt : r->dflt);
        return;
    }
    const void *f = field(a, r);
    if (!r->show_default || !f)
        return;
    switch (r->ctype) {
    case C_INT:
        snprintf(out, cap, "%d", *(const int *)f);
        break;
    case C_I64:
        snprintf(out, cap, "%lld", (long long)*(const int64_t *)f);
        break;
    case C_U64: {
        unsigned long long v = *(const uint64_t *)f;
        snprintf(out, cap, v < 65536 ? "%llu" : "0x%llx", v);
        break;
    }
    case C_DOUBLE:
        snprintf(out, cap, "%g", *(const double *)f);
        break;
    case C_STR:
        if (*(const char *const *)f)
            snprintf(out, cap, "%s", *(const char *const *)f);
        break;
    }
}

static void option_line(FILE *f, const char *label, const char *text) {
    int n = fprintf(f, "  %s", label);
    if (n + 2 > HELP_COLUMN) {
        fprintf(f, "\n%*s", HELP_COLUMN, "");
    } else {
        fprintf(f, "%*s", HELP_COLUMN - n, "");
    }
    wrap(f, text, HELP_COLUMN, HELP_COLUMN);
}

void kiln_cli_help(const kiln_cli_command *cmd, const kiln_cli_args *a, FILE *f) {
    const char *u = cmd->usage;
    for (int line = 0; *u; line++) {
        size_t n = strcspn(u, "\n");
        fprintf(f, "%s kiln %s %.*s\n", line ? "      " : "usage:", cmd->name, (int)n, u);
        u += n + (u[n] == '\n');
    }
    fputc('\n', f);
    wrap(f, cmd->about, 0, 0);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < cmd->n_use; i++) {
        const kiln_cli_use *use = &cmd->use[i];
        const row *r = &table[use->opt];
        char label[96], bound[160], dflt[256];
        snprintf(label, sizeof label, "--%s%s%s", r->name, r->arg && !r->optional_value ? " " : "",
                 r->arg ? r->arg : "");
        bound_text(r, bound, sizeof bound);
        default_text(r, use, a, dflt, sizeof dflt);
        char *text =
            xasprintf("%s%s%s%s%s%s%s", use->help ? use->help : r->help,
                      bound[0] || dflt[0] ? " (" : "", bound, bound[0] && dflt[0] ? "; " : "",
                      dflt[0] ? "default: " : "", dflt, bound[0] || dflt[0] ? ")" : "");
        option_line(f, label, text);
        free(text);
    }
    option_line(f, "-h, --help", "this text");
    fprintf(f, "\nexit status:\n");
    const char *e = cmd->exit_status;
    while (*e) {
        size_t n = strcspn(e, "\n");
        size_t code = strcspn(e, " \n"); /* "2  bad usage...": the status, then its meaning */
        char *meaning = xstrndup(e + code, n - code);
        fprintf(f, "  %-4.*s", (int)code, e);
        wrap(f, meaning, 6, 6);
        free(meaning);
        e += n + (e[n] == '\n');
    }
    fprintf(f, "\nexample:\n  %s\n", cmd->example);
}
