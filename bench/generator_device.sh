#!/usr/bin/env bash
# generator_device.sh: issue 15's table in one device call — the generator (`gen`) and the hand-written
# families in one sweep per row, against PyTorch eager, both torch.compile modes, the speed of light and a
# plain copy of the same bytes (bench/families_device.sh does the timing and the table).
#
#   OUT=/tmp/out bash bench/generator_device.sh [EXTRA_PROBLEM_DIR...]
#
# Rows: the eleven hand-family rows of bench/problems the issue measured, the six generator-only rows of
# tests/data/gen/rows (the VAE's add + GroupNorm + SiLU chain among them), and any problem directory given
# (the captured chains). ROWS=hand|gen|all (default all)
# picks the sets; LIMIT (points per family, default 10), MODES and SWEEP_TIMEOUT (s per row, default 150:
# a 4 GiB row spends most of it writing reference data) go to families_device.sh. At the end, $OUT/table.md
# and a geomean line: kiln over the speed of light, and on how many rows kiln beats the better compile mode.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-generator}
HAND=(softmax_bf16_chain_1x8x4096x4096 softmax_f32_16x262144 groupnorm_f32_512x256x256
      groupnorm_f32_128x1024x1024 pool_global_nchw_f32 rmsnorm_gemma4_bf16_s4096_h2304 layernorm_bf16_8192x1024
      groupnorm_silu_bf16_512x256x256 batchnorm_relu_f32_32x256x56x56 softmax_f32_gemma4_attn_1x8x4096x4096
      rmsnorm_qwen3_5_moe_bf16_s2048_h2048)
dirs=()
case "${ROWS:-all}" in
  hand | all) for r in "${HAND[@]}"; do dirs+=("bench/problems/$r/"); done ;;&
  gen | all) dirs+=(tests/data/gen/rows/*/) ;;
  hand) ;;
  *) echo "ROWS must be hand, gen or all"; exit 2 ;;
esac
dirs+=("$@")
mkdir -p "$OUT"
LIMIT=${LIMIT:-10} SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-150} OUT="$OUT" bash bench/families_device.sh "${dirs[@]}"
"${KILN_PYTHON:-python3}" - "$OUT/table.md" <<'PYEOF'
import math, re, sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| ") and not l.startswith("| problem")]
sol, wins, n = [], 0, 0
for r in rows:
    c = [x.strip() for x in r]
    try:
        kiln, sol_us = float(c[-8]), float(c[-6])
    except ValueError:
        continue
    n += 1
    sol.append(kiln / sol_us)
    wins += c[-1].endswith("x") and float(c[-1][:-1]) > 1.0
if n:
    g = math.exp(sum(map(math.log, sol)) / n)
    print(f"rows with a kiln time: {n}/{len(rows)}; geomean kiln / speed of light {g:.2f}x; "
          f"faster than the better torch.compile mode on {wins}/{n}")
PYEOF
