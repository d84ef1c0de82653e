/* sandbox.h: the gate's side of the cpu sandbox (sandbox.c, sandbox_elf.c) — the candidate
 * buffers, shared with runner processes through one memfd; the runners (build/kiln-sandbox), each
 * holding one loaded candidate; and the check a compiled candidate passes before a runner loads
 * it. The sandboxed cpu backend (cpu.c) is its one user; docs/gate.md "Isolation (cpu)" describes
 * it as a whole. */
#ifndef KILN_SANDBOX_H
#define KILN_SANDBOX_H

#include "backend.h"

typedef struct kiln_sandbox kiln_sandbox; /* the buffers and the settings of the runners */
typedef struct kiln_runner kiln_runner;   /* one candidate's process */

/* Finds build/kiln-sandbox (beside the running executable, one folder up, or in kiln_home()'s
 * build/) and creates the memfd for the buffers. KILN_ERR_BACKEND, saying where it looked, when
 * the runner is missing. $KILN_SANDBOX_EXTRA_MB bounds what a candidate may allocate beyond its
 * buffers (default 2048). */
int kiln_sandbox_open(kiln_sandbox **out, kiln_err *err);
/* Frees every buffer; the runners must be closed first. */
void kiln_sandbox_close(kiln_sandbox *s);

/* The longest one call may run (<= 0: no limit). */
void kiln_sandbox_set_call_limit(kiln_sandbox *s, double seconds);
/* Seconds spent so far starting runners and stopping them after their replies: work of the
 * sandbox, not of the candidate, which timers leave out. */
double kiln_sandbox_overhead_s(const kiln_sandbox *s);

/* A candidate buffer of n_bytes: it ends against a page no runner maps (its start is 16-byte
 * aligned), read-only in the runners when read_only. *out is its address in the runners. Runners
 * started earlier do not see it: the next call restarts them (kiln_runner_call). */
int kiln_sandbox_alloc(kiln_sandbox *s, size_t n_bytes, int read_only, kiln_devptr *out,
                       kiln_err *err);
/* Frees the buffer that starts at p; 0 when p is not one of s's buffers. */
int kiln_sandbox_free(kiln_sandbox *s, kiln_devptr p);
/* The gate's read-write address of [p, p + n), or NULL when that range is not inside one buffer.
 */
void *kiln_sandbox_view(const kiln_sandbox *s, kiln_devptr p, size_t n);

/* KILN_ERR_COMPILE, saying which rule, when the shared object at so_path holds code the dynamic
 * loader would run by itself (constructors, init functions, IFUNC resolvers, destructors) or
 * thread-local variables, or (with check_imports) calls a function outside the list of
 * sandbox_elf.c. */
int kiln_sandbox_check_elf(const char *so_path, int check_imports, kiln_err *err);

/* Starts a runner for dir/candidate.so (n_entries trampolines, kiln__call_0..), its stdout and
 * stderr appended to dir/runner.log; the runner then waits, stopped, for its first call. A
 * candidate that does not load is KILN_ERR_COMPILE with the loader's message. The runner belongs
 * to the calling thread: it is killed when that thread ends (PR_SET_PDEATHSIG). */
int kiln_runner_open(kiln_sandbox *s, const char *dir, int n_entries, kiln_runner **out,
                     kiln_err *err);
/* One call: runs the trampolines entry[0..n_launches) in order with the parameter slots value[]
 * (each value's bytes at the start of its slot; pointers are runner addresses). Returns when the
 * runner has answered and is stopped again. KILN_ERR_TIMEOUT past the call limit, KILN_ERR_LAUNCH
 * when the candidate's process died, exited or broke the protocol; after either the runner is
 * dead and every later call fails with the same reason. */
int kiln_runner_call(kiln_runner *r, int n_launches, const uint32_t *entry, int n_params,
                     const uint64_t *value, kiln_err *err);
/* The last cap - 1 bytes of the runner's log, NUL-terminated, bytes outside printable ASCII (but
 * newlines and tabs) as '?'; returns the length (0 when nothing was written). */
size_t kiln_runner_log_tail(const kiln_runner *r, char *buf, size_t cap);
/* Kills the runner (if it lives) and frees r; the log stays in dir. */
void kiln_runner_close(kiln_runner *r);

#endif
