"""The recommender's answers as records: a candidate (one strategy at one device count on
one target, with where its numbers came from), the decision that picked among them, and the
verdict a user reads. ``harness.recommend.decide`` makes them; the terminal, ``--json``, the
report and the nightly store read them (a record turns into a row or a JSON object at that
boundary only, by its own method).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TypedDict

import pandas as pd

from harness.core.strategies import exchange_kind
from harness.sim.rows import Scalar

NAN = float("nan")


@dataclass(frozen=True)
class MeasuredRun:
    """What a measured candidate's run adds: whether its weights ended as one device's, by
    how much they differed, and the memory its fullest process used."""

    weights_match: bool | None
    max_weight_diff: float
    memory_bytes: float


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One strategy at one device count on one target: its step (measured, predicted,
    estimated or simulated, ``source`` says which), memory, and, once the recommender has
    filled it (``recommender.fill``), its fit, time and cost to train; ``rank`` and ``reason``
    once ranked. ``None`` in an optional field: the candidate does not have that column."""

    framework: str
    strategy: str
    replicas: int
    source: str
    status: str = "ok"
    status_reason: str = ""
    step_time_s: float = NAN
    batch: int = 0
    throughput_samples_s: float = NAN
    scaling_efficiency: float = NAN
    comm_fraction: float = NAN
    bytes_per_worker: float = NAN
    params: float = NAN
    sparsity: float = 1.0
    dense_fraction: float = 1.0
    table_gradient_bytes: float | None = None
    activation_bytes_per_sample: float | None = None
    validation_error: float = NAN
    validation_basis: str | None = None
    price_per_device_hour: float = NAN
    price_basis: str = ""
    compute_note: str = ""
    device_memory_bytes: float = NAN
    exchange: str = ""
    measured: MeasuredRun | None = None
    model: str | None = None  # the simulator's model of it (simulated and predicted)
    layout: str | None = None
    memory_per_device_bytes: float | None = None  # None until filled, where not simulated
    bubble: float | None = None
    zero: int | None = None
    mfu: float | None = None
    runs_as: str | None = None
    device_kind: str | None = None
    fits: bool = True
    tight: bool = False
    train_time_s: float = NAN
    cost_usd: float = NAN
    train_source: str = ""
    baseline_fits: bool = True
    rank: int | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if not self.exchange:
            object.__setattr__(self, "exchange", exchange_kind(self.framework, self.strategy))

    def as_row(self) -> dict[str, Scalar]:
        """The candidate as a table row (the recommender's DataFrame, ``--json``): every
        column it has, none it lacks."""
        row: dict[str, Scalar] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "measured":
                if value is not None:
                    row.update(weights_match=value.weights_match,
                               max_weight_diff=value.max_weight_diff,
                               measured_memory_bytes=value.memory_bytes)
            elif f.name == "baseline_fits":
                if not value:
                    row[f.name] = False
            elif value is not None or f.name not in _OPTIONAL:
                row[f.name] = value
        return row

    def summary(self) -> PickSummary:
        """The candidate as a verdict names its pick or runner-up (NaN for what it lacks)."""
        return PickSummary(
            framework=self.framework, strategy=self.strategy, replicas=self.replicas,
            train_time_s=self.train_time_s, cost_usd=self.cost_usd,
            step_time_s=self.step_time_s, throughput_samples_s=self.throughput_samples_s,
            scaling_efficiency=self.scaling_efficiency, source=self.source,
            validation_error=self.validation_error,
            reason=NAN if self.reason is None else self.reason, status=self.status,
            runs_as=NAN if self.runs_as is None else self.runs_as,
            mfu=NAN if self.mfu is None else self.mfu)


# the columns a candidate has only where its source gives them (``as_row`` leaves them out)
_OPTIONAL = frozenset(("validation_basis", "model", "layout", "memory_per_device_bytes",
                       "bubble", "zero", "mfu", "runs_as", "device_kind", "rank", "reason"))


class PickSummary(TypedDict):
    """A verdict's pick or runner-up as ``--json`` and the nightly store write it."""

    framework: str
    strategy: str
    replicas: int
    train_time_s: float
    cost_usd: float
    step_time_s: float
    throughput_samples_s: float
    scaling_efficiency: float
    source: str
    validation_error: float
    reason: str | float
    status: str
    runs_as: str | float
    mfu: float


