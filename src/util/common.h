/* common.h: status codes, error messages, allocation and small helpers shared by every layer of
 * kiln. */
#ifndef KILN_COMMON_H
#define KILN_COMMON_H

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

/* Allocation that aborts on out-of-memory: the one place kiln handles it. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh heap string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growable string (generated kernel sources, JSON text): zero-initialise, append, take .s, free
 * it. */
typedef struct {
    char *s;
    size_t len, cap;
} kiln_strbuf;

/* Appends printf output; s stays NUL-terminated. */
void kiln_strbuf_printf(kiln_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads a whole file into a NUL-terminated heap buffer; *len_out (optional) gets its length. */
int kiln_read_file(const char *path, char **out, size_t *len_out, kiln_err *err);
/* Writes len bytes to path atomically (write to path.tmp, then rename). */
int kiln_write_file(const char *path, const void *data, size_t len, kiln_err *err);
/* mkdir -p. */
int kiln_mkdirs(const char *path, kiln_err *err);
/* 1 when kiln may write into dir: access() allows it AND the directory has a write bit (root passes
 * access() on anything, but a directory published without write bits is not ours to fill). */
int kiln_dir_writable(const char *dir);
/* path joined with name; caller frees. */
char *kiln_path_join(const char *dir, const char *name);

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
