/* server.c: the dashboard's HTTP server on libmicrohttpd: binding (loopback unless asked), request
 * routing, the embedded assets, the pool of read-only store connections, and the spawned server of
 * `kiln optimize --serve` (the pool of store handles is db.c's, the replies' helpers reply.c's).
 *
 * Threads
 * -------
 * libmicrohttpd runs in "thread per connection" mode: one listening thread accepts, and every
 * accepted connection gets its own thread that reads the request, calls on_request and writes the
 * reply. That is the mode in which a response callback may block, which the live stream needs: a
 * /api/stream connection spends its life in sse.c waiting on a condition variable for the store to
 * change, and a blocked connection must not hold up anyone else. The price is one thread per open
 * connection; a browser tab keeps a handful, so max_connections (64) bounds it. One more thread,
 * the poller (sse.c), looks at the store every poll_ms and wakes the streams when it changed.
 *
 * The store connection
 * --------------------
 * A store handle is used by one thread at a time. Threads here come and go with HTTP connections,
 * so handles are not per thread but pooled (db.c): a request takes an idle handle (or opens one),
 * runs its few store reads in one read snapshot and gives it back; at most WEB_POOL_MAX stay open.
 * Every handle is the store's read-only one (kiln_store_open(RUN, 1)): no schema creation, no
 * journal mode change, no write is possible, and the server reads only through the store's
 * functions. A stream holds a handle only while it reads new rows, never while it waits.
 *
 * Nothing here opens RUN/kiln.db with open()/fopen(), and neither does kiln_store_open: SQLite's
 * locks are POSIX advisory locks, which belong to the process and are ALL dropped when the process
 * closes ANY descriptor of the file (sqlite.org/howtocorrupt.html, 2.2). A close of the database
 * file outside SQLite while other connections of this process are open drops their shared lock,
 * and the next writer of `kiln optimize` that closes its connection then believes it is the last
 * one, checkpoints and deletes the WAL under our feet: from then on this process reads a dead WAL
 * index and sees no new row (the failure tests/py/test_dashboard.py keeps out).
 *
 * Why the server never blocks a writer
 * ------------------------------------
 * The store is in WAL mode (store.c). In WAL, a reader reads the database file plus the WAL up to
 * the last commit that existed when its read transaction began; a writer appends to the WAL at the
 * same time. Readers take no lock that a writer waits for (they only mark, in the shared-memory
 * index, which WAL frame they read up to), so `kiln optimize` never waits for the dashboard,
 * however many pages are open. What a reader can hold back is a checkpoint: the WAL cannot be
 * recycled past a frame a reader still needs, so it would grow while a read transaction stays open.
 * That is why every request is a handful of short, paginated statements (lists have a limit; big
 * lists are pages), a stream's read of new rows is one short transaction, and nothing reads while
 * it waits on a socket. A read never sees half a transaction of the writer, so a result never
 * appears without its candidate within one reply.
 *
 * Exposure
 * --------
 * The server binds 127.0.0.1 unless --host says otherwise; a host that is not loopback is refused
 * unless the caller asks for it (cmd_serve warns then). A loopback server can still be reached by a
 * web page through DNS rebinding (evil.example resolving to 127.0.0.1), so when bound to loopback
 * the Host header must name a loopback host. Paths are served only from the embedded asset table
 * (no file is ever opened from a URL), and the API only reads. */
#include "web_impl.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The embedded assets (build/gen/assets.c, from web/assets/ and Debian's Chart.js and highlight.js
 * by scripts/embed.sh). */
extern const struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kiln_web_assets[];

void kiln_web_options_default(kiln_web_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8470;
    o->poll_ms = 500;
    o->max_connections = 64;
}

/* ---- addresses ---- */

static int addr_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
            return 1;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            return in6->sin6_addr.s6_addr[12] == 127;
    }
    return 0;
}

static int resolve(const char *host, struct addrinfo **out) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    return getaddrinfo(host, NULL, &hints, out);
}

int kiln_web_host_is_loopback(const char *host) {
    struct addrinfo *ai = NULL;
    if (!host || !*host || resolve(host, &ai) != 0)
        return 0;
    int all = 1;
    for (struct addrinfo *a = ai; a; a = a->ai_next)
        all &= addr_is_loopback(a->ai_addr);
    freeaddrinfo(ai);
    return all;
}

