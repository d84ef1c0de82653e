#!/usr/bin/env bash
# wgmma_device.sh: the wgmma family (kiln's own sm_90a GEMM, docs/families/wgmma.md) on the device, in one call:
# its C test (every start point compiled by NVRTC for sm_90a, no spills); `kiln sweep --family wgmma` on the small
# GEMM problems of tests/data/families/cublaslt that it matches (tails of every tile, float16, bias, ReLU, both
# GELUs, a cast to float32), the gated pairs and fp8 problems of tests/data/families/wgmma and cublaslt (every point
# proved by the gate);
# the start candidate of the first big problem run outside the gate by bench/gen_kernel.py --diag (where any
# error lies); then `kiln sweep --family wgmma` on
# issue 17's shapes (bench/problems/gemm_*, bench/problems/make_gemm.py), start point first, next to PyTorch
# eager timed the same way (bench/gemm_torch.py: L2 flushed, CUDA events, median; fp8 rows: torch._scaled_mm with
# the row's scales).
#
#   make && OUT=/tmp/out bash bench/wgmma_device.sh
#
# LIMIT (points per big problem, default 12), SMALL_LIMIT (default 3), SMALL (the small problems' names; empty:
# none), ONLY (an extended regex on the big problems' names), SWEEP_TIMEOUT (s per big problem, default 150),
# WHERE and SMALL_WHERE (`kiln sweep --where`: only points with these parameter values, e.g. 'GW_WS=1').
# TWIN (e.g. 'GW_EPI_TMA=0,1'): each big problem's start point and its twins that differ only there, first the
# start, one sweep (overrides WHERE and LIMIT for the big problems) — a change measured in one call.
# Logs: $OUT/logs.tar.gz; the table last.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
PY=${KILN_PYTHON:-python3}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export KILN_PYTHON=$PY
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$LOGS/gpu.txt"
for f in build/kiln build/tests/test_family_wgmma; do
    [ -x "$f" ] || { echo "FAIL $f is missing: run make (and make $f) first"; exit 1; }
done
timeout 120 build/tests/test_family_wgmma >"$LOGS/test_family_wgmma.log" 2>&1
echo "test_family_wgmma rc=$? $(grep -cE '^\[       OK' "$LOGS/test_family_wgmma.log") ok"
sweep() { # problem-dir limit timeout tag where
    timeout "$3" build/kiln sweep "$1" --backend cuda --family wgmma --limit "$2" --sets 1 --iters 10 --json \
        ${5:+--where "$5"} \
        --out "$LOGS/src_$4" --ref-dir "$LOGS/ref" >"$LOGS/sweep_$4.json" 2>"$LOGS/sweep_$4.log"
    echo "sweep $4 rc=$? $(tail -1 "$LOGS/sweep_$4.log")"
}
SMALL=${SMALL-"linear_bf16_3d mm_f16_wt addmm_bf16 linear_bias_gelu_bf16 mm_add_relu_f16 linear_gelu_erf_to_f32 addmm_bf16_tails gated_gelu_bf16 gated_silu_f16 scaled_mm_e4m3_bf16 scaled_mm_rowwise_bias_e4m3_bf16"}
for s in $SMALL; do
    d=tests/data/families/cublaslt/$s
    [ -d "$d" ] || d=tests/data/families/wgmma/$s # gated pairs, per-row fp8: only this family takes them
    sweep "$d" "${SMALL_LIMIT:-3}" 90 "$s" "${SMALL_WHERE:-}"
