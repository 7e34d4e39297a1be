#!/usr/bin/env bash
# How this directory was measured (root, for the emulated hosts; nothing else running):
# gloo's loopback fit, then pipeline runs of transformer:M with 2 and 4 stages (one per
# emulated host), 4 and 8 micro-batches, at 400 and 100 Mbit/s, each with its own
# one-process baseline; last, two local pipeline runs, the loopback floor of a pipeline
# pass (harness/predict/step.py, pass_overhead). Usage: bash campaign.sh RESULTS_DIR
set -euxo pipefail
R=${1:?results directory}
stratbench comm --framework torch --world 2 --no-realtime --sizes 1KiB:4MiB --results "$R"
for rate in 400mbit 100mbit; do
  for hosts in 2 4; do
    for m in 4 8; do
      stratbench run --framework torch --strategy single_device --strategy pipeline \
        --workload transformer:M --cluster "netns:hosts=$hosts,rate=$rate" \
        --microbatches "$m" --results "$R"
    done
  done
done
for m in 2 8; do
  stratbench run --framework torch --strategy single_device --strategy pipeline \
    --workload transformer:M --microbatches "$m" --results "$R"
done
