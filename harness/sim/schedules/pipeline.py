"""Pipeline schedules (GPipe, 1F1B, interleaved 1F1B) as data, and their timing on given stage
and link costs.

A schedule is, per stage, the order in which it runs forward (F) and backward (B) passes of
micro-batches; torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B, Megatron-LM's
non-interleaved schedule and PipeDream-flush all run one of these two orders:

* GPipe (Huang et al. 2019): every forward, then every backward.
* 1F1B (Narayanan et al. 2021): stage s runs S-s-1 warm-up forwards, then alternates one
  forward and one backward, then drains the remaining backwards, so at most S-s micro-batches
  wait for their backward (activation memory) instead of M.
* Interleaved 1F1B (Narayanan et al. 2021, section 2.2.2; Megatron-LM's
  ``--num-layers-per-virtual-pipeline-stage``): each device holds V chunks of layers (device s
  holds virtual stages s, s + S, ...), micro-batches go round the devices V times in groups of
  S, so the bubble shrinks V-fold to (S - 1) / (V M + S - 1) for V times the stage-to-stage
  messages.

Timing is list scheduling, which is what the runtimes do: a stage runs its next pass as soon
as the stage is free and the pass's input has arrived (the previous stage's activations, the
next stage's gradients). A send starts when its pass ends and the directed link between the
two stages is free (sends queue on a slow link; the two directions do not share). With equal
stages and free links both schedules take (M + S - 1)(F + B): the bubble, the idle fraction of
every stage, is (S - 1) / (M + S - 1).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.errors import SpecError

FORWARD, BACKWARD = "F", "B"


SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Pass:
    kind: str  # FORWARD | BACKWARD
    microbatch: int
    chunk: int = 0  # which of the device's virtual stages (interleaved schedules)


def stage_order(schedule: str, stages: int, microbatches: int, virtual: int = 1
                ) -> list[list[Pass]]:
    """Per stage (device), the passes it runs, in order. ``virtual``: chunks per device, for
    the interleaved schedule only."""
    return [list(order) for order in _orders(schedule, stages, microbatches, virtual)]


def schedule_order(schedule: str, stages: int, microbatches: int, virtual: int = 1
                   ) -> tuple[tuple[Pass, ...], ...]:
    """``stage_order``, immutable and shared between calls: ``run_pipeline`` then prepares
    it once, not per call."""
    return _orders(schedule, stages, microbatches, virtual)


@functools.lru_cache(maxsize=256)
def _orders(schedule: str, stages: int, microbatches: int, virtual: int
            ) -> tuple[tuple[Pass, ...], ...]:
    """stage_order, built once per shape: a recommender asks for the same ones often."""
    return tuple(map(tuple, _build_order(schedule, stages, microbatches, virtual)))


def in_flight_per_chunk(schedule: str, stages: int, microbatches: int, virtual: int = 1
                        ) -> tuple[tuple[int, ...], ...]:
    """Per stage, per chunk, the micro-batches holding activations at the moment the stage
    as a whole holds the most (each chunk's share of the peak: the memory model's count).

    Under 1F1B and the interleaved schedule the peak comes in the warm-up, so counting it in
    a schedule of 2 x stages micro-batches gives the same figures as in a longer one (a test
    compares them) without building a schedule of thousands of micro-batches per candidate."""
    if schedule in ("1f1b", "interleaved"):
        microbatches = min(microbatches, 2 * stages)
    return _in_flight(schedule, stages, microbatches, virtual)


@functools.lru_cache(maxsize=256)
def _in_flight(schedule: str, stages: int, microbatches: int, virtual: int
               ) -> tuple[tuple[int, ...], ...]:
    out = []
    for order in _orders(schedule, stages, microbatches, virtual):
        held = [0] * virtual
        peak, at_peak = -1, [0] * virtual
        for p in order:
            held[p.chunk] += 1 if p.kind == FORWARD else -1
            if sum(held) > peak:
                peak, at_peak = sum(held), list(held)
        out.append(tuple(at_peak))
    return tuple(out)


def _build_order(schedule: str, stages: int, microbatches: int, virtual: int
                 ) -> list[list[Pass]]:
    if stages < 1 or microbatches < 1:
        raise SpecError(f"a pipeline needs stages >= 1 and micro-batches >= 1, not "
                        f"{stages} and {microbatches}")
    if schedule not in SCHEDULES:
        raise SpecError(f"unknown pipeline schedule {schedule!r} (choose from "
                        f"{', '.join(SCHEDULES)})")
    if schedule == "interleaved":
        return _interleaved(stages, microbatches, virtual)
    if virtual != 1:
        raise SpecError(f"virtual stages ({virtual}) need --schedule interleaved")
    forwards = [Pass(FORWARD, m) for m in range(microbatches)]
    backwards = [Pass(BACKWARD, m) for m in range(microbatches)]
    if schedule == "gpipe":
        return [forwards + backwards for _ in range(stages)]
    orders = []
    for s in range(stages):
        warmup = min(stages - s - 1, microbatches)
        order = forwards[:warmup]
        for i in range(microbatches - warmup):
            order += [forwards[warmup + i], backwards[i]]
        order += backwards[microbatches - warmup:]
        orders.append(order)
    return orders


def _interleaved(stages: int, microbatches: int, virtual: int) -> list[list[Pass]]:
    """Megatron-LM's interleaved 1F1B: forwards walk micro-batches in groups of ``stages``
    through chunk 0, then chunk 1, ...; backwards the same with the chunks reversed; device s
    warms up with (S - s - 1) * 2 + (V - 1) * S forwards, then alternates, then drains."""
    if virtual < 1:
        raise SpecError(f"virtual stages must be >= 1, not {virtual}")
    if microbatches % stages:
        raise SpecError(f"the interleaved schedule needs micro-batches ({microbatches}) to be "
                        f"a multiple of the stages ({stages})")
    total = microbatches * virtual

    def nth(k: int, kind: str) -> Pass:
        group, within = divmod(k, stages * virtual)
        chunk = within // stages
        if kind == BACKWARD:
            chunk = virtual - 1 - chunk
        return Pass(kind, group * stages + within % stages, chunk)

    forwards = [nth(k, FORWARD) for k in range(total)]
    backwards = [nth(k, BACKWARD) for k in range(total)]
    orders = []
    for s in range(stages):
        warmup = min(total, (stages - s - 1) * 2 + (virtual - 1) * stages)
        steady = [p for pair in zip(forwards[warmup:], backwards[:total - warmup], strict=True)
                  for p in pair]
        orders.append(forwards[:warmup] + steady + backwards[total - warmup:])
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
    last_pass_s: tuple[tuple[float, float], ...]  # per device: its last pass's (start, end)

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
                 backward_comm_s: Sequence[float] | None = None,
                 blocking: bool = False, keep_spans: bool = True) -> PipelineTiming:
    """Time the schedule: ``forward_s[q]``/``backward_s[q]`` of compute per micro-batch on
    (virtual) stage q, then ``forward_comm_s[q]``/``backward_comm_s[q]`` of blocking
    collectives (tensor parallelism's all-reduces; none by default); ``send_s[q]`` moves
    activations from stage q to q+1, ``send_back_s[q]`` gradients from q+1 back to q. With
    V chunks per device (interleaved), there are V x devices stages; device s runs stages
    s, s + devices, ...

    ``cores``: when fewer than the stages (emulated hosts on one machine), the stages
    computing at a moment share them evenly (processor sharing): compute runs slower while
    more stages compute; collectives do not take a core.

    ``blocking``: a stage waits for each of its sends to arrive before its next pass
    (Megatron-LM 2021's point-to-point, synchronised after each exchange); otherwise a send
    leaves in the background (torch's isend, later Megatron). Only where every stage has a
    core of its own.

    ``keep_spans=False``: ``spans`` stays empty where every stage has its own device (the
    caller reads ``last_pass_s``), as a dict entry per pass costs more than the pass."""
    devices = len(orders)
    stages = len(forward_s)
    fwd_comm = list(forward_comm_s) if forward_comm_s is not None else [0.0] * stages
    bwd_comm = list(backward_comm_s) if backward_comm_s is not None else [0.0] * stages
    if not (devices and stages % devices == 0
            and len(backward_s) == len(fwd_comm) == len(bwd_comm) == stages
            and len(send_s) == len(send_back_s) == stages - 1):
        raise SpecError("one forward and backward time per stage, one send per boundary")
    if cores is not None and cores < devices:
        if blocking:
            raise SpecError("blocking sends are modelled where every stage has its own "
                            "device, not on shared cores")
        return _run_shared(orders, (forward_s, backward_s), (fwd_comm, bwd_comm),
                           _Links(send_s, send_back_s, devices), cores)
    if keep_spans or not isinstance(orders, tuple):
        return _run_dedicated(orders, forward_s, backward_s, fwd_comm, bwd_comm, send_s,
                              send_back_s, blocking, keep_spans)
    times = (tuple(forward_s), tuple(backward_s), tuple(fwd_comm), tuple(bwd_comm),
             tuple(send_s), tuple(send_back_s))
    return _remembered(orders, times, blocking)


_Times = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...],
               tuple[float, ...], tuple[float, ...]]
_TIMINGS: dict[tuple[int, _Times, bool], tuple[Sequence[Sequence[Pass]], PipelineTiming]] = {}


def _remembered(orders: Sequence[Sequence[Pass]], times: _Times, blocking: bool
                ) -> PipelineTiming:
    """A span-free timing, remembered by its schedule object (``schedule_order``'s are
    shared and immutable) and its times: a layout search meets the same layout with the
    same stage times again (158 pipelines timed for Llama 3 405B on 1,024 hosts, 67 of
    them distinct), and the timing is a pure function of them."""
    key = (id(orders), times, blocking)
    known = _TIMINGS.get(key)
    if known is not None and known[0] is orders:
        return known[1]
    timing = _run_dedicated(orders, *times, blocking, False)
    if len(_TIMINGS) >= 512:
        _TIMINGS.clear()
    _TIMINGS[key] = (orders, timing)
    return timing


def _run_dedicated(orders: Sequence[Sequence[Pass]], forward_s: Sequence[float],
                   backward_s: Sequence[float], fwd_comm: Sequence[float],
                   bwd_comm: Sequence[float], send_s: Sequence[float],
                   send_back_s: Sequence[float], blocking: bool, keep_spans: bool
                   ) -> PipelineTiming:
    """List scheduling where every stage has its own device: the rules ``_Links`` and
    ``_input_time`` state, in flat tables (a recommender times pipelines of thousands of
    micro-batches on tens of stages, pass by pass: this loop is its hot path, and
    ``keep_spans=False`` spares it a dict entry per pass where only each device's last pass
    is read). Each pass waits on one slot, its input's arrival: a backward's gradient comes
    after its own forward (which made the activations it came back through), and the last
    stage's backward waits on its own forward, which fills that slot itself."""
    devices, stages = len(orders), len(forward_s)
    plan_of, micro = _plans(orders, stages)
    # per pass kind k = 2 x stage + (0 forward, 1 backward): its time, the time its output
    # takes to its neighbour, and the device it goes to (-1: the same device, no link)
    took, send, dest = [], [], []
    for q in range(stages):
        took += [forward_s[q] + fwd_comm[q], backward_s[q] + bwd_comm[q]]
        send += [send_s[q] if q < stages - 1 else 0.0, send_back_s[q - 1] if q else 0.0]
        dest += [(q + 1) % devices if q < stages - 1 else -1, (q - 1) % devices]
    arrived = [-1.0] * (2 * stages * micro)  # per input slot; -1: not yet there
    arrived[:micro] = [0.0] * micro  # the first stage's inputs are there from the start
    waiting = [-1] * (2 * stages * micro)  # per input slot: the device stopped on it
    link_free = [[0.0] * devices for _ in range(devices)]  # (from, to) device -> free at
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    last_pass = [(0.0, 0.0)] * devices
    free = [0.0] * devices
    nxt = [0] * devices
    runnable = list(range(devices - 1, -1, -1))  # devices that may go on, the first on top
    while runnable:  # a device runs until an input is missing, then waits for that slot
        s = runnable.pop()
        plan, i, clock = plan_of[s], nxt[s], free[s]
        n = len(plan)
        row = link_free[s]
        start = end = 0.0
        while i < n:
            k, waits_on, fills, m = plan[i]
            ready = arrived[waits_on]
            if ready < 0.0:
                waiting[waits_on] = s
                break
            start = clock if clock > ready else ready
            end = clock = start + took[k]
            if fills >= 0:
                to = dest[k]
                if to < 0:  # the last stage's forward: its own backward may start
                    arrived[fills] = end
                else:  # activations on, or gradients back, over the link to ``to``
                    at = row[to]
                    arrives = (end if end > at else at) + send[k]
                    row[to] = arrived[fills] = arrives
                    if blocking and arrives > end:
                        clock = arrives
                woken = waiting[fills]
                if woken >= 0:
                    runnable.append(woken)
            if keep_spans:
                spans[(k >> 1, BACKWARD if k & 1 else FORWARD, m)] = (start, end)
            i += 1
        if i > nxt[s]:
            nxt[s], free[s] = i, clock
            last_pass[s] = (start, end)
    if any(i < len(plan) for i, plan in zip(nxt, plan_of, strict=True)):
        raise SpecError(DEADLOCK)
    busy = tuple(sum(micro * (took[2 * q] + took[2 * q + 1]) for q in range(s, stages, devices))
                 for s in range(devices))
    return PipelineTiming(max(free), busy, tuple(free), spans, tuple(last_pass))


_Plan = tuple[list[tuple[int, int, int, int]], ...]
_PLANS: dict[int, tuple[Sequence[Sequence[Pass]], int, _Plan, int]] = {}


def _plans(orders: Sequence[Sequence[Pass]], stages: int) -> tuple[_Plan, int]:
    """Per device, its passes as (kind, the input slot it waits on, the slot its output
    fills or -1, micro-batch), and the micro-batches: once per schedule object
    (``schedule_order``'s are shared), held so its id stays its own. Slots: stage q's
    forward input of micro-batch m at q x M + m, its backward input at (S + q) x M + m."""
    known = _PLANS.get(id(orders))
    if known is not None and known[0] is orders and known[1] == stages:
        return known[2], known[3]
    devices = len(orders)
    micro = 1 + max((p.microbatch for order in orders for p in order), default=0)
    back = stages * micro
    plans = []
    for s, order in enumerate(orders):
        plan = []
        for p in order:
            q, m = p.chunk * devices + s, p.microbatch
            if p.kind == FORWARD:
                fills = (q + 1) * micro + m if q < stages - 1 else back + q * micro + m
                plan.append((2 * q, q * micro + m, fills, m))
            else:
                fills = back + (q - 1) * micro + m if q else -1
                plan.append((2 * q + 1, back + q * micro + m, fills, m))
        plans.append(plan)
    if isinstance(orders, tuple):  # immutable: safe to remember
        if len(_PLANS) >= 64:
            _PLANS.clear()
        _PLANS[id(orders)] = (orders, stages, tuple(plans), micro)
    return tuple(plans), micro


DEADLOCK = "the pipeline schedule deadlocks: a stage waits for a pass that waits for it"


class _Links:
    """The directed links between the devices of neighbouring stages: a send leaves when its
    pass ends and the link is free (sends queue; the two directions do not share; with
    virtual stages, every chunk's sends between the same two devices share their link)."""

    def __init__(self, send_s: Sequence[float], send_back_s: Sequence[float],
                 devices: int) -> None:
        self.send_s, self.send_back_s, self.devices = send_s, send_back_s, devices
        self.stages = len(send_s) + 1
        self.free: dict[tuple[int, int], float] = {}  # (from device, to device) -> free at
        self.arrival: dict[tuple[int, str, int], float] = {}  # input of (stage, kind, mb)

    def _go(self, src: int, dst: int, end: float, duration: float) -> float:
        key = (src % self.devices, dst % self.devices)
        self.free[key] = max(end, self.free.get(key, 0.0)) + duration
        return self.free[key]

    def send(self, stage: int, p: Pass, end: float) -> float | None:
        """The pass's output sent on; when it arrives (None: nothing to send)."""
        if p.kind == FORWARD and stage + 1 < self.stages:
            key = (stage + 1, FORWARD, p.microbatch)
            self.arrival[key] = self._go(stage, stage + 1, end, self.send_s[stage])
            return self.arrival[key]
        if p.kind == BACKWARD and stage > 0:
            key = (stage - 1, BACKWARD, p.microbatch)
            self.arrival[key] = self._go(stage, stage - 1, end, self.send_back_s[stage - 1])
            return self.arrival[key]
        return None


def _run_shared(orders: Sequence[Sequence[Pass]],
                compute: tuple[Sequence[float], Sequence[float]],
                comm: tuple[Sequence[float], Sequence[float]], links: _Links,
                cores: float) -> PipelineTiming:
    """Event by event: between two events (compute or a collective ends, an input arrives)
    the k computing passes each progress at min(1, cores / k) of full speed."""
    devices, stages = len(orders), links.stages
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    computing: dict[int, tuple[Pass, float, float]] = {}  # device -> (pass, start, work left)
    talking: dict[int, tuple[Pass, float, float]] = {}  # device -> (pass, start, ends at)
    nxt = [0] * devices
    now, left = 0.0, sum(len(o) for o in orders)

    def finish(s: int, p: Pass, start: float) -> None:
        q = p.chunk * devices + s
        spans[(q, p.kind, p.microbatch)] = (start, now)
        links.send(q, p, now)

    while left:
        waits = []
        for s in range(devices):
            if s in computing or s in talking or nxt[s] >= len(orders[s]):
                continue
            p = orders[s][nxt[s]]
            q = p.chunk * devices + s
            ready = _input_time(q, p, stages, links.arrival, spans)
            if ready is not None and ready <= now + 1e-15:
                kind = 0 if p.kind == FORWARD else 1
                computing[s] = (p, now, compute[kind][q])
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
            tail = comm[0 if p.kind == FORWARD else 1][p.chunk * devices + s]
            if tail > 0:
                talking[s] = (p, start, now + tail)
            else:
                finish(s, p, start)
                left -= 1
    busy = [0.0] * devices
    ends = [0.0] * devices
    for (q, _, _), (start, end) in spans.items():
        busy[q % devices] += end - start
        ends[q % devices] = max(ends[q % devices], end)
    last_pass = []
    for s, order in enumerate(orders):
        p = order[-1]
        last_pass.append(spans[(p.chunk * devices + s, p.kind, p.microbatch)])
    return PipelineTiming(max(ends), tuple(busy), tuple(ends), spans, tuple(last_pass))


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
