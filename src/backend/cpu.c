/* cpu.c: the cpu backend: a candidate is compiled by the system compiler into a shared object and
 * called through generated trampolines, either in this process (dlopen: libkiln_rt, running a
 * proven library) or, when the backend is opened with config.sandbox, in a runner process of its
 * own that holds nothing but the candidate's buffers (sandbox.c: the gate). Either way its buffers
 * end at guard pages, so that a write past the end faults instead of passing unseen.
 *
 * Why trampolines: the gate holds parameters the way cuLaunchKernel takes them (an array of
 * pointers to values). A C function cannot be called with a run-time parameter list, so for every
 * launch kiln emits `void kiln__call_K(void **params)` that loads each value with its real type and
 * calls the entry point. Pointers are declared `void*` there (the same class of argument as any
 * `T*` on x86-64 SysV and AArch64), scalars keep their type so that a float travels in a vector
 * register as the candidate expects. The trampoline is compiled with the candidate into one .so; an
 * entry point the candidate does not define shows up as an undefined symbol when that .so is loaded
 * with RTLD_NOW. */
#include "cpu.h"
#include "sandbox.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CPU_DEFAULT_CC_TIMEOUT_S 60.0
#define CPU_FALLBACK_LLC_BYTES ((size_t)64 << 20)
/* The cache flush before a timed run writes twice the last-level cache, but at most this much: a
 * virtual machine's sysfs reports the host's whole L3 (260 MiB on a 2-core CI machine), and
 * writing 520 MiB before every timed run made one cpu eval of a 1x1 softmax take 6 s, with the
 * write-back showing in the timings as milliseconds. 32 MiB is 8x the L2 of such a machine. */
#define CPU_MAX_FLUSH_BYTES ((size_t)32 << 20)

typedef struct cpu_alloc {
    uintptr_t
        user; /* what the caller sees: ends exactly at the guard page (after 16-byte rounding) */
    size_t n_bytes; /* usable bytes from user to the guard page */
    void *base;     /* the whole mapping, guard page included */
    size_t map_len;
    size_t data_len; /* the pages before the guard */
    int read_only;   /* KILN_ALLOC_READONLY: PROT_READ but while the gate writes it */
    struct cpu_alloc *next;
} cpu_alloc;

typedef struct {
    kiln_device_info info;
    char header_dir[PATH_MAX];
    kiln_sandbox *sbx; /* NULL: candidates run in this process */
    int check_imports; /* kiln_backend_config's */
    cpu_alloc *allocs; /* plain memory (and, in this process, candidate buffers) */
    unsigned char *flush_buf;
    size_t flush_len;
    unsigned flush_round;
} cpu_state;

struct kiln_module {
    int n;
    char entry[KILN_MAX_LAUNCHES][128];
    int n_params;
    kiln_param_kind kind[KILN_MAX_PARAMS];
    /* in this process */
    void *dl;
    void (*call[KILN_MAX_LAUNCHES])(void **params);
    /* sandboxed: the runner, and the folder that holds candidate.so and runner.log */
    kiln_runner *runner;
    char *dir;
};

struct kiln_timer {
    struct timespec start, stop;
    double start_overhead_s, stop_overhead_s; /* kiln_sandbox_overhead_s at start and stop */
    int started, stopped;
};

/* ---- device facts ---- */

/* Largest cache of cpu0 in bytes (the last level); 0 when sysfs does not say. */
static size_t cpu_llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], text[64] = {0};
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        char *end;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end == 'K' || *end == 'k')
            v <<= 10;
        else if (*end == 'M' || *end == 'm')
            v <<= 20;
        else if (*end == 'G' || *end == 'g')
            v <<= 30;
        if (v > best)
            best = (size_t)v;
    }
    return best;
}

/* The "model name" line of /proc/cpuinfo, or the machine name where there is none (e.g. Arm). */
static void cpu_model_name(char *out, size_t cap) {
    snprintf(out, cap, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *s = colon + 1;
        while (*s == ' ' || *s == '\t')
            s++;
        size_t n = strcspn(s, "\r\n");
        if (n)
            snprintf(out, cap, "%.*s", (int)n, s);
        break;
    }
    fclose(f);
}

static int file_readable(const char *path) {
    return access(path, R_OK) == 0;
}

/* Finds the folder that holds kiln_cpu.h: $KILN_HOME/src/backend, else the source tree the library
 * was built from, else beside the running executable (build/kiln or build/tests/x in a checkout).
 */
