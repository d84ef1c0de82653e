/* refs.c: finds a problem's reference data, or has `python -m kiln.reference` write it, so that the
 * gate itself never needs Python to prove a kernel. */
#include "gate.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

const char *kiln_python(void) {
    static char path[4096];
    if (path[0])
        return path;
    const char *env = getenv("KILN_PYTHON");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
        return path;
    }
    snprintf(path, sizeof path, "%s/.venv/bin/python", kiln_home());
    if (access(path, X_OK) == 0)
        return path;
    snprintf(path, sizeof path, "python3");
    return path;
}

/* Forks the helper: `python -m kiln.reference` with args (NULL-terminated, after the module); its
 * stdin and stdout on fd io when io >= 0, else stdout on stderr where quiet_stdout. -1 (err set)
 * when it cannot fork. */
static pid_t spawn_helper(const char *const *args, int io, int quiet_stdout, kiln_err *err) {
    const char *py = kiln_python();
    char *pythonpath = getenv("PYTHONPATH") && *getenv("PYTHONPATH")
                           ? xasprintf("%s/python:%s", kiln_home(), getenv("PYTHONPATH"))
                           : xasprintf("%s/python", kiln_home());
    const char *argv[16] = {py, "-m", "kiln.reference"};
    int n = 3;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(pythonpath);
        kiln_errf(err, KILN_ERR_IO, "fork failed: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setenv("PYTHONPATH", pythonpath, 1);
        if (io >= 0) {
            dup2(io, 0);
            dup2(io, 1);
        } else if (quiet_stdout) {
            dup2(2, 1);
        }
        execvp(py, (char *const *)argv);
        fprintf(stderr, "kiln: cannot run %s: %s (set KILN_PYTHON to a Python with torch)\n", py,
                strerror(errno));
        _exit(127);
    }
    free(pythonpath);
    return pid;
}

/* The error of a helper that ended with status (waitpid's). */
static int helper_failed(const char *dir, int status, kiln_err *err) {
    if (WIFEXITED(status))
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: the reference helper (%s -m kiln.reference) failed with exit status "
                         "%d; its message is above",
                         dir, kiln_python(), WEXITSTATUS(status));
    return kiln_errf(err, KILN_ERR_INVALID, "%s: the reference helper died of signal %d", dir,
                     WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* KILN_REF_SETS as the helper's --sets argument. */
static const char *sets_arg(void) {
    static char arg[16];
    snprintf(arg, sizeof arg, "%d", KILN_REF_SETS);
    return arg;
}

/* The bytes of the regular files in dir (a stale build the helper writes over); 0 if none. */
static double dir_file_bytes(const char *dir) {
    double total = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *path = kiln_path_join(dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            total += (double)st.st_size;
        free(path);
    }
    closedir(d);
    return total;
}

int kiln_refs_disk_check(const kiln_problem *p, const char *dir, kiln_err *err) {
    double reserve_gb = 1.0;
    const char *env = getenv("KILN_DISK_RESERVE_GB");
    if (env && *env) {
        char *end = NULL;
        double v = strtod(env, &end);
        if (end && *end == 0 && v >= 0)
            reserve_gb = v;
    }
    double need = 0;
    for (int w = 0; w < p->n_workloads; w++)
        need += KILN_REF_SETS * kiln_problem_min_bytes(p, &p->workloads[w]);
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0)
        return KILN_OK; /* not known: the helper finds out */
    double avail = (double)sv.f_bavail * (double)sv.f_frsize + dir_file_bytes(dir);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (need + reserve_gb * gib <= avail)
        return KILN_OK;
    return kiln_errf(err, KILN_ERR_IO,
                     "%s: its reference data (%d sets, about %.2f GiB) would leave less than "
                     "%.1f GiB free on the disk of %s (%.2f GiB free; KILN_DISK_RESERVE_GB): free "
                     "space there, or delete the reference data of problems done with (their "
                     "kiln/ref-* folders)",
                     p->name, KILN_REF_SETS, need / gib, reserve_gb, dir, avail / gib);
}

/* The serving helper (kiln_refs_serve_begin): one interpreter for many problems, requests and
 * answers as JSON lines over a socket (sent with MSG_NOSIGNAL: a helper that died is an error, not
 * a SIGPIPE). */
static struct {
    int on;    /* between kiln_refs_serve_begin and _end */
    pid_t pid; /* 0: not running */
    int fd;
    FILE *from;
} serving;

void kiln_refs_serve_begin(void) {
    serving.on = 1;
}

static void serve_stop(int *status) {
    if (serving.from)
        fclose(serving.from); /* closes fd: the helper's stdin ends and it exits */
    serving.from = NULL;
    serving.fd = -1;
    int st = 0;
    if (serving.pid > 0)
        while (waitpid(serving.pid, &st, 0) < 0 && errno == EINTR) {
        }
    serving.pid = 0;
    if (status)
        *status = st;
}

