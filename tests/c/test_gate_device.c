/* test_gate_device.c: the gate's own device kernels (src/gate/kernels/gate_device.cu) against the
 * host's check, and the memory a candidate gets on cuda. NVRTC compiles the kernels wherever the
 * toolkit is (no spills); on a GPU the device check must give exactly the host's counts and first
 * indices on random outputs of every dtype (written, unwritten, NaN, off by a little and by a lot,
 * masked references), a candidate's store into a read-only input must fault, and a read just past
 * the end of a guarded buffer must fault. Without a GPU the device tests say "SKIP: ..." and skip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cubin.h"
#include "backend/cuda_driver.h"
#include "backend/nvrtc.h"
#include "gate/gate_impl.h"

extern const struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kiln_gate_kernels[];

static const char *gate_source(void) {
    for (int i = 0; kiln_gate_kernels[i].name; i++)
        if (strcmp(kiln_gate_kernels[i].name, "gate_device.cu") == 0)
            return (const char *)kiln_gate_kernels[i].data;
    return NULL;
}

static void test_kernels_compile_without_spills(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here: cannot compile for sm_90\n");
        skip();
    }
    char *cubin = NULL, *log = NULL;
    size_t len = 0;
    kiln_err err;
    if (kiln_cuda_compile_only(gate_source(), "sm_90", &cubin, &len, &log, &err))
        fail_msg("gate_device.cu does not compile: %s\n%s", err.msg, log ? log : "");
    const char *entries[] = {"kiln_gate_fill", "kiln_gate_mask", "kiln_gate_check",
                             "kiln_gate_diff"};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        kiln_cubin_usage u;
        if (kiln_cubin_usage_of(cubin, len, entries[i], &u, &err))
            fail_msg("%s: %s", entries[i], err.msg);
        assert_int_equal(u.frame_bytes, 0);
    }
    free(cubin);
    free(log);
}

/* ---- on a GPU ---- */

static kiln_backend *be;
static kiln_gate_dev *dev;

static int setup(void **state) {
    (void)state;
    kiln_err err;
    if (kiln_backend_open("cuda", 0, &be, &err) != KILN_OK) {
        printf("SKIP: no CUDA device: %s\n", err.msg);
        be = NULL;
        return 0;
    }
    if (kiln_gate_dev_open(be, &dev, &err) != KILN_OK)
        fail_msg("the gate's kernels do not load: %s", err.msg);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kiln_gate_dev_close(dev);
    kiln_backend_close(be);
    return 0;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!be)                                                                                   \
            skip();                                                                                \
    } while (0)

static uint64_t rng = 0x1234567;

/* n random elements of dtype t (values of a few units, exact for integers). */
static void random_values(kiln_dtype t, void *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double v = (double)(kiln_gate_random(&rng) % 2001) / 250.0 - 4.0;
        if (!kiln_dtype_is_float(t))
            v = floor(v * 10);
        if (t == KILN_BOOL || t == KILN_U8)
            v = fabs(v);
        kiln_dtype_store(t, buf, i, v);
    }
}

