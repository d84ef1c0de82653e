#!/usr/bin/env bash
# causal_softmax_device.sh: the causal-mask softmax chain of bench/causal_softmax.py (Gemma-4's full-attention
# layer: int64 positions -> le -> where -> add to the scores -> softmax fp32 -> bf16) captured at [1, 8, 4096,
# 4096] on the GPU and swept by bench/families_device.sh: eager, both torch.compile modes, kiln's best point,
# speed of light and a copy of the same bytes, in $OUT/table.md.
#
#   OUT=/tmp/out LIMIT=24 bash bench/causal_softmax_device.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-causal}
mkdir -p "$OUT"
export KILN_PYTHON=${KILN_PYTHON:-python3} PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
rm -rf "$OUT/run"
"$KILN_PYTHON" -m kiln.capture bench/causal_softmax.py --out "$OUT/run" --device cuda --quiet >"$OUT/capture.log" 2>&1 ||
  { tail -20 "$OUT/capture.log"; exit 1; }
chain=$(ls -d "$OUT"/run/problems/chain_*le_where*softmax* 2>/dev/null | head -1)
[ -n "$chain" ] || { echo "no causal softmax chain captured:"; ls "$OUT/run/problems"; exit 1; }
LIMIT=${LIMIT:-24} OUT="$OUT" bash bench/families_device.sh "$chain"
