#!/usr/bin/env bash
# gate_device.sh: the foundation's device run, in one call on the GPU machine (see bench/RESULTS.md):
#   1. the cuda backend's C tests, for real;
#   2. every failure class through `kiln eval --backend cuda` (tests/py/test_gate_cuda.py), the gate alive
#      after each, and the [1,8,4096,4096] bf16 softmax proven and timed twice (spread between runs);
#   3. the bundled example and SOL-ExecBench's published rmsnorm_h4096, unmodified;
#   4. PyTorch eager and torch.compile on the same softmax and rmsnorm shapes, in the same run;
# then a short table. Expects build/ made on the development machine (carried) and, for (3), the published
# problem directory copied to .carry/solbench/rmsnorm_h4096. Logs go to $OUT (default /tmp/kiln-bench).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-bench}
mkdir -p "$OUT"
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONUNBUFFERED=1
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/nvidia-smi.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
note "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(date -u +%F)"
build/kiln --version || { echo "build/kiln missing: carry build/"; exit 1; }

echo "== 1. cuda backend C tests"
build/tests/test_backend_cuda >"$OUT/test_backend_cuda.log" 2>&1
note "test_backend_cuda: $(grep -E 'PASSED|FAILED|SKIPPED' "$OUT/test_backend_cuda.log" | tr '\n' ' ')"

echo "== 2. failure classes and the big softmax (pytest)"
"$KILN_PYTHON" -m pytest tests/py/test_gate_cuda.py -q -rs -s >"$OUT/test_gate_cuda.log" 2>&1
note "test_gate_cuda: $(tail -1 "$OUT/test_gate_cuda.log")"

echo "== 3. the bundled example and SOL-ExecBench rmsnorm_h4096 as published"
build/kiln eval examples/softmax_bf16 examples/softmax_bf16/softmax.cu --backend cuda \
    >"$OUT/example_softmax.txt" 2>&1
cat "$OUT/example_softmax.txt"
build/kiln eval examples/softmax_bf16 examples/softmax_bf16/softmax.cu --backend cuda --json \
    >"$OUT/example_softmax_2.json" 2>"$OUT/example_softmax_2.err"
if [ -d .carry/solbench/rmsnorm_h4096 ]; then
    build/kiln eval .carry/solbench/rmsnorm_h4096 examples/rmsnorm/rmsnorm_h4096.cu --backend cuda \
        --ref-dir /tmp/kiln-ref-rmsnorm >"$OUT/solbench_rmsnorm.txt" 2>&1
    cat "$OUT/solbench_rmsnorm.txt"
    note "solbench rmsnorm_h4096: $(grep -E '^outcome|^geomean' "$OUT/solbench_rmsnorm.txt" | tr '\n' ' ')"
else
    note "solbench rmsnorm_h4096: not carried (.carry/solbench missing)"
fi

echo "== 4. PyTorch on the same shapes"
"$KILN_PYTHON" bench/torch_baseline.py softmax_bf16 --rows 32768 >"$OUT/torch_softmax.jsonl" \
    2>"$OUT/torch_softmax.err"
"$KILN_PYTHON" bench/torch_baseline.py rmsnorm_bf16 --rows 14509 >"$OUT/torch_rmsnorm.jsonl" \
    2>"$OUT/torch_rmsnorm.err"

echo "== summary"
"$KILN_PYTHON" - "$OUT" <<'PYEOF' | tee -a "$summary"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def rows(name):
    p = out / name
    return [json.loads(l) for l in p.read_text().splitlines() if l.startswith("{")] if p.exists() else []
ex = out / "example_softmax_2.json"
if ex.exists() and ex.stat().st_size:
    r = json.loads(ex.read_text())
    for w in r["workloads"]:
        t = w.get("time_us") or {}
        print(f"kiln softmax bf16 rows={w['axes']['rows']}: {t.get('median', 0):.1f} us "
              f"(spread {t.get('spread_pct', 0):.1f}%), {w.get('gbps', 0):.0f} GB/s, "
              f"SOL {w.get('sol_pct', 0):.1f}%, S {w.get('sol_score') or 0:.3f}, torch-ref {w.get('ref_time_us') or 0:.1f} us")
    d = r.get("device") or {}
    print(f"ceilings: {d.get('ceiling_gbps', 0):.0f} GB/s copy, {d.get('ceiling_gflops', 0):.0f} GFLOP/s fp32")
for name in ("torch_softmax.jsonl", "torch_rmsnorm.jsonl"):
    for r in rows(name):
        print(f"torch {r['case']} [{r['rows']},{r['cols']}] {r['mode']}: {r['median_us']} us, {r['gbps']} GB/s")
PYEOF
