/* service.c: the gate process — one per device for a whole session — opens its backend once, keeps
 * every problem's data resident, and evaluates the candidates it is sent, one JSON command a line.
 *
 * What a candidate prints is not the gate's to pass on as its own: the process's standard output is
 * a memory file (device printf lands there at each synchronisation; a cpu candidate's runner has a
 * log of its own), whose tail is reported with the verdict as "candidate_output" and which is
 * emptied before the next candidate. So `kiln eval --json` prints one JSON value whatever a kernel
 * prints. */
#include "gate_impl.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define OUTPUT_TAIL_BYTES 4096

static int output_fd = -1;

/* Makes fd 1 a memory file (the candidates' standard output). */
static void capture_stdout(void) {
    fflush(stdout);
    int fd = memfd_create("kiln-candidate-output", MFD_CLOEXEC);
    if (fd < 0)
        return;
    if (dup2(fd, 1) < 0) {
        close(fd);
        return;
    }
    output_fd = fd;
}

/* Reports what the candidate printed since the last call (its tail) and empties the file. */
static void send_output(int fd) {
    if (output_fd < 0)
        return;
    fflush(stdout);
    off_t len = lseek(output_fd, 0, SEEK_END);
    if (len > 0) {
        off_t from = len > OUTPUT_TAIL_BYTES ? len - OUTPUT_TAIL_BYTES : 0;
        char buf[OUTPUT_TAIL_BYTES + 1];
        ssize_t got = pread(output_fd, buf, (size_t)(len - from), from);
        if (got > 0) {
            buf[got] = 0;
            cJSON *s = cJSON_CreateString(buf);
            char *text = cJSON_PrintUnformatted(s);
            kiln_gate_send_line(fd, "candidate_output %s", text);
            free(text);
            cJSON_Delete(s);
        }
    }
    if (ftruncate(output_fd, 0) == 0)
        lseek(output_fd, 0, SEEK_SET);
}

/* Opens the gate process's backend (cpu: sandboxed), ceilings, device helpers and resident data.
 * Sends "fatal" and returns non-zero when it cannot. */
static int proc_open(const kiln_gate_options *opt, int fd, kiln_gate_proc *g) {
    kiln_err err;
    memset(g, 0, sizeof *g);
    kiln_gate_send_line(fd, "phase init");
    kiln_backend_config cfg = {.sandbox = 1, .check_imports = 1};
    if (kiln_backend_open_with(opt->backend, opt->device, &cfg, &g->be, &err)) {
        kiln_gate_send_fatal(fd, err.msg);
        return -1;
    }
    kiln_gate_send_line(fd, "phase ceilings");
    if (kiln_ceilings_get(g->be, &g->ceil, &err)) {
        char *m = xasprintf("measuring the device's ceilings failed: %s", err.msg);
        kiln_gate_send_fatal(fd, m);
        free(m);
        goto fail;
    }
    if (kiln_gate_dev_open(g->be, &g->dev, &err)) {
        char *m = xasprintf("loading the gate's own kernels failed: %s", err.msg);
        kiln_gate_send_fatal(fd, m);
        free(m);
        goto fail;
    }
    /* cuda: candidate and references share the device, so the references are masked; cpu: the
     * candidate's process never maps them */
    g->key = strcmp(g->be->ops->name, "cuda") == 0 ? kiln_gate_seed_from_os() : 0;
    g->res = kiln_resident_new(g->be, g->dev, g->key, 0);
    return 0;
fail:
    kiln_gate_dev_close(g->dev);
    kiln_backend_close(g->be);
    g->be = NULL;
    return -1;
}

static void proc_close(kiln_gate_proc *g, int context_lost) {
    if (context_lost)
        return; /* after a sticky fault the driver refuses the clean-up: exit does it */
    kiln_resident_free(g->res);
    kiln_gate_dev_close(g->dev);
    kiln_backend_close(g->be);
}

/* Reads one line from fd into buf (without the newline); 0 at end of file. */
static int read_command(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        if (ch == '\n')
            break;
        if (n + 1 < cap)
            buf[n++] = ch;
    }
    buf[n] = 0;
    return 1;
}

static double num(const cJSON *o, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The options of one command ({"pair": I, "path": P, "iters": ...}: isolate.c writes them) over
 * the session's; race times go into race (cap entries). -1 when the command is malformed. */
static int parse_command(const char *line, const kiln_gate_options *base, int n_pairs,
                         kiln_gate_options *o, double *race, int cap, char *path, size_t path_cap) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(j, "pair");
    const cJSON *path_j = cJSON_GetObjectItemCaseSensitive(j, "path");
    if (!cJSON_IsNumber(pj) || pj->valueint < 0 || pj->valueint >= n_pairs ||
        !cJSON_IsString(path_j)) {
        cJSON_Delete(j);
        return -1;
    }
    int pair = pj->valueint;
    snprintf(path, path_cap, "%s", path_j->valuestring);
    *o = *base;
    o->iters = (int)num(j, "iters", base->iters);
    o->min_iters = (int)num(j, "min_iters", base->min_iters);
    o->ci_pct = num(j, "ci_pct", base->ci_pct);
    o->warmup = (int)num(j, "warmup", base->warmup);
    o->max_sets = (int)num(j, "sets", base->max_sets);
    o->timeout_s = num(j, "timeout", base->timeout_s);
    o->no_time = (int)num(j, "no_time", base->no_time);
    o->retime_noisy = (int)num(j, "retime_noisy", base->retime_noisy);
    o->race_factor = num(j, "race_factor", base->race_factor);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    o->seed = cJSON_IsString(seed) ? strtoull(seed->valuestring, NULL, 16) : 0;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "race_us"), *e;
    o->n_race = 0;
    o->race_us = race;
    cJSON_ArrayForEach(e, r) {
        if (o->n_race < cap)
            race[o->n_race++] = cJSON_IsNumber(e) ? e->valuedouble : 0;
    }
    cJSON_Delete(j);
    return pair;
}

void kiln_gate_serve(const kiln_gate_pair *pairs, int n_pairs, const kiln_gate_options *opt,
                     int cmd_fd, int fd) {
    capture_stdout();
    kiln_gate_proc g;
    if (proc_open(opt, fd, &g)) {
        kiln_gate_send_line(fd, "done");
        return;
    }
    static char line[65536];
    char path[4096];
    enum { RACE_CAP = 4096 };
    double *race = xcalloc(RACE_CAP, sizeof *race);
    int lost = 0;
    while (!lost && read_command(cmd_fd, line, sizeof line)) {
        kiln_gate_options o;
        int pi = parse_command(line, opt, n_pairs, &o, race, RACE_CAP, path, sizeof path);
        if (pi < 0) {
            kiln_gate_send_fatal(fd, "the gate process got a malformed command");
            kiln_gate_send_line(fd, "done");
            continue;
        }
        char *source = NULL;
        kiln_err err;
        kiln_outcome result;
        if (kiln_read_file(path, &source, NULL, &err) != KILN_OK)
            result = kiln_gate_send_fatal(fd, err.msg);
        else
            result = kiln_gate_eval_candidate(&g, pairs[pi].p, pairs[pi].ref, source, &o, fd);
        free(source);
        send_output(fd);
        kiln_gate_send_line(fd, "done");
        /* after a crash or a kernel that never ended, the context may be lost or busy for good */
        lost = result == KILN_OUTCOME_CRASHED || result == KILN_OUTCOME_TIMEOUT;
    }
    free(race);
    proc_close(&g, lost);
}
