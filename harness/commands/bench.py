"""`stratbench bench`: the nightly job. Runs every stage that exists and says which do not.

Stages: the quick suite of real runs (every framework and strategy, one row per case), the
collective sweep with its alpha/beta fit, a sweep on two unshaped emulated hosts (the floor),
then a sweep and a few cases on the same hosts shaped, with the simulator validated against
them (root only; skipped with the reason otherwise), simulations of the same workloads on
larger preset clusters with that calibration, then the recommender and the HTML report (its
path is the last line on stdout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from harness.calibrate.collective_sweep import run_comm, store_comm, sweep_sizes
from harness.commands.common import CONTEXT_SETTINGS, info, results_option
from harness.commands.report import exit_on_regressions, fail_on_regression_option, make_report
from harness.commands.run import SUITES, on_cluster, run_cases, start_run
from harness.core import strategies as strategy_records
from harness.core.case import COMM_ROUNDS
from harness.core.clusters import UNSHAPED, ClusterSpec, parse_cluster
from harness.core.errors import InputError
from harness.core.paths import results_dir
from harness.run.plan import plan, resolve_workloads
from results.store import ResultsStore

if TYPE_CHECKING:
    from harness.core.project import Project
    from harness.launch.netns import Cluster

PENDING_STAGES: tuple[tuple[str, str], ...] = ()
SIM_TARGETS = ("preset:eth25_v100,hosts=4", "preset:dgx_h100_ib,hosts=16")
# Two emulated hosts on a link the gradient exchange of mlp:M (12.6 MB) clearly waits for:
# a few minutes that give the nightly report a fresh simulator-against-measurement error.
EMULATED = "netns:hosts=2,rate=200mbit"
EMULATED_CASES = ("torch", ("single_device", "ddp", "parameter_server"), "mlp:M")
# the same hosts unshaped first: their sweep is the floor the shaped one is predicted from
# (harness/validate/score.py, unshaped_time)
EMULATED_FLOOR = f"netns:hosts=2,rate={UNSHAPED}"
EMULATED_SIZES = (1024, 4 * 2**20)


def _emulated_sweep(store: ResultsStore, run_id: str, spec: ClusterSpec, framework: str,
                    hosts: Cluster | None, rounds: int) -> None:
    comm = run_comm(framework, spec.text, sweep_sizes(*EMULATED_SIZES), spec.hosts, 600.0,
                    hosts, rounds=rounds)
    if comm.status == "ok":
        rate = "unshaped" if spec.unshaped else "shaped"
        store_comm(store, run_id, comm, f"{framework}-netns-{spec.hosts}-{rate}")
    else:
        info(f"stage emulated: comm on {spec.text} {comm.status}: {comm.reason}")


def emulated_stage(store: ResultsStore, run_id: str, steps: int,
                   rounds: int = COMM_ROUNDS) -> None:
    """Collectives and a few cases on emulated hosts, then `validate` into this run; each
    sweep runs `rounds` times (a point is their median)."""
    from harness.launch import netns
    from harness.validate.score import VALIDATION_TABLE, summarize, validate

    why = netns.unavailable_reason()
    if why:
        info(f"stage emulated: skipped ({why})")
        return
    spec, floor = parse_cluster(EMULATED), parse_cluster(EMULATED_FLOOR)
    framework, names, workload = EMULATED_CASES
    cases = plan(strategy_records.strategies(framework, names), resolve_workloads([workload]),
                 spec.text, steps, 3, 1, 600.0, hosts=spec.hosts)
    info(f"stage emulated: {framework} collectives on {floor.text}, then collectives and "
         f"{len(cases)} cases on {spec.text}")
    with on_cluster(floor, store, run_id) as hosts:
        unshaped = hosts if isinstance(hosts, netns.Cluster) else None
        _emulated_sweep(store, run_id, floor, framework, unshaped, rounds)
    with on_cluster(spec, store, run_id) as hosts:
        emulated = hosts if isinstance(hosts, netns.Cluster) else None
        _emulated_sweep(store, run_id, spec, framework, emulated, rounds)
        run_cases(cases, store, run_id, set(), quiet=False, cluster=emulated)
    table = validate(store)
    if table.empty:
        info("stage validate: nothing to validate")
        return
    store.write_table(run_id, VALIDATION_TABLE, "simulator", table)
    errors = ", ".join(f"{kind} {err:.1%}" for kind, err in summarize(table).items())
    info(f"stage validate: median |error| {errors} over {len(table)} points")


def simulate_stage(store: ResultsStore, run_id: str, workloads: list[str]) -> int:
    """Simulated rows go to their own table: they never mix with measured rows."""
    import pandas as pd

    from harness.calibrate.workload import workload_facts
    from harness.sim import from_preset, simulate
    from harness.sim.systems.calibration import stated
    from workloads.execution import DEFAULT_EXECUTION
    from workloads.profile import stated_by

    rows = []
    for target in SIM_TARGETS:
        preset = target.split(":", 1)[1].split(",", 1)[0]
        topology_workers = 8 * 16 if "dgx" in preset else 8 * 4
        for name in workloads:
            profile, said = workload_facts(name), stated_by(name)
            rows += [r.to_row() for r in simulate(
                target, topology_workers, "all", profile, stated(from_preset(preset), said),
                workload=name, execution=said.deployed(DEFAULT_EXECUTION))]
    store.write_table(run_id, "simulated", "presets", pd.DataFrame(rows))
    return len(rows)


HELP = """
The nightly job: run, comm, simulate, recommend, report.