static int cpu_find_header(char *dir, size_t cap, kiln_err *err) {
    const char *home = getenv("KILN_HOME");
    if (home && *home) {
        snprintf(dir, cap, "%s/src/backend", home);
        char *h = kiln_path_join(dir, "kiln_cpu.h");
        int ok = file_readable(h);
        free(h);
        if (ok)
            return KILN_OK;
        return kiln_errf(err, KILN_ERR_BACKEND,
                         "KILN_HOME=%s, but %s/kiln_cpu.h is missing (KILN_HOME must be the kiln "
                         "source tree)",
                         home, dir);
    }
    char candidates[3][PATH_MAX];
    int n = 0;
#ifdef KILN_SOURCE_DIR
    snprintf(candidates[n++], PATH_MAX, "%s/src/backend", KILN_SOURCE_DIR);
#endif
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(candidates[n++], PATH_MAX, "%.*s/../src/backend", PATH_MAX - 32, exe);
            snprintf(candidates[n++], PATH_MAX, "%.*s/../../src/backend", PATH_MAX - 32, exe);
        }
    }
    for (int i = 0; i < n; i++) {
        char *h = kiln_path_join(candidates[i], "kiln_cpu.h");
        int ok = file_readable(h);
        free(h);
        size_t len_i = strlen(candidates[i]);
        if (ok && len_i < cap) {
            memcpy(dir, candidates[i], len_i + 1);
            return KILN_OK;
        }
    }
    return kiln_errf(err, KILN_ERR_BACKEND,
                     "cannot find kiln_cpu.h (looked in the source tree kiln was built from and "
                     "beside the executable); set KILN_HOME to the kiln source tree");
}

static int cpu_init(kiln_backend *be, int device, const kiln_backend_config *cfg, kiln_err *err) {
    if (device != 0)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "the cpu backend has one device (0), not %d",
                         device);
    cpu_state *st = xcalloc(1, sizeof *st);
    int rc = cpu_find_header(st->header_dir, sizeof st->header_dir, err);
    if (rc == KILN_OK && cfg->sandbox)
        rc = kiln_sandbox_open(&st->sbx, err);
    st->check_imports = cfg->check_imports;
    if (rc) {
        free(st);
        return rc;
    }
    cpu_model_name(st->info.name, sizeof st->info.name);
    uint64_t h = kiln_fnv1a(KILN_FNV_INIT, st->info.name, strlen(st->info.name));
    snprintf(st->info.uuid, sizeof st->info.uuid, "cpu-%016llx", (unsigned long long)h);
    long n_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    st->info.n_sms = n_cpus > 0 ? (int)n_cpus : 1;
    st->info.clock_khz = 0; /* none: the gate derives no tensor-core ceiling for a cpu */
    size_t llc = cpu_llc_bytes();
    st->info.l2_bytes = llc ? llc : CPU_FALLBACK_LLC_BYTES;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    st->info.mem_bytes = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    be->impl = st;
    return KILN_OK;
}

static void cpu_free(kiln_backend *be, kiln_devptr p);

static void cpu_shutdown(kiln_backend *be) {
    cpu_state *st = be->impl;
    if (!st)
        return;
    while (st->allocs)
        cpu_free(be, st->allocs->user);
    kiln_sandbox_close(st->sbx);
    free(st->flush_buf);
    free(st);
    be->impl = NULL;
}

static void cpu_device_info(kiln_backend *be, kiln_device_info *out) {
    cpu_state *st = be->impl;
    *out = st->info;
}

/* ---- compiling ---- */

/* Splits $KILN_CC (or "cc") into words; the compiler may come with flags ("gcc
 * -fsanitize=address"). */
static int cc_words(char *buf, size_t cap, char **argv, int max) {
    const char *cc = getenv("KILN_CC");
    snprintf(buf, cap, "%s", cc && *cc ? cc : "cc");
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t", &save); tok && n < max;
         tok = strtok_r(NULL, " \t", &save))
        argv[n++] = tok;
    return n;
}

static double cc_timeout_s(void) {
    const char *s = getenv("KILN_CC_TIMEOUT");
    double v = s ? atof(s) : 0;
    return v > 0 ? v : CPU_DEFAULT_CC_TIMEOUT_S;
}

/* Runs argv with stdout and stderr into log_path, killing its whole process group (the driver and
 * cc1/as/ld under it) past the timeout. *exit_code gets the exit status, or -signal. */
