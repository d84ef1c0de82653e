/* python_exec.c: the commands whose work happens inside PyTorch (capture, run, tune) hand the
 * process over to `python -m kiln.<module>` with their own arguments, in kiln's Python environment.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../gate/gate.h"
#include "cli.h"

int kiln_cli_exec_python(const char *command, const char *module, int argc, char **argv) {
    const char *py = kiln_python();
    char *pythonpath = getenv("PYTHONPATH") && *getenv("PYTHONPATH")
                           ? xasprintf("%s/python:%s", kiln_home(), getenv("PYTHONPATH"))
                           : xasprintf("%s/python", kiln_home());
    setenv("PYTHONPATH", pythonpath, 1);
    free(pythonpath);
    /* The Python side runs `kiln optimize` (tune) with this very binary. */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        setenv("KILN_BIN", self, 0);
    }
    /* A budget (tune's --time) counts from here, not from when Python has imported torch: the
     * clock is CLOCK_MONOTONIC, the clock of Python's time.monotonic() on Linux. */
    struct timespec t0;
    if (clock_gettime(CLOCK_MONOTONIC, &t0) == 0) {
        char buf[64];
        snprintf(buf, sizeof buf, "%lld.%09ld", (long long)t0.tv_sec, t0.tv_nsec);
        setenv("KILN_START_MONOTONIC", buf, 1);
    }
    char **args = xcalloc((size_t)argc + 3, sizeof *args);
    args[0] = (char *)py;
    args[1] = "-m";
    args[2] = (char *)module;
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    execvp(py, args);
    fprintf(stderr, "kiln %s: cannot run %s: %s (set KILN_PYTHON to a Python with torch)\n",
            command, py, strerror(errno));
    free(args);
    return 2;
}

int kiln_cmd_capture(int argc, char **argv) {
    return kiln_cli_exec_python("capture", "kiln.capture", argc, argv);
}

int kiln_cmd_run(int argc, char **argv) {
    return kiln_cli_exec_python("run", "kiln.run", argc, argv);
}

int kiln_cmd_tune(int argc, char **argv) {
    return kiln_cli_exec_python("tune", "kiln.tune", argc, argv);
}
