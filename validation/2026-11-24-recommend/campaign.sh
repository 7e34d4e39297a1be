#!/usr/bin/env bash
# How this directory was measured (root, for the emulated hosts): local calibration and
# one-device baselines first, then the emulated cluster whose ranking `recommend` predicted
# from them before it was run (python -m harness.recommend.ranking_check DIR netns:hosts=4,rate=250mbit
# mlp:M recsys:S). Usage: bash campaign.sh RESULTS_DIR
set -euxo pipefail
R=${1:?results directory}
stratbench comm --framework all --sizes 1KiB:16MiB --no-realtime --results "$R"
stratbench run --framework torch --strategy single_device --workload mlp:M --workload recsys:S --results "$R"
stratbench run --framework tf --strategy one_device --workload mlp:M --workload recsys:S --results "$R"
stratbench run --framework torch --strategy ddp --strategy parameter_server --workload mlp:M --workload recsys:S --cluster netns:hosts=4,rate=250mbit --results "$R"
stratbench run --framework tf --strategy multi_worker_mirrored --workload mlp:M --workload recsys:S --cluster netns:hosts=4,rate=250mbit --results "$R"
stratbench run --framework torch --strategy single_device --workload mlp:S --results "$R"
