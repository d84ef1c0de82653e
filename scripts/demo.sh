#!/usr/bin/env bash
# The main job on the bundled example: prove and time the example softmax kernel with `kiln eval`, on the
# GPU when there is one (cuda backend), else on the CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
ex=examples/softmax_bf16
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "kiln demo: GPU found, using the cuda backend"
    exec build/kiln eval "$ex" "$ex/softmax.cu" --backend cuda
fi
echo "kiln demo: no GPU here, using the cpu backend"
exec build/kiln eval "$ex" "$ex/softmax.c" --backend cpu
