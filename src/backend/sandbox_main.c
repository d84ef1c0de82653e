/* sandbox_main.c: kiln-sandbox, the process in which the sandboxed cpu backend runs one candidate:
 * it maps the candidate's buffers, loads the candidate, locks itself down, then calls it on the
 * gate's command until the gate kills it.
 *
 * Why a process of its own, and why this order. A cpu candidate is native code: in the gate's
 * process it could read the reference outputs, rewrite the verdict, or kill the gate. Here it holds
 * only what the gate put in its memfd (inputs, outputs, scratch), and everything it might use to
 * reach further is refused by a seccomp filter. The filter must come last, because setting up
 * needs what it refuses: mapping the buffers at fixed addresses, opening the candidate's file
 * (dlopen), creating the OpenMP threads the candidate may use (clone), lowering its own limits. And
 * the filter must come before any candidate code runs: that is why the gate checks that the .so
 * has no constructors, IFUNC resolvers or init functions (sandbox_elf.c) before it is given here,
 * and why the runner calls nothing of the candidate's until the filter is in place — not even
 * OpenMP, whose pool the runner makes with its own parallel region (its libgomp, which the
 * candidate's loaded copy is).
 *
 * The filter is an allow-list: everything a compute kernel, glibc's malloc and stdio, and libgomp's
 * threads need (memory, futexes, time, writing to the log, signals to itself), and EPERM for the
 * rest — files, processes, sockets, timers, other processes' signals, limits and scheduling.
 * clone3 answers ENOSYS so that glibc falls back to clone and gets the EPERM. mprotect, munmap,
 * madvise and mremap are allowed only above the end of the buffers' span (sandbox_proto.h), and
 * mmap never at a fixed address, so the candidate can neither unprotect a guard page nor map over a
 * read-only input. The filter covers every thread
 * (SECCOMP_FILTER_FLAG_TSYNC): the OpenMP workers exist already when it is installed.
 *
 * After its first reply the runner is the candidate's: the gate believes nothing it sends beyond
 * "this call is over" and stops it (SIGSTOP) between calls. */
#include "sandbox_proto.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <link.h>
#include <omp.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

/* Exit statuses of a runner that ends by itself (a candidate may of course exit with any). */
enum {
    RUNNER_EXIT_GATE_GONE = 0,  /* the gate closed its end */
    RUNNER_EXIT_USAGE = 2,      /* started by something other than the gate */
    RUNNER_EXIT_BAD_RECORD = 3, /* the gate sent a record the runner does not understand */
    RUNNER_EXIT_NO_REPLY = 4,   /* the reply could not be written (the channel was closed) */
};

typedef void (*trampoline)(void **params);

static trampoline calls[KILN_MAX_LAUNCHES];
static unsigned n_calls;
static uintptr_t cand_lo, cand_hi; /* the candidate's loaded object (its heap: below) */

