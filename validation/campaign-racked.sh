#!/usr/bin/env bash
# Racked clusters (issue 39): every strategy that trains across emulated hosts, on clusters
# whose hosts sit in racks joined through a shaped uplink, evenly and unevenly split (the
# emulator fills rack r with hosts i where i*K//N == r: 5 hosts in 2 racks are 3+2, 3 are
# 2+1), with the README's calibration beside them: local runs of every strategy (each
# runtime's own cost), three loopback sweeps at each cluster's rank count, and on each
# cluster three 16 MiB sweeps of every op (each library's share of its links) and, where
# embedding sharding runs, three of torch's at 256 KiB-4 MiB.
# Needs root; run it on an otherwise idle machine, from a frozen copy of the code (a git
# worktree), so that no edit reaches a run in flight.
#   campaign-racked.sh OUT [local] [sweeps] [HOSTS:RATE:RACKS:UPLINK:WORKLOAD ...]
# (default: every stage below). Stages run in the order given; a rerun adds runs beside the
# earlier ones. WORKLOADS="recsys:S" makes `local` run that workload only; SWEEP=small
# skips a cluster's 16 MiB sweeps (taken by an earlier stage on the same cluster).
# Then: stratbench validate --results OUT
set -euo pipefail
out=${1:-$(dirname "$0")/2026-11-27-racked}
shift || true
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(local 5:150mbit:2:100mbit:recsys:M 4:400mbit:2:100mbit:mlp:M
                                  3:300mbit:2:150mbit:mlp:M sweeps)
# then, the same day: WORKLOADS=recsys:S ... local; SWEEP=small ... 3:300mbit:2:150mbit:recsys:S
sb() { python -m harness.cli "$@" --results "$out"; }
flags() { for s in $1; do printf -- '--strategy\n%s\n' "$s"; done; }
torch_for() {  # the torch strategies that train this workload across hosts
  case $1 in
    recsys:*) echo "single_device ddp parameter_server embedding_sharding" ;;
    *) echo "single_device ddp fsdp parameter_server" ;;
  esac
}
mapfile -t tf_strategies < <(flags "one_device multi_worker_mirrored parameter_server")
# a racked recsys:M step moves every table through a 100 Mbit/s uplink under ddp (~16 s):
# few steps, one repeat, time enough
common=(--steps 4 --warmup 1 --repeats 1 --timeout 1800)
for stage in "${stages[@]}"; do
  case $stage in
    local)
      for workload in ${WORKLOADS:-recsys:M mlp:M}; do
        mapfile -t torch_strategies < <(flags "$(torch_for "$workload")")
        sb run --framework torch "${torch_strategies[@]}" --workload "$workload" "${common[@]}"
        sb run --framework tf "${tf_strategies[@]}" --workload "$workload" "${common[@]}"
      done ;;
    sweeps)
      for world in ${WORLDS:-5 4 3}; do
        for _ in 1 2 3; do sb comm --framework all --world "$world"; done
      done ;;
    *:*:*:*:*)
      IFS=: read -r hosts rate racks uplink family size <<< "$stage"
      workload=$family:$size
      cluster=netns:hosts=$hosts,rate=$rate,racks=$racks,uplink=$uplink
      if [ "${SWEEP:-1}" != small ]; then
        for _ in 1 2 3; do
          sb comm --framework all --cluster "$cluster" --world "$hosts" --sizes 16MiB:16MiB
        done
      fi
      mapfile -t torch_strategies < <(flags "$(torch_for "$workload")")
      if [ "$family" = recsys ]; then
        for _ in 1 2 3; do
          sb comm --framework torch --cluster "$cluster" --world "$hosts" --sizes 256KiB:4MiB
        done
      fi
      sb run --framework torch "${torch_strategies[@]}" --workload "$workload" \
        --cluster "$cluster" "${common[@]}"
      sb run --framework tf "${tf_strategies[@]}" --workload "$workload" --cluster "$cluster" \
        "${common[@]}" ;;
    *) echo "campaign-racked.sh: unknown stage '$stage' (local, sweeps or" \
            "HOSTS:RATE:RACKS:UPLINK:WORKLOAD)" >&2
       exit 2 ;;
  esac
done
