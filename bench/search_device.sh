#!/usr/bin/env bash
# search_device.sh: the search-efficiency benchmark of issue 5 in one call, on cuda. For each problem directory
# given: `kiln optimize` (MCTS + specialist agents, one run over all problems) at $BUDGET candidates per problem,
# a uniform random sample of the same family space at the same budget (`kiln sweep --sample random`), and the
# exhaustive best (`kiln sweep` over every valid point). Then one table: best time per problem for each, the
# geomeans, MCTS vs random and MCTS as a share of exhaustive. Sweeps stream their rows (--jsonl), so a sweep cut
# by its time limit still counts what it measured (and the table says it was cut).
# DEADLINE_S bounds the whole script: each step's time limit is cut to what is left of it. FAMILY=NAME keeps every
# method to that family's space (`--family`; e.g. gen, the generator). The run's store is kept as $OUT/kiln.db, so
# the table can also look up, on the exhaustive sweep's clock, the point MCTS found best. A second call can finish
# cut exhaustive sweeps: the first call's $OUT in place, SKIP_OPTIMIZE=1 SKIP_RANDOM=1 RESUME=1. Where a space is too
# large to sweep (the reductions' 3k-23k valid points), SAMPLE_N=N measures a uniform random sample of N points in
# place of the exhaustive sweep (seed 11, $OUT/sample/): the table then puts MCTS against random's expected best of
# $BUDGET draws from that sample (less noisy than the one random run) and against the sample's best.
#   OUT=/tmp/x BUDGET=50 EXHAUSTIVE_S=90 DEADLINE_S=480 FAMILY=gen bash bench/search_device.sh DIR...
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-search}
BUDGET=${BUDGET:-50}
BACKEND=${BACKEND:-cuda}
EXHAUSTIVE_S=${EXHAUSTIVE_S:-90}
OPT_S=${OPT_S:-240}
GATE_OPTS=${GATE_OPTS:---sets 1 --iters 20}
DEADLINE_S=${DEADLINE_S:-900}
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONUNBUFFERED=1
FAMILY_OPT=${FAMILY:+--family $FAMILY}
mkdir -p "$OUT/random" "$OUT/exhaustive"
problems=("$@")
[ ${#problems[@]} -eq 0 ] && { echo "usage: $0 PROBLEM_DIR..." >&2; exit 2; }

t0=$(date +%s)
# the smaller of $1 and what is left of the deadline (keeping 15 s for the table)
limit() {
    local left=$((DEADLINE_S - ($(date +%s) - t0) - 15))
    [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
if [ "${SKIP_OPTIMIZE:-0}" = 1 ]; then
    echo "== kiln optimize skipped: $OUT/optimize.json is kept"
else
echo "== kiln optimize, budget $BUDGET per problem ($(( $(date +%s) - t0 )) s)"
rm -rf /tmp/kiln-search-run
timeout -k 30 "$(limit "$OPT_S")" build/kiln optimize /tmp/kiln-search-run "${problems[@]}" --backend "$BACKEND" \
    --budget "$BUDGET" --time "$(limit $((OPT_S - 30)))" \
    $GATE_OPTS $FAMILY_OPT --json --quiet >"$OUT/optimize.json" 2>"$OUT/optimize.log"
echo "optimize exit $?"
cp /tmp/kiln-search-run/kiln.db* "$OUT/" 2>/dev/null
fi
for p in "${problems[@]}"; do
    [ "${SKIP_RANDOM:-0}" = 1 ] && break
    name=$(basename "$p")
    echo "== $name: random $BUDGET ($(( $(date +%s) - t0 )) s)"
    rm -f "$OUT/random/$name.jsonl"
    timeout "$(limit "${RANDOM_S:-120}")" build/kiln sweep "$p" --backend "$BACKEND" --limit "$BUDGET" --sample random \
        --seed 7 $GATE_OPTS $FAMILY_OPT \
        --out "/tmp/kiln-search-sweep/random-$name" --jsonl "$OUT/random/$name.jsonl" \
        >/dev/null 2>"$OUT/random/$name.log"
    echo "random exit $?"
done
for p in "${problems[@]}"; do
    name=$(basename "$p")
    if [ -n "${SAMPLE_N:-}" ]; then  # spaces too large to sweep: a large uniform sample stands in for every point
        echo "== $name: random sample of $SAMPLE_N ($(( $(date +%s) - t0 )) s)"
        mkdir -p "$OUT/sample"
        rm -f "$OUT/sample/$name.jsonl"
        timeout "$(limit "$EXHAUSTIVE_S")" build/kiln sweep "$p" --backend "$BACKEND" --limit "$SAMPLE_N" \
            --sample random --seed 11 $GATE_OPTS $FAMILY_OPT --out "/tmp/kiln-search-sweep/sample-$name" \
            --jsonl "$OUT/sample/$name.jsonl" >/dev/null 2>"$OUT/sample/$name.log"
        echo "sample exit $?"
        continue
    fi
    echo "== $name: exhaustive ($(( $(date +%s) - t0 )) s)"
    # RESUME=1 with the previous call's $OUT/exhaustive/*.jsonl in place continues cut sweeps
    [ "${RESUME:-0}" = 1 ] || rm -f "$OUT/exhaustive/$name.jsonl"
    timeout "$(limit "$EXHAUSTIVE_S")" build/kiln sweep "$p" --backend "$BACKEND" $GATE_OPTS $FAMILY_OPT \
        --out "/tmp/kiln-search-sweep/all-$name" --jsonl "$OUT/exhaustive/$name.jsonl" \
        $([ "${RESUME:-0}" = 1 ] && echo --resume) \
        >/dev/null 2>"$OUT/exhaustive/$name.log"
    echo "exhaustive exit $?"
done
"$KILN_PYTHON" bench/search_table.py "$OUT" "${problems[@]}" | tee "$OUT/table.md"
