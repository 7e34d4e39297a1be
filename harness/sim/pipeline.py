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

from harness.core.errors import SpecError

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
                 send_back_s: Sequence[float], cores: float | None = None,
                 forward_comm_s: Sequence[float] | None = None,
                 backward_comm_s: Sequence[float] | None = None) -> PipelineTiming:
    """Time the schedule: ``forward_s[s]``/``backward_s[s]`` of compute per micro-batch on
    stage s, then ``forward_comm_s[s]``/``backward_comm_s[s]`` of blocking collectives
    (tensor parallelism's all-reduces; none by default); ``send_s[s]`` moves activations
    from stage s to s+1, ``send_back_s[s]`` gradients from s+1 back to s.

    ``cores``: when fewer than the stages (emulated hosts on one machine), the stages
    computing at a moment share them evenly (processor sharing): compute runs slower while
    more stages compute; collectives do not take a core."""
    stages = len(orders)
    fwd_comm = list(forward_comm_s) if forward_comm_s is not None else [0.0] * stages
    bwd_comm = list(backward_comm_s) if backward_comm_s is not None else [0.0] * stages
    if not (len(forward_s) == len(backward_s) == len(fwd_comm) == len(bwd_comm) == stages
            and len(send_s) == len(send_back_s) == stages - 1):
        raise SpecError("one forward and backward time per stage, one send per boundary")
    links = _Links(send_s, send_back_s)
    if cores is not None and cores < stages:
        return _run_shared(orders, (forward_s, backward_s), (fwd_comm, bwd_comm), links, cores)
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    free = [0.0] * stages
    busy = [0.0] * stages
    nxt = [0] * stages
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(stages):
            while nxt[s] < len(orders[s]):
                p = orders[s][nxt[s]]
                ready = _input_time(s, p, stages, links.arrival, spans)
                if ready is None:
                    break
                start = max(free[s], ready)
                duration = (forward_s[s] + fwd_comm[s] if p.kind == FORWARD
                            else backward_s[s] + bwd_comm[s])
                spans[(s, p.kind, p.microbatch)] = (start, start + duration)
                free[s] = start + duration
                busy[s] += duration
                links.send(s, p, start + duration, stages)
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise SpecError(DEADLOCK)
    return PipelineTiming(max(free), tuple(busy), tuple(free), spans)


DEADLOCK = "the pipeline schedule deadlocks: a stage waits for a pass that waits for it"


class _Links:
    """The directed links between neighbouring stages: a send leaves when its pass ends and
    the link is free (sends queue; the two directions do not share)."""

    def __init__(self, send_s: Sequence[float], send_back_s: Sequence[float]) -> None:
        self.send_s, self.send_back_s = send_s, send_back_s
        self.forward_free = [0.0] * len(send_s)
        self.back_free = [0.0] * len(send_back_s)
        self.arrival: dict[tuple[int, str, int], float] = {}  # input of (stage, kind, mb)

    def send(self, stage: int, p: Pass, end: float, stages: int) -> None:
        if p.kind == FORWARD and stage + 1 < stages:
            self.forward_free[stage] = max(end, self.forward_free[stage]) + self.send_s[stage]
            self.arrival[(stage + 1, FORWARD, p.microbatch)] = self.forward_free[stage]
        elif p.kind == BACKWARD and stage > 0:
            b = stage - 1
            self.back_free[b] = max(end, self.back_free[b]) + self.send_back_s[b]
            self.arrival[(b, BACKWARD, p.microbatch)] = self.back_free[b]


def _run_shared(orders: Sequence[Sequence[Pass]],
                compute: tuple[Sequence[float], Sequence[float]],
                comm: tuple[Sequence[float], Sequence[float]], links: _Links,
                cores: float) -> PipelineTiming:
    """Event by event: between two events (compute or a collective ends, an input arrives)
    the k computing passes each progress at min(1, cores / k) of full speed."""
    stages = len(orders)
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    computing: dict[int, tuple[Pass, float, float]] = {}  # stage -> (pass, start, work left)
    talking: dict[int, tuple[Pass, float, float]] = {}  # stage -> (pass, start, ends at)
    nxt = [0] * stages
    now, left = 0.0, sum(len(o) for o in orders)

    def finish(s: int, p: Pass, start: float) -> None:
        spans[(s, p.kind, p.microbatch)] = (start, now)
        links.send(s, p, now, stages)

    while left:
        waits = []
        for s in range(stages):
            if s in computing or s in talking or nxt[s] >= len(orders[s]):
                continue
            p = orders[s][nxt[s]]
            ready = _input_time(s, p, stages, links.arrival, spans)
            if ready is not None and ready <= now + 1e-15:
                kind = 0 if p.kind == FORWARD else 1
                computing[s] = (p, now, compute[kind][s])
                nxt[s] += 1
            elif ready is not None:
                waits.append(ready)
        if not computing and not talking and not waits:
            raise SpecError(DEADLOCK)
        rate = min(1.0, cores / len(computing)) if computing else 0.0
        events = waits + [end for _, _, end in talking.values()]
        if computing:
            events.append(now + min(work for _, _, work in computing.values()) / rate)
        later = min(events)
        elapsed, now = later - now, later
        for s, (p, start, end) in list(talking.items()):
            if end <= now + 1e-15:
                del talking[s]
                finish(s, p, start)
                left -= 1
        for s, (p, start, work) in list(computing.items()):
            work -= elapsed * rate
            if work > 1e-12 * max(1.0, now):
                computing[s] = (p, start, work)
                continue
            del computing[s]
            tail = comm[0 if p.kind == FORWARD else 1][s]
            if tail > 0:
                talking[s] = (p, start, now + tail)
            else:
                finish(s, p, start)
                left -= 1
    busy = [0.0] * stages
    ends = [0.0] * stages
    for (s, _, _), (start, end) in spans.items():
        busy[s] += end - start
        ends[s] = max(ends[s], end)
    return PipelineTiming(max(ends), tuple(busy), tuple(ends), spans)


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
