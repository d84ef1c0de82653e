#!/usr/bin/env bash
# capture_size_device.sh: capture at any size on the GPU machine (issue 14, "Capture at any size"). For each
# case of bench/size_ops.py (single ops and small models with 2-4 GiB inputs, at real size): `kiln capture`
# with the default --max-bytes must write every hot op as a problem (nothing skipped, big inputs drawn from
# statistics), then `kiln tune` must end with a report (exit 0). A markdown table for bench/RESULTS.md is
# printed last and written to $OUT/capture-size-results.md; logs in $OUT/<case>-{capture,tune}.log. Each
# run is removed after its row is written: the reference data of 4 GiB inputs is three sets of inputs and
# outputs on disk (about 24 GiB), and the machine has 64.
#
#   bash bench/capture_size_device.sh [CASE...]   (default: all; one call may not fit them all in 10 minutes)
#   SMALL=1 bash bench/capture_size_device.sh      (CPU-sized, to check the script itself)
# Extra options go in $CAPTURE_OPTS (e.g. "--max-bytes 8GiB") and $TUNE_OPTS (e.g. "--time 120" where tune
# has it, or "--budget 4").
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-capture-size}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export KILN_PYTHON=${KILN_PYTHON:-python3}
small=()
backend=cuda
if [ -n "${SMALL:-}" ]; then small=(--small --device cpu); backend=cpu; fi
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(softmax log_softmax gelu silu rmsnorm layer_norm group_norm batch_norm sum_axis
                                 mean_axis avg_pool conv_norm_act masked_softmax)

summary="$OUT/capture-size-results.md"
{
  echo "| case | inputs | capture exit | s | problems | skipped | drawn from statistics | tune exit | s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$summary"
for c in "${cases[@]}"; do
  run="$OUT/runs/$c"
  rm -rf "$run"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  build/kiln capture bench/size_ops.py --out "$run" --device "$backend" ${CAPTURE_OPTS:-} -- "$c" "${small[@]}" \
    >"$OUT/$c-capture.log" 2>&1
  crc=$?
  t1=$(date +%s)
  # shellcheck disable=SC2086
  build/kiln tune bench/size_ops.py --out "$run" --backend "$backend" --skip-capture ${TUNE_OPTS:-} \
    -- "$c" "${small[@]}" >"$OUT/$c-tune.log" 2>&1
  trc=$?
  t2=$(date +%s)
  row=$("$KILN_PYTHON" - "$run" <<'EOF'
import json, sys
try:
    info = json.load(open(sys.argv[1] + "/capture.json"))
    groups = json.load(open(sys.argv[1] + "/model.json"))["groups"]
except OSError as e:
    print(f"- | - | - | - ({e.strerror})")
    sys.exit()
hot = [g for g in groups if g["not_a_problem"] is None][:info["top"]]
missing = [g["aten"] for g in hot if not g["problem"]]
drawn = sum(1 for p in info["problems"] if p["drawn_inputs"])
print(f"{len(info['problems'])} | {len(info['skipped'])}{' ' + ', '.join(missing) if missing else ''} | {drawn}")
EOF
)
  inputs=$(grep -o 'inputs [0-9.]* GiB [a-z0-9.]*' "$OUT/$c-capture.log" | head -1)
  echo "| $c | ${inputs#inputs } | $crc | $((t1 - t0)) | $row | $trc | $((t2 - t1)) |" >>"$summary"
  [ -n "${KEEP:-}" ] || rm -rf "$run"
  # one archive of every log so far: the device tool brings back only a few files of a call
  tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls ./*.log 2>/dev/null) 2>/dev/null
done
cat "$summary"