static const char *mime_of(const char *name) {
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".json", "application/json"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static int find_asset(const char *name, web_reply *r) {
    for (int i = 0; kiln_web_assets[i].name; i++)
        if (strcmp(kiln_web_assets[i].name, name) == 0) {
            r->status = MHD_HTTP_OK;
            r->body = (char *)kiln_web_assets[i].data;
            r->len = kiln_web_assets[i].size;
            r->body_static = 1;
            r->content_type = mime_of(name);
            return 1;
        }
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A path the server could ever mean: printable ASCII, no backslash, no empty or dot segment. The
 * %xx are decoded already (unescape below), so "%2e%2e" arrives here as "..". */
static int path_is_clean(const char *path) {
    if (path[0] != '/')
        return 0;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e || *p == '\\')
            return 0;
    for (const char *seg = path + 1; *seg;) {
        size_t n = strcspn(seg, "/");
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        if (n == 0 && seg[n] == '/') /* "//" */
            return 0;
        seg += n;
        if (*seg == '/')
            seg++;
    }
    return 1;
}

/* MHD's %xx decoding, except that %00 becomes 0x01: a NUL would cut the C string the handler sees
 * ("/assets/app.js%00.png" is not "/assets/app.js"), and 0x01 makes the path unclean instead. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s) {
    (void)cls;
    (void)conn;
    char *out = s;
    for (const char *in = s; *in; in++) {
        int hi, lo;
        if (in[0] == '%' && (hi = hex_digit(in[1])) >= 0 && (lo = hex_digit(in[2])) >= 0) {
            char c = (char)(hi * 16 + lo);
            *out++ = c ? c : 0x01;
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
    return (size_t)(out - s);
}

/* When bound to loopback, only a Host header that names loopback is ours (DNS rebinding). */
static int host_header_ok(const kiln_web *w, const char *host) {
    if (!w->loopback || !host)
        return 1;
    char name[256];
    size_t n = strlen(host);
    if (n >= sizeof name)
        return 0;
    if (host[0] == '[') { /* [::1]:port */
        const char *close = strchr(host, ']');
        if (!close)
            return 0;
        n = (size_t)(close - host - 1);
        memcpy(name, host + 1, n);
    } else {
        n = strcspn(host, ":");
        memcpy(name, host, n);
    }
    name[n] = 0;
    if (strcasecmp(name, "localhost") == 0 || strcasecmp(name, w->host) == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, name, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, name, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static enum MHD_Result queue_reply(struct MHD_Connection *conn, web_reply *r, int is_html) {
    struct MHD_Response *resp;
    if (r->body_static)
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_PERSISTENT);
    else
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        if (!r->body_static)
            free(r->body);
        return MHD_NO;
    }
    r->body = NULL;
    MHD_add_response_header(resp, "Content-Type", r->content_type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Cache-Control", r->body_static ? "no-cache" : "no-store");
    if (r->allow)
        MHD_add_response_header(resp, "Allow", r->allow);
    if (is_html) {
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; style-src 'self' "
                                "'unsafe-inline'; script-src 'self'; connect-src 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    kiln_web *w = cls;
    web_reply r = {.status = 500, .content_type = "application/json"};
    int is_head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);

    /* Every reply is decided on the first call, before any request body is read: the server
     * takes none (MHD then discards it and closes the connection). */
    if (!host_header_ok(w, host)) {
        web_reply_error(&r, MHD_HTTP_FORBIDDEN,
                        "Host '%s' is not this server: it serves loopback names only", host);
    } else if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && !is_head) {
        web_reply_error(&r, MHD_HTTP_METHOD_NOT_ALLOWED,
                        "method %.32s is not allowed: the dashboard only reads (GET)", method);
        r.allow = "GET, HEAD";
    } else if (!path_is_clean(url)) {
        web_reply_error(&r, MHD_HTTP_BAD_REQUEST,
                        "bad path: only /, /index.html, /assets/NAME and /api/... are served");
    } else if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0) {
        if (!find_asset("index.html", &r))
            web_reply_error(&r, MHD_HTTP_INTERNAL_SERVER_ERROR, "index.html is not embedded");
        return queue_reply(conn, &r, 1);
    } else if (strncmp(url, "/assets/", 8) == 0) {
        const char *name = url + 8;
        if (strchr(name, '/') || !find_asset(name, &r))
            web_reply_error(&r, MHD_HTTP_NOT_FOUND, "no such asset: %.200s", name);
    } else if (strcmp(url, "/api/stream") == 0 && !is_head) {
        struct MHD_Response *resp = web_sse_response(w, conn, &r);
        if (resp) {
            enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
            MHD_destroy_response(resp);
            return ret;
        }
    } else if (strncmp(url, "/api/", 5) == 0) {
        web_api_handle(w, conn, url + 5, &r);
    } else {
        web_reply_error(&r, MHD_HTTP_NOT_FOUND, "no such page: %.200s", url);
    }
    return queue_reply(conn, &r, 0);
}

/* ---- life ---- */

static int listen_on(const char *host, int port, int *fd_out, int *family, kiln_err *err) {
    struct addrinfo *ai = NULL;
    int g = resolve(host, &ai);
    if (g != 0)
        return kiln_errf(err, KILN_ERR_INVALID, "--host %s: %s", host, gai_strerror(g));
    int rc = KILN_OK, fd = -1, e = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET)
            ((struct sockaddr_in *)a->ai_addr)->sin_port = htons((uint16_t)port);
        else
            ((struct sockaddr_in6 *)a->ai_addr)->sin6_port = htons((uint16_t)port);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            e = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *family = a->ai_family;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        rc = kiln_errf(err, KILN_ERR_IO, "cannot listen on %s port %d: %s", host, port,
                       e == EADDRINUSE ? "the port is in use (pick another with --port)"
                                       : strerror(e));
    *fd_out = fd;
    return rc;
}

static int bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

