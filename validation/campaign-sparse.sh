#!/usr/bin/env bash
# Sparse models (issue 28): every strategy that trains an embedding model across emulated
# hosts (torch parameter_server, ddp and embedding_sharding; TF multi_worker_mirrored and
# parameter_server), with each framework's one-device baseline (torch's updates touched rows
# only), on recsys:M and recsys:L, 2, 4 and 6 hosts at 100 and 300 Mbit/s; first what the
# predictions take their calibration from: the loopback sweeps (three at each rank count,
# all-to-all included), local runs of every strategy (each runtime's own cost), and on each
# cluster's links three sweeps of every op at 16 MiB (each library's share of them) and three
# of torch's at 256 KiB-4 MiB (gloo's all-to-all share changes with the size: embedding
# sharding's exchange reads it near its own).
# Needs root; run it on an otherwise idle machine (the local runs time compute).
#   campaign-sparse.sh OUT [sweeps] [local] [HOSTS:RATE ...]     (default: every stage)
# Stages run in the order given; a stage rerun adds runs beside the earlier ones.
# TORCH="single_device embedding_sharding" TF=none campaign-sparse.sh OUT 4:300mbit
# runs only those strategies (the cluster sweeps are skipped with SWEEP=0, and only the small
# ones run with SWEEP=small; WORKLOADS="recsys:M" runs that workload only; WORLDS="2 6"
# sweeps loopback at those rank counts only).
# Then: stratbench validate --results OUT
set -euo pipefail
out=${1:-$(dirname "$0")/2026-11-26-sparse}
shift || true
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(sweeps local 4:300mbit 4:100mbit 2:300mbit 2:100mbit
                                  6:300mbit 6:100mbit)
sb() { python -m harness.cli "$@" --results "$out"; }
flags() { [ "$1" = none ] || for s in $1; do printf -- '--strategy\n%s\n' "$s"; done; }
mapfile -t torch_strategies < <(flags "${TORCH:-single_device parameter_server ddp embedding_sharding}")
mapfile -t tf_strategies < <(flags "${TF:-one_device multi_worker_mirrored parameter_server}")
# ddp moves every row of every table each step (recsys:L: 512 MB, ~80 s at 100 Mbit/s on 4
# hosts, and its overlap probe three more): few steps, one repeat, and time enough (600 s,
# the default, timed ddp out there, and TF's collectives, which wait half of it, failed
# multi_worker_mirrored's first broadcast of the tables)
common=(--steps 4 --warmup 1 --repeats 1 --timeout 1800)
runs() {  # framework, its strategies..., then the run's own flags after --
  local fw=$1; shift
  local chosen=() ; while [ "$1" != -- ]; do chosen+=("$1"); shift; done; shift
  [ ${#chosen[@]} -eq 0 ] || sb run --framework "$fw" "${chosen[@]}" "$@" "${common[@]}"
}
for stage in "${stages[@]}"; do
  case $stage in
    sweeps)
      for world in ${WORLDS:-2 4 6}; do
        for _ in 1 2 3; do sb comm --framework all --world "$world"; done
      done ;;
    local)
      for workload in ${WORKLOADS:-recsys:M recsys:L}; do
        runs torch "${torch_strategies[@]}" -- --workload "$workload"
        runs tf "${tf_strategies[@]}" -- --workload "$workload"
      done ;;
    *:*)
      hosts=${stage%%:*} rate=${stage#*:}
      cluster=netns:hosts=$hosts,rate=$rate
      if [ "${SWEEP:-1}" = 1 ]; then
        for _ in 1 2 3; do
          sb comm --framework all --cluster "$cluster" --world "$hosts" --sizes 16MiB:16MiB
        done
      fi
      if [ "${SWEEP:-1}" != 0 ]; then
        for _ in 1 2 3; do
          sb comm --framework torch --cluster "$cluster" --world "$hosts" --sizes 256KiB:4MiB
        done
      fi
      for workload in ${WORKLOADS:-recsys:M recsys:L}; do
        runs torch "${torch_strategies[@]}" -- --workload "$workload" --cluster "$cluster"
        runs tf "${tf_strategies[@]}" -- --workload "$workload" --cluster "$cluster"
      done ;;
    *) echo "campaign-sparse.sh: unknown stage '$stage' (sweeps, local or HOSTS:RATE)" >&2
       exit 2 ;;
  esac
done