static void reply(uint64_t seq, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One record to the gate; a runner that cannot talk to its gate has nothing left to do. */
static void reply(uint64_t seq, int status, const char *fmt, ...) {
    kiln_sbx_reply r;
    memset(&r, 0, sizeof r);
    r.magic = KILN_SBX_MAGIC_REPLY;
    r.status = status;
    r.seq = seq;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r.detail, sizeof r.detail, fmt, ap);
        va_end(ap);
    }
    if (write(KILN_SBX_FD_SOCKET, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(RUNNER_EXIT_NO_REPLY);
}

/* Reads one record of exactly n bytes; end of file means the gate is gone. */
static void read_record(void *rec, size_t n, uint32_t magic) {
    ssize_t got;
    do
        got = read(KILN_SBX_FD_SOCKET, rec, n);
    while (got < 0 && errno == EINTR);
    if (got == 0)
        _exit(RUNNER_EXIT_GATE_GONE);
    uint32_t m;
    if (got != (ssize_t)n || (memcpy(&m, rec, sizeof m), m != magic))
        _exit(RUNNER_EXIT_BAD_RECORD);
}

/* Maps the span at KILN_SBX_BASE (PROT_NONE, so that everything but the buffers faults), then
 * each buffer of the memfd over it, and lets go of the memfd: with no descriptor left, pwrite or
 * fallocate cannot reach the read-only inputs either. */
static int map_buffers(const kiln_sbx_setup *s, char *why, size_t cap) {
    long page = sysconf(_SC_PAGESIZE);
    if (s->span == 0 || (s->span & (s->span - 1)) || s->span > KILN_SBX_MAX_SPAN)
        return snprintf(why, cap, "a span of %llu bytes", (unsigned long long)s->span), -1;
    void *want = (void *)(uintptr_t)KILN_SBX_BASE;
    void *got = mmap(want, s->span, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != want)
        return snprintf(why, cap, "cannot reserve %llu bytes at %p: %s",
                        (unsigned long long)s->span, want,
                        got == MAP_FAILED ? strerror(errno) : "placed elsewhere"),
               -1;
    for (uint32_t i = 0; i < s->n_maps; i++) {
        kiln_sbx_map m;
        read_record(&m, sizeof m, KILN_SBX_MAGIC_MAP);
        if (m.offset % (uint64_t)page || m.n_bytes % (uint64_t)page || m.n_bytes == 0 ||
            m.offset > s->span || m.n_bytes > s->span - m.offset)
            return snprintf(why, cap, "buffer %u (%llu bytes at %llu) is not inside the span", i,
                            (unsigned long long)m.n_bytes, (unsigned long long)m.offset),
                   -1;
        int prot = m.read_only ? PROT_READ : PROT_READ | PROT_WRITE;
        void *at = (char *)want + m.offset;
        if (mmap(at, m.n_bytes, prot, MAP_SHARED | MAP_FIXED, KILN_SBX_FD_MEMFD, (off_t)m.offset) !=
            at)
            return snprintf(why, cap, "cannot map buffer %u: %s", i, strerror(errno)), -1;
    }
    close(KILN_SBX_FD_MEMFD);
    return 0;
}

/* Bytes of address space mapped now (/proc/self/statm's first field, in pages). */
static uint64_t address_space_bytes(void) {
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int set_limit(int resource, uint64_t value, const char *name, char *why, size_t cap) {
    struct rlimit rl = {(rlim_t)value, (rlim_t)value};
    if (setrlimit(resource, &rl) != 0)
        return snprintf(why, cap, "cannot set %s: %s", name, strerror(errno)), -1;
    return 0;
}

/* The syscalls allowed without condition: memory of its own, futexes, time, the log, its own
 * signal handling and exiting. Names the running architecture lacks are skipped. */
static const char allowed_always[] =
    "read write close lseek brk futex sched_yield nanosleep clock_nanosleep clock_gettime "
    "clock_getres gettimeofday time getpid gettid getppid getuid geteuid getgid getegid "
    "rt_sigaction rt_sigprocmask rt_sigreturn sigaltstack exit exit_group restart_syscall "
    "set_robust_list rseq getrandom uname sysinfo getrusage times getcpu";

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
                    const struct scmp_arg_cmp *cmp, char *why, size_t cap) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc != 0)
        return snprintf(why, cap, "seccomp rule for %s: %s", name, strerror(-rc)), -1;
    return 0;
}

#define RULE(action, name, ...)                                                                    \
    do {                                                                                           \
        const struct scmp_arg_cmp cmp_[] = {__VA_ARGS__};                                          \
        if (add_rule(ctx, action, name, sizeof cmp_ / sizeof cmp_[0], cmp_, why, cap))             \
            goto done;                                                                             \
    } while (0)