static int run_compiler(char *const argv[], const char *log_path, double timeout_s, int *exit_code,
                        kiln_err *err) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0)
        return kiln_errf(err, KILN_ERR_BACKEND, "cannot run the C compiler '%s': %s", argv[0],
                         strerror(e));
    double deadline = kiln_now_s() + timeout_s;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return kiln_errf(err, KILN_ERR_BACKEND, "waiting for the C compiler: %s",
                             strerror(errno));
        if (kiln_now_s() > deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return kiln_errf(err, KILN_ERR_COMPILE, "the C compiler ran past its %.0f s limit",
                             timeout_s);
        }
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return KILN_OK;
}

static const char *trampoline_type(kiln_param_kind kind) {
    switch (kind) {
    case KILN_PARAM_PTR:
        return "void*";
    case KILN_PARAM_I64:
        return "int64_t";
    case KILN_PARAM_I32:
        return "int32_t";
    case KILN_PARAM_F32:
        return "float";
    case KILN_PARAM_F64:
        return "double";
    case KILN_PARAM_BOOL:
        return "bool";
    }
    return "void*";
}

/* The translation unit that calls each launch's entry point from an array of parameter pointers. */
static char *trampoline_source(const kiln_signature *sig, const kiln_abi *abi) {
    size_t cap = 4096, len = 0;
    char *s = xmalloc(cap);
    s[0] = 0;
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        int need_ = snprintf(NULL, 0, __VA_ARGS__);                                                \
        if (len + (size_t)need_ + 1 > cap) {                                                       \
            cap = 2 * (len + (size_t)need_ + 1);                                                   \
            s = xrealloc(s, cap);                                                                  \
        }                                                                                          \
        snprintf(s + len, cap - len, __VA_ARGS__);                                                 \
        len += (size_t)need_;                                                                      \
    } while (0)
    EMIT("/* generated by kiln: calls the candidate's entry points from a parameter array */\n");
    EMIT("#include <stdint.h>\n#include <stdbool.h>\n");
    for (int k = 0; k < abi->n_launches; k++) {
        const char *entry = abi->launch[k].entry;
        EMIT("extern void %s(", entry);
        for (int i = 0; i < sig->n; i++)
            EMIT("%s%s", i ? ", " : "", trampoline_type(sig->p[i].kind));
        EMIT("%s);\n", sig->n ? "" : "void");
        EMIT("void kiln__call_%d(void **params) {\n    %s(", k, entry);
        for (int i = 0; i < sig->n; i++)
            EMIT("%s*(%s *)params[%d]", i ? ", " : "", trampoline_type(sig->p[i].kind), i);
        EMIT(");\n}\n");
    }
#undef EMIT
    return s;
}

/* Removes the first n of files from dir. */
static void remove_files(const char *dir, const char *const *files, int n) {
    for (int i = 0; i < n; i++) {
        char *p = kiln_path_join(dir, files[i]);
        unlink(p);
        free(p);
    }
}

