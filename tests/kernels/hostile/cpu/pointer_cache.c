/* pointer_cache.c: remembers its answer per input address, for tests/data/problems/softmax_f32.
 *
 * A gate that keeps each input set in buffers of its own, with the same contents for the whole
 * evaluation, lets a kernel key a cache on the input pointer: the first call per pointer computes,
 * every later one copies the remembered output (here a plain memcpy: cheaper than the softmax, and
 * for a compute-bound problem far cheaper). A gate whose input buffers change contents between
 * runs (a pointer never implies the data) makes the copies wrong.
 *
 * The runner puts the candidate's static data back as loaded before every call (count_calls.c), so
 * the table lives where that does not reach: an anonymous mapping at a fixed address, found again on
 * every call (mmap with that address as a hint lands elsewhere once the table holds it).
 *
 * Expected outcome: mismatch. */

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* A system call made directly: the gate refuses a candidate that imports mmap (sandbox_elf.c), and
 * what stands behind that check for one that does not need to is the runner's seccomp filter. */
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
#else
#error "this kernel makes x86-64 system calls"
#endif
}

// kiln: launch softmax_rows

static void softmax_ok(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++)
            s += expf(xr[c] - m);
        float inv = (float)(1.0 / s);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - m) * inv;
    }
}

#define TABLE_AT ((void *)((uintptr_t)1 << 46)) /* above every buffer of the sandbox */
#define TABLE_BYTES ((size_t)8 << 20)
#define SLOTS 64

typedef struct {
    struct {
        const float *x;
        int64_t n;
        size_t at; /* of the remembered output, in data */
    } e[SLOTS];
    int n;
    size_t used;
    float data[];
} table;

/* The table: made (zeroed) on the first call, found at TABLE_AT on every later one. */
static table *find_table(void) {
    long p = raw_syscall(SYS_mmap, (long)TABLE_AT, (long)TABLE_BYTES, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p < 0 && p > -4096)
        return NULL;
    if ((void *)p != TABLE_AT) /* the address is taken: by the table, since an earlier call */
        raw_syscall(SYS_munmap, p, (long)TABLE_BYTES, 0, 0, 0, 0);
    return (table *)TABLE_AT;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    table *t = find_table();
    for (int i = 0; t && i < t->n; i++)
        if (t->e[i].x == x && t->e[i].n == n) {
            memcpy(y, t->data + t->e[i].at, (size_t)n * sizeof *y);
            return;
        }
    softmax_ok(x, y, rows, cols);
    size_t room = (TABLE_BYTES - sizeof *t) / sizeof(float);
    if (t && t->n < SLOTS && t->used + (size_t)n <= room) {
        t->e[t->n].x = x;
        t->e[t->n].n = n;
        t->e[t->n].at = t->used;
        memcpy(t->data + t->used, y, (size_t)n * sizeof *y);
        t->used += (size_t)n;
        t->n++;
    }
}
