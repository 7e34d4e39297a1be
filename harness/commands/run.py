"""`stratbench run`: benchmark strategies on real workloads, one stored row per case."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import click
from tqdm import tqdm

from harness.commands.common import CONTEXT_SETTINGS, info, json_option, print_json, results_option
from harness.core import clusters
from harness.core import strategies as strategy_records
from harness.core.case import Case, CaseOptions
from harness.core.errors import InputError
from harness.core.paths import results_dir
from harness.launch import netns, slurm
from harness.launch.slurm import SlurmTarget
from harness.run import environment
from harness.run.execute import Where, execute
from harness.run.plan import plan, resolve_workloads
from results.schema import ResultRow
from results.store import ResultsStore

SUITES: dict[str, tuple[str, ...]] = {
    "quick": ("mlp:S", "recsys:S"),
    "nightly": ("mlp:S", "cnn:S", "transformer:S", "recsys:S", "mlp:M"),
    "full": ("mlp:S", "cnn:S", "transformer:S", "recsys:S",
             "mlp:M", "cnn:M", "transformer:M", "recsys:M"),
}


def _resume_target(store: ResultsStore) -> tuple[str, list[Case]]:
    for run_id in reversed(store.run_ids()):
        manifest = store.manifest(run_id) or {}
        if manifest.get("kind") == "run" and manifest.get("cases"):
            return run_id, [Case(**c) for c in manifest["cases"]]
    raise InputError(f"--resume: no earlier run with a stored plan under {store.root}")


def _row_line(row: ResultRow) -> str:
    if row.status != "ok":
        logs = row.extra.get("logs")
        return (f"{row.case_id}: {row.status}: {row.reason}"
                + (f" (its processes' output: {logs})" if logs else ""))
    eff = "" if row.scaling_efficiency != row.scaling_efficiency else \
        f", efficiency {row.scaling_efficiency:.2f}"
    diff = "" if row.max_weight_diff != row.max_weight_diff else \
        f", max weight diff {row.max_weight_diff:.1e}"
    floor = row.extra.get("rounding_floor")
    if row.extra.get("weights_match") is False:
        diff += (f" MISMATCH: over the {strategy_records.WEIGHT_TOLERANCE:.0e} tolerance of one "
                 f"device's weights" + (
                     f" and {strategy_records.ROUNDING_MARGIN:.0f}x the {floor:.1e} one device "
                     f"moves by itself on another thread count" if floor is not None else ""))
    elif floor is not None:
        diff += (f" (rounding: one device alone on another thread count ends {floor:.1e} "
                 f"from itself)")
    return (f"{row.case_id}: ok, median step {row.step_time_median_s * 1e3:.1f} ms "
            f"[{row.step_time_ci95_low_s * 1e3:.1f}, {row.step_time_ci95_high_s * 1e3:.1f}], "
            f"{row.throughput_samples_s:.0f} samples/s{eff}{diff}")


def run_cases(cases: list[Case], store: ResultsStore, run_id: str, skip: set[str],
              quiet: bool, cluster: Where = None) -> list[ResultRow]:
    todo = [c for c in cases if c.case_id not in skip]
    bar = tqdm(total=len(todo), unit="case", disable=quiet or not todo, file=sys.stderr)

    def progress(case: Case, row: ResultRow) -> None:
        bar.update(1)
        bar.write(_row_line(row), file=sys.stderr)

    try:
        return execute(cases, store, run_id, skip=skip, progress=progress, cluster=cluster)
    finally:
        bar.close()


HELP = """
Train workloads under each strategy and store one row per case.

Train workloads under each strategy; one row per case (ok, failed, timeout, unavailable).