static int valid_entry_name(const char *s) {
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

/* When dlopen names an undefined symbol, returns which entry point it is (or NULL). */
static const char *undefined_entry(const char *dlerr, const kiln_abi *abi) {
    const char *u = dlerr ? strstr(dlerr, "undefined symbol: ") : NULL;
    if (!u)
        return NULL;
    u += strlen("undefined symbol: ");
    size_t n = strcspn(u, " \t\r\n,()");
    for (int k = 0; k < abi->n_launches; k++)
        if (strlen(abi->launch[k].entry) == n && memcmp(abi->launch[k].entry, u, n) == 0)
            return abi->launch[k].entry;
    return NULL;
}

/* Removes every "DIR/" from text in place, so that the log says "candidate.c:3:5: error ..." and
 * reads the same for every compile of the same source. */
static void strip_prefix(char *text, const char *dir) {
    size_t dlen = strlen(dir);
    char *w = text;
    for (const char *r = text; *r;) {
        if (strncmp(r, dir, dlen) == 0 && r[dlen] == '/')
            r += dlen + 1;
        else
            *w++ = *r++;
    }
    *w = 0;
}

/* Appends line to the heap log *log (which may be NULL). */
static void log_append(char **log, const char *line) {
    char *old = *log;
    *log = xasprintf("%s%s%s\n", old ? old : "",
                     old && *old && old[strlen(old) - 1] != '\n' ? "\n" : "", line);
    free(old);
}

/* Files a compile may leave in its folder; a sandboxed module keeps the last two until it is freed.
 */
static const char *const compile_files[] = {
    "candidate.c",           "kiln_trampoline.c", "compile.log", "candidate.c.tmp",
    "kiln_trampoline.c.tmp", "candidate.so",      "runner.log"};
#define N_COMPILE_FILES ((int)(sizeof compile_files / sizeof compile_files[0]))
#define N_SOURCE_FILES 5 /* the ones before candidate.so */

/* Compiles source and its trampolines into dir/candidate.so. *log gets the compiler's output. */
static int cpu_build(cpu_state *st, const char *dir, const char *source, const kiln_signature *sig,
                     const kiln_abi *abi, char **log, kiln_err *err) {
    char *src_path = kiln_path_join(dir, "candidate.c");
    char *tramp_path = kiln_path_join(dir, "kiln_trampoline.c");
    char *so_path = kiln_path_join(dir, "candidate.so");
    char *log_path = kiln_path_join(dir, "compile.log");
    char *header = kiln_path_join(st->header_dir, "kiln_cpu.h");
    char *tramp = trampoline_source(sig, abi);
    int rc = kiln_write_file(src_path, source, strlen(source), err);
    if (rc == KILN_OK)
        rc = kiln_write_file(tramp_path, tramp, strlen(tramp), err);
    if (rc == KILN_OK) {
        char cc_buf[1024];
        char *argv[64];
        int n = cc_words(cc_buf, sizeof cc_buf, argv, 32);
        const char *flags[] = {"-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11",
                               /* no crt files: their frame_dummy and _init would be code that
                                * runs at load time, which the sandbox refuses (sandbox_elf.c) */
                               "-nostartfiles",
                               /* an undeclared function is always a bug; say where, not at load */
                               "-Werror=implicit-function-declaration",
                               /* -I too, so that an explicit #include "kiln_cpu.h" works */
                               "-I", st->header_dir, "-include", header, "-o", so_path, src_path,
                               tramp_path, "-lm"};
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
            argv[n++] = (char *)flags[i];
        argv[n] = NULL;
        int exit_code = 0;
        rc = run_compiler(argv, log_path, cc_timeout_s(), &exit_code, err);
        char *text = NULL;
        size_t text_len = 0;
        if (kiln_read_file(log_path, &text, &text_len, NULL) == KILN_OK && text_len > 0) {
            strip_prefix(text, dir);
            *log = text;
        } else {
            free(text);
        }
        if (rc == KILN_OK && exit_code != 0) {
            if (exit_code > 0)
                rc = kiln_errf(err, KILN_ERR_COMPILE, "the C compiler failed (exit status %d)",
                               exit_code);
            else
                rc = kiln_errf(err, KILN_ERR_COMPILE, "the C compiler died of signal %d",
                               -exit_code);
        }
    }
    free(src_path);
    free(tramp_path);
    free(so_path);
    free(log_path);
    free(header);
    free(tramp);
    return rc;
}

/* A candidate that did not load is a compile error; an entry point missing from it is the usual
 * reason, and then the message says what to define. */
static int load_failed(const char *why, const kiln_signature *sig, const kiln_abi *abi, char **log,
                       kiln_err *err) {
    const char *missing = undefined_entry(why, abi);
    char *msg;
    if (missing) {
        char *proto = kiln_abi_prototype(sig, missing, 0);
        msg = xasprintf("entry point '%s' is not defined (expected a non-static function %s)",
                        missing, proto);
        free(proto);
    } else {
        msg = xasprintf("cannot load the compiled candidate: %s", why ? why : "?");
    }
    log_append(log, msg);
    int rc = kiln_errf(err, KILN_ERR_COMPILE, "%s", msg);
    free(msg);
    return rc;
}

/* Loads dir/candidate.so into this process. */
static int cpu_load_here(kiln_module *m, const char *dir, const kiln_signature *sig,
                         const kiln_abi *abi, char **log, kiln_err *err) {
    char *so_path = kiln_path_join(dir, "candidate.so");
    void *dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    free(so_path);
    if (!dl)
        return load_failed(dlerror(), sig, abi, log, err);
    /* OpenMP runtimes park worker threads inside themselves: unloading one while they sleep
     * crashes the process later, so pin whichever one the candidate pulled in. */
    static const char *const omp_libs[] = {"libgomp.so.1", "libomp.so.5", "libomp.so",
                                           "libiomp5.so"};
    for (size_t i = 0; i < sizeof omp_libs / sizeof omp_libs[0]; i++) {
        void *h = dlopen(omp_libs[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (h)
            dlclose(h);
    }
    for (int k = 0; k < abi->n_launches; k++) {
        char sym[32];
        snprintf(sym, sizeof sym, "kiln__call_%d", k);
        void *f = dlsym(dl, sym);
        if (!f) {
            dlclose(dl);
            return kiln_errf(err, KILN_ERR_BACKEND, "trampoline %s missing from the candidate",
                             sym);
        }
        memcpy(&m->call[k], &f, sizeof f); /* object to function pointer, as POSIX allows */
    }
    m->dl = dl;
    return KILN_OK;
}

/* Checks dir/candidate.so and starts a runner that loads it (the folder stays with the module). */
static int cpu_load_sandboxed(cpu_state *st, kiln_module *m, const char *dir,
                              const kiln_signature *sig, const kiln_abi *abi, char **log,
                              kiln_err *err) {
    char *so_path = kiln_path_join(dir, "candidate.so");
    kiln_err lerr = {{0}};
    int rc = kiln_sandbox_check_elf(so_path, st->check_imports, &lerr);
    free(so_path);
    if (rc) {
        log_append(log, lerr.msg);
        return kiln_errf(err, rc, "%s", lerr.msg);
    }
    rc = kiln_runner_open(st->sbx, dir, abi->n_launches, &m->runner, &lerr);
    if (rc == KILN_ERR_COMPILE)
        return load_failed(lerr.msg, sig, abi, log, err);
    if (rc)
        return kiln_errf(err, rc, "%s", lerr.msg);
    return KILN_OK;
}

static int cpu_compile(kiln_backend *be, const char *source, const kiln_signature *sig,
                       const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err) {
    cpu_state *st = be->impl;
    KILN_ASSERT(source && sig && abi && out);
    char *ignored_log = NULL;
    if (!log)
        log = &ignored_log;
    *out = NULL;
    *log = NULL;
    if (abi->n_launches < 1 || abi->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a candidate needs 1 to %d launches, not %d",
                         KILN_MAX_LAUNCHES, abi->n_launches);
    for (int k = 0; k < abi->n_launches; k++)
        if (!valid_entry_name(abi->launch[k].entry))
            return kiln_errf(err, KILN_ERR_COMPILE, "'%s' is not a valid entry point name",
                             abi->launch[k].entry);

    const char *tmp = getenv("TMPDIR");
    char *dir = xasprintf("%s/kiln-cpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        int rc = kiln_errf(err, KILN_ERR_IO, "cannot create a temporary folder %s: %s", dir,
                           strerror(errno));
        free(dir);
        return rc;
    }
    kiln_module *m = xcalloc(1, sizeof *m);
    m->n = abi->n_launches;
    for (int k = 0; k < abi->n_launches; k++)
        snprintf(m->entry[k], sizeof m->entry[k], "%s", abi->launch[k].entry);
    m->n_params = sig->n;
    for (int i = 0; i < sig->n; i++)
        m->kind[i] = sig->p[i].kind;
    int rc = cpu_build(st, dir, source, sig, abi, log, err);
    if (rc == KILN_OK)
        rc = st->sbx ? cpu_load_sandboxed(st, m, dir, sig, abi, log, err)
                     : cpu_load_here(m, dir, sig, abi, log, err);
    if (rc == KILN_OK && st->sbx) {
        remove_files(dir, compile_files, N_SOURCE_FILES); /* candidate.so and the log stay */
        m->dir = dir;
    } else {
        remove_files(dir, compile_files, N_COMPILE_FILES);
        rmdir(dir);
        free(dir);
    }
    if (rc) {
        free(m);
        m = NULL;
    }
    free(ignored_log);
    *out = m;
    return rc;
}

static void cpu_module_free(kiln_backend *be, kiln_module *m) {
    (void)be;
    if (!m)
        return;
    if (m->runner)
        kiln_runner_close(m->runner);
    if (m->dl)
        dlclose(m->dl);
    if (m->dir) {
        remove_files(m->dir, compile_files, N_COMPILE_FILES);
        rmdir(m->dir);
        free(m->dir);
    }
    free(m);
}

static int cpu_entry_attrs(kiln_backend *be, kiln_module *m, const char *entry, int *regs,
                           size_t *static_smem, kiln_err *err) {
    (void)be;
    for (int k = 0; k < m->n; k++) {
        if (strcmp(m->entry[k], entry) == 0) {
            if (regs)
                *regs = 0;
            if (static_smem)
                *static_smem = 0;
            return KILN_OK;
        }
    }
    return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' is not in this module", entry);
}

/* ---- memory ---- */

/* Plain memory, and every buffer of the backend in this process: pages of its own that end at a
 * PROT_NONE page. */
static int cpu_alloc_here(cpu_state *st, size_t n_bytes, unsigned flags, kiln_devptr *out,
                          kiln_err *err) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n_bytes > SIZE_MAX / 2 - 2 * page)
        return kiln_errf(err, KILN_ERR_RESOURCE, "cannot allocate %zu bytes", n_bytes);
    size_t rounded = (n_bytes + 15) & ~(size_t)15;
    size_t data_len = (rounded + page - 1) / page * page;
    size_t map_len = data_len + page;
    void *base = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return kiln_errf(err, KILN_ERR_RESOURCE, "cannot allocate %zu bytes: %s", n_bytes,
                         strerror(errno));
    if (mprotect((char *)base + data_len, page, PROT_NONE) != 0) {
        int e = errno;
        munmap(base, map_len);
        return kiln_errf(err, KILN_ERR_BACKEND, "cannot protect the guard page: %s", strerror(e));
    }
    cpu_alloc *a = xcalloc(1, sizeof *a);
    a->base = base;
    a->map_len = map_len;
    a->user = (uintptr_t)base + data_len - rounded;
    a->n_bytes = rounded;
    a->data_len = data_len;
    a->read_only = (flags & KILN_ALLOC_CANDIDATE) && (flags & KILN_ALLOC_READONLY);
    if (a->read_only)
        mprotect(base, data_len, PROT_READ);
    a->next = st->allocs;
    st->allocs = a;
    *out = (kiln_devptr)a->user;
    return KILN_OK;
}

