"""`stratbench comm`: nccl-tests-style collective micro-benchmarks and the fitted alpha/beta."""

from __future__ import annotations

import click

from harness.calibrate.collective_sweep import (
    REALTIME_FRAMEWORKS,
    format_table,
    run_comm,
    store_comm,
    sweep_sizes,
)
from harness.calibrate.fits import TERMS
from harness.commands.common import (
    CONTEXT_SETTINGS,
    NotBuiltError,
    info,
    json_option,
    print_json,
    results_option,
)
from harness.commands.run import on_cluster
from harness.core import clusters
from harness.core import strategies as strategy_records
from harness.core.case import COMM_ROUNDS
from harness.core.paths import results_dir
from harness.core.units import parse_size_range
from harness.launch import netns
from harness.run import environment
from results.store import ResultsStore

# what each framework's sweep runs on (CPU processes; NCCL is for GPU cases)
LIBRARY = {"torch": "torch.distributed (gloo)",
           "tf": "TF collectives (MultiWorkerMirroredStrategy, RING)"}


def comm_ops(text: str | None) -> tuple[str, ...] | None:
    """``--ops``: names the sweep knows (calibrate.fits.TERMS), or None for the default."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in TERMS]
    if not names or unknown:
        raise click.BadParameter(f"unknown operation {', '.join(unknown) or repr(text)} "
                                 f"(choose from {', '.join(TERMS)})", param_hint="--ops")
    return names


HELP = """
Time all-reduce, broadcast, reduce-scatter, all-gather, all-to-all and PS push/pull by size (TF:
all-reduce and all-gather, what MultiWorkerMirroredStrategy exposes).

nccl-tests-style micro-benchmarks: all-reduce, broadcast, reduce-scatter, all-gather, all-to-all
(torch) and parameter-server push/pull, x4 size steps; time, algbw = S/t and busbw (nccl-tests'
factors). --ops times only those named; `rpc` (torch RPC over TensorPipe, the parameter server's
transport: every rank's buffer to the next at once) only when named. The sweep runs 7 times
(--rounds), interleaved, and each point keeps its median round (time_s), the rounds' spread, and
an uncontended time (fast_s: the lower quartile of single iterations; on a machine with fewer
cores than ranks some iterations wait out a scheduler slice); then alpha/beta fitted by least
squares with the fit's residual, stored for the simulator; across emulated hosts with --cluster
netns:... (one rank per host). torch's ranks run at real-time priority (SCHED_RR) where the
system allows it (root or CAP_SYS_NICE; each point's `realtime` column says whether they did),
so that ranks sharing cores do not wait out each other's time slices: a 4-rank 1 KiB all-reduce
took 7 ms at normal priority and 0.76 ms at SCHED_RR.

--framework torch (default) sweeps torch.distributed on gloo; --framework tf sweeps TF's
collectives through MultiWorkerMirroredStrategy (RING): all-reduce and all-gather, the two its
replica context exposes; --framework all does both. Not built: over Slurm.
"""


@click.command("comm", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--framework", default="torch", show_default=True, help="tf, torch or all.")
@click.option("--cluster", default="local", show_default=True)
@click.option("--sizes", default="1KiB:64MiB", show_default=True, metavar="MIN:MAX",
              help="Per-rank buffer sizes, stepping x4.")
@click.option("--world", type=click.IntRange(2, 16), default=2, show_default=True,
              help="Ranks taking part (on emulated hosts: one per host).")
@click.option("--timeout", type=click.FloatRange(min=1.0), default=900.0, show_default=True)
@click.option("--rounds", type=click.IntRange(1, 99), default=COMM_ROUNDS, show_default=True,
              help="Interleaved passes over the sweep; a point keeps its median round.")
@click.option("--ops", default=None, metavar="OP,...",
              help="Operations to time, comma-separated (default: the framework's set; "
                   "rpc, torch RPC over TensorPipe as the parameter server moves its "
                   "tensors, only when named).")
@click.option("--realtime/--no-realtime", default=True, show_default=True,
              help="Run torch's ranks at real-time priority (SCHED_RR) where allowed, so that "
                   "ranks sharing cores do not wait out each other's time slices.")
@results_option
@json_option
def command(framework: str, cluster: str, sizes: str, world: int, timeout: float,
            rounds: int, ops: str | None, realtime: bool, results: str | None,
            as_json: bool) -> None:
    """Time all-reduce, broadcast, reduce-scatter, all-gather, all-to-all and PS push/pull
    by size (TF: all-reduce and all-gather, what MultiWorkerMirroredStrategy exposes)."""
    frameworks = strategy_records.frameworks(framework)
    chosen = comm_ops(ops)
    cluster_spec = clusters.parse_cluster(cluster)
    low, high = parse_size_range(sizes)
    if cluster_spec.kind == "slurm":
        raise NotBuiltError("comm --cluster slurm", "collective sweeps as Slurm steps")
    if cluster_spec.kind == "netns":
        why = netns.unavailable_reason()
        if why:
            raise click.ClickException(f"cannot build emulated hosts: {why}")
        world = cluster_spec.hosts
    store = ResultsStore(results_dir(results))
    store.check_writable()
    manifest = environment.collect(frameworks=tuple(frameworks))
    manifest.update(kind="comm", sizes=sizes, world=world, rounds=rounds, realtime=realtime)
    run_id = store.start_run(manifest)
    done, failed = [], []
    with on_cluster(cluster_spec, store, run_id) as hosts:
        emulated = hosts if isinstance(hosts, netns.Cluster) else None  # slurm: refused above
        for fw in frameworks:  # one framework failing does not cost the other its sweep
            timed = strategy_records.library(fw).ops(chosen)
            if not timed:
                info(f"{LIBRARY[fw]} times none of {', '.join(chosen or ())}: skipped")
                continue
            info(f"comm run {run_id}: {LIBRARY[fw]}, {world} ranks, {cluster_spec.text}")
            result = run_comm(fw, cluster_spec.text, sweep_sizes(low, high), world, timeout,
                              emulated, rounds, realtime, timed)
            if result.status != "ok":
                failed.append(f"{fw} comm benchmark {result.status}: {result.reason}")
                continue
            if realtime and fw in REALTIME_FRAMEWORKS and not result.points["realtime"].all():
                info(f"{fw} ranks ran at normal priority: SCHED_RR needs root or CAP_SYS_NICE")
            store_comm(store, run_id, result, f"{fw}-{cluster_spec.kind}-{world}")
            done.append((fw, result))
    if failed:
        raise click.ClickException("; ".join(failed))
    if as_json:
        print_json({"run_id": run_id,
                    "points": [p for _, r in done for p in r.points.to_dict("records")],
                    "fits": [f for _, r in done for f in r.fits.to_dict("records")]})
    else:
        click.echo("\n\n".join(f"{LIBRARY[fw]}\n{format_table(r)}" for fw, r in done))