/* The device's sums for out vs ref (masked on the device with key) equal the host's. */
static void compare_check(kiln_dtype t, const void *out, const void *ref, size_t n, uint64_t poison,
                          uint64_t key, const kiln_tolerance *tol) {
    size_t bytes = n * kiln_dtype_size(t);
    kiln_err err;
    kiln_devptr d_out, d_ref;
    assert_int_equal(be->ops->alloc(be, bytes, KILN_ALLOC_CANDIDATE, &d_out, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, bytes, 0, &d_ref, &err), KILN_OK);
    assert_int_equal(be->ops->upload(be, d_out, out, bytes, &err), KILN_OK);
    assert_int_equal(be->ops->upload(be, d_ref, ref, bytes, &err), KILN_OK);
    if (key)
        assert_int_equal(kiln_gate_dev_mask(dev, d_ref, t, n, key, &err), KILN_OK);
    assert_int_equal(kiln_gate_dev_reserve(dev, 1, &err), KILN_OK);
    assert_int_equal(kiln_gate_dev_check(dev, 0, d_out, d_ref, t, n, poison, key, tol, &err),
                     KILN_OK);
    assert_int_equal(be->ops->wait(be, 10, &err), KILN_OK);
    kiln_check_sum got, want;
    assert_int_equal(kiln_gate_dev_results(dev, 1, &got, &err), KILN_OK);
    kiln_check_sum_host(&want, out, ref, t, n, poison, 0, tol);
    if (got.n_unwritten != want.n_unwritten || got.first_unwritten != want.first_unwritten ||
        got.n_nonfinite != want.n_nonfinite || got.first_nonfinite != want.first_nonfinite ||
        got.n_bad != want.n_bad || got.first_bad != want.first_bad ||
        got.n_matched != want.n_matched || got.n_over_cap != want.n_over_cap ||
        got.max_abs_bits != want.max_abs_bits)
        fail_msg("%s: device unwritten %llu@%llu nonfinite %llu@%llu bad %llu@%llu matched %llu "
                 "cap %llu; host %llu@%llu %llu@%llu %llu@%llu %llu %llu",
                 kiln_dtype_name(t), (unsigned long long)got.n_unwritten,
                 (unsigned long long)got.first_unwritten, (unsigned long long)got.n_nonfinite,
                 (unsigned long long)got.first_nonfinite, (unsigned long long)got.n_bad,
                 (unsigned long long)got.first_bad, (unsigned long long)got.n_matched,
                 (unsigned long long)got.n_over_cap, (unsigned long long)want.n_unwritten,
                 (unsigned long long)want.first_unwritten, (unsigned long long)want.n_nonfinite,
                 (unsigned long long)want.first_nonfinite, (unsigned long long)want.n_bad,
                 (unsigned long long)want.first_bad, (unsigned long long)want.n_matched,
                 (unsigned long long)want.n_over_cap);
    /* sums of squares: the same terms in another order */
    assert_true(fabs(got.sum_sq_err - want.sum_sq_err) <= 1e-9 * (1 + want.sum_sq_err));
    assert_true(fabs(got.sum_sq_ref - want.sum_sq_ref) <= 1e-9 * (1 + want.sum_sq_ref));
    be->ops->free(be, d_out);
    be->ops->free(be, d_ref);
}

static void test_device_check_equals_host_check(void **state) {
    (void)state;
    NEED_GPU();
    kiln_dtype types[] = {KILN_F32, KILN_F64, KILN_BF16, KILN_F16, KILN_F8_E4M3, KILN_F8_E5M2,
                          KILN_I64, KILN_I32, KILN_I16,  KILN_I8,  KILN_U8,      KILN_BOOL};
    size_t n = 300007; /* not a multiple of anything the kernels use */
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        kiln_dtype t = types[k];
        size_t sz = kiln_dtype_size(t);
        unsigned char *ref = xmalloc(n * sz), *out = xmalloc(n * sz);
        random_values(t, ref, n);
        memcpy(out, ref, n * sz);
        uint64_t poison = kiln_poison_draw(t, kiln_gate_random(&rng));
        kiln_tolerance tol = kiln_tolerance_default(t);
        compare_check(t, out, ref, n, poison, 0, &tol); /* right everywhere */
        for (size_t i = 0; i < n; i += 997) {           /* a little off, a lot off */
            double v = kiln_dtype_load(t, ref, i);
            kiln_dtype_store(t, out, i, i % 2 ? v * (1 + 1e-3) : v + 3);
        }
        for (size_t i = 5; i < n; i += 4099) /* unwritten */
            kiln_poison_fill(t, out + i * sz, 1, poison);
        if (kiln_dtype_is_float(t))
            for (size_t i = 7; i < n; i += 7919) /* NaN where the reference is a number */
                kiln_dtype_store(t, out, i, NAN);
        compare_check(t, out, ref, n, poison, 0, &tol);
        compare_check(t, out, ref, n, poison, 0x9e3779b97f4a7c15ull, &tol); /* masked */
        kiln_tolerance sol = {
            .atol = 1e-2, .rtol = 1e-2, .sol = 1, .matched_ratio = 0.9, .error_cap = 2};
        compare_check(t, out, ref, n, poison, 0, &sol);
        free(ref);
        free(out);
    }
}

