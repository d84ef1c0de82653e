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
    # about five minutes: tune's time budget where it has one, else a small candidate budget
    limit=(--budget 8)
    build/kiln tune --help | grep -q -- '--time' && limit=(--time 240)
    echo "kiln demo: GPU found: kiln tune $ex at real size into $run"
    build/kiln tune "$ex" --out "$run" --backend cuda "${limit[@]}"
else
    run=runs/demo-cpu
    echo "kiln demo: no GPU here: kiln tune $ex --small on the CPU into $run"
    build/kiln tune "$ex" --out "$run" --backend cpu --budget 4 --compile -- --small --device cpu
fi
"$KILN_PYTHON" - "$run/report.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1])).get("model") or {}
def ms(key):
    return f"{m[key]:.2f} ms" if isinstance(m.get(key), (int, float)) else "not measured"
if "eager_ms" not in m:
    sys.exit(f"kiln demo: the report has no model timing; see {sys.argv[1][:-5]}.md")
kiln = m.get("kiln_ms")
speed = f" ({m['eager_ms'] / kiln:.2f}x eager)" if isinstance(kiln, (int, float)) and kiln > 0 else ""
print(f"\nkiln demo: one forward of the model takes {ms('eager_ms')} eager, {ms('kiln_ms')} with kiln's "
      f"kernels{speed}, {ms('compile_ms')} with torch.compile and {ms('kiln_compile_ms')} with both.")
EOF