/* Installs the filter on every thread of the process (the essay above says what it allows). */
static int install_filter(uint64_t span_end, char *why, size_t cap) {
    int rc = -1;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx)
        return snprintf(why, cap, "seccomp_init failed"), -1;
    if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0 ||
        seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) {
        snprintf(why, cap, "seccomp attributes refused");
        goto done;
    }
    for (const char *name = allowed_always; *name;) {
        char one[32];
        size_t len = strcspn(name, " ");
        snprintf(one, sizeof one, "%.*s", (int)len, name);
        if (add_rule(ctx, SCMP_ACT_ALLOW, one, 0, NULL, why, cap))
            goto done;
        name += len + (name[len] == ' ');
    }
    /* glibc tries clone3 first and falls back to clone on ENOSYS, which then gets EPERM */
    if (add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, why, cap))
        goto done;

    /* signals to itself only (raise, abort, pthread_kill inside the process) */
    uint64_t self = (uint64_t)getpid();
    RULE(SCMP_ACT_ALLOW, "kill", SCMP_A0(SCMP_CMP_EQ, self));
    RULE(SCMP_ACT_ALLOW, "tgkill", SCMP_A0(SCMP_CMP_EQ, self));
    RULE(SCMP_ACT_ALLOW, "rt_sigqueueinfo", SCMP_A0(SCMP_CMP_EQ, self));
    RULE(SCMP_ACT_ALLOW, "rt_tgsigqueueinfo", SCMP_A0(SCMP_CMP_EQ, self));
    /* the calling thread's own affinity and limits (reading them; no raising) */
    RULE(SCMP_ACT_ALLOW, "sched_getaffinity", SCMP_A0(SCMP_CMP_EQ, 0));
    RULE(SCMP_ACT_ALLOW, "sched_setaffinity", SCMP_A0(SCMP_CMP_EQ, 0));
    RULE(SCMP_ACT_ALLOW, "prlimit64", SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0));

    /* Memory management above the buffers only: a range that starts lower might reach into them.
     * New mappings may go anywhere the kernel picks, never at a fixed address; a mapping may move
     * only where the kernel picks. (One rule per call: libseccomp 2.5 can loop forever merging two
     * rules of one call that compare the same argument differently.) */
    RULE(SCMP_ACT_ALLOW, "mprotect", SCMP_A0(SCMP_CMP_GE, span_end));
    RULE(SCMP_ACT_ALLOW, "munmap", SCMP_A0(SCMP_CMP_GE, span_end));
    RULE(SCMP_ACT_ALLOW, "madvise", SCMP_A0(SCMP_CMP_GE, span_end));
    RULE(SCMP_ACT_ALLOW, "mmap", SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_FIXED, 0));
    RULE(SCMP_ACT_ALLOW, "mremap", SCMP_A0(SCMP_CMP_GE, span_end),
         SCMP_A3(SCMP_CMP_MASKED_EQ, MREMAP_FIXED | MREMAP_DONTUNMAP, 0));

    int lrc = seccomp_load(ctx);
    if (lrc != 0) {
        snprintf(why, cap, "cannot install the seccomp filter: %s", strerror(-lrc));
        goto done;
    }
    rc = 0;
done:
    seccomp_release(ctx);
    return rc;
}

/* The candidate's writable static data (its .data and .bss: what the loader left writable after
 * relocation) as dlopen left it, put back before every call. A kernel that keeps anything there
 * from one call to the next — a count of its calls, the answers it computed keyed by its inputs'
 * addresses or contents — starts every call as loaded instead, so it does the work on every call or
 * fails it. (Thread-local storage, the other place such state could live, is refused with the
 * object: sandbox_elf.c.) */
typedef struct {
    unsigned char *at, *copy;
    size_t n;
} state_range;
static state_range state[8];
static int n_state;

typedef struct {
    uintptr_t base;
    const char *name;
    int found;
    char *why;
    size_t cap;
} state_search;

static int snapshot_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    state_search *q = arg;
    if (info->dlpi_addr != q->base || strcmp(info->dlpi_name, q->name) != 0)
        return 0;
    q->found = 1;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), relro_end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) /* read-only up to its last whole page */
            relro_end =
                (q->base + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) & ~(page - 1);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && ph->p_memsz) { /* the object's extent, for the heap */
            uintptr_t lo = q->base + ph->p_vaddr, hi = lo + ph->p_memsz;
            cand_lo = cand_lo && cand_lo < lo ? cand_lo : lo;
            cand_hi = cand_hi > hi ? cand_hi : hi;
        }
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz == 0)
            continue;
        uintptr_t lo = q->base + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (relro_end > lo)
            lo = relro_end < hi ? relro_end : hi;
        if (lo == hi)
            continue;
        if (n_state == (int)(sizeof state / sizeof state[0]))
            return snprintf(q->why, q->cap, "more than %d writable segments", n_state), -1;
        state_range *r = &state[n_state++];
        r->at = (unsigned char *)lo;
        r->n = hi - lo;
        r->copy = malloc(r->n);
        if (!r->copy)
            return snprintf(q->why, q->cap, "no memory for a copy of %zu bytes of static data",
                            r->n),
                   -1;
        memcpy(r->copy, r->at, r->n);
    }
    return 1;
}

static int snapshot_state(void *dl, char *why, size_t cap) {
    struct link_map *lm = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return snprintf(why, cap, "dlinfo: %s", dlerror()), -1;
    state_search q = {lm->l_addr, lm->l_name, 0, why, cap};
    if (dl_iterate_phdr(snapshot_object, &q) < 0)
        return -1;
    return q.found ? 0 : (snprintf(why, cap, "the candidate is not among the loaded objects"), -1);
}

