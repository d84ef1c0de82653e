/* nvrtc.c: NVRTC, the CUDA compiler kiln runs in its own process: finding and loading it, the
 * options and the prelude every candidate is compiled with, the architecture it is compiled for,
 * and the cubin cache.
 *
 * Why dlopen. NVRTC comes with the toolkit, not with the driver, and is opened at run time on its
 * own (libnvrtc.so.13, .12, then under $CUDA_HOME/lib64), so that compiling
 * (kiln_cuda_compile_only, what CI uses to prove that sources build for sm_90) works where there is
 * a toolkit but no driver, and kiln still starts where there is neither.
 *
 * NVRTC and the standard headers. NVRTC 13 ships no <stdint.h>/<cstdint> (checked: "cannot open
 * source file"), and neither int64_t nor INFINITY is predefined; <cuda_bf16.h>/<cuda_fp16.h> are
 * found only through an include path to the toolkit. Candidates use int64_t in every signature
 * (docs/abi.md), so every compile pre-includes an in-memory prelude (--pre-include, so that line
 * numbers in the log stay the candidate's own) that includes libcu++'s <cuda/std/cstdint> (under
 * NVRTC it defines the fixed width types in the global namespace) and <cuda/std/climits>, and
 * defines INFINITY and NAN (constant expressions, through __builtin_bit_cast) and the FLT_/DBL_
 * limits. Not <cuda/std/limits>: it adds ~80 KB of unused code to every cubin. `#include
 * <stdint.h>`, <math.h>, <float.h>, <assert.h> and friends resolve to empty in-memory headers, so
 * that C habits compile; the math functions (expf, fmaxf, ...) and assert are built into NVRTC.
 * Where the toolkit's libcu++ (include/cccl) is missing, a fallback prelude typedefs the integer
 * types itself. Options: --gpu-architecture=sm_XY (sm_90a only when the source uses wgmma or
 * setmaxnreg, or KILN_CUDA_ARCH says so: kiln_cuda_arch), -std=c++17, -default-device, -lineinfo,
 * no
 * --use_fast_math. Cost, measured with NVRTC 13.0: a small kernel compiles in ~60 ms, ~80 ms with
 * <cuda_bf16.h>; the prelude's share is a few ms.
 *
 * The cubin cache. The same source with the same options is the same cubin: agents compile a
 * candidate (to hash its binary) before the gate loads it, and a sweep compiles on every core
 * first, so every compile looks in <cache>/cubin/<key>.cubin (docs/gate.md) before it runs NVRTC.
 * A cached file is used only when it is an ELF image, and written atomically (rename). Loading
 * NVRTC runs under pthread_once and allocates nothing, so that libkiln_rt may compile under its
 * out-of-memory scope (src/util/common.h). */
#include "nvrtc.h" /* kiln's; the toolkit's comes next, through the include path */

#include <nvrtc.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NVRTC_FUNCS(X)                                                                             \
    X(nvrtcResult, nvrtcCreateProgram,                                                             \
      (nvrtcProgram * prog, const char *src, const char *name, int n_headers,                      \
       const char *const *headers, const char *const *include_names))                              \
    X(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram prog, int n_opts, const char *const *opts))  \
    X(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t * n))                        \
    X(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram prog, char *log))                             \
    X(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram prog, size_t * n))                             \
    X(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram prog, char *cubin))                                \
    X(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram * prog))                                     \
    X(const char *, nvrtcGetErrorString, (nvrtcResult r))

#define NVRTC_MEMBER(ret, name, params) ret(*name) params;
typedef struct {
    NVRTC_FUNCS(NVRTC_MEMBER)
} nvrtc_api;
#undef NVRTC_MEMBER

#define NVRTC_SYM(ret, name, params) {#name, offsetof(nvrtc_api, name)},
static const struct {
    const char *name;
    size_t offset;
} nvrtc_syms[] = {NVRTC_FUNCS(NVRTC_SYM)};
#undef NVRTC_SYM

static nvrtc_api nvrtc;
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static int nvrtc_status = -1;
static char nvrtc_msg[1024];
/* --include-path options for the folders that exist: the toolkit's include/ and include/cccl
 * (libcu++) under CUDA_HOME and the usual places. */
static char nvrtc_incs[8][600];
static int nvrtc_n_incs;
static int nvrtc_have_libcudacxx;

