#!/usr/bin/env bash
# gate_device.sh: the gate service and the cuda paths on the H200, in one device call (see bench/RESULTS.md):
#   1. the C tests that need a GPU, for real: the cuda backend (driver, NVRTC, guarded and read-only memory),
#      the gate's device check against the host's on every dtype, the library writer, the cubin reader;
#   2. pytest: every failure class through `kiln eval --backend cuda` and the big bf16 softmax timed twice
#      (test_gate_cuda.py); the hostile corpus through one gate session (test_hostile.py); the install path
#      into PyTorch (test_install.py, its cuda tests: libkiln_rt's driver path);
#   3. the bundled example and SOL-ExecBench's published rmsnorm_h4096 as published;
# then a short table. Expects the build made on the development machine in build/ (or .devbuild/, copied
# into build/ first) and, for (3), the published problem copied to .carry/solbench/rmsnorm_h4096. Logs go
# to $OUT (default /tmp/kiln-bench).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-bench}
mkdir -p "$OUT"
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONUNBUFFERED=1
[ -d .devbuild ] && mkdir -p build && cp -a .devbuild/. build/
summary="$OUT/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/nvidia-smi.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
note "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(date -u +%F)"
build/kiln --version || { echo "build/kiln missing: carry build/ or .devbuild/"; exit 1; }

echo "== 1. C tests on the GPU"
for t in ${CTESTS:-test_backend_cuda test_gate_device test_library test_cubin}; do
    if [ -x "build/tests/$t" ]; then
        timeout 300 "build/tests/$t" >"$OUT/$t.log" 2>&1
        note "$t: exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$OUT/$t.log" | tr '\n' ' ')"
    else
        note "$t: not carried"
    fi
done

echo "== 2. pytest on the GPU"
for f in ${PYTESTS:-test_gate_cuda test_hostile test_install}; do
    sel=""
    [ "$f" = test_install ] && sel="-k cuda"
    timeout "${PYTEST_TIMEOUT:-420}" "$KILN_PYTHON" -m pytest "tests/py/$f.py" $sel -q -rs -s -p no:cacheprovider \
        >"$OUT/$f.log" 2>&1
    note "$f: exit $? $(grep -E 'passed|failed' "$OUT/$f.log" | tail -1)"
done

echo "== 3. the bundled example and SOL-ExecBench rmsnorm_h4096 as published"
build/kiln eval examples/softmax_bf16 examples/softmax_bf16/softmax.cu --backend cuda --json \
    >"$OUT/example_softmax.json" 2>"$OUT/example_softmax.err"
if [ -d .carry/solbench/rmsnorm_h4096 ]; then
    build/kiln eval .carry/solbench/rmsnorm_h4096 examples/rmsnorm/rmsnorm_h4096.cu --backend cuda --json \
        --ref-dir /tmp/kiln-ref-rmsnorm >"$OUT/solbench_rmsnorm.json" 2>"$OUT/solbench_rmsnorm.err"
else
    note "solbench rmsnorm_h4096: not carried (.carry/solbench missing)"
fi

echo "== summary"
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log 2>/dev/null) 2>/dev/null
"$KILN_PYTHON" - "$OUT" <<'PYEOF' | tee -a "$summary"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("example_softmax.json", "solbench_rmsnorm.json"):
    p = out / name
    if not p.exists() or not p.stat().st_size:
        continue
    r = json.loads(p.read_text())
    s = r.get("summary") or {}
    print(f"{r['problem']}: {r['outcome']}, {len(r['workloads'])} workloads, geomean "
          f"{s.get('time_us_geomean') or 0:.2f} us, SOL {s.get('sol_pct_geomean') or 0:.1f}%, "
          f"S {s.get('sol_score_geomean') or 0:.3f}, wall {r.get('wall_s', 0):.2f} s, phases {r.get('phase_s')}")
    d = r.get("device") or {}
    print(f"  ceilings: {d.get('ceiling_gbps', 0):.0f} GB/s copy, {d.get('ceiling_gflops', 0):.0f} GFLOP/s fp32")
hostile = out / "test_hostile.log"
if hostile.exists():
    lines = [l for l in hostile.read_text().splitlines() if l.split(":")[0].endswith(".cu")]
    print(f"hostile cuda kernels with a verdict: {len(lines)}")
    for l in lines:
        print("  " + l[:150])
PYEOF
