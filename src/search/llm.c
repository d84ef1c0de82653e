/* llm.c: the `llm` agent: one chat-completions request to an OpenAI-compatible endpoint per
 * proposal, the extraction of one kernel from the reply, and the record of the exchange in the
 * store (the prompt and its context are llm_prompt.c's).
 *
 * Why a reply is untrusted, and how every failure becomes an outcome.
 *
 * A language model is a remote program kiln does not control, reached over a network kiln does not
 * control, behind a server kiln did not write. Whatever comes back is input in the strictest sense:
 * it may be a perfect kernel, a kernel that does not compile, a polite paragraph with no code,
 * three code blocks of which one is the kernel, a block cut off by max_tokens, a "thinking" section
 * full of half-kernels, an HTML error page from a proxy, a JSON object of the wrong shape, invalid
 * UTF-8, a body of a gigabyte, or nothing at all after a minute. None of these may take the search
 * down, and none may be mistaken for another: the search learns from the difference between "the
 * model wrote a kernel that is wrong" (the gate's `mismatch`, fed back to the model) and "the model
 * wrote no kernel" (`no_kernel`, fed back too) and "the endpoint is down" (`unreachable`, not the
 * model's fault, nothing to feed back).
 *
 * So the agent is a function from a context to an outcome, never to a crash:
 *   - transport: libcurl with a connect timeout and a total timeout per request; 5xx, 429, timeouts
 *     and lost connections are retried a bounded number of times with exponential back-off (a
 *     Retry-After is honoured up to the same cap), anything else is final; the outcomes are
 *     `timeout`, `http_error`, `unreachable`, and `cancelled` when the caller (kiln optimize, on
 *     its way out) abandons a request rather than wait out its reply;
 *   - size: the body is read into a buffer that refuses to grow past max_reply_bytes (a declared
 *     Content-Length over it is refused before the first byte of the body), so a runaway server
 *     costs at most that much memory: `no_kernel`, "reply too large";
 *   - shape: the body must parse as JSON (cJSON, nesting-limited) and hold
 * choices[0].message.content as text (or an array of text parts); anything else is `no_kernel` with
 * the reason;
 *   - content: exactly one kernel is taken: the first fenced block that looks like a candidate (a
 *     `// kiln: launch` line, extern "C", __global__, kiln_kernel), outside <think> sections; a
 * reply cut off by max_tokens without a closed kernel block is `no_kernel` too. Bytes that are not
 *     UTF-8 are replaced, so that the store, the dashboard and JSON readers never choke on them;
 *   - the kernel itself proves nothing: it goes through the same gate as every other candidate,
 *     where compile errors, wrong answers, hangs and crashes are outcomes of their own.
 *
 * The API key is a secret of the user's environment. It is read from the variable named by
 * key_env at the moment of the request, put in one request header, and nowhere else: not in the
 * request body kiln stores, not in a log, not in a message. A server that echoes it back (some
 * error pages quote the Authorization header) has the key replaced by "***" in everything kiln
 * keeps or prints of its reply. URLs are shown without user:password@ and without a query string.
 *
 * Every exchange (the exact request body, the reply, the outcome, the tokens, the latency) is a row
 * of llm_exchange in the run's store, so the dashboard's candidate page can show what the model was
 * told and what it said, and the token budget is the run's, across agent processes and resumes. */
#include "llm.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "llm_impl.h"

#define LLM_STORED_BODY_MAX (64 * 1024) /* of a reply that is not a chat completion */

/* ---------------------------------------------------------------------------------------------
 * Small helpers: secrets, time.
 * --------------------------------------------------------------------------------------------- */

/* One line of printable ASCII for messages: other bytes become '?', runs of space one space. */
static void ascii_line(char *dst, size_t cap, const char *src, size_t n) {
    size_t o = 0;
    int space = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            if (!space && o)
                dst[o++] = ' ';
            space = 1;
            continue;
        }
        space = 0;
        dst[o++] = (c >= 0x21 && c < 0x7F) ? (char)c : '?';
    }
    while (o && dst[o - 1] == ' ')
        o--;
    dst[o] = 0;
}

/* Replaces every occurrence of secret in s (in place) by "***" (s only shrinks: a key is longer
 * than three bytes, shorter ones are not looked for). */