const char *kiln_cuda_home(void) {
    const char *h = getenv("CUDA_HOME");
    return h && *h ? h : "/usr/local/cuda";
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void nvrtc_add_include(const char *dir) {
    char opt[sizeof nvrtc_incs[0]];
    if (nvrtc_n_incs == (int)(sizeof nvrtc_incs / sizeof nvrtc_incs[0]) || !is_dir(dir) ||
        strlen(dir) + 16 >= sizeof opt)
        return;
    snprintf(opt, sizeof opt, "--include-path=%s", dir);
    for (int i = 0; i < nvrtc_n_incs; i++)
        if (strcmp(nvrtc_incs[i], opt) == 0)
            return;
    memcpy(nvrtc_incs[nvrtc_n_incs++], opt, sizeof opt);
    char probe[sizeof opt + 32];
    snprintf(probe, sizeof probe, "%s/cuda/std/cstdint", dir);
    struct stat sb;
    if (stat(probe, &sb) == 0)
        nvrtc_have_libcudacxx = 1;
}

static void nvrtc_load_once(void) {
    char tried[6][300];
    int n_tried = 0;
    const char *home = kiln_cuda_home();
    snprintf(tried[n_tried++], sizeof tried[0], "libnvrtc.so.13");
    snprintf(tried[n_tried++], sizeof tried[0], "libnvrtc.so.12");
    snprintf(tried[n_tried++], sizeof tried[0], "libnvrtc.so");
    snprintf(tried[n_tried++], sizeof tried[0], "%.250s/lib64/libnvrtc.so.13", home);
    snprintf(tried[n_tried++], sizeof tried[0], "%.250s/lib64/libnvrtc.so.12", home);
    snprintf(tried[n_tried++], sizeof tried[0], "%.250s/lib64/libnvrtc.so", home);
    void *lib = NULL;
    for (int i = 0; i < n_tried && !lib; i++)
        lib = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        nvrtc_status = KILN_ERR_BACKEND;
        snprintf(
            nvrtc_msg, sizeof nvrtc_msg,
            "NVRTC not found (tried libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so and %s/lib64): "
            "install the CUDA toolkit or set CUDA_HOME",
            home);
        return;
    }
    for (size_t i = 0; i < sizeof nvrtc_syms / sizeof nvrtc_syms[0]; i++) {
        void *fn = dlsym(lib, nvrtc_syms[i].name);
        if (!fn) {
            nvrtc_status = KILN_ERR_BACKEND;
            snprintf(nvrtc_msg, sizeof nvrtc_msg, "NVRTC lacks %s (kiln needs NVRTC 12 or newer)",
                     nvrtc_syms[i].name);
            return;
        }
        memcpy((char *)&nvrtc + nvrtc_syms[i].offset, &fn, sizeof fn);
    }
    char dir[600];
    const char *bases[] = {home, "/usr/local/cuda", "/usr/local/cuda/targets/x86_64-linux"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        snprintf(dir, sizeof dir, "%.500s/include", bases[i]);
        nvrtc_add_include(dir);
        snprintf(dir, sizeof dir, "%.500s/include/cccl", bases[i]);
        nvrtc_add_include(dir);
    }
    nvrtc_status = KILN_OK;
}

static int nvrtc_load(kiln_err *err) {
    pthread_once(&nvrtc_once, nvrtc_load_once);
    if (nvrtc_status != KILN_OK)
        return kiln_errf(err, nvrtc_status, "%s", nvrtc_msg);
    return KILN_OK;
}

int kiln_cuda_have_nvrtc(void) {
    return nvrtc_load(NULL) == KILN_OK;
}

/* Pre-included into every candidate (see the essay above). */
static const char prelude_libcudacxx[] = "#include <cuda/std/cstdint>\n"
                                         "#include <cuda/std/climits>\n";

static const char prelude_fallback[] =
    "typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\n"
    "typedef long long int64_t;\ntypedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\n"
    "typedef unsigned int uint32_t;\ntypedef unsigned long long uint64_t;\n"
    "typedef long long intptr_t;\ntypedef unsigned long long uintptr_t;\n"
    "#define INT_MAX 0x7fffffff\n#define INT_MIN (-INT_MAX - 1)\n#define UINT_MAX 0xffffffffu\n"
    "#define LLONG_MAX 0x7fffffffffffffffLL\n#define LLONG_MIN (-LLONG_MAX - 1)\n"
    "#ifndef __FLT_MAX__\n#define __FLT_MAX__ 3.40282346638528859811704183484516925e+38F\n#endif\n"
    "#ifndef __FLT_MIN__\n#define __FLT_MIN__ 1.17549435082228750796873653722224568e-38F\n#endif\n"
    "#ifndef __FLT_EPSILON__\n#define __FLT_EPSILON__ "
    "1.19209289550781250000000000000000000e-7F\n#endif\n"
    "#ifndef __DBL_MAX__\n#define __DBL_MAX__ 1.79769313486231570814527423731704357e+308\n#endif\n"
    "#ifndef __DBL_MIN__\n#define __DBL_MIN__ 2.22507385850720138309023271733240406e-308\n#endif\n"
    "#ifndef __DBL_EPSILON__\n#define __DBL_EPSILON__ "
    "2.22044604925031308084726333618164062e-16\n#endif\n";

