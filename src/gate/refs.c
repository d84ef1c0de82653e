/* refs.c: finds a problem's reference data, or has `python -m kiln.reference` write it, so that the
 * gate itself never needs Python to prove a kernel. */
#include "gate.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
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

static int run_helper(const kiln_problem *p, const char *device, const char *out_dir,
                      int quiet_stdout, kiln_err *err) {
    char key[17];
    snprintf(key, sizeof key, "%016llx", (unsigned long long)p->source_key);
    const char *py = kiln_python();
    char *pythonpath = getenv("PYTHONPATH") && *getenv("PYTHONPATH")
                           ? xasprintf("%s/python:%s", kiln_home(), getenv("PYTHONPATH"))
                           : xasprintf("%s/python", kiln_home());
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(pythonpath);
        return kiln_errf(err, KILN_ERR_IO, "fork failed: %s", strerror(errno));
    }
    if (pid == 0) {
        setenv("PYTHONPATH", pythonpath, 1);
        if (quiet_stdout)
            dup2(2, 1);
        execlp(py, py, "-m", "kiln.reference", p->dir, "--out", out_dir, "--device", device,
               "--key", key, (char *)NULL);
        fprintf(stderr, "kiln: cannot run %s: %s (set KILN_PYTHON to a Python with torch)\n", py,
                strerror(errno));
        _exit(127);
    }
    free(pythonpath);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KILN_OK;
    if (WIFEXITED(status))
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: the reference helper (%s -m kiln.reference) failed with exit status "
                         "%d; its message is above",
                         p->dir, py, WEXITSTATUS(status));
    return kiln_errf(err, KILN_ERR_INVALID, "%s: the reference helper died of signal %d", p->dir,
                     WTERMSIG(status));
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
    fprintf(stderr, "kiln: writing reference data for %s into %s\n", p->name, dir);
    if ((rc = kiln_mkdirs(dir, err)))
        goto done;
    if ((rc = run_helper(p, device, dir, quiet_stdout, err)))
        goto done;
    rc = kiln_refdata_load(dir, p, out, err);
done:
    free(dir);
    return rc;
}
