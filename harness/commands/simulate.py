"""`stratbench simulate`: all-reduce vs parameter-server costs on a topology (no framework)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from harness.commands.common import info, json_option, print_json
from harness.errors import InputError


def _profile(workload: str | None, profile: str | None) -> Any:
    from harness.sim import WorkloadProfile, parse_profile

    if workload and profile:
        raise InputError("give --workload or --profile, not both")
    if profile:
        return parse_profile(profile if not profile.startswith("profile:")
                             else profile[len("profile:"):])
    if workload:
        from workloads import WorkloadError, get_known, known_names, parse_workload
        from workloads.known import known_key

        if ":" not in workload and known_key(workload) not in known_names():
            raise InputError(f"unknown workload {workload!r} (use FAMILY:SIZE like mlp:S or "
                             f"a known model: {', '.join(known_names())})")
        try:
            spec = (get_known(workload).spec() if ":" not in workload
                    else parse_workload(workload))
        except WorkloadError as exc:
            raise InputError(str(exc)) from exc
        return WorkloadProfile(**spec.as_profile())
    raise InputError("give --workload FAMILY:SIZE|MODEL or --profile K=V,... "
                     "(e.g. --profile params=25M,batch=32,step_compute=100ms)")


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
    best = fits.iloc[-1]
    link = LinkCalibration(float(best["alpha_s"]), float(best["beta_s_per_byte"]), "measured",
                           note=f"comm run {best['run_id']}, residual "
                                f"{float(best['residual_rel']):.0%}")
    classes = link_classes(parse_topology(topology))
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
@click.option("--stragglers", type=click.IntRange(min=0), default=0)
@click.option("--straggler-factor", type=click.FloatRange(min=1.0), default=1.0)
@json_option
def command(topology: str, workers: int, workload: str | None, profile: str | None,
            strategies: tuple[str, ...], calibration: str | None, stragglers: int,
            straggler_factor: float, as_json: bool) -> None:
    """Simulate a training step of each strategy on a topology; rows are source=simulated."""
    from harness.sim import simulate

    prof = _profile(workload, profile)
    calib = load_calibration(calibration, topology)
    rows = simulate(topology, workers, list(strategies) or "all", prof, calib,
                    workload=workload, stragglers=stragglers,
                    straggler_factor=straggler_factor)
    if as_json:
        print_json(rows)
        return
    info(f"simulated {workers} workers on {topology}"
         + (f" with calibration {calibration}" if calibration else ""))
    click.echo(format_rows(rows))
