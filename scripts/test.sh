#!/usr/bin/env bash
# Runs kiln's tests: every cmocka binary in build/tests, then pytest over tests/py, and prints one
# closing line with the totals. Usage: scripts/test.sh [c|py|all]   (the Makefile builds first)
set -u
cd "$(dirname "$0")/.."
what=${1:-all}
passed=0 failed=0 skipped=0
failures=""

if [ "$what" = all ] || [ "$what" = c ]; then
    for t in build/tests/test_*; do
        [ -x "$t" ] || continue
        out=$("$t" 2>&1)
        rc=$?
        printf '%s\n' "$out"
        p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
        f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
        s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
        passed=$((passed + ${p:-0}))
        failed=$((failed + ${f:-0}))
        skipped=$((skipped + ${s:-0}))
        if [ $rc -ne 0 ] && [ -z "$f" ]; then
            failed=$((failed + 1)) # crashed before cmocka's summary
        fi
        [ $rc -ne 0 ] && failures="$failures $(basename "$t")"
    done
fi

if [ "$what" = all ] || [ "$what" = py ]; then
    PY=${KILN_PYTHON:-.venv/bin/python}
    mkdir -p build
    KILN_PYTHON=$PY PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} \
        "$PY" -m pytest tests/py -q -rs --junitxml=build/pytest.xml
    rc=$?
    if [ -f build/pytest.xml ]; then
        read -r pp pf ps < <("$PY" - <<'PYEOF'
import xml.etree.ElementTree as ET
root = ET.parse("build/pytest.xml").getroot()
suites = [root] if root.tag == "testsuite" else list(root)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
s = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - s, f, s)
PYEOF
)
        passed=$((passed + pp))
        failed=$((failed + pf))
        skipped=$((skipped + ps))
    fi
    # pytest exits 5 when it collected nothing; anything else non-zero is a failure
    if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then
        failures="$failures pytest"
        [ "${pf:-0}" -eq 0 ] && failed=$((failed + 1))
    fi
fi

[ -n "$failures" ] && echo "failing:$failures"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ -z "$failures" ]
