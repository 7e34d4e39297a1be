#!/usr/bin/env bash
# Measured steps on a GPU (issue 36, item 5): ResNet-50, BERT-large (128 tokens) and GPT-2 XL
# trained in torch in fp32 (torch's defaults: TF32 convolutions, fp32 matmuls) and bf16
# (autocast), one process per case, each a JSON line in OUT/device_steps.jsonl, beside
# nvidia-smi's view of the machine. Needs torch and numpy only (a lent GPU machine has no
# more), so the device's minutes go to measuring: about 2 minutes for all six on an H100,
# most of it fp32 GPT-2 XL.
#   campaign-gpu.sh OUT [STEPS] [WARMUP]          (default 10 steps after 3 warm-up)
# A case that runs out of memory or crashes writes a failed line and the others go on.
# Then, where stratbench is installed: stratbench devicecheck --compare OUT/device_steps.jsonl
# Last, where simpy imports (a lent machine has none: carry its wheel, .library/device's
# README), the GEMMs the device model times for the H100 corpus rows, each measured (about
# a minute on an H100): OUT/gemms.jsonl, then, here,
#   python -m harness.validate.gemm_shapes --compare OUT/gemms.jsonl
set -uo pipefail
out=${1:?usage: campaign-gpu.sh OUT [STEPS] [WARMUP]}
steps=${2:-10}
warmup=${3:-3}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm \
  --format=csv > "$out/nvidia-smi.csv" 2>&1 || true
python -c "import torch; print(torch.__version__, torch.version.cuda)" > "$out/torch.txt" 2>&1
for case in resnet50:256 bert_large:64 gpt2_xl:4; do
  model=${case%%:*} batch=${case##*:}
  for precision in fp32 bf16; do
    if ! timeout 300 python -m harness.measure.device_step --model "$model" \
        --precision "$precision" --batch "$batch" --steps "$steps" --warmup "$warmup" \
        >> "$out/device_steps.jsonl" 2> "$out/$model-$precision.stderr"; then
      reason=$(grep -v '^\s*$' "$out/$model-$precision.stderr" | tail -n 1 | tr '"\\' "''")
      printf '{"model": "%s", "precision": "%s", "batch": %s, "device": "cuda", "status": "failed", "reason": "%s"}\n' \
        "$model" "$precision" "$batch" "${reason:0:300}" >> "$out/device_steps.jsonl"
    fi
  done
done
cat "$out/device_steps.jsonl"
if python -c "import simpy" 2> /dev/null; then
  python -m harness.validate.gemm_shapes --list > "$out/gemm_shapes.jsonl" \
    2> "$out/gemm_shapes.stderr"
  timeout 400 python -m harness.measure.gemm_step --shapes "$out/gemm_shapes.jsonl" \
    > "$out/gemms.jsonl" 2> "$out/gemms.stderr"
  grep -c '"status": "ok"' "$out/gemms.jsonl"
else
  echo "no simpy here: the GEMM sweep is skipped (carry simpy's wheel)" | tee "$out/gemms.skipped"
fi