static void scrub(char *s, const char *secret) {
    if (!s || !secret)
        return;
    size_t k = strlen(secret);
    if (k < 4)
        return;
    char *hit;
    while ((hit = strstr(s, secret))) {
        memcpy(hit, "***", 3);
        memmove(hit + 3, hit + k, strlen(hit + k) + 1);
    }
}

/* The API key from the environment, or NULL. */
static const char *api_key(const kiln_llm_config *cfg) {
    const char *name = cfg->key_env && *cfg->key_env ? cfg->key_env : KILN_LLM_DEFAULT_KEY_ENV;
    const char *key = getenv(name);
    return key && *key ? key : NULL;
}

/* A URL as it may be shown: without user:password@ and without ?query / #fragment. */
static char *url_shown(const char *url) {
    llm_buf b = {0};
    const char *p = url;
    const char *scheme = strstr(url, "://");
    const char *host = scheme ? scheme + 3 : url;
    llm_buf_add(&b, url, (size_t)(host - url));
    const char *end = host + strcspn(host, "/?#");
    const char *at = memchr(host, '@', (size_t)(end - host));
    p = at ? at + 1 : host;
    size_t rest = strcspn(p, "?#");
    llm_buf_add(&b, p, rest);
    if (p[rest])
        llm_buf_puts(&b, "?...");
    return llm_buf_take(&b);
}

static int cancelled(const kiln_llm_config *cfg) {
    return cfg->cancelled && cfg->cancelled(cfg->cancel_arg);
}

