/* cmd_tune.c: `kiln tune SCRIPT.py [options] [-- args]`: capture + optimize + install check +
 * report in one command. The steps that run inside PyTorch are Python's, so the binary hands over
 * to `python -m kiln.tune` (python/kiln/tune.py), telling it which kiln binary to run `optimize`
 * with (KILN_BIN: this one). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gate/gate.h"
#include "cli.h"

int kiln_cmd_tune(int argc, char **argv) {
    const char *py = kiln_python();
    char *pythonpath = getenv("PYTHONPATH") && *getenv("PYTHONPATH")
                           ? xasprintf("%s/python:%s", kiln_home(), getenv("PYTHONPATH"))
                           : xasprintf("%s/python", kiln_home());
    setenv("PYTHONPATH", pythonpath, 1);
    free(pythonpath);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        setenv("KILN_BIN", self, 0);
    }
    char **args = xcalloc((size_t)argc + 3, sizeof *args);
    args[0] = (char *)py;
    args[1] = "-m";
    args[2] = "kiln.tune";
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    execvp(py, args);
    fprintf(stderr, "kiln tune: cannot run %s: %s (set KILN_PYTHON to a Python with torch)\n", py,
            strerror(errno));
    free(args);
    return 2;
}