/* __builtin_bit_cast keeps INFINITY a constant expression, as it is in C. */
static const char prelude_common[] =
    "#ifndef INFINITY\n#define INFINITY __builtin_bit_cast(float, 0x7f800000u)\n#endif\n"
    "#ifndef NAN\n#define NAN __builtin_bit_cast(float, 0x7fc00000u)\n#endif\n"
    "#ifndef FLT_MAX\n#define FLT_MAX __FLT_MAX__\n#endif\n"
    "#ifndef FLT_MIN\n#define FLT_MIN __FLT_MIN__\n#endif\n"
    "#ifndef FLT_EPSILON\n#define FLT_EPSILON __FLT_EPSILON__\n#endif\n"
    "#ifndef DBL_MAX\n#define DBL_MAX __DBL_MAX__\n#endif\n"
    "#ifndef DBL_MIN\n#define DBL_MIN __DBL_MIN__\n#endif\n"
    "#ifndef DBL_EPSILON\n#define DBL_EPSILON __DBL_EPSILON__\n#endif\n";

/* C and C++ standard headers a candidate may include out of habit: all they would provide is in the
 * prelude already (or built into NVRTC), so they resolve to an empty in-memory header. */
static const char *const shim_headers[] = {"stdint.h",  "cstdint",  "inttypes.h", "cinttypes",
                                           "stddef.h",  "cstddef",  "limits.h",   "climits",
                                           "float.h",   "cfloat",   "math.h",     "cmath",
                                           "stdbool.h", "assert.h", "cassert"};

/* "90" -> "sm_90"; "sm_90a" stays. */
static void normalize_arch(const char *arch, char *out, size_t cap) {
    if (arch[0] >= '0' && arch[0] <= '9')
        snprintf(out, cap, "sm_%s", arch);
    else
        snprintf(out, cap, "%s", arch);
}

void kiln_cuda_arch(int cc_major, int cc_minor, const char *source, char *out, size_t cap) {
    const char *env = getenv("KILN_CUDA_ARCH");
    if (env && *env) {
        normalize_arch(env, out, cap);
        return;
    }
    const int hopper_only = source && (strstr(source, "wgmma") || strstr(source, "setmaxnreg"));
    if (cc_major <= 0) {
        /* no device known (kiln optimize's workers compile before a gate loads the cubin): the
         * H100/H200 that kiln targets, sm_90a where the source needs it */
        snprintf(out, cap, "sm_90%s", hopper_only ? "a" : "");
        return;
    }
    const int a = cc_major == 9 && cc_minor == 0 && hopper_only;
    snprintf(out, cap, "sm_%d%d%s", cc_major, cc_minor, a ? "a" : "");
}

/* The first line of an NVRTC log that says "error", for the one-line message. */
static void first_error_line(const char *log, char *out, size_t cap) {
    out[0] = 0;
    for (const char *s = log; s && *s;) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        const char *e = strstr(s, "error");
        if (e && e < s + n) {
            snprintf(out, cap, "%.*s", (int)n, s);
            return;
        }
        s = nl ? nl + 1 : s + n;
    }
}

/* The cubin cache: <cache>/cubin/<key>.cubin (docs/gate.md). NULL when KILN_CUBIN_CACHE=0. */
static char *cubin_cache_file(const uint64_t key[2]) {
    const char *off = getenv("KILN_CUBIN_CACHE");
    if (off && strcmp(off, "0") == 0)
        return NULL;
    char *dir = kiln_cache_path("cubin");
    char *path = xasprintf("%s/%016llx%016llx.cubin", dir, (unsigned long long)key[0],
                           (unsigned long long)key[1]);
    free(dir);
    return path;
}

