#!/usr/bin/env bash
# families_device.sh: the kernel families on the H200 in one call: for each problem directory given (default:
# bench/problems/*), `kiln sweep --backend cuda` over the matching families (at most $LIMIT points each), and
# PyTorch eager / torch.compile on the same problem ($MODES), then one table (bench/families_table.py): eager vs
# torch.compile vs kiln's best vs speed of light, on each problem's largest workload, with "copy us": a plain
# device copy of the same bytes timed the same way (the floor that launch, ramp-up and tail leave at that size).
# Logs and JSON go to $OUT; each sweep streams its rows (--jsonl), so one cut by $SWEEP_TIMEOUT still counts the
# points it measured, and each step prints its seconds.
# TORCH_FIRST=1 times PyTorch before the sweeps, so a call cut short still has every torch row (the table of a
# cut run: python3 bench/families_table.py OUT MODES). REUSE=1 keeps a problem's rows already in
# $OUT/sweep/NAME.jsonl (another script's sweep of it) instead of sweeping it again. TABLE_OPTS=--summary adds
# the geomean line. SEARCH=N puts one `kiln optimize` run over all the problems in place of the sweeps (MCTS and the
# agents at N candidates a problem, what a user's search gets; SEARCH_TIME bounds it, default 400 s); its
# $OUT/optimize.json gives the kiln column, and $OUT/kiln.db keeps every candidate.
#   OUT=/tmp/x LIMIT=8 MODES=eager,default,max-autotune-no-cudagraphs bash bench/families_device.sh [DIR...]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-families}
LIMIT=${LIMIT:-8}
MODES=${MODES:-eager,default,max-autotune-no-cudagraphs}
SWEEP_OPTS=${SWEEP_OPTS:---sets 1 --iters 20}
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/sweep"
problems=("$@")
[ ${#problems[@]} -eq 0 ] && problems=(bench/problems/*/)
torch_times() {
    local t0=$SECONDS
    timeout "${TORCH_TIMEOUT:-900}" "$KILN_PYTHON" bench/torch_problem.py --modes "$MODES" "${problems[@]}" \
        >"$OUT/torch.jsonl" 2>"$OUT/torch.log"
    echo "torch exit $? ($(grep -c '^{' "$OUT/torch.jsonl") rows) in $((SECONDS - t0)) s"
}
[ "${TORCH_FIRST:-0}" = 1 ] && torch_times
if [ -n "${SEARCH:-}" ]; then
    t0=$SECONDS
    rm -rf /tmp/kiln-families-search
    timeout -k 30 $((${SEARCH_TIME:-400} + 60)) build/kiln optimize /tmp/kiln-families-search "${problems[@]}" \
        --backend cuda --budget "$SEARCH" --time "${SEARCH_TIME:-400}" $SWEEP_OPTS --json --quiet \
        >"$OUT/optimize.json" 2>"$OUT/optimize.log"
    echo "optimize exit $? in $((SECONDS - t0)) s"
    cp /tmp/kiln-families-search/kiln.db "$OUT/" 2>/dev/null
fi
for p in "${problems[@]}"; do
    [ -n "${SEARCH:-}" ] && break
    name=$(basename "$p")
    echo "== $name"
    if [ "${REUSE:-0}" = 1 ] && [ -s "$OUT/sweep/$name.jsonl" ]; then
        echo "kept $OUT/sweep/$name.jsonl (REUSE=1)"
        continue
    fi
    rm -f "$OUT/sweep/$name.jsonl"
    t0=$SECONDS
    timeout "${SWEEP_TIMEOUT:-300}" build/kiln sweep "$p" --backend cuda --limit "$LIMIT" $SWEEP_OPTS \
        --jsonl "$OUT/sweep/$name.jsonl" --out "/tmp/kiln-sweep/$name" \
        >/dev/null 2>"$OUT/sweep/$name.log"
    echo "sweep exit $? ($(grep -c ' ok' "$OUT/sweep/$name.log") ok) in $((SECONDS - t0)) s"
done
[ "${TORCH_FIRST:-0}" = 1 ] || torch_times
"$KILN_PYTHON" bench/families_table.py "$OUT" "$MODES" ${TABLE_OPTS:-} | tee "$OUT/table.md"
