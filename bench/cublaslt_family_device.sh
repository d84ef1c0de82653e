#!/usr/bin/env bash
# cublaslt_family_device.sh: the cublaslt family on the device, in one call: the C tests that need a
# GPU for it (an index settled on the device, a settled call replayed, the cuda backend, the library
# and runtime tables), then `kiln sweep --backend cuda --family cublaslt` on Gemma-4's MLP gate/up
# projection (bf16 4096×9216×2304, bench/problems/gemm_linear_bf16_4096x9216x2304): every swept
# configuration proved and timed by the gate like any kernel, the start point (index 0, the
# heuristic's first answer) beside the best.
#
#   make && OUT=/tmp/out bash bench/cublaslt_family_device.sh
#
# LIMIT (points swept, default 48), SWEEP_TIMEOUT (s, default 420). KILN_CUBLASLT defaults to the copy
# in torch's wheel, as in gemm_device.sh. Logs: $OUT/logs.tar.gz; the summary is printed last.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export KILN_PYTHON=${KILN_PYTHON:-python3}
if [ -z "${KILN_CUBLASLT:-}" ]; then
    KILN_CUBLASLT=$("$KILN_PYTHON" -c 'import glob, site; c = sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/cu1*/lib/libcublasLt.so.1*")); print(c[-1] if c else "")' 2>/dev/null)
    export KILN_CUBLASLT
fi
echo "cuBLASLt: ${KILN_CUBLASLT:-(from the loader path)}"
TESTS="test_cublaslt test_family_cublaslt test_abi test_backend_cuda test_library test_runtime"
missing=0
for f in build/kiln $(for t in $TESTS; do printf 'build/tests/%s ' "$t"; done); do [ -x "$f" ] || missing=1; done
# a build carried from the development machine is used as it is (the GPU machine may lack the -dev packages)
if [ "$missing" = 1 ] && ! make -j"$(nproc)" all $(for t in $TESTS; do printf 'build/tests/%s ' "$t"; done) >"$LOGS/make.log" 2>&1; then
    tail -30 "$LOGS/make.log"
    echo "FAIL make"
    tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
    exit 1
fi
for t in $TESTS; do
    timeout 300 "build/tests/$t" >"$LOGS/$t.log" 2>&1
    rc=$?
    echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED)|SKIP:' "$LOGS/$t.log" | sort | uniq -c | tr -s ' \n' ' ')"
    [ "$rc" = 0 ] || grep -E 'ERROR|LINE|FAILED' "$LOGS/$t.log" | head -12
done
P=bench/problems/gemm_linear_bf16_4096x9216x2304
timeout "${SWEEP_TIMEOUT:-420}" build/kiln sweep "$P" --backend cuda --family cublaslt --limit "${LIMIT:-48}" \
    --json --out "$LOGS/src" --ref-dir "$LOGS/ref" >"$LOGS/sweep.json" 2>"$LOGS/sweep.log"
echo "sweep rc=$?"
tail -5 "$LOGS/sweep.log"
rm -rf "$LOGS/ref"
"$KILN_PYTHON" - "$LOGS/sweep.json" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception as e:
    print(f"FAIL no sweep JSON: {e}")
    sys.exit(0)
flops = 2.0 * 4096 * 9216 * 2304
out = {}
for r in rows:
    res = r["result"]
    t = (res.get("summary") or {}).get("time_us_geomean")
    cfg = ((res.get("library") or {}).get("config")) or {}
    p = dict(kv.split("=") for kv in r["params"].split())
    idx = int(p["LT_CONFIG0"]) + 16 * int(p["LT_CONFIG1"]) + 256 * int(p["LT_CONFIG2"])
    out[res["outcome"]] = out.get(res["outcome"], 0) + 1
    tf = f"{flops / t / 1e6:7.1f} TFLOP/s" if t else ""
    ev = "" if res["outcome"] == "ok" else json.dumps(res.get("evidence"))[:160]
    print(f"index {idx:4d} {res['outcome']:13s} {t or 0:9.1f} us {tf} algo {cfg.get('algo')} tile {cfg.get('tile')} "
          f"stages {cfg.get('stages')} split {cfg.get('split_k')} ws {cfg.get('workspace')} {ev}")
print("outcomes:", out)
ok = [(r["result"]["summary"]["time_us_geomean"], r["params"]) for r in rows
      if r["result"]["outcome"] == "ok" and r["result"].get("summary", {}).get("time_us_geomean")]
if ok:
    best = min(ok)
    start = [t for t, p in ok if p == "LT_CONFIG0=0 LT_CONFIG1=0 LT_CONFIG2=0"]
    print(f"best {best[0]:.1f} us = {flops / best[0] / 1e6:.1f} TFLOP/s ({best[1]}); index 0 (heuristic #1): "
          + (f"{start[0]:.1f} us = {flops / start[0] / 1e6:.1f} TFLOP/s" if start else "not ok"))
PYEOF
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
