#!/usr/bin/env bash
# gate_throughput.sh: candidates per minute through the gate, end to end (compile + prove + time), on the
# three problems of the gate-service issue at real size, in one device call: softmax bf16 chain
# [1,8,4096,4096], group_norm fp32 [1,128,1024,1024], RMSNorm bf16 [4096,2304].
#
# For each problem the reference data is built first (not counted: it is built once per problem and
# kept), then `kiln sweep P --limit $LIMIT` runs its family's points through one gate session with the
# compile pool, timed by the wall clock; the rows' phase_s give where the time went. With OLD_KILN (a kiln
# binary of an earlier build, with OLD_HOME its source tree for KILN_HOME), the same problems run through
# it for $OLD_LIMIT candidates on OLD_HOME's copies of the problems: the "before" column, in the same run.
# Then the softmax chain's best point is timed in two separate gate sessions (two `kiln eval` processes):
# the medians must agree within 2 %.
#   OUT=/tmp/x LIMIT=60 OLD_KILN=.old/build/kiln OLD_HOME=.old bash bench/gate_throughput.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-throughput}
LIMIT=${LIMIT:-60}
OLD_LIMIT=${OLD_LIMIT:-3}
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
PROBLEMS=(softmax_bf16_chain_1x8x4096x4096 groupnorm_f32_128x1024x1024 rmsnorm_gemma4_bf16_s4096_h2304)
REFS=/tmp/kiln-throughput-refs

sweep() { # sweep BIN LABEL LIMIT PROBLEMS_DIR NAME SECONDS [env...]
    local bin=$1 label=$2 limit=$3 dir=$4 name=$5 seconds=$6
    shift 6
    local t0 t1
    rm -f "$OUT/$label-$name.jsonl"
    t0=$(date +%s.%N)
    env "$@" timeout "$seconds" "$bin" sweep "$dir/$name" --backend cuda \
        --limit "$limit" --ref-dir "$REFS/$label-$name" --jsonl "$OUT/$label-$name.jsonl" \
        --out "/tmp/kiln-throughput-sweep/$label-$name" >"$OUT/$label-$name.out" 2>"$OUT/$label-$name.log"
    echo "$?" >"$OUT/$label-$name.rc"
    t1=$(date +%s.%N)
    echo "$t0 $t1" >"$OUT/$label-$name.wall"
}

refs() { # refs BIN LABEL PROBLEMS_DIR NAME [env...]: the reference data, outside the timed part
    local bin=$1 label=$2 dir=$3 name=$4
    shift 4
    env "$@" "$bin" sweep "$dir/$name" --backend cuda --limit 1 --ref-dir "$REFS/$label-$name" \
        --out "/tmp/kiln-throughput-sweep/refs-$label-$name" >/dev/null 2>"$OUT/refs-$label-$name.log"
}

for name in "${PROBLEMS[@]}"; do
    echo "== $name"
    refs build/kiln new bench/problems "$name"
    sweep build/kiln new "$LIMIT" bench/problems "$name" "${SWEEP_TIMEOUT:-400}"
    if [ -n "${OLD_KILN:-}" ]; then
        # the earlier build reads its own problem files (the op chain's form changed since)
        refs "$OLD_KILN" old "$OLD_HOME/bench/problems" "$name" KILN_HOME="$OLD_HOME" \
            PYTHONPATH="$OLD_HOME/python"
        sweep "$OLD_KILN" old "$OLD_LIMIT" "$OLD_HOME/bench/problems" "$name" \
            "${OLD_SWEEP_TIMEOUT:-400}" KILN_HOME="$OLD_HOME" \
            PYTHONPATH="$OLD_HOME/python"
    fi
done

# the softmax chain's best point, in two separate gate sessions
"$KILN_PYTHON" - "$OUT" >"$OUT/best.txt" <<'PYEOF'
import json, pathlib, sys
rows = [json.loads(l) for l in (pathlib.Path(sys.argv[1]) / "new-softmax_bf16_chain_1x8x4096x4096.jsonl").read_text().splitlines() if l.startswith("{")]
ok = [r for r in rows if r["result"].get("outcome") == "ok"]
best = min(ok, key=lambda r: r["result"]["summary"]["time_us_geomean"]) if ok else None
print(best["result"]["kernel"] if best else "")
PYEOF
best=$(cat "$OUT/best.txt")
if [ -n "$best" ]; then
    for k in 1 2; do
        build/kiln eval bench/problems/softmax_bf16_chain_1x8x4096x4096 "$best" --backend cuda --json \
            --ref-dir "$REFS/new-softmax_bf16_chain_1x8x4096x4096" >"$OUT/repeat$k.json" 2>"$OUT/repeat$k.log"
    done
fi

"$KILN_PYTHON" - "$OUT" "${PROBLEMS[@]}" <<'PYEOF' | tee "$OUT/table.md"
import json, pathlib, sys
out, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
def load(label, name):
    f = out / f"{label}-{name}.jsonl"
    if not f.exists():
        return None
    rows = [json.loads(l) for l in f.read_text().splitlines() if l.startswith("{")]
    t0, t1 = map(float, (out / f"{label}-{name}.wall").read_text().split())
    phases = {}
    for r in rows:
        for k, v in (r["result"].get("phase_s") or {}).items():
            phases[k] = phases.get(k, 0) + v
    ok = [r for r in rows if r["result"].get("outcome") == "ok"]
    best = min((r["result"]["summary"]["time_us_geomean"] for r in ok), default=None)
    return {"n": len(rows), "ok": len(ok), "wall": t1 - t0, "phases": phases, "best": best}
print("| problem | build | candidates (ok) | wall s | candidates/min | mean s per candidate: compile / load / prove / time | best us |")
print("|---|---|---|---|---|---|---|")
for name in names:
    for label in ("old", "new"):
        r = load(label, name)
        if not r or not r["n"]:
            continue
        per = lambda k: r["phases"].get(k, 0) / r["n"]
        best = f"{r['best']:.1f}" if r["best"] else "—"
        print(f"| {name} | {label} | {r['n']} ({r['ok']}) | {r['wall']:.1f} | {60 * r['n'] / r['wall']:.1f} | "
              f"{per('compile'):.3f} / {per('load'):.3f} / {per('prove'):.3f} / {per('time'):.3f} | {best} |")
reps = []
for k in (1, 2):
    f = out / f"repeat{k}.json"
    if f.exists() and f.read_text().strip():
        r = json.loads(f.read_text())
        if r.get("outcome") == "ok":
            reps.append(r["workloads"][-1]["time_us"]["median"])
if len(reps) == 2:
    print(f"\nsoftmax chain best point, two gate sessions: {reps[0]:.2f} us and {reps[1]:.2f} us, "
          f"{100 * abs(reps[0] - reps[1]) / min(reps):.2f} % apart")
PYEOF
