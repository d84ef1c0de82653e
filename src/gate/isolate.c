/* isolate.c: the watchdog side of the gate: starts the gate process (service.c) in a forked child,
 * sends it one command per candidate, and assembles the result object of docs/gate.md from the
 * lines it streams.
 *
 * The parent never touches the device: CUDA state does not survive fork, and a candidate that
 * faults or hangs must cost only the child. The gate process bounds every run of a candidate
 * itself (cuda: it stops waiting for a kernel after --timeout; cpu: it kills the sandboxed runner)
 * and reports `timeout`; the watchdog here is the backstop for a gate process that stops answering
 * at all: each phase line says how long the phase may take, and a child silent for longer than that
 * (plus a margin) is killed. When the child dies of a signal, or exits without a verdict, the
 * outcome is crashed, with the phase it was in.
 */
#include "gate_impl.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char phase[32];
    int workload;         /* -1 outside workloads */
    double phase_limit_s; /* what the child said the phase may take (0: not said) */
    cJSON *result;
    cJSON *workloads;
    int have_outcome;
    int done; /* the session child's "done" line */
    char *fatal;
    double t0, phase_t0; /* when the evaluation began, when the current phase began */
    cJSON *phase_s;      /* seconds spent per phase, as the child's lines tell it */
} watch_state;

/* Adds the time since the current phase began to its total. */
static void phase_close(watch_state *st, double now) {
    if (!st->phase_s)
        st->phase_s = cJSON_CreateObject();
    if (st->phase[0]) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(st->phase_s, st->phase);
        if (v)
            cJSON_SetNumberValue(v, v->valuedouble + (now - st->phase_t0));
        else
            cJSON_AddNumberToObject(st->phase_s, st->phase, now - st->phase_t0);
    }
    st->phase_t0 = now;
}

