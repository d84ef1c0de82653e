/* sandbox.c: the gate's side of the cpu sandbox: the candidate buffers in one memfd, and the
 * runner processes (build/kiln-sandbox, sandbox_main.c) in which candidates run with nothing but
 * those buffers.
 *
 * Buffers. Every candidate buffer is a page-aligned range of one memfd, followed by a page of the
 * memfd that nobody maps (its guard). The gate maps each buffer read-write wherever mmap puts it
 * (its "view"); a runner maps each at KILN_SBX_BASE + its offset, read-only for inputs, with the
 * rest of a power-of-two span around them PROT_NONE — so a buffer's address is the same in every
 * runner, and that address is the devptr the gate passes as a parameter. The gate's own memory
 * (plain allocations: pristine inputs, references) is never in the memfd.
 *
 * Runners. A runner maps the buffers that exist when it starts and then seals itself (seccomp):
 * it can map nothing more. So a runner records the generation of the buffer layout it was started
 * with, and a call made after buffers came or went restarts it first (the candidate's file is
 * still in its folder). Starting is fork + exec in one step (posix_spawn, which shares the gate's
 * memory instead of copying it, so a gate holding gigabytes of reference data starts runners as
 * fast as a small one) with a descriptor table of exactly: the socket (3), the memfd (4), the log
 * (1 and 2).
 *
 * Calls. The gate sends the call, then SIGCONTs the runner (stopped since its last reply, so no
 * thread of the candidate ran outside a call) and waits for the reply up to the call limit, timing
 * send -> reply on CLOCK_MONOTONIC; then it waits, untimed, for the runner's second reply (ready:
 * the candidate's state is put back for the next call, sandbox_main.c), SIGSTOPs the runner and
 * waits until the kernel reports it stopped, so that nothing of the candidate runs while the gate
 * checks outputs. Anything else
 * — no reply in time, end of file, a reply of the wrong size or seq, bytes nobody asked for, the
 * process gone — ends the runner, and the status says how. */
#include "sandbox.h"
#include "sandbox_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SBX_DEFAULT_EXTRA_MB 2048
#define SBX_LOG_BYTES ((uint64_t)16 << 20)
#define SBX_SETUP_LIMIT_S 30.0 /* exec, map, dlopen, threads: no candidate code */
#define SBX_EXIT_GRACE_S 1.0   /* after end of file, for the process to finish exiting */
#define SBX_MIN_SPAN ((uint64_t)1 << 21)

typedef struct {
    uint64_t offset; /* in the memfd and from KILN_SBX_BASE */
    uint64_t size;   /* the whole region: the mapped pages, then one guard page */
    uint64_t n_user; /* the caller's bytes rounded to 16; the buffer ends at offset + size - page */
    int in_use, read_only;
    unsigned char *view; /* the gate's mapping of the size - page mapped bytes */
} sbx_region;

struct kiln_sandbox {
    char exe[PATH_MAX];
    int memfd;
    uint64_t page;
    sbx_region *regions; /* sorted by offset, covering [0, extent) without gaps */
    int n_regions, cap_regions;
    uint64_t extent, file_bytes;
    uint64_t generation; /* of the layout; bumped by every alloc and free */
    uint64_t extra_bytes;
    double call_limit_s;
    double overhead_s;
};

struct kiln_runner {
    kiln_sandbox *s;
    char *so_path, *log_path;
    int n_entries;
    pid_t pid; /* 0: none started */
    int sock;
    uint64_t generation, seq;
    int dead;
    char fate[256]; /* why it is dead */
};

/* ---- the sandbox: finding the runner, the buffers ---- */

static int is_executable(const char *path) {
    return access(path, X_OK) == 0;
}

/* kiln-sandbox beside the running executable (build/kiln), one folder up (build/tests/x), or in
 * kiln_home()'s build/. */
