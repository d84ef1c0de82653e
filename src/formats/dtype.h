/* dtype.h: the element types of problems and safetensors files, their sizes, names and conversions.
 */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KILN_F64,
    KILN_F32,
    KILN_F16,
    KILN_BF16,
    KILN_F8_E4M3,   /* float8_e4m3fn */
    KILN_F8_E5M2,   /* float8_e5m2 */
    KILN_F4_E2M1,   /* float4_e2m1 (one per byte in kiln's buffers) */
    KILN_F4_E2M1X2, /* float4_e2m1fn_x2 (two per byte) */
    KILN_I64,
    KILN_I32,
    KILN_I16,
    KILN_I8,
    KILN_U8,
    KILN_BOOL,
    KILN_DTYPE_COUNT
} kiln_dtype;

/* Bytes per stored element. */
size_t kiln_dtype_size(kiln_dtype t);
/* The SOL-ExecBench name ("bfloat16", "float32", ...). */
const char *kiln_dtype_name(kiln_dtype t);
/* The safetensors name ("BF16", "F32", ...); NULL for float4_e2m1 (one per byte), which
 * safetensors cannot name. float4_e2m1fn_x2 is "F4", whose shapes count 4-bit values (safetensors.c
 * converts). */
const char *kiln_dtype_st_name(kiln_dtype t);
/* Parses a SOL-ExecBench dtype name; returns 0 on success, -1 if unknown. */
int kiln_dtype_parse(const char *name, kiln_dtype *out);
/* Parses a PyTorch dtype as a reference or capture spells it: "torch.bfloat16", "bfloat16", and
 * PyTorch's aliases ("torch.float", "torch.half", "torch.double", "torch.long", "torch.int",
 * "torch.short"); returns 0 on success, -1 for a type kiln does not have (complex, float8_e4m3fnuz,
 * layouts, memory formats...). */
int kiln_dtype_parse_torch(const char *name, kiln_dtype *out);
/* Parses a safetensors dtype name; returns 0 on success, -1 if unknown. */
int kiln_dtype_parse_st(const char *name, kiln_dtype *out);
/* 1 for floating-point types (NaN/Inf are possible), 0 for integers and bool. */
int kiln_dtype_is_float(kiln_dtype t);
/* 1 for the 8-bit floats (float8_e4m3fn, float8_e5m2). */
int kiln_dtype_is_fp8(kiln_dtype t);
/* The C type a candidate uses for a scalar of this type ("float", "int64_t", ...), for the ABI. */
const char *kiln_dtype_c_type(kiln_dtype t);

/* How a kernel spells one element of a tensor of some dtype. */
typedef struct {
    const char *type;       /* "__nv_bfloat16" (CUDA), "kiln_bf16" (cpu, kiln_cpu.h), "float" ... */
    const char *to_float;   /* the function widening an element to float; "" where C converts it;
                               NULL for the 8- and 4-bit floats (raw bytes: no conversion), but
                               the cpu backend's fp8 (kiln_cpu.h's kiln_e4m3_to_float ...) */
    const char *from_float; /* the function rounding a float to an element; "" or NULL (every
                               8- and 4-bit float) */
} kiln_kernel_type;

/* The element type of t in a kernel: CUDA's names when cuda, else the cpu backend's. The one map
 * from dtypes to kernel types: the ABI's parameter lists and every emitter use it. */
kiln_kernel_type kiln_dtype_kernel_type(kiln_dtype t, int cuda);

/* Element i of a buffer, widened to double (exact for everything but int64 beyond 2^53).
 * float4_e2m1fn_x2 holds two values per byte: there i counts values, low nibble first. */
double kiln_dtype_load(kiln_dtype t, const void *base, size_t i);
/* Stores v (rounded to nearest even) as element i. Overflow: Inf where the type has it (float16,
 * bfloat16, e5m2), else the largest finite value (e4m3fn, e2m1); integers saturate, NaN stores 0.
 */
void kiln_dtype_store(kiln_dtype t, void *base, size_t i, double v);

float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f); /* round to nearest even, NaN stays NaN */
float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f); /* round to nearest even, overflow to Inf */

#endif
