#!/usr/bin/env bash
# Step times per strategy (issue 19), measured 2026-11-25 on this 2-core machine (root, for
# the emulated hosts), in this order:
# 1. the loopback sweeps the predictions take each library's own cost per message and byte
#    from;
# 2. the four strategies an emulated cluster runs (torch ddp and parameter_server, TF
#    multi_worker_mirrored and parameter_server, with each framework's one-device baseline) on
#    a dense model whose exchange outweighs its compute at the slowest rate (mlp:M) and an
#    embedding-heavy one (recsys:S), on 2, 4 and 6 hosts at 100 Mbit/s, 300 Mbit/s and 1 Gbit/s;
# 3. the same strategies on one machine, no links (what `validate` takes each runtime's own
#    time per step from: harness/predict/step.py runtime_overhead);
# 4. a racked cluster (2 racks, 200 Mbit/s uplinks);
# 5. the loopback sweeps at 4 and 6 ranks, which the 4- and 6-host runs take each library's
#    cost per message and byte from (software_costs: the nearest rank count swept);
# 6. two more sweeps at each of 2, 4 and 6 ranks, measured two hours after the runs, once
#    software_costs took the median of the latest 3 sweeps rather than the one latest: one
#    sweep put TF's cost per ring step at 1.08 ms on 4 ranks and 2.03 ms on 6, the next two at
#    1.26/1.26 and 1.56/1.62 (docs/SIMULATOR.md says what that moved).
# 7. each library's 16 MiB all-reduce swept on every cluster above (three rounds; the whole
#    set three times, back to back), measured four to five hours after the runs: the share of each cluster's links each library's
#    collectives reach (harness/calibrate/link_share.py), which the step predictions take, as one
#    runs nccl-tests on a cluster before trusting a job's numbers.
# The 4-host 300 Mbit/s runs checked in were measured last, again: the first ones shared the
# machine with a test suite and were dropped, unscored.
# Then: stratbench validate --results DIR (python -m harness.cli from the checkout).
set -euo pipefail
out=${1:-$(dirname "$0")}
run() { python -m harness.cli run "$@" --workload mlp:M --workload recsys:S --results "$out"; }
python -m harness.cli comm --framework all --world 2 --no-realtime --sizes 1KiB:4MiB \
  --results "$out"
for hosts in 2 4 6; do
  for rate in 100mbit 300mbit 1gbit; do
    cluster=netns:hosts=$hosts,rate=$rate
    run --framework torch --strategy single_device --strategy ddp --strategy parameter_server \
      --cluster "$cluster" --steps 8 --warmup 2 --repeats 1
    run --framework tf --strategy one_device --strategy multi_worker_mirrored \
      --strategy parameter_server --cluster "$cluster" --steps 8 --warmup 2 --repeats 1
  done
done
run --framework torch --strategy single_device --strategy ddp --strategy parameter_server \
  --steps 10 --warmup 2 --repeats 2
run --framework tf --strategy one_device --strategy multi_worker_mirrored \
  --strategy parameter_server --steps 10 --warmup 2 --repeats 2
cluster=netns:hosts=4,rate=800mbit,racks=2,uplink=200mbit
run --framework torch --strategy single_device --strategy ddp --strategy parameter_server \
  --cluster "$cluster" --steps 8 --warmup 2 --repeats 1
run --framework tf --strategy one_device --strategy multi_worker_mirrored \
  --strategy parameter_server --cluster "$cluster" --steps 8 --warmup 2 --repeats 1
for world in 4 6; do
  python -m harness.cli comm --framework all --world "$world" --no-realtime --sizes 1KiB:4MiB \
    --results "$out"
done
for round in 1 2; do
  for world in 2 4 6; do
    python -m harness.cli comm --framework all --world "$world" --no-realtime --sizes 1KiB:4MiB \
      --results "$out"
  done
done
for set in 1 2 3; do
  for hosts in 2 4 6; do
    for rate in 100mbit 300mbit 1gbit; do
      python -m harness.cli comm --framework all --cluster "netns:hosts=$hosts,rate=$rate" \
        --world "$hosts" --sizes 16MiB:16MiB --rounds 3 --no-realtime --results "$out"
    done
  done
  python -m harness.cli comm --framework all --cluster "$cluster" --world 4 \
    --sizes 16MiB:16MiB --rounds 3 --no-realtime --results "$out"
done