class OptionDict(TypedDict):
    label: str
    framework: str
    strategy: str
    replicas: int
    train_time_s: float
    cost_usd: float
    scaling_efficiency: float


@dataclass(frozen=True)
class Option:
    """A candidate as a decision names it: what it is and the numbers that can decide."""

    label: str
    framework: str
    strategy: str
    replicas: int
    train_time_s: float
    cost_usd: float
    scaling_efficiency: float

    def as_dict(self) -> OptionDict:
        return OptionDict(label=self.label, framework=self.framework, strategy=self.strategy,
                          replicas=self.replicas, train_time_s=self.train_time_s,
                          cost_usd=self.cost_usd, scaling_efficiency=self.scaling_efficiency)


@dataclass(frozen=True, kw_only=True)
class Numbers:
    """The limits a decision was made under, and the ratios its rule compared (None: a
    ratio its rule does not use)."""

    budget_usd: float | None
    deadline_s: float | None
    min_efficiency: float
    cost_over: float | None = None  # over_limits: the nearest miss against the limits
    time_over: float | None = None
    time_ratio: float | None = None  # against one device: the option's time over the pick's
    cost_ratio: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {"budget_usd": self.budget_usd,
                                        "deadline_s": self.deadline_s,
                                        "min_efficiency": self.min_efficiency}
        for key in ("cost_over", "time_over", "time_ratio", "cost_ratio"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


# a distributed pick (its rule names what it skipped), and a one-device pick compared with
# the fastest distributed option
PICK_RULES = ("fastest_efficient", "fastest_within_limits", "cheapest_within_deadline")
AGAINST_ONE_DEVICE = ("below_efficiency", "costlier_within_limits", "over_limits_faster",
                      "slower_than_one_device")


class DecisionDict(TypedDict, total=False):
    rule: str
    numbers: dict[str, float | None]
    baseline: OptionDict | None
    option: OptionDict | None
    detail: str
    skipped: OptionDict | None
    skipped_why: str | None
    same_framework: bool


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The rule that decided a verdict, with its numbers and its baseline (``decided_by``)."""

    rule: str
    numbers: Numbers
    baseline: Option | None = None
    option: Option | None = None
    detail: str = ""  # does_not_fit, no_option: what stopped every candidate
    skipped: Option | None = None  # a distributed pick: the faster option it passed over
    skipped_why: str | None = None  # efficiency, cost or limits
    same_framework: bool = False  # against one device: the option's framework is the pick's

    def as_dict(self) -> DecisionDict:
        """As ``--json`` and the nightly store write it: each rule's keys only."""
        out = DecisionDict(rule=self.rule, numbers=self.numbers.as_dict(),
                           baseline=_as_dict(self.baseline), option=_as_dict(self.option))
        if self.rule in ("does_not_fit", "no_option"):
            out["detail"] = self.detail
        elif self.rule in PICK_RULES:
            out["skipped"] = _as_dict(self.skipped)
            out["skipped_why"] = self.skipped_why
        elif self.rule in AGAINST_ONE_DEVICE:
            out["same_framework"] = self.same_framework
        return out


def _as_dict(option: Option | None) -> OptionDict | None:
    return None if option is None else option.as_dict()


class VerdictDict(TypedDict):
    workload: str
    target: str
    constraint: str
    margin: float
    pick: PickSummary | None
    runner_up: PickSummary | None
    status: str
    headline: str
    why: str
    sure: str
    decided_by: DecisionDict | None


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The answer for one workload on one target: ``ok`` (a pick, its runner-up and the
    margin between them), ``over_budget`` (nothing meets the limits: the nearest miss as the
    pick) or ``none``; its ``why`` is written from its ``decided_by``."""

    workload: str
    target: str
    status: str
    headline: str
    why: str
    sure: str = ""
    constraint: str = ""
    margin: float = NAN
    pick: Candidate | None = None
    runner_up: Candidate | None = None
    decided_by: Decision | None = None

    def as_dict(self) -> VerdictDict:
        """As ``--json`` writes it."""
        return VerdictDict(
            workload=self.workload, target=self.target, constraint=self.constraint,
            margin=self.margin, pick=None if self.pick is None else self.pick.summary(),
            runner_up=None if self.runner_up is None else self.runner_up.summary(),
            status=self.status, headline=self.headline, why=self.why, sure=self.sure,
            decided_by=None if self.decided_by is None else self.decided_by.as_dict())


# the ranking table's leading columns, and the sweep's (``--json``, the report)
COLUMNS = ("workload", "target", "rank", "framework", "strategy", "runs_as", "replicas", "status",
           "step_time_s", "throughput_samples_s", "scaling_efficiency", "comm_fraction",
           "memory_per_device_bytes", "device_memory_bytes", "fits", "train_time_s",
           "price_per_device_hour", "cost_usd", "source", "train_source", "validation_error",
           "reason")
SWEEP_COLUMNS = ("workload", "target", "framework", "strategy", "runs_as", "replicas", "status",
                 "train_time_s", "cost_usd", "scaling_efficiency", "throughput_samples_s",
                 "step_time_s", "comm_fraction", "layout", "source", "validation_error",
                 "pareto", "picked")


@dataclass(frozen=True)
class SweepPoint:
    """One configuration swept: whether it is on the time-cost Pareto front, and whether it
    is its strategy's chosen device count."""

    candidate: Candidate
    pareto: bool
    picked: bool


@dataclass(frozen=True)
class Answer:
    """One workload on one target: the verdict, each strategy at its chosen device count
    (best first), and every configuration swept."""

    verdict: Verdict
    ranked: tuple[Candidate, ...]
    sweep: tuple[SweepPoint, ...]

    def rows(self) -> list[dict[str, Scalar]]:
        """The ranked candidates as table rows, with their workload and target."""
        return [c.as_row() | {"workload": self.verdict.workload, "target": self.verdict.target}
                for c in self.ranked]

    def sweep_rows(self) -> list[dict[str, Scalar]]:
        """The sweep as ``--json`` writes it: ``SWEEP_COLUMNS`` (NaN for what a candidate
        lacks)."""
        out: list[dict[str, Scalar]] = []
        for point in self.sweep:
            row = point.candidate.as_row()
            out.append({**{k: row.get(k, NAN) for k in SWEEP_COLUMNS},
                        "workload": self.verdict.workload, "target": self.verdict.target,
                        "pareto": point.pareto, "picked": point.picked})
        return out


class RecommendationJSON(TypedDict):
    verdicts: list[VerdictDict]
    mechanisms: str
    ranking: list[dict[str, Scalar]]
    sweep: list[dict[str, Scalar]]
    missing: list[str]


@dataclass(frozen=True)
class Recommendation:
    """What the recommender answers: one ``Answer`` per workload and target, what it could
    not answer and why (``missing``), and what the model-parallel layouts assumed of the
    stack (``mechanisms``, in words)."""

    answers: tuple[Answer, ...] = ()
    missing: tuple[str, ...] = ()
    mechanisms: str = ""

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(a.verdict for a in self.answers)

    def table(self) -> pd.DataFrame:
        """The ranked candidates as a table (``COLUMNS`` first): for the terminal and the
        report."""
        rows = [row for a in self.answers for row in a.rows()]
        if not rows:
            return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
        frame = pd.DataFrame(rows)
        return frame.reindex(columns=[*COLUMNS, *(c for c in frame.columns
                                                  if c not in COLUMNS)])

    def sweep_rows(self) -> list[dict[str, Scalar]]:
        return [row for a in self.answers for row in a.sweep_rows()]

    def sweep_frame(self) -> pd.DataFrame:
        """Every configuration swept, as a table."""
        return pd.DataFrame(self.sweep_rows())

    def as_json(self) -> RecommendationJSON:
        """As ``--json`` writes it (NaN as None in the ranking, as a table holds it)."""
        return RecommendationJSON(verdicts=[v.as_dict() for v in self.verdicts],
                                  mechanisms=self.mechanisms, ranking=records(self.table()),
                                  sweep=self.sweep_rows(), missing=list(self.missing))


def records(frame: pd.DataFrame) -> list[dict[str, Scalar]]:
    """A table's rows, JSON-able (NaN as None)."""
    return [{str(k): (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in r.items()} for r in frame.to_dict("records")]