/* Sleeps s seconds, in slices of at most 0.2 s while cfg can cancel; returns 1 when cancelled. */
static int sleep_s(const kiln_llm_config *cfg, double s) {
    while (s > 0) {
        if (cancelled(cfg))
            return 1;
        double slice = cfg->cancelled && s > 0.2 ? 0.2 : s;
        struct timespec ts = {(time_t)slice, (long)((slice - floor(slice)) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        s -= slice;
    }
    return cancelled(cfg);
}

/* ---------------------------------------------------------------------------------------------
 * Configuration.
 * --------------------------------------------------------------------------------------------- */

void kiln_llm_config_default(kiln_llm_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->temperature = 0.2;
    cfg->max_tokens = 8192;
    cfg->connect_timeout_s = 10;
    cfg->timeout_s = 300;
    cfg->retries = 2;
    cfg->backoff_s = 2;
    cfg->max_reply_bytes = 1 << 20;
    cfg->max_feedback = 6;
}

const char *kiln_llm_outcome_name(kiln_llm_outcome o) {
    static const char *names[] = {"kernel",      "no_kernel", "timeout",  "http_error",
                                  "unreachable", "budget",    "cancelled"};
    return (unsigned)o < KILN_LLM_OUTCOME_COUNT ? names[o] : "unknown";
}

char *kiln_llm_endpoint(const char *base, const char *suffix) {
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    char *b = xstrndup(base, n);
    static const char cc[] = "/chat/completions";
    size_t lc = sizeof cc - 1;
    if (n >= lc && strcmp(b + n - lc, cc) == 0) {
        if (strcmp(suffix, "chat/completions") == 0)
            return b;
        b[n - lc] = 0; /* .../v1/chat/completions -> .../v1/models */
    }
    const char *scheme = strstr(b, "://");
    const char *path = scheme ? strchr(scheme + 3, '/') : NULL;
    char *out = path ? xasprintf("%s/%s", b, suffix) : xasprintf("%s/v1/%s", b, suffix);
    free(b);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * Kernel extraction.
 * --------------------------------------------------------------------------------------------- */

static int looks_like_kernel(const char *s, size_t n) {
    static const char *marks[] = {"extern \"C\"", "__global__", "kiln_kernel"};
    char *t = xstrndup(s, n);
    int yes = 0;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0] && !yes; i++)
        yes = strstr(t, marks[i]) != NULL;
    /* "// kiln: launch" with any spacing */
    for (const char *p = t; !yes && (p = strstr(p, "kiln:")); p += 5) {
        const char *q = p + 5;
        while (*q == ' ' || *q == '\t')
            q++;
        yes = strncmp(q, "launch", 6) == 0;
    }
    free(t);
    return yes;
}

/* Drops <think>...</think> sections (an unclosed one runs to the end). */
static char *strip_think(const char *text, size_t len) {
    llm_buf b = {0};
    size_t i = 0;
    while (i < len) {
        const char *open = NULL;
        for (size_t k = i; k + 7 <= len; k++)
            if (memcmp(text + k, "<think>", 7) == 0) {
                open = text + k;
                break;
            }
        if (!open) {
            llm_buf_add(&b, text + i, len - i);
            break;
        }
        llm_buf_add(&b, text + i, (size_t)(open - text) - i);
        size_t k = (size_t)(open - text) + 7;
        const char *close = NULL;
        for (; k + 8 <= len; k++)
            if (memcmp(text + k, "</think>", 8) == 0) {
                close = text + k;
                break;
            }
        if (!close)
            break;
        i = (size_t)(close - text) + 8;
    }
    return llm_buf_take(&b);
}

/* kiln_llm_extract_kernel, and *closed says whether the block taken had its closing fence. */
static char *extract_kernel(const char *text, size_t len, int *closed, char *reason,
                            size_t reason_len) {
    char dummy[8];
    if (!reason) {
        reason = dummy;
        reason_len = sizeof dummy;
    }
    reason[0] = 0;
    if (closed)
        *closed = 0;
    if (!text)
        len = 0;
    char *t = llm_utf8_clean(text ? text : "", len);
    char *body = strip_think(t, strlen(t));
    free(t);
    int n_blocks = 0, n_unclosed = 0;
    char *found = NULL;
    const char *p = body;
    while (*p && !found) {
        /* a line: [spaces] ``` or ~~~ (3 or more) [info] */
        const char *eol = p + strcspn(p, "\n");
        const char *q = p;
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        char fc = *q;
        size_t run = 0;
        if (fc == '`' || fc == '~')
            while (q + run < eol && q[run] == fc)
                run++;
        int opening = run >= 3;
        if (opening && fc == '`' && memchr(q + run, '`', (size_t)(eol - (q + run))))
            opening = 0; /* ```inline``` is not a fence */
        if (!opening) {
            p = *eol ? eol + 1 : eol;
            continue;
        }
        /* the block's body runs to a line of >= run fence characters and nothing else */
        const char *start = *eol ? eol + 1 : eol;
        const char *line = start, *end = NULL, *after = NULL;
        while (*line) {
            const char *le = line + strcspn(line, "\n");
            const char *r = line;
            while (r < le && (*r == ' ' || *r == '\t'))
                r++;
            size_t k = 0;
            while (r + k < le && r[k] == fc)
                k++;
            const char *rest = r + k;
            while (rest < le && (*rest == ' ' || *rest == '\t' || *rest == '\r'))
                rest++;
            if (k >= run && rest == le) {
                end = line;
                after = *le ? le + 1 : le;
                break;
            }
            line = *le ? le + 1 : le;
        }
        n_blocks++;
        int is_closed = end != NULL;
        if (!end) {
            n_unclosed++;
            end = start + strlen(start);
            after = end;
        }
        if (looks_like_kernel(start, (size_t)(end - start))) {
            found = xstrndup(start, (size_t)(end - start));
            if (closed)
                *closed = is_closed;
        }
        p = after;
    }
    free(body);
    if (found) {
        /* a body of only whitespace is nothing */
        const char *s = found;
        while (*s && isspace((unsigned char)*s))
            s++;
        if (*s)
            return found;
        free(found);
        snprintf(reason, reason_len, "the kernel block is empty");
        return NULL;
    }
    if (n_blocks == 0)
        snprintf(reason, reason_len, "no fenced code block in the reply");
    else
        snprintf(reason, reason_len,
                 "%d code block%s%s, none of them a kernel (no \"// kiln: launch\" line, extern "
                 "\"C\", __global__ or kiln_kernel)",
                 n_blocks, n_blocks == 1 ? "" : "s", n_unclosed ? " (one not closed)" : "");
    return NULL;
}

char *kiln_llm_extract_kernel(const char *text, size_t len, char *reason, size_t reason_len) {
    return extract_kernel(text, len, NULL, reason, reason_len);
}

/* ---------------------------------------------------------------------------------------------
 * The store: llm_exchange.
 * --------------------------------------------------------------------------------------------- */

/* Tokens the run used so far: the store's sum, or this process's count. */
static int64_t process_tokens;

static int64_t tokens_used(const kiln_llm_config *cfg) {
    int64_t n = process_tokens;
    if (cfg->store && kiln_store_llm_tokens(cfg->store, &n, NULL) != KILN_OK)
        n = process_tokens;
    return n;
}

static int64_t exchange_insert(const kiln_llm_config *cfg, int64_t parent_id, const char *model,
                               const char *request_json, const char *reply_text,
                               const kiln_llm_status *st, int64_t tokens) {
    if (!cfg->store)
        return 0;
    kiln_store_llm_exchange x = {.problem_id = cfg->problem_id,
                                 .parent_id = parent_id,
                                 .model = model,
                                 .request_json = request_json,
                                 .reply_text = reply_text,
                                 .status = kiln_llm_outcome_name(st->outcome),
                                 .reason = st->reason,
                                 .http_status = st->http_status,
                                 .attempts = st->attempts,
                                 .prompt_tokens = st->prompt_tokens,
                                 .completion_tokens = st->completion_tokens,
                                 .tokens = tokens,
                                 .latency_ms = st->latency_ms};
    int64_t id = 0;
    kiln_err err;
    if (kiln_store_llm_exchange_insert(cfg->store, &x, &id, &err) != KILN_OK)
        fprintf(stderr, "kiln llm: exchange not recorded: %s\n", err.msg);
    return id;
}

/* ---------------------------------------------------------------------------------------------
 * HTTP.
 * --------------------------------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct {
    char *p;
    size_t n, cap, limit;
    int too_large;
    double retry_after_s;
} reply_buf;

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud) {
    reply_buf *r = ud;
    size_t n = size * nmemb;
    char line[256];
    size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, ptr, k);
    line[k] = 0;
    if (strncasecmp(line, "content-length:", 15) == 0) {
        unsigned long long len = strtoull(line + 15, NULL, 10);
        if (len > r->limit) {
            r->too_large = 1;
            return 0; /* abandon before the body */
        }
    } else if (strncasecmp(line, "retry-after:", 12) == 0) {
        char *end = NULL;
        double s = strtod(line + 12, &end);
        if (end != line + 12 && s >= 0)
            r->retry_after_s = s;
    } else if (strncmp(line, "HTTP/", 5) == 0) {
        r->retry_after_s = -1; /* a new response (after a redirect or 100) */
    }
    return n;
}