static void handle_line(watch_state *st, char *line) {
    char *rest = strchr(line, ' ');
    if (rest)
        *rest++ = 0;
    else
        rest = line + strlen(line);
    if (strcmp(line, "phase") == 0) {
        char name[32] = {0};
        int w = -1, s = -1;
        double limit = 0;
        if (sscanf(rest, "%31s %d %d %lf", name, &w, &s, &limit) >= 1) {
            phase_close(st, kiln_now_s());
            snprintf(st->phase, sizeof st->phase, "%s", name);
            st->workload = w;
            st->phase_limit_s = limit;
        }
    } else if (strcmp(line, "device") == 0) {
        cJSON *d = cJSON_Parse(rest);
        if (d)
            cJSON_ReplaceItemInObjectCaseSensitive(st->result, "device", d);
    } else if (strcmp(line, "draw_seed") == 0) {
        cJSON_ReplaceItemInObjectCaseSensitive(st->result, "draw_seed", cJSON_CreateString(rest));
    } else if (strcmp(line, "candidate_output") == 0) {
        cJSON *o = cJSON_Parse(rest);
        const cJSON *had = cJSON_GetObjectItemCaseSensitive(st->result, "candidate_output");
        if (cJSON_IsString(o) && cJSON_IsString(had)) {
            char *both = xasprintf("%s%s", had->valuestring, o->valuestring);
            cJSON_ReplaceItemInObjectCaseSensitive(st->result, "candidate_output",
                                                   cJSON_CreateString(both));
            free(both);
            cJSON_Delete(o);
        } else if (cJSON_IsString(o)) {
            cJSON_AddItemToObject(st->result, "candidate_output", o);
        } else {
            cJSON_Delete(o);
        }
    } else if (strcmp(line, "library") == 0) {
        cJSON *l = cJSON_Parse(rest);
        cJSON_DeleteItemFromObjectCaseSensitive(st->result, "library");
        if (l)
            cJSON_AddItemToObject(st->result, "library", l);
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
    } else if (strcmp(line, "done") == 0) {
        st->done = 1;
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

/* The summary of docs/gate.md. Times and scores summarise a verdict of ok only: the workloads a
 * `slower` candidate was timed on are in its workloads list, but they are not all of them. */
static void summarise(cJSON *result, int n_workloads) {
    cJSON *ws = cJSON_GetObjectItemCaseSensitive(result, "workloads");
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(result, "outcome");
    int ok = cJSON_IsString(oc) && strcmp(oc->valuestring, "ok") == 0;
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
        if (ok && cJSON_IsNumber(med) && med->valuedouble > 0) {
            timed++;
            log_t += log(med->valuedouble);
            if (cJSON_IsNumber(sol) && sol->valuedouble > 0)
                log_sol += log(sol->valuedouble);
        }
        if (ok && cJSON_IsNumber(s) && s->valuedouble > 0) {
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

static void watch_init(watch_state *st, const kiln_problem *p, const char *kernel_path,
                       const kiln_gate_options *opt) {
    memset(st, 0, sizeof *st);
    st->workload = -1;
    st->result = cJSON_CreateObject();
    cJSON_AddNumberToObject(st->result, "kiln_eval", 1);
    cJSON_AddStringToObject(st->result, "problem", p->name);
    cJSON_AddStringToObject(st->result, "problem_dir", p->dir);
    cJSON_AddStringToObject(st->result, "kernel", kernel_path);
    cJSON_AddStringToObject(st->result, "backend", opt->backend);
    cJSON_AddNullToObject(st->result, "device");
    cJSON_AddNullToObject(st->result, "draw_seed");
    cJSON_AddNullToObject(st->result, "outcome");
    cJSON_AddNullToObject(st->result, "evidence");
    cJSON_AddNullToObject(st->result, "compile_s");
    st->workloads = cJSON_AddArrayToObject(st->result, "workloads");
    cJSON_AddNullToObject(st->result, "summary");
    st->t0 = st->phase_t0 = kiln_now_s();
}

/* Reads the child's lines from fd until end of file or, when until_done, its "done" line. The
 * limit applies to the silence between two lines; on timeout the child is killed and the outcome
 * is timeout. Returns 1 on timeout. */
static int watch(watch_state *st, int fd, pid_t pid, const kiln_gate_options *opt, int until_done) {
    size_t cap = 1 << 16, len = 0;
    char *buf = xmalloc(cap);
    int timed_out = 0;
    /* Setting up (opening the device, measuring its ceilings, compiling, loading a problem's data)
     * gets the long limit; a phase that states its own limit gets that plus a margin: the child
     * enforces the limit itself, this is for a child that stopped answering altogether. */
    double long_limit = opt->timeout_s > 300 ? opt->timeout_s : 300;
    while (!(until_done && st->done)) {
        int setup = st->phase[0] == 0 || strcmp(st->phase, "init") == 0 ||
                    strcmp(st->phase, "ceilings") == 0 || strcmp(st->phase, "compile") == 0 ||
                    strcmp(st->phase, "load") == 0;
        double stated = st->phase_limit_s > opt->timeout_s ? st->phase_limit_s : opt->timeout_s;
        double limit = setup ? long_limit : stated + 30;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(limit * 1000));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            if (!st->have_outcome) { /* a verdict the child sent before it went silent stands */
                cJSON *ev = cJSON_CreateObject();
                add_phase(ev, st);
                cJSON_AddNumberToObject(ev, "limit_s", limit);
                set_outcome(st, KILN_OUTCOME_TIMEOUT, ev);
            }
            break;
        }
        if (len + 4096 > cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            *nl = 0;
            handle_line(st, start);
            start = nl + 1;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
    }
    free(buf);
    return timed_out;
}

/* The verdict when the child ended (status from waitpid) without one, the error of a fatal, and
 * the summary. */
static void watch_finish(watch_state *st, const kiln_problem *p, int timed_out, int status) {
    if (!timed_out && !st->have_outcome && !st->fatal) {
        cJSON *ev = cJSON_CreateObject();
        add_phase(ev, st);
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
        set_outcome(st, KILN_OUTCOME_CRASHED, ev);
    }
    if (st->fatal && !st->have_outcome)
        cJSON_AddStringToObject(st->result, "error", st->fatal);
    free(st->fatal);
    st->fatal = NULL;
    summarise(st->result, p->n_workloads);
    /* where the evaluation's wall time went (the last phase ends with the verdict) */
    double now = kiln_now_s();
    phase_close(st, now);
    cJSON_AddItemToObject(st->result, "phase_s", st->phase_s);
    st->phase_s = NULL;
    cJSON_AddNumberToObject(st->result, "wall_s", now - st->t0);
}

static void reap(pid_t pid, int *status) {
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
}

/* ---- the session ---- */

struct kiln_gate_session {
    kiln_gate_options opt;
    char backend[16];
    kiln_gate_pair *pairs;
    int n_pairs, cap_pairs;
    int n_known; /* pairs that existed when the child was forked: the child can use only these */
    pid_t pid;   /* 0: no child */
    int sock;
    int evals; /* evaluations the current child has finished */
};

kiln_gate_session *kiln_gate_session_new(const kiln_gate_options *opt) {
    kiln_gate_session *s = xcalloc(1, sizeof *s);
    s->opt = *opt;
    snprintf(s->backend, sizeof s->backend, "%s", opt->backend);
    s->opt.backend = s->backend;
    s->sock = -1;
    return s;
}

static void session_stop(kiln_gate_session *s) {
    if (!s->pid)
        return;
    close(s->sock);
    s->sock = -1;
    /* end of file on its commands ends the child; a child busy elsewhere is killed */
    int status = 0;
    for (int i = 0; i < 200; i++) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR))
            break;
        if (i == 199) {
            kill(s->pid, SIGKILL);
            reap(s->pid, &status);
            break;
        }
        usleep(10000);
    }
    s->pid = 0;
    s->evals = 0;
}

