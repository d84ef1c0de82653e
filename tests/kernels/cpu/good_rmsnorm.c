/* good_rmsnorm.c: a correct CPU RMSNorm for tests/data/problems/rmsnorm_bf16 (hidden size 64, eps
 * 1e-5).
 *
 * y = x * rsqrt(mean(x^2) + eps) * weight, computed in float32 like the reference and rounded to
 * bfloat16 once at the end. Parameters follow abi.md: inputs (hidden_states, weight), the output,
 * then both axes (batch_size, hidden_size) even though hidden_size is a constant.
 *
 * Expected outcome: ok. */

// kiln: launch rmsnorm_rows

void rmsnorm_rows(const kiln_bf16 *hidden_states, const kiln_bf16 *weight, kiln_bf16 *output,
                  int64_t batch_size, int64_t hidden_size) {
    const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch_size; b++) {
        const kiln_bf16 *xr = hidden_states + b * hidden_size;
        kiln_bf16 *yr = output + b * hidden_size;
        float sum_sq = 0.0f;
        for (int64_t h = 0; h < hidden_size; h++) {
            float v = kiln_bf16_to_float(xr[h]);
            sum_sq += v * v;
        }
        float inv_rms = 1.0f / sqrtf(sum_sq / (float)hidden_size + eps);
        for (int64_t h = 0; h < hidden_size; h++)
            yr[h] = kiln_float_to_bf16(kiln_bf16_to_float(xr[h]) * inv_rms *
                                       kiln_bf16_to_float(weight[h]));
    }
}