static int find_runner(char *out, size_t cap, kiln_err *err) {
    char tried[3][PATH_MAX];
    int n = 0;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(tried[n++], PATH_MAX, "%.*s/kiln-sandbox", PATH_MAX - 32, exe);
            snprintf(tried[n++], PATH_MAX, "%.*s/../kiln-sandbox", PATH_MAX - 32, exe);
        }
    }
    snprintf(tried[n++], PATH_MAX, "%.*s/build/kiln-sandbox", PATH_MAX - 32, kiln_home());
    for (int i = 0; i < n; i++) {
        if (is_executable(tried[i]) && realpath(tried[i], exe) && strlen(exe) < cap) {
            memcpy(out, exe, strlen(exe) + 1);
            return KILN_OK;
        }
    }
    return kiln_errf(err, KILN_ERR_BACKEND,
                     "the cpu sandbox needs its runner, kiln-sandbox, which is neither beside the "
                     "running program nor at %s (build it with make)",
                     tried[n - 1]);
}

int kiln_sandbox_open(kiln_sandbox **out, kiln_err *err) {
    *out = NULL;
    char exe[PATH_MAX];
    int rc = find_runner(exe, sizeof exe, err);
    if (rc)
        return rc;
    int fd = memfd_create("kiln-candidate-buffers", MFD_CLOEXEC);
    if (fd < 0)
        return kiln_errf(err, KILN_ERR_BACKEND, "memfd_create: %s", strerror(errno));
    kiln_sandbox *s = xcalloc(1, sizeof *s);
    memcpy(s->exe, exe, strlen(exe) + 1);
    s->memfd = fd;
    s->page = (uint64_t)sysconf(_SC_PAGESIZE);
    const char *mb = getenv("KILN_SANDBOX_EXTRA_MB");
    long long extra = mb && *mb ? atoll(mb) : SBX_DEFAULT_EXTRA_MB;
    s->extra_bytes = (uint64_t)(extra > 0 ? extra : SBX_DEFAULT_EXTRA_MB) << 20;
    *out = s;
    return KILN_OK;
}

void kiln_sandbox_close(kiln_sandbox *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].in_use)
            munmap(s->regions[i].view, s->regions[i].size - s->page);
    free(s->regions);
    close(s->memfd);
    free(s);
}

void kiln_sandbox_set_call_limit(kiln_sandbox *s, double seconds) {
    s->call_limit_s = seconds;
}

double kiln_sandbox_overhead_s(const kiln_sandbox *s) {
    return s->overhead_s;
}

/* The smallest power of two that holds the buffers (the runners' span). */
static uint64_t sbx_span(const kiln_sandbox *s) {
    uint64_t span = SBX_MIN_SPAN;
    while (span < s->extent)
        span <<= 1;
    return span;
}

static void regions_insert(kiln_sandbox *s, int at, sbx_region r) {
    if (s->n_regions == s->cap_regions) {
        s->cap_regions = s->cap_regions ? 2 * s->cap_regions : 16;
        s->regions = xrealloc(s->regions, (size_t)s->cap_regions * sizeof *s->regions);
    }
    memmove(&s->regions[at + 1], &s->regions[at], (size_t)(s->n_regions - at) * sizeof *s->regions);
    s->regions[at] = r;
    s->n_regions++;
}

static void regions_remove(kiln_sandbox *s, int at) {
    memmove(&s->regions[at], &s->regions[at + 1],
            (size_t)(s->n_regions - at - 1) * sizeof *s->regions);
    s->n_regions--;
}

static void region_release(kiln_sandbox *s, int i);

