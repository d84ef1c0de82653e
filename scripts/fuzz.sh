#!/usr/bin/env bash
# Runs every libFuzzer target build/fuzz/fuzz_* for SECONDS seconds each, on a copy of its seed corpus
# (tests/fuzz/corpus/<target>/) in build/fuzz/corpus-work/, with its dictionary when there is one.
# Prints one line per target; exits non-zero when any target finds a crash, a leak, a timeout or an
# out-of-memory (the reproducer is left in build/fuzz/artifacts/<target>/).
# Usage: scripts/fuzz.sh SECONDS   (make fuzz-smoke builds the targets and runs this)
set -u
cd "$(dirname "$0")/.."

seconds=${1:-30}
case "$seconds" in
'' | *[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac

shopt -s nullglob
targets=(build/fuzz/fuzz_*)
bins=()
for t in "${targets[@]}"; do
    [[ -f "$t" && -x "$t" && "$t" != *.* ]] && bins+=("$t")
done
if [ ${#bins[@]} -eq 0 ]; then
    echo "fuzz: no targets in build/fuzz/ (run: make fuzz)" >&2
    exit 2
fi

# UBSan reports and goes on by default; make it stop so that libFuzzer keeps the input.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

status=0
for bin in "${bins[@]}"; do
    name=$(basename "$bin")
    work=build/fuzz/corpus-work/$name
    artifacts=build/fuzz/artifacts/$name
    log=build/fuzz/$name.log
    rm -rf "$work" "$artifacts"
    mkdir -p "$work" "$artifacts"
    if [ -d "tests/fuzz/corpus/$name" ]; then
        cp tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
    fi
    dict=()
    [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
    "$bin" "$work" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(find "$work" -type f | wc -l)
    if [ $rc -eq 0 ] && grep -q 'runtime error:' "$log"; then
        rc=1 # a UBSan report that did not stop the run
    fi
    if [ $rc -ne 0 ]; then
        found=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:' "$log" || true)
        echo "$name: FINDING (exit $rc) after ${runs:-?} runs: ${found:-see log}; log $log, reproducer in $artifacts/"
        status=1
    else
        echo "$name: ok, ${runs:-?} runs in ${seconds}s, corpus $corpus inputs"
    fi
done
exit $status
