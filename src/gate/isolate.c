/* isolate.c: runs the gate child (eval.c) in a forked process under a watchdog and assembles the
 * result object of docs/gate.md from the lines it streams.
 *
 * The parent never touches the device: CUDA state does not survive fork, and a candidate that
 * faults or hangs must cost only the child. The watchdog's limit applies to the silence between two
 * lines of the child, and the child speaks before and after every run of the candidate, so the
 * limit bounds one run (plus its check) rather than the whole evaluation. Compilation and device
 * set-up get a longer limit. When the child goes silent too long it is killed (timeout); when it
 * dies of a signal, or exits without a verdict, the outcome is crashed, with the phase it was in.
 */
#include "gate.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char phase[32];
    int workload; /* -1 outside workloads */
    cJSON *result;
    cJSON *workloads;
    int have_outcome;
    char *fatal;
} watch_state;

static void handle_line(watch_state *st, char *line) {
    char *rest = strchr(line, ' ');
    if (rest)
        *rest++ = 0;
    else
        rest = line + strlen(line);
    if (strcmp(line, "phase") == 0) {
        char name[32] = {0};
        int w = -1, s = -1;
        if (sscanf(rest, "%31s %d %d", name, &w, &s) >= 1) {
            snprintf(st->phase, sizeof st->phase, "%s", name);
            st->workload = w;
        }
    } else if (strcmp(line, "device") == 0) {
        cJSON *d = cJSON_Parse(rest);
        if (d)
            cJSON_ReplaceItemInObjectCaseSensitive(st->result, "device", d);
    } else if (strcmp(line, "compiled") == 0) {
        cJSON_ReplaceItemInObjectCaseSensitive(st->result, "compile_s",
                                               cJSON_CreateNumber(atof(rest)));
    } else if (strcmp(line, "workload") == 0) {
        cJSON *w = cJSON_Parse(rest);
        if (w)
            cJSON_AddItemToArray(st->workloads, w);
    } else if (strcmp(line, "outcome") == 0) {
        char *ev = strchr(rest, ' ');
        if (ev)
            *ev++ = 0;
        if (kiln_outcome_parse(rest) >= 0) {
            cJSON_ReplaceItemInObjectCaseSensitive(st->result, "outcome", cJSON_CreateString(rest));
            cJSON *e = ev ? cJSON_Parse(ev) : NULL;
            cJSON_ReplaceItemInObjectCaseSensitive(st->result, "evidence",
                                                   e ? e : cJSON_CreateObject());
            st->have_outcome = 1;
        }
    } else if (strcmp(line, "fatal") == 0) {
        free(st->fatal);
        st->fatal = xstrdup(rest);
    }
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGILL:
        return "SIGILL";
    case SIGABRT:
        return "SIGABRT";
    case SIGKILL:
        return "SIGKILL";
    case SIGTERM:
        return "SIGTERM";
    case SIGTRAP:
        return "SIGTRAP";
    case SIGSYS:
        return "SIGSYS";
    }
    return "signal";
}

static void set_outcome(watch_state *st, kiln_outcome o, cJSON *ev) {
    cJSON_ReplaceItemInObjectCaseSensitive(st->result, "outcome",
                                           cJSON_CreateString(kiln_outcome_name(o)));
    cJSON_ReplaceItemInObjectCaseSensitive(st->result, "evidence", ev);
    st->have_outcome = 1;
}

static void add_phase(cJSON *ev, const watch_state *st) {
    cJSON_AddStringToObject(ev, "phase", st->phase[0] ? st->phase : "init");
    if (st->workload >= 0)
        cJSON_AddNumberToObject(ev, "workload_index", st->workload);
}

static void summarise(cJSON *result, int n_workloads) {
    cJSON *ws = cJSON_GetObjectItemCaseSensitive(result, "workloads");
    int proved = 0, timed = 0;
    double log_t = 0, log_sol = 0, log_s = 0;
    int n_s = 0;
    cJSON *w;
    cJSON_ArrayForEach(w, ws) {
        proved++;
        cJSON *t = cJSON_GetObjectItemCaseSensitive(w, "time_us");
        cJSON *med = cJSON_GetObjectItemCaseSensitive(t, "median");
        cJSON *sol = cJSON_GetObjectItemCaseSensitive(w, "sol_pct");
        cJSON *s = cJSON_GetObjectItemCaseSensitive(w, "sol_score");
        if (cJSON_IsNumber(med) && med->valuedouble > 0) {
            timed++;
            log_t += log(med->valuedouble);
            if (cJSON_IsNumber(sol) && sol->valuedouble > 0)
                log_sol += log(sol->valuedouble);
        }
        if (cJSON_IsNumber(s) && s->valuedouble > 0) {
            log_s += log(s->valuedouble);
            n_s++;
        }
    }
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddNumberToObject(sum, "workloads", n_workloads);
    cJSON_AddNumberToObject(sum, "proved", proved);
    cJSON_AddNumberToObject(sum, "timed", timed);
    if (timed) {
        cJSON_AddNumberToObject(sum, "time_us_geomean", exp(log_t / timed));
        cJSON_AddNumberToObject(sum, "sol_pct_geomean", exp(log_sol / timed));
    } else {
        cJSON_AddNullToObject(sum, "time_us_geomean");
        cJSON_AddNullToObject(sum, "sol_pct_geomean");
    }
    if (n_s)
        cJSON_AddNumberToObject(sum, "sol_score_geomean", exp(log_s / n_s));
    else
        cJSON_AddNullToObject(sum, "sol_score_geomean");
    cJSON_ReplaceItemInObjectCaseSensitive(result, "summary", sum);
}