int kiln_sandbox_alloc(kiln_sandbox *s, size_t n_bytes, int read_only, kiln_devptr *out,
                       kiln_err *err) {
    uint64_t page = s->page;
    if (n_bytes > KILN_SBX_MAX_SPAN / 2)
        return kiln_errf(err, KILN_ERR_RESOURCE, "cannot allocate %zu bytes", n_bytes);
    uint64_t n_user = ((uint64_t)n_bytes + 15) & ~(uint64_t)15;
    uint64_t mapped = n_user ? (n_user + page - 1) / page * page : page;
    uint64_t size = mapped + page;
    /* first fit among the free regions, else at the end */
    int at = -1;
    for (int i = 0; i < s->n_regions && at < 0; i++)
        if (!s->regions[i].in_use && s->regions[i].size >= size)
            at = i;
    uint64_t offset;
    if (at >= 0) {
        offset = s->regions[at].offset;
        uint64_t rest = s->regions[at].size - size;
        s->regions[at].size = size;
        if (rest)
            regions_insert(s, at + 1, (sbx_region){.offset = offset + size, .size = rest});
    } else {
        offset = s->extent;
        if (offset + size > KILN_SBX_MAX_SPAN)
            return kiln_errf(err, KILN_ERR_RESOURCE,
                             "cannot allocate %zu bytes: the candidate buffers would pass %llu "
                             "bytes",
                             n_bytes, (unsigned long long)KILN_SBX_MAX_SPAN);
        at = s->n_regions;
        regions_insert(s, at, (sbx_region){.offset = offset, .size = size});
        s->extent = offset + size;
    }
    int rc = KILN_OK;
    if (s->extent > s->file_bytes) {
        if (ftruncate(s->memfd, (off_t)s->extent) != 0)
            rc = kiln_errf(err, KILN_ERR_RESOURCE,
                           "cannot grow the candidate buffers to %llu "
                           "bytes: %s",
                           (unsigned long long)s->extent, strerror(errno));
        else
            s->file_bytes = s->extent;
    }
    void *view = MAP_FAILED;
    if (rc == KILN_OK) {
        view = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, (off_t)offset);
        if (view == MAP_FAILED)
            rc = kiln_errf(err, KILN_ERR_RESOURCE, "cannot allocate %zu bytes: %s", n_bytes,
                           strerror(errno));
    }
    if (rc) {
        region_release(s, at);
        return rc;
    }
    sbx_region *r = &s->regions[at];
    r->in_use = 1;
    r->read_only = read_only;
    r->n_user = n_user;
    r->view = view;
    s->generation++;
    *out = (kiln_devptr)(KILN_SBX_BASE + offset + mapped - n_user);
    return KILN_OK;
}

/* The region that holds [p, p + n) within its caller's bytes, or -1. */
static int sbx_find(const kiln_sandbox *s, kiln_devptr p, uint64_t n) {
    for (int i = 0; i < s->n_regions; i++) {
        const sbx_region *r = &s->regions[i];
        if (!r->in_use)
            continue;
        uint64_t user = KILN_SBX_BASE + r->offset + (r->size - s->page) - r->n_user;
        if (p >= user && p - user <= r->n_user && n <= r->n_user - (p - user))
            return i;
    }
    return -1;
}

/* Marks region i free, merges it with free neighbours and trims a free end off the memfd. */
static void region_release(kiln_sandbox *s, int i) {
    s->regions[i] = (sbx_region){.offset = s->regions[i].offset, .size = s->regions[i].size};
    if (i + 1 < s->n_regions && !s->regions[i + 1].in_use) {
        s->regions[i].size += s->regions[i + 1].size;
        regions_remove(s, i + 1);
    }
    if (i > 0 && !s->regions[i - 1].in_use) {
        s->regions[i - 1].size += s->regions[i].size;
        regions_remove(s, i);
        i--;
    }
    if (i == s->n_regions - 1) {
        s->extent = s->regions[i].offset;
        regions_remove(s, i);
        if (ftruncate(s->memfd, (off_t)s->extent) == 0)
            s->file_bytes = s->extent;
    }
}

int kiln_sandbox_free(kiln_sandbox *s, kiln_devptr p) {
    int i = sbx_find(s, p, 0);
    if (i < 0)
        return 0;
    sbx_region *r = &s->regions[i];
    uint64_t mapped = r->size - s->page;
    if (p != KILN_SBX_BASE + r->offset + mapped - r->n_user)
        return 0; /* inside a buffer, not its start */
    munmap(r->view, mapped);
    /* the pages go back to the system now, not when the memfd shrinks */
    fallocate(s->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->offset,
              (off_t)mapped);
    region_release(s, i);
    s->generation++;
    return 1;
}