void kiln_refs_serve_end(void) {
    serve_stop(NULL);
    serving.on = 0;
}

static int serve_request(const kiln_problem *p, const char *device, const char *out_dir,
                         const char *key, kiln_err *err) {
    if (!serving.pid) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            return kiln_errf(err, KILN_ERR_IO, "socketpair failed: %s", strerror(errno));
        const char *args[] = {"--serve", "--device", device, "--sets", sets_arg(), NULL};
        pid_t pid = spawn_helper(args, sv[1], 1, err);
        close(sv[1]);
        if (pid < 0) {
            close(sv[0]);
            return KILN_ERR_IO;
        }
        serving.pid = pid;
        serving.fd = sv[0];
        serving.from = fdopen(sv[0], "r");
    }
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "dir", p->dir);
    cJSON_AddStringToObject(req, "out", out_dir);
    cJSON_AddStringToObject(req, "device", device);
    cJSON_AddStringToObject(req, "key", key);
    char *line = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    size_t len = strlen(line);
    line[len] = '\n'; /* cJSON's buffer ends in a NUL: one byte to spare */
    size_t sent = kiln_send_all(serving.fd, line, len + 1);
    free(line);
    char *answer = NULL;
    size_t cap = 0;
    int status = -1;
    if (sent == len + 1 && getline(&answer, &cap, serving.from) > 0) {
        cJSON *a = cJSON_Parse(answer);
        const cJSON *st = a ? cJSON_GetObjectItemCaseSensitive(a, "status") : NULL;
        if (cJSON_IsNumber(st))
            status = st->valueint;
        cJSON_Delete(a);
    }
    free(answer);
    if (status == 0)
        return KILN_OK;
    if (status > 0)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: the reference helper (%s -m kiln.reference --serve) failed with "
                         "status %d; its message is above",
                         p->dir, kiln_python(), status);
    int ended = 0; /* it died: the next request starts another */
    serve_stop(&ended);
    return helper_failed(p->dir, ended, err);
}

static int run_helper(const kiln_problem *p, const char *device, const char *out_dir,
                      int quiet_stdout, kiln_err *err) {
    char key[17];
    snprintf(key, sizeof key, "%016llx", (unsigned long long)p->source_key);
    if (serving.on)
        return serve_request(p, device, out_dir, key, err);
    const char *args[] = {p->dir,  "--out", out_dir,  "--device", device,
                          "--key", key,     "--sets", sets_arg(), NULL};
    pid_t pid = spawn_helper(args, -1, quiet_stdout, err);
    if (pid < 0)
        return KILN_ERR_IO;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KILN_OK;
    return helper_failed(p->dir, status, err);
}

static char *cache_dir_for(const kiln_problem *p, const char *device) {
    char *root = kiln_cache_path("ref");
    /* Problem names come from files: keep only characters that cannot leave the cache folder. */
    char *name = xstrdup(p->name);
    for (char *s = name; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            *s = '_';
    char *dir =
        xasprintf("%s/%s-%016llx-%s", root, name, (unsigned long long)p->source_key, device);
    free(name);
    free(root);
    return dir;
}

int kiln_refs_ensure(const kiln_problem *p, const char *device, const char *ref_dir,
                     int quiet_stdout, kiln_refdata **out, kiln_err *err) {
    *out = NULL;
    char *dir = NULL;
    int rc;
    if (ref_dir) {
        dir = xstrdup(ref_dir);
    } else {
        char *in_problem = xasprintf("%s/kiln/ref-%s", p->dir, device);
        char *manifest = kiln_path_join(in_problem, "manifest.json");
        int has = access(manifest, R_OK) == 0;
        free(manifest);
        if (has || kiln_dir_writable(p->dir)) {
            dir = in_problem;
        } else {
            free(in_problem);
            dir = cache_dir_for(p, device);
        }
    }
    kiln_err load_err;
    rc = kiln_refdata_load(dir, p, out, &load_err);
    if (rc == KILN_OK && (rc = kiln_refdata_verify(*out, &load_err)) == KILN_OK)
        goto done;
    if (*out) {
        /* a set file changed on disk: its data are not used, but rebuilt */
        fprintf(stderr, "kiln: %s\n", load_err.msg);
        kiln_refdata_free(*out);
        *out = NULL;
    }
    /* Missing, stale or changed: (re)build it. */
    if ((rc = kiln_mkdirs(dir, err)))
        goto done;
    if ((rc = kiln_refs_disk_check(p, dir, err)))
        goto done;
    fprintf(stderr, "kiln: writing reference data for %s into %s\n", p->name, dir);
    if ((rc = run_helper(p, device, dir, quiet_stdout, err)))
        goto done;
    rc = kiln_refdata_load(dir, p, out, err);
done:
    free(dir);
    return rc;
}
