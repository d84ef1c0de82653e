/* tma_copy.h: a CUDA candidate that takes a tensor map (docs/abi.md section 2), for the tests that
 * launch one: each block copies an 8 x 32 box of x (float32 [rows, cols], cols a multiple of 32)
 * into shared memory with TMA and writes it to y (rows past the end are the unit's zero fill, not
 * written). tma_copy_source writes it with the map's parameter, or without it (a kernel that does
 * not take the map its tensormap line asks for). */
#ifndef KILN_TEST_TMA_COPY_H
#define KILN_TEST_TMA_COPY_H

#include <stdio.h>
#include <string.h>

static inline void tma_copy_source(char *out, size_t cap, int with_map) {
    static const char body[] =
        "struct __align__(64) kiln_tensormap { unsigned long long bits[16]; };\n"
        "extern \"C\" __global__ void tma_copy(const float *x, float *y, int64_t rows, int64_t "
        "cols%s) {\n"
        "    __shared__ __align__(128) float box[8][32];\n"
        "    __shared__ __align__(8) uint64_t bar;\n"
        "    const uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar);\n"
        "    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(box);\n"
        "    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 8;\n"
        "    if (threadIdx.x == 0 && threadIdx.y == 0) {\n"
        "        asm volatile(\"mbarrier.init.shared::cta.b64 [%%0], 1;\" ::\"r\"(b));\n"
        "        asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
        "    }\n"
        "    __syncthreads();\n"
        "    if (threadIdx.x == 0 && threadIdx.y == 0) {\n"
        "        asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], 1024;\" "
        "::\"r\"(b) : \"memory\");\n"
        "        asm "
        "volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%%0], [%%1, {%%2, %%3}], [%%4];\" ::\"r\"(dst), \"l\"(%s), \"r\"(c0), \"r\"(r0), "
        "\"r\"(b) : \"memory\");\n"
        "    }\n"
        "    uint32_t done = 0;\n"
        "    while (!done)\n"
        "        asm volatile(\"{.reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%%1], "
        "0;"
        " selp.u32 %%0, 1, 0, p;}\" : \"=r\"(done) : \"r\"(b) : \"memory\");\n"
        "    const int r = r0 + threadIdx.y, c = c0 + threadIdx.x;\n"
        "    if (r < rows) y[r * cols + c] = box[threadIdx.y][threadIdx.x];\n"
        "}\n";
    snprintf(out, cap,
             "// kiln: launch tma_copy grid=(cols/32, ceil_div(rows, 8)) block=(32, 8)\n"
             "// kiln: tensormap x dims=(cols,rows) strides=(cols) box=(32,8)\n");
    size_t len = strlen(out);
    snprintf(out + len, cap - len, body,
             with_map ? ", const __grid_constant__ kiln_tensormap x_map" : "",
             with_map ? "&x_map" : "x");
}

#endif