void *kiln_sandbox_view(const kiln_sandbox *s, kiln_devptr p, size_t n) {
    int i = sbx_find(s, p, n);
    if (i < 0)
        return NULL;
    const sbx_region *r = &s->regions[i];
    return r->view + (p - KILN_SBX_BASE - r->offset);
}

/* ---- runners ---- */

/* How a process ended, in words. */
static void describe_status(int status, char *out, size_t cap) {
    if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        if (abbrev)
            snprintf(out, cap, "the candidate's process died of SIG%s", abbrev);
        else
            snprintf(out, cap, "the candidate's process died of signal %d", WTERMSIG(status));
    } else if (WIFEXITED(status)) {
        snprintf(out, cap, "the candidate's process exited with status %d", WEXITSTATUS(status));
    } else {
        snprintf(out, cap, "the candidate's process ended (wait status 0x%x)", status);
    }
}

/* Kills the runner if it still runs and reaps it. */
static void runner_kill(kiln_runner *r) {
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        int status;
        while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (r->pid > 0)
        close(r->sock);
    r->pid = 0;
}

/* Ends the runner for good with fate as the reason; returns status with the reason in err. */
static int runner_fail(kiln_runner *r, int status, kiln_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int runner_fail(kiln_runner *r, int status, kiln_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fate, sizeof r->fate, fmt, ap);
    va_end(ap);
    runner_kill(r);
    r->dead = 1;
    return kiln_errf(err, status, "%s", r->fate);
}

