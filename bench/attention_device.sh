#!/usr/bin/env bash
# attention_device.sh: issue 16's attention rows on the H200 in one call. Writes the rows (bench/attention_rows.py:
# Gemma-4 [1, 8 q / 4 kv, 4096, 256] eager chain with a sliding window of 512 and full causal, [4, 32/8, 4096,
# 128] causal, [16, 16, 1024, 64] unmasked, decode 64 x 4096 with 32/8 heads), then per row
# `kiln sweep --backend cuda --family attention --limit $LIMIT` (the gate proves and times every point; each row
# under $SWEEP_TIMEOUT), then bench/attention_check.py on the sources the sweeps emitted: every candidate run
# again with nvcc-built cubins against the row's reference, and eager plus torch's SDPA backends (flash, cuDNN,
# memory-efficient; sdpa_kernel) timed on the same inputs in the same process. TFLOP/s count causal rows at
# half (the band's kept pairs). The last thing printed is the table. Logs and JSON are tarred into
# $OUT/attention_logs.tar.gz.
# One device command may run 10 minutes: the defaults (LIMIT=12 points a row, SWEEP_TIMEOUT=80 s a row,
# CHECK_TIMEOUT=150 s, CHECK_PER_ROW=4 candidates re-run a row) keep the whole under about 9.
#   OUT=/tmp/x LIMIT=12 bash bench/attention_device.sh
# SWEPT=1: the sweeps were run already, each row's into $OUT/sweep/NAME.jsonl and its sources into
# $OUT/src/NAME (a script that picks other points per row, `kiln sweep --where`); only the baselines and the
# table run.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-attention}
LIMIT=${LIMIT:-12}
ITERS=${ITERS:-20}
SWEEP_OPTS=${SWEEP_OPTS:---sets 1 --iters $ITERS}
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/sweep" "$OUT/src"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
"$KILN_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' | tee -a "$OUT/gpu.txt"
"$KILN_PYTHON" bench/attention_rows.py bench/attention
if [ ! -x build/kiln ]; then
    echo "== building kiln"
    make -j"$(nproc)" all >"$OUT/build.log" 2>&1 || echo "build failed: tail $OUT/build.log"
fi
for p in bench/attention/attn_*/; do
    [ "${SWEPT:-0}" = 1 ] && break
    name=$(basename "$p")
    echo "== $name"
    rm -f "$OUT/sweep/$name.jsonl"
    timeout "${SWEEP_TIMEOUT:-80}" build/kiln sweep "$p" --backend cuda --family attention --limit "$LIMIT" \
        $SWEEP_OPTS --jsonl "$OUT/sweep/$name.jsonl" --out "$OUT/src/$name" \
        >"$OUT/sweep/$name.out" 2>"$OUT/sweep/$name.log"
    echo "sweep exit $? ($(grep -c ' ok' "$OUT/sweep/$name.log") ok); last: $(tail -1 "$OUT/sweep/$name.log")"
done
timeout "${CHECK_TIMEOUT:-150}" "$KILN_PYTHON" bench/attention_check.py "$OUT/src" bench/attention --iters "$ITERS" \
    --per-row "${CHECK_PER_ROW:-4}" --sweep "$OUT/sweep" \
    >"$OUT/check.jsonl" 2>"$OUT/check.log"
echo "attention_check exit $?"
"$KILN_PYTHON" - "$OUT" <<'PYEOF' | tee "$OUT/table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "check.jsonl").read_text().splitlines() if l.startswith("{")] \
    if (out / "check.jsonl").exists() else []
def gate_best(name):
    f = out / "sweep" / (name + ".jsonl")
    best = None
    for line in (f.read_text().splitlines() if f.exists() else []):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        res = r.get("result", {})
        if res.get("outcome") != "ok" or not res.get("workloads"):
            continue
        us = (res["workloads"][-1].get("time_us") or {}).get("median")
        if us and (best is None or us < best[0]):
            best = (us, r.get("params", ""))
    return best
fmt = lambda v: "—" if v is None else f"{v:.1f}"
cols = ["row", "kiln (gate) us", "kiln point", "kiln (check) us", "TFLOP/s", "eager", "flash", "cuDNN", "efficient",
        "best SDPA", "kiln vs best", "check outcomes"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for name in sorted({r["problem"] for r in rows} | {p.stem for p in (out / "sweep").glob("*.jsonl")}):
    base = next((r for r in rows if r["problem"] == name and r["kind"] == "baseline"), {})
    ks = [r for r in rows if r["problem"] == name and r["kind"] == "kiln"]
    good = [r for r in ks if r.get("outcome") == "ok"]
    best = min(good, key=lambda r: r["us"]) if good else None
    gate = gate_best(name)
    us = min([v for v in (gate[0] if gate else None, best["us"] if best else None) if v] or [None])
    sdpa = [base.get(k) for k in ("flash", "cudnn", "efficient") if base.get(k)]
    fl = base.get("flops") or (best or {}).get("flops")
    tf = fl / us / 1e6 if fl and us else None
    print("| " + " | ".join([name, fmt(gate[0] if gate else None), (gate[1] if gate else (best or {}).get("point", "—")),
        fmt(best["us"] if best else None), fmt(tf), fmt(base.get("eager")), fmt(base.get("flash")),
        fmt(base.get("cudnn")), fmt(base.get("efficient")), fmt(min(sdpa) if sdpa else None),
        f"{min(sdpa) / us:.2f}x" if sdpa and us else "—",
        ",".join(sorted({str(r.get('outcome')) for r in ks})) + f" ({len(good)}/{len(ks)})"]) + " |")
PYEOF
logs=(sweep check.jsonl check.log gpu.txt table.md)
[ -f "$OUT/build.log" ] && logs+=(build.log)
tar czf "$OUT/attention_logs.tar.gz" -C "$OUT" "${logs[@]}" 2>/dev/null
echo "logs: $OUT/attention_logs.tar.gz"
cat "$OUT/table.md"
