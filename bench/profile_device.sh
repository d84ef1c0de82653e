#!/usr/bin/env bash
# profile_device.sh: Nsight Compute on one point of one kiln candidate, for a device call. The candidate is
# run first without the profiler (`kiln sweep PROBLEM_DIR --limit 1`: its source, and the reference data,
# so that the profiled run starts no reference), its kernels' names are read from the source's `// kiln:
# launch` lines, and ncu then follows kiln's gate into its worker (--target-processes all) and profiles
# one launch of each after the proof's (--set full: the SM runs at its base clock under ncu, so durations
# are longer than the gate's). Writes under $OUT: profile.ncu-rep (unless KEEP_REP=0), details.txt (ncu's
# sections), raw.csv.gz (every metric), sass.csv.gz (per-instruction stall samples), and prints the details'
# headline figures and bench/ncu_stalls.py's summary last.
#   OUT=/tmp/p bash bench/profile_device.sh bench/attention/attn_dense_16x16x1024x64 \
#       [--family attention] [--where 'ATT_BLOCK_M=192 ...']
# Any arguments after the problem go to `kiln sweep` (pick the family and point there; default: the
# start point of the first family that matches). NCU and BACKEND (default cuda) may be set.
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
PROBLEM=$1
shift
OUT=${OUT:-/tmp/kiln-profile}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
export KILN_PYTHON=${KILN_PYTHON:-python3}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
[ -x "$NCU" ] || { echo "profile_device: no ncu (set NCU=/path/to/ncu)" >&2; exit 2; }
[ -d "$PROBLEM" ] || { echo "profile_device: $PROBLEM: not a problem directory" >&2; exit 2; }
mkdir -p "$OUT"
[ -x build/kiln ] || make -j"$(nproc)" all >"$OUT/build.log" 2>&1 || { echo "build failed" >&2; exit 1; }
rm -rf "$OUT/src"
sweep=(build/kiln sweep "$PROBLEM" --backend "${BACKEND:-cuda}" --limit 1 --sets 1 --iters 5 --out "$OUT/src" "$@")
"${sweep[@]}" >"$OUT/sweep.log" 2>&1 || { echo "the candidate did not run:" >&2; tail -5 "$OUT/sweep.log" >&2; exit 1; }
tail -1 "$OUT/sweep.log"
names=$(grep -ho '// kiln: launch [A-Za-z_0-9]*' "$OUT"/src/* | awk '{print $4}' | sort -u)
[ -n "$names" ] || { echo "profile_device: no '// kiln: launch' line in $OUT/src" >&2; exit 1; }
regex="regex:^($(echo "$names" | paste -sd'|'))\$"
echo "profiling $regex"
timeout "${PROFILE_TIMEOUT:-300}" "$NCU" --target-processes all --kernel-name "$regex" --launch-skip 2 \
    --launch-count "$(echo "$names" | wc -l)" --set full --import-source no -f -o "$OUT/profile" \
    "${sweep[@]}" >"$OUT/ncu.log" 2>&1
echo "ncu exit $?"
[ -f "$OUT/profile.ncu-rep" ] || { tail -5 "$OUT/ncu.log" >&2; exit 1; }
"$NCU" --import "$OUT/profile.ncu-rep" --page details >"$OUT/details.txt" 2>&1
"$NCU" --import "$OUT/profile.ncu-rep" --page raw --csv 2>/dev/null | gzip -9 >"$OUT/raw.csv.gz"
"$NCU" --import "$OUT/profile.ncu-rep" --page source --csv --print-source sass 2>/dev/null |
    gzip -9 >"$OUT/sass.csv.gz"
[ "${KEEP_REP:-1}" = 0 ] && rm -f "$OUT/profile.ncu-rep"
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Registers Per|Achieved Occ" \
    "$OUT/details.txt"
python3 bench/ncu_stalls.py "$OUT/sass.csv.gz" --top "${TOP:-25}"