/* libcurl's progress callback (about once a second while idle): non-zero abandons the transfer. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return cancelled(ud);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
    reply_buf *r = ud;
    size_t n = size * nmemb;
    if (r->n + n > r->limit) {
        r->too_large = 1;
        return 0;
    }
    if (r->n + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 16384;
        while (cap < r->n + n + 1)
            cap *= 2;
        if (cap > r->limit + 1)
            cap = r->limit + 1;
        r->p = xrealloc(r->p, cap);
        r->cap = cap;
    }
    memcpy(r->p + r->n, ptr, n);
    r->n += n;
    r->p[r->n] = 0;
    return n;
}

/* One request: POST body (or GET when body is NULL). Returns the curl code; *http the status. */
static CURLcode http_once(const kiln_llm_config *cfg, const char *url, const char *body,
                          reply_buf *r, long *http, char *curl_msg, size_t curl_msg_len) {
    pthread_once(&curl_once, curl_init);
    *http = 0;
    curl_msg[0] = 0;
    if (curl_init_rc != CURLE_OK) {
        snprintf(curl_msg, curl_msg_len, "libcurl failed to initialise");
        return curl_init_rc;
    }
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(curl_msg, curl_msg_len, "libcurl failed to initialise");
        return CURLE_FAILED_INIT;
    }
    struct curl_slist *hdr = NULL;
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Accept: application/json");
    hdr = curl_slist_append(hdr, "Expect:");
    const char *key = api_key(cfg);
    char *auth = key ? xasprintf("Authorization: Bearer %s", key) : NULL;
    if (auth)
        hdr = curl_slist_append(hdr, auth);
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kiln-llm/0.1");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* a redirect must not carry the key away */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(cfg->connect_timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(cfg->timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    if (cfg->cancelled) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)cfg);
    }
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    if (body) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http);
    snprintf(curl_msg, curl_msg_len, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    scrub(curl_msg, key);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    return rc;
}

static int retryable_curl(CURLcode rc) {
    return rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT ||
           rc == CURLE_GOT_NOTHING || rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
           rc == CURLE_PARTIAL_FILE;
}