static int cpu_alloc_fn(kiln_backend *be, size_t n_bytes, unsigned flags, kiln_devptr *out,
                        kiln_err *err) {
    cpu_state *st = be->impl;
    if (st->sbx && (flags & KILN_ALLOC_CANDIDATE))
        return kiln_sandbox_alloc(st->sbx, n_bytes, (flags & KILN_ALLOC_READONLY) != 0, out, err);
    return cpu_alloc_here(st, n_bytes, flags, out, err);
}

static void cpu_free(kiln_backend *be, kiln_devptr p) {
    cpu_state *st = be->impl;
    if (st->sbx && kiln_sandbox_free(st->sbx, p))
        return;
    for (cpu_alloc **link = &st->allocs; *link; link = &(*link)->next) {
        cpu_alloc *a = *link;
        if (a->user == (uintptr_t)p) {
            *link = a->next;
            munmap(a->base, a->map_len);
            free(a);
            return;
        }
    }
}

/* The address at which this process reads and writes [p, p + n) — a sandbox buffer's view, or the
 * allocation itself — and in *lock the allocation to unlock around a write (a read-only one made
 * here). NULL (with err) when the range is not inside one allocation, so that a gate bug is an
 * error, not a fault. */
static void *cpu_resolve(cpu_state *st, kiln_devptr p, size_t n, const char *what, cpu_alloc **lock,
                         kiln_err *err) {
    *lock = NULL;
    if (st->sbx) {
        void *view = kiln_sandbox_view(st->sbx, p, n);
        if (view)
            return view;
    }
    for (cpu_alloc *a = st->allocs; a; a = a->next)
        if ((uintptr_t)p >= a->user && (uintptr_t)p - a->user <= a->n_bytes &&
            n <= a->n_bytes - ((uintptr_t)p - a->user)) {
            *lock = a;
            return (void *)(uintptr_t)p;
        }
    kiln_errf(err, KILN_ERR_INVALID, "%s: %zu bytes at 0x%llx are not inside one allocation", what,
              n, (unsigned long long)p);
    return NULL;
}