The nightly job: run, comm, emulated hosts + validate (root only), simulate, recommend, report
(its path printed last). With a project file (--config FILE, else ./stratbench.toml, else
[tool.stratbench] in ./pyproject.toml; docs/NIGHTLY.md): your workloads measured on your
clusters, one verdict per workload and target (budget, deadline, device), stored each night; a
verdict that changed since the previous night (another pick or device count, or its time beyond
the error) says what changed and why: an edit of the project file (the same project by its `id`,
else its path) is named key by key ("budget $50.00 -> $1.00") with the change it made, apart
from what new measurements, calibration or code did.

Without one, the built-in suite (docs/examples/stratbench.toml). Schedules as shipped:
.github/workflows/nightly.yml, docs/examples/nightly.sbatch (resubmits itself), a cron line
(docs/NIGHTLY.md).

--fail-on-regression exits 1, naming each case, when the latest run of a case is slower than its
history by more than the noise measured in earlier runs (the report's rule);

--fail-on-verdict-change exits 1 when a project's verdict changed by more than the project
file's edit explains.
"""


@click.command("bench", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--config", default=None, metavar="FILE",
              help="A project file (stratbench.toml, or a pyproject.toml's [tool.stratbench]): "
                   "the workloads, the clusters to measure on, the targets to recommend for. "
                   "Default: ./stratbench.toml, else the built-in suite "
                   "(examples/stratbench.toml).")
@click.option("--suite", type=click.Choice(sorted(SUITES)), default="quick", show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Timed steps per case [default: the project's, else 20].")
@click.option("--repeats", type=click.IntRange(min=1), default=None,
              help="Repeats per case [default: the project's, else 3].")
@results_option
@fail_on_regression_option
@click.option("--fail-on-verdict-change", is_flag=True,
              help="Exit 1 when a project's verdict (the pick, its device count, or its time "
                   "beyond the error) changed since the previous bench run of the same project "
                   "on this machine, by more than an edit of the project file explains "
                   "(new measurements, calibration, code).")
def command(config: str | None, suite: str, steps: int | None, repeats: int | None,
            results: str | None, fail_on_regression: bool, fail_on_verdict_change: bool
            ) -> None:
    """The nightly job: run, comm, simulate, recommend, report."""
    from harness.core.project import find_project

    project = find_project(config)
    if project is not None:
        _check_project(project)
    store = ResultsStore(results_dir(results or (project.results if project else None)))
    steps = steps or (project.steps if project else 20)
    repeats = repeats or (project.repeats if project else 3)
    names = list(project.workloads) if project else list(SUITES[suite])
    runnable = _runnable(names, project)
    cases = plan(_strategies(project), resolve_workloads(runnable), "local", steps, 3,
                 repeats, 600.0)
    run_id = start_run(store, cases, kind="bench")
    if project is not None:
        info(f"project {project.name} ({project.path}): {len(project.workloads)} workloads, "
             f"{len(project.targets)} targets")
    info(f"stage run: {len(cases)} cases")
    with on_cluster(parse_cluster("local"), store, run_id):
        rows = run_cases(cases, store, run_id, set(), quiet=False)
    info(f"stage run: {sum(r.status == 'ok' for r in rows)} ok of {len(rows)}")
    if project is not None:
        rows += _other_clusters(project, runnable, store, run_id, steps, repeats)
    info("stage comm: torch collectives, 2 ranks, 1 KiB to 16 MiB")
    comm = run_comm("torch", "local", sweep_sizes(1024, 16 * 2**20), 2, 600.0)
    if comm.status == "ok":
        store_comm(store, run_id, comm, "torch-local-2")
    else:
        info(f"stage comm: {comm.status}: {comm.reason}")
    if project is None:
        emulated_stage(store, run_id, steps)
        info(f"stage simulate: {simulate_stage(store, run_id, names)} simulated rows "
             f"on {', '.join(SIM_TARGETS)}")
    for stage, where in PENDING_STAGES:
        info(f"stage {stage}: not built yet ({where}); skipped")
    changed = (_project_verdicts(store, run_id, project) if project is not None
               else _default_recommend(store, names))
    report = make_report(store.root, project)
    info(f"stage report: {report}")
    click.echo(store.run_dir(run_id))
    click.echo(report)
    if fail_on_regression:
        exit_on_regressions(store.root)
    if fail_on_verdict_change and changed:
        info(f"{changed} verdict(s) changed since the previous bench run of this project "
             f"by more than its edit explains")
        raise SystemExit(1)


def _check_project(project: Project) -> None:
    """Every workload and target of the project, checked before anything runs."""
    from harness.core.project import resolved_workload
    from harness.recommend.targets import parse_targets
    from workloads import WorkloadError, resolve_workload

    where = f"project file {project.path}"
    for i, name in enumerate(project.workloads):
        try:
            resolve_workload(resolved_workload(name, project))
        except WorkloadError as exc:
            raise InputError(f"{where}: workloads[{i}]: {exc}") from None
    for i, goal in enumerate(project.targets):
        try:
            (target,) = parse_targets([goal.target])
        except InputError as exc:
            raise InputError(f"{where}: targets[{i}].target: {exc}") from None
        if goal.global_batch is not None and target.kind != "topology":
            raise InputError(f"{where}: targets[{i}].global_batch applies to described "
                             f"clusters (a topology or preset:...); {goal.target} trains at "
                             f"its runs' batches")
        if goal.stack:
            from harness.validate.devices import resolve_stack

            try:
                resolve_stack(dict(goal.stack))
            except ValueError as exc:
                raise InputError(f"{where}: targets[{i}].stack: {exc}") from None
        if goal.device is not None:
            from harness.sim.systems.preset import load_preset

            try:
                load_preset(goal.device)
            except InputError as exc:
                raise InputError(f"{where}: targets[{i}].device: {exc}") from None


def _strategies(project: Project | None) -> list[Any]:
    """The project's frameworks and strategies (each framework's baseline always with them,
    so efficiencies have their one device), else every strategy of every framework."""
    if project is None or not (project.frameworks or project.strategies):
        return strategy_records.strategies("all", [])
    chosen: list[Any] = []
    for fw in project.frameworks or ("tf", "torch"):
        names = [n for n in project.strategies
                 if any(s.name == n and s.framework == fw for s in strategy_records.STRATEGIES)]
        if not project.strategies:
            chosen += strategy_records.strategies(fw, [])
        elif names:
            baseline = strategy_records.baseline(fw).name
            chosen += strategy_records.strategies(fw, [baseline, *names])
    return chosen


def _runnable(names: list[str], project: Project | None) -> list[str]:
    """The workloads a framework here can train (built-ins, users' models); known models and
    transformers by their dimensions are numbers only: recommended, never run."""
    from harness.core.project import resolved_workload
    from workloads import numbers_only, resolve_workload

    out = []
    for name in names:
        ref = resolved_workload(name, project) if project else name
        if not numbers_only(resolve_workload(ref)):
            out.append(ref)
        else:
            info(f"stage run: {name} is numbers only: recommended, not run")
    return out


def _other_clusters(project: Project, runnable: list[str], store: ResultsStore, run_id: str,
                    steps: int, repeats: int) -> list[Any]:
    """The project's clusters beyond this machine: the same cases, one host each."""
    rows: list[Any] = []
    for text in project.clusters:
        spec = parse_cluster(text)
        if spec.kind == "local":
            continue
        cases = plan(_strategies(project), resolve_workloads(runnable), spec.text, steps, 3,
                     repeats, 600.0, hosts=spec.hosts)
        info(f"stage run on {spec.text}: {len(cases)} cases")
        with on_cluster(spec, store, run_id) as hosts:
            rows += run_cases(cases, store, run_id, set(), quiet=False, cluster=hosts)
    return rows


def _default_recommend(store: ResultsStore, names: list[str]) -> int:
    from harness.recommend.recommender import format_table, recommend_from_store

    info("stage recommend:")
    try:
        info(format_table(recommend_from_store(store.root, workloads=names,
                                               targets=["local", *SIM_TARGETS])))
    except InputError as exc:  # a stage's answer, not the nightly job's failure
        info(f"stage recommend: no answer: {exc}")
    return 0


def _project_verdicts(store: ResultsStore, run_id: str, project: Project) -> int:
    """One verdict per workload and target, stored with what it read and compared with the
    previous night's; the number that changed."""
    from harness.recommend import nightly
    from harness.run import environment

    manifest = store.manifest(run_id) or {}
    commit = str((manifest.get("git") or {}).get("commit") or "")
    env = environment.fingerprint(environment.collect(frameworks=False))
    inputs = nightly.inputs_of(store.root, commit, env)
    verdicts = nightly.changes(nightly.project_verdicts(store.root, project),
                               nightly.previous_verdicts(store.root, project, run_id, env),
                               inputs, project, nightly.recomputer(store.root))
    nightly.store_verdicts(store, run_id, project, verdicts, inputs)
    info("stage recommend:")
    for v in verdicts:
        info(f"{v['workload']} on {v['target']}: {v['headline']}"
             + (f"\n  CHANGED: {v['change']}" if v["changed"] else ""))
    edited = [v for v in verdicts if v["edit_change"] and not v["unexplained"]]
    if edited:
        info(f"{len(edited)} verdict(s) changed by the project edit alone (not a failure)")
    return sum(bool(v["unexplained"]) for v in verdicts)
