"""`stratbench recommend`: ranked strategies per workload and target cluster, with reasons."""

from __future__ import annotations

from typing import Any

import click

from harness.commands.common import (
    CONTEXT_SETTINGS,
    info,
    json_option,
    mechanism_options,
    print_json,
    results_option,
    stated_mechanisms,
)
from harness.core.paths import results_dir
from workloads.optimizers import OPTIMIZER_SLOTS
from workloads.precision import PRECISIONS as PRECISION_NAMES

HELP = """
Which strategy, on how many devices, within your budget, and why.

Which strategy, on how many devices, on your cluster, within your budget, and why.

Targets: any cluster: `local`, an emulated `netns:...` or `slurm:...` cluster (measured where it
ran; an emulated cluster never run is predicted from this machine's calibration, the rules
`validate` scores), or any topology `simulate` takes
(two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit, preset:NAME[,hosts=1|16], a system file:
--system FILE or preset:PATH[,hosts=N], ...). A sweep's smaller configurations are placed as a
scheduler would (a host, then a rack, filled first).

Models no device holds get data x pipeline x tensor layouts (1F1B and interleaved, sequence
parallelism, the distributed optimizer, the least recomputation that fits), FSDP x TP and FSDP
with every layer checkpointed. --precision: what a described device computes in (as simulate's),
for compute, the bytes exchanged and the memory.

--optimizer: the state each device keeps and the update's traffic; by default the workload's (a
known model's cited setup: DLRM sgd, ResNet-50 and VGG-16 momentum, Inception-v3 rmsprop; adam
otherwise). --global-batch N: the samples of every step, whatever the device count (described
clusters only): data-parallel replicas accumulate micro-batches of the workload's batch (FSDP
exchanging with each, the others once a step: a sparse model's exchange then carries every row
its micro-batches touched), layouts cut it into micro-batches; without it each device takes the
workload's batch, so the step grows with the devices.

Context- and expert-parallel layouts are answered as the stacks that run them (Megatron-Core,
torchtitan) with the option that sets each degree. Say what your stack does and every layout
searched runs with it: --tp-overlap, --overlap-param-gather,

--ep-overlap, --grad-reduce after-backward, --p2p blocking, --grad-accumulation fp32-copy|half,
--context-comm all-gather (simulate's options, the same words),

--no-sequence-parallel, --no-selective-recompute; the table's last note says what was assumed of
each (a project file's target says it as stack = { tp_overlap = true, ... }). Or name a stack as
a published run used it, --stack nemo-24.09 | megatron-lm-2024 | megatron-core-0.8 |
bigscience-megatron-deepspeed (simulate takes it too; a target: stack = "nemo-24.09"), and give
beside it only the options where yours differs (a target: stack = { like = "nemo-24.09",
tp_overlap = false }). Layouts keep under the share of a device's memory the fullest published
run needs by the same memory model (88%) where they can, and are called tight where they cannot
(python -m harness.validate.layout_sweep: stacks hold more than the model counts). The layout
search is checked against the layouts experts published (python -m
harness.recommend.layout_check: on each published model-parallel run's cluster and batch, the
pick beside the authors' layout, both simulated with the authors' stack) and against a sweep one
team measured (python -m harness.validate.layout_sweep: BigScience's 26 measured rows on Jean
Zay; the simulator's pick measured 1.1% behind their best).

Each strategy is swept over device counts (1, 2, 4, ... within a host, then whole hosts); with
--budget the fastest configuration that costs less wins, with --deadline the cheapest that
finishes in time, else the fastest whose scaling efficiency stays above

--min-efficiency (0.5), and "do not distribute" when no distributed one does. Workloads:
built-ins, known models by name (resnet50, bert_large, gpt3_175b, ...: docs/MODELS.md),
profile:..., or your own file.py:callable after one run (its size comes from the run, or from
params=/flops_per_sample= it declares). Compute on a described topology is the one measured here
unless --device names a preset whose device speed, memory and price apply; prices are the
preset's, --price, or an assumed price of a machine like this one (said so). Memory per device
counts parameters, gradients, optimizer state and activations. The answer leads: the pick, why,
how sure (the simulator's validation error and the margin to the runner-up), the runner-up; then
each strategy at its best device count. --json prints {verdicts, ranking, sweep (every
configuration, with its Pareto flag), missing}. A budget nothing meets (with the nearest option
and by how much it misses), a model that fits nowhere, an unknown model: one line, exit 2.
"""


@click.command("recommend", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--workload", "workloads", multiple=True, metavar="WORKLOAD",
              help="Workload(s) to recommend for: FAMILY:SIZE, a known model (resnet50), "
                   "profile:..., or your own file.py:callable after one run (default: every "
                   "measured one).")
@click.option("--target", "targets", multiple=True, metavar="SPEC",
              help="Any cluster: local, netns:..., slurm:..., or a topology as `simulate` "
                   "takes it (two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit, "
                   "preset:NAME[,hosts=1|4|32], ...). Repeatable; default: the measured "
                   "clusters plus preset:eth25_v100,hosts=4 and preset:dgx_h100_ib,hosts=1|16.")
