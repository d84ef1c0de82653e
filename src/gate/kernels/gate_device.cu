/* gate_device.cu: the gate's own device kernels — output poisoning, reference masking, the
 * element-by-element check of a candidate's output and the input-unchanged check — so that a proof
 * never moves an output to the host: only a summary of a few numbers crosses.
 *
 * Compiled once per gate process with NVRTC (and kept in the cubin cache), never shown to a
 * candidate. Semantics are those of kiln_check_output (src/gate/prove.c); tests/c/test_gate_device.c
 * checks the two agree on the device.
 *
 * Masking: the reference outputs the gate keeps on the device are stored XOR a keystream of a
 * per-process secret key, so that a candidate that finds them in device memory cannot use them; the
 * check kernel unmasks each element as it reads it. Poison: outputs are filled before every run with
 * a pattern drawn afresh; an element is unwritten when it still holds that pattern and the
 * reference does not (where the reference holds the pattern itself, the element is right either
 * way). */

typedef unsigned long long u64;
typedef long long i64;

/* dtype codes: the order of kiln_dtype (src/formats/dtype.h) */
enum {
    DT_F64,
    DT_F32,
    DT_F16,
    DT_BF16,
    DT_F8_E4M3,
    DT_F8_E5M2,
    DT_F4_E2M1,
    DT_F4_E2M1X2,
    DT_I64,
    DT_I32,
    DT_I16,
    DT_I8,
    DT_U8,
    DT_BOOL
};

/* The summary one check leaves; the host reads it after the run (src/gate/device.c mirrors it). */
struct kiln_check_sum {
    u64 n_unwritten, first_unwritten;
    u64 n_nonfinite, first_nonfinite; /* non-finite where the reference differs */
    u64 n_bad, first_bad;             /* outside atol + rtol |ref| (or finite vs non-finite) */
    u64 n_matched;                    /* within atol + rtol |ref|, non-finite pairs that agree */
    u64 n_over_cap, first_over_cap;   /* |out - ref| over the cap (SOL-ExecBench max_error_cap) */
    u64 max_abs_bits;                 /* the bits of the largest |out - ref| (a double >= 0) */
    double sum_sq_err, sum_sq_ref;
};

static __device__ __forceinline__ u64 keystream(u64 key, u64 i) {
    u64 z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static __device__ __forceinline__ int elem_size(int dt) {
    switch (dt) {
    case DT_F64:
    case DT_I64:
        return 8;
    case DT_F32:
    case DT_I32:
        return 4;
    case DT_F16:
    case DT_BF16:
    case DT_I16:
        return 2;
    default:
        return 1;
    }
}

static __device__ __forceinline__ u64 load_bits(const void *p, u64 i, int size) {
    switch (size) {
    case 8:
        return ((const u64 *)p)[i];
    case 4:
        return ((const unsigned int *)p)[i];
    case 2:
        return ((const unsigned short *)p)[i];
    default:
        return ((const unsigned char *)p)[i];
    }
}

/* A small IEEE-like float of 1 + exp_bits + man_bits bits; fn: no infinities, only all ones is NaN
 * (float8_e4m3fn). */
static __device__ double small_float(unsigned int b, int exp_bits, int man_bits, int bias, bool fn) {
    const unsigned int sign = (b >> (exp_bits + man_bits)) & 1u,
                       e = (b >> man_bits) & ((1u << exp_bits) - 1), m = b & ((1u << man_bits) - 1);
    const unsigned int e_max = (1u << exp_bits) - 1, m_max = (1u << man_bits) - 1;
    const double inf = __longlong_as_double(0x7ff0000000000000ll);
    double v;
    if (fn && e == e_max && m == m_max)
        return __longlong_as_double(0x7ff8000000000000ll);
    if (!fn && e == e_max)
        return m ? __longlong_as_double(0x7ff8000000000000ll) : (sign ? -inf : inf);
    if (e == 0)
        v = ldexp((double)m, 1 - bias - man_bits);
    else
        v = ldexp((double)(m | (1u << man_bits)), (int)e - bias - man_bits);
    return sign ? -v : v;
}

static __device__ double decode(u64 bits, int dt) {
    switch (dt) {
    case DT_F64:
        return __longlong_as_double((i64)bits);
    case DT_F32:
        return (double)__uint_as_float((unsigned int)bits);
    case DT_F16:
        return small_float((unsigned int)bits, 5, 10, 15, false);
    case DT_BF16:
        return (double)__uint_as_float((unsigned int)bits << 16);
    case DT_F8_E4M3:
        return small_float((unsigned int)bits, 4, 3, 7, true);
    case DT_F8_E5M2:
        return small_float((unsigned int)bits, 5, 2, 15, false);
    case DT_I64:
        return (double)(i64)bits;
    case DT_I32:
        return (double)(int)(unsigned int)bits;
    case DT_I16:
        return (double)(short)(unsigned short)bits;
    case DT_I8:
        return (double)(signed char)(unsigned char)bits;
    case DT_BOOL:
        return bits ? 1.0 : 0.0;
    default: /* DT_U8, and float4 codes, which are compared as their bits */
        return (double)(unsigned char)bits;
    }
}

static __device__ __forceinline__ bool is_float(int dt) {
    return dt <= DT_F8_E5M2;
}

/* Fills n elements of size elem_bytes at p with pattern. */
extern "C" __global__ void kiln_gate_fill(void *p, u64 n, int elem_bytes, u64 pattern) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        switch (elem_bytes) {
        case 8:
            ((u64 *)p)[i] = pattern;
            break;
        case 4:
            ((unsigned int *)p)[i] = (unsigned int)pattern;
            break;
        case 2:
            ((unsigned short *)p)[i] = (unsigned short)pattern;
            break;
        default:
            ((unsigned char *)p)[i] = (unsigned char)pattern;
        }
    }
}