/* The error text of an HTTP error body: {"error": {"message": ...}}, {"error": "..."},
 * {"detail": ...}, {"message": ...}, else the body's start. */
static void error_text(const char *body, size_t n, char *out, size_t cap) {
    out[0] = 0;
    if (!body || !n)
        return;
    cJSON *j = cJSON_ParseWithLength(body, n);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *m = NULL;
    if (cJSON_IsObject(e))
        m = cJSON_GetObjectItem(e, "message");
    else if (cJSON_IsString(e))
        m = e;
    if (!m)
        m = cJSON_GetObjectItem(j, "detail");
    if (!m)
        m = cJSON_GetObjectItem(j, "message");
    if (cJSON_IsString(m))
        ascii_line(out, cap, m->valuestring, strlen(m->valuestring));
    else
        ascii_line(out, cap, body, n < 300 ? n : 300);
    cJSON_Delete(j);
}

/* The model named by GET <base>/models: the first entry's id. */
static char *first_model(const kiln_llm_config *cfg, kiln_err *err) {
    char *url = kiln_llm_endpoint(cfg->url, "models");
    reply_buf r = {0};
    r.limit = 1 << 20;
    long http = 0;
    char msg[CURL_ERROR_SIZE + 64];
    CURLcode rc = http_once(cfg, url, NULL, &r, &http, msg, sizeof msg);
    char *model = NULL;
    char *shown = url_shown(url);
    if (rc == CURLE_OK && http == 200) {
        cJSON *j = cJSON_ParseWithLength(r.p ? r.p : "", r.n);
        const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
        const cJSON *id = cJSON_GetObjectItem(first, "id");
        if (cJSON_IsString(id) && id->valuestring[0])
            model = llm_utf8_clean(id->valuestring, strlen(id->valuestring));
        cJSON_Delete(j);
    }
    if (!model)
        kiln_errf(err, KILN_ERR_INVALID,
                  "no --llm-model given and %s names none (%s); pass --llm-model NAME", shown,
                  rc != CURLE_OK ? msg
                  : http != 200  ? "not HTTP 200"
                                 : "no data[0].id");
    free(shown);
    free(url);
    free(r.p);
    return model;
}

/* ---------------------------------------------------------------------------------------------
 * The proposal.
 * --------------------------------------------------------------------------------------------- */

static void set_reason(kiln_llm_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_reason(kiln_llm_status *st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->reason, sizeof st->reason, fmt, ap);
    va_end(ap);
}