done
BIG=$(ls -d bench/problems/gemm_* | grep -E "${ONLY:-.}")
first=$(echo "$BIG" | grep 4096x9216x2304 | head -1)
# TWIN: the where of the start point's values, those TWIN names taken from TWIN
twin_where() { # problem-dir
    build/kiln sweep "$1" --family wgmma --list --json 2>/dev/null | "$PY" -c '
import json, sys
start = dict(kv.split("=") for kv in json.load(sys.stdin)["families"][0]["start"].split())
start.update(kv.split("=") for kv in sys.argv[1].split())
print(" ".join(f"{k}={v}" for k, v in start.items()))' "$TWIN"
}
for p in $BIG; do
    tag=$(basename "$p")
    if [ -n "${TWIN:-}" ]; then
        sweep "$p" 8 "${SWEEP_TIMEOUT:-150}" "$tag" "$(twin_where "$p")"
    else
        sweep "$p" "${LIMIT:-12}" "${SWEEP_TIMEOUT:-150}" "$tag" "${WHERE:-}"
    fi
    if [ "$p" = "$first" ]; then
        src=$(ls "$LOGS/src_$tag"/*.cu 2>/dev/null | head -1)
        [ -n "$src" ] && timeout 120 "$PY" bench/gen_kernel.py "$p" "$src" --diag --reps 20 2>&1 | tail -8
    fi
    rm -rf "$LOGS/ref"
    read -r M N K <<<"$(echo "$tag" | sed -E 's/.*_([0-9]+)x([0-9]+)x([0-9]+)$/\1 \2 \3/')"
    epi=none dt=bfloat16
    case "$tag" in *bias_gelu*) epi=bias_gelu ;; *gated_gelu*) epi=gated_gelu ;; esac
    case "$tag" in *scaled_mm*) dt=float8_e4m3fn ;; esac # eager: torch._scaled_mm
    case "$tag" in *rowwise*) epi=rowwise ;; esac
    timeout 120 "$PY" bench/gemm_torch.py --modes eager --epilogue "$epi" "$M" "$N" "$K" "$dt" \
        >"$LOGS/torch_$tag.jsonl" 2>"$LOGS/torch_$tag.log" || echo "torch $tag failed: $(tail -2 "$LOGS/torch_$tag.log")"
done
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" --exclude=ref .
"$PY" - "$LOGS" $SMALL -- $BIG <<'PYEOF' | tee "$OUT/table.md"
import glob, json, os, re, sys
logs, args = sys.argv[1], sys.argv[2:]
cut = args.index("--")
small, big = args[:cut], [os.path.basename(p) for p in args[cut + 1:]]

def rows(tag):
    try:
        return json.load(open(f"{logs}/sweep_{tag}.json"))["rows"]
    except Exception as e:
        return None

print("| small problem | outcomes |\n|---|---|")
for s in small:
    r = rows(s)
    outs = {}
    for x in r or []:
        outs[x["result"]["outcome"]] = outs.get(x["result"]["outcome"], 0) + 1
    ev = [json.dumps(x["result"].get("evidence"))[:200] for x in r or [] if x["result"]["outcome"] != "ok"]
    print(f"| {s} | {outs if r is not None else 'no sweep JSON'} {ev[:1]} |")
print("\n| problem | eager µs | first point µs | best µs | best TFLOP/s | best / eager | outcomes | best point |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for tag in big:
    m, n, k = map(int, re.search(r"(\d+)x(\d+)x(\d+)$", tag).groups())
    flops = (4.0 if "gated" in tag else 2.0) * m * n * k  # a gated pair: two GEMMs
    eager = None
    try:
        for line in open(f"{logs}/torch_{tag}.jsonl"):
            j = json.loads(line)
            eager = j.get("median_us") or eager
    except OSError:
        pass
    r = rows(tag)
    if r is None:
        print(f"| {tag} | {eager or '—'} | no sweep JSON | | | | | |")
        continue
    outs, ok = {}, []
    for i, x in enumerate(r):
        res = x["result"]
        outs[res["outcome"]] = outs.get(res["outcome"], 0) + 1
        t = (res.get("summary") or {}).get("time_us_geomean")
        if res["outcome"] == "ok" and t:
            ok.append((t, i, x["params"]))
    start = next((t for t, i, p in ok if i == 0), None)
    best = min(ok) if ok else None
    fmt = lambda v: f"{v:.1f}" if v else "—"
    print(f"| {tag} | {fmt(eager)} | {fmt(start)} | {fmt(best[0] if best else None)} | "
          f"{fmt(flops / best[0] / 1e6 if best else None)} | "
          f"{(f'{eager / best[0]:.3f}×' if best and eager else '—')} | {outs} | {best[2] if best else ''} |")
    bad = [json.dumps(x["result"].get("evidence"))[:240] for x in r if x["result"]["outcome"] != "ok"]
    if bad:
        print(f"|  | first non-ok: {bad[0]} | | | | | | |")
PYEOF
