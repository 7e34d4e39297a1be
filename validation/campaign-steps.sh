#!/usr/bin/env bash
# Step times per strategy (issue 19): the four strategies an emulated cluster runs (torch ddp
# and parameter_server, TF multi_worker_mirrored and parameter_server, with each framework's
# one-device baseline) on a dense model whose exchange outweighs its compute at the slowest
# rate (mlp:M) and an embedding-heavy one (recsys:S), on 2, 4 and 6 hosts at 100 Mbit/s,
# 300 Mbit/s and 1 Gbit/s, plus a racked cluster; first the loopback sweeps the predictions
# take the libraries' own costs from. Needs root. Then: stratbench validate --results DIR
set -euo pipefail
out=${1:-$(dirname "$0")}
python -m harness.cli comm --framework all --world 2 --no-realtime --sizes 1KiB:4MiB --results "$out"
common=(--workload mlp:M --workload recsys:S --steps 8 --warmup 2 --repeats 1 --results "$out")
for hosts in 2 4 6; do
  for rate in 100mbit 300mbit 1gbit; do
    cluster=netns:hosts=$hosts,rate=$rate
    python -m harness.cli run --framework torch --strategy single_device --strategy ddp \
      --strategy parameter_server --cluster "$cluster" "${common[@]}"
    python -m harness.cli run --framework tf --strategy one_device \
      --strategy multi_worker_mirrored --strategy parameter_server --cluster "$cluster" "${common[@]}"
  done
done
