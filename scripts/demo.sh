#!/usr/bin/env bash
# make demo: the main job on a bundled example, `kiln tune examples/vae_decoder.py` (capture, search,
# install check, report) — at real size on the GPU when there is one, else the CPU-sized --small run —
# ending with eager, kiln and torch.compile side by side in one plain sentence.
set -euo pipefail
cd "$(dirname "$0")/.."
export KILN_PYTHON="${KILN_PYTHON:-$PWD/.venv/bin/python}"
ex=examples/vae_decoder.py
if nvidia-smi -L >/dev/null 2>&1; then
    run=runs/demo-cuda
    # within five minutes: tune's own time budget covers capture, search, install check and report
    echo "kiln demo: GPU found: kiln tune $ex at real size into $run"
    build/kiln tune "$ex" --out "$run" --backend cuda --time 240
else
    run=runs/demo-cpu
    echo "kiln demo: no GPU here: kiln tune $ex --small on the CPU into $run"
    # torch.compile builds the model in C++ first: a minute or two on a small machine
    build/kiln tune "$ex" --out "$run" --backend cpu --budget 4 --compile --time 300 -- --small --device cpu
fi
PYTHONPATH="$PWD/python" "$KILN_PYTHON" - "$run/report.json" <<'EOF'
import json, sys
from kiln.install_cost import speedup_judge, speedup_text
report = json.load(open(sys.argv[1]))
m = report.get("model") or {}
if "eager_ms" not in m:
    sys.exit(f"kiln demo: the report has no model timing; see {sys.argv[1][:-5]}.md")
def ms(key):
    return f"{m[key]:.2f} ms" if isinstance(m.get(key), (int, float)) else "not measured"
def versus(key):  # the speedup the two spreads support, in the report's words
    if not isinstance(m.get(key), (int, float)):
        return ""
    spread = m.get(key.replace("_ms", "_spread_pct"))
    v, value, _ = speedup_judge(m["eager_ms"], m.get("eager_spread_pct"), m[key], spread)
    words = {"not_significant": "no difference from eager beyond the timing spread",
             "noisy_baseline": "eager's own timing too noisy to compare"}
    if v == "noisy":  # the table's "1.21x!": a win even at the spreads' ends, one of them over the limit
        return f" ({value:.2f}x eager, though a timing spread is over the limit)"
    return f" ({words.get(v) or speedup_text(v, value) + ' eager'})"
installed = m.get("kiln_entries_installed") or []
kiln = (f"{ms('kiln_ms')} with kiln's {len(installed)} kernel(s){versus('kiln_ms')}" if installed
        else "the same with kiln (no kiln kernel beat eager here, so none was installed)")
both = f" and {ms('kiln_compile_ms')} with both" if installed else ""
print(f"\nkiln demo: one forward of the model takes {ms('eager_ms')} eager, {kiln}, "
      f"{ms('compile_ms')} with torch.compile{versus('compile_ms')}{both}.")
rec = report.get("recommended")
if rec and rec["way"] != "eager":
    print(f"kiln demo: the fastest way here, beyond the timing spreads: {rec['way']} ({rec['how']}).")
EOF
