"""What a simulated step reports, and the worker classes every step model splits workers into.

Apart from the step models so that the data-parallel, asynchronous parameter-server and
model-parallel steps share the record without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.sim.systems.spec import SpecError


@dataclass(frozen=True)
class StepResult:
    """One simulated training step of one strategy."""

    strategy: str
    workers: int
    step_time_s: float
    compute_s: float  # forward + backward of the slowest worker
    optimizer_s: float
    comm_s: float  # sum of the step's collective times
    exposed_comm_s: float  # step time not hidden behind compute and optimizer
    bytes_per_step: float  # bytes put on the network per step, all workers together
    throughput_samples_s: float
    collectives: int
    class_bytes: dict[str, float] = field(default_factory=dict)
    utilisation: dict[str, float] = field(default_factory=dict)
    events: int = 0
    mode: str = "fast"
    wall_s: float = 0.0
    compute_source: str = ""
    staleness_mean: float | None = None
    staleness_max: float | None = None
    notes: tuple[str, ...] = ()
    layout: str = ""  # model parallelism: dp=..,pp=..,tp=..
    bubble: float | None = None  # mean idle fraction of the pipeline's stages

    @property
    def bytes_per_worker(self) -> float:
        return self.bytes_per_step / self.workers


def worker_classes(workers: int, stragglers: int, factor: float) -> list[tuple[int, float]]:
    """(count, slow-down) per class of equivalent workers."""
    if not 0 <= stragglers <= workers:
        raise SpecError(f"stragglers={stragglers} must be from 0 to workers={workers}")
    if not factor >= 1:
        raise SpecError(f"straggler factor {factor} must be >= 1")
    if stragglers == 0 or factor == 1:
        return [(workers, 1.0)]
    return [c for c in ((workers - stragglers, 1.0), (stragglers, float(factor))) if c[0]]
