/* test_cubin.c: registers, stack frames and global variables read from cubins that NVRTC compiled
 * here (no GPU needed, NVRTC is), and what the reader does with bytes that are not a cubin; then
 * where each family starts (kiln_family_start_index) on GPU rows of bench/problems: the point
 * passes its family's check and compiles without a stack frame (no spills) or global variables, and
 * the softmax start rule keeps its row in at most 64 registers (its promise: the warp-per-row first
 * point of the table took 165 registers and half the bandwidth on the H200). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cubin.h"
#include "backend/nvrtc.h"
#include "formats/problem.h"
#include "gen/family.h"

static const char small_src[] =
    "extern \"C\" __global__ void kiln_small(float *y, const float *x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = x[i] * 2.0f;\n"
    "}\n";

/* A local array indexed by a run-time value lives in local memory: a stack frame of its size. */
static const char frame_src[] =
    "extern \"C\" __global__ void kiln_framed(float *y, const int *k, int n) {\n"
    "    float a[256];\n"
    "    for (int i = 0; i < 256; i++) a[i] = i * 0.5f + n;\n"
    "    y[threadIdx.x] = a[k[threadIdx.x] & 255];\n"
    "}\n"
    "extern \"C\" __global__ void kiln_other(float *y) {\n" /* static shared memory: NOBITS */
    "    __shared__ float s[256];\n"
    "    s[threadIdx.x] = y[threadIdx.x];\n"
    "    __syncthreads();\n"
    "    y[threadIdx.x] = s[255 - threadIdx.x];\n"
    "}\n";

static int have_nvrtc(void) {
    if (kiln_cuda_have_nvrtc())
        return 1;
    printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90\n");
    return 0;
}

static void compile(const char *src, char **cubin, size_t *len) {
    char *log = NULL;
    kiln_err err;
    if (kiln_cuda_compile_only(src, "sm_90", cubin, len, &log, &err))
        fail_msg("does not compile: %s\n%s", err.msg, log ? log : "");
    free(log);
}

static void test_registers_and_frames(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    char *cubin;
    size_t len;
    kiln_cubin_usage u;
    kiln_err err;
    compile(small_src, &cubin, &len);
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "kiln_small", &u, &err), 0);
    assert_true(u.regs > 0 && u.regs < 32);
    assert_int_equal(u.frame_bytes, 0);
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "no_such_kernel", &u, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "no symbol named no_such_kernel"));
    free(cubin);

    compile(frame_src, &cubin, &len);
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "kiln_framed", &u, &err), 0);
    assert_true(u.frame_bytes >= 1024); /* 256 floats */
    kiln_cubin_usage other;
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "kiln_other", &other, &err), 0);
    assert_int_equal(other.frame_bytes, 0); /* attributes are per kernel */
    free(cubin);
}

/* __device__ variables, as a kernel that remembers something from launch to launch declares them: a
 * zero-initialised counter (.nv.global) and an initialised static table (.nv.global.init). */
static const char globals_src[] =
    "__device__ unsigned long long kiln_launches;\n"
    "static __device__ float kiln_table[1024] = {1.0f};\n"
    "extern \"C\" __global__ void kiln_counting(float *y) {\n"
    "    if (threadIdx.x == 0) atomicAdd(&kiln_launches, 1ull);\n"
    "    y[threadIdx.x] = kiln_table[threadIdx.x] + (float)kiln_launches;\n"
    "    kiln_table[threadIdx.x] = y[threadIdx.x];\n"
    "}\n";

/* The gate reloads a module with global variables before every run (cuda.c, reset_state): the
 * reader must find them, whether zero-initialised or not, and find none in a kernel without. */