/* 1 when path holds a cubin (an ELF image); anything else is ignored, never trusted. */
static int cubin_cache_read(const char *path, char **cubin, size_t *len) {
    char *data = NULL;
    size_t n = 0;
    if (kiln_read_file(path, &data, &n, NULL) != KILN_OK)
        return 0;
    if (n < 64 || memcmp(data,
                         "\x7f"
                         "ELF",
                         4) != 0) {
        free(data);
        return 0;
    }
    *cubin = data;
    *len = n;
    return 1;
}

/* Best effort: a cache that cannot be written costs only the next compile. */
static void cubin_cache_write(const char *path, const char *cubin, size_t len) {
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    char *tmp = xasprintf("%s.%d.%lx", path, (int)getpid(), (unsigned long)pthread_self());
    if (kiln_mkdirs(dir, NULL) == KILN_OK) {
        FILE *f = fopen(tmp, "wb");
        if (f) {
            int ok = fwrite(cubin, 1, len, f) == len;
            ok &= fclose(f) == 0;
            if (!ok || rename(tmp, path) != 0)
                unlink(tmp);
        }
    }
    free(tmp);
    free(dir);
}

int kiln_cuda_compile_only(const char *source, const char *arch, char **cubin, size_t *cubin_len,
                           char **log, kiln_err *err) {
    KILN_ASSERT(source && cubin && cubin_len);
    *cubin = NULL;
    *cubin_len = 0;
    if (log)
        *log = NULL;
    int rc = nvrtc_load(err);
    if (rc)
        return rc;

    char prelude[4096];
    snprintf(prelude, sizeof prelude, "%s%s",
             nvrtc_have_libcudacxx ? prelude_libcudacxx : prelude_fallback, prelude_common);
    enum { N_SHIMS = sizeof shim_headers / sizeof shim_headers[0] };
    const char *hdr_text[N_SHIMS + 1], *hdr_name[N_SHIMS + 1];
    hdr_text[0] = prelude;
    hdr_name[0] = "kiln_cuda_prelude.h";
    for (int i = 0; i < N_SHIMS; i++) {
        hdr_text[i + 1] = "";
        hdr_name[i + 1] = shim_headers[i];
    }

    char arch_opt[64], arch_name[32];
    if (arch && *arch)
        normalize_arch(arch, arch_name, sizeof arch_name);
    else
        kiln_cuda_arch(0, 0, source, arch_name, sizeof arch_name);
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch_name);
    const char *opts[16];
    int n_opts = 0;
    opts[n_opts++] = arch_opt;
    opts[n_opts++] = "-std=c++17";
    opts[n_opts++] = "-default-device";
    opts[n_opts++] = "-lineinfo";
    opts[n_opts++] = "--pre-include=kiln_cuda_prelude.h";
    for (int i = 0; i < nvrtc_n_incs; i++)
        opts[n_opts++] = nvrtc_incs[i];

    /* The same source with the same options is the same cubin: agents compile a candidate (to
     * hash its binary) before the gate loads it, and a sweep compiles on every core first. */
    uint64_t key[2] = {KILN_FNV_INIT, 0x84222325cbf29ce4ULL};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < n_opts; i++)
            key[k] = kiln_fnv1a(key[k], opts[i], strlen(opts[i]) + 1);
        key[k] = kiln_fnv1a(key[k], prelude, strlen(prelude) + 1);
        key[k] = kiln_fnv1a(key[k], source, strlen(source));
    }
    char *cached_path = cubin_cache_file(key);
    if (cached_path && cubin_cache_read(cached_path, cubin, cubin_len)) {
        free(cached_path);
        return KILN_OK;
    }

    nvrtcProgram prog = NULL;
    nvrtcResult r =
        nvrtc.nvrtcCreateProgram(&prog, source, "candidate.cu", N_SHIMS + 1, hdr_text, hdr_name);
    if (r != NVRTC_SUCCESS) {
        free(cached_path);
        return kiln_errf(err, KILN_ERR_BACKEND, "nvrtcCreateProgram: %s",
                         nvrtc.nvrtcGetErrorString(r));
    }
    nvrtcResult cr = nvrtc.nvrtcCompileProgram(prog, n_opts, opts);
    size_t log_size = 0;
    char *text = NULL;
    if (nvrtc.nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        text = xmalloc(log_size + 1);
        if (nvrtc.nvrtcGetProgramLog(prog, text) != NVRTC_SUCCESS)
            text[0] = 0;
        text[log_size] = 0;
        size_t n = strlen(text);
        while (n && (text[n - 1] == '\n' || text[n - 1] == ' '))
            text[--n] = 0;
        if (n == 0) {
            free(text);
            text = NULL;
        }
    }
    if (cr == NVRTC_ERROR_COMPILATION) {
        char first[300];
        first_error_line(text, first, sizeof first);
        rc = kiln_errf(err, KILN_ERR_COMPILE, "NVRTC: %s", first[0] ? first : "compilation failed");
    } else if (cr == NVRTC_ERROR_INVALID_OPTION) {
        rc = kiln_errf(err, KILN_ERR_INVALID, "NVRTC refused the options (architecture '%s'?)%s%s",
                       arch_name, text ? ": " : "", text ? text : "");
    } else if (cr != NVRTC_SUCCESS) {
        rc = kiln_errf(err, KILN_ERR_BACKEND, "nvrtcCompileProgram: %s",
                       nvrtc.nvrtcGetErrorString(cr));
    }
    if (rc == KILN_OK) {
        size_t n = 0;
        if ((r = nvrtc.nvrtcGetCUBINSize(prog, &n)) != NVRTC_SUCCESS || n == 0) {
            rc = kiln_errf(err, KILN_ERR_BACKEND, "nvrtcGetCUBINSize: %s",
                           r ? nvrtc.nvrtcGetErrorString(r) : "empty cubin");
        } else {
            *cubin = xmalloc(n);
            if ((r = nvrtc.nvrtcGetCUBIN(prog, *cubin)) != NVRTC_SUCCESS) {
                rc = kiln_errf(err, KILN_ERR_BACKEND, "nvrtcGetCUBIN: %s",
                               nvrtc.nvrtcGetErrorString(r));
                free(*cubin);
                *cubin = NULL;
            } else {
                *cubin_len = n;
                if (cached_path)
                    cubin_cache_write(cached_path, *cubin, n);
            }
        }
    }
    free(cached_path);
    nvrtc.nvrtcDestroyProgram(&prog);
    if (log)
        *log = text;
    else
        free(text);
    return rc;
}

