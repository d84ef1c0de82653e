#!/usr/bin/env bash
# tune_device.sh: `kiln tune` as a new user runs it, with its defaults, on the bundled examples at real size
# (issue 14, "kiln tune finishes"): each run must end within its budget (--time, 600 s on cuda by default)
# with the report's four forward columns (eager, kiln, torch.compile, kiln + torch.compile), exit 0; kiln's graph
# mode (`kiln run --graph`) is a fifth where a chain entry was kept.
#
#   OUT=/tmp/out bash bench/tune_device.sh [EXAMPLE...]
#   examples: resnet50_fp32 resnet50_bf16_cl vae_fp32 vae_bf16 gemma4 qwen_moe (default: these six),
#   and torchvision's depthwise CNNs through examples/resnet50.py --model: mobilenet_v2_bf16
#   convnext_tiny_bf16 efficientnet_b0_bf16, and densenet121_bf16 (its cat -> batch norm -> ReLU chains);
#   and scripts written as third-party code, not for kiln (bench/unseen):
#   llama_1b_bf16 (a Llama-3.2-1B-shaped prefill) vit_b16_fp16 (torchvision's ViT-B/16, batch 64)
#   bert_base_fp16 (BERT-base over a padded, masked batch of 32 x 512) t5_encoder_bf16 (T5 v1.1-base encoder, 16 x 512)
#   gpt2_medium_bf16 (GPT-2 medium's generate: 8 prompts of 512 tokens, 32 new tokens each, the KV cache)
#
# Each example is one `kiln tune examples/X.py --out $WORK/runs/NAME -- ARGS` under `timeout -s INT` at its
# budget + 60 s (tune must never need it); the table ($OUT/summary.md, printed last) has per example the wall
# time against the budget, tune's exit status, the four forward times (report.json's model), how the search
# ended and how many entries were installed. $OUT/logs.tar.gz has every log, report and optimize table.
# TUNE_TIME=S passes --time S instead of the default (six examples at 600 s take an hour: run a few per
# call, or in the background across calls with bench/tune_background.sh). KEEP_RUNS=1 keeps each run's problems (deleted once its row is written).
# KILN_BENCH_SMALL=1 is the dry run on a machine without a GPU (--small sizes,
# --backend cpu, the cpu default budget).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-tune-out}
WORK=${WORK:-/tmp/kiln-tune}
SMALL=${KILN_BENCH_SMALL:-0}
PY=${KILN_PYTHON:-python3}
export KILN_PYTHON=$PY PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export KILN_CACHE_DIR=$WORK/cache XDG_CACHE_HOME=$WORK/xdg-cache
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor TRITON_CACHE_DIR=$WORK/triton
mkdir -p "$OUT" "$WORK/runs" "$WORK/logs"
[ -x build/kiln ] || make -j"$(nproc)" >"$WORK/logs/make.log" 2>&1 || { echo "make failed"; exit 1; }

declare -A ARGS=(
  [resnet50_fp32]="examples/resnet50.py"
  [resnet50_bf16_cl]="examples/resnet50.py --dtype bf16 --channels-last"
  [mobilenet_v2_bf16]="examples/resnet50.py --model mobilenet_v2 --dtype bf16"
  [convnext_tiny_bf16]="examples/resnet50.py --model convnext_tiny --dtype bf16"
  [efficientnet_b0_bf16]="examples/resnet50.py --model efficientnet_b0 --dtype bf16"
  [densenet121_bf16]="examples/resnet50.py --model densenet121 --dtype bf16"
  [vae_fp32]="examples/vae_decoder.py"
  [vae_bf16]="examples/vae_decoder.py --dtype bf16"
  [gemma4]="examples/gemma4.py"
  [qwen_moe]="examples/qwen_moe.py"
  [llama_1b_bf16]="bench/unseen/llama_prefill.py"
  [vit_b16_fp16]="bench/unseen/vit_infer.py"
  [bert_base_fp16]="bench/unseen/bert_encoder.py"
  [t5_encoder_bf16]="bench/unseen/t5_encoder.py"
  [gpt2_medium_bf16]="bench/unseen/gpt2_generate.py"
)
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(resnet50_fp32 resnet50_bf16_cl vae_fp32 vae_bf16 gemma4 qwen_moe)

