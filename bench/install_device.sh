#!/usr/bin/env bash
# install_device.sh: issue 6 (kernels back into the model) on the GPU machine, in one call of about 540 s:
#   (a) dispatch overhead of kiln.install on the cuda path: gate hit over the bare kernel launch, gate miss
#       over eager, per call (bench/install_overhead.py; the issue asks <= 3 us each);
#   (b) CUDA graphs: kiln's kernels captured in torch.cuda.CUDAGraph replay what eager computes
#       (tests/py/test_install.py's two cuda tests, and install_overhead.py per entry and for the model);
#   (c) kiln tune on the four bundled examples at real size: eager vs kiln vs torch.compile forward time, max
#       output difference, per entry speedup and installed-or-not with the reason (each RUN/report.md).
# A short table is printed last; $OUT gets summary.md and logs.tar.gz (every log, report and JSON).
#
#   OUT=/tmp/out bash bench/install_device.sh [PART...]
#   parts: tiny (builds the small library of (a) and (b)), graph, overhead, resnet50, vae_decoder, gemma4,
#          qwen_moe; default all of them. graph and overhead need tiny (made here when not listed).
#
# How (c) fits: `kiln tune` runs capture, optimize and the install check in one process chain, but it has
# no --max-bytes, and its --top goes to capture and optimize alike, where optimize counts problems no family
# matches (GEMMs, convs: the hottest ops of every example), so `kiln tune --top 3` optimises nothing on
# ResNet-50. So each example is run as tune's three steps with the options this needs:
#   1. kiln capture --top $CAPTURE_TOP --max-bytes $MAX_BYTES --random-sets 0 --no-reference (all captures
#      at the start, $CAPTURE_JOBS at a time: they are mostly host work; the gate needs 3 sets per workload,
#      which step 2 draws, so the capture keeps only the real tensors);
#   2. the $TOP hottest problems that a kernel family matches (kiln sweep --list) get their reference data
#      (kiln.reference, one process) and `kiln optimize RUN DIRS --budget $BUDGET --time T`;
#   3. kiln tune --skip-capture --skip-optimize: the install check and the report (torch.compile off for
#      qwen_moe unless COMPILE_QWEN=1: it takes 421 s on the H200, ../shared/GPU.md).
# Every step runs under `timeout -s INT` with a share of what is left of $BUDGET_S; kiln tune writes its
# report when interrupted (an interrupted torch.compile only loses the compile column). Everything written
# goes under $WORK (default /tmp/kiln-install): runs, reference data, kiln's, inductor's and triton's caches.
#
# Dry run on a machine without a GPU: KILN_BENCH_SMALL=1 (the examples' --small sizes, --backend cpu).
# Other knobs: BUDGET_S (515: the last step is stopped then, +10 s to kill one that ignores SIGINT, +5 s of
# summary), TOP (3), BUDGET (12), OPT_TIME (15), CAPTURE_TOP (20), MAX_BYTES (4GiB),
# CAPTURE_JOBS (3), ROUNDS (3), COMPILE_QWEN (0), DISPATCH (python|cpp|auto: kiln tune --dispatch; unset: python).
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET_S=${BUDGET_S:-515}
DEADLINE=$((START + BUDGET_S))
OUT=${OUT:-/tmp/kiln-install-out}
WORK=${WORK:-/tmp/kiln-install}
LOG=$WORK/logs
SMALL=${KILN_BENCH_SMALL:-0}
TOP=${TOP:-3}
BUDGET=${BUDGET:-12}
OPT_TIME=${OPT_TIME:-15}
CAPTURE_TOP=${CAPTURE_TOP:-20}
MAX_BYTES=${MAX_BYTES:-4GiB}
CAPTURE_JOBS=${CAPTURE_JOBS:-3}
ROUNDS=${ROUNDS:-3}
COMPILE_QWEN=${COMPILE_QWEN:-0}
PY=${KILN_PYTHON:-python3}
KILN=$PWD/build/kiln
export KILN_PYTHON=$PY KILN_HOME=${KILN_HOME:-$PWD}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export KILN_CACHE_DIR=$WORK/cache XDG_CACHE_HOME=$WORK/xdg-cache
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor TRITON_CACHE_DIR=$WORK/triton
# build/kiln and build/libkiln_rt.so find build/lib (cJSON, SQLite, microhttpd) through RUNPATH $ORIGIN/lib,
# as in bench/capture_device.sh; no LD_LIBRARY_PATH (it would hand Python's sqlite3 module Debian's library).