/* A read-only buffer made here is writable only while the gate itself writes it. */
static void cpu_unlock(cpu_alloc *a, int writable) {
    if (a && a->read_only)
        mprotect(a->base, a->data_len, writable ? PROT_READ | PROT_WRITE : PROT_READ);
}

static int cpu_upload(kiln_backend *be, kiln_devptr dst, const void *src, size_t n, kiln_err *err) {
    cpu_alloc *lock;
    void *to = cpu_resolve(be->impl, dst, n, "upload", &lock, err);
    if (!to)
        return KILN_ERR_INVALID;
    cpu_unlock(lock, 1);
    if (n)
        memcpy(to, src, n);
    cpu_unlock(lock, 0);
    return KILN_OK;
}

static int cpu_download(kiln_backend *be, void *dst, kiln_devptr src, size_t n, kiln_err *err) {
    cpu_alloc *lock;
    const void *from = cpu_resolve(be->impl, src, n, "download", &lock, err);
    if (!from)
        return KILN_ERR_INVALID;
    if (n)
        memcpy(dst, from, n);
    return KILN_OK;
}

static int cpu_memset8(kiln_backend *be, kiln_devptr dst, uint8_t value, size_t n, kiln_err *err) {
    cpu_alloc *lock;
    void *to = cpu_resolve(be->impl, dst, n, "memset", &lock, err);
    if (!to)
        return KILN_ERR_INVALID;
    cpu_unlock(lock, 1);
    if (n)
        memset(to, value, n);
    cpu_unlock(lock, 0);
    return KILN_OK;
}