Strategies: tf one_device, mirrored, central_storage, multi_worker_mirrored, parameter_server,
tpu; torch single_device, ddp, fsdp, parameter_server, parameter_server_async. Workloads: mlp,
cnn, transformer, recsys at sizes S, M, L, or your own model: --workload pkg.module:callable or
path/to/file.py:callable returning a workloads.UserWorkload (build_model, make_batch, loss_fn).
Each case runs --repeats times in fresh processes; rows carry the median step time with a 95%
CI, throughput, scaling efficiency against the one-replica case, peak RSS, bytes sent per step
and, for synchronous strategies, the largest weight difference from one device trained on the
global batch (beyond 1e-4, one device is trained again on another thread count and the run
matches within 10x of that rounding floor; a mismatch is flagged MISMATCH in the run line and
first in the recommender's reason), and the memory the model cost (model_memory_bytes: the peak
RSS gained from building the model to the end of training). --resume finishes the latest run
without repeating finished cases. torch pipeline and tensor_parallel (named only, never part of
`all`; transformer family): torch.distributed.pipelining with --stages processes (one per
emulated host),

--microbatches per step and GPipe or 1F1B, each stage a run of the model's blocks: equal runs
where the stages divide them, else the shortfall off the first and last stages (4 blocks on 3
stages: 1, 2, 1), or --stage-layers 2,1,1 as asked; DTensor tensor parallelism over
--tensor-parallel ranks (attention heads and MLP units split, Megatron-style). Each process
brings the per-replica batch, like a data replica; rows record the layout, the measured bubble
(each stage's idle fraction of the step) and the weight difference to one device. A layout
option no chosen strategy uses is refused (one line, exit 2). torch embedding_sharding (named
only; recsys family to run, DLRM too when simulated): DLRM-style hybrid parallelism, the dense
layers data-parallel and the embedding tables sharded over the ranks (table-wise where they
balance, else row by row), the looked-up rows and their gradients moved by all_to_all. On
embedding models torch's single_device updates only the rows a step touched (sparse gradients
and SGD), as recommender training does on one device, and records its step split (forward,
backward, update) and the same split with dense tables (what ddp and fsdp compute): efficiencies
are against that baseline.

--tf-loop fit trains TF cases with Keras `model.compile` + `model.fit` instead of the custom
loop (`strategy.run`, the default); their case ids end in /fit. Keras 3 cannot fit under
multi_worker_mirrored or parameter_server: those rows are `unavailable` and say so.

On Slurm each repetition is one srun step (inside your allocation, or its own job), tasks placed
by Slurm, TF_CONFIG from TF's SlurmClusterResolver, torch ranks from SLURM_PROCID; rows record
job ids and node names. The results directory must be on a file system the nodes share.
--dry-run writes the sbatch script that would run it all, and runs nothing.