if [ "$SMALL" = 1 ]; then
    BACKEND=cpu
    EX_ARGS="--small --device cpu --iters 2"
    OVH_ARGS="--rounds 3 --calls 20 --dispatch ${OVH_DISPATCH:-both}" # a CPU call of the tiny model's ops takes milliseconds, not microseconds
else
    BACKEND=cuda
    EX_ARGS="--iters 2"
    OVH_ARGS="--rounds 15 --calls 200 --dispatch ${OVH_DISPATCH:-both}"
fi
TINY_SCRIPT=tests/data/install/tiny_model.py
TINY_ARGS="--device $BACKEND --rows 256 --hidden 4096 --iters 3" # the sizes test_install.py's cuda tests use
TINY=$WORK/runs/tiny
# In this order; each gets its weight's share of the time left, the last one all of it (gemma4, whose
# torch.compile takes longest of the three that compile, is last so that it gets what the others leave).
EXAMPLES=(resnet50 vae_decoder qwen_moe gemma4)
declare -A WEIGHT=([resnet50]=10 [vae_decoder]=10 [qwen_moe]=10 [gemma4]=12)

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tiny graph overhead "${EXAMPLES[@]}")
want() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }
for p in "${parts[@]}"; do
    case $p in tiny | graph | overhead | resnet50 | vae_decoder | gemma4 | qwen_moe) ;;
        *) echo "install_device.sh: unknown part '$p'" >&2; exit 2 ;;
    esac
done
if { want graph || want overhead; } && ! want tiny; then parts+=(tiny); fi

case $WORK in
    /tmp/?*) ;;
    *) echo "install_device.sh: WORK=$WORK is removed first; put it under /tmp" >&2; exit 2 ;;
