#!/usr/bin/env bash
# cuda_smoke.sh: a short check of kiln's cuda code paths on the GPU, for a device call of a couple of
# minutes when a change touched CUDA code that the CPU machine can only compile: the C tests that need a
# GPU (TESTS, from build/tests; the emulator tests such as test_family_attention need none and are not
# here), then `kiln sweep --backend cuda` of LIMIT points of one family on each
# test problem (PROBLEMS: "DIR:FAMILY" items), every point proved by the gate on one input set. Not a
# benchmark: the problems are the families' small test problems and the times are not reported. The table
# is printed last; logs go to $OUT/smoke_logs.tar.gz.
#
#   make && OUT=/tmp/out bash bench/cuda_smoke.sh
#
# A build carried from the development machine is used as it is (the GPU machine may lack the -dev
# packages make needs); KILN_CUBLASLT defaults to the copy in torch's wheel, as in gemm_device.sh.
set -u
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-3}
SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-60}
TESTS=${TESTS:-test_cublaslt}
PROBLEMS=${PROBLEMS:-$(for d in tests/data/families/attention/*/ tests/data/solbench/gqa_paged_*/; do
    [ -f "$d/definition.json" ] && printf '%s:attention ' "${d%/}"; done)}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
if [ -z "${KILN_CUBLASLT:-}" ]; then
    KILN_CUBLASLT=$("$KILN_PYTHON" -c 'import glob, site; c = sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/cu1*/lib/libcublasLt.so.1*")); print(c[-1] if c else "")' 2>/dev/null)
    export KILN_CUBLASLT
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
ROWS="$OUT/smoke_rows.txt" # outside the tarball: a call cut short still returns the rows so far
: >"$ROWS"
for t in $TESTS; do
    if [ ! -x "build/tests/$t" ]; then
        printf '%-58s %s\n' "$t" "MISSING (not built)" >>"$ROWS"
        continue
    fi
    start=$(date +%s)
    timeout 120 "build/tests/$t" >"$LOGS/$t.log" 2>&1
    rc=$?
    summary=$(grep -E '^\[  (PASSED|FAILED)  \]|SKIPPED TEST' "$LOGS/$t.log" | tr '\n' ' ')
    printf '%-58s exit %d in %ds: %s\n' "$t" "$rc" "$(($(date +%s) - start))" "$summary" >>"$ROWS"
    [ "$rc" = 0 ] || tail -20 "$LOGS/$t.log"
done
for item in $PROBLEMS; do
    dir=${item%%:*}
    fam=${item##*:}
    name=$(basename "$dir")
    start=$(date +%s)
    timeout "$SWEEP_TIMEOUT" build/kiln sweep "$dir" --backend cuda --family "$fam" --limit "$LIMIT" \
        --sets 1 --iters 3 --json --out "$LOGS/src/$name" --ref-dir "$LOGS/ref/$name" \
        >"$LOGS/$name.json" 2>"$LOGS/$name.log"
    rc=$?
    verdicts=$("$KILN_PYTHON" - "$LOGS/$name.json" <<'EOF' 2>/dev/null
import collections, json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception:  # noqa: BLE001 - a sweep that printed nothing: its log says why
    print("no rows")
    sys.exit()
c = collections.Counter(r.get("result", {}).get("outcome", "?") for r in rows)
print(", ".join(f"{n} {o}" for o, n in sorted(c.items())))
EOF
)
    printf '%-58s exit %d in %ds: %s\n' "$name ($fam)" "$rc" "$(($(date +%s) - start))" "$verdicts" >>"$ROWS"
    [ "$rc" = 0 ] || tail -5 "$LOGS/$name.log"
done
tar -C "$LOGS" -czf "$OUT/smoke_logs.tar.gz" . 2>/dev/null
echo "== cuda smoke (LIMIT=$LIMIT points a problem, one input set)"
cat "$ROWS"