static int session_start(kiln_gate_session *s) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* the other signals keep the dispositions of the caller (kiln optimize's gates ignore
         * Ctrl-C and let the coordinator stop them in order) */
        signal(SIGPIPE, SIG_IGN);
        kiln_gate_serve(s->pairs, s->n_pairs, &s->opt, sv[1], sv[1]);
        _exit(0);
    }
    close(sv[1]);
    s->pid = pid;
    s->sock = sv[0];
    s->n_known = s->n_pairs;
    s->evals = 0;
    return 0;
}

/* One evaluation through the session's child; *reused says whether that child had run others. */
static cJSON *session_eval_once(kiln_gate_session *s, int pi, const char *kernel_path,
                                const kiln_gate_options *opt, int *reused) {
    const kiln_problem *p = s->pairs[pi].p;
    watch_state st;
    watch_init(&st, p, kernel_path, opt);
    if (!s->pid && session_start(s) != 0) {
        cJSON_AddStringToObject(st.result, "error", "could not start the gate child");
        return st.result;
    }
    *reused = s->evals > 0;
    cJSON *cj = cJSON_CreateObject();
    cJSON_AddNumberToObject(cj, "pair", pi);
    cJSON_AddStringToObject(cj, "path", kernel_path);
    cJSON_AddNumberToObject(cj, "iters", opt->iters);
    cJSON_AddNumberToObject(cj, "min_iters", opt->min_iters);
    cJSON_AddNumberToObject(cj, "ci_pct", opt->ci_pct);
    cJSON_AddNumberToObject(cj, "warmup", opt->warmup);
    cJSON_AddNumberToObject(cj, "sets", opt->max_sets);
    cJSON_AddNumberToObject(cj, "timeout", opt->timeout_s);
    cJSON_AddNumberToObject(cj, "no_time", opt->no_time);
    cJSON_AddNumberToObject(cj, "retime_noisy", opt->retime_noisy);
    cJSON_AddNumberToObject(cj, "race_factor", opt->race_factor);
    if (opt->seed) {
        char hex[24];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)opt->seed);
        cJSON_AddStringToObject(cj, "seed", hex);
    }
    cJSON *race = cJSON_AddArrayToObject(cj, "race_us");
    for (int i = 0; opt->race_us && i < opt->n_race; i++)
        cJSON_AddItemToArray(race, cJSON_CreateNumber(opt->race_us[i]));
    char *body = cJSON_PrintUnformatted(cj);
    cJSON_Delete(cj);
    char *cmd = xasprintf("%s\n", body);
    free(body);
    size_t len = strlen(cmd), off = kiln_send_all(s->sock, cmd, len);
    free(cmd);
    int timed_out = off == len ? watch(&st, s->sock, s->pid, opt, 1) : 0;
    int status = 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(st.result, "outcome");
    /* after these the gate process exits (service.c): its context may be lost or busy for good */
    int ends = cJSON_IsString(o) &&
               (strcmp(o->valuestring, "crashed") == 0 || strcmp(o->valuestring, "timeout") == 0);
    if (st.done && !ends && !st.fatal) {
        s->evals++;
    } else if (st.done) {
        session_stop(s); /* the child exits after a crash, a timeout or a fatal: wait for it */
    } else {
        /* killed by the watchdog, or dead: its status says how it ended */
        if (!timed_out)
            kill(s->pid, SIGKILL);
        reap(s->pid, &status);
        close(s->sock);
        s->sock = -1;
        s->pid = 0;
        s->evals = 0;
    }
    watch_finish(&st, p, timed_out, status);
    cJSON_AddStringToObject(st.result, "gate_child", *reused ? "reused" : "fresh");
    return st.result;
}