esac
case $OUT/ in "$WORK"/*) echo "install_device.sh: OUT=$OUT must not be inside WORK=$WORK" >&2; exit 2 ;; esac
rm -rf "$WORK"
mkdir -p "$OUT" "$LOG" "$WORK/runs" "$KILN_CACHE_DIR"
left() { echo $((DEADLINE - $(date +%s))); }
note() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$LOG/steps.log"; }
# stage NAME STATUSFILE LIMIT_S LOGFILE CMD...: runs CMD under timeout -s INT, records "NAME rc seconds".
stage() {
    local name=$1 status=$2 limit=$3 logf=$4 rc=0 t0
    shift 4
    t0=$(date +%s)
    if [ "$limit" -lt 5 ]; then
        echo "$name skipped 0" >>"$status"
        note "$(basename "$status" .status) $name: skipped, no time left"
        return 0
    fi
    timeout -s INT -k 10 "$limit" "$@" >>"$logf" 2>&1 || rc=$?
    echo "$name $rc $(($(date +%s) - t0))" >>"$status"
    note "$(basename "$status" .status) $name: exit $rc after $(($(date +%s) - t0)) s (limit $limit s)"
    return 0
}
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

finish() {
    local rc=$?
    set +e
    note "summary (exit $rc)"
    "$PY" - "$WORK" "$BACKEND" "$START" "${parts[@]}" <<'PYEOF' >"$OUT/summary.md" 2>>"$LOG/summary.err"
import json, os, re, subprocess, sys, time
work, backend, start, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
log = os.path.join(work, "logs")
def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default
def statuses(name):
    out = {}
    for line in read(os.path.join(log, name + ".status")).splitlines():
        step, rc, s = (line.split() + ["", "", ""])[:3]
        out[step] = (rc, s)
    return out
def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)
dev = "cpu"
try:
    dev = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.strip() or "cpu"
except (OSError, subprocess.SubprocessError):
    pass
print(f"# kiln install on the device (issue 6): {dev}, backend {backend}, "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {int(time.time()) - start} s wall")
print()
print("## (a) dispatch overhead per call (bench/install_overhead.py, host us, median)")
print()
ov = {}
try:
    ov = json.loads(read(os.path.join(log, "overhead.json"), "{}"))
except ValueError:
    pass
if "overhead" not in parts:
    print("not in this call")
elif not ov.get("entries"):
    st = statuses("tiny").get("overhead")
    print(f"not measured (overhead step: {'exit %s after %s s' % st if st else 'not run'}; see logs/overhead.log)")
else:
    print("| entry | replaces | dispatch | eager | kiln hit | bare launch | hit overhead | miss overhead shape / "
          "misaligned | <= 3 us | CUDA graph |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|")
    by = ov.get("by_dispatch") or {ov.get("dispatch", "python"): ov["entries"]}
    rows = [(d, name, r) for d, entries in by.items() for name, r in entries.items()]
    for d, name, r in rows:
        if "error" in r:
            print(f"| {name} | {r.get('target', '')} | {d} | | | | | | | {r['error']} |")
            continue
        m = r["median_us"]
        miss = [v for v in (r["miss_shape_overhead_host_us"], r["miss_align_overhead_host_us"]) if v is not None]
        ok = r["hit_overhead_host_us"] <= ov.get("limit_us", 3) and all(v <= ov.get("limit_us", 3) for v in miss)
        g = ((ov.get("graph_by_dispatch") or {}).get(d) or ov.get("graph") or {}).get(name)
        gt = "-"
        if g:
            gt = ("ok" if g.get("ok") else "FAILED") + (f" (diff {g['max_abs_diff']:.2g})" if g.get("max_abs_diff")
                                                        is not None else f" {g.get('error', '')}")
        print(f"| {name} | {r['target']} | {d} | {fmt(m['eager']['host'], '.2f')} | {fmt(m['kiln']['host'], '.2f')} | "
              f"{fmt(m['bare']['host'], '.2f')} | {fmt(r['hit_overhead_host_us'], '.2f')} | "
              f"{fmt(r['miss_shape_overhead_host_us'], '.2f')} / {fmt(r['miss_align_overhead_host_us'], '.2f')} | "
              f"{'yes' if ok else 'NO'} | {gt} |")
    if ov.get("model_graph"):
        print(f"\nwhole tiny model captured in a CUDA graph with kiln installed: {ov['model_graph']}")
print()
print("## (b) CUDA graphs: tests/py/test_install.py cuda tests")
print()
pt = read(os.path.join(log, "pytest_cuda.log"))
summary = [l for l in pt.splitlines() if re.search(r"(passed|failed|error|skipped|no tests ran)", l)]
st = statuses("tiny").get("pytest")
if "graph" not in parts:
    print("not in this call")
elif st is None:
    print("pytest: not run (see logs/tiny.log)")
else:
    print(f"pytest: {summary[-1].strip() if summary else 'no summary line'} (exit {st[0]} after {st[1]} s)")
for l in pt.splitlines():
    if "hit overhead" in l or l.startswith(("SKIPPED", "FAILED", "ERROR")):
        print(f"    {l.strip()}")
print()
print("## (c) kiln tune, the four examples at " + ("--small size (dry run)" if backend == "cpu" else "real size"))
print()
print("| example | capture | optimize (problems -> entries) | tune | eager ms | kiln ms | torch.compile ms | kiln x "
      "| compile x | max diff kiln | max diff compile | installed |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
reports = []
for ex in ("resnet50", "vae_decoder", "qwen_moe", "gemma4"):
    if ex not in parts:
        continue
    st = statuses(ex)
    run = os.path.join(work, "runs", ex)
    def step(k):
        if k not in st:
            return "not run"
        rc, s = st[k]
        what = {"0": "ok", "skipped": "skipped", "124": "cut at its time limit", "137": "killed at its time limit"}
        return f"{what.get(rc, 'exit ' + rc)} {s} s"
    chosen = read(os.path.join(log, ex + ".chosen")).split()
    n_entries = "-"
    try:
        n_entries = len(json.loads(read(os.path.join(run, "library", "manifest.json"), "{}"))["entries"])
    except (ValueError, KeyError):
        pass
    rep = {}
    try:
        rep = json.loads(read(os.path.join(run, "report.json"), "{}"))
    except ValueError:
        pass
    m = rep.get("model") or {}
    comp = fmt(m.get("compile_ms")) if "compile_ms" in m else \
        ("interrupted" if str(m.get("compile_error", "")).startswith("interrupted") else
         "failed" if m.get("compile_error") else "off")
    ents = rep.get("entries") or []
    inst = f"{sum(1 for e in ents if e.get('installed'))}/{len(ents)}" if ents else "-"
    print(f"| {ex} | {step('capture')} | {step('optimize')} ({len(chosen)} -> {n_entries}) | {step('tune')} | "
          f"{fmt(m.get('eager_ms'))} | {fmt(m.get('kiln_ms'))} | {comp} | {fmt(m.get('kiln_speedup'), '.2f')} | "
          f"{fmt(m.get('compile_speedup'), '.2f')} | {fmt(m.get('kiln_max_abs_diff'), '.3g')} | "
          f"{fmt(m.get('compile_max_abs_diff'), '.3g')} | {inst} |")
    md = read(os.path.join(run, "report.md"))
    if md:
        reports.append((ex, "\n".join(md.splitlines()[2:]).strip()))  # without its title line
    elif st:
        reports.append((ex, f"no report (see logs/{ex}.log)"))
for ex, md in reports:
    print()
    print(f"### report: {ex}")
    print()
    print(md)
PYEOF
    cat "$OUT/summary.md"
    cp "$OUT/summary.md" "$LOG/summary.md" 2>/dev/null
    # the reports and libraries (small) with the logs; the captured tensors stay in $WORK
    (cd "$WORK" && find runs -maxdepth 3 \( -name 'report.*' -o -name 'capture.json' -o -name 'manifest.json' \
        -o -name 'install.json' -o -name '*.log' \) -not -path '*/problems/*' >"$WORK/tar.list" 2>/dev/null)
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs -T "$WORK/tar.list" 2>>"$LOG/summary.err"
    note "done: $OUT/summary.md, $OUT/logs.tar.gz"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

note "install_device.sh: parts ${parts[*]}; backend $BACKEND; budget $BUDGET_S s; work $WORK; out $OUT"
{
    "$KILN" --version 2>&1 || echo "build/kiln does not run"
    ldd "$KILN" build/libkiln_rt.so 2>&1 | grep -E 'not found|=> .*build/lib' || true
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv 2>&1 || true
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1
    df -h /tmp "$WORK" 2>&1 || true
    free -g 2>&1 || true
} >"$LOG/env.log" 2>&1 || true

# Two helpers, written under $WORK so that `timeout` can run them (named so as not to shadow a stdlib module):
# kiln_select.py RUN N: the N hottest problems of RUN (definition.json "kiln": {"share"}) that a family matches.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/kiln_select.py" <<'PYEOF'
import glob, json, os, subprocess, sys
run, n, kiln, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = []
for d in glob.glob(os.path.join(run, "problems", "*", "definition.json")):
    try:
        share = float((json.load(open(d)).get("kiln") or {}).get("share") or 0)
    except (OSError, ValueError):
        continue
    rows.append((share, os.path.dirname(d)))
chosen = []
for share, d in sorted(rows, reverse=True):
    p = subprocess.run([kiln, "sweep", d, "--list", "--backend", backend], capture_output=True, text=True)
    line = (p.stdout + p.stderr).strip().splitlines()[:1]
    print(f"select: {share:7.2%} {os.path.basename(d)}: {line[0] if line else p.returncode}", file=sys.stderr)
    if p.returncode == 0 and " matches family" in p.stdout:
        chosen.append(d)
        if len(chosen) == n:
            break
print(" ".join(chosen))
PYEOF
# kiln_refs.py DEVICE DIR...: the gate's reference data (3 sets per workload, where and as kiln optimize would
# write it: DIR/kiln/ref-DEVICE) in one process instead of one per problem.
cat >"$WORK/bin/kiln_refs.py" <<'PYEOF'
import sys, time
from kiln.reference import build_reference
device, dirs = sys.argv[1], sys.argv[2:]
for d in dirs:
    t0 = time.perf_counter()
    build_reference(d, device=device, quiet=False)
    print(f"reference data for {d}: {time.perf_counter() - t0:.1f} s", flush=True)
PYEOF

# ---- A. captures, $CAPTURE_JOBS at a time (host work mostly; their GPU time only ranks the ops)
capture_one() { # NAME SCRIPT ARGS...
    local name=$1 script=$2
    shift 2
    stage capture "$LOG/$name.status" "$(min 180 $(($(left) * 2 / 5)))" "$LOG/$name.log" \
        env OMP_NUM_THREADS="$CAPTURE_THREADS" "$KILN" capture "$script" --out "$WORK/runs/$name" \
        --device "$BACKEND" --top "$CAPTURE_TOP" --max-bytes "$MAX_BYTES" --random-sets 0 --no-reference -- "$@"
}
CAPTURE_THREADS=$(($(nproc) / CAPTURE_JOBS))
[ "$CAPTURE_THREADS" -ge 1 ] || CAPTURE_THREADS=1
note "A. captures ($CAPTURE_JOBS at a time, $CAPTURE_THREADS CPU threads each)"
jobs_running=0
queue=()
want tiny && queue+=(tiny)
for ex in qwen_moe gemma4 vae_decoder resnet50; do want "$ex" && queue+=("$ex"); done
for name in "${queue[@]}"; do
    if [ "$jobs_running" -ge "$CAPTURE_JOBS" ]; then
        wait -n || true
        jobs_running=$((jobs_running - 1))
    fi
    if [ "$name" = tiny ]; then
        # shellcheck disable=SC2086
        capture_one tiny "$TINY_SCRIPT" $TINY_ARGS &
    else
        # shellcheck disable=SC2086
        capture_one "$name" "examples/$name.py" $EX_ARGS &
    fi
    jobs_running=$((jobs_running + 1))
done
wait || true

# ---- B. the tiny library: (a) overhead and (b) CUDA graphs
if want tiny; then
    note "B. tiny library ($TINY_ARGS)"
    chosen=""
    for d in "$TINY"/problems/softmax_int_* "$TINY"/problems/module_RMSNorm_*; do
        [ -d "$d" ] && chosen+="$d "
    done
    echo "$chosen" >"$LOG/tiny.chosen"
    if [ -n "$chosen" ]; then
        # shellcheck disable=SC2086
        stage refs "$LOG/tiny.status" "$(min 60 $(($(left) / 8)))" "$LOG/tiny.log" \
            "$PY" "$WORK/bin/kiln_refs.py" "$BACKEND" $chosen
        # shellcheck disable=SC2086
        stage optimize "$LOG/tiny.status" "$(min 60 $(($(left) / 6)))" "$LOG/tiny.log" \
            "$KILN" optimize "$TINY" $chosen --backend "$BACKEND" --budget 3 --time 12 --iters 20
        # shellcheck disable=SC2086
        stage tune "$LOG/tiny.status" "$(min 90 $(($(left) / 5)))" "$LOG/tiny.log" \
            "$KILN" tune ${DISPATCH:+--dispatch "$DISPATCH"} "$TINY_SCRIPT" --out "$TINY" --backend "$BACKEND" --skip-capture --skip-optimize \
            --rounds 3 --no-compile -- $TINY_ARGS
    else
        note "tiny: no softmax / RMSNorm problem captured (see logs/tiny.log)"
    fi
    if want graph; then
        stage pytest "$LOG/tiny.status" "$(min 150 $(($(left) / 4)))" "$LOG/pytest_cuda.log" \
            env KILN_TEST_CUDA_RUN="$TINY" "$PY" -m pytest -p no:cacheprovider --basetemp="$WORK/pytest" -q -rs -s \
            tests/py/test_install.py::test_cuda_hits_misses_and_graph_replay \
            tests/py/test_install.py::test_cuda_overhead_is_reported
    fi
    if want overhead; then
        # shellcheck disable=SC2086
        stage overhead "$LOG/tiny.status" "$(min 120 $(($(left) / 4)))" "$LOG/overhead.log" \
            "$PY" bench/install_overhead.py --library "$TINY/library" --script "$TINY_SCRIPT" $OVH_ARGS \
            --json "$LOG/overhead.json" -- $TINY_ARGS
        sed -n '/^## kiln install overhead/,$p' "$LOG/overhead.log" || true
    fi
fi

# ---- C. the examples: refs + optimize + tune each, in a share of the time left
remaining=()
for ex in "${EXAMPLES[@]}"; do want "$ex" && remaining+=("$ex"); done
while [ ${#remaining[@]} -gt 0 ]; do
    ex=${remaining[0]}
    remaining=("${remaining[@]:1}")
    total=${WEIGHT[$ex]}
    for r in "${remaining[@]}"; do total=$((total + ${WEIGHT[$r]})); done
    slice=$(($(left) * ${WEIGHT[$ex]} / total))
    run=$WORK/runs/$ex
    status=$LOG/$ex.status
    note "C. $ex: $slice s of $(left) s left"
    if [ ! -f "$run/capture.json" ]; then
        note "$ex: no capture (see logs/$ex.log)"
        continue
    fi
    if [ "$slice" -lt 45 ]; then
        echo "optimize skipped 0" >>"$status"
        echo "tune skipped 0" >>"$status"
        note "$ex: skipped, $slice s is too little"
        continue
    fi
    end=$(($(date +%s) + slice))
    chosen=$("$PY" "$WORK/bin/kiln_select.py" "$run" "$TOP" "$KILN" "$BACKEND" 2>>"$LOG/$ex.log" || true)
    echo "$chosen" >"$LOG/$ex.chosen"
    for d in "$run"/problems/*/; do # disk: the problems not chosen are done with
        case " $chosen " in *" ${d%/} "*) ;; *) find "$d" -name '*.safetensors' -delete 2>/dev/null || true ;; esac
    done
    if [ -z "$chosen" ]; then
        note "$ex: no captured problem matches a kernel family"
    else
        # shellcheck disable=SC2086
        stage refs "$status" $((slice / 5)) "$LOG/$ex.log" "$PY" "$WORK/bin/kiln_refs.py" "$BACKEND" $chosen
        opt_time=$(min "$OPT_TIME" $((slice / 5)))
        # shellcheck disable=SC2086
        stage optimize "$status" $((opt_time + 40)) "$LOG/$ex.log" \
            "$KILN" optimize "$run" $chosen --backend "$BACKEND" --budget "$BUDGET" --time "$opt_time" --iters 20
    fi
    compile=()
    [ "$ex" = qwen_moe ] && [ "$COMPILE_QWEN" != 1 ] && compile=(--no-compile)
    if [ -f "$run/library/manifest.json" ]; then
        # shellcheck disable=SC2086
        stage tune "$status" $((end - $(date +%s))) "$LOG/$ex.log" \
            "$KILN" tune ${DISPATCH:+--dispatch "$DISPATCH"} "examples/$ex.py" --out "$run" --backend "$BACKEND" --skip-capture --skip-optimize \
            --rounds "$ROUNDS" "${compile[@]}" -- $EX_ARGS
    else
        echo "tune skipped 0" >>"$status"
        note "$ex: no library, no tune"
    fi
    find "$run/problems" -name '*.safetensors' -delete 2>/dev/null || true # disk: the tensors are done with
done
