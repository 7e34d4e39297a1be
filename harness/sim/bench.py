"""How fast the simulator is: one 100 MB all-reduce on a two-level topology (8 devices/host).

    python -m harness.sim.bench [--workers 64 1024 8192] [--algorithms ring hierarchical]
                                [--detailed-max 64] [--size 100MB] [--json]
    python -m harness.sim.bench --model-parallel [--json]
    python -m harness.sim.bench --parameter-server [--workers ...] [--json]

For each worker count and algorithm: wall time (schedule construction + simulation),
simulated time, SimPy events processed, events per second, and the transfers the schedule
stands for. The detailed mode (one SimPy process per transfer) runs up to ``--detailed-max``
workers, to show its O(p^2) growth beside the fast mode's. The issue's target: 1024 workers
in <= 5 s and 8192 in <= 60 s of wall time.

``--model-parallel`` times instead a whole training step of the catalog's 175-billion-
parameter GPT-3 on 1024 H100s (128 DGX hosts) in several data x pipeline x tensor layouts
with Megatron-LM's global batch of 1536 (target: <= 2 s each).

``--parameter-server`` times a whole synchronous parameter-server step, then the asynchronous
server's steady state (default shards: one per 8 workers, dedicated servers), of a 100 MB
model on the same two-level topology, with the peak memory the simulation allocated
(tracemalloc, numpy included) and the process's peak RSS (targets: 8192 workers in <= 1 s
and < 1 GB, synchronous; 2048 and 8192 workers in < 1 s each, asynchronous).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.core.units import parse_size
from harness.sim.network.engine import run_collective
from harness.sim.step.strategies import allreduce_schedule
from harness.sim.systems.spec import parse_topology

ALGORITHMS = ("ring", "hierarchical", "halving_doubling", "tree")
PS_STRATEGIES = ("parameter_server", "parameter_server_async")
DEFAULT_WORKERS = (64, 256, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class AllReduceTiming:
    """One all-reduce built and timed: a row of the benchmark table (its fields in the
    order ``--json`` prints them)."""

    workers: int
    algorithm: str
    mode: str
    wall_s: float  # schedule construction + simulation
    sim_time_s: float
    events: int
    events_per_s: float
    steps: int
    transfers: int


def measure(workers: int, algorithm: str, nbytes: float, mode: str, per_host: int = 8
            ) -> AllReduceTiming:
    """Build and time one all-reduce; returns one row of the benchmark table."""
    topo = parse_topology(two_level(workers, per_host))
    started = time.perf_counter()
    schedule = allreduce_schedule(f"allreduce_{algorithm}", topo, workers, nbytes)
    result = run_collective(schedule, topo, nbytes, mode=mode)
    wall = time.perf_counter() - started
    return AllReduceTiming(workers, algorithm, mode, wall, result.time_s, result.events,
                           result.events / wall if wall > 0 else float("inf"), result.steps,
                           result.transfers)


def two_level(workers: int, per_host: int = 8) -> str:
    return (f"two_level:hosts={max(1, workers // per_host)},gpus={per_host},intra=450GB/s,"
            f"inter=400Gbit,nic=per_device")


@dataclass(frozen=True)
class ParameterServerTiming:
    """One parameter-server step timed, with the memory its simulation allocated."""

    strategy: str
    workers: int
    shards: int
    wall_s: float
    step_s: float
    bytes_per_step: float
    throughput_samples_s: float
    staleness_mean: float | None
    notes: tuple[str, ...]
    peak_alloc_bytes: int  # tracemalloc's peak, numpy included
    peak_rss_bytes: int  # the process's


def measure_parameter_server(workers: int, strategy: str = "parameter_server"
                             ) -> ParameterServerTiming:
    """One parameter-server step (synchronous, or ``parameter_server_async``'s steady state)
    with the default shards and dedicated servers; wall time and memory."""
    from harness.sim.step.data_parallel import simulate_step
    from harness.sim.systems.calibration import stating
    from workloads.spec import WorkloadSpec

    topo = parse_topology(two_level(workers))
    profile = WorkloadSpec(params=25_000_000)
    compute = stating(None, compute_s=0.1)
    started = time.perf_counter()
    r = simulate_step(strategy, topo, workers, profile, compute)
    wall = time.perf_counter() - started
    tracemalloc.start()  # a second run for the memory: tracing slows pure Python severalfold
    simulate_step(strategy, topo, workers, profile, compute)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return ParameterServerTiming(
        strategy, workers, -(-workers // 8), wall, r.step_time_s, r.bytes_per_step,
        r.throughput_samples_s, r.staleness_mean, tuple(r.notes), peak,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


MODEL_PARALLEL_LAYOUTS = ((8, 16, 8), (16, 8, 8), (4, 32, 8), (32, 4, 8), (16, 16, 4))
GPT3_BATCH = 1536


@dataclass(frozen=True)
class LayoutTiming:
    """One 3D-parallel step timed."""

    layout: str
    devices: int
    wall_s: float
    step_s: float
    bubble: float | None
    events: int
    collectives: int


def measure_layout(data: int, stages: int, tensor: int) -> LayoutTiming:
    """One 3D-parallel step of gpt3_175b on preset:dgx_h100_ib (128 hosts), micro-batch 1."""
    from harness.sim.model.layered import Layout
    from harness.sim.model.structure import layered
    from harness.sim.step.model_parallel import model_parallel_step
    from harness.sim.systems import calibration as cal

    started = time.perf_counter()
    calib = cal.from_preset("dgx_h100_ib")
    topo = cal.apply(parse_topology("preset:dgx_h100_ib,hosts=128"), calib)
    layout = Layout(data, stages, tensor, GPT3_BATCH // data)
    r = model_parallel_step(topo, layered("gpt3_175b"), layout, GPT3_BATCH, calib)
    wall = time.perf_counter() - started
    return LayoutTiming(layout.describe(), layout.devices, wall, r.step_time_s, r.bubble,
                        r.events, r.collectives)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.sim.bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=list(DEFAULT_WORKERS))
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--detailed-max", type=int, default=64,
                        help="also run the detailed mode up to this many workers (0: never)")
    parser.add_argument("--size", default="100MB", help="message size per rank (default 100MB)")
    parser.add_argument("--json", action="store_true", help="rows as JSON on stdout")
    parser.add_argument("--model-parallel", action="store_true",
                        help="time 3D-parallel steps of GPT-3 175B on 1024 devices instead")
    parser.add_argument("--parameter-server", action="store_true",
                        help="time synchronous and asynchronous parameter-server steps "
                             "(default shards) instead")
    args = parser.parse_args(argv)
    if args.parameter_server:
        return _table([measure_parameter_server(w, strategy) for strategy in PS_STRATEGIES
                       for w in args.workers], args.json,
                      f"{'strategy':<24}{'workers':>7}{'shards':>7}{'wall_s':>8}{'step_ms':>9}"
                      f"{'alloc_MB':>10}{'rss_MB':>8}",
                      lambda r: f"{r.strategy:<24}{r.workers:>7}{r.shards:>7}"
                                f"{r.wall_s:>8.3f}{r.step_s * 1e3:>9.2f}"
                                f"{r.peak_alloc_bytes / 1e6:>10.1f}"
                                f"{r.peak_rss_bytes / 1e6:>8.0f}")
    if args.model_parallel:
        return _table([measure_layout(*layout) for layout in MODEL_PARALLEL_LAYOUTS], args.json,
                      f"{'layout':<44}{'devices':>8}{'wall_s':>8}{'step_s':>8}{'bubble':>8}"
                      f"{'collectives':>12}",
                      lambda r: f"{r.layout:<44}{r.devices:>8}{r.wall_s:>8.3f}"
                                f"{r.step_s:>8.2f}{r.bubble:>8.1%}{r.collectives:>12}")
    nbytes = parse_size(args.size)
    rows = []
    for workers in args.workers:
        for algorithm in args.algorithms:
            modes = ["fast"] + (["detailed"] if workers <= args.detailed_max else [])
            for mode in modes:
                rows.append(measure(workers, algorithm, nbytes, mode))
                if not args.json:
                    _print_row(rows[-1], header=len(rows) == 1)
    if args.json:
        _json(rows)
    return 0


Timing = TypeVar("Timing", AllReduceTiming, ParameterServerTiming, LayoutTiming)


def _table(rows: Sequence[Timing], as_json: bool, header: str,
           line: Callable[[Timing], str]) -> int:
    """Rows as JSON, or as a table under ``header``, one ``line`` each."""
    if as_json:
        _json(rows)
        return 0
    print(header)
    for r in rows:
        print(line(r))
    return 0


def _json(rows: Sequence[AllReduceTiming | ParameterServerTiming | LayoutTiming]) -> None:
    """The rows as a JSON list of objects, each record's fields in order."""
    json.dump([dataclasses.asdict(r) for r in rows], sys.stdout, indent=2)
    sys.stdout.write("\n")


def _print_row(r: AllReduceTiming, header: bool) -> None:
    if header:
        print(f"{'workers':>7} {'algorithm':<17} {'mode':<8} {'wall_s':>8} {'sim_ms':>9} "
              f"{'events':>8} {'events/s':>10} {'steps':>6} {'transfers':>11}")
    print(f"{r.workers:>7} {r.algorithm:<17} {r.mode:<8} {r.wall_s:>8.3f} "
          f"{r.sim_time_s * 1e3:>9.3f} {r.events:>8} {r.events_per_s:>10.0f} "
          f"{r.steps:>6} {r.transfers:>11}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
