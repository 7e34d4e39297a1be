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
import json
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from harness.core.units import parse_size
from harness.sim.network.engine import run_collective
from harness.sim.step.strategies import allreduce_schedule
from harness.sim.systems.spec import parse_topology

ALGORITHMS = ("ring", "hierarchical", "halving_doubling", "tree")
PS_STRATEGIES = ("parameter_server", "parameter_server_async")
DEFAULT_WORKERS = (64, 256, 1024, 2048, 4096, 8192)


def measure(workers: int, algorithm: str, nbytes: float, mode: str, per_host: int = 8
            ) -> dict[str, Any]:
    """Build and time one all-reduce; returns one row of the benchmark table."""
    topo = parse_topology(two_level(workers, per_host))
    started = time.perf_counter()
    schedule = allreduce_schedule(f"allreduce_{algorithm}", topo, workers, nbytes)
    result = run_collective(schedule, topo, nbytes, mode=mode)
    wall = time.perf_counter() - started
    return {"workers": workers, "algorithm": algorithm, "mode": mode, "wall_s": wall,
            "sim_time_s": result.time_s, "events": result.events,
            "events_per_s": result.events / wall if wall > 0 else float("inf"),
            "steps": result.steps, "transfers": result.transfers}


def two_level(workers: int, per_host: int = 8) -> str:
    return (f"two_level:hosts={max(1, workers // per_host)},gpus={per_host},intra=450GB/s,"
            f"inter=400Gbit,nic=per_device")


def measure_parameter_server(workers: int, strategy: str = "parameter_server"
                             ) -> dict[str, Any]:
    """One parameter-server step (synchronous, or ``parameter_server_async``'s steady state)
    with the default shards and dedicated servers; wall time and memory."""
    from harness.sim.step.data_parallel import simulate_step
    from workloads.spec import WorkloadSpec

    topo = parse_topology(two_level(workers))
    profile = WorkloadSpec(params=25_000_000, step_time_s=0.1)
    started = time.perf_counter()
    r = simulate_step(strategy, topo, workers, profile)
    wall = time.perf_counter() - started
    tracemalloc.start()  # a second run for the memory: tracing slows pure Python severalfold
    simulate_step(strategy, topo, workers, profile)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"strategy": strategy, "workers": workers, "shards": -(-workers // 8),
            "wall_s": wall, "step_s": r.step_time_s, "bytes_per_step": r.bytes_per_step,
            "throughput_samples_s": r.throughput_samples_s,
            "staleness_mean": r.staleness_mean, "notes": list(r.notes),
            "peak_alloc_bytes": peak,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


MODEL_PARALLEL_LAYOUTS = ((8, 16, 8), (16, 8, 8), (4, 32, 8), (32, 4, 8), (16, 16, 4))
GPT3_BATCH = 1536


def measure_layout(data: int, stages: int, tensor: int) -> dict[str, Any]:
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
    return {"layout": layout.describe(), "devices": layout.devices, "wall_s": wall,
            "step_s": r.step_time_s, "bubble": r.bubble, "events": r.events,
            "collectives": r.collectives}


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
                      lambda r: f"{r['strategy']:<24}{r['workers']:>7}{r['shards']:>7}"
                                f"{r['wall_s']:>8.3f}{r['step_s'] * 1e3:>9.2f}"
                                f"{r['peak_alloc_bytes'] / 1e6:>10.1f}"
                                f"{r['peak_rss_bytes'] / 1e6:>8.0f}")
    if args.model_parallel:
        return _table([measure_layout(*layout) for layout in MODEL_PARALLEL_LAYOUTS], args.json,
                      f"{'layout':<44}{'devices':>8}{'wall_s':>8}{'step_s':>8}{'bubble':>8}"
                      f"{'collectives':>12}",
                      lambda r: f"{r['layout']:<44}{r['devices']:>8}{r['wall_s']:>8.3f}"
                                f"{r['step_s']:>8.2f}{r['bubble']:>8.1%}{r['collectives']:>12}")
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
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def _table(rows: list[dict[str, Any]], as_json: bool, header: str,
           line: Callable[[dict[str, Any]], str]) -> int:
    """Rows as JSON, or as a table under ``header``, one ``line`` each."""
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(header)
    for r in rows:
        print(line(r))
    return 0


def _print_row(r: dict[str, Any], header: bool) -> None:
    if header:
        print(f"{'workers':>7} {'algorithm':<17} {'mode':<8} {'wall_s':>8} {'sim_ms':>9} "
              f"{'events':>8} {'events/s':>10} {'steps':>6} {'transfers':>11}")
    print(f"{r['workers']:>7} {r['algorithm']:<17} {r['mode']:<8} {r['wall_s']:>8.3f} "
          f"{r['sim_time_s'] * 1e3:>9.3f} {r['events']:>8} {r['events_per_s']:>10.0f} "
          f"{r['steps']:>6} {r['transfers']:>11}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