static int cpu_copy(kiln_backend *be, kiln_devptr dst, kiln_devptr src, size_t n, kiln_err *err) {
    cpu_alloc *lock, *ignored;
    void *to = cpu_resolve(be->impl, dst, n, "copy", &lock, err);
    const void *from = to ? cpu_resolve(be->impl, src, n, "copy", &ignored, err) : NULL;
    if (!from)
        return KILN_ERR_INVALID;
    cpu_unlock(lock, 1);
    if (n)
        memmove(to, from, n);
    cpu_unlock(lock, 0);
    return KILN_OK;
}

static void *cpu_host_view(kiln_backend *be, kiln_devptr p) {
    cpu_state *st = be->impl;
    if (st->sbx) {
        void *view = kiln_sandbox_view(st->sbx, p, 0);
        if (view)
            return view;
    }
    return (void *)(uintptr_t)p; /* memory of this process */
}

/* ---- running ---- */

/* The bytes of a parameter of this kind (its slot in a call record holds them at its start). */
static size_t param_bytes(kiln_param_kind kind) {
    switch (kind) {
    case KILN_PARAM_I32:
    case KILN_PARAM_F32:
        return 4;
    case KILN_PARAM_BOOL:
        return sizeof(bool);
    case KILN_PARAM_PTR:
    case KILN_PARAM_I64:
    case KILN_PARAM_F64:
        return 8;
    }
    return 8;
}

/* One call into the module's runner. A pointer the runner does not map is refused here: it would
 * only be a fault in the candidate's process, blamed on the candidate. */
static int cpu_call_runner(cpu_state *st, kiln_module *m, const int *which, int n_launches,
                           void **params, kiln_err *err) {
    uint64_t value[KILN_MAX_PARAMS] = {0};
    for (int i = 0; i < m->n_params; i++) {
        memcpy(&value[i], params[i], param_bytes(m->kind[i]));
        if (m->kind[i] == KILN_PARAM_PTR && value[i] &&
            !kiln_sandbox_view(st->sbx, (kiln_devptr)value[i], 0))
            return kiln_errf(err, KILN_ERR_INVALID,
                             "parameter %d (0x%llx) is not a candidate buffer: a sandboxed "
                             "candidate sees only memory allocated with KILN_ALLOC_CANDIDATE",
                             i, (unsigned long long)value[i]);
    }
    uint32_t entry[KILN_MAX_LAUNCHES];
    for (int i = 0; i < n_launches; i++)
        entry[i] = (uint32_t)which[i];
    return kiln_runner_call(m->runner, n_launches, entry, m->n_params, value, err);
}

static int cpu_launch(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan, void **params,
                      kiln_err *err) {
    /* Resolve every launch first, so that a bad plan runs nothing. */
    int which[KILN_MAX_LAUNCHES];
    if (plan->n_launches < 0 || plan->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a plan of %d launches", plan->n_launches);
    for (int i = 0; i < plan->n_launches; i++) {
        which[i] = -1;
        for (int k = 0; k < m->n && which[i] < 0; k++)
            if (strcmp(m->entry[k], plan->launch[i].entry) == 0)
                which[i] = k;
        if (which[i] < 0)
            return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' was not compiled",
                             plan->launch[i].entry);
    }
    cpu_state *st = be->impl;
    if (st->sbx)
        return cpu_call_runner(st, m, which, plan->n_launches, params, err);
    for (int i = 0; i < plan->n_launches; i++)
        m->call[which[i]](params);
    return KILN_OK;
}

