"""The case matrix: which (framework, strategy, workload, cluster) cases a run will execute.

A case is plain data (a frozen dataclass serialised to JSON for the worker processes), so the
parent plans and the children execute without sharing anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from harness.core.case import (
    LOCAL_REPLICAS,
    PS_SHARDS,
    Case,
    CaseOptions,
    Options,
    replicas_for,
)
from harness.core.errors import InputError
from harness.core.layout import Layout, ends_lighter, parse_stage_layers, runs, splits
from harness.core.strategies import STRATEGIES, Strategy


def _refuse_unused(strategies: list[Strategy], asked: CaseOptions) -> None:
    """An option no chosen strategy takes (Strategy.options) would be silently ignored:
    refuse it."""
    chosen = ", ".join(s.name for s in strategies)
    flags = {"--tf-loop": (asked.tf_loop, "tf_loop"), "--stages": (asked.stages, "stages"),
             "--microbatches": (asked.microbatches, "microbatches"),
             "--schedule": (asked.schedule, "schedule"),
             "--tensor-parallel": (asked.tensor, "tensor"),
             "--stage-layers": (asked.stage_layers, "stage_layers")}
    for flag, (value, option) in flags.items():
        if value is None or any(option in s.options for s in strategies):
            continue
        if option == "tf_loop":
            raise InputError(f"--tf-loop applies to TensorFlow strategies, which are not among "
                             f"the strategies chosen ({chosen})")
        owners = " or ".join(s.name for s in STRATEGIES if option in s.options)
        raise InputError(f"{flag} applies to --strategy {owners}, which is not among the "
                         f"strategies chosen ({chosen})")


def plan(strategies: list[Strategy], workloads: list[WorkloadChoice], cluster: str,
         steps: int, warmup: int, repeats: int, timeout_s: float,
         hosts: int = 1, pipeline: CaseOptions | None = None) -> list[Case]:
    """Baselines first (per framework and workload), so every later case finds its baseline
    for scaling efficiency in the same run."""
    cases = []
    _refuse_unused(strategies, pipeline or CaseOptions())
    for choice in workloads:
        for strat in sorted(strategies, key=lambda s: (s.framework, s.exchange != "none")):
            options: Options = {"workload_label": choice.label,
                                "workload_size": choice.size}
            if choice.framework:
                options["workload_framework"] = choice.framework
            if strat.exchange == "parameter_server":
                options["ps_shards"] = PS_SHARDS
            if strat.framework == "tf" and (pipeline or CaseOptions()).tf_loop == "fit":
                options["tf_loop"] = "fit"  # custom, the default, stays out of the case id
            replicas = replicas_for(strat, hosts)
            if strat.exchange == "pipeline":
                replicas = _pipeline_options(choice, hosts, pipeline or CaseOptions(),
                                             options)
            if strat.exchange == "embedding":
                _embedding_tables(choice, strat.name)
            if strat.exchange == "tensor":
                replicas = _tensor_options(choice, hosts, pipeline or CaseOptions(),
                                           options)
            cases.append(Case(
                framework=strat.framework, strategy=strat.name, workload=choice.ref,
                cluster=cluster, replicas=replicas, steps=steps, warmup=warmup,
                repeats=repeats, timeout_s=timeout_s, per_replica_batch=choice.batch,
                options=options,
            ))
    return cases


def _transformer(choice: WorkloadChoice, what: str) -> Any:
    from workloads import resolve_workload
    from workloads.configs import TransformerConfig

    config = getattr(resolve_workload(choice.ref), "config", None)
    if not isinstance(config, TransformerConfig):
        raise InputError(f"{what}: use the transformer family (transformer:S|M|L), not "
                         f"{choice.ref}")
    return config


def _embedding_tables(choice: WorkloadChoice, strategy: str) -> None:
    """InputError (one line) unless the workload has embedding tables to shard."""
    from workloads import resolve_workload
    from workloads.configs import RecsysConfig

    if not isinstance(getattr(resolve_workload(choice.ref), "config", None), RecsysConfig):
        raise InputError(f"{strategy} shards embedding tables: use the recsys family "
                         f"(recsys:S|M|L), not {choice.ref}")


def _tensor_options(choice: WorkloadChoice, hosts: int, asked: CaseOptions,
                    options: Options) -> int:
    """The tensor-parallel degree (the case's replicas); InputError for one the heads do
    not divide."""
    config = _transformer(choice, "tensor_parallel splits each block by its heads")
    tensor = asked.tensor or (hosts if hosts > 1 else LOCAL_REPLICAS)
    if hosts > 1 and tensor != hosts:
        raise InputError(f"on emulated hosts tensor parallelism runs one rank per host: "
                         f"--tensor-parallel {tensor} must be the cluster's hosts={hosts}")
    if tensor < 2 or tensor > config.heads or config.heads % tensor:
        raise InputError(f"tensor-parallel degree {tensor} must divide the {config.heads} "
                         f"attention heads of {choice.ref} (and be at least 2)")
    options.update(cast(Options, Layout(tensor=tensor).case_options()))
    return tensor


def _pipeline_options(choice: WorkloadChoice, hosts: int, asked: CaseOptions,
                      options: Options) -> int:
    """Stages (the case's replicas) and micro-batches of a pipeline case, in ``options``;
    InputError (one line) for a split the workload cannot take."""
    config = _transformer(choice, "pipeline splits a model by its blocks")
    stages = asked.stages or (hosts if hosts > 1 else LOCAL_REPLICAS)
    if hosts > 1 and stages != hosts:
        raise InputError(f"on emulated hosts a pipeline runs one stage per host: --stages "
                         f"{stages} must be the cluster's hosts={hosts}")
    if stages < 2 or stages > config.layers:
        raise InputError(f"{stages} stages cannot split the {config.layers} blocks of "
                         f"{choice.ref} (give from 2 to {config.layers} stages)")
    blocks = stage_blocks(asked.stage_layers, config.layers, stages)
    microbatches = asked.microbatches or stages
    batch = choice.batch * stages  # each stage brings its share, as a data replica would
    if batch % microbatches:
        raise InputError(f"{microbatches} micro-batches do not divide the pipeline's batch "
                         f"of {batch} ({choice.batch} per stage x {stages} stages)")
    options.update(cast(Options, Layout(stages=stages, microbatches=microbatches,
                                        schedule=asked.schedule or "1f1b",
                                        stage_blocks=blocks).case_options()))
    return stages


def stage_blocks(asked: str | None, blocks: int, stages: int) -> tuple[int, ...]:
    """Blocks per stage: as asked (``--stage-layers``), else () where the stages divide the
    blocks (equal runs) and the shortfall off the first and last stages where they do not
    (``core.layout.ends_lighter``, as Megatron-LM and torchtitan split); InputError (one
    line) for counts that do not split this model."""
    if not asked:
        return () if blocks % stages == 0 else ends_lighter(blocks, stages)
    counts = parse_stage_layers(asked, blocks, stages)
    if not splits(counts, blocks, stages):
        raise InputError(f"--stage-layers {asked}: {stages} counts of at least 1 summing to "
                         f"the {blocks} blocks are needed (got {runs(counts) or 'none'})")
    return counts


@dataclass(frozen=True)
class WorkloadChoice:
    """A workload as the plan needs it: its reference, batch and, for user models, owner."""

    ref: str  # what the worker resolves again: mlp:S, or an absolute file.py:callable
    batch: int
    label: str  # the row's workload column
    size: str  # the row's size column ("" for user workloads)
    framework: str | None = None  # a user workload runs only in its own framework


def resolve_workloads(names: list[str]) -> list[WorkloadChoice]:
    """`--workload` values -> choices; bad names are InputErrors naming what is allowed."""
    from workloads import UserWorkload, WorkloadError, resolve_workload
    from workloads.profile import FAMILY as PROFILE
    from workloads.user import is_file_reference

    resolved = []
    for name in names:
        try:
            workload = resolve_workload(name)
        except WorkloadError as exc:
            raise InputError(str(exc)) from exc
        if not isinstance(workload, UserWorkload) and workload.family == PROFILE:
            raise InputError(f"workload {name!r} is a profile (numbers only): it can be "
                             "simulated (stratbench simulate --profile) but not run")
        if not isinstance(workload, UserWorkload) and not workload.frameworks:
            raise InputError(f"workload {name!r} is a known model (numbers only, see "
                             "stratbench workloads): nothing here can train it")
        if isinstance(workload, UserWorkload):
            target, _, attr = name.rpartition(":")
            ref = f"{Path(target).resolve()}:{attr}" if is_file_reference(target) else name
            resolved.append(WorkloadChoice(ref, workload.batch_size, workload.name, "",
                                           workload.framework))
        else:
            resolved.append(WorkloadChoice(workload.name, workload.batch_size,
                                           workload.family, workload.size))
    return resolved