/* Writes all of buf, or fails. */
static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int kiln_cuda_compile_apart(const char *source, const char *arch, char **cubin, size_t *cubin_len,
                            char **log, kiln_err *err) {
    *cubin = NULL;
    *cubin_len = 0;
    if (log)
        *log = NULL;
    int fds[2];
    if (pipe(fds) != 0)
        return kiln_errf(err, KILN_ERR_BACKEND, "pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kiln_errf(err, KILN_ERR_BACKEND, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* the answer: status, message, log and cubin, each a length and its bytes */
        close(fds[0]);
        char *c = NULL, *l = NULL;
        size_t n = 0;
        kiln_err e = {{0}};
        int32_t rc = kiln_cuda_compile_only(source, arch, &c, &n, &l, &e);
        uint64_t lens[3] = {strlen(e.msg), l ? strlen(l) : 0, c ? n : 0};
        int bad = write_all(fds[1], &rc, sizeof rc) || write_all(fds[1], lens, sizeof lens) ||
                  write_all(fds[1], e.msg, lens[0]) || write_all(fds[1], l ? l : "", lens[1]) ||
                  write_all(fds[1], c ? c : "", lens[2]);
        _exit(bad ? 1 : 0);
    }
    close(fds[1]);
    int32_t rc = KILN_ERR_BACKEND;
    uint64_t lens[3] = {0, 0, 0};
    char *msg = NULL, *l = NULL, *c = NULL;
    int ok = read_all(fds[0], &rc, sizeof rc) == 0 && read_all(fds[0], lens, sizeof lens) == 0 &&
             lens[0] < sizeof err->msg && lens[1] < (1u << 30) && lens[2] < (1u << 30);
    if (ok) {
        msg = xcalloc(lens[0] + 1, 1);
        l = xcalloc(lens[1] + 1, 1);
        c = xmalloc(lens[2] + 1);
        ok = read_all(fds[0], msg, lens[0]) == 0 && read_all(fds[0], l, lens[1]) == 0 &&
             read_all(fds[0], c, lens[2]) == 0;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!ok) {
        free(msg);
        free(l);
        free(c);
        return kiln_errf(err, KILN_ERR_BACKEND, "the NVRTC child process died (status %d)", status);
    }
    if (rc != KILN_OK)
        kiln_errf(err, rc, "%s", msg);
    free(msg);
    if (log && lens[1])
        *log = l;
    else
        free(l);
    if (rc == KILN_OK) {
        *cubin = c;
        *cubin_len = lens[2];
    } else {
        free(c);
    }
    return rc;
}