/* In a child (a fault loses the context): a kernel that stores into a read-only candidate buffer,
 * or reads 4 KiB past the end of a guarded one, gets KILN_ERR_LAUNCH. */
static int fault_in_child(const char *src, unsigned flags) {
    pid_t pid = fork();
    if (pid == 0) {
        kiln_backend *b;
        kiln_err err;
        if (kiln_backend_open("cuda", 0, &b, &err))
            _exit(3);
        kiln_module *m;
        char *log = NULL;
        if (b->ops->load_raw(b, src, &m, &log, &err))
            _exit(4);
        kiln_devptr p;
        if (b->ops->alloc(b, 1 << 20, flags, &p, &err) ||
            b->ops->memset8(b, p, 1, 1 << 20, &err)) /* the gate may still write it */
            _exit(5);
        unsigned g[3] = {1, 1, 1}, bl[3] = {32, 1, 1};
        uint64_t n = (1 << 20) / 4;
        void *params[] = {&p, &n};
        int rc = b->ops->launch_raw(b, m, "poke", g, bl, params, &err);
        if (!rc)
            rc = b->ops->wait(b, 10, &err);
        _exit(rc == KILN_ERR_LAUNCH ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

/* The three children's exit codes, run first thing in main: CUDA cannot be used in a child forked
 * from a process that has initialised it (or used NVRTC), so they run before anything else does. */
static int fault_store_ro = -1, fault_read_past = -1, fault_store_rw = -1;

static void run_fault_children(void) {
    if (!kiln_cuda_driver_present() || kiln_cuda_visible_gpus() < 1)
        return;
    const char *store = "extern \"C\" __global__ void poke(float *p, unsigned long long n) {\n"
                        "    p[threadIdx.x] = 2.0f;\n"
                        "}\n";
    const char *past = "extern \"C\" __global__ void poke(float *p, unsigned long long n) {\n"
                       "    volatile float *q = p + n + 1024;\n"
                       "    if (threadIdx.x == 0 && *q == 12345.0f) p[0] = 1.0f;\n"
                       "}\n";
    fault_store_ro = fault_in_child(store, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY);
    fault_read_past = fault_in_child(past, KILN_ALLOC_CANDIDATE);
    fault_store_rw = fault_in_child(store, KILN_ALLOC_CANDIDATE);
}

static void test_read_only_and_guards_fault(void **state) {
    (void)state;
    NEED_GPU();
    assert_int_equal(fault_store_ro, 0);  /* a store into a read-only input faults */
    assert_int_equal(fault_read_past, 0); /* a read 4 KiB past a guarded buffer faults */
    /* the same store into a writable candidate buffer is fine: the fault above is the mapping's */
    assert_int_equal(fault_store_rw, 1);
}

/* Not a check: how long a guarded (and a read-only) buffer takes to allocate and free, printed for
 * the gate's load phase, which makes one per input slot and output. */
static void test_guarded_allocation_cost(void **state) {
    (void)state;
    NEED_GPU();
    enum { N = 64 };
    kiln_devptr p[N];
    kiln_err err;
    unsigned kinds[] = {0, KILN_ALLOC_CANDIDATE, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY};
    const char *names[] = {"plain", "guarded", "guarded read-only"};
    for (int k = 0; k < 3; k++) {
        double t0 = kiln_now_s();
        for (int i = 0; i < N; i++)
            assert_int_equal(be->ops->alloc(be, 65536, kinds[k], &p[i], &err), KILN_OK);
        double t1 = kiln_now_s();
        for (int i = 0; i < N; i++)
            be->ops->free(be, p[i]);
        printf("alloc cost: %s buffer of 64 KiB: %.3f ms to allocate, %.3f ms to free\n", names[k],
               1e3 * (t1 - t0) / N, 1e3 * (kiln_now_s() - t1) / N);
    }
}

int main(void) {
    run_fault_children();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_compile_without_spills),
        cmocka_unit_test(test_device_check_equals_host_check),
        cmocka_unit_test(test_read_only_and_guards_fault),
        cmocka_unit_test(test_guarded_allocation_cost),
    };
    return cmocka_run_group_tests_name("gate_device", tests, setup, teardown);
}