/* The runner closed its end: waits a moment for it to finish dying and says how it ended. */
static int runner_eof(kiln_runner *r, kiln_err *err) {
    double deadline = kiln_now_s() + SBX_EXIT_GRACE_S;
    for (;;) {
        int status;
        pid_t got = waitpid(r->pid, &status, WNOHANG);
        if (got == r->pid && (WIFEXITED(status) || WIFSIGNALED(status))) {
            close(r->sock);
            r->pid = 0;
            char how[200];
            describe_status(status, how, sizeof how);
            return runner_fail(r, KILN_ERR_LAUNCH, err, "%s", how);
        }
        if (got < 0 && errno == ECHILD) { /* reaped by someone else (SIGCHLD ignored) */
            close(r->sock);
            r->pid = 0;
            return runner_fail(r, KILN_ERR_LAUNCH, err, "the candidate's process ended");
        }
        if (kiln_now_s() > deadline)
            return runner_fail(r, KILN_ERR_LAUNCH, err,
                               "the candidate broke the runner's protocol (it closed its channel "
                               "to the gate and kept running)");
        struct timespec nap = {0, 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

/* Waits up to limit_s (<= 0: forever) for one reply to seq. */
static int runner_reply(kiln_runner *r, uint64_t seq, double limit_s, int timeout_status,
                        kiln_sbx_reply *rep, kiln_err *err) {
    double deadline = kiln_now_s() + limit_s;
    for (;;) {
        int wait_ms = -1;
        if (limit_s > 0) {
            double left = deadline - kiln_now_s();
            if (left <= 0)
                return runner_fail(r, timeout_status, err,
                                   timeout_status == KILN_ERR_TIMEOUT
                                       ? "the candidate's call ran past its limit of %g s (its "
                                         "process was killed)"
                                       : "no answer within %g s",
                                   limit_s);
            wait_ms = (int)(left * 1000) + 1;
        }
        struct pollfd pfd = {r->sock, POLLIN, 0};
        int n = poll(&pfd, 1, wait_ms);
        if (n < 0 && errno != EINTR)
            return runner_fail(r, KILN_ERR_BACKEND, err, "poll: %s", strerror(errno));
        if (n <= 0)
            continue;
        ssize_t got = recv(r->sock, rep, sizeof *rep, MSG_DONTWAIT | MSG_TRUNC);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return runner_eof(r, err);
        if (got < 0)
            return runner_fail(r, KILN_ERR_BACKEND, err, "reading from the runner: %s",
                               strerror(errno));
        if (got != (ssize_t)sizeof *rep)
            return runner_fail(r, KILN_ERR_LAUNCH, err,
                               "the candidate broke the runner's protocol (a record of %zd bytes "
                               "where a reply of %zu was due)",
                               got, sizeof *rep);
        if (rep->magic != KILN_SBX_MAGIC_REPLY || rep->seq != seq)
            return runner_fail(r, KILN_ERR_LAUNCH, err,
                               "the candidate broke the runner's protocol (a reply that is not "
                               "the answer to call %llu)",
                               (unsigned long long)seq);
        return KILN_OK;
    }
}

/* SIGSTOPs the runner and waits until the kernel reports every thread stopped; then nothing may
 * be waiting on the socket. */
static int runner_pause(kiln_runner *r, kiln_err *err) {
    kill(r->pid, SIGSTOP);
    int status = 0, rc = KILN_OK;
    pid_t got;
    while ((got = waitpid(r->pid, &status, WUNTRACED)) < 0 && errno == EINTR) {
    }
    if (got != r->pid) {
        close(r->sock);
        r->pid = 0;
        rc = runner_fail(r, KILN_ERR_LAUNCH, err, "the candidate's process ended");
    } else if (!WIFSTOPPED(status)) {
        close(r->sock);
        r->pid = 0;
        char how[200];
        describe_status(status, how, sizeof how);
        rc = runner_fail(r, KILN_ERR_LAUNCH, err, "%s", how);
    } else {
        char byte;
        ssize_t pending = recv(r->sock, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
        if (pending > 0)
            rc = runner_fail(r, KILN_ERR_LAUNCH, err,
                             "the candidate broke the runner's protocol (it wrote to the gate "
                             "out of turn)");
        else if (pending == 0)
            rc = runner_fail(r, KILN_ERR_LAUNCH, err,
                             "the candidate broke the runner's protocol (it closed its channel "
                             "to the gate)");
    }
    return rc;
}

static int send_record(kiln_runner *r, const void *rec, size_t n) {
    ssize_t sent;
    do
        sent = send(r->sock, rec, n, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    return sent == (ssize_t)n ? 0 : -1;
}

/* The runner's environment: OpenMP's settings and the library path, nothing else (the gate's
 * environment may hold keys the candidate has no business printing into its log). */
static char **runner_environment(void) {
    int n = 0;
    for (char **e = environ; *e; e++)
        n++;
    char **env = xcalloc((size_t)n + 1, sizeof *env);
    int k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "OMP_", 4) == 0 || strncmp(*e, "GOMP_", 5) == 0 ||
            strncmp(*e, "LD_LIBRARY_PATH=", 16) == 0)
            env[k++] = *e;
    env[k] = NULL;
    return env;
}

/* Ends a runner that failed before any candidate code ran — the sandbox's own failure, not the
 * candidate's — with its last words from the log (a missing library, say). */
static int runner_start_failed(kiln_runner *r, kiln_err *err, const char *why) {
    char what[200], tail[400];
    snprintf(what, sizeof what, "%s", why);
    runner_kill(r);
    r->dead = 1;
    kiln_runner_log_tail(r, tail, sizeof tail);
    snprintf(r->fate, sizeof r->fate, "the sandbox's runner failed to start");
    return kiln_errf(err, KILN_ERR_BACKEND, "the sandbox's runner failed to start: %s%s%s", what,
                     tail[0] ? "; its log ends: " : "", tail);
}

/* Starts the runner with the current layout, sends its setup and waits for it to be ready. */
static int runner_spawn(kiln_runner *r, kiln_err *err) {
    kiln_sandbox *s = r->s;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return runner_fail(r, KILN_ERR_BACKEND, err, "socketpair: %s", strerror(errno));
    int log = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log < 0) {
        close(sv[0]);
        close(sv[1]);
        return runner_fail(r, KILN_ERR_IO, err, "cannot open %s: %s", r->log_path, strerror(errno));
    }
    /* Move the sources above the targets, so that no dup2 below overwrites one still needed. */
    int child_sock = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    int child_mem = fcntl(s->memfd, F_DUPFD_CLOEXEC, 10);
    int child_log = fcntl(log, F_DUPFD_CLOEXEC, 10);
    close(sv[1]);
    close(log);

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, 0);
    posix_spawn_file_actions_adddup2(&fa, child_log, 1);
    posix_spawn_file_actions_adddup2(&fa, child_log, 2);
    posix_spawn_file_actions_adddup2(&fa, child_sock, KILN_SBX_FD_SOCKET);
    posix_spawn_file_actions_adddup2(&fa, child_mem, KILN_SBX_FD_MEMFD);
    posix_spawn_file_actions_addclosefrom_np(&fa, KILN_SBX_FD_MEMFD + 1);
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0); /* the terminal's signals are the gate's to handle */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    char gate_pid[32];
    snprintf(gate_pid, sizeof gate_pid, "%ld", (long)getpid());
    char *argv[] = {"kiln-sandbox", gate_pid, NULL};
    char **env = runner_environment();
    pid_t pid;
    int e = posix_spawn(&pid, s->exe, &fa, &attr, argv, env);
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(child_sock);
    close(child_mem);
    close(child_log);
    if (e != 0) {
        close(sv[0]);
        return runner_fail(r, KILN_ERR_BACKEND, err, "cannot start %s: %s", s->exe, strerror(e));
    }
    r->pid = pid;
    r->sock = sv[0];
    r->seq = 0;
    r->generation = s->generation;

    kiln_sbx_setup *setup = xcalloc(1, sizeof *setup);
    setup->magic = KILN_SBX_MAGIC_SETUP;
    setup->version = KILN_SBX_VERSION;
    setup->span = sbx_span(s);
    setup->extra_bytes = s->extra_bytes;
    setup->log_bytes = SBX_LOG_BYTES;
    setup->n_entries = (uint32_t)r->n_entries;
    snprintf(setup->so_path, sizeof setup->so_path, "%s", r->so_path);
    for (int i = 0; i < s->n_regions; i++)
        setup->n_maps += s->regions[i].in_use ? 1u : 0u;
    int sent = send_record(r, setup, sizeof *setup);
    free(setup);
    for (int i = 0; i < s->n_regions && sent == 0; i++) {
        const sbx_region *g = &s->regions[i];
        if (!g->in_use)
            continue;
        kiln_sbx_map m = {KILN_SBX_MAGIC_MAP, (uint32_t)g->read_only, g->offset, g->size - s->page};
        sent = send_record(r, &m, sizeof m);
    }
    if (sent != 0)
        return runner_start_failed(r, err, "it did not take its setup");

    kiln_sbx_reply rep;
    kiln_err ignored;
    if (runner_reply(r, 0, SBX_SETUP_LIMIT_S, KILN_ERR_BACKEND, &rep, &ignored))
        return runner_start_failed(r, err, r->fate);
    rep.detail[sizeof rep.detail - 1] = 0;
    if (rep.status == KILN_SBX_LOAD_FAILED)
        return runner_fail(r, KILN_ERR_COMPILE, err, "%s", rep.detail);
    if (rep.status != KILN_SBX_OK)
        return runner_start_failed(r, err, rep.detail);
    return runner_pause(r, err);
}

