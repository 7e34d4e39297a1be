"""`stratbench simulate`: all-reduce vs parameter-server costs on a topology (no framework)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from harness.commands.common import info, json_option, print_json, results_option
from harness.errors import InputError
from harness.paths import results_dir


def _profile(workload: str | None, profile: str | None, results: Path, topology: str,
             calibration: Any) -> Any:
    """The simulator's profile: from --profile, or from the workload (any that `recommend`
    takes: a built-in, a known model, a user's file after one run), with the compute time
    measured here when nothing else can tell it (a topology without a device speed)."""
    from harness.sim import parse_profile
    from harness.sim.calibration import compute_seconds
    from harness.sim.spec import SpecError

    if workload and profile:
        raise InputError("give --workload or --profile, not both")
    if profile:
        return parse_profile(profile if not profile.startswith("profile:")
                             else profile[len("profile:"):])
    if not workload:
        raise InputError("give --workload FAMILY:SIZE|MODEL or --profile K=V,... "
                         "(e.g. --profile params=25M,batch=32,step_compute=100ms)")
    from harness.profiles import (
        measured_compute,
        no_compute_message,
        scaled_compute,
        workload_facts,
    )
    from harness.sim.calibration import from_preset, merge

    measured = _measured(results)
    facts = workload_facts(workload, measured)
    prof = facts.profile()
    kind, _, rest = topology.strip().partition(":")
    base = from_preset(rest.partition(",")[0].strip()) if kind == "preset" else None
    known = merge(base, calibration) if base and calibration else (calibration or base)
    try:
        compute_seconds(prof, known)
        return prof
    except SpecError:
        pass
    here = measured_compute(measured, facts.name)
    if here is None:
        raise InputError(no_compute_message(facts.name))
    info(f"compute: {here.note}")
    return facts.profile(step_compute_s=scaled_compute(here, facts.batch))


def _measured(results: Path) -> Any:
    import pandas as pd

    from results.store import load

    return load(results) if (results / "runs").is_dir() else pd.DataFrame()


def load_calibration(option: str | None, topology: str) -> Any:
    """A preset name, or a results directory whose latest `comm` fit becomes every link's
    alpha and beta (the all-reduce fit with the most ranks)."""
    from harness.sim import Calibration, LinkCalibration, from_preset, parse_topology
    from harness.sim.preset import preset_names
    from harness.sim.topology import link_classes

    if option is None:
        return None
    if option in preset_names():
        return from_preset(option)
    path = Path(option)
    if not path.is_dir():
        raise InputError(f"--calibration {option!r} is neither a preset "
                         f"({', '.join(preset_names())}) nor a results directory")
    from results.store import load_table

    fits = load_table(path, "calibration")
    if fits.empty or "all_reduce" not in set(fits["op"]):
        raise InputError(f"no all-reduce calibration under {path} (run `stratbench comm`)")
    fits = fits[fits["op"] == "all_reduce"].sort_values(["run_id", "world"])
    network = fits[fits["link_class"] != "loopback"] if "link_class" in fits else fits
    classes = link_classes(parse_topology(topology))
    if network.empty:
        # A loopback fit measured the library and this machine, not a network: its alpha
        # is a per-message software cost added to each link's latency; the bandwidths stay
        # the ones the topology states.
        best = fits.iloc[-1]
        links = {c.name: LinkCalibration(c.latency + float(best["alpha_s"]), 1.0 / c.bandwidth,
                                         "spec", note=f"+ loopback alpha of comm run "
                                                      f"{best['run_id']}")
                 for c in classes}
        return Calibration(links, compute_source="profile", name=f"measured:{path}")
    best = network.iloc[-1]
    link = LinkCalibration(float(best["alpha_s"]), float(best["beta_s_per_byte"]), "measured",
                           note=f"comm run {best['run_id']}, residual "
                                f"{float(best['residual_rel']):.0%}")
    return Calibration({c.name: link for c in classes}, compute_source="profile",
                       name=f"measured:{path}")


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'strategy':<28}{'step ms':>10}{'exposed comm ms':>17}{'samples/s':>12}"
             f"{'efficiency':>12}{'MB/worker':>11}  note"]
    for r in sorted(rows, key=lambda r: (r["status"] != "ok", r["step_time_median_s"]
                                         if r["status"] == "ok" else math.inf)):
        if r["status"] != "ok":
            lines.append(f"{r['strategy']:<28}{'-':>10}{'':>17}{'':>12}{'':>12}{'':>11}  "
                         f"{r['status']}: {r['reason']}")
            continue
        lines.append(f"{r['strategy']:<28}{r['step_time_median_s'] * 1e3:>10.2f}"
                     f"{r['exposed_comm_s'] * 1e3:>17.2f}{r['throughput_samples_s']:>12.0f}"
                     f"{r['scaling_efficiency']:>12.2f}{r['bytes_per_worker'] / 1e6:>11.1f}"
                     f"  {r.get('calibration_sources', '')}")
    return "\n".join(lines)


@click.command("simulate")
@click.option("--topology", required=True, metavar="SPEC",
              help="e.g. two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit or "
                   "preset:dgx_h100_ib,hosts=16")
@click.option("--workers", type=click.IntRange(min=1), required=True)
@click.option("--workload", default=None, metavar="FAMILY:SIZE|MODEL",
              help="A built-in (mlp:S) or a known model (resnet50, gpt3_175b; see "
                   "stratbench workloads).")
@click.option("--profile", default=None, metavar="K=V,...",
              help="params=25M,batch=32,step_compute=100ms[,sparsity=0.01,...]")
@click.option("--strategy", "strategies", multiple=True, metavar="NAME",
              help="Simulated strategy (allreduce_ring, parameter_server, ...) or a real "
                   "one (ddp, tf:parameter_server); default all.")
@click.option("--calibration", default=None, metavar="DIR|PRESET",
              help="A preset, or a results directory with `stratbench comm` fits.")
@results_option
@click.option("--stragglers", type=click.IntRange(min=0), default=0)
@click.option("--straggler-factor", type=click.FloatRange(min=1.0), default=1.0)
@json_option
def command(topology: str, workers: int, workload: str | None, profile: str | None,
            strategies: tuple[str, ...], calibration: str | None, results: str | None,
            stragglers: int, straggler_factor: float, as_json: bool) -> None:
    """Simulate a training step of each strategy on a topology; rows are source=simulated."""
    from harness.sim import simulate

    calib = load_calibration(calibration, topology)
    prof = _profile(workload, profile, results_dir(results), topology, calib)
    rows = simulate(topology, workers, list(strategies) or "all", prof, calib,
                    workload=workload, stragglers=stragglers,
                    straggler_factor=straggler_factor)
    if as_json:
        print_json(rows)
        return
    info(f"simulated {workers} workers on {topology}"
         + (f" with calibration {calibration}" if calibration else ""))
    click.echo(format_rows(rows))
