#!/usr/bin/env bash
# Bytes on the wire per strategy (issue 19): every multi-process strategy of both frameworks
# on a dense (mlp:M) and an embedding-heavy (recsys:S) model, on two emulated clusters.
# Needs root (network namespaces). Then: stratbench validate --results THIS_DIR
set -euo pipefail
out=${1:-$(dirname "$0")}
common=(--workload mlp:M --workload recsys:S --steps 8 --warmup 2 --repeats 2 --results "$out")
for cluster in netns:hosts=3,rate=1gbit netns:hosts=4,rate=250mbit; do
  python -m harness.cli run --framework torch --strategy single_device --strategy ddp \
    --strategy fsdp --strategy parameter_server --strategy parameter_server_async \
    --cluster "$cluster" "${common[@]}"
  python -m harness.cli run --framework tf --strategy one_device \
    --strategy multi_worker_mirrored --strategy parameter_server \
    --cluster "$cluster" "${common[@]}"
done
