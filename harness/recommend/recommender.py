"""The recommender: which strategy, on how many devices, on the user's cluster, within
their budget, and why.

For each workload and target (``harness.recommend.targets``: this machine, emulated or Slurm
clusters, any topology spec `simulate` takes, presets), ``harness.recommend.candidates`` lists every
configuration with its step time (measured, predicted from this machine's calibration, or
simulated at a sweep of device counts); here each gets its memory fit, time and cost to
train ``samples``, and a one-line reason; ``harness.recommend.decide`` picks each strategy's device
count and the answer (``--budget``, ``--deadline``, else the fastest configuration that
keeps scaling efficiency above a floor, and one device when nothing distributed does).

Memory per device counts fp32 parameters, gradients and optimizer state (the workload's
optimizer's slots: Adam's 2 unless a known model's cited setup says otherwise, DLRM's SGD
none, ResNet-50's momentum one; fsdp shards all three over the replicas, a parameter server
keeps the optimizer state on its servers) and the activations of one replica's batch where the
workload says how large they are (no recomputation).

``recommend`` returns a ``records.Recommendation``: per workload and target an ``Answer`` (its
verdict, each strategy at its chosen device count ranked, and every configuration swept with
its ``pareto`` and ``picked`` flags), and what it could not answer (``missing``); its
``table()`` is the ranking as the terminal and the report draw it, its ``as_json()`` what
``--json`` prints.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import pandas as pd

from harness.calibrate.links import probed_networks
from harness.calibrate.workload import row_names, workload_facts
from harness.core.errors import InputError
from harness.core.layout import mechanisms_in_words
from harness.core.stacks import stacks_running
from harness.core.strategies import GPU, WEIGHT_TOLERANCE, exchange_kind
from harness.core.units import (
    compare,
    format_bytes,
    format_duration,
    format_fraction,
    format_rate,
    format_usd,
    three_figures,
)
from harness.recommend import decide
from harness.recommend.candidates import (
    Context,
    bandwidth_bits,
    measured_points,
    predicted_points,
    topology_points,
)
from harness.recommend.model_parallel import MODEL_PARALLEL
from harness.recommend.records import (
    Answer,
    Candidate,
    Recommendation,
    SweepPoint,
    Verdict,
)
from harness.recommend.targets import Target, parse_targets
from harness.sim.model.memory import GRADIENT_COPIES, data_parallel_memory
from harness.sim.model.memory import optimizer_slots as slots_of
from harness.validate.score import latest_validation
from workloads.profile import stated_by
from workloads.spec import WorkloadSpec

if TYPE_CHECKING:
    from results.store import ResultsStore

NAN = float("nan")
DEFAULT_SAMPLES = 10_000_000
DEFAULT_PRESET_TARGETS = ("preset:eth25_v100,hosts=4", "preset:dgx_h100_ib,hosts=1|16")
__all__ = ["DEFAULT_SAMPLES", "Target", "format_duration", "parse_targets", "recommend"]


def validation_errors(validation: pd.DataFrame) -> dict[str, float]:
    """Median |error| of the simulator against measurements: per kind ('step',
    'collective') and, for step times, per simulated strategy ('step:parameter_server')."""
    if validation is None or validation.empty or "kind" not in validation:
        return {}
    out = {str(k): float(g["error"].abs().median()) for k, g in validation.groupby("kind")}
    if "model" in validation:
        steps = validation[validation["kind"] == "step"]
        out.update({f"step:{m}": float(g["error"].abs().median())
                    for m, g in steps.groupby("model")})
    return out


def workload_name(workload: str, size: str | float | None) -> str:
    """``family:size`` as results name a workload (a stored row without a size: NaN)."""
    return f"{workload}:{size}" if isinstance(size, str) and size else str(workload)


def reason_for(row: Candidate, group: Sequence[Candidate], bandwidth_bits: float) -> str:
    """One line in plain words: why this strategy ranks where it does (a run whose weights
    did not match one device's says so first)."""
    if row.measured is not None and row.measured.weights_match is False:
        # correctness before speed, and said first
        return (f"weights ended {row.measured.max_weight_diff:.1e} from one device's "
                f"(tolerance {WEIGHT_TOLERANCE:.0e}): check this strategy before trusting "
                f"its speed; " + _reason(row, group, bandwidth_bits))
    return _reason(row, group, bandwidth_bits)


def _reason(row: Candidate, group: Sequence[Candidate], bandwidth_bits: float) -> str:
    if row.status != "ok":
        said = str(row.status_reason or "")
        return said if said.startswith(row.status) else f"{row.status}: {said}".strip()
    if not row.fits:
        what = "parameters, gradients, optimizer state" + (
            " and activations" if row.activation_bytes_per_sample else "")
        return (f"does not fit: needs {format_bytes(_memory(row))} per "
                f"device for {what}, the device has {format_bytes(row.device_memory_bytes)}")
    at = f" at {format_rate(bandwidth_bits)}" if math.isfinite(bandwidth_bits) else ""
    ex = row.exchange
    if ex == "model_parallel":
        return _split_reason(row, at)
    sparsity = row.sparsity
    if ex in ("parameter_server", "embedding") and sparsity < 0.5:
        ar = [r.bytes_per_worker for r in group if r.exchange == "allreduce"
              and math.isfinite(r.bytes_per_worker)]
        ratio = (min(ar) / row.bytes_per_worker
                 if ar and math.isfinite(row.bytes_per_worker) and row.bytes_per_worker > 0
                 else 1 / sparsity)
        fewer = (compare(ratio, "fewer bytes", "more bytes") if ratio > 0
                 else "fewer bytes")
        who = ("the parameter server" if ex == "parameter_server"
               else "sharding the tables (all-to-all of the looked-up rows)")
        return (f"embedding gradients touch {format_fraction(sparsity)} of rows: {who} moves "
                f"{fewer} than "
                f"all-reduce")
    comm = row.comm_fraction
    if math.isfinite(comm) and comm >= 0.5:
        return f"gradient exchange is {comm:.0%} of the step{at}"
    if ex == "none":
        return "one device: no gradient exchange at all"
    if ex == "sharded" and row.replicas > 1:
        others = [r for r in group if r.exchange != "sharded" and r.status == "ok"]
        shards = (f"shards parameters, gradients and optimizer state {row.replicas} ways"
                  + (f", {row.layout}" if row.layout else ""))
        if others and not any(r.fits for r in others if int(r.replicas) > 1):
            return f"{shards}: the only way it fits"
        if any(not r.fits for r in others):
            return (f"{shards}: fits in {format_bytes(_memory(row))} per "
                    f"device" + (f", gradient exchange {comm:.0%} of the step{at}"
                                 if math.isfinite(comm) else ""))
    eff = row.scaling_efficiency
    said = f"scaling efficiency {eff:.0%}" + (
        f"; over 100%: each device updates 1/{row.replicas} of the weights, one device "
        f"all of them" if ex == "sharded" and eff >= 1.005 else "")
    if math.isfinite(comm):
        text = f"gradient exchange is {comm:.0%} of the step{at}"
        return text + (f"; {said}" if math.isfinite(eff) else "")
    return said if math.isfinite(eff) else "ranked by throughput"


def _memory(row: Candidate) -> float:
    """A filled candidate's memory per device (NaN where unknown)."""
    return NAN if row.memory_per_device_bytes is None else row.memory_per_device_bytes


def _split_reason(row: Candidate, at: str) -> str:
    """Why a model split over devices ranks where it does: what it needs per device, and
    the step time that is not compute (bubble, tensor all-reduces, sends)."""
    comm = row.comm_fraction
    idle = (f"; {comm:.0%} of the step is not compute (bubble and transfers{at})"
            if math.isfinite(comm) else "")
    if row.layout:
        bubble = NAN if row.bubble is None else row.bubble
        return (f"split, as one replica does not fit a device: {row.layout}, "
                f"{format_bytes(_memory(row))} per device"
                + (f" ({tight_note(row)})" if row.tight else "")
                + (f"; pipeline bubble {bubble:.0%}" if math.isfinite(bubble) and bubble > 0
                   else ""))
    return f"splits the model over {row.replicas} devices" + idle


def _tight(r: Candidate) -> bool:
    """A simulated split that fits, but needs more of its device than the fullest
    published model-parallel run does by the same memory model: it may not fit as a stack
    runs it."""
    cap, need = r.device_memory_bytes, _memory(r)
    if not (r.fits and r.exchange == "model_parallel" and r.source == "simulated"
            and math.isfinite(cap) and math.isfinite(need)):
        return False
    from harness.validate.layout_sweep import headroom_note

    return bool(headroom_note(need, cap))


def tight_note(r: Candidate) -> str:
    from harness.validate.layout_sweep import headroom_note

    return headroom_note(_memory(r), r.device_memory_bytes)


def fill(points: Sequence[Candidate], *, samples: float, price: float | None = None,
         optimizer_slots: int = 2) -> list[Candidate]:
    """Memory fit, time and cost to train ``samples``."""
    out = [_filled(r, samples, price, optimizer_slots) for r in points]
    baselines = [r for r in out if int(r.replicas) == 1]
    if baselines and not any(r.fits for r in baselines):
        out = [dataclasses.replace(r, baseline_fits=False) for r in out]
    return out


def _filled(r: Candidate, samples: float, price: float | None, optimizer_slots: int
            ) -> Candidate:
    act = r.activation_bytes_per_sample
    act_bytes = float(act) * int(r.batch or 0) if act and math.isfinite(act) else 0.0
    memory = r.memory_per_device_bytes
    if r.exchange == "model_parallel" and memory is None:
        # a measured split model: what its fullest process measured (a simulated
        # layout's memory comes with its simulation)
        memory = NAN if r.measured is None else r.measured.memory_bytes
    if r.exchange != "model_parallel" and memory is None:
        copies = GRADIENT_COPIES.get((r.framework, r.strategy), 1)
        memory = (data_parallel_memory(r.params, r.exchange, r.replicas, optimizer_slots,
                                       act_bytes, copies, dense_fraction=r.dense_fraction,
                                       table_gradient_bytes=r.table_gradient_bytes).total
                  if math.isfinite(r.params) else NAN)
    assert memory is not None
    cap = r.device_memory_bytes
    r = dataclasses.replace(r, memory_per_device_bytes=memory, fits=not (
        math.isfinite(cap) and math.isfinite(memory) and memory > cap))
    r = dataclasses.replace(r, tight=_tight(r))
    per_hour = r.price_per_device_hour
    if not math.isfinite(per_hour) and price is not None:
        per_hour = float(price)
    tput = r.throughput_samples_s
    ok = r.status == "ok" and math.isfinite(tput) and tput > 0
    train = samples / tput if ok else NAN
    return dataclasses.replace(r, price_per_device_hour=per_hour, train_time_s=train,
                               cost_usd=train * r.replicas / 3600 * per_hour,
                               train_source=f"extrapolated from {r.source}")


def rank(candidates: Sequence[Candidate], *, samples: float, price: float | None,
         bandwidth_bits: float = NAN, optimizer_slots: int = 2,
         goal: decide.Goal | None = None) -> Ranking:
    """Fill memory fit, time and cost, order by the goal (harness.recommend.decide), give reasons;
    rank 1 is the recommendation. The ranking's ``points``: every candidate filled, the
    ranked ones as ranked."""
    filled = fill(candidates, samples=samples, price=price, optimizer_slots=optimizer_slots)
    goal = goal or decide.Goal(samples)
    ordered = decide.best_per_strategy(filled, goal) if filled else []
    ranked = [dataclasses.replace(r, rank=i, reason=reason_for(r, ordered, bandwidth_bits))
              for i, r in enumerate(ordered, 1)]
    as_ranked = {id(old): new for old, new in zip(ordered, ranked, strict=True)}
    return Ranking(ranked, [as_ranked.get(id(p), p) for p in filled])


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Each strategy at its chosen device count, best first (``ranked``), and every
    candidate swept (``points``: the ranked ones the same records)."""

    ranked: list[Candidate]
    points: list[Candidate]


def _points(ctx: Context, facts: WorkloadSpec, target: Target) -> list[Candidate]:
    if target.kind == "topology":
        return topology_points(ctx, facts, target)
    points = measured_points(ctx, facts, target)
    if points or target.kind != "emulated":
        return points
    return predicted_points(ctx, facts, target)


def recommend(measured: pd.DataFrame, *, workloads: Sequence[str] = (),
              targets: Sequence[str] = (), samples: float = DEFAULT_SAMPLES,
              price: float | None = None, stored: StoredInputs | None = None,
              optimizer: str | None = None, budget: float | None = None,
              deadline_s: float | None = None,
              min_efficiency: float = decide.DEFAULT_MIN_EFFICIENCY,
              device: str | None = None, precision: str | None = None,
              global_batch: int | None = None,
              mechanisms: Mapping[str, bool | str] | None = None) -> Recommendation:
    """The answer per workload and target: its verdict, each strategy at its best device
    count, every configuration swept (see the module docstring). ``stored``: what a results
    directory holds beside its measured rows (``stored_inputs``)."""
    _check_options(samples, price, budget, deadline_s, min_efficiency, global_batch, device)
    measured = measured if measured is not None else pd.DataFrame()
    if not measured.empty:
        measured = measured[measured["source"].fillna("measured") == "measured"]
    missing: list[str] = []
    facts = _facts(workloads, measured, missing)
    specs = list(targets) or (sorted(set(measured["cluster"])) if not measured.empty else []) \
        + list(DEFAULT_PRESET_TARGETS)
    parsed = parse_targets(specs)
    if global_batch is not None:
        kept = [t.label for t in parsed if t.kind != "topology"]
        if kept:
            raise InputError(f"--global-batch applies to described clusters (a topology or "
                             f"preset:...); {kept[0]} trains at its runs' batches: name "
                             f"--target")
    stored = stored or StoredInputs()
    ctx = Context(measured=measured, simulated=stored.simulated,
                  errors=validation_errors(stored.validation), ram_bytes=stored.ram_bytes,
                  fits=stored.fits, sweeps=stored.sweeps, networks=list(stored.networks),
                  price=price, device=device, precision=precision, global_batch=global_batch,
                  mechanisms=dict(mechanisms or {}))
    goal = decide.Goal(samples, budget, deadline_s, min_efficiency)
    answers: list[Answer] = []
    for name, fact in facts.items():
        slots = slots_of(optimizer or fact.optimizer)
        wctx = dataclasses.replace(ctx, optimizer_slots=slots, stated=stated_by(name))
        for target in parsed:
            try:
                points = _points(wctx, fact, target)
            except InputError as exc:
                if targets:
                    raise
                missing.append(f"{name} on {target.label}: {exc}")
                continue
            if not points:
                missing.append(no_points(name, target))
                continue
            ranking = rank(points, samples=samples, price=price,
                           bandwidth_bits=bandwidth_bits(ctx, target),
                           optimizer_slots=slots, goal=goal)
            answers.append(_answer(_verdict(name, target, ranking, goal, global_batch),
                                   ranking))
    if targets and not answers and missing:
        where, _, said = missing[0].partition(": ")
        head, _, todo = said.partition("; ")
        workload, _, on = where.partition(" on ")
        raise Unanswered(f"no results for {missing[0]}", Verdict(
            workload=workload, target=on, status="none",
            headline=head or f"no results for {where}", why=todo))
    _refuse_unmet([a.verdict for a in answers], goal, explicit=bool(targets))
    return Recommendation(tuple(answers), tuple(missing), mechanisms_in_words(ctx.mechanisms))


def _check_options(samples: float, price: float | None, budget: float | None,
                   deadline_s: float | None, min_efficiency: float, global_batch: int | None,
                   device: str | None) -> None:
    """Each option in range, one line naming it where not."""
    if not samples > 0:
        raise InputError(f"--samples must be > 0, got {samples}")
    if price is not None and not price >= 0:
        raise InputError(f"--price must be >= 0 USD per device-hour, got {price}")
    if budget is not None and not budget > 0:
        raise InputError(f"--budget must be > 0 USD, got {budget}")
    if deadline_s is not None and not deadline_s > 0:
        raise InputError(f"--deadline must be > 0 hours, got {deadline_s / 3600:g}")
    if not 0 <= min_efficiency <= 1:
        raise InputError(f"--min-efficiency must be from 0 to 1, got {min_efficiency}")
    if global_batch is not None and not (isinstance(global_batch, int) and global_batch >= 1):
        raise InputError(f"--global-batch must be a whole number of samples >= 1, got "
                         f"{global_batch}")
    if device is not None:
        from harness.core.errors import SpecError
        from harness.sim.systems.preset import load_preset

        try:
            load_preset(device)
        except SpecError as exc:
            raise InputError(f"--device: {exc}") from None


def _facts(workloads: Sequence[str], measured: pd.DataFrame,
           missing: list[str]) -> dict[str, WorkloadSpec]:
    """Each workload's facts; one asked for by name must be known, one found in the results
    and not known goes to ``missing`` with the reason."""
    names = list(workloads)
    if not names and not measured.empty:
        names = sorted(set(row_names(measured)))
    if not names:
        raise InputError("no workloads to recommend for: give --workload FAMILY:SIZE or a "
                         "results directory with measured runs")
    facts: dict[str, WorkloadSpec] = {}
    for name in names:
        try:
            facts[name] = workload_facts(name, measured)
        except InputError as exc:
            if workloads:  # asked for by name: the user must hear why
                raise
            missing.append(f"{name}: {exc}")
    return facts


def _verdict(name: str, target: Target, ranking: Ranking, goal: decide.Goal,
             global_batch: int | None) -> Verdict:
    answer = decide.verdict(name, target.label, ranking.ranked, ranking.points, goal)
    if global_batch is not None:
        return dataclasses.replace(answer, constraint=answer.constraint
                                   + f"; global batch {global_batch} samples per step")
    if target.kind == "topology":
        return dataclasses.replace(answer, why=_with_batch(answer))
    return answer


def _answer(verdict: Verdict, ranking: Ranking) -> Answer:
    """The verdict with its ranking, and every configuration swept flagged where it is on
    the Pareto front and where it was ranked."""
    front = {id(p) for p in decide.pareto(ranking.points)}
    picked = {id(p) for p in ranking.ranked}
    return Answer(verdict, tuple(ranking.ranked), tuple(
        SweepPoint(p, id(p) in front, id(p) in picked) for p in ranking.points))


def _with_batch(answer: Verdict) -> str:
    """A described cluster's answer without --global-batch says how many samples its pick
    trains a step (the workload's batch on every device, so more with more devices): the
    number a pipeline's bubble and a layout's choice turn on."""
    pick, why = answer.pick, answer.why
    if pick is None or answer.status != "ok":
        return why
    samples = pick.throughput_samples_s * pick.step_time_s
    if not (math.isfinite(samples) and samples > 0) or int(pick.replicas) == 1:
        return why
    return (why + f"; {samples:,.0f} samples a step, the workload's batch on each device "
            f"(--global-batch sets it)")


class Unanswered(InputError):
    """No answer for a workload on a target, said in one line; ``card`` is the verdict a
    report shows for it (headline, why), so that nothing parses the line back."""

    def __init__(self, message: str, card: Verdict) -> None:
        super().__init__(message)
        self.card = card


def no_points(name: str, target: Target) -> str:
    """Why a workload has no candidates on a target, and what to do: a model described by
    its numbers only never runs on a measured target; any other was not run there yet."""
    from workloads import WorkloadError, numbers_only, resolve_workload

    where = f"{name} on {target.label}"
    try:
        only = numbers_only(resolve_workload(name))
    except WorkloadError:
        only = False
    if only and target.kind != "topology":
        return (f"{where}: {name} is described by its numbers only, so no framework runs it "
                f"on {target.label}; simulate it on a described system (--target "
                f"preset:dgx_a100,hosts=1, or a topology) or give a runnable workload (a "
                f"built-in like cnn:M, or models/yours.py:build)")
    return f"{where}: not run there yet (stratbench run --workload {name})"


def _refuse_unmet(verdicts: list[Verdict], goal: decide.Goal, explicit: bool) -> None:
    """Bad input, said in one line: a budget or deadline that nothing meets anywhere (with
    the nearest option and by how much it misses), or an explicit target the workload fits
    on in no configuration."""
    if not verdicts:
        return
    if all(v.status == "over_budget" for v in verdicts):
        v = verdicts[0]
        raise Unanswered(f"{v.workload} on {v.target}: {v.headline} ({v.why})", v)
    if explicit:
        for v in verdicts:
            if v.status == "none" and v.why.startswith("does not fit"):
                need = v.why.removeprefix("does not fit: ")
                raise Unanswered(f"{v.workload} does not fit {v.target} in any "
                                 f"data-parallel or model-parallel layout ({need})", v)


def _ram_bytes(store: ResultsStore) -> float | None:
    for run_id in reversed(store.run_ids()):
        manifest = store.manifest(run_id) or {}
        if manifest.get("memory_bytes"):
            return float(manifest["memory_bytes"])
    return None


@dataclasses.dataclass(frozen=True)
class StoredInputs:
    """What ``recommend`` reads of a results directory beside its measured rows: simulated
    rows, validation, the calibration fits, sweeps and the link probes of emulated runs, this
    machine's memory."""

    simulated: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    validation: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    ram_bytes: float | None = None
    fits: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    networks: tuple[dict[str, Any], ...] = ()  # calibrate.links.probed_networks
    sweeps: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)


def stored_inputs(root: str | os.PathLike[str]) -> StoredInputs:
    """``StoredInputs`` of a results directory, read once where several questions are asked
    of one directory."""
    from harness.calibrate.fits import comm_table
    from results.store import ResultsStore, load_table_safe

    store = ResultsStore(root)
    return StoredInputs(simulated=load_table_safe(root, "simulated"),
                        validation=latest_validation(root), ram_bytes=_ram_bytes(store),
                        fits=comm_table(root), networks=tuple(probed_networks(store)),
                        sweeps=comm_table(root, "comm"))


class Options(TypedDict, total=False):
    """``recommend``'s question, as ``recommend_from_store`` passes it on."""

    workloads: Sequence[str]
    targets: Sequence[str]
    samples: float
    price: float | None
    optimizer: str | None
    budget: float | None
    deadline_s: float | None
    min_efficiency: float
    device: str | None
    precision: str | None
    global_batch: int | None
    mechanisms: Mapping[str, bool | str] | None


def recommend_from_store(root: str | os.PathLike[str], **options: Unpack[Options]
                         ) -> Recommendation:
    """``recommend`` over a results directory (its measured rows and ``stored_inputs``)."""
    from results.store import load

    return recommend(load(root), stored=stored_inputs(root), **options)


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if kind == "ms":  # never e-notation: a 36.7 s step of a huge model reads 36,700
        return three_figures(value * 1e3)
    if kind == "pct":
        return f"{value:.0%}"
    if kind == "time":
        return format_duration(value)
    if kind == "usd":
        return format_usd(value)
    if kind == "gb":
        return format_bytes(value)
    return three_figures(value) if isinstance(value, float) else str(value)


def format_verdicts(verdicts: Sequence[Verdict]) -> list[str]:
    """The answers first: one block per workload and target."""
    lines = []
    for v in verdicts:
        lines.append(f"{v.workload} on {v.target}"
                     + (f" ({v.constraint})" if v.constraint else ""))
        lines.append(f"  -> {v.headline}")
        for key, said in (("why", v.why), ("sure", v.sure)):
            if said:
                lines.append(f"     {key}: {said}")
    return lines


def format_table(answer: Recommendation) -> str:
    """The verdicts, then the table for a terminal, one block per workload and target:
    each strategy at its chosen device count."""
    frame = answer.table()
    lines = [f"no results for {m}" for m in answer.missing]
    if frame.empty:
        return "\n".join(lines) or "no recommendations: no matching results or targets"
    lines += [""] if lines else []
    if answer.verdicts:
        lines += [*format_verdicts(answer.verdicts), ""]
    for (workload, target), group in frame.groupby(["workload", "target"], sort=False):
        lines.append(f"{workload} on {target}: each strategy at its best device count")
        lines.append(f"  {'#':>2} {'strategy':<30}{'n':>5}{'step ms':>10}{'samples/s':>11}"
                     f"{'eff':>6}{'mfu':>6}{'mem/dev':>11}{'fits':>6}{'train':>10}{'cost':>13}"
                     f"  {'source':<14} reason")
        for r in group.to_dict("records"):
            err = r.get("validation_error", NAN)
            source = r["source"] + (f" ±{err:.0%}" if isinstance(err, float)
                                    and math.isfinite(err) else "")
            strategy = f"{r['framework']}/{r['strategy']}"
            lines.append(
                f"  {r['rank']:>2} {strategy[:29]:<30}{r['replicas']:>5}"
                f"{_fmt(r['step_time_s'], 'ms'):>10}{_fmt(r['throughput_samples_s'], ''):>11}"
                f"{_fmt(_efficiency(r), 'pct'):>6}{_fmt(r.get('mfu', NAN), 'pct'):>6}"
                f"{_fmt(r['memory_per_device_bytes'], 'gb'):>11}"
                f"{_fits(r):>6}{_fmt(r['train_time_s'], 'time'):>10}"
                f"{_fmt(r['cost_usd'], 'usd'):>13}  {source:<14} {r['reason']}")
        notes = sorted({str(n) for n in group.get("compute_note", pd.Series(dtype=str))
                        if isinstance(n, str) and n}
                       | {f"price: {b}" for b in group.get("price_basis", pd.Series(dtype=str))
                          if isinstance(b, str) and b}
                       | {f"±: {b}" for b in group.get("validation_basis", pd.Series(dtype=str))
                          if isinstance(b, str) and b})
        lines += [f"  ({n})" for n in notes]
        runs = {f"sim/{r['strategy']}": r.get("runs_as") for r in group.to_dict("records")
                if r["framework"] == "sim" and isinstance(r.get("runs_as"), str)}
        if any(runs.values()):
            lines.append("  (what to run: " + "; ".join(
                f"{sim}: {real or 'no framework strategy on these devices'}"
                for sim, real in runs.items()) + ")")
            kinds = {f"sim/{r['strategy']}": r.get("device_kind") or GPU
                     for r in group.to_dict("records") if r["framework"] == "sim"}
            options = dict.fromkeys(
                stacks_running(sim.removeprefix("sim/").split("+"), kinds[sim])[1]
                for sim, real in runs.items() if real)
            lines += [f"  (set in those stacks: {o})" for o in options if o]
        if answer.mechanisms and any(
                exchange_kind(r["framework"], r["strategy"]) == MODEL_PARALLEL
                for r in group.to_dict("records")):
            lines.append(f"  (model-parallel layouts assume: {answer.mechanisms})")
        if any(exchange_kind(r["framework"], r["strategy"]) == MODEL_PARALLEL
               and r.get("source") == "simulated" for r in group.to_dict("records")):
            from harness.validate.layout_sweep import headroom_rule

            lines.append(f"  ({headroom_rule()})")
        lines.append("")
    lines.append("source: measured (a real run of that workload and strategy), estimated "
                 "(from another workload's run: the compute note says which), predicted (an "
                 "emulated cluster never run, from this machine's calibration) or simulated; "
                 "± the simulator's median "
                 "|error| against measured runs (here, or published runs of the described "
                 "system where a ± note names them); train time and cost are extrapolated from "
                 "the step time; fits '?': device memory unknown")
    return "\n".join(lines).rstrip()


def _efficiency(r: dict[Any, Any]) -> float:
    """The row's scaling efficiency, none where one device cannot hold the model (against
    such a device the ratio says nothing; the verdict does not judge it either)."""
    return NAN if r.get("baseline_fits") is False else r["scaling_efficiency"]


def _fits(r: dict[Any, Any]) -> str:
    cap = r.get("device_memory_bytes", NAN)
    if not (isinstance(cap, float) and math.isfinite(cap)):
        return "?"
    return ("tight" if r.get("tight") else "yes") if r["fits"] else "NO"