static void restore_state(void) {
    for (int i = 0; i < n_state; i++)
        memcpy(state[i].at, state[i].copy, state[i].n);
}

/* Loads the candidate, resolves its trampolines and copies its static data; *why gets dlerror() on
 * failure. */
static int load_candidate(const kiln_sbx_setup *s, char *why, size_t cap) {
    if (memchr(s->so_path, 0, sizeof s->so_path) == NULL || s->n_entries < 1 ||
        s->n_entries > KILN_MAX_LAUNCHES)
        return snprintf(why, cap, "malformed setup record"), -1;
    void *dl = dlopen(s->so_path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        return snprintf(why, cap, "%s", e ? e : "dlopen failed"), -1;
    }
    for (uint32_t k = 0; k < s->n_entries; k++) {
        char sym[32];
        snprintf(sym, sizeof sym, "kiln__call_%u", k);
        void *f = dlsym(dl, sym);
        if (!f)
            return snprintf(why, cap, "trampoline %s missing from the candidate", sym), -1;
        memcpy(&calls[k], &f, sizeof f); /* object to function pointer, as POSIX allows */
    }
    n_calls = s->n_entries;
    return snapshot_state(dl, why, cap);
}

/* The candidate's heap. A kernel may malloc (kiln's own cpu templates do, for a row or a channel's
 * working memory), but glibc's heap outlives a call: a chunk freed last comes back, contents and
 * all, to the next request of its size, so a kernel could find answers there on the next call. So
 * this runner defines malloc, calloc, realloc, aligned_alloc, posix_memalign and free itself
 * (exported: the candidate binds to these, and so does every library of the process). A call made
 * from the candidate's own code (its return address lies in the candidate's loaded object) is
 * served from an arena of the call's own, a bump allocator over memory reserved at setup, which the
 * runner empties after every call (arena_reset: it reads as zeros next time); every other
 * caller — libgomp, stdio, the runner — gets glibc's heap as usual (__libc_malloc). free of an
 * arena block gives its room back when it was the last handed out; the arena's size is the address
 * space the candidate may add ($KILN_SANDBOX_EXTRA_MB), and a request beyond it is NULL with
 * ENOMEM. The gate allows a candidate these six and none of the heap's other functions
 * (sandbox_elf.c). */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static unsigned char *arena;
static size_t arena_size, arena_used; /* arena_used: atomically, by every thread of a call */
static size_t arena_high;             /* the most arena_used reached in the call: what to empty */

/* Before every block: where its room in the arena starts and ends (offsets), for free, which gives
 * the room back when it is the last handed out (a malloc/free pair in a loop reuses it), and for
 * realloc, which copies what the old block held. */
#define ARENA_HEADER 16

static int from_candidate(const void *ret) {
    return (uintptr_t)ret >= cand_lo && (uintptr_t)ret < cand_hi;
}

static int in_arena(const void *p) {
    return arena && (const unsigned char *)p >= arena &&
           (const unsigned char *)p < arena + arena_size;
}