@click.option("--system", "systems", multiple=True, metavar="FILE",
              help="A system file (JSON or TOML; harness/sim/systems/presets/*.json are examples) "
                   "to recommend for: the same as --target preset:FILE. Repeatable.")
@click.option("--budget", type=float, default=None, metavar="USD",
              help="Spend at most this much: the fastest configuration that costs less.")
@click.option("--deadline", type=float, default=None, metavar="HOURS",
              help="Finish within this many hours: the cheapest configuration that does.")
@click.option("--min-efficiency", type=click.FloatRange(0.0, 1.0), default=0.5,
              show_default=True,
              help="Without --budget/--deadline: the fastest configuration whose scaling "
                   "efficiency is at least this (else one device).")
@click.option("--device", default=None, metavar="PRESET",
              help="The target's devices are those of this preset (e.g. dgx_h100_ib): their "
                   "speed (with the workload's FLOPs), memory and price. Default for a "
                   "described topology: devices like this machine (compute measured here).")
@click.option("--samples", type=float, default=None, metavar="N",
              help="Samples to train (dataset size x epochs) for the time and cost columns "
                   "[default: 1e7].")
@click.option("--price", type=float, default=None, metavar="USD",
              help="Price per device-hour for measured and emulated targets (presets carry "
                   "their own).")
@click.option("--precision", type=click.Choice(list(PRECISION_NAMES)),
              default=None,
              help="What a described device computes in (as `simulate --precision`): the "
                   "compute, FSDP's bytes exchanged (replicas' gradients stay fp32, as "
                   "autocast keeps them) and the memory. Default: the device's training "
                   "precision for compute, fp32 bytes for the exchange.")
@click.option("--global-batch", type=click.IntRange(min=1), default=None, metavar="N",
              help="Samples per optimizer step over all devices (a described cluster's): "
                   "every candidate trains at it, data-parallel replicas accumulating "
                   "micro-batches of the workload's batch, model-parallel layouts splitting "
                   "it into micro-batches. Default: the workload's batch per device, so the "
                   "step grows with the devices.")
@click.option("--optimizer", type=click.Choice(list(OPTIMIZER_SLOTS)), default=None,
              help="What updates the weights: the optimizer state each device keeps and the "
                   "update's traffic. Default: the workload's (a known model's cited "
                   "setup: DLRM sgd, ResNet-50 and VGG-16 momentum, Inception-v3 rmsprop; "
                   "adam otherwise).")
@mechanism_options
@click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
              help="Whether your stack splits norms and dropout along the sequence in the "
                   "tensor-parallel group (Megatron-Core's --sequence-parallel, torchtitan's "
                   "SequenceParallel); without it they stay whole on every tensor rank.")
@click.option("--selective-recompute/--no-selective-recompute", default=True,
              show_default=True,
              help="Whether your stack can recompute the attention's scores alone "
                   "(Megatron-Core's --recompute-granularity selective, torchtitan's "
                   "selective activation checkpointing); without it a layout that does not "
                   "fit recomputes every layer.")
@results_option
@json_option
def command(workloads: tuple[str, ...], targets: tuple[str, ...], systems: tuple[str, ...],
            budget: float | None,
            deadline: float | None, min_efficiency: float, device: str | None,
            samples: float | None, price: float | None, precision: str | None,
            global_batch: int | None, optimizer: str | None, results: str | None,
            as_json: bool, **stack: Any) -> None:
    """Which strategy, on how many devices, within your budget, and why."""
    # ``stack``: the mechanism options (mechanism_options) and the two capabilities above
    from harness.recommend.recommender import (
        DEFAULT_SAMPLES,
        format_table,
        recommend_from_store,
    )
    from harness.sim.systems.preset import is_system_path

    mechanisms, named = stated_mechanisms(**stack)
    if named and not as_json:
        info(f"stack {named}")
    targets = (*targets, *(f"preset:{s if is_system_path(s) else './' + s}" for s in systems))
    read_as = _how_read(targets)
    answer = recommend_from_store(results_dir(results), workloads=workloads, targets=targets,
                                 samples=DEFAULT_SAMPLES if samples is None else samples,
                                 price=price, budget=budget,
                                 deadline_s=None if deadline is None else deadline * 3600,
                                 min_efficiency=min_efficiency, device=device,
                                 precision=precision, global_batch=global_batch,
                                 optimizer=optimizer, mechanisms=mechanisms)
    if as_json:
        print_json({**answer.as_json(), "stack": named, "read_as": read_as})
    else:
        for line in read_as:
            info(line)
        click.echo(format_table(answer))


def _how_read(targets: tuple[str, ...]) -> list[str]:
    """Each described topology as it was read, so a per-device NIC rate a user meant per
    host shows beside the answer."""
    from harness.recommend.targets import parse_targets
    from harness.sim.systems.spec import describe_topology

    return [f"read {target.spec} as: {describe_topology(target.spec)}"
            for target in parse_targets(targets) if target.kind == "topology"]
