/* common.c: status names, error formatting, the allocator and its out-of-memory scopes, file
 * helpers. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *kiln_strerror(int status) {
    switch (status) {
    case KILN_OK:
        return "ok";
    case KILN_ERR_IO:
        return "i/o error";
    case KILN_ERR_FORMAT:
        return "malformed input";
    case KILN_ERR_INVALID:
        return "invalid argument";
    case KILN_ERR_UNSUPPORTED:
        return "unsupported";
    case KILN_ERR_NO_DEVICE:
        return "no device";
    case KILN_ERR_BACKEND:
        return "backend failure";
    case KILN_ERR_COMPILE:
        return "compile error";
    case KILN_ERR_RESOURCE:
        return "resource limit";
    case KILN_ERR_LAUNCH:
        return "launch failure";
    case KILN_ERR_CHILD:
        return "child process failure";
    case KILN_ERR_NOMEM:
        return "out of memory";
    case KILN_ERR_TIMEOUT:
        return "time limit";
    }
    return "unknown status";
}

int kiln_errf(kiln_err *err, int status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

static _Thread_local kiln_oom_scope *oom_scope;

void kiln_oom_enter(kiln_oom_scope *s) {
    s->outer = oom_scope;
    s->pid = (long)getpid();
    s->n_bytes = 0;
    oom_scope = s;
}

void kiln_oom_leave(kiln_oom_scope *s) {
    KILN_ASSERT(oom_scope == s);
    oom_scope = s->outer;
}

_Noreturn void kiln_out_of_memory(size_t n_bytes) {
    kiln_oom_scope *s = oom_scope;
    if (s && s->pid == (long)getpid()) {
        oom_scope = s->outer;
        s->n_bytes = n_bytes;
        longjmp(s->env, 1);
    }
    fprintf(stderr, "kiln: out of memory (asked for %zu bytes)\n", n_bytes);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        kiln_out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        kiln_out_of_memory(count * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q)
        kiln_out_of_memory(n);
    return q;
}

char *xstrdup(const char *s) {
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n) {
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *xasprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    KILN_ASSERT(n >= 0);
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void kiln_strbuf_printf(kiln_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    KILN_ASSERT(n >= 0);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = 2 * (b->len + (size_t)n + 1) + 256;
        b->s = xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void kiln_text_position(const char *text, size_t len, size_t at, size_t *line, size_t *col) {
    *line = *col = 1;
    for (size_t i = 0; i < at && i < len; i++) {
        if (text[i] == '\n')
            ++*line, *col = 1;
        else
            ++*col;
    }
}

int kiln_read_file(const char *path, char **out, size_t *len_out, kiln_err *err) {
    *out = NULL;
    /* Sized before the file is opened: running out of memory under a kiln_oom_scope then leaves no
     * descriptor behind (unless the file grows while it is read), and a regular file is read into
     * one allocation of its size. */
    struct stat st;
    size_t cap = stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0
                     ? (size_t)st.st_size + 1
                     : (size_t)1 << 16,
           len = 0;
    char *buf = xmalloc(cap + 1);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int open_errno = errno;
        free(buf);
        return kiln_errf(err, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(open_errno));
    }
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = xrealloc(buf, cap + 1);
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int rc = ferror(f) ? kiln_errf(err, KILN_ERR_IO, "%s: read failed", path) : KILN_OK;
    fclose(f);
    if (rc != KILN_OK) {
        free(buf);
        return rc;
    }
    buf[len] = 0;
    *out = buf;
    if (len_out)
        *len_out = len;
    return KILN_OK;
}

int kiln_write_file(const char *path, const void *data, size_t len, kiln_err *err) {
    char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
    int rc = KILN_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    if (fwrite(data, 1, len, f) != len || fflush(f) != 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        goto done;
    }
    fclose(f);
    if (rename(tmp, path) != 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
    }
done:
    free(tmp);
    return rc;
}

int kiln_mkdirs(const char *path, kiln_err *err) {
    char *p = xstrdup(path);
    int rc = KILN_OK;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot create directory: %s", p,
                               strerror(errno));
                break;
            }
            *s = c;
            if (c == 0)
                break;
        }
    }
    free(p);
    return rc;
}

int kiln_dir_writable(const char *dir) {
    struct stat st;
    return access(dir, W_OK) == 0 && stat(dir, &st) == 0 && (st.st_mode & 0222) != 0;
}

size_t kiln_send_all(int fd, const void *buf, size_t len) {
    size_t sent = 0;
    while (sent < len) {
        ssize_t k = send(fd, (const char *)buf + sent, len - sent, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        sent += (size_t)k;
    }
    return sent;
}

char *kiln_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir);
    if (n > 0 && dir[n - 1] == '/')
        return xasprintf("%s%s", dir, name);
    return xasprintf("%s/%s", dir, name);
}

uint64_t kiln_fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

char *kiln_cache_path(const char *sub) {
    const char *base = getenv("KILN_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (base && *base)
        return xasprintf("%s/%s", base, sub);
    if (xdg && *xdg)
        return xasprintf("%s/kiln/%s", xdg, sub);
    return xasprintf("%s/.cache/kiln/%s", getenv("HOME") ? getenv("HOME") : "/tmp", sub);
}

double kiln_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_kiln_tree(const char *dir) {
    char *probe = xasprintf("%s/python/kiln/__init__.py", dir);
    int ok = access(probe, R_OK) == 0;
    free(probe);
    return ok;
}

const char *kiln_home(void) {
    static char home[4096];
    if (home[0])
        return home;
    const char *env = getenv("KILN_HOME");
    if (env && *env) {
        snprintf(home, sizeof home, "%s", env);
        return home;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        /* build/kiln or build/tests/x: walk up at most three levels looking for python/kiln. */
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash || slash == exe)
                break;
            *slash = 0;
            if (is_kiln_tree(exe)) {
                snprintf(home, sizeof home, "%s", exe);
                return home;
            }
        }
    }
#ifdef KILN_SOURCE_DIR
    snprintf(home, sizeof home, "%s", KILN_SOURCE_DIR);
#else
    snprintf(home, sizeof home, ".");
#endif
    return home;
}
