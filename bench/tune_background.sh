#!/usr/bin/env bash
# tune_background.sh: bench/tune_device.sh for longer than one device call. The first call copies the tree to
# $KT/tree and starts the examples there, one after another, in a new process session (it outlives the call
# while the machine is held); every call then waits up to $WAIT s and prints, per example, whether it is done
# and the last lines of its log, and puts each finished example's summary, logs and reports into $OUT/NAME.tgz.
# Call it again within the device's idle release (30 s) to keep the machine; it is done when it prints
# "all done".
#
#   WAIT=560 OUT=$OUT bash bench/tune_background.sh [NAME[:SECONDS]...]
#   NAME: an example of tune_device.sh; SECONDS: its --time (default: tune's own, 600 s on cuda).
#   default: vae_fp32 vae_bf16 resnet50_fp32 resnet50_bf16_cl gemma4 qwen_moe.
# Each example's run keeps to $KT/NAME (tune_device.sh deletes its problems once its row is written).
# AFTER='COMMAND' runs once the examples are done, in $KT/tree (e.g. bench/graph_profile.py on
# $KT/gemma4/runs/gemma4/library); its output goes to $OUT/after.log at every call.
set -uo pipefail
cd "$(dirname "$0")/.."
KT=${KT:-/tmp/kiln-bg}
OUT=${OUT:-/tmp/kiln-bg-out}
WAIT=${WAIT:-560}
mkdir -p "$OUT"
if [ ! -f "$KT/job.sh" ]; then
  specs=("$@")
  [ ${#specs[@]} -gt 0 ] || specs=(vae_fp32 vae_bf16 resnet50_fp32 resnet50_bf16_cl gemma4 qwen_moe)
  mkdir -p "$KT"
  cp -a . "$KT/tree"
  {
    echo "cd $KT/tree"
    for s in "${specs[@]}"; do
      name=${s%%:*}
      t=$([ "$name" != "$s" ] && echo "TUNE_TIME=${s#*:} " || true)
      echo "${t}OUT=$KT/$name/out WORK=$KT/$name bash bench/tune_device.sh $name > $KT/$name.log 2>&1; touch $KT/$name.done"
    done
    [ -n "${AFTER:-}" ] && echo "{ $AFTER ; } > $KT/after.log 2>&1"
    echo "touch $KT/all.done"
  } >"$KT/job.sh"
  printf '%s\n' "${specs[@]%%:*}" >"$KT/names"
  setsid nohup bash "$KT/job.sh" >/dev/null 2>&1 </dev/null &
  echo "started: ${specs[*]}"
fi
t0=$(date +%s)
while [ $(($(date +%s) - t0)) -lt "$WAIT" ] && [ ! -f "$KT/all.done" ]; do sleep 3; done
echo "waited $(($(date +%s) - t0)) s"
while read -r name; do
  log=$KT/$name/logs/$name.log
  if [ -f "$KT/$name.done" ]; then
    echo "== $name: done"
    (cd "$KT" && tar czf "$OUT/$name.tgz" "$name/out" "$name/logs" \
       $(ls -d "$name"/runs/*/report.* "$name"/runs/*/library/install.json "$name"/runs/*/logs/optimize.json 2>/dev/null))
    tail -1 "$KT/$name/out/summary.md" 2>/dev/null
  elif [ -f "$log" ]; then
    echo "== $name: running"
    grep -v "candidates  best" "$log" | tail -3 | cut -c1-250
  fi
done <"$KT/names"
if [ -f "$KT/after.log" ]; then
  cp "$KT/after.log" "$OUT/after.log"
  echo "== after: $(wc -l <"$KT/after.log") lines in after.log"
fi
[ -f "$KT/all.done" ] && echo "all done"
true
