"""Pipeline schedules (GPipe, 1F1B) as data, and their timing on given stage and link costs.

A schedule is, per stage, the order in which it runs forward (F) and backward (B) passes of
micro-batches; torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B, Megatron-LM's
non-interleaved schedule and PipeDream-flush all run one of these two orders:

* GPipe (Huang et al. 2019): every forward, then every backward.
* 1F1B (Narayanan et al. 2021): stage s runs S-s-1 warm-up forwards, then alternates one
  forward and one backward, then drains the remaining backwards, so at most S-s micro-batches
  wait for their backward (activation memory) instead of M.

Timing is list scheduling, which is what the runtimes do: a stage runs its next pass as soon
as the stage is free and the pass's input has arrived (the previous stage's activations, the
next stage's gradients). A send starts when its pass ends and the directed link between the
two stages is free (sends queue on a slow link; the two directions do not share). With equal
stages and free links both schedules take (M + S - 1)(F + B): the bubble, the idle fraction of
every stage, is (S - 1) / (M + S - 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.sim.spec import SpecError

FORWARD, BACKWARD = "F", "B"


@dataclass(frozen=True)
class Pass:
    kind: str  # FORWARD | BACKWARD
    microbatch: int


def stage_order(schedule: str, stages: int, microbatches: int) -> list[list[Pass]]:
    """Per stage, the passes it runs, in order."""
    if stages < 1 or microbatches < 1:
        raise SpecError(f"a pipeline needs stages >= 1 and micro-batches >= 1, not "
                        f"{stages} and {microbatches}")
    forwards = [Pass(FORWARD, m) for m in range(microbatches)]
    backwards = [Pass(BACKWARD, m) for m in range(microbatches)]
    if schedule == "gpipe":
        return [forwards + backwards for _ in range(stages)]
    if schedule != "1f1b":
        raise SpecError(f"unknown pipeline schedule {schedule!r} (choose from gpipe, 1f1b)")
    orders = []
    for s in range(stages):
        warmup = min(stages - s - 1, microbatches)
        order = forwards[:warmup]
        for i in range(microbatches - warmup):
            order += [forwards[warmup + i], backwards[i]]
        order += backwards[microbatches - warmup:]
        orders.append(order)
    return orders


def peak_in_flight(order: Sequence[Pass]) -> int:
    """Most micro-batches a stage holds activations for at once (forward run, backward not)."""
    held = peak = 0
    for p in order:
        held += 1 if p.kind == FORWARD else -1
        peak = max(peak, held)
    return peak


@dataclass(frozen=True)
class PipelineTiming:
    makespan_s: float
    busy_s: tuple[float, ...]  # per stage: time spent computing
    ends_s: tuple[float, ...]  # per stage: when its last pass ends (its gradients are whole)
    spans: dict[tuple[int, str, int], tuple[float, float]]  # (stage, kind, mb) -> (start, end)

    @property
    def bubble(self) -> float:
        """Mean idle fraction of the stages over the pipeline's run."""
        if self.makespan_s <= 0:
            return 0.0
        return 1.0 - sum(self.busy_s) / (len(self.busy_s) * self.makespan_s)



def run_pipeline(orders: Sequence[Sequence[Pass]], forward_s: Sequence[float],
                 backward_s: Sequence[float], send_s: Sequence[float],
                 send_back_s: Sequence[float]) -> PipelineTiming:
    """Time the schedule: ``forward_s[s]``/``backward_s[s]`` per micro-batch on stage s;
    ``send_s[s]`` moves activations from stage s to s+1, ``send_back_s[s]`` gradients from
    s+1 back to s."""
    stages = len(orders)
    if not (len(forward_s) == len(backward_s) == stages
            and len(send_s) == len(send_back_s) == stages - 1):
        raise SpecError("one forward and backward time per stage, one send per boundary")
    arrival: dict[tuple[int, str, int], float] = {}  # input of (stage, kind, mb) is there
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    free = [0.0] * stages
    busy = [0.0] * stages
    link_forward = [0.0] * max(0, stages - 1)
    link_back = [0.0] * max(0, stages - 1)
    nxt = [0] * stages
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(stages):
            while nxt[s] < len(orders[s]):
                p = orders[s][nxt[s]]
                ready = _input_time(s, p, stages, arrival, spans)
                if ready is None:
                    break
                start = max(free[s], ready)
                duration = forward_s[s] if p.kind == FORWARD else backward_s[s]
                end = start + duration
                spans[(s, p.kind, p.microbatch)] = (start, end)
                free[s] = end
                busy[s] += duration
                if p.kind == FORWARD and s + 1 < stages:
                    leave = max(end, link_forward[s])
                    link_forward[s] = leave + send_s[s]
                    arrival[(s + 1, FORWARD, p.microbatch)] = link_forward[s]
                elif p.kind == BACKWARD and s > 0:
                    leave = max(end, link_back[s - 1])
                    link_back[s - 1] = leave + send_back_s[s - 1]
                    arrival[(s - 1, BACKWARD, p.microbatch)] = link_back[s - 1]
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise SpecError("the pipeline schedule deadlocks: a stage waits for a pass "
                            "that waits for it")
    return PipelineTiming(max(free), tuple(busy), tuple(free), spans)


def _input_time(stage: int, p: Pass, stages: int,
                arrival: dict[tuple[int, str, int], float],
                spans: dict[tuple[int, str, int], tuple[float, float]]) -> float | None:
    """When the pass's input is on the stage; None if it is not produced yet."""
    if p.kind == FORWARD:
        return 0.0 if stage == 0 else arrival.get((stage, FORWARD, p.microbatch))
    own_forward = spans.get((stage, FORWARD, p.microbatch))
    if own_forward is None:
        return None
    if stage == stages - 1:  # the loss is computed here: the backward starts from it
        return own_forward[1]
    return arrival.get((stage, BACKWARD, p.microbatch))
