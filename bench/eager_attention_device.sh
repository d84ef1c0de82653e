#!/usr/bin/env bash
# eager_attention_device.sh: the eager attention blocks of bench/eager_attention.py's models (HF GPT-2 and Llama
# with attn_implementation="eager", torchvision's swin_t; under torch.no_grad, as third-party scripts run them)
# captured at their sizes (`kiln capture`), each attention problem swept with the attention family (the gate
# proves and times every point), and a table last: the block's eager time a call in the capture (profiler,
# CUDA time of its calls) against kiln's best in the gate. One device call:
#   OUT=/tmp/x bash bench/eager_attention_device.sh
# MODELS (default "gpt2 llama swin"), LIMIT (points a problem, default 4), SWEEP_TIMEOUT (s a problem, 90),
# BACKEND=cpu SMALL=1: the same on the CPU at --small sizes (a smoke test). Logs: $OUT/eager_attention/.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-eager-attention}
L=$OUT/eager_attention
mkdir -p "$L"
export KILN_PYTHON=${KILN_PYTHON:-python3}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
BACKEND=${BACKEND:-cuda}
[ -x build/kiln ] || { echo "FAIL build/kiln is missing: run make first"; exit 1; }
for m in ${MODELS:-gpt2 llama swin}; do
    run=$L/run_$m
    rm -rf "$run"
    timeout 300 build/kiln capture bench/eager_attention.py --out "$run" --quiet -- "$m" --device "$BACKEND" \
        ${SMALL:+--small} >"$L/capture_$m.log" 2>&1
    echo "capture $m rc=$?"
    for p in "$run"/problems/attention_*; do
        [ -d "$p" ] || continue
        n=$(basename "$p")
        timeout "${SWEEP_TIMEOUT:-90}" build/kiln sweep "$p" --backend "$BACKEND" --family attention \
            --limit "${LIMIT:-4}" --sets 1 --json --out "$L/src_${m}_$n" >"$L/sweep_${m}_$n.json" \
            2>"$L/sweep_${m}_$n.log"
        echo "sweep $m $n rc=$? $(tail -1 "$L/sweep_${m}_$n.log")"
    done
    rm -rf "$run"/problems/*/tensors "$run"/problems/*/kiln/ref-* "$run"/.capture-spool*
done
"$KILN_PYTHON" - "$L" <<'PYEOF'
import glob, json, os, sys
L = sys.argv[1]
print("| model | problem | calls | eager µs a call (capture) | kiln best µs | eager / kiln | outcomes |")
print("|---|---|---:|---:|---:|---:|---|")
for f in sorted(glob.glob(f"{L}/sweep_*.json")):
    m, name = os.path.basename(f)[6:-5].split("_", 1)
    d = json.load(open(f"{L}/run_{m}/problems/{name}/definition.json"))["kiln"]
    eager = d.get("device_time_us", 0) / max(d.get("calls", 1), 1)
    try:
        rows = json.load(open(f))["rows"]
    except Exception:
        rows = []
    outs, ok = {}, []
    for r in rows:
        res = r["result"]
        outs[res["outcome"]] = outs.get(res["outcome"], 0) + 1
        t = (res.get("summary") or {}).get("time_us_geomean")
        if res["outcome"] == "ok" and t:
            ok.append(t)
    best = min(ok) if ok else None
    print(f"| {m} | {name} | {d.get('calls')} | {eager:.1f} | {f'{best:.1f}' if best else '—'} | "
          f"{f'{eager / best:.2f}×' if best else '—'} | {outs or 'no sweep JSON'} |")
PYEOF
