/* cmd_run.c: `kiln run [--library DIR] SCRIPT.py [args]`: installing a library happens inside
 * PyTorch, so the binary hands over to `python -m kiln.run` with the same arguments, in kiln's
 * Python environment (python/kiln/run.py; docs/install.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gate/gate.h"
#include "cli.h"

int kiln_cmd_run(int argc, char **argv) {
    const char *py = kiln_python();
    char *pythonpath = getenv("PYTHONPATH") && *getenv("PYTHONPATH")
                           ? xasprintf("%s/python:%s", kiln_home(), getenv("PYTHONPATH"))
                           : xasprintf("%s/python", kiln_home());
    setenv("PYTHONPATH", pythonpath, 1);
    free(pythonpath);
    char **args = xcalloc((size_t)argc + 3, sizeof *args);
    args[0] = (char *)py;
    args[1] = "-m";
    args[2] = "kiln.run";
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    execvp(py, args);
    fprintf(stderr, "kiln run: cannot run %s: %s (set KILN_PYTHON to a Python with torch)\n", py,
            strerror(errno));
    free(args);
    return 2;
}