static int64_t usage_num(const cJSON *usage, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(usage, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e15
               ? (int64_t)v->valuedouble
               : -1;
}

/* The text of choices[0].message.content: a string, or an array of {"type": "text", "text"}. */
static char *message_text(const cJSON *msg, size_t *len) {
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    if (cJSON_IsString(content)) {
        *len = strlen(content->valuestring);
        return xstrdup(content->valuestring);
    }
    if (cJSON_IsArray(content)) {
        llm_buf b = {0};
        const cJSON *part;
        cJSON_ArrayForEach(part, content) {
            const cJSON *t = cJSON_GetObjectItem(part, "text");
            if (cJSON_IsString(t))
                llm_buf_puts(&b, t->valuestring);
        }
        *len = b.n;
        return b.p ? llm_buf_take(&b) : NULL;
    }
    return NULL;
}

int kiln_llm_propose(const kiln_llm_config *cfg, const kiln_llm_context *ctx, char **kernel_source,
                     kiln_llm_status *status, kiln_err *err) {
    KILN_ASSERT(cfg && ctx && kernel_source && status);
    *kernel_source = NULL;
    memset(status, 0, sizeof *status);
    status->prompt_tokens = status->completion_tokens = status->total_tokens = -1;
    if (!cfg->url || !*cfg->url)
        return kiln_errf(err, KILN_ERR_INVALID, "the llm agent needs --llm-url");
    if (!strstr(cfg->url, "://"))
        return kiln_errf(err, KILN_ERR_INVALID, "--llm-url wants http://HOST:PORT[/v1]");
    if (!ctx->problem)
        return kiln_errf(err, KILN_ERR_INVALID, "the llm agent needs a problem");

    status->run_tokens = tokens_used(cfg);
    if (cfg->token_budget > 0 && status->run_tokens >= cfg->token_budget) {
        status->outcome = KILN_LLM_BUDGET;
        set_reason(status, "token budget spent: %lld of %lld tokens used",
                   (long long)status->run_tokens, (long long)cfg->token_budget);
        return KILN_OK;
    }

    if (cancelled(cfg)) {
        status->outcome = KILN_LLM_CANCELLED;
        set_reason(status, "cancelled before the request was sent");
        return KILN_OK;
    }

    /* the endpoint's model, asked once per process and URL */
    static char *listed_model, *listed_url;
    char *model = NULL;
    if (cfg->model && *cfg->model) {
        model = xstrdup(cfg->model);
    } else if (listed_model && strcmp(listed_url, cfg->url) == 0) {
        model = xstrdup(listed_model);
    } else {
        model = first_model(cfg, err);
        if (!model && cancelled(cfg)) {
            status->outcome = KILN_LLM_CANCELLED;
            set_reason(status, "cancelled while asking the endpoint for its model");
            return KILN_OK;
        }
        if (!model)
            return KILN_ERR_INVALID;
        free(listed_model);
        free(listed_url);
        listed_model = xstrdup(model);
        listed_url = xstrdup(cfg->url);
    }

    /* the request: what is sent is exactly what is stored */
    char *prompt = kiln_llm_prompt(ctx);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", model);
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", llm_system_prompt());
    cJSON_AddItemToArray(msgs, m);
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", prompt);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddNumberToObject(req, "temperature", cfg->temperature);
    cJSON_AddNumberToObject(req, "max_tokens", cfg->max_tokens);
    cJSON_AddBoolToObject(req, "stream", 0);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    free(prompt);

    char *url = kiln_llm_endpoint(cfg->url, "chat/completions");
    char *shown = url_shown(url);
    const char *key = api_key(cfg);
    reply_buf r = {0};
    r.limit = cfg->max_reply_bytes ? cfg->max_reply_bytes : (size_t)1 << 20;
    long http = 0;
    CURLcode rc = CURLE_OK;
    char cmsg[CURL_ERROR_SIZE + 64];
    double t0 = kiln_now_s();
    double backoff = cfg->backoff_s;
    for (int attempt = 0;; attempt++) {
        free(r.p);
        r.p = NULL;
        r.n = r.cap = 0;
        r.too_large = 0;
        r.retry_after_s = -1;
        rc = http_once(cfg, url, body, &r, &http, cmsg, sizeof cmsg);
        status->attempts = attempt + 1;
        status->http_status = (int)http;
        if (r.too_large || rc == CURLE_ABORTED_BY_CALLBACK)
            break;
        int again = (rc != CURLE_OK && retryable_curl(rc)) ||
                    (rc == CURLE_OK && (http == 429 || (http >= 500 && http <= 599)));
        if (!again || attempt >= cfg->retries)
            break;
        double wait = backoff;
        if (r.retry_after_s >= 0)
            wait = r.retry_after_s;
        if (wait > KILN_LLM_BACKOFF_CAP_S)
            wait = KILN_LLM_BACKOFF_CAP_S;
        if (sleep_s(cfg, wait)) {
            rc = CURLE_ABORTED_BY_CALLBACK; /* the last attempt's failure is not the outcome */
            break;
        }
        backoff = backoff * 2 > KILN_LLM_BACKOFF_CAP_S ? KILN_LLM_BACKOFF_CAP_S : backoff * 2;
    }
    status->latency_ms = (kiln_now_s() - t0) * 1e3;

    char *reply_text = NULL; /* what is stored as the reply */
    const char *tries = status->attempts > 1 ? " attempts" : " attempt";
    if (r.too_large) {
        status->outcome = KILN_LLM_NO_KERNEL;
        set_reason(status, "reply too large (over %zu bytes)", r.limit);
        size_t keep = r.n < LLM_STORED_BODY_MAX ? r.n : LLM_STORED_BODY_MAX;
        char *head = llm_utf8_clean(r.p ? r.p : "", keep);
        reply_text = xasprintf("%s\n[kiln: reply abandoned: over %zu bytes]", head, r.limit);
        free(head);
    } else if (rc == CURLE_ABORTED_BY_CALLBACK) {
        status->outcome = KILN_LLM_CANCELLED;
        set_reason(status, "abandoned by the caller after %d%s (kiln is stopping)",
                   status->attempts, tries);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        status->outcome = KILN_LLM_TIMEOUT;
        set_reason(status, "no reply from %s within %.3g s (%d%s)", shown, cfg->timeout_s,
                   status->attempts, tries);
    } else if (rc != CURLE_OK) {
        status->outcome = KILN_LLM_UNREACHABLE;
        set_reason(status, "%s: %s (%d%s)", shown, cmsg, status->attempts, tries);
    } else if (http < 200 || http > 299) {
        char etext[300];
        error_text(r.p, r.n, etext, sizeof etext);
        scrub(etext, key);
        status->outcome = KILN_LLM_HTTP_ERROR;
        set_reason(status, "HTTP %ld from %s after %d%s%s%s", http, shown, status->attempts, tries,
                   etext[0] ? ": " : "", etext);
        reply_text =
            llm_utf8_clean(r.p ? r.p : "", r.n < LLM_STORED_BODY_MAX ? r.n : LLM_STORED_BODY_MAX);
    } else {
        cJSON *j = cJSON_ParseWithLength(r.p ? r.p : "", r.n);
        const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *usage = cJSON_GetObjectItem(j, "usage");
        status->prompt_tokens = usage_num(usage, "prompt_tokens");
        status->completion_tokens = usage_num(usage, "completion_tokens");
        status->total_tokens = usage_num(usage, "total_tokens");
        if (status->total_tokens < 0 && status->prompt_tokens >= 0 &&
            status->completion_tokens >= 0)
            status->total_tokens = status->prompt_tokens + status->completion_tokens;
        size_t tlen = 0;
        char *text = choice ? message_text(cJSON_GetObjectItem(choice, "message"), &tlen) : NULL;
        const cJSON *fin = cJSON_GetObjectItem(choice, "finish_reason");
        int cut = cJSON_IsString(fin) && strcmp(fin->valuestring, "length") == 0;
        status->outcome = KILN_LLM_NO_KERNEL;
        if (!j) {
            set_reason(status, "the reply is not JSON (%zu bytes)", r.n);
        } else if (!choice) {
            const cJSON *e = cJSON_GetObjectItem(j, "error");
            char etext[300] = "";
            if (e)
                error_text(r.p, r.n, etext, sizeof etext);
            scrub(etext, key);
            set_reason(status, "the reply is not a chat completion (no choices[0])%s%s",
                       etext[0] ? ": " : "", etext);
        } else if (!text) {
            set_reason(status, "the reply has no message content");
        } else {
            char why[256];
            int closed = 0;
            char *kernel = extract_kernel(text, tlen, &closed, why, sizeof why);
            if (kernel && !closed && cut) {
                free(kernel);
                kernel = NULL;
                snprintf(why, sizeof why,
                         "the reply was cut off at max_tokens (%d) inside the kernel block",
                         cfg->max_tokens);
            } else if (!kernel && cut) {
                size_t l = strlen(why);
                snprintf(why + l, sizeof why - l, " (the reply was cut off at max_tokens %d)",
                         cfg->max_tokens);
            }
            if (kernel) {
                status->outcome = KILN_LLM_KERNEL;
                set_reason(status, "a kernel of %zu bytes", strlen(kernel));
                *kernel_source = kernel;
            } else {
                set_reason(status, "%s", why);
            }
        }
        if (text) {
            reply_text = llm_utf8_clean(text, tlen);
            free(text);
        } else {
            reply_text = llm_utf8_clean(r.p ? r.p : "",
                                        r.n < LLM_STORED_BODY_MAX ? r.n : LLM_STORED_BODY_MAX);
        }
        cJSON_Delete(j);
    }
    scrub(status->reason, key);
    scrub(reply_text, key);

    /* tokens: the reply's usage, else an estimate (4 bytes a token) so that a budget still binds */
    int64_t tokens = status->total_tokens;
    if (tokens < 0)
        tokens = (rc == CURLE_OK && !r.too_large)
                     ? (int64_t)((strlen(body) + (reply_text ? strlen(reply_text) : 0)) / 4)
                     : 0;
    process_tokens += tokens;
    status->exchange_id =
        exchange_insert(cfg, ctx->node_candidate_id, model, body, reply_text, status, tokens);
    status->run_tokens = cfg->store ? tokens_used(cfg) : process_tokens;

    free(reply_text);
    free(r.p);
    free(shown);
    free(url);
    free(body);
    free(model);
    return KILN_OK;
}