int kiln_runner_open(kiln_sandbox *s, const char *dir, int n_entries, kiln_runner **out,
                     kiln_err *err) {
    KILN_ASSERT(n_entries >= 1 && n_entries <= KILN_MAX_LAUNCHES);
    *out = NULL;
    kiln_runner *r = xcalloc(1, sizeof *r);
    r->s = s;
    r->so_path = kiln_path_join(dir, "candidate.so");
    r->log_path = kiln_path_join(dir, "runner.log");
    r->n_entries = n_entries;
    if (strlen(r->so_path) >= sizeof((kiln_sbx_setup *)0)->so_path) {
        kiln_runner_close(r);
        return kiln_errf(err, KILN_ERR_IO, "the candidate's path is too long");
    }
    double t0 = kiln_now_s();
    int rc = runner_spawn(r, err);
    s->overhead_s += kiln_now_s() - t0;
    if (rc) {
        kiln_runner_close(r);
        return rc;
    }
    *out = r;
    return KILN_OK;
}

int kiln_runner_call(kiln_runner *r, int n_launches, const uint32_t *entry, int n_params,
                     const uint64_t *value, kiln_err *err) {
    KILN_ASSERT(n_launches >= 0 && n_launches <= KILN_MAX_LAUNCHES);
    KILN_ASSERT(n_params >= 0 && n_params <= KILN_MAX_PARAMS);
    if (r->dead)
        return kiln_errf(err, KILN_ERR_LAUNCH,
                         "%s (in an earlier call: compile the candidate again for a fresh "
                         "process)",
                         r->fate);
    if (r->generation != r->s->generation) {
        double t0 = kiln_now_s();
        runner_kill(r);
        int rc = runner_spawn(r, err);
        r->s->overhead_s += kiln_now_s() - t0;
        if (rc)
            return rc;
    }
    kiln_sbx_call c;
    memset(&c, 0, sizeof c);
    c.magic = KILN_SBX_MAGIC_CALL;
    c.seq = ++r->seq;
    c.n_launches = (uint32_t)n_launches;
    for (int i = 0; i < n_launches; i++) {
        KILN_ASSERT(entry[i] < (uint32_t)r->n_entries);
        c.entry[i] = entry[i];
    }
    c.n_params = (uint32_t)n_params;
    memcpy(c.value, value, (size_t)n_params * sizeof *value);
    /* Sent while the runner is stopped, so that it never runs without a call to answer. */
    if (send_record(r, &c, sizeof c) != 0)
        return runner_eof(r, err);
    kill(r->pid, SIGCONT);
    kiln_sbx_reply rep;
    int rc = runner_reply(r, c.seq, r->s->call_limit_s, KILN_ERR_TIMEOUT, &rep, err);
    if (rc)
        return rc;
    if (rep.status != KILN_SBX_OK)
        return runner_fail(r, KILN_ERR_LAUNCH, err,
                           "the candidate broke the runner's protocol (a reply with status %d)",
                           rep.status);
    /* the runner puts the candidate's state back for the next call, then says so: not timed */
    double t0 = kiln_now_s();
    rc = runner_reply(r, c.seq, r->s->call_limit_s, KILN_ERR_LAUNCH, &rep, err);
    if (rc == KILN_OK && rep.status != KILN_SBX_READY)
        rc = runner_fail(r, KILN_ERR_LAUNCH, err,
                         "the candidate broke the runner's protocol (a reply with status %d where "
                         "the runner's ready was due)",
                         rep.status);
    if (rc) {
        r->s->overhead_s += kiln_now_s() - t0;
        return rc;
    }
    rc = runner_pause(r, err);
    r->s->overhead_s += kiln_now_s() - t0;
    return rc;
}

size_t kiln_runner_log_tail(const kiln_runner *r, char *buf, size_t cap) {
    if (!cap)
        return 0;
    buf[0] = 0;
    int fd = open(r->log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    size_t n = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        size_t want = (size_t)st.st_size < cap - 1 ? (size_t)st.st_size : cap - 1;
        ssize_t got = pread(fd, buf, want, (off_t)((size_t)st.st_size - want));
        n = got > 0 ? (size_t)got : 0;
    }
    close(fd);
    for (size_t i = 0; i < n; i++)
        if ((buf[i] < 0x20 || buf[i] > 0x7e) && buf[i] != '\n' && buf[i] != '\t')
            buf[i] = '?';
    buf[n] = 0;
    return n;
}

void kiln_runner_close(kiln_runner *r) {
    if (!r)
        return;
    runner_kill(r);
    free(r->so_path);
    free(r->log_path);
    free(r);
}