int kiln_web_start(const kiln_web_options *o, kiln_web **out, kiln_err *err) {
    KILN_ASSERT(o && o->run_dir && out);
    *out = NULL;
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    if (strlen(host) >= 128)
        return kiln_errf(err, KILN_ERR_INVALID, "--host: too long");
    if (o->port < 0 || o->port > 65535)
        return kiln_errf(err, KILN_ERR_INVALID, "--port %d: not a port (0..65535)", o->port);
    if (!kiln_store_threads_ok())
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "this SQLite was built without threads");
    int loopback = kiln_web_host_is_loopback(host);
    if (!loopback && !o->allow_remote)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "--host %s is not a loopback address: the dashboard serves beyond this "
                         "machine only when asked",
                         host);
    int fd = -1, family = AF_INET;
    int rc = listen_on(host, o->port, &fd, &family, err);
    if (rc)
        return rc;

    kiln_web *w = xcalloc(1, sizeof *w);
    w->opt = *o;
    w->opt.host = NULL;
    if (w->opt.poll_ms <= 0)
        w->opt.poll_ms = 500;
    if (w->opt.max_connections <= 0)
        w->opt.max_connections = 64;
    w->run_dir = xstrdup(o->run_dir);
    w->opt.run_dir = w->run_dir;
    snprintf(w->host, sizeof w->host, "%s", host);
    w->loopback = loopback;
    w->port = bound_port(fd);
    snprintf(w->url, sizeof w->url, strchr(host, ':') ? "http://[%s]:%d/" : "http://%s:%d/", host,
             w->port);
    pthread_mutex_init(&w->pool_mu, NULL);
    pthread_mutex_init(&w->live_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->live_cv, &ca);
    pthread_condattr_destroy(&ca);

    /* The poller first: a stream that starts at once finds the heads already read. */
    if (pthread_create(&w->poller, NULL, web_sse_poller, w) != 0) {
        close(fd);
        kiln_web_stop(w);
        return kiln_errf(err, KILN_ERR_IO, "cannot start the store poller thread");
    }
    w->poller_started = 1;

    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    w->daemon = MHD_start_daemon(
        flags, (uint16_t)w->port, NULL, NULL, on_request, w, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)w->opt.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
    if (!w->daemon) {
        close(fd);
        kiln_web_stop(w);
        return kiln_errf(err, KILN_ERR_IO, "libmicrohttpd could not start on %s port %d", host,
                         o->port);
    }
    *out = w;
    return KILN_OK;
}

int kiln_web_port(const kiln_web *w) {
    return w->port;
}

const char *kiln_web_url(const kiln_web *w) {
    return w->url;
}

void kiln_web_stop(kiln_web *w) {
    if (!w)
        return;
    pthread_mutex_lock(&w->live_mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->live_cv);
    pthread_mutex_unlock(&w->live_mu);
    /* Streams see stopping and end; then MHD can join every connection thread. */
    if (w->daemon)
        MHD_stop_daemon(w->daemon);
    if (w->poller_started)
        pthread_join(w->poller, NULL);
    web_db_close_all(w);
    pthread_mutex_destroy(&w->pool_mu);
    pthread_mutex_destroy(&w->live_mu);
    pthread_cond_destroy(&w->live_cv);
    free(w->run_dir);
    free(w);
}

/* ---- the spawned server ---- */

int kiln_web_spawn(const kiln_web_options *o, pid_t *pid, int *port, kiln_err *err) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return kiln_errf(err, KILN_ERR_IO, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        close(p[0]);
        close(p[1]);
        return kiln_errf(err, KILN_ERR_IO, "fork: %s", strerror(errno));
    }
    if (child == 0) {
        close(p[0]);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread: they all inherit it */
        signal(SIGPIPE, SIG_IGN);
        kiln_web *w = NULL;
        kiln_err e;
        char line[1100];
        int rc = kiln_web_start(o, &w, &e);
        int n = rc ? snprintf(line, sizeof line, "error %s\n", e.msg)
                   : snprintf(line, sizeof line, "port %d\n", kiln_web_port(w));
        if (write(p[1], line, (size_t)n) != n || rc)
            _exit(1);
        close(p[1]);
        int sig = 0;
        sigwait(&set, &sig);
        kiln_web_stop(w);
        _exit(0);
    }
    close(p[1]);
    char line[1100] = {0};
    size_t got = 0;
    for (;;) {
        ssize_t r = read(p[0], line + got, sizeof line - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (memchr(line, '\n', got) || got == sizeof line - 1)
            break;
    }
    close(p[0]);
    line[strcspn(line, "\n")] = 0;
    int prt = 0;
    if (sscanf(line, "port %d", &prt) == 1 && prt > 0) {
        *pid = child;
        *port = prt;
        return KILN_OK;
    }
    waitpid(child, NULL, 0);
    if (strncmp(line, "error ", 6) == 0)
        return kiln_errf(err, KILN_ERR_IO, "dashboard: %s", line + 6);
    return kiln_errf(err, KILN_ERR_IO, "dashboard: the server process died before it listened");
}

void kiln_web_spawn_stop(pid_t pid) {
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}