TUNE_OPTS=()
[ -n "${TUNE_TIME:-}" ] && TUNE_OPTS+=(--time "$TUNE_TIME")
[ "$SMALL" = 1 ] && TUNE_OPTS+=(--backend cpu)
BUDGET=${TUNE_TIME:-$([ "$SMALL" = 1 ] && echo 120 || echo 600)}

ROWS=$WORK/rows.md
: >"$ROWS"
for name in "${NAMES[@]}"; do
  spec=${ARGS[$name]:-}
  [ -n "$spec" ] || { echo "unknown example: $name"; exit 2; }
  read -r script extra <<<"$spec"
  script_args=($extra)
  [ "$SMALL" = 1 ] && script_args+=(--small)
  run=$WORK/runs/$name
  rm -rf "$run"
  echo "== $name: kiln tune $script ${TUNE_OPTS[*]} -- ${script_args[*]}"
  t0=$(date +%s)
  timeout -s INT $((BUDGET + 60)) build/kiln tune "$script" --out "$run" "${TUNE_OPTS[@]}" -- "${script_args[@]}" \
    >"$WORK/logs/$name.log" 2>&1
  rc=$?
  wall=$(($(date +%s) - t0))  # whole seconds: the device machine has no bc
  "$PY" - "$name" "$run" "$rc" "$wall" "$BUDGET" >>"$ROWS" <<'EOF'
import json, os, sys
name, run, rc, wall, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
try:
    r = json.load(open(os.path.join(run, "report.json")))
except (OSError, ValueError):
    r = {}
m = r.get("model") or {}
md = open(os.path.join(run, "report.md")).read() if os.path.exists(os.path.join(run, "report.md")) else ""
four = "| eager ms | kiln ms | torch.compile ms | kiln + torch.compile ms |" in md
cell = lambda k, e=None: f"{m[k]:.3f}" if isinstance(m.get(k), (int, float)) else (m.get(e) or "-")[:24] if e else "-"
installed = sum(1 for e in r.get("entries") or [] if e.get("installed"))
ok = rc == 0 and wall <= budget and four
print(f"| {name} | {wall:.0f} / {budget:.0f} | {rc} | {cell('eager_ms')} | {cell('kiln_ms')} | "
      f"{cell('compile_ms', 'compile_error')} | "
      f"{'= compile' if str(m.get('kiln_compile_note', '')).startswith('nothing installed') else cell('kiln_compile_ms', 'kiln_compile_error')} | "
      f"{cell('kiln_graph_ms', 'kiln_graph_error')} | "
      f"{(r.get('search') or {}).get('stopped', '-')} | {installed} of {len(r.get('entries') or [])} | "
      f"{'yes' if ok else 'NO'} |")
EOF
  tail -1 "$ROWS"
  # the run's problems (tensors and reference sets: tens of GB for the VAE decoder) filled the device machine's
  # 64 GiB disk by the fifth example; the report, the decisions and the logs stay
  [ "${KEEP_RUNS:-0}" = 1 ] || rm -rf "$run/problems" "$run/candidates"
done

{
  echo "# kiln tune with its defaults at real size ($(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD))"
  echo
  echo "| example | wall s / budget s | exit | eager ms | kiln ms | torch.compile ms | kiln + torch.compile ms | kiln graph mode ms | search | installed | within budget, four columns |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
  cat "$ROWS"
} >"$OUT/summary.md"
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs $(cd "$WORK" && ls -d runs/*/report.* runs/*/report.failed.* runs/*/logs/optimize.json 2>/dev/null) 2>/dev/null
cat "$OUT/summary.md"
