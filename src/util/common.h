/* common.h: status codes, error messages, allocation and small helpers shared by every layer of
 * kiln. */
#ifndef KILN_COMMON_H
#define KILN_COMMON_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Runtime outcomes of library calls (programmer errors use KILN_ASSERT instead). */
typedef enum {
    KILN_OK = 0,
    KILN_ERR_IO,      /* a file could not be opened, read or written */
    KILN_ERR_FORMAT,  /* a file's content is malformed (bad JSON, missing field, lying header) */
    KILN_ERR_INVALID, /* a bad argument or a bad combination of arguments */
    KILN_ERR_UNSUPPORTED, /* valid input that kiln does not handle (yet) */
    KILN_ERR_NO_DEVICE,   /* the backend has no device: no driver, no GPU */
    KILN_ERR_BACKEND,     /* the driver, compiler or runtime failed */
    KILN_ERR_COMPILE,     /* a candidate did not compile */
    KILN_ERR_RESOURCE, /* a launch asks for more than the device has (registers, shared memory) */
    KILN_ERR_LAUNCH,   /* a launch or an asynchronous kernel failed (illegal address, trap) */
    KILN_ERR_CHILD,    /* an isolated child process failed or spoke nonsense */
    KILN_ERR_NOMEM,    /* host memory ran out under a kiln_oom_scope (libkiln_rt) */
    KILN_ERR_TIMEOUT,  /* a candidate's call or kernel ran past its limit */
} kiln_status;

/* Human-readable name of a status ("io error", "malformed file", ...). */
const char *kiln_strerror(int status);

/* An error message travels beside the status; callers may pass NULL to ignore it. */
typedef struct {
    char msg[1024];
} kiln_err;

/* Formats msg into err (if err is non-NULL) and returns status, so that callers write
 * `return kiln_errf(err, KILN_ERR_FORMAT, "%s: field 'axes' is missing", path);`. */
int kiln_errf(kiln_err *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Programmer errors: abort with file:line. Never used on data that comes from a file or a
 * candidate. */
#define KILN_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "kiln: assertion failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Allocation: the one place kiln handles running out of host memory (kiln_out_of_memory). */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh heap string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Out of memory. In kiln's own processes an allocation that fails is the end of the process: the
 * x*alloc functions print the size and abort (a gate that dies is restarted by the coordinator).
 * A library loaded into someone else's process (libkiln_rt, inside PyTorch) must not end it, so its
 * entry points run their work under a scope, and an allocation that fails on the thread that
 * opened the scope jumps back to it instead of aborting:
 *
 *     kiln_oom_scope scope;
 *     kiln_oom_enter(&scope);
 *     if (setjmp(scope.env)) {          (the scope is closed already; scope.n_bytes says how much)
 *         ... free what is reachable ... return KILN_ERR_NOMEM;
 *     }
 *     ... work that may allocate ...
 *     kiln_oom_leave(&scope);
 *
 * A jump is a longjmp, so the code under a scope keeps three rules: it holds no lock and stands in
 * no foreign callback or pthread_once when it allocates (nothing outside kiln is left half-changed;
 * kiln's own locks and once-initialisers do not allocate); a local changed after setjmp and read
 * after the jump is volatile; whatever was allocated or opened and not yet reachable from what the
 * handler frees leaks (a few bytes or a descriptor once, against an aborted host process). A child
 * forked under a scope does not jump into its parent's stack: it aborts, as any kiln process does.
 * cJSON allocates with plain malloc and returns NULL: callers under a scope that build JSON pass
 * its NULL to kiln_out_of_memory. */
typedef struct kiln_oom_scope {
    jmp_buf env;
    struct kiln_oom_scope *outer; /* scopes nest; the innermost catches */
    long pid;                     /* the process that opened it */
    volatile size_t n_bytes;      /* the request that failed, once jumped (read after longjmp) */
} kiln_oom_scope;

/* Opens a scope on this thread (the caller then calls setjmp(s->env)). */
void kiln_oom_enter(kiln_oom_scope *s);
/* Closes the innermost scope, s, on the normal path (after a jump it is closed already). */
void kiln_oom_leave(kiln_oom_scope *s);
/* An allocation of n_bytes failed: jumps to this thread's innermost scope, or prints and aborts
 * where there is none. */
_Noreturn void kiln_out_of_memory(size_t n_bytes);

/* A growable string (generated kernel sources, JSON text): zero-initialise, append, take .s, free
 * it. */
typedef struct {
    char *s;
    size_t len, cap;
} kiln_strbuf;

/* Appends printf output; s stays NUL-terminated. */
void kiln_strbuf_printf(kiln_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The 1-based line and column of byte offset at in text[0..len) (for "error near line L, column
 * C"). */
void kiln_text_position(const char *text, size_t len, size_t at, size_t *line, size_t *col);
/* Reads a whole file into a NUL-terminated heap buffer; *len_out (optional) gets its length. */
int kiln_read_file(const char *path, char **out, size_t *len_out, kiln_err *err);
/* Writes len bytes to path atomically (write to path.tmp, then rename). */
int kiln_write_file(const char *path, const void *data, size_t len, kiln_err *err);
/* mkdir -p. */
int kiln_mkdirs(const char *path, kiln_err *err);
/* 1 when kiln may write into dir: access() allows it AND the directory has a write bit (root passes
 * access() on anything, but a directory published without write bits is not ours to fill). */
int kiln_dir_writable(const char *dir);
/* Sends len bytes of buf on socket fd (MSG_NOSIGNAL: a peer that is gone is a short count, not a
 * SIGPIPE), again after EINTR; returns the bytes sent (len unless the peer went away). */
size_t kiln_send_all(int fd, const void *buf, size_t len);
/* path joined with name; caller frees. */
char *kiln_path_join(const char *dir, const char *name);

/* A timing whose spread ((p90 - p10) / median) is above this many percent is noisy: the gate times
 * it once more and keeps the steadier timing, and it is flagged wherever it is shown; an eager
 * baseline above it is not divided by at all. */
#define KILN_SPREAD_LIMIT_PCT 5.0

/* FNV-1a 64-bit hash, incremental: start with KILN_FNV_INIT. Used for cache keys and dedupe. */
#define KILN_FNV_INIT 0xcbf29ce484222325ULL
uint64_t kiln_fnv1a(uint64_t h, const void *data, size_t len);

/* The kiln installation directory (holds python/ and src/backend/kiln_cpu.h): $KILN_HOME when set,
 * else the directory above the running binary's build/ when it holds python/kiln, else the source
 * directory the binary was built from. Never NULL; do not free. */
const char *kiln_home(void);

/* kiln's cache folder joined with sub ("ceilings", "ref", "cubin"): $KILN_CACHE_DIR/sub, else
 * $XDG_CACHE_HOME/kiln/sub, else ~/.cache/kiln/sub. Caller frees; the folder may not exist yet. */
char *kiln_cache_path(const char *sub);

/* Monotonic clock in seconds. */
double kiln_now_s(void);

#endif