cJSON *kiln_gate_session_eval(kiln_gate_session *s, const kiln_problem *p, const kiln_refdata *ref,
                              const char *kernel_path, const kiln_gate_options *opt) {
    if (strchr(kernel_path, '\n') || strlen(kernel_path) > 4000) {
        watch_state st;
        watch_init(&st, p, kernel_path, opt);
        cJSON_AddStringToObject(st.result, "error", "the kernel path is too long or has a newline");
        return st.result;
    }
    if (access(kernel_path, R_OK) != 0) {
        watch_state st;
        watch_init(&st, p, kernel_path, opt);
        char *m = xasprintf("%s: cannot read: %s", kernel_path, strerror(errno));
        cJSON_AddStringToObject(st.result, "error", m);
        free(m);
        return st.result;
    }
    int pi = -1;
    for (int i = 0; i < s->n_pairs; i++)
        if (s->pairs[i].p == p && s->pairs[i].ref == ref)
            pi = i;
    if (pi < 0) {
        if (s->n_pairs == s->cap_pairs) {
            s->cap_pairs = s->cap_pairs ? 2 * s->cap_pairs : 8;
            s->pairs = xrealloc(s->pairs, (size_t)s->cap_pairs * sizeof *s->pairs);
        }
        s->pairs[s->n_pairs] = (kiln_gate_pair){p, ref};
        pi = s->n_pairs++;
    }
    if (pi >= s->n_known)
        session_stop(s); /* the child was forked before this problem existed */
    int reused = 0;
    cJSON *r = session_eval_once(s, pi, kernel_path, opt, &reused);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "outcome");
    if (reused && cJSON_IsString(o) &&
        (strcmp(o->valuestring, "crashed") == 0 || strcmp(o->valuestring, "timeout") == 0)) {
        /* an earlier candidate may have left the child damaged: ask a fresh one */
        cJSON_Delete(r);
        r = session_eval_once(s, pi, kernel_path, opt, &reused);
        cJSON_AddBoolToObject(r, "retried_fresh", 1);
    }
    return r;
}

cJSON *kiln_gate_eval(const kiln_problem *p, const kiln_refdata *ref, const char *kernel_path,
                      const kiln_gate_options *opt) {
    kiln_gate_session *s = kiln_gate_session_new(opt);
    cJSON *r = kiln_gate_session_eval(s, p, ref, kernel_path, opt);
    kiln_gate_session_free(s);
    cJSON_DeleteItemFromObjectCaseSensitive(r, "gate_child");
    return r;
}

void kiln_gate_session_free(kiln_gate_session *s) {
    if (!s)
        return;
    session_stop(s);
    free(s->pairs);
    free(s);
}
