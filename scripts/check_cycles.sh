#!/usr/bin/env bash
# Lists every pair of kiln's source files that call into each other (A uses a symbol B defines and B
# uses one A defines), read with nm from the object of each src/**/*.c (kernel templates are not
# objects); exits 1 when there is such a pair, 2 when an object is missing.
# Usage: scripts/check_cycles.sh [BUILD_DIR]   (run make first)
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
missing=0
# One line per (source, kind, symbol): D for a global definition (weak ones included), U for a use
# of a symbol the object does not define.
for c in $(find src -name '*.c' -not -path '*/templates/*' | sort); do
    o="$build/obj/${c%.c}.o"
    if [ ! -f "$o" ]; then
        echo "check_cycles: $o is missing (run make first)" >&2
        missing=1
        continue
    fi
    nm -g "$o" | awk -v f="$c" '
        NF == 2 && $1 == "U" { print f, "U", $2; next }
        NF == 3 && $2 ~ /^[TDBRVWCGSi]$/ { print f, "D", $3 }'
done >"${TMPDIR:-/tmp}/kiln_symbols.$$"
[ $missing -eq 0 ] || { rm -f "${TMPDIR:-/tmp}/kiln_symbols.$$"; exit 2; }
awk '
    $2 == "D" { owner[$3] = owner[$3] " " $1; next }
    { uses[NR] = $1 " " $3 }
    END {
        for (i in uses) {
            split(uses[i], u, " ")
            n = split(owner[u[2]], defs, " ")
            for (k = 1; k <= n; k++)
                if (defs[k] != u[1]) edge[u[1] " " defs[k]] = 1
        }
        bad = 0
        for (e in edge) {
            split(e, p, " ")
            if (p[1] < p[2] && ((p[2] " " p[1]) in edge)) {
                print "cycle: " p[1] " <-> " p[2]
                bad = 1
            }
        }
        if (!bad) print "check_cycles: no two files of src/ call into each other"
        exit bad
    }' "${TMPDIR:-/tmp}/kiln_symbols.$$"
rc=$?
rm -f "${TMPDIR:-/tmp}/kiln_symbols.$$"
exit $rc
