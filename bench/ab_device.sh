#!/usr/bin/env bash
# ab_device.sh: two builds of kiln, the same points of the same problems, in one device call. OLD and NEW
# are copies of a build/ directory (e.g. `cp -a build /tmp/new; rm -rf /tmp/new/obj /tmp/new/tests`, made
# before and after a change and carried to the device); each round sweeps every problem with one build
# and then the other (`kiln sweep --jsonl`), the order alternating from round to round, and
# bench/ab_table.py prints, per problem, the geometric mean of new / old over the points both proved in
# every round, each build's best point and its start point. Each build is copied into build/ for its
# sweeps (build/ is put back at the end).
#   OLD=/tmp/old NEW=/tmp/new OUT=/tmp/ab bash bench/ab_device.sh PROBLEM_DIR... [-- kiln sweep options]
# Defaults: ROUNDS=2, BACKEND=cuda, SWEEP_TIMEOUT=150 s a sweep, sweep options `--sets 1 --iters 20` (add e.g.
# `--family attention --where ATT_WG=1`). The jsonl files and logs are tarred into $OUT/ab_logs.tar.gz.
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
problems=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    problems+=("$1")
    shift
done
[ "${1:-}" = -- ] && shift
OUT=${OUT:-/tmp/kiln-ab}
ROUNDS=${ROUNDS:-2}
for b in "${OLD:-}" "${NEW:-}"; do
    if [ -z "$b" ] || [ ! -x "$b/kiln" ]; then
        echo "ab_device: OLD and NEW must be copies of build/ (with kiln)" >&2
        exit 2
    fi
done
for p in "${problems[@]}"; do
    [ -d "$p" ] || { echo "ab_device: $p: not a problem directory" >&2; exit 2; }
done
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT/ab"
rm -f "$OUT"/ab/*.jsonl "$OUT"/ab/*.log
saved=""
if [ -d build ]; then
    saved=$(mktemp -d)
    cp -a build/. "$saved/"
fi
use() { rm -rf build && mkdir -p build && cp -a "$1"/. build/; }
for r in $(seq 1 "$ROUNDS"); do
    order="old new"
    [ $((r % 2)) = 0 ] && order="new old"
    for b in $order; do
        if [ $b = old ]; then use "$OLD"; else use "$NEW"; fi
        for p in "${problems[@]}"; do
            name=$(basename "$p")
            timeout "${SWEEP_TIMEOUT:-150}" build/kiln sweep "$p" --backend "${BACKEND:-cuda}" --sets 1 \
                --iters 20 "$@" --jsonl "$OUT/ab/$b.$r.$name.jsonl" --out "$OUT/src/$b.$name" \
                >/dev/null 2>"$OUT/ab/$b.$r.$name.log"
            echo "round $r $b $name: exit $?, $(grep -c ' ok' "$OUT/ab/$b.$r.$name.log") ok"
        done
    done
done
if [ -n "$saved" ]; then
    rm -rf build && mkdir -p build && cp -a "$saved"/. build/ && rm -rf "$saved"
fi
rm -rf "$OUT/src"
tar czf "$OUT/ab_logs.tar.gz" -C "$OUT" ab
python3 bench/ab_table.py "$OUT/ab" | tee "$OUT/ab.md"