static void test_global_variables(void **state) {
    (void)state;
    uint64_t bytes = 1;
    kiln_err err;
    assert_int_equal(kiln_cubin_global_bytes("hello", 5, &bytes, &err), KILN_ERR_FORMAT);
    if (!have_nvrtc())
        skip();
    char *cubin;
    size_t len;
    compile(small_src, &cubin, &len);
    assert_int_equal(kiln_cubin_global_bytes(cubin, len, &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    free(cubin);
    compile(frame_src, &cubin, &len); /* local and shared memory are not globals */
    assert_int_equal(kiln_cubin_global_bytes(cubin, len, &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    free(cubin);
    compile(globals_src, &cubin, &len);
    assert_int_equal(kiln_cubin_global_bytes(cubin, len, &bytes, &err), 0);
    assert_true(bytes >= 8 + 4096);
    free(cubin);
}

static const char heap_src[] = /* the device heap: the gate refuses a cubin that calls it */
    "extern \"C\" __global__ void kiln_heap(float *y) {\n"
    "    float *p = (float *)malloc(64);\n"
    "    p[0] = y[0];\n"
    "    y[threadIdx.x] = p[0];\n"
    "    free(p);\n"
    "}\n";

/* The cuda backend refuses a candidate whose cubin calls the device heap's malloc or free
 * (cuda.c, refuse_device_heap): the reader must see both undefined there, and neither in a kernel
 * that does not call them. */
static void test_undefined_functions(void **state) {
    (void)state;
    int undefined = 1;
    kiln_err err;
    assert_int_equal(kiln_cubin_undefined("hello", 5, "malloc", &undefined, &err), KILN_ERR_FORMAT);
    if (!have_nvrtc())
        skip();
    char *cubin;
    size_t len;
    compile(heap_src, &cubin, &len);
    const char *const names[] = {"malloc", "free"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kiln_cubin_undefined(cubin, len, names[i], &undefined, &err), 0);
        assert_int_equal(undefined, 1);
    }
    /* the kernel itself is defined, a name that is not there is not undefined */
    assert_int_equal(kiln_cubin_undefined(cubin, len, "kiln_heap", &undefined, &err), 0);
    assert_int_equal(undefined, 0);
    assert_int_equal(kiln_cubin_undefined(cubin, len, "calloc", &undefined, &err), 0);
    assert_int_equal(undefined, 0);
    free(cubin);
    compile(globals_src, &cubin, &len);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kiln_cubin_undefined(cubin, len, names[i], &undefined, &err), 0);
        assert_int_equal(undefined, 0);
    }
    free(cubin);
}

/* Not an ELF, a cut cubin and a cubin with bits flipped: an error or an answer, never a crash.
 * Each cut copy is a buffer of exactly its length, so a missing bounds check reads past it. */
static void test_bad_bytes(void **state) {
    (void)state;
    kiln_cubin_usage u;
    kiln_err err;
    assert_int_equal(kiln_cubin_usage_of("hello", 5, "k", &u, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not a cubin"));
    assert_int_equal(kiln_cubin_usage_of(NULL, 0, "k", &u, &err), KILN_ERR_FORMAT);
    if (!have_nvrtc())
        skip();
    char *cubin;
    size_t len;
    compile(small_src, &cubin, &len);
    kiln_cubin_usage whole;
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "kiln_small", &whole, &err), 0);
    int n_refused = 0;
    for (size_t cut = 1; cut < len; cut += len / 97 + 1) {
        unsigned char *part = xmalloc(cut);
        memcpy(part, cubin, cut);
        /* the sections that matter may all lie before the cut: then the answer is the same */
        int undefined;
        (void)kiln_cubin_undefined(part, cut, "malloc", &undefined, &err); /* never a crash */
        if (kiln_cubin_usage_of(part, cut, "kiln_small", &u, &err) == 0) {
            assert_int_equal(u.regs, whole.regs);
            assert_int_equal(u.frame_bytes, whole.frame_bytes);
        } else {
            n_refused++;
        }
        free(part);
    }
    assert_true(n_refused > 0);
    unsigned char *copy = xmalloc(len);
    uint64_t rng = 12345;
    for (int t = 0; t < 2000; t++) {
        memcpy(copy, cubin, len);
        for (int f = 0; f < 4; f++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            copy[(rng >> 33) % len] ^= (unsigned char)(1u << ((rng >> 20) & 7));
        }
        if (kiln_cubin_usage_of(copy, len, "kiln_small", &u, &err) == 0)
            assert_true(u.regs >= 0 && u.regs <= 255);
        int undefined;
        (void)kiln_cubin_undefined(copy, len, "malloc", &undefined, &err);
    }
    free(copy);
    free(cubin);
}

/* The entry point of a generated source: the name on its `// kiln: launch NAME` line. */
static char *entry_name(const char *src) {
    const char *l = strstr(src, "// kiln: launch ");
    assert_non_null(l);
    l += strlen("// kiln: launch ");
    return xstrndup(l, strcspn(l, " \n"));
}

static void test_start_points(void **state) {
    (void)state;
    static const char *const rows[] = {
        "softmax_bf16_chain_1x8x4096x4096",
        "softmax_f32_16x262144",
        "softmax_f32_8192x256",
        "softmax_f32_gemma4_attn_1x8x4096x4096",
        "softmax_f32_qwen_router_2048x256",
        "groupnorm_f32_512x256x256",
        "rmsnorm_gemma4_bf16_s4096_h2304",
        "batchnorm_relu_f32_32x256x56x56",
        "layernorm_bf16_8192x1024",
        "eltwise_gelu_tanh_mul_gemma4_bf16",
        "pool_global_cl_bf16",
    };
    const int nvrtc = kiln_cuda_have_nvrtc();
    int n_rule = 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/bench/problems/%s", KILN_SOURCE_DIR, rows[r]);
        kiln_problem *p;
        kiln_err err;
        if (kiln_problem_load(dir, &p, &err))
            fail_msg("%s: %s", rows[r], err.msg);
        const kiln_family *fams[8];
        kiln_match ms[8];
        char why[4096];
        int n = kiln_family_match_all(p, fams, ms, 8, why, sizeof why);
        if (n < 1)
            fail_msg("%s: no family matches: %s", rows[r], why);
        for (int i = 0; i < n; i++) {
            int from_rule = 0;
            int64_t index = kiln_family_start_index(fams[i], p, &ms[i], INT64_MAX, &from_rule);
            assert_true(index >= 0);
            int64_t pt[KILN_FAMILY_MAX_PARAMS];
            kiln_family_point(fams[i], index, pt);
            assert_int_equal(kiln_family_point_index(fams[i], pt), index);
            assert_true(kiln_family_point_ok(fams[i], p, &ms[i], pt));
            assert_int_equal(from_rule, fams[i]->start != NULL);
            const int softmax = strcmp(fams[i]->name, "softmax") == 0;
            n_rule += from_rule && softmax;
            if (!nvrtc)
                continue;
            char *src = fams[i]->emit(p, &ms[i], pt, 1), *cubin, *name = entry_name(src);
            size_t len;
            compile(src, &cubin, &len);
            kiln_cubin_usage u;
            /* the entry point calls the template's kernel body: the kernel is the launch name */
            assert_int_equal(kiln_cubin_usage_of(cubin, len, name, &u, &err), 0);
            char *ps = kiln_family_point_str(fams[i], pt);
            printf("    %s: %s: %d registers, %lld bytes of stack\n", rows[r], ps, u.regs,
                   (long long)u.frame_bytes);
            if ((softmax && u.regs > 64) || u.frame_bytes != 0)
                fail_msg("%s start point %s: %d registers, %lld bytes of stack", rows[r], ps,
                         u.regs, (long long)u.frame_bytes);
            /* no global variables: the gate reloads a module that has some before every run */
            uint64_t globals = 1;
            assert_int_equal(kiln_cubin_global_bytes(cubin, len, &globals, &err), 0);
            if (globals)
                fail_msg("%s start point %s: %llu bytes of global variables", rows[r], ps,
                         (unsigned long long)globals);
            /* nor the device heap, which the cuda backend refuses */
            int heap = 0;
            assert_int_equal(kiln_cubin_undefined(cubin, len, "malloc", &heap, &err), 0);
            if (heap)
                fail_msg("%s start point %s calls the device heap's malloc", rows[r], ps);
            free(ps);
            free(name);
            free(cubin);
            free(src);
        }
        kiln_problem_free(p);
    }
    assert_int_equal(n_rule, 5);
    if (!nvrtc)
        skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registers_and_frames), cmocka_unit_test(test_global_variables),
        cmocka_unit_test(test_undefined_functions),  cmocka_unit_test(test_bad_bytes),
        cmocka_unit_test(test_start_points),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
