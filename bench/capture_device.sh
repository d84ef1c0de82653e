#!/usr/bin/env bash
# capture_device.sh: `kiln capture` of the four bundled examples at their real size on the GPU machine, the
# configurations of ../shared/GPU.md "Whole models". Each capture's ranked table and wall times land in
# $OUT/capture-<config>.log and $OUT/runs/<config>/capture.json; a markdown summary for bench/RESULTS.md is
# printed last and written to $OUT/capture-results.md.
#
#   bash bench/capture_device.sh [CONFIG...]    (default: all; one call may not fit them all in 10 minutes)
#   configs: resnet50-fp32 resnet50-bf16-cl vae-fp32 vae-bf16 gemma4 qwen-moe
# Extra capture options go in $CAPTURE_OPTS (e.g. "--max-bytes 8GiB" or "--no-reference").
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-capture}
mkdir -p "$OUT/runs"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${KILN_PYTHON:-python3}

declare -A SCRIPT=(
  [resnet50-fp32]="examples/resnet50.py"
  [resnet50-bf16-cl]="examples/resnet50.py --dtype bf16 --channels-last --batch 128"
  [vae-fp32]="examples/vae_decoder.py"
  [vae-bf16]="examples/vae_decoder.py --dtype bf16"
  [gemma4]="examples/gemma4.py"
  [qwen-moe]="examples/qwen_moe.py"
)
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(resnet50-fp32 resnet50-bf16-cl vae-fp32 vae-bf16 gemma4 qwen-moe)

summary="$OUT/capture-results.md"
: >"$summary"
for c in "${configs[@]}"; do
  if [ -z "${SCRIPT[$c]:-}" ]; then echo "unknown config $c" >&2; exit 2; fi
  read -r script args <<<"${SCRIPT[$c]} "
  log="$OUT/capture-$c.log"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  $PY -m kiln.capture $script --out "$OUT/runs/$c" ${CAPTURE_OPTS:-} -- $args >"$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  {
    echo "### kiln capture $c ($script $args): exit $rc, $(( (end - start) / 1000000000 )) s wall"
    echo '```'
    grep -v '^ERROR:' "$log" | sed -n '/^kiln capture: .* on /,$p'
    echo '```'
  } >>"$summary"
done
cat "$summary"