cJSON *kiln_gate_eval(const kiln_problem *p, const kiln_refdata *ref, const char *kernel_path,
                      const kiln_gate_options *opt) {
    watch_state st;
    memset(&st, 0, sizeof st);
    st.workload = -1;
    st.result = cJSON_CreateObject();
    cJSON_AddNumberToObject(st.result, "kiln_eval", 1);
    cJSON_AddStringToObject(st.result, "problem", p->name);
    cJSON_AddStringToObject(st.result, "problem_dir", p->dir);
    cJSON_AddStringToObject(st.result, "kernel", kernel_path);
    cJSON_AddStringToObject(st.result, "backend", opt->backend);
    cJSON_AddNullToObject(st.result, "device");
    cJSON_AddNullToObject(st.result, "outcome");
    cJSON_AddNullToObject(st.result, "evidence");
    cJSON_AddNullToObject(st.result, "compile_s");
    st.workloads = cJSON_AddArrayToObject(st.result, "workloads");
    cJSON_AddNullToObject(st.result, "summary");

    char *source = NULL;
    kiln_err err;
    if (kiln_read_file(kernel_path, &source, NULL, &err) != KILN_OK) {
        cJSON_AddStringToObject(st.result, "error", err.msg);
        return st.result;
    }

    int fds[2];
    if (pipe(fds) != 0) {
        cJSON_AddStringToObject(st.result, "error", "pipe failed");
        free(source);
        return st.result;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        cJSON_AddStringToObject(st.result, "error", "fork failed");
        free(source);
        close(fds[0]);
        close(fds[1]);
        return st.result;
    }
    if (pid == 0) {
        close(fds[0]);
        /* A pipe whose reader died must not kill the child with SIGPIPE mid-run. */
        signal(SIGPIPE, SIG_IGN);
        kiln_gate_eval_here(p, ref, kernel_path, source, opt, fds[1]);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    free(source);

    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    int timed_out = 0;
    double long_limit = opt->timeout_s > 120 ? opt->timeout_s : 120;
    for (;;) {
        int setup = st.phase[0] == 0 || strcmp(st.phase, "init") == 0 ||
                    strcmp(st.phase, "ceilings") == 0 || strcmp(st.phase, "compile") == 0 ||
                    strcmp(st.phase, "load") == 0;
        double limit = setup ? long_limit : opt->timeout_s;
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(limit * 1000));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            cJSON *ev = cJSON_CreateObject();
            add_phase(ev, &st);
            cJSON_AddNumberToObject(ev, "limit_s", limit);
            set_outcome(&st, KILN_OUTCOME_TIMEOUT, ev);
            break;
        }
        if (len + 4096 > cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t got = read(fds[0], buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            *nl = 0;
            handle_line(&st, start);
            start = nl + 1;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
    }
    free(buf);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!timed_out && !st.have_outcome && !st.fatal) {
        cJSON *ev = cJSON_CreateObject();
        add_phase(ev, &st);
        if (WIFSIGNALED(status)) {
            cJSON_AddStringToObject(ev, "signal", signal_name(WTERMSIG(status)));
            char *e = xasprintf("the gate child died of %s (signal %d)",
                                signal_name(WTERMSIG(status)), WTERMSIG(status));
            cJSON_AddStringToObject(ev, "error", e);
            free(e);
        } else {
            cJSON_AddNullToObject(ev, "signal");
            char *e = xasprintf("the gate child exited with status %d before a verdict",
                                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            cJSON_AddStringToObject(ev, "error", e);
            free(e);
        }
        set_outcome(&st, KILN_OUTCOME_CRASHED, ev);
    }
    if (st.fatal && !st.have_outcome) {
        cJSON_AddStringToObject(st.result, "error", st.fatal);
    }
    free(st.fatal);
    summarise(st.result, p->n_workloads);
    return st.result;
}
