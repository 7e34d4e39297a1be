"""`stratbench workloads`: the built-in workloads and the known models, with sizes and costs."""

from __future__ import annotations

from typing import TypedDict

import click

from harness.commands.common import CONTEXT_SETTINGS, json_option, print_json
from workloads.spec import WorkloadSpec


class WorkloadRow(TypedDict, total=False):
    """A workload as the command lists it (``--json``): a built-in's sizes and costs; a known
    model's also say what a sample is, the sources and the notes."""

    name: str
    family: str
    size: str
    task: str
    params: int
    flops_per_sample: float | None
    grad_bytes: int
    batch_per_replica: int
    sparsity: float
    kind: str  # builtin or known
    activation_bytes_per_sample: float | None
    sample: str
    source: list[str]
    notes: str


def describe(spec: WorkloadSpec) -> WorkloadRow:
    return {
        "name": spec.name, "family": spec.family, "size": spec.size, "task": spec.task,
        "params": spec.params, "flops_per_sample": spec.flops_per_sample,
        "grad_bytes": spec.grad_bytes, "batch_per_replica": spec.batch_size,
        "sparsity": spec.sparsity, "kind": "builtin",
        "activation_bytes_per_sample": spec.activation_bytes_per_sample,
    }


def describe_known(name: str) -> WorkloadRow:
    """A known model's row: the built-in keys plus what a sample is and the sources."""
    from workloads.known import get_known

    model = get_known(name)
    return describe(model.spec()) | {"kind": "known", "sample": model.sample,
                                     "source": list(model.source), "notes": model.notes}


def _table(title: str, rows: list[WorkloadRow]) -> None:
    click.echo(f"{title:<15}{'params':>17}{'GFLOP/sample':>14}{'grad MB':>12}{'batch':>7}"
               f"{'act MB/sample':>15}{'touched':>10}")
    for r in rows:
        flops, act = r["flops_per_sample"], r["activation_bytes_per_sample"]
        click.echo(f"{r['name']:<15}{r['params']:>17,}"
                   f"{(flops / 1e9 if flops else float('nan')):>14.3f}"
                   f"{r['grad_bytes'] / 1e6:>12.1f}{r['batch_per_replica']:>7}"
                   f"{(act / 1e6 if act else float('nan')):>15.3f}{r['sparsity']:>10.2%}")


HELP = """
List the workloads: parameters, training FLOPs per sample, gradient bytes, batch, activation
memory per sample (fp32, no recomputation) and the fraction of gradient entries a step touches;
then the known models (numbers only, for simulation; sources in docs/MODELS.md and in --json).

Known models by name (resnet50, gpt3_175b, dlrm, ...): docs/MODELS.md."""


@click.command("workloads", help=HELP, context_settings=CONTEXT_SETTINGS)
@json_option
def command(as_json: bool) -> None:
    """List the workloads: parameters, training FLOPs per sample, gradient bytes, batch,
    activation memory per sample (fp32, no recomputation) and the fraction of gradient
    entries a step touches; then the known models (numbers only, for simulation; sources
    in docs/MODELS.md and in --json)."""
    from workloads.catalog import list_workloads
    from workloads.known import known_names

    rows = [describe(s) for s in list_workloads()]
    known = [describe_known(name) for name in known_names()]
    if as_json:
        print_json(rows + known)
        return
    _table("workload", rows)
    click.echo()
    _table("known model", known)
    click.echo("known models are numbers only (nothing here trains them); what a sample is "
               "and the sources: --json, docs/MODELS.md")
    click.echo("act MB/sample: what backward keeps in fp32 with attention unfused (its T x T "
               "scores), no recomputation; on a described device simulate and recommend "
               "count it at the precision's width, attention fused where the framework fuses "
               "it (torch's SDPA)")