static void *arena_alloc(size_t n, size_t align) {
    if (align < ARENA_HEADER)
        align = ARENA_HEADER;
    if (align & (align - 1) || n > arena_size) {
        errno = align & (align - 1) ? EINVAL : ENOMEM;
        return NULL;
    }
    /* room for the header and the alignment, whatever the start */
    size_t want = (n + ARENA_HEADER + align + 15) & ~(size_t)15;
    size_t at = __atomic_fetch_add(&arena_used, want, __ATOMIC_RELAXED);
    if (at > arena_size || want > arena_size - at) {
        errno = ENOMEM;
        return NULL;
    }
    size_t high = __atomic_load_n(&arena_high, __ATOMIC_RELAXED);
    while (high < at + want && !__atomic_compare_exchange_n(&arena_high, &high, at + want, 1,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    uintptr_t p = ((uintptr_t)arena + at + ARENA_HEADER + align - 1) & ~(uintptr_t)(align - 1);
    const size_t room[2] = {at, at + want};
    memcpy((void *)(p - sizeof room), room, sizeof room);
    return (void *)p;
}

/* The [start, end) offsets of an arena block's room. */
static void arena_room(const void *p, size_t room[2]) {
    memcpy(room, (const unsigned char *)p - 2 * sizeof(size_t), 2 * sizeof(size_t));
}

#define ARENA_ZEROED_BYTES ((size_t)64 << 20) /* up to this, zeroed by stores; beyond, dropped */

/* Empties the arena after a call: what the call allocated reads as zeros at the next. Up to 64 MiB
 * are zeroed in place, so that the next call finds its pages mapped as glibc's heap would have left
 * them (a kernel's timed call does not pay page faults for the arena's reset); the rest is dropped.
 */
static void arena_reset(void) {
    size_t used = arena_high; /* at most arena_size: arena_alloc refuses past it */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t zeroed = used < ARENA_ZEROED_BYTES ? used : ARENA_ZEROED_BYTES;
    memset(arena, 0, zeroed);
    if (used > zeroed)
        madvise(arena + zeroed, (used - zeroed + page - 1) & ~(page - 1), MADV_DONTNEED);
    arena_used = 0;
    arena_high = 0;
}

void *malloc(size_t n) {
    return from_candidate(__builtin_return_address(0)) ? arena_alloc(n, 16) : __libc_malloc(n);
}

void *calloc(size_t n, size_t size) {
    if (!from_candidate(__builtin_return_address(0)))
        return __libc_calloc(n, size);
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return arena_alloc(n * size, 16); /* never handed out before in this call: zeros */
}

void *realloc(void *p, size_t n) {
    if (!in_arena(p) && !(p == NULL && from_candidate(__builtin_return_address(0))))
        return __libc_realloc(p, n);
    void *q = arena_alloc(n, 16);
    if (q && p) {
        size_t room[2];
        arena_room(p, room);
        size_t old = (size_t)(arena + room[1] - (unsigned char *)p); /* at least what it held */
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}

void *aligned_alloc(size_t align, size_t n) {
    return from_candidate(__builtin_return_address(0)) ? arena_alloc(n, align)
                                                       : __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align % sizeof(void *))
        return EINVAL;
    void *p = from_candidate(__builtin_return_address(0)) ? arena_alloc(n, align)
                                                          : __libc_memalign(align, n);
    if (!p)
        return errno ? errno : ENOMEM;
    *out = p;
    return 0;
}

void free(void *p) {
    if (p && !in_arena(p)) {
        __libc_free(p);
    } else if (p) { /* the room goes back if nothing was handed out after it */
        size_t room[2];
        arena_room(p, room);
        __atomic_compare_exchange_n(&arena_used, &room[1], room[0], 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
}

/* Reserves the arena (address space only: pages come as the candidate touches them). */
static int make_arena(uint64_t bytes, char *why, size_t cap) {
    void *a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (a == MAP_FAILED)
        return snprintf(why, cap, "cannot reserve the candidate's heap (%llu bytes): %s",
                        (unsigned long long)bytes, strerror(errno)),
               -1;
    arena = a;
    arena_size = bytes;
    return 0;
}

/* What else a call leaves behind in its threads, put back before every call like the static data:
 * the stack below the frames in use (a kernel's uninitialised local array reads what the last call
 * left there), errno and the floating-point environment (rounding mode, exception flags, FTZ/DAZ).
 * Each thread of the pool puts back its own; its stack's lowest address is found while the pool is
 * made, before the filter (pthread_getattr_np reads /proc for the main thread). */
typedef struct {
    pthread_t id;
    uintptr_t lo;
} thread_stack;
static thread_stack *stacks;
static int n_threads;

#define NEAR_BYTES 32768 /* zeroed by a store, just below the scrubbing frame */

static __attribute__((noinline)) void zero_near(void) {
    unsigned char pad[NEAR_BYTES];
    memset(pad, 0, sizeof pad);
    __asm__ volatile("" : : "r"(pad) : "memory"); /* the stores are not dead */
}

static __attribute__((noinline)) void scrub_thread(void) {
    errno = 0;
    fesetenv(FE_DFL_ENV);
    uintptr_t lo = 0;
    for (int i = 0; i < n_threads; i++)
        if (pthread_equal(stacks[i].id, pthread_self()))
            lo = stacks[i].lo;
    zero_near();
    /* below what zero_near stored: the pages go, and read as zeros when next touched (where the
     * range holds pages not yet mapped, the rest is still done) */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t top = ((uintptr_t)__builtin_frame_address(0) - NEAR_BYTES / 2) & ~(page - 1);
    if (lo && top > lo)
        madvise((void *)lo, top - lo, MADV_DONTNEED);
}

static void scrub_threads(void) {
#pragma omp parallel num_threads(n_threads)
    scrub_thread();
}

/* Every thread OpenMP will hand the candidate, made now (creating one later is refused), each
 * recording where its stack lies. */
static int make_thread_pool(char *why, size_t cap) {
    n_threads = omp_get_max_threads();
    stacks = calloc((size_t)n_threads, sizeof *stacks);
    if (!stacks)
        return snprintf(why, cap, "no memory for %d threads' stacks", n_threads), -1;
    int failed = 0;
#pragma omp parallel num_threads(n_threads)
    {
        thread_stack *t = &stacks[omp_get_thread_num()];
        pthread_attr_t a;
        void *addr = NULL;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            if (pthread_attr_getstack(&a, &addr, &size) != 0)
                addr = NULL;
            pthread_attr_destroy(&a);
        }
        t->id = pthread_self();
        t->lo = (uintptr_t)addr;
        if (!addr) {
#pragma omp atomic write
            failed = 1;
        }
    }
    return failed ? (snprintf(why, cap, "cannot find a thread's stack"), -1) : 0;
}

/* Serves calls until the gate closes the socket (or kills the runner). */
static _Noreturn void serve(void) {
    for (;;) {
        kiln_sbx_call c;
        read_record(&c, sizeof c, KILN_SBX_MAGIC_CALL);
        if (c.n_launches > KILN_MAX_LAUNCHES || c.n_params > KILN_MAX_PARAMS)
            _exit(RUNNER_EXIT_BAD_RECORD);
        void *params[KILN_MAX_PARAMS];
        for (uint32_t i = 0; i < c.n_params; i++)
            params[i] = &c.value[i];
        for (uint32_t l = 0; l < c.n_launches; l++) {
            if (c.entry[l] >= n_calls)
                _exit(RUNNER_EXIT_BAD_RECORD);
            calls[c.entry[l]](params);
        }
        fflush(stdout);
        fflush(stderr);
        reply(c.seq, KILN_SBX_OK, NULL); /* the gate's timer stops here */
        /* the next call starts as the first did; done here, after the reply the gate times and
         * before the one it waits for before it stops the runner, so it is never timed */
        restore_state();
        arena_reset();
        scrub_threads();
        reply(c.seq, KILN_SBX_READY, NULL);
    }
}

int main(int argc, char **argv) {
    /* argv[1]: the gate's pid. The runner dies with the gate; if the gate is gone already, now. */
    if (argc != 2)
        _exit(RUNNER_EXIT_USAGE);
    pid_t gate = (pid_t)strtol(argv[1], NULL, 10);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != gate)
        _exit(RUNNER_EXIT_USAGE);
    prctl(PR_SET_DUMPABLE, 0); /* no core file of the buffers, no ptrace from outside */

    static kiln_sbx_setup s;
    read_record(&s, sizeof s, KILN_SBX_MAGIC_SETUP);
    char why[200] = "";
    if (s.version != KILN_SBX_VERSION) {
        reply(0, KILN_SBX_SETUP_FAILED, "the gate speaks version %u, this runner %u (rebuild kiln)",
              s.version, KILN_SBX_VERSION);
        _exit(RUNNER_EXIT_BAD_RECORD);
    }
    if (map_buffers(&s, why, sizeof why)) {
        reply(0, KILN_SBX_SETUP_FAILED, "%s", why);
        _exit(RUNNER_EXIT_BAD_RECORD);
    }
    if (load_candidate(&s, why, sizeof why)) {
        reply(0, KILN_SBX_LOAD_FAILED, "%s", why);
        _exit(0);
    }
    /* the log is a file: line-buffered, so that a crash loses no more than a line */
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint64_t span_end = KILN_SBX_BASE + s.span;
    if (make_thread_pool(why, sizeof why) || make_arena(s.extra_bytes, why, sizeof why) ||
        set_limit(RLIMIT_CORE, 0, "RLIMIT_CORE", why, sizeof why) ||
        set_limit(RLIMIT_FSIZE, s.log_bytes, "RLIMIT_FSIZE", why, sizeof why) ||
        set_limit(RLIMIT_AS, address_space_bytes() + s.extra_bytes, "RLIMIT_AS", why, sizeof why) ||
        install_filter(span_end, why, sizeof why)) {
        reply(0, KILN_SBX_SETUP_FAILED, "%s", why);
        _exit(RUNNER_EXIT_BAD_RECORD);
    }
    reply(0, KILN_SBX_OK, NULL);
    serve();
}
