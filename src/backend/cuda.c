/* cuda.c: the cuda backend: NVRTC compiles a candidate to a cubin, the CUDA driver API loads,
 * launches and times it, on the primary context of one device and one non-blocking stream.
 *
 * Why dlopen, and why cuGetProcAddress. kiln must build everywhere and run on machines with no GPU
 * (CI, a laptop): it says "no GPU" there instead of failing to start. So nothing links -lcuda or
 * -lnvrtc. libcuda.so.1 comes with the driver, never with the toolkit, and is opened at run time;
 * NVRTC comes with the toolkit and is opened separately, so that compiling (kiln_cuda_compile_only,
 * what CI uses to prove that sources build for sm_90) works where there is a toolkit but no driver.
 * Looking driver functions up by name with dlsym would be wrong: the driver exports several ABI
 * generations of many entry points (cuMemAlloc takes a 32-bit size, cuMemAlloc_v2 a size_t;
 * _ptds/_ptsz variants use the per-thread default stream) and cuda.h picks one with macros at
 * compile time. cuGetProcAddress, given the base name and a CUDA version, returns the generation
 * that matches that version's header. We ask for the older of the header kiln was built against
 * (CUDA_VERSION) and the installed driver: every function kiln uses has kept its signature since
 * CUDA 12.0, so our declarations hold for either.
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
 * setmaxnreg, or KILN_CUDA_ARCH says so), -std=c++17, -default-device, -lineinfo, no
 * --use_fast_math. Cost, measured with NVRTC 13.0: a small kernel compiles in ~60 ms, ~80 ms with
 * <cuda_bf16.h>; the prelude's share is a few ms.
 *
 * The error model. A launch that asks too much (threads, shared memory, clusters) fails at once
 * with an error that leaves the context usable: KILN_ERR_RESOURCE. A kernel that faults (illegal
 * address, trap, assert, misaligned access) is reported asynchronously, at the next synchronising
 * call, and the error is sticky: the context, and every allocation and module in it, is lost for
 * good. The backend then returns KILN_ERR_LAUNCH with the driver's text
 * ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered") and refuses all further
 * work with the same status. That is why the gate runs candidates in a child process: after
 * KILN_ERR_LAUNCH the child reports and exits, and the coordinator starts a fresh one. Nothing here
 * aborts on a candidate's behaviour.
 *
 * The backend is single-threaded: the context is made current on the thread that calls init. */
#include "backend.h"
#include "cuda_backend.h"
#include "cuda_driver.h"

#include <cuda.h>
#include <nvrtc.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the driver (cuda_driver.h) ---- */

/* Errors after which the context is lost (a kernel faulted). */
static int cu_sticky(CUresult r) {
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_CONTAINED:
        return 1;
    default:
        return 0;
    }
}

/* ---- NVRTC ---- */

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