static void cpu_set_call_limit(kiln_backend *be, double seconds) {
    cpu_state *st = be->impl;
    if (st->sbx)
        kiln_sandbox_set_call_limit(st->sbx, seconds);
}

static int cpu_wait(kiln_backend *be, double timeout_s, kiln_err *err) {
    (void)be, (void)timeout_s, (void)err;
    return KILN_OK; /* launches run to completion on the calling thread */
}

static int cpu_sync(kiln_backend *be, kiln_err *err) {
    (void)be;
    (void)err;
    return KILN_OK;
}

static int cpu_flush_cache(kiln_backend *be, kiln_err *err) {
    (void)err;
    cpu_state *st = be->impl;
    if (!st->flush_buf) {
        st->flush_len = 2 * st->info.l2_bytes;
        if (st->flush_len > CPU_MAX_FLUSH_BYTES)
            st->flush_len = CPU_MAX_FLUSH_BYTES;
        st->flush_buf = xmalloc(st->flush_len);
    }
    /* A different byte each time: the buffer escapes into st, so the stores cannot be elided. */
    memset(st->flush_buf, (int)(++st->flush_round & 0xff), st->flush_len);
    return KILN_OK;
}

static int cpu_timer_create(kiln_backend *be, kiln_timer **out, kiln_err *err) {
    (void)be;
    (void)err;
    *out = xcalloc(1, sizeof **out);
    return KILN_OK;
}

static void cpu_timer_destroy(kiln_backend *be, kiln_timer *t) {
    (void)be;
    free(t);
}

/* Sandbox work (starting runners, stopping them after a reply) is left out of a timer: what it
 * measures is the candidate's calls as the gate sees them, send to reply. */
static double cpu_overhead_s(const cpu_state *st) {
    return st->sbx ? kiln_sandbox_overhead_s(st->sbx) : 0.0;
}

static int cpu_timer_start(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    (void)err;
    t->start_overhead_s = cpu_overhead_s(be->impl);
    clock_gettime(CLOCK_MONOTONIC, &t->start);
    t->started = 1;
    t->stopped = 0;
    return KILN_OK;
}

static int cpu_timer_stop(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    if (!t->started)
        return kiln_errf(err, KILN_ERR_INVALID, "timer stopped before it was started");
    clock_gettime(CLOCK_MONOTONIC, &t->stop);
    t->stop_overhead_s = cpu_overhead_s(be->impl);
    t->stopped = 1;
    return KILN_OK;
}

static int cpu_timer_elapsed_us(kiln_backend *be, kiln_timer *t, double *us, kiln_err *err) {
    (void)be;
    if (!t->started || !t->stopped)
        return kiln_errf(err, KILN_ERR_INVALID, "timer read before it was started and stopped");
    *us = (double)(t->stop.tv_sec - t->start.tv_sec) * 1e6 +
          (double)(t->stop.tv_nsec - t->start.tv_nsec) * 1e-3 -
          (t->stop_overhead_s - t->start_overhead_s) * 1e6;
    return KILN_OK;
}

size_t kiln_cpu_runner_log_tail(kiln_backend *be, kiln_module *m, char *buf, size_t cap) {
    if (cap)
        buf[0] = 0;
    if (!be || be->ops != &kiln_backend_cpu || !m || !m->runner)
        return 0;
    return kiln_runner_log_tail(m->runner, buf, cap);
}

const kiln_backend_ops kiln_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .device_info = cpu_device_info,
    .compile = cpu_compile,
    .module_free = cpu_module_free,
    .entry_attrs = cpu_entry_attrs,
    .alloc = cpu_alloc_fn,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .memset8 = cpu_memset8,
    .copy = cpu_copy,
    .host_view = cpu_host_view,
    .launch = cpu_launch,
    .sync = cpu_sync,
    .wait = cpu_wait,
    .flush_cache = cpu_flush_cache,
    .timer_create = cpu_timer_create,
    .timer_destroy = cpu_timer_destroy,
    .timer_start = cpu_timer_start,
    .timer_stop = cpu_timer_stop,
    .timer_elapsed_us = cpu_timer_elapsed_us,
    .set_call_limit = cpu_set_call_limit,
};
