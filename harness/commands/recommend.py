"""`stratbench recommend`: ranked strategies per workload and target cluster, with reasons."""

from __future__ import annotations

from typing import Any

import click

from harness.commands.common import (
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


@click.command("recommend")
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
        to_records,
    )
    from harness.sim.systems.preset import is_system_path

    mechanisms, named = stated_mechanisms(**stack)
    if named and not as_json:
        info(f"stack {named}")
    targets = (*targets, *(f"preset:{s if is_system_path(s) else './' + s}" for s in systems))
    read_as = _how_read(targets)
    frame = recommend_from_store(results_dir(results), workloads=workloads, targets=targets,
                                 samples=DEFAULT_SAMPLES if samples is None else samples,
                                 price=price, budget=budget,
                                 deadline_s=None if deadline is None else deadline * 3600,
                                 min_efficiency=min_efficiency, device=device,
                                 precision=precision, global_batch=global_batch,
                                 optimizer=optimizer, mechanisms=mechanisms)
    if as_json:
        print_json({"verdicts": frame.attrs.get("verdicts", []),
                    "mechanisms": frame.attrs.get("mechanisms", ""), "stack": named,
                    "ranking": to_records(frame),
                    "sweep": frame.attrs.get("sweep", []),
                    "missing": frame.attrs.get("missing", []), "read_as": read_as})
    else:
        for line in read_as:
            info(line)
        click.echo(format_table(frame))


def _how_read(targets: tuple[str, ...]) -> list[str]:
    """Each described topology as it was read, so a per-device NIC rate a user meant per
    host shows beside the answer."""
    from harness.recommend.targets import parse_targets
    from harness.sim.systems.spec import describe_topology

    return [f"read {target.spec} as: {describe_topology(target.spec)}"
            for target in parse_targets(targets) if target.kind == "topology"]
