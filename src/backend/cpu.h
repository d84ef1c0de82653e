/* cpu.h: what the cpu backend offers beyond kiln_backend_ops — the log of a sandboxed candidate's
 * process. (kiln_cpu.h, beside it, is the header candidates are compiled with.) */
#ifndef KILN_CPU_H_BACKEND
#define KILN_CPU_H_BACKEND

#include "backend.h"

/* The tail of what module m's process wrote to its stdout and stderr (the sandboxed cpu backend
 * keeps it in runner.log, in the module's folder, until module_free), for a verdict's evidence:
 * the last cap - 1 bytes, NUL-terminated, any byte outside printable ASCII but newline and tab as
 * '?'. It is still there after the process died. Returns the length; 0 (and "") on another
 * backend, for a module run in this process, or when nothing was written. */
size_t kiln_cpu_runner_log_tail(kiln_backend *be, kiln_module *m, char *buf, size_t cap);

#endif
