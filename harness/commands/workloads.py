"""`stratbench workloads`: the built-in workloads with their sizes and costs."""

from __future__ import annotations

from typing import Any

import click

from harness.commands.common import json_option, print_json
from workloads.spec import WorkloadSpec


def describe(spec: WorkloadSpec) -> dict[str, Any]:
    return {
        "name": spec.name, "family": spec.family, "size": spec.size, "task": spec.task,
        "params": spec.params, "flops_per_sample": spec.flops_per_sample,
        "grad_bytes": spec.grad_bytes, "batch_per_replica": spec.batch_size,
        "sparsity": spec.sparsity,
    }


@click.command("workloads")
@json_option
def command(as_json: bool) -> None:
    """List the workloads: parameters, training FLOPs per sample, gradient bytes, sparsity."""
    from workloads.catalog import list_workloads

    rows = [describe(s) for s in list_workloads()]
    if as_json:
        print_json(rows)
        return
    click.echo(f"{'workload':<15}{'params':>13}{'GFLOP/sample':>14}{'grad MB':>10}"
               f"{'batch':>7}{'touched':>9}")
    for r in rows:
        flops = r["flops_per_sample"]
        click.echo(f"{r['name']:<15}{r['params']:>13,}"
                   f"{(flops / 1e9 if flops else float('nan')):>14.3f}"
                   f"{r['grad_bytes'] / 1e6:>10.1f}{r['batch_per_replica']:>7}"
                   f"{r['sparsity']:>9.2%}")