--cluster netns:hosts=N,rate=RATE builds N emulated hosts (network namespaces on a bridge, every
link shaped with tc tbf both ways; root needed, else the cases are `unavailable` rows), measures
each link with TCP before the run, and always tears them down. rate=unshaped keeps the same path
(veth, bridge, tbf) at a rate the cores cannot reach.
"""


@click.command("run", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--suite", type=click.Choice(sorted(SUITES)), default=None,
              help="A predefined set of workloads (quick: mlp:S recsys:S).")
@click.option("--framework", default="all", show_default=True, help="tf, torch or all.")
@click.option("--strategy", "strategy_names", multiple=True, metavar="NAME",
              help="Strategy name (repeatable) or all (default).")
@click.option("--workload", "workloads", multiple=True, metavar="FAMILY:SIZE",
              help="Workload (repeatable), e.g. mlp:S, or module:callable.")
@click.option("--cluster", default="local", show_default=True,
              help="local | netns:hosts=N,rate=RATE[,...] | slurm[:...]")
@click.option("--steps", type=click.IntRange(min=1, max=100_000), default=20,
              show_default=True, help="Timed steps per repetition.")
@click.option("--warmup", type=click.IntRange(min=0, max=10_000), default=3,
              show_default=True, help="Untimed steps before them.")
@click.option("--repeats", type=click.IntRange(min=1, max=1000), default=3,
              show_default=True, help="Repetitions, each in fresh processes.")
@click.option("--timeout", type=click.FloatRange(min=1.0), default=600.0, show_default=True,
              help="Seconds per repetition before the case's process tree is killed.")
@click.option("--resume", is_flag=True,
              help="Finish the latest run: run only its cases that have no row yet.")
@click.option("--dry-run", "dry_run", is_flag=True,
              help="With --cluster slurm: write the sbatch script that would run this, and "
                   "run nothing.")
@click.option("--script", type=click.Path(dir_okay=False), default="stratbench-run.sbatch",
              show_default=True, help="Where --dry-run writes the batch script.")
@click.option("--stages", type=click.IntRange(min=1), default=None,
              help="Pipeline stages (default: one per emulated host, else 2).")
@click.option("--microbatches", type=click.IntRange(min=1), default=None,
              help="Pipeline micro-batches per step (default: one per stage).")
@click.option("--schedule", type=click.Choice(["1f1b", "gpipe"]), default=None,
              help="Pipeline schedule (default: 1f1b).")
@click.option("--stage-layers", default=None, metavar="COUNTS|ends",
              help="Blocks per pipeline stage: 1,2,1 (8x14 repeats a count) or 'ends' "
                   "(default: equal runs where the stages divide the blocks, else the "
                   "shortfall off the first and last stages).")
@click.option("--tensor-parallel", "tensor", type=click.IntRange(min=1), default=None,
              help="tensor_parallel's degree (default: one rank per emulated host, else 2).")
@click.option("--tf-loop", "tf_loop", type=click.Choice(["custom", "fit"]), default=None,
              help="How TF cases train: custom (strategy.run, the default) or Keras fit.")
@results_option
@json_option
def command(suite: str | None, framework: str, strategy_names: tuple[str, ...],
            workloads: tuple[str, ...], cluster: str, steps: int, warmup: int, repeats: int,
            timeout: float, resume: bool, dry_run: bool, script: str, stages: int | None,
            microbatches: int | None, schedule: str | None, stage_layers: str | None,
            tensor: int | None, tf_loop: str | None, results: str | None,
            as_json: bool) -> None:
    """Train workloads under each strategy and store one row per case."""
    store = ResultsStore(results_dir(results))
    if dry_run:
        write_batch_script(clusters.parse_cluster(cluster), framework, strategy_names,
                           workloads, suite, steps, warmup, repeats, timeout, store, script,
                           CaseOptions(stages, microbatches, schedule, tensor, tf_loop,
                                       stage_layers))
        return
    if resume:
        run_id, cases = _resume_target(store)
        skip = store.finished_case_ids(run_id)
        cluster_spec = clusters.parse_cluster(cases[0].cluster if cases else "local")
        info(f"resuming run {run_id}: {len(skip)} of {len(cases)} cases already done")
    else:
        strategies = strategy_records.strategies(framework, strategy_names)
        cluster_spec = clusters.parse_cluster(cluster)
        names = list(workloads) or list(SUITES[suite or "quick"])
        cases = plan(strategies, resolve_workloads(names), cluster_spec.text, steps, warmup,
                     repeats, timeout, hosts=cluster_spec.hosts,
                     pipeline=CaseOptions(stages, microbatches, schedule, tensor, tf_loop,
                                          stage_layers))
        run_id = start_run(store, cases)
        skip = set()
    with on_cluster(cluster_spec, store, run_id) as emulated:
        rows = run_cases(cases, store, run_id, skip, quiet=as_json, cluster=emulated)
    if as_json:
        print_json({"run_id": run_id, "results": str(store.root),
                    "rows": [r.to_dict() for r in rows]})
    else:
        counts = {s: sum(r.status == s for r in rows) for s in ("ok", "failed", "timeout",
                                                                   "unavailable")}
        info(f"run {run_id}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))


def write_batch_script(cluster_spec: clusters.ClusterSpec, framework: str,
                       strategy_names: tuple[str, ...], workloads: tuple[str, ...],
                       suite: str | None, steps: int, warmup: int, repeats: int,
                       timeout: float, store: ResultsStore, script: str,
                       layout: CaseOptions | None = None) -> None:
    if cluster_spec.kind != "slurm":
        raise InputError("--dry-run writes a Slurm batch script: use it with --cluster slurm")
    names = list(workloads) or list(SUITES[suite or "quick"])
    cases = plan(strategy_records.strategies(framework, strategy_names), resolve_workloads(names),
                 cluster_spec.text, steps, warmup, repeats, timeout, hosts=cluster_spec.hosts,
                 pipeline=layout)
    argv = [sys.executable, "-m", "harness.cli", "run", "--cluster", cluster_spec.text,
            "--framework", framework, "--steps", str(steps), "--warmup", str(warmup),
            "--repeats", str(repeats), "--timeout", f"{timeout:g}",
            "--results", str(store.root.resolve())]
    argv += [a for name in strategy_names for a in ("--strategy", name)]
    argv += [a for name in names for a in ("--workload", name)]
    layout = layout or CaseOptions()
    argv += [a for flag, value in (("--stages", layout.stages),
                                   ("--microbatches", layout.microbatches),
                                   ("--schedule", layout.schedule),
                                   ("--tensor-parallel", layout.tensor),
                                   ("--tf-loop", layout.tf_loop),
                                   ("--stage-layers", layout.stage_layers))
             if value is not None for a in (flag, str(value))]
    text = slurm.batch_script(cases, SlurmTarget(cluster_spec), argv)
    path = Path(script)
    try:
        path.write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write the batch script {path}: {exc.strerror}") from exc
    info(f"wrote {path}: {len(cases)} cases as job steps of one allocation; "
         f"review it, then: sbatch {path}")
    print(path)


def start_run(store: ResultsStore, cases: list[Case], kind: str = "run") -> str:
    """A new run folder whose manifest holds the environment and the plan (for --resume)."""
    store.check_writable()
    manifest = environment.collect(frameworks=tuple(sorted({c.framework for c in cases})))
    manifest.update(kind=kind, cases=[dataclasses.asdict(c) for c in cases],
                    argv=sys.argv[1:])
    run_id = store.start_run(manifest)
    info(f"run {run_id}: {len(cases)} cases, results in {store.root}")
    return run_id


@contextlib.contextmanager
def on_cluster(spec: clusters.ClusterSpec, store: ResultsStore,
               run_id: str) -> Iterator[Where]:
    """Build emulated hosts for a netns run (torn down whatever happens), measure their
    links and store what was measured in the run's manifest; None for other clusters, or
    when hosts cannot be built here (cases then end as `unavailable` rows saying why)."""
    if spec.kind == "slurm":
        yield None if slurm.unavailable_reason() else SlurmTarget(spec)
        return
    if spec.kind != "netns" or netns.unavailable_reason():
        yield None
        return
    stale = netns.leftovers()
    if stale:
        info(f"warning: emulated hosts of an earlier run are still there ({', '.join(stale)});"
             " `stratbench cleanup` removes them")
    rate = spec.rate_bits
    assert rate is not None  # parse_cluster requires it for netns
    # SIGTERM unwinds like Ctrl-C (harness/cli.py), so the hosts go whatever stops the run
    with netns.emulated(spec.hosts, rate, spec.racks, spec.uplink_bits) as cluster:
        links = netns.measure_links(cluster)
        for link in links:
            info(f"link h{link['src']} -> h{link['dst']}: "
                 f"{link['throughput_bits_s'] / 1e6:.0f} Mbit/s measured "
                 f"({link['configured_bits_s'] / 1e6:.0f} configured), "
                 f"rtt {link['rtt_median_s'] * 1e6:.0f} us")
        manifest = store.manifest(run_id) or {}
        manifest.setdefault("networks", []).append(
            {"cluster": spec.text, "tag": cluster.run_tag, "links": links,
             "burst_bytes": netns.tbf_burst(rate)})
        manifest.pop("run_id", None)
        store.write_manifest(run_id, manifest)
        yield cluster
