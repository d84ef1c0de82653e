#!/usr/bin/env bash
# families_device.sh: the kernel families on the H200 in one call: for each problem directory given (default:
# bench/problems/*), `kiln sweep --backend cuda` over the matching families (at most $LIMIT points each),
# and PyTorch eager / torch.compile on the same problem ($MODES), then one table: eager vs torch.compile vs
# kiln's best vs speed of light, on each problem's largest workload, with "copy us": a plain device copy of the
# same bytes timed the same way (the floor that launch, ramp-up and tail leave at that size). Logs and JSON go to $OUT; each sweep streams
# its rows (--jsonl), so one cut by $SWEEP_TIMEOUT still counts the points it measured.
# REUSE=1 keeps a problem's rows already in $OUT/sweep/NAME.jsonl (another script's sweep of it) instead of
# sweeping it again.
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
for p in "${problems[@]}"; do
    name=$(basename "$p")
    echo "== $name"
    if [ "${REUSE:-0}" = 1 ] && [ -s "$OUT/sweep/$name.jsonl" ]; then
        echo "kept $OUT/sweep/$name.jsonl (REUSE=1)"
        continue
    fi
    rm -f "$OUT/sweep/$name.jsonl"
    timeout "${SWEEP_TIMEOUT:-300}" build/kiln sweep "$p" --backend cuda --limit "$LIMIT" $SWEEP_OPTS \
        --jsonl "$OUT/sweep/$name.jsonl" --out "/tmp/kiln-sweep/$name" \
        >/dev/null 2>"$OUT/sweep/$name.log"
    echo "sweep exit $? ($(grep -c ' ok' "$OUT/sweep/$name.log") ok)"
done
timeout "${TORCH_TIMEOUT:-900}" "$KILN_PYTHON" bench/torch_problem.py --modes "$MODES" "${problems[@]}" >"$OUT/torch.jsonl" 2>"$OUT/torch.log"
"$KILN_PYTHON" - "$OUT" "$MODES" <<'PYEOF' | tee "$OUT/table.md"
import json, pathlib, sys
out, modes = pathlib.Path(sys.argv[1]), sys.argv[2].split(",")
torch_rows = {}
for line in (out / "torch.jsonl").read_text().splitlines():
    if line.startswith("{"):
        r = json.loads(line)
        torch_rows[r["problem"]] = r
cols = ["problem", "workload"] + [m for m in modes] + ["kiln best", "family params", "SOL us", "SOL %", "S",
        "copy us", "vs eager", "vs best compile"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for f in sorted((out / "sweep").glob("*.jsonl")):
    name = f.stem
    t = torch_rows.get(name, {})
    best = None
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.startswith("{")]
    for row in rows:
        r = row["result"]
        if r.get("outcome") != "ok":
            continue
        ws = [w for w in r["workloads"] if w.get("uuid") == t.get("workload")] or r["workloads"][-1:]
        if not ws or not ws[0].get("time_us"):
            continue
        w = ws[0]
        us = w["time_us"]["median"]
        if best is None or us < best[0]:
            best = (us, row["family"] + " " + row["params"], w)
    def fmt(v):
        return "—" if v is None else f"{v:.1f}"
    mode_us = [t.get(m + "_us") for m in modes]
    comp = [v for m, v in zip(modes, mode_us) if m != "eager" and v]
    if best:
        us, params, w = best
        eager = t.get("eager_us")
        cells = [name, json.dumps(w.get("axes"))] + [fmt(v) for v in mode_us] + [
            f"{us:.1f}", params, f"{w.get('sol_time_us', 0):.1f}", f"{w.get('sol_pct', 0):.1f}",
            f"{w.get('sol_score') or 0:.3f}", fmt(t.get("copy_us")), f"{eager / us:.2f}x" if eager else "—",
            f"{min(comp) / us:.2f}x" if comp else "—"]
    else:
        reason = (out / "sweep" / (name + ".log")).read_text().strip().splitlines()[-1:] or ["no ok candidate"]
        cells = [name, "—"] + [fmt(v) for v in mode_us] + ["no ok candidate", reason[0][:80], "", "", "", "", "", ""]
    print("| " + " | ".join(cells) + " |")
PYEOF
