#!/usr/bin/env bash
# gemm_examples_device.sh: issue 17's "every GEMM shape captured from the four bundled examples": each example
# captured at its real size (bench/capture_device.sh, --no-reference: the sweeps build what they need), the GEMM
# problems of each capture picked (bench/gemm_problems.py: linear, mm, matmul, bmm, addmm, _scaled_mm, and the
# gemm_epilogue / gemm_gated chains; capture already writes one problem per shape), and bench/families_device.sh
# run on them: the GEMM families' sweeps (cublaslt configurations, kiln's wgmma GEMM) next to PyTorch eager and
# torch.compile on the same problem, with the speed of light, in one table.
#
#   make && OUT=/tmp/out bash bench/gemm_examples_device.sh [CONFIG...]
#   configs (bench/capture_device.sh's): gemma4 qwen-moe vae-bf16 resnet50-bf16-cl (default), and the fp32 ones
#
# A capture takes 1-2 minutes at real size and a sweep of a big GEMM tens of seconds: one or two configs a call.
# LIMIT (points a family, default 4), MODES (default eager,max-autotune-no-cudagraphs), SWEEP_TIMEOUT,
# ONLY (an extended regex on the picked problems' names). DRY=1 lists the picked problems and stops (no GPU
# needed past the capture). Logs and the table: $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-gemm-examples}
PY=${KILN_PYTHON:-python3}
mkdir -p "$OUT"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(gemma4 qwen-moe vae-bf16 resnet50-bf16-cl)
CAPTURE_OPTS="--no-reference ${CAPTURE_OPTS:-}" OUT="$OUT/capture" bash bench/capture_device.sh "${configs[@]}" \
    >"$OUT/capture.log" 2>&1
echo "capture exit $? (summary: $OUT/capture/capture-results.md)"
picked=()
for c in "${configs[@]}"; do
    while IFS= read -r d; do
        [ -n "$d" ] && picked+=("$d")
    done < <("$PY" bench/gemm_problems.py "$OUT/capture/runs/$c" | grep -E "${ONLY:-.}")
done
echo "picked ${#picked[@]} GEMM problem(s):"
printf '  %s\n' "${picked[@]}"
[ "${DRY:-0}" = 1 ] && exit 0
[ ${#picked[@]} -eq 0 ] && { echo "FAIL no GEMM problem captured"; exit 1; }
OUT="$OUT/families" LIMIT=${LIMIT:-4} MODES=${MODES:-eager,max-autotune-no-cudagraphs} \
    bash bench/families_device.sh "${picked[@]}"