static const char *cuda_home(void) {
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
    const char *home = cuda_home();
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

static void normalize_arch(const char *arch, char *out, size_t cap) {
    if (!arch || !*arch)
        arch = "sm_90";
    if (arch[0] >= '0' && arch[0] <= '9')
        snprintf(out, cap, "sm_%s", arch);
    else
        snprintf(out, cap, "%s", arch);
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
    normalize_arch(arch, arch_name, sizeof arch_name);
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

/* ---- the backend ---- */

typedef struct {
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    int ctx_retained;
    kiln_device_info info;
    CUdeviceptr flush_buf;
    size_t flush_len;
    unsigned flush_round;
    int dead; /* a kernel faulted: the context is lost */
    char dead_msg[400];
} cuda_state;

typedef struct {
    char name[128];
    CUfunction fn;
    kiln_cuda_func_attrs attrs;
    kiln_cuda_func_limits limits; /* raised on the first launch that needs it */
} cuda_entry;

struct kiln_module {
    CUmodule mod;
    int n;
    cuda_entry e[KILN_MAX_LAUNCHES];
};

struct kiln_timer {
    CUevent start, stop;
    int recorded;
};

/* Turns a failed driver call into a status: sticky errors kill the backend (KILN_ERR_LAUNCH), out
 * of memory is a resource outcome, the rest is the backend's failure. */
static int cu_fail(cuda_state *st, CUresult r, const char *what, kiln_err *err) {
    if (cu_sticky(r)) {
        if (!st->dead) {
            st->dead = 1;
            snprintf(st->dead_msg, sizeof st->dead_msg, "%s: %s", kiln_cuda_error_name(r),
                     kiln_cuda_error_text(r));
        }
        return kiln_errf(err, KILN_ERR_LAUNCH, "%s: %s", kiln_cuda_error_name(r),
                         kiln_cuda_error_text(r));
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return kiln_errf(err, KILN_ERR_RESOURCE, "%s: %s: %s", what, kiln_cuda_error_name(r),
                         kiln_cuda_error_text(r));
    return kiln_errf(err, KILN_ERR_BACKEND, "%s: %s: %s", what, kiln_cuda_error_name(r),
                     kiln_cuda_error_text(r));
}

static int cu_dead(cuda_state *st, kiln_err *err) {
    return kiln_errf(err, KILN_ERR_LAUNCH,
                     "the CUDA context was lost to an earlier fault (%s); this process must exit",
                     st->dead_msg);
}

static void cuda_teardown(cuda_state *st) {
    if (!st->dead) {
        if (st->stream)
            kiln_cuda.StreamSynchronize(st->stream);
        if (st->flush_buf)
            kiln_cuda.MemFree(st->flush_buf);
        if (st->stream)
            kiln_cuda.StreamDestroy(st->stream);
    }
    if (st->ctx_retained)
        kiln_cuda.DevicePrimaryCtxRelease(st->dev);
    free(st);
}

static int cuda_init(kiln_backend *be, int device, kiln_err *err) {
    cuda_state *st = xcalloc(1, sizeof *st);
    int rc = kiln_cuda_device_open(device, "the cuda backend needs a GPU; use --backend cpu",
                                   &st->dev, &st->ctx, &st->info, err);
    if (rc) {
        free(st);
        return rc;
    }
    st->ctx_retained = 1;
    CUresult r;
    if ((r = kiln_cuda.CtxSetCurrent(st->ctx)) != CUDA_SUCCESS) {
        rc = cu_fail(st, r, "cuCtxSetCurrent", err);
        goto fail;
    }
    if ((r = kiln_cuda.StreamCreate(&st->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        rc = cu_fail(st, r, "cuStreamCreate", err);
        goto fail;
    }
    /* The flush buffer lives as long as the backend: allocating it per timed run would cost more
     * than the kernels measured. */
    st->flush_len = 2 * (st->info.l2_bytes ? st->info.l2_bytes : ((size_t)64 << 20));
    if ((r = kiln_cuda.MemAlloc(&st->flush_buf, st->flush_len)) != CUDA_SUCCESS) {
        st->flush_buf = 0;
        rc = cu_fail(st, r, "allocating the cache-flush buffer", err);
        goto fail;
    }
    be->impl = st;
    return KILN_OK;
fail:
    cuda_teardown(st);
    return rc;
}

static void cuda_shutdown(kiln_backend *be) {
    if (be->impl)
        cuda_teardown(be->impl);
    be->impl = NULL;
}

static void cuda_device_info(kiln_backend *be, kiln_device_info *out) {
    cuda_state *st = be->impl;
    *out = st->info;
}

/* sm_XY of the device, sm_90a for Hopper-only instructions, or what KILN_CUDA_ARCH says. */
static void choose_arch(const cuda_state *st, const char *source, char *out, size_t cap) {
    const char *env = getenv("KILN_CUDA_ARCH");
    if (env && *env) {
        normalize_arch(env, out, cap);
        return;
    }
    int a = st->info.cc_major == 9 && st->info.cc_minor == 0 &&
            (strstr(source, "wgmma") || strstr(source, "setmaxnreg"));
    snprintf(out, cap, "sm_%d%d%s", st->info.cc_major, st->info.cc_minor, a ? "a" : "");
}

static void log_append(char **log, const char *line) {
    char *old = *log;
    *log = xasprintf("%s%s%s", old ? old : "", old && *old ? "\n" : "", line);
    free(old);
}

static size_t param_size(kiln_param_kind kind) {
    switch (kind) {
    case KILN_PARAM_I32:
    case KILN_PARAM_F32:
        return 4;
    case KILN_PARAM_BOOL:
        return 1;
    default:
        return 8;
    }
}

/* With cuFuncGetParamInfo (CUDA 12.4+), checks that an entry point takes the parameters the ABI
 * passes: a kernel that declares fewer or other-sized parameters would read garbage, silently. */
static int check_params(const cuda_entry *e, const kiln_signature *sig, char *msg, size_t cap) {
    size_t sizes[KILN_MAX_PARAMS];
    int n = kiln_cuda_param_sizes(e->fn, sizes, KILN_MAX_PARAMS);
    if (n < 0)
        return 0; /* the driver cannot tell: skip the check */
    if (n != sig->n) {
        snprintf(msg, cap, "'%s' takes %d parameter%s, but the ABI passes %d", e->name, n,
                 n == 1 ? "" : "s", sig->n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (sizes[i] != param_size(sig->p[i].kind)) {
            snprintf(msg, cap,
                     "parameter %d of '%s' is %zu bytes, but the ABI passes '%s %s' (%zu bytes)",
                     i + 1, e->name, sizes[i], sig->p[i].c_type, sig->p[i].name,
                     param_size(sig->p[i].kind));
            return -1;
        }
    }
    return 0;
}

static int cuda_compile_module(cuda_state *st, const char *source, const kiln_signature *sig,
                               const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err);

static int cuda_compile(kiln_backend *be, const char *source, const kiln_signature *sig,
                        const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err) {
    cuda_state *st = be->impl;
    KILN_ASSERT(source && sig && abi && out);
    char *ignored_log = NULL;
    if (!log)
        log = &ignored_log;
    *out = NULL;
    *log = NULL;
    int rc = cuda_compile_module(st, source, sig, abi, out, log, err);
    free(ignored_log);
    return rc;
}

/* compile() without the bookkeeping of an optional log. */
static int cuda_compile_module(cuda_state *st, const char *source, const kiln_signature *sig,
                               const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err) {
    if (st->dead)
        return cu_dead(st, err);
    if (abi->n_launches < 1 || abi->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a candidate needs 1 to %d launches, not %d",
                         KILN_MAX_LAUNCHES, abi->n_launches);
    char arch[32];
    choose_arch(st, source, arch, sizeof arch);
    char *cubin = NULL;
    size_t cubin_len = 0;
    int rc = kiln_cuda_compile_only(source, arch, &cubin, &cubin_len, log, err);
    if (rc)
        return rc;
    kiln_module *m = xcalloc(1, sizeof *m);
    CUresult r = kiln_cuda.ModuleLoadData(&m->mod, cubin);
    free(cubin);
    if (r != CUDA_SUCCESS) {
        m->mod = NULL;
        if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE ||
            r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            rc = kiln_errf(err, KILN_ERR_COMPILE, "the driver rejected the %s cubin: %s: %s", arch,
                           kiln_cuda_error_name(r), kiln_cuda_error_text(r));
        else
            rc = cu_fail(st, r, "cuModuleLoadData", err);
        goto done;
    }
    for (int k = 0; k < abi->n_launches && rc == KILN_OK; k++) {
        const char *name = abi->launch[k].entry;
        int seen = 0;
        for (int j = 0; j < m->n; j++)
            seen |= strcmp(m->e[j].name, name) == 0;
        if (seen)
            continue;
        cuda_entry *e = &m->e[m->n];
        snprintf(e->name, sizeof e->name, "%s", name);
        r = kiln_cuda.ModuleGetFunction(&e->fn, m->mod, name);
        if (r == CUDA_ERROR_NOT_FOUND) {
            rc = kiln_errf(err, KILN_ERR_COMPILE,
                           "entry point '%s' not found (did you write extern \"C\"?)", name);
            log_append(log, err ? err->msg : "entry point not found");
            break;
        }
        if (r != CUDA_SUCCESS) {
            rc = cu_fail(st, r, "cuModuleGetFunction", err);
            break;
        }
        m->n++;
        kiln_cuda_func_attrs_get(e->fn, &e->attrs);
        char msg[512];
        if (check_params(e, sig, msg, sizeof msg) != 0) {
            char *proto = kiln_abi_prototype(sig, name, 1);
            rc = kiln_errf(err, KILN_ERR_COMPILE, "%s; expected %s", msg, proto);
            free(proto);
            log_append(log, err ? err->msg : msg);
            break;
        }
        if ((size_t)e->attrs.static_smem > st->info.smem_per_block_optin) {
            rc = kiln_errf(err, KILN_ERR_RESOURCE,
                           "'%s' uses %d bytes of static shared memory; a block gets at most %zu",
                           name, e->attrs.static_smem, st->info.smem_per_block_optin);
            break;
        }
        if (e->attrs.max_threads < 1) {
            rc = kiln_errf(err, KILN_ERR_RESOURCE, "'%s' cannot run a single thread (%d registers)",
                           name, e->attrs.regs);
            break;
        }
    }
done:
    if (rc) {
        if (m->mod && !st->dead)
            kiln_cuda.ModuleUnload(m->mod);
        free(m);
        return rc;
    }
    *out = m;
    return KILN_OK;
}

static void cuda_module_free(kiln_backend *be, kiln_module *m) {
    cuda_state *st = be->impl;
    if (!m)
        return;
    if (!st->dead)
        kiln_cuda.ModuleUnload(m->mod);
    free(m);
}

static cuda_entry *find_entry(kiln_module *m, const char *name) {
    for (int j = 0; j < m->n; j++)
        if (strcmp(m->e[j].name, name) == 0)
            return &m->e[j];
    return NULL;
}

static int cuda_entry_attrs(kiln_backend *be, kiln_module *m, const char *entry, int *regs,
                            size_t *static_smem, kiln_err *err) {
    (void)be;
    cuda_entry *e = find_entry(m, entry);
    if (!e)
        return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' is not in this module", entry);
    if (regs)
        *regs = e->attrs.regs;
    if (static_smem)
        *static_smem = (size_t)e->attrs.static_smem;
    return KILN_OK;
}

/* Status of a failed launch: asking too much is a resource outcome, a fault is sticky. */
static int launch_fail(cuda_state *st, CUresult r, const kiln_launch *l, kiln_err *err) {
    switch (r) {
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
        return kiln_errf(
            err, KILN_ERR_RESOURCE,
            "launch '%s' grid (%u, %u, %u) block (%u, %u, %u) smem %zu cluster (%u, %u, "
            "%u): %s: %s",
            l->entry, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
            l->smem_bytes, l->cluster[0], l->cluster[1], l->cluster[2], kiln_cuda_error_name(r),
            kiln_cuda_error_text(r));
    default: {
        char what[200];
        snprintf(what, sizeof what, "launch '%s'", l->entry);
        return cu_fail(st, r, what, err);
    }
    }
}

/* Checks one launch against the kernel and the device, raising the kernel's limits where the launch
 * needs it (dynamic shared memory above 48 KiB, clusters above 8). */
static int prepare_launch(cuda_state *st, cuda_entry *e, const kiln_launch *l, kiln_err *err) {
    char why[400];
    if (kiln_cuda_launch_fits(e->name, &e->attrs, l, &st->info, why, sizeof why) != 0)
        return kiln_errf(err, KILN_ERR_RESOURCE, "%s", why);
    CUresult r = kiln_cuda_raise_limits(e->fn, &e->attrs, l, &e->limits);
    return r == CUDA_SUCCESS ? KILN_OK : launch_fail(st, r, l, err);
}

static int cuda_launch(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan,
                       void **params, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (plan->n_launches < 0 || plan->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a plan of %d launches", plan->n_launches);
    cuda_entry *entries[KILN_MAX_LAUNCHES];
    for (int i = 0; i < plan->n_launches; i++) {
        entries[i] = find_entry(m, plan->launch[i].entry);
        if (!entries[i])
            return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' was not compiled",
                             plan->launch[i].entry);
        int rc = prepare_launch(st, entries[i], &plan->launch[i], err);
        if (rc)
            return rc;
    }
    for (int i = 0; i < plan->n_launches; i++) {
        const kiln_launch *l = &plan->launch[i];
        CUresult r;
        if (l->cluster[0] * l->cluster[1] * l->cluster[2] > 1) {
            CUlaunchConfig cfg;
            CUlaunchAttribute attr;
            kiln_cuda_launch_config(l, st->stream, &cfg, &attr);
            r = kiln_cuda.LaunchKernelEx(&cfg, entries[i]->fn, params, NULL);
        } else {
            r = kiln_cuda.LaunchKernel(entries[i]->fn, l->grid[0], l->grid[1], l->grid[2],
                                       l->block[0], l->block[1], l->block[2],
                                       (unsigned)l->smem_bytes, st->stream, params, NULL);
        }
        if (r != CUDA_SUCCESS)
            return launch_fail(st, r, l, err);
    }
    return KILN_OK;
}

static int cuda_sync(kiln_backend *be, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    CUresult r = kiln_cuda.StreamSynchronize(st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuStreamSynchronize", err);
    return KILN_OK;
}

/* ---- memory ---- */

static int cuda_alloc(kiln_backend *be, size_t n_bytes, kiln_devptr *out, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    CUdeviceptr p = 0;
    CUresult r = kiln_cuda.MemAlloc(&p, n_bytes ? n_bytes : 1);
    if (r != CUDA_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "allocating %zu bytes", n_bytes);
        return cu_fail(st, r, what, err);
    }
    *out = (kiln_devptr)p;
    return KILN_OK;
}

static void cuda_free(kiln_backend *be, kiln_devptr p) {
    cuda_state *st = be->impl;
    if (p && !st->dead)
        kiln_cuda.MemFree((CUdeviceptr)p);
}

static int cuda_upload(kiln_backend *be, kiln_devptr dst, const void *src, size_t n,
                       kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemcpyHtoDAsync((CUdeviceptr)dst, src, n, st->stream);
    if (r == CUDA_SUCCESS)
        r = kiln_cuda.StreamSynchronize(st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "upload", err);
}

static int cuda_download(kiln_backend *be, void *dst, kiln_devptr src, size_t n, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemcpyDtoHAsync(dst, (CUdeviceptr)src, n, st->stream);
    if (r == CUDA_SUCCESS)
        r = kiln_cuda.StreamSynchronize(st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "download", err);
}

static int cuda_memset8(kiln_backend *be, kiln_devptr dst, uint8_t value, size_t n, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemsetD8Async((CUdeviceptr)dst, value, n, st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "memset", err);
}

static int cuda_flush_cache(kiln_backend *be, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    /* A different byte each time, so that no layer can skip the writes as redundant. */
    CUresult r = kiln_cuda.MemsetD8Async(st->flush_buf, (unsigned char)(++st->flush_round & 0xff),
                                         st->flush_len, st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "cache flush", err);
}

/* ---- timing ---- */

static int cuda_timer_create(kiln_backend *be, kiln_timer **out, kiln_err *err) {
    cuda_state *st = be->impl;
    *out = NULL;
    if (st->dead)
        return cu_dead(st, err);
    kiln_timer *t = xcalloc(1, sizeof *t);
    CUresult r = kiln_cuda.EventCreate(&t->start, CU_EVENT_DEFAULT);
    if (r == CUDA_SUCCESS) {
        r = kiln_cuda.EventCreate(&t->stop, CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS)
            kiln_cuda.EventDestroy(t->start);
    }
    if (r != CUDA_SUCCESS) {
        free(t);
        return cu_fail(st, r, "cuEventCreate", err);
    }
    *out = t;
    return KILN_OK;
}

static void cuda_timer_destroy(kiln_backend *be, kiln_timer *t) {
    cuda_state *st = be->impl;
    if (!t)
        return;
    if (!st->dead) {
        kiln_cuda.EventDestroy(t->start);
        kiln_cuda.EventDestroy(t->stop);
    }
    free(t);
}

static int cuda_timer_start(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    t->recorded = 0;
    CUresult r = kiln_cuda.EventRecord(t->start, st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventRecord", err);
    t->recorded = 1;
    return KILN_OK;
}

static int cuda_timer_stop(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (t->recorded != 1)
        return kiln_errf(err, KILN_ERR_INVALID, "timer stopped before it was started");
    CUresult r = kiln_cuda.EventRecord(t->stop, st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventRecord", err);
    t->recorded = 2;
    return KILN_OK;
}

static int cuda_timer_elapsed_us(kiln_backend *be, kiln_timer *t, double *us, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (t->recorded != 2)
        return kiln_errf(err, KILN_ERR_INVALID, "timer read before it was started and stopped");
    CUresult r = kiln_cuda.EventSynchronize(t->stop);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventSynchronize", err);
    float ms = 0;
    r = kiln_cuda.EventElapsedTime(&ms, t->start, t->stop);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventElapsedTime", err);
    *us = (double)ms * 1000.0;
    return KILN_OK;
}

const kiln_backend_ops kiln_backend_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .device_info = cuda_device_info,
    .compile = cuda_compile,
    .module_free = cuda_module_free,
    .entry_attrs = cuda_entry_attrs,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .memset8 = cuda_memset8,
    .launch = cuda_launch,
    .sync = cuda_sync,
    .flush_cache = cuda_flush_cache,
    .timer_create = cuda_timer_create,
    .timer_destroy = cuda_timer_destroy,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
    .timer_elapsed_us = cuda_timer_elapsed_us,
};
