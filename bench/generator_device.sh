#!/usr/bin/env bash
# generator_device.sh: issue 15's table in one device call — the generator (`gen`) and the hand-written
# families in one sweep per row, against PyTorch eager, both torch.compile modes, the speed of light and a
# plain copy of the same bytes (bench/families_device.sh does the timing, bench/families_table.py the table).
#
#   OUT=/tmp/out bash bench/generator_device.sh [EXTRA_PROBLEM_DIR...]
#
# Rows: the eleven hand-family rows of bench/problems the issue measured; the issue's own rows and its three
# chains from tests/data/gen/rows (softmax over axis 1, RMSNorm over channels, max_pool2d, the Gemma-4 mask ->
# softmax chain, the VAE's add + GroupNorm + SiLU, Qwen-3.5's gated RMSNorm, then the two 4 GiB rows, last:
# writing their reference data takes most of their time); and any problem directory given.
# ROWS=hand|gen|all (default all) picks the sets; LIMIT (points per family, default 10), MODES, SWEEP_TIMEOUT (s
# per row, default 150) and TORCH_FIRST (default 1: PyTorch's times first, so a call cut short keeps them) go to
# families_device.sh, as do SEARCH=N and SEARCH_TIME (`kiln optimize` at N candidates a problem in place of the
# sampled sweeps: what a user's search finds). At the end, $OUT/table.md and a geomean line: kiln over the speed
# of light, and on how many rows kiln beats the better compile mode.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-generator}
HAND=(softmax_bf16_chain_1x8x4096x4096 softmax_f32_16x262144 groupnorm_f32_512x256x256
      groupnorm_f32_128x1024x1024 pool_global_nchw_f32 rmsnorm_gemma4_bf16_s4096_h2304 layernorm_bf16_8192x1024
      groupnorm_silu_bf16_512x256x256 batchnorm_relu_f32_32x256x56x56 softmax_f32_gemma4_attn_1x8x4096x4096
      rmsnorm_qwen3_5_moe_bf16_s2048_h2048)
GEN=(gen_softmax_dim1_f32_64x32x56x56 gen_rmsnorm_channels_bf16_32x256x128x128 gen_max_pool2d_f32_32x64x112x112
     gen_gemma4_mask_softmax_bf16_1x8x4096x4096 gen_vae_chain_bf16_1x512x256x256
     gen_rmsnorm_gated_qwen3_5_bf16_65536x128 gen_sum_dim1_f32_64x8192x2048 gen_log_softmax_f32_8192x131072)
dirs=()
case "${ROWS:-all}" in
  hand | all) for r in "${HAND[@]}"; do dirs+=("bench/problems/$r/"); done ;;&
  gen | all) for r in "${GEN[@]}"; do dirs+=("tests/data/gen/rows/$r/"); done ;;
  hand) ;;
  *) echo "ROWS must be hand, gen or all"; exit 2 ;;
esac
dirs+=("$@")
mkdir -p "$OUT"
LIMIT=${LIMIT:-10} SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-150} TORCH_FIRST=${TORCH_FIRST:-1} TABLE_OPTS=--summary OUT="$OUT" \
    bash bench/families_device.sh "${dirs[@]}"
