/* nan.cu: a correct softmax that stores a quiet NaN into one element, flat index (rows * cols) / 2,
 * for tests/data/problems/softmax_f32. A quiet NaN is not the gate's poison (a signalling NaN), so
 * the element counts as written; it is a NaN where the reference has none.
 *
 * Expected outcome: nan on workload 0, index == 0, value "nan". */

// kiln: launch softmax_rows grid=rows block=256

static __device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    __shared__ float red[8];
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float m = -__int_as_float(0x7f800000);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    m = warp_max(m);
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = warp_max(lane < 8 ? red[lane] : -__int_as_float(0x7f800000));
    __syncthreads();

    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    s = warp_sum(s);
    if (lane == 0)
        red[warp] = s;
    __syncthreads();
    s = warp_sum(lane < 8 ? red[lane] : 0.0f);

    const int64_t poisoned = (rows * cols) / 2;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = row * cols + c == poisoned ? __int_as_float(0x7fc00000) : expf(xr[c] - m) / s;
}
