/* rmsnorm_h4096.c: CPU kernel for SOL-ExecBench's rmsnorm_h4096: y = x * rsqrt(mean(x^2) + 1e-5) * w in
 * fp32, bf16 in and out, one row per OpenMP iteration. */
// kiln: launch rmsnorm
void rmsnorm(const kiln_bf16 *hidden_states, const kiln_bf16 *weight, kiln_bf16 *output,
             int64_t batch_size, int64_t hidden_size) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < batch_size; r++) {
        const kiln_bf16 *x = hidden_states + r * hidden_size;
        kiln_bf16 *y = output + r * hidden_size;
        float ss = 0.0f;
        for (int64_t i = 0; i < hidden_size; i++) {
            float v = kiln_bf16_to_float(x[i]);
            ss += v * v;
        }
        float inv = 1.0f / sqrtf(ss / (float)hidden_size + 1e-5f);
        for (int64_t i = 0; i < hidden_size; i++)
            y[i] = kiln_float_to_bf16(kiln_bf16_to_float(x[i]) * inv * kiln_bf16_to_float(weight[i]));
    }
}
