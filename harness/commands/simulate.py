"""`stratbench simulate`: all-reduce vs parameter-server costs on a topology (no framework)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from harness.core.errors import InputError
from harness.core.paths import results_dir
from harness.core.strategies import ALLREDUCE_ALGORITHMS, MODEL_PARALLEL
from workloads.optimizers import OPTIMIZER_SLOTS
from workloads.precision import PRECISIONS as PRECISION_NAMES

if TYPE_CHECKING:  # the domain's records, imported where they are built (a verb stays light)
    from harness.calibrate.links import MeasuredLinks
    from harness.core.layout import Layout
    from harness.predict.emulated import Calibrated
    from harness.predict.step import PredictedRow
    from harness.sim import LayoutRow, Scalar, SimulatedRow
    from workloads.execution import Execution
    from workloads.profile import Stated
    from workloads.spec import WorkloadSpec


def _profile(workload: str | None, profile: str | None, results: Path, topology: str,
             calibration: Any, framework: str | None = None, execution: Any = None
             ) -> tuple[WorkloadSpec, Stated]:
    """The simulator's profile: from --profile, or from the workload (any that `recommend`
    takes: a built-in, a known model, a user's file after one run), and what is stated beside
    it (a profile's numbers), with the compute time measured here when nothing else can tell
    it (a topology without a device speed, run as ``execution`` says)."""
    from harness.core.errors import SpecError
    from harness.sim.systems.calibration import compute_seconds

    if workload and profile:
        raise InputError("give --workload or --profile, not both")
    if profile:  # the same grammar and the same numbers as --workload profile:...
        workload = profile if profile.startswith("profile:") else f"profile:{profile}"
    if not workload:
        raise InputError("give --workload FAMILY:SIZE|MODEL or --profile K=V,... "
                         "(e.g. --profile params=25M,batch=32,step_compute=100ms)")
    from harness.calibrate.workload import (
        measured_compute,
        no_compute_message,
        scaled_compute,
        workload_facts,
    )
    from harness.sim.systems.calibration import from_preset, merge, stated
    from workloads.execution import DEFAULT_EXECUTION
    from workloads.profile import stated_by

    measured = _measured(results)
    facts, said = workload_facts(workload, measured), stated_by(workload)
    kind, _, rest = topology.strip().partition(":")
    base = from_preset(rest.partition(",")[0].strip()) if kind == "preset" else None
    known = merge(base, calibration) if base and calibration else (calibration or base)
    try:
        compute_seconds(facts, stated(known, said), execution or DEFAULT_EXECUTION)
        return facts, said
    except SpecError:
        pass
    # --framework: that framework's own one-device run (TF's and torch's kernels differ:
    # transformer:M computes in 77 ms under TF here, 129 ms under torch), else any
    here = ((framework and measured_compute(measured, facts.name, framework))
            or measured_compute(measured, facts.name))
    if here is None:
        raise InputError(no_compute_message(facts.name))
    info(f"compute: {here.note}")
    return facts, replace(said, step_compute_s=scaled_compute(here, facts.batch_size))


def _measured(results: Path) -> Any:
    import pandas as pd

    from results.store import load

    return load(results) if (results / "runs").is_dir() else pd.DataFrame()


def load_calibration(option: str | None, topology: str) -> Any:
    """A preset name, or a results directory whose latest `comm` fit becomes every link's
    alpha and beta (the all-reduce fit with the most ranks)."""
    from harness.sim import Calibration, LinkCalibration, from_preset, parse_topology
    from harness.sim.network.topology import link_classes
    from harness.sim.systems.preset import preset_names

    if option is None:
        return None
    from harness.sim.systems.preset import is_system_path

    if option in preset_names() or (is_system_path(option) and Path(option).is_file()):
        return from_preset(option)
    path = Path(option)
    if not path.is_dir():
        raise InputError(f"--calibration {option!r} is neither a preset "
                         f"({', '.join(preset_names())}) nor a results directory")
    from results.store import load_table

    fits = load_table(path, "calibration")
    if fits.empty or "all_reduce" not in set(fits["op"]):
        raise InputError(f"no all-reduce calibration under {path} (run `stratbench comm`)")
    fits = fits[fits["op"] == "all_reduce"].sort_values(["run_id", "world"])
    network = fits[fits["link_class"] != "loopback"] if "link_class" in fits else fits
    classes = link_classes(parse_topology(topology))
    if network.empty:
        # A loopback fit measured the library and this machine, not a network: its alpha
        # is a per-message software cost added to each link's latency; the bandwidths stay
        # the ones the topology states.
        best = fits.iloc[-1]
        links = {c.name: LinkCalibration(c.latency + float(best["alpha_s"]), 1.0 / c.bandwidth,
                                         "spec", note=f"+ loopback alpha of comm run "
                                                      f"{best['run_id']}")
                 for c in classes}
        return Calibration(links, compute_source="profile", name=f"measured:{path}")
    best = network.iloc[-1]
    link = LinkCalibration(float(best["alpha_s"]), float(best["beta_s_per_byte"]), "measured",
                           note=f"comm run {best['run_id']}, residual "
                                f"{float(best['residual_rel']):.0%}")
    return Calibration({c.name: link for c in classes}, compute_source="profile",
                       name=f"measured:{path}")


def _topology_option(topology: str | None, system: str | None) -> str:
    if system and topology:
        raise InputError("give --topology or --system, not both (a system file's hosts: "
                         "--topology preset:FILE,hosts=N)")
    if system:
        from harness.sim.systems.preset import is_system_path

        return f"preset:{system if is_system_path(system) else './' + system}"
    if not topology:
        raise InputError("give --topology SPEC or --system FILE")
    return topology


@dataclass(frozen=True)
class Unmodelled:
    """A real strategy the simulator has no model of on emulated hosts: its row is its name
    (``framework:strategy``), the status and why."""

    strategy: str
    reason: str

    def to_row(self) -> dict[str, Scalar]:
        return {"status": "unavailable", "strategy": self.strategy, "reason": self.reason,
                "step_time_median_s": math.nan}

    def shown(self) -> SimulatedRow:
        """What the table reads of it (``format_rows``): its name, status and reason."""
        from harness.sim import SimulatedRow

        return SimulatedRow(strategy=self.strategy, requested_strategy=self.strategy,
                            workload="", size="", cluster="", replicas=0, case_id="",
                            price_per_device_hour=math.nan, calibration_sources="",
                            status="unavailable", reason=self.reason)


def simulate_emulated(topology: str, workers: int, workload: str | None,
                      framework: str | None, strategies: tuple[str, ...],
                      results: Path) -> list[PredictedRow | Unmodelled]:
    """``--topology netns:...``: this machine's emulated hosts, predicted as `validate` scores
    and `recommend` ranks them (harness.predict.emulated): the links as probed
    here, cores shared as they would be, each framework's measured compute, library and
    runtime costs. Real strategy names only (the frameworks' own schedules)."""
    from harness.calibrate.fits import comm_table
    from harness.calibrate.links import links_of_cluster, probed_networks
    from harness.calibrate.workload import workload_facts
    from harness.core.strategies import strategy as find_strategy
    from harness.predict.emulated import Calibration, emulated_strategies
    from harness.recommend.targets import parse_targets
    from results.store import ResultsStore

    if not workload:
        raise InputError("an emulated cluster needs --workload (its compute is measured here)")
    (target,) = parse_targets([topology])
    if not 2 <= workers <= target.devices:
        raise InputError(f"--workers {workers}: {topology} runs one worker on each of its "
                         f"{target.devices} hosts (give 2 to {target.devices})")
    measured = _measured(results)
    calibration = Calibration(measured=measured, fits=comm_table(results),
                              sweeps=comm_table(results, "comm"))
    networks = probed_networks(ResultsStore(results)) if (results / "runs").is_dir() else []
    facts = workload_facts(workload, measured)
    def on_hosts(fw: str, name: str) -> str:
        """What a strategy name runs as on emulated hosts (one process per host): TF's
        MirroredStrategy is one host's devices; across hosts it is MultiWorkerMirrored."""
        record = find_strategy(fw, name)
        return record.across_hosts_as or name if record else name

    wanted = [(fw, on_hosts(fw, name)) for fw in
              ([framework] if framework else ["torch", "tf"]) for name in
              (strategies or [s.name for s in emulated_strategies(facts, fw)])]
    links = links_of_cluster(networks, target.spec)
    return [_emulated(calibration, facts, links, fw, strategy, workers, topology)
            for fw, strategy in wanted]


def _emulated(calibration: Calibrated, facts: WorkloadSpec, links: MeasuredLinks, fw: str,
              strategy: str, workers: int, topology: str) -> PredictedRow | Unmodelled:
    """One real strategy on the emulated hosts, its row named as the cluster and workload
    (``simulate_emulated``)."""
    from harness.calibrate.workload import emulated_compute, no_compute_message
    from harness.core.strategies import EMULATED
    from harness.predict.emulated import predict_emulated

    compute = emulated_compute(calibration.measured, facts, fw)
    if compute is None:
        raise InputError(no_compute_message(facts.name))
    predicted = predict_emulated(calibration, facts, links, fw, strategy, workers, compute,
                                 topology)
    if predicted is None:
        return Unmodelled(f"{fw}:{strategy}", f"no model of {fw} {strategy} on emulated hosts "
                                              f"(they run: "
                                              f"{', '.join(s.label for s in EMULATED)})")
    sources = (f"links: {links.source}; {fw}'s share of them: {predicted.link_share:.2f} "
               f"({predicted.link_share_source}); compute: {compute.note}")
    return replace(predicted, strategy=f"{fw}:{strategy}", row=replace(
        predicted.row, workload=facts.name, cluster=topology, replicas=workers,
        calibration_sources=sources))


# The simulator's strategies that exchange gradients in buckets (DDP's, FSDP's units).
BUCKETED = (*ALLREDUCE_ALGORITHMS, "fsdp")


def _strategy_names(strategies: tuple[str, ...], framework: str | None) -> list[str] | str:
    """--strategy values as simulate() takes them: with --framework, a real name means that
    framework's strategy, and no name means each of its strategies."""
    from harness.sim.step.strategies import REAL_TO_SIM, SIM_STRATEGIES

    if framework is None:
        return list(strategies) or "all"
    if not strategies:
        return [f"{framework}:{real}" for fw, real in REAL_TO_SIM if fw == framework]
    return [name if ":" in name or name in SIM_STRATEGIES or name in MODEL_PARALLEL
            else f"{framework}:{name}" for name in strategies]


def _deployed(execution: Execution, names: list[str] | str, ps_shards: int | None,
              ps_placement: str | None, bucket: str | None,
              bytes_per_element: int | None) -> Execution:
    """The execution with the deployment options given; an option no chosen strategy uses is
    refused.
    The replicated strategies' weights and gradients stay fp32 under autocast (or Keras's
    mixed policy) unless ``bytes_per_element`` says otherwise (DDP's bf16_compress_hook: 2);
    FSDP gathers and reduces in the precision (``Execution.sharded_element``)."""
    from harness.core.units import parse_size
    from harness.sim.step.strategies import expand_strategies

    chosen = {sim for _, sim in expand_strategies(names)}
    if (ps_shards or ps_placement) and not any(s.startswith("parameter_server")
                                               for s in chosen):
        option = "--ps-shards" if ps_shards else "--ps-placement"
        raise InputError(f"{option} applies to parameter servers; the strategies chosen "
                         f"({', '.join(sorted(chosen))}) have none")
    if bucket is not None:
        if not chosen & set(BUCKETED):
            raise InputError(f"--bucket applies to DDP-style bucketed all-reduce and FSDP; "
                             f"the strategies chosen ({', '.join(sorted(chosen))}) have no "
                             f"buckets")
        # FSDP's units the size stated, not a block
        execution = replace(execution, bucket_bytes=max(1, int(parse_size(bucket, "bucket"))))
    if bytes_per_element is not None:
        execution = replace(execution, gradient_element_bytes=bytes_per_element)
    return execution


def _layout(workers: int, strategies: tuple[str, ...], stages: int | None, tensor: int | None,
            microbatches: int | None, schedule: str, virtual: int | None = None,
            sequence_parallel: bool = False, distributed_optimizer: bool = False,
            context: int | None = None, expert: int | None = None,
            mechanisms: dict[str, Any] | None = None) -> Layout:
    """The data x pipeline x tensor split of ``workers``; InputError if it does not divide.
    ``--strategy fsdp`` with a tensor-parallel degree: FSDP over the data axis (torchtitan's
    2D). ``mechanisms``: the stack's (``stated_mechanisms``)."""
    from harness.core.layout import Layout

    fsdp = "fsdp" in strategies
    other = [s for s in strategies if s not in MODEL_PARALLEL and s != "fsdp"]
    if other:
        raise InputError(f"--strategy {other[0]} is data-parallel: simulate it without "
                         f"--stages/--tensor-parallel")
    if virtual is not None and schedule != "interleaved":
        raise InputError("--virtual-stages needs --schedule interleaved")
    if stages is None:
        stages = workers // (tensor or 1) if "pipeline" in strategies else 1
    if tensor is None:
        tensor = workers // stages if "tensor_parallel" in strategies else 1
    split = stages * tensor * (context or 1)
    data, rest = divmod(workers, split)
    if rest or data < 1:
        raise InputError(f"--workers {workers} is not a multiple of stages x tensor-parallel "
                         f"x context-parallel degree = {split}")
    if fsdp and distributed_optimizer:
        raise InputError("--strategy fsdp already shards the optimizer: drop "
                         "--distributed-optimizer")
    return Layout(data=data, stages=stages, tensor=tensor, microbatches=microbatches or 1,
                  schedule=schedule,
                  virtual=(virtual or 2) if schedule == "interleaved" else 1,
                  sequence_parallel=sequence_parallel,
                  zero=3 if fsdp else 1 if distributed_optimizer else 0,
                  context=context or 1, expert=expert or 1, **(mechanisms or {}))


def _simulate_layout(topology: str, workload: str | None, profile: str | None, results: Path,
                     calib: Any, layout: Any, global_batch: int | None, recompute: str,
                     optimizer: str, microbatches: int | None,
                     precision: str | None = None, fit_step: float | None = None,
                     stage_layers: str | None = None) -> LayoutRow:
    from harness.core.layout import parse_stage_layers
    from harness.sim import simulate_layout
    from harness.sim.model.structure import layered
    from workloads import WorkloadError

    if profile or not workload:
        raise InputError("model parallelism needs --workload (a transformer or mlp: its "
                         "layers), not --profile")
    from workloads.precision import precision as find_precision

    bytes_at = find_precision(precision) if precision else None
    try:
        model = layered(workload, find_precision(precision))
    except WorkloadError as exc:
        raise InputError(str(exc)) from None
    if stage_layers:
        layout = replace(layout, stage_blocks=parse_stage_layers(
            stage_layers, len(model.blocks), layout.stages * layout.virtual))
    compute = _profile(workload, None, results, topology, calib)[1].step_compute_s
    batch = global_batch or model.batch_size * layout.data
    if microbatches is None:  # one sample per micro-batch: the smallest bubble
        layout = replace(layout, microbatches=max(1, batch // layout.data))
    if precision is not None:
        calib = _at_precision(calib, topology, precision)
    if fit_step is not None:
        calib = _fitted(topology, calib, fit_step, lambda c: simulate_layout(
            topology, model, layout, batch, c, optimizer=optimizer, recompute=recompute,
            precision=bytes_at).step_time_median_s, precision)
    return simulate_layout(topology, model, layout, batch, calib, step_compute_s=compute,
                           optimizer=optimizer, recompute=recompute, precision=bytes_at)


def expand(names: list[str] | str) -> list[tuple[str, str]]:
    from harness.sim.step.strategies import expand_strategies

    return expand_strategies(names)


def _fitted(topology: str, calib: Any, step_s: float, step_at: Any,
            precision: str | None = None) -> Any:
    """The calibration with the device's efficiency fitted so that this very step takes
    ``step_s`` (one measured or published step, computed in ``precision``: None, the
    device's training precision); said on stderr, with where to keep it."""
    from harness.sim.systems.calibration import Calibration, merge
    from harness.sim.systems.compute import fit_efficiency

    calib = _with_system(calib, topology)
    if calib is None or calib.device is None:
        raise InputError("--fit-step needs a system whose device is described (--system FILE "
                         "or --topology preset:NAME)")
    efficiency = fit_efficiency(
        lambda e: step_at(merge(calib, Calibration(efficiency=e))), step_s)
    from harness.sim.systems.device_model import training_precision

    which = precision or training_precision(calib.device)
    info(f"fitted: {calib.device.name} at {efficiency:.1%} of its {which} peak makes this "
         f"step {step_s:g} s; keep it as the system file's device.matmul_efficiency.{which} "
         f"= {efficiency:.4f} to use it for every other configuration")
    return replace(calib, efficiency=efficiency, compute_source=f"fitted on a {step_s:g} s "
                                                                f"step")


def _published_check(topology: str, precision: str | None, applies: bool) -> str | None:
    """The device model's error on the corpus's published runs of this preset system at this
    precision, where the step was timed with the system file's own efficiency (``applies``:
    not refitted, no calibration file, compute by the device model)."""
    kind, _, rest = topology.strip().partition(":")
    if kind != "preset" or not applies:
        return None
    from harness.sim.systems.device_model import gemm_precision, training_precision
    from harness.sim.systems.preset import load_preset
    from harness.validate.devices import published_check

    system = rest.partition(",")[0].strip()
    check = published_check(system, precision)
    if check:
        return f"checked: {check.describe()}"
    device = load_preset(system).device
    if device is None:
        return None
    p = gemm_precision(precision or training_precision(device), "torch", False, device)
    if p not in device.matmul_efficiency:
        return None  # the compute line already says the efficiency is assumed
    return (f"checked: against no published {system} {p} training run (none in the corpus); "
            f"its {p} GEMM efficiency, {device.matmul_efficiency[p]:.1%}, is cited in the "
            f"system file's device.matmul_efficiency_note")


def _with_system(calib: Any, topology: str) -> Any:
    """The calibration over the named system's (a preset topology's) device, links and
    price; unchanged for other topologies."""
    from harness.sim.systems.calibration import from_preset, merge

    kind, _, rest = topology.strip().partition(":")
    if kind != "preset":
        return calib
    base = from_preset(rest.partition(",")[0].strip())
    return merge(base, calib) if calib else base


def _at_precision(calib: Any, topology: str, precision: str) -> Any:
    """The calibration with the device's speed at ``precision``'s peak (a system's device)."""
    from harness.sim.systems.device_model import gemm_precision

    calib = _with_system(calib, topology)
    device = getattr(calib, "device", None)
    if device is None:
        return calib
    peak = device.peak(gemm_precision(precision, "torch", False, device))
    return replace(calib, device_flops=peak * device.assumed_efficiency)


def _check_precision(topology: str, precision: str) -> None:
    """InputError (one line) when the named system's device has no peak for ``precision``."""
    from harness.core.errors import SpecError
    from harness.sim.systems.device_model import device_rate

    kind, _, rest = topology.strip().partition(":")
    if kind != "preset":
        return
    from harness.sim.systems.preset import load_preset

    try:
        device_rate(load_preset(rest.partition(",")[0].strip()).device, precision)
    except SpecError as exc:
        raise InputError(f"--precision {precision}: {exc}") from None


def format_layout_row(r: LayoutRow) -> str:
    from harness.core.units import format_bytes

    return "\n".join([
        f"{'layout':<44}{'step ms':>10}{'bubble':>8}{'samples/s':>12}{'efficiency':>12}"
        f"{'memory/device':>15}",
        f"{r.layout.describe():<44}{r.step_time_median_s * 1e3:>10.2f}"
        f"{r.bubble_fraction:>8.1%}{r.throughput_samples_s:>12.4g}"
        f"{r.scaling_efficiency:>12.2f}{format_bytes(r.memory_per_device_bytes):>15}",
        f"  {r.sim_notes}; global batch {r.global_batch}; {r.calibration_sources}",
        *([f"  {r.reason}"] if not r.ok else []),
        *([f"  {tight}"] if (tight := _tight(r)) else []),
        f"  compute: {r.compute_source}"])


def _tight(r: LayoutRow) -> str:
    """The headroom note of a layout that fits its described device beyond the fullest
    published run's share ('' otherwise)."""
    if not r.ok or not math.isfinite(r.device_memory_bytes):
        return ""
    from harness.validate.layout_sweep import headroom_note

    return headroom_note(r.memory_per_device_bytes,
                         r.device_memory_bytes - r.memory_reserved_bytes)


def format_rows(rows: Sequence[SimulatedRow]) -> str:
    from harness.core.units import format_bytes

    sized = any(r.memory_per_device_bytes is not None for r in rows)  # a described device's
    lines = [f"{'strategy':<28}{'step ms':>10}{'exposed comm ms':>17}{'samples/s':>12}"
             f"{'efficiency':>12}{'MB/worker':>11}" + (f"{'mem/device':>12}" if sized else "")
             + "  note"]
    for r in sorted(rows, key=lambda r: (not r.ok, r.step_time_median_s if r.ok
                                         else math.inf)):
        memory = (f"{format_bytes(r.memory_per_device_bytes):>12}"
                  if r.memory_per_device_bytes is not None else f"{'':>12}") if sized else ""
        if not r.ok:
            said = r.reason if r.reason.startswith(r.status) else f"{r.status}: {r.reason}"
            lines.append(f"{r.strategy:<28}{'-':>10}{'':>17}{'':>12}{'':>12}{'':>11}"
                         f"{memory}  {said}")
            continue
        lines.append(f"{r.strategy:<28}{r.step_time_median_s * 1e3:>10.2f}"
                     f"{r.exposed_comm_s * 1e3:>17.2f}{r.throughput_samples_s:>12.0f}"
                     f"{r.scaling_efficiency:>12.2f}{r.bytes_per_worker / 1e6:>11.1f}"
                     f"{memory}  {r.calibration_sources}")
    return "\n".join(lines)


@dataclass(frozen=True)
class SimulateOptions:
    """The options of one `simulate` call, as click parsed them (one field per option)."""

    topology: str | None
    system: str | None
    workers: int
    workload: str | None
    profile: str | None
    strategies: tuple[str, ...]
    calibration: str | None
    results: str | None
    stragglers: int
    straggler_factor: float
    stages: int | None
    stage_layers: str | None
    microbatches: int | None
    tensor: int | None
    schedule: str
    virtual_stages: int | None
    context: int | None
    context_comm: str
    expert: int | None
    p2p: str
    tp_overlap: bool
    param_gather_overlap: bool
    ep_overlap: bool
    stack_name: str | None
    sequence_parallel: bool
    distributed_optimizer: bool
    grad_reduce: str
    grad_accumulation: str
    precision: str | None
    channels_last: bool | None
    fit_step: float | None
    global_batch: int | None
    recompute: str
    optimizer: str
    framework: str | None
    ps_shards: int | None
    ps_placement: str | None
    bucket: str | None
    bytes_per_element: int | None
    as_json: bool


HELP = """
Simulate a training step of each strategy on a topology; rows are source=simulated.

With --strategy pipeline|tensor_parallel, --stages or --tensor-parallel, one step of that
model-parallel layout instead (the workers left over are data-parallel replicas).

Simulate ring / tree / halving-doubling / hierarchical all-reduce, FSDP, synchronous and
asynchronous parameter servers and central storage on a topology: step time, exposed
communication, bytes per worker and link class. Topologies: switch:n=16,bw=100Gbit, ring:...,
two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit, leaf_spine:...,oversub=2,
leaf_spine:hosts=5,leaves=3+2,inter=150Mbit,uplink=100Mbit (racks of unequal size, each leaf's
uplink as built), torus:dims=4x4x4,..., preset:NAME[,hosts=N] (systems: dgx_a100, dgx_h100_ib,
hgx_h200, hgx_b200, gb200_nvl72, mi300x, l40s_eth, tpu_v4_cube, tpu_v5p, eth25_v100,
eth100_v100, each citing its sources), or your own system file: --system FILE or preset:PATH
(JSON or TOML: the device's peak FLOP/s per precision, memory and bandwidth, scale_up and
scale_out, price; copy one from harness/sim/systems/presets/; a malformed file is one line
naming the key). Every answer says how it read the topology (inter is per device unless
nic=shared). --calibration takes a preset or a results directory holding `stratbench comm` fits.
Rows are source=simulated.

--framework reads --strategy names as that framework's (tf mirrored: all-reduce after backward;
torch ddp: buckets during backward) and without --strategy simulates each of its strategies;
--ps-shards/--ps-placement, --bucket and --bytes-per-element describe the deployment (an option
no chosen strategy uses is one line and exit 2).

--profile K=V,... and --workload profile:K=V,... are one grammar with the same keys
(workloads/profile.py): params, batch, bytes, flops_per_sample, step_compute (a duration such as
120ms, or seconds; step_time_s is its alias), sparsity, optimizer, bucket, name, size; the same
numbers simulate the same step either way.

--topology netns:hosts=N,rate=R[,racks=K,uplink=U]: this machine's emulated hosts, predicted as
`validate` scores them and `recommend` ranks them (links as probed here, cores shared, each
framework's measured compute, library and runtime costs; tf mirrored runs as
multi_worker_mirrored across hosts); needs --workload measured here.

With --stages or --tensor-parallel (or --strategy pipeline|tensor_parallel), one step of that
model-parallel layout of a layered workload (transformer:S|M|L, gpt2_xl, gpt3_175b,
llama3_8b|70b|405b, a transformer by its dimensions
transformer:layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,vocab=128256,seq=8192, a mixture
of experts with experts=E,top_k=K[,shared=S,expert_ffn=F,imbalance=F] (every expert held, each
token computed through its top-k, the busiest expert's rank at imbalance x the mean tokens), a
causal sliding window as window=W (Mistral 7B v0.1's 4,096; hf: reads sliding_window), or a
Hugging Face config.json as hf:path/config.json,seq=N[,imbalance=F] (Llama, Mistral, Mixtral,
Qwen2, Qwen3 and their MoE models, heads wider than the model included, Gemma, GPT-2, GPT-NeoX,
DeepSeek-V2/V3 with its latent attention and leading dense layers; the training sequence given,
never max_position_embeddings), mlp): workers / (S x T) data-parallel replicas, Megatron-LM's
placement, bubble and memory per device (a layout that needs more than the device holds after
its runtime's reserve is status `does not fit`, with the bytes needed and available). On a
system's device every strategy's compute is the device model's
(harness/sim/systems/device_model.py): the workload's operators (GEMMs with tile and wave
quantization against a memory roofline, element-wise work at memory bandwidth, attention fused
as torch's SDPA or unfused, NCHW transposes, fp8 casts) no faster than the kernel launch floor;
the answer names the precision and whether the step is launch-, memory-, attention- or
matmul-bound (docs/SIMULATOR.md; checked against Megatron-LM's published table, python -m
harness.validate.megatron, and against published single-GPU and single-node training
throughputs, python -m harness.validate.devices). --precision: fp32 (what the framework computes
by default: torch's convolutions in TF32, TF's GEMMs in TF32), tf32, bf16|fp16 mixed precision
(fp32 master weights and optimizer state), fp8 (where the system states an fp8 peak); default,
the device's training precision for compute.

--global-batch B sets the batch of a data-parallel step too (B / workers each);

--channels-last/--channels-first: the images' memory format (default the framework's: torch
NCHW, TF NHWC; tensor-core convolutions on NCHW pay a transpose each way);

--schedule interleaved --virtual-stages V,

--sequence-parallel, --recompute selective, --distributed-optimizer, --grad-reduce
after-backward (Megatron-LM 2021's local DDP: the reduction after the whole backward, not bucket
by bucket during it), and --strategy fsdp

--tensor-parallel T (FSDP x TP) are Megatron-LM's and torchtitan's options. --fit-step S: one
measured or published step time of this layout (or of one data-parallel strategy) fits the
device's efficiency (printed, to keep as the system file's device.matmul_efficiency.<precision>
for every other configuration). --stage-layers 7,8x14,7 gives the layers of each stage when they
are not equal (one count per chunk with --virtual-stages), 'ends' takes the shortfall off the
first and last stages (which also hold the embedding and the head; Llama 3 405B's 126 layers on
16 stages).

--context-parallel C splits each sequence over C devices (every activation and the compute /C,
gradients reduced over data x context): --context-comm ring passes K/V blocks around the group
overlapped with the attention (ring attention, Megatron-Core's p2p), all-gather gathers K/V
before it (Llama 3's). Wherever each rank keeps at least 4,096 tokens (an 8,192-token model gets
CP 2, as NVIDIA's Llama 3.1 405B recipe runs it), the recommender tries context-parallel splits
too; stratbench runs none itself, so such a pick names the stacks that do (Megatron-Core,
torchtitan; on TPUs, where no runner here shards a model, every split and FSDP pick names
MaxText with its mesh axes, ici_fsdp_parallelism and the like). --expert-parallel EP shards a
mixture of experts' routed experts over EP data ranks (Megatron-Core's order), each MoE layer's
tokens dispatched and combined by all-to-all on that placement (balanced routing, unless the
workload names an imbalance: transformer:...,experts=8,top_k=2,imbalance=1.3 makes the busiest
expert's rank compute 1.3x the mean tokens); the recommender lists EP splits for models with
experts, likewise not picked. --p2p blocking makes a pipeline stage wait for each of its sends
(Megatron-LM 2021's synchronised point-to-point); async (the default) sends in the background as
torch's isend and Megatron-Core do. --tp-overlap runs the tensor-parallel collectives under the
GEMMs (Megatron's --tp-comm-overlap: only what outlasts a chunk's compute shows);
--overlap-param-gather runs the distributed optimizer's parameter all-gather under the next
step's first forward;

--ep-overlap runs expert parallelism's dispatch and combine under the adjacent micro-batch's
compute (Megatron-Core's combined 1F1B; not with full recomputation, and with stages only
interleaved); --grad-accumulation fp32-copy adds each micro-batch's half-precision gradients
into an fp32 copy after its backward and reduces that copy (DeepSpeed's bf16 optimizer) where
the default fuses it into the GEMM (Megatron-LM), and half keeps the gradients in the training
precision (NeMo's distributed_fused_adam with grad_sync_dtype bf16: 2 bytes a parameter less
than Megatron's fp32 buffer). A data-parallel group with several GPUs on a host reduces over one
ring per NIC, as NCCL's channels do. A layout the model cannot take (stages that do not divide
its blocks and no --stage-layers, micro-batches that do not divide the batch, a tensor degree
that does not divide its heads) is one line and exit 2.
"""


@click.command("simulate", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--topology", default=None, metavar="SPEC",
              help="e.g. two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit, "
                   "preset:dgx_h100_ib,hosts=16, or this machine's emulated hosts "
                   "netns:hosts=4,rate=250mbit")
@click.option("--system", default=None, metavar="FILE",
              help="A system file (JSON or TOML: devices, scale-up, scale-out, price; "
                   "harness/sim/systems/presets/*.json are examples): the same as --topology "
                   "preset:FILE.")
@click.option("--workers", type=click.IntRange(min=1), required=True)
@click.option("--workload", default=None, metavar="FAMILY:SIZE|MODEL",
              help="A built-in (mlp:S) or a known model (resnet50, gpt3_175b; see "
                   "stratbench workloads).")
@click.option("--profile", default=None, metavar="K=V,...",
              help="params=25M,batch=32,step_compute=100ms[,sparsity=0.01,...]")
@click.option("--strategy", "strategies", multiple=True, metavar="NAME",
              help="Simulated strategy (allreduce_ring, parameter_server, ...) or a real "
                   "one (ddp, tf:parameter_server); default all.")
@click.option("--calibration", default=None, metavar="DIR|PRESET",
              help="A preset, or a results directory with `stratbench comm` fits.")
@results_option
@click.option("--stragglers", type=click.IntRange(min=0), default=0)
@click.option("--straggler-factor", type=click.FloatRange(min=1.0), default=1.0)
@click.option("--framework", type=click.Choice(["tf", "torch"]), default=None,
              help="Read --strategy names as this framework's (mirrored, ddp, ...) and, "
                   "without --strategy, simulate each of its strategies as it exchanges.")
@click.option("--ps-shards", type=click.IntRange(min=1), default=None,
              help="Parameter-server shards (default: one per 8 workers).")
@click.option("--ps-placement", type=click.Choice(["dedicated", "colocated"]), default=None,
              help="Parameter servers on their own hosts (default) or on the workers'.")
@click.option("--bucket", default=None, metavar="SIZE",
              help="Gradient bucket (DDP bucket_cap_mb) or FSDP unit size, e.g. 25MiB.")
@click.option("--bytes-per-element", type=click.IntRange(min=1, max=16), default=None,
              help="Bytes per exchanged gradient element of DDP, all-reduce and parameter "
                   "servers (default 4: fp32 weights under autocast; 2 with DDP's "
                   "bf16_compress_hook); FSDP's follow --precision.")
@click.option("--stages", type=click.IntRange(min=1), default=None,
              help="Pipeline stages (model parallelism; equal runs of the workload's blocks, "
                   "else --stage-layers).")
@click.option("--stage-layers", default=None, metavar="COUNTS|ends",
              help="Layers per pipeline stage when they are not equal: 7,8x14,7 (first, 14 "
                   "of 8, last; with --virtual-stages, one count per chunk in order), or "
                   "'ends': the shortfall off the first and last stages, which also hold the "
                   "embedding and the head (as Llama 3 405B was trained).")
@click.option("--microbatches", type=click.IntRange(min=1), default=None,
              help="Micro-batches per pipeline per step (default: one sample each).")
@click.option("--tensor-parallel", "tensor", type=click.IntRange(min=1), default=None,
              help="Tensor-parallel degree (must divide the attention heads).")
@click.option("--schedule", type=click.Choice(["1f1b", "gpipe", "interleaved"]),
              default="1f1b", show_default=True,
              help="Pipeline schedule (interleaved: Megatron-LM's, with --virtual-stages).")
@click.option("--virtual-stages", type=click.IntRange(min=1), default=None,
              help="Chunks of layers per device under --schedule interleaved (default 2).")
@click.option("--context-parallel", "context", type=click.IntRange(min=1), default=None,
              help="Split each sequence over C devices (context parallelism): every "
                   "activation /C, gradients reduced over data x context.")
@mechanism_options
@click.option("--expert-parallel", "expert", type=click.IntRange(min=1), default=None,
              help="Shard each MoE layer's experts over EP ranks of the data-parallel axis; "
                   "tokens reach them by all-to-all (dispatch and combine).")
@click.option("--sequence-parallel", is_flag=True,
              help="Split norms and dropout along the sequence in the tensor-parallel group.")
@click.option("--distributed-optimizer", is_flag=True,
              help="Shard the optimizer state over the data-parallel replicas (ZeRO-1).")
@click.option("--precision", type=click.Choice(list(PRECISION_NAMES)),
              default=None,
              help="fp32 (what the framework computes by default on the device: torch's "
                   "convolutions and all of TF's GEMMs in TF32 where the device has it), "
                   "tf32, bf16/fp16 mixed precision (fp32 master weights and optimizer "
                   "state), or fp8 (GEMMs at the fp8 peak, the rest bf16; where the system "
                   "states an fp8 peak): bytes of activations, messages, FSDP's gathers "
                   "and reductions and memory, and the device's peak (DDP, all-reduce and "
                   "parameter servers exchange fp32 gradients, autocast's). Default: the "
                   "device's training precision (bf16) for compute, fp32 bytes for the "
                   "exchange.")
@click.option("--channels-last/--channels-first", "channels_last", default=None,
              help="Images in NHWC (channels-last) or NCHW memory: tensor-core convolutions "
                   "on NCHW pay a transpose in and out. Default: the framework's (torch NCHW, "
                   "TF NHWC).")
@click.option("--fit-step", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS",
              help="A measured or published step time of this very layout: fit the device's "
                   "efficiency to it (and print it, to keep in the system file).")
@click.option("--global-batch", type=click.IntRange(min=1), default=None,
              help="Samples per step over all replicas (default: the workload's batch per "
                   "data-parallel replica times the replicas).")
@click.option("--recompute", is_flag=False, flag_value="full", default="none",
              type=click.Choice(["none", "selective", "full"]),
              help="Recompute activations in the backward pass: full (a bare --recompute), "
                   "selective (the attention scores only), none.")
@click.option("--optimizer", type=click.Choice(list(OPTIMIZER_SLOTS)), default="adam",
              show_default=True, help="Optimizer whose state the memory figure counts.")
@json_option
def command(**options: Any) -> None:
    """Simulate a training step of each strategy on a topology; rows are source=simulated."""
    o = SimulateOptions(**options)
    topology = _topology_option(o.topology, o.system)
    if topology.strip().startswith("netns:"):
        _print_emulated(o, topology)
        return
    calib = load_calibration(o.calibration, topology)
    if o.precision is not None:
        _check_precision(topology, o.precision)
    from harness.sim.systems.spec import describe_topology

    read_as = f"read {topology} as: {describe_topology(topology)}"
    model_parallel = bool(o.stages or o.tensor or o.context or o.expert
                          or set(o.strategies) & set(MODEL_PARALLEL))
    if model_parallel:
        _print_layout(o, topology, calib, read_as)
        return
    if (o.virtual_stages or o.sequence_parallel or o.distributed_optimizer or o.stage_layers
            or o.stack_name or o.recompute != "none" or o.grad_reduce != "overlapped"
            or o.grad_accumulation != "fused"):
        raise InputError("--virtual-stages, --stage-layers, --sequence-parallel, "
                         "--distributed-optimizer, --grad-reduce, --grad-accumulation, "
                         "--stack and --recompute apply to a "
                         "model-parallel layout: give "
                         "--stages, --tensor-parallel or --context-parallel")
    _print_data_parallel(o, topology, calib, read_as)


def _print_emulated(o: SimulateOptions, topology: str) -> None:
    rows = simulate_emulated(topology, o.workers, o.workload, o.framework, o.strategies,
                             results_dir(o.results))
    if o.as_json:
        print_json([r.to_row() for r in rows])
        return
    info(f"predicted {o.workers} emulated hosts of {topology} as validate scores them")
    click.echo(format_rows([r.shown() if isinstance(r, Unmodelled)
                            else replace(r.row, strategy=r.strategy) for r in rows]))


def _print_layout(o: SimulateOptions, topology: str, calib: Any, read_as: str) -> None:
    """A model-parallel layout's one step."""
    mechanisms, named = stated_mechanisms(
        o.stack_name, capabilities=False, grad_reduce=o.grad_reduce,
        context_comm=o.context_comm, p2p=o.p2p, tp_overlap=o.tp_overlap,
        param_gather_overlap=o.param_gather_overlap, grad_accumulation=o.grad_accumulation,
        ep_overlap=o.ep_overlap)
    if named and not o.as_json:
        info(f"stack {named}")
    layout = _layout(o.workers, o.strategies, o.stages, o.tensor, o.microbatches, o.schedule,
                     o.virtual_stages, o.sequence_parallel, o.distributed_optimizer,
                     o.context, o.expert, mechanisms)
    row = _simulate_layout(topology, o.workload, o.profile, results_dir(o.results), calib,
                           layout, o.global_batch, o.recompute, o.optimizer, o.microbatches,
                           o.precision, o.fit_step, o.stage_layers)
    if o.as_json:
        print_json([row.to_row() | {"read_as": read_as}])
        return
    info(read_as)
    info(f"simulated {row.layout.describe()} on {topology}"
         + (f" with calibration {o.calibration}" if o.calibration else ""))
    checked = _published_check(topology, o.precision,
                               o.fit_step is None and not o.calibration)
    if checked:
        info(checked)
    click.echo(format_layout_row(row))


def _print_data_parallel(o: SimulateOptions, topology: str, calib: Any, read_as: str) -> None:
    """Each data-parallel or parameter-server strategy's step."""
    from harness.core.strategies import library
    from harness.sim import simulate
    from harness.sim.systems.calibration import stated
    from workloads.execution import Execution, PsDeployment

    names = _strategy_names(o.strategies, o.framework)
    execution = Execution(
        precision=o.precision, framework=o.framework, channels_last=o.channels_last,
        ps=PsDeployment(shards=o.ps_shards, colocated=o.ps_placement == "colocated",
                        pull=library(o.framework or "torch").ps_pull))
    prof, said = _profile(o.workload, o.profile, results_dir(o.results), topology, calib,
                          o.framework, execution)
    execution = _deployed(said.deployed(execution), names, o.ps_shards, o.ps_placement,
                          o.bucket, o.bytes_per_element)
    if o.global_batch is not None:
        per_replica, rest = divmod(o.global_batch, o.workers)
        if rest or not per_replica:
            raise InputError(f"--global-batch {o.global_batch} does not divide over "
                             f"{o.workers} workers")
        prof = replace(prof, batch_size=per_replica)

    def run(c: Any) -> list[SimulatedRow]:
        return simulate(topology, o.workers, names, prof, stated(c, said),
                        workload=o.workload,
                        stragglers=o.stragglers, straggler_factor=o.straggler_factor,
                        execution=execution)

    if o.fit_step is not None:
        if len(expand(names)) != 1:
            raise InputError("--fit-step fits one step: name one --strategy")
        calib = _fitted(topology, calib, o.fit_step,
                        lambda c: run(c)[0].step_time_median_s, o.precision)
    rows = run(calib)
    if o.as_json:
        print_json([r.to_row() | {"read_as": read_as} for r in rows])
        return
    info(read_as)
    info(f"simulated {o.workers} workers on {topology}"
         + (f" with calibration {o.calibration}" if o.calibration else ""))
    sources = sorted({r.compute_source for r in rows if r.compute_source})
    for source in sources:
        info(f"compute: {source}")
    checked = _published_check(topology, o.precision, o.fit_step is None and not o.calibration
                               and any("device model" in s for s in sources))
    if checked:
        info(checked)
    click.echo(format_rows(rows))