/* XORs n elements at p with the keystream of key: masks a reference in place (and unmasks it). */
extern "C" __global__ void kiln_gate_mask(void *p, u64 n, int elem_bytes, u64 key) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 k = keystream(key, i);
        switch (elem_bytes) {
        case 8:
            ((u64 *)p)[i] ^= k;
            break;
        case 4:
            ((unsigned int *)p)[i] ^= (unsigned int)k;
            break;
        case 2:
            ((unsigned short *)p)[i] ^= (unsigned short)k;
            break;
        default:
            ((unsigned char *)p)[i] ^= (unsigned char)k;
        }
    }
}

#define CHECK_THREADS 256

static __device__ __forceinline__ u64 warp_sum_u64(u64 v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ u64 warp_min_u64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) {
        const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w < v ? w : v;
    }
    return v;
}

static __device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double warp_max_f64(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Checks n elements of out against the masked reference ref (unmasked with key; key 0: not
 * masked), poison being the pattern out was filled with before the run. sol != 0 counts matches
 * for SOL-ExecBench's required_matched_ratio and cap > 0 counts errors over max_error_cap. The sums
 * accumulate into *sum, which the host zeroes (first_* to all ones) before the launch. */
extern "C" __global__ void __launch_bounds__(CHECK_THREADS)
    kiln_gate_check(const void *out, const void *ref, u64 n, int dt, u64 poison, u64 key,
                    double atol, double rtol, double cap, kiln_check_sum *sum) {
    const int size = elem_size(dt);
    const u64 mask = size == 8 ? ~0ull : ((1ull << (8 * size)) - 1);
    u64 n_unw = 0, f_unw = ~0ull, n_nf = 0, f_nf = ~0ull, n_bad = 0, f_bad = ~0ull, n_ok = 0;
    u64 n_cap = 0, f_cap = ~0ull;
    double max_abs = 0.0, sq_err = 0.0, sq_ref = 0.0;
    const bool fl = is_float(dt);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 ob = load_bits(out, i, size);
        const u64 rb = (load_bits(ref, i, size) ^ (key ? keystream(key, i) : 0ull)) & mask;
        if (ob == (poison & mask) && rb != (poison & mask)) {
            n_unw++;
            f_unw = i < f_unw ? i : f_unw;
            continue;
        }
        const double o = decode(ob, dt), r = decode(rb, dt);
        if (fl && (!isfinite(o) || !isfinite(r))) {
            const bool same = (isnan(o) && isnan(r)) || (isinf(o) && isinf(r) && (o > 0) == (r > 0));
            if (same) {
                n_ok++;
            } else if (!isfinite(o)) {
                n_nf++;
                f_nf = i < f_nf ? i : f_nf;
            } else {
                n_bad++;
                f_bad = i < f_bad ? i : f_bad;
                max_abs = __longlong_as_double(0x7ff0000000000000ll);
                if (cap > 0) {
                    n_cap++;
                    f_cap = i < f_cap ? i : f_cap;
                }
            }
            continue;
        }
        const double d = fabs(o - r);
        max_abs = fmax(max_abs, d);
        sq_err += d * d;
        sq_ref += r * r;
        if (d > atol + rtol * fabs(r)) {
            n_bad++;
            f_bad = i < f_bad ? i : f_bad;
        } else {
            n_ok++;
        }
        if (cap > 0 && d > cap) {
            n_cap++;
            f_cap = i < f_cap ? i : f_cap;
        }
    }
    (void)n_ok;
    __shared__ u64 su[CHECK_THREADS / 32][9];
    __shared__ double sd[CHECK_THREADS / 32][3];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 v[9] = {warp_sum_u64(n_unw), warp_min_u64(f_unw), warp_sum_u64(n_nf), warp_min_u64(f_nf),
                warp_sum_u64(n_bad), warp_min_u64(f_bad), warp_sum_u64(n_ok),  warp_sum_u64(n_cap),
                warp_min_u64(f_cap)};
    double dv[3] = {warp_max_f64(max_abs), warp_sum_f64(sq_err), warp_sum_f64(sq_ref)};
    if (lane == 0) {
        for (int k = 0; k < 9; k++)
            su[warp][k] = v[k];
        for (int k = 0; k < 3; k++)
            sd[warp][k] = dv[k];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < CHECK_THREADS / 32; w++) {
            v[0] += su[w][0];
            v[1] = su[w][1] < v[1] ? su[w][1] : v[1];
            v[2] += su[w][2];
            v[3] = su[w][3] < v[3] ? su[w][3] : v[3];
            v[4] += su[w][4];
            v[5] = su[w][5] < v[5] ? su[w][5] : v[5];
            v[6] += su[w][6];
            v[7] += su[w][7];
            v[8] = su[w][8] < v[8] ? su[w][8] : v[8];
            dv[0] = fmax(dv[0], sd[w][0]);
            dv[1] += sd[w][1];
            dv[2] += sd[w][2];
        }
        if (v[0])
            atomicAdd(&sum->n_unwritten, v[0]), atomicMin(&sum->first_unwritten, v[1]);
        if (v[2])
            atomicAdd(&sum->n_nonfinite, v[2]), atomicMin(&sum->first_nonfinite, v[3]);
        if (v[4])
            atomicAdd(&sum->n_bad, v[4]), atomicMin(&sum->first_bad, v[5]);
        atomicAdd(&sum->n_matched, v[6]);
        if (v[7])
            atomicAdd(&sum->n_over_cap, v[7]), atomicMin(&sum->first_over_cap, v[8]);
        /* non-negative doubles order like their bits */
        atomicMax(&sum->max_abs_bits, (u64)__double_as_longlong(dv[0]));
        atomicAdd(&sum->sum_sq_err, dv[1]);
        atomicAdd(&sum->sum_sq_ref, dv[2]);
    }
}

/* Counts the bytes where a and b differ (the input-unchanged check) into *n_diff. */
extern "C" __global__ void kiln_gate_diff(const unsigned char *a, const unsigned char *b, u64 n,
                                          u64 *n_diff) {
    u64 d = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        d += a[i] != b[i];
    d = warp_sum_u64(d);
    if ((threadIdx.x & 31) == 0 && d)
        atomicAdd(n_diff, d);
}
