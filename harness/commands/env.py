"""`stratbench env`: the environment manifest every run stores."""

from __future__ import annotations

import click

from harness.commands.common import CONTEXT_SETTINGS, json_option, print_json
from harness.run import environment


def format_manifest(m: dict) -> str:
    cpu = m["cpu"]
    lines = [
        f"host        {m['host']}",
        f"cpu         {cpu['model']} ({cpu['arch']}), {cpu['physical_cores']} physical / "
        f"{cpu['logical_cores']} logical cores, {cpu['usable_cores']} usable",
        f"memory      {m['memory_bytes'] / 2**30:.1f} GiB",
        f"os          {m['os']['platform']}",
        f"python      {m['python']['version']} ({m['python']['executable']})",
    ]
    for name, probe in m.get("frameworks", {}).items():
        if probe.get("available"):
            extra = f", keras {probe['keras_version']} ({probe['keras_implementation']})" \
                if name == "tensorflow" else ""
            lines.append(f"{name:<11} {probe['version']}{extra}")
        else:
            lines.append(f"{name:<11} unavailable: {probe.get('reason')}")
    gpus = m["gpus"]
    smi = gpus.get("nvidia_smi") or []
    lines.append("gpus        " + (", ".join(
        f"{g['name']} ({(g['memory_bytes'] or 0) / 2**30:.0f} GiB)" for g in smi) or
        f"none (torch sees {len(gpus.get('torch', []))}, "
        f"tensorflow sees {len(gpus.get('tensorflow', []))})"))
    lines.append(f"tpu         {'present' if m['tpu']['present'] else 'none'}")
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items()
                         if v and k not in ("tensorflow", "torch"))
    lines.append(f"packages    {versions}")
    git = m["git"]
    lines.append(f"commit      {git['commit'] or 'unknown'}"
                 f"{' (uncommitted changes)' if git.get('dirty') else ''}")
    priv = m["privileges"]
    lines.append(f"netns        root={priv['root']}, ip={'yes' if priv['ip'] else 'no'}, "
                 f"tc={'yes' if priv['tc'] else 'no'}")
    return "\n".join(lines)


HELP = """
Describe this machine: CPU, memory, GPUs, TPU, software versions, commit.

The environment manifest: CPU model, physical/logical/usable cores, memory, GPUs (through
nvidia-smi, torch and TensorFlow), TPU presence, Python, OS, TensorFlow / Keras implementation /
torch / simpy / pandas versions, the project's git commit. Every run stores it.
"""


@click.command("env", help=HELP, context_settings=CONTEXT_SETTINGS)
@json_option
@click.option("--no-frameworks", is_flag=True,
              help="Skip the TensorFlow and torch probes (fast).")
def command(as_json: bool, no_frameworks: bool) -> None:
    """Describe this machine: CPU, memory, GPUs, TPU, software versions, commit."""
    manifest = environment.collect(frameworks=not no_frameworks)
    if as_json:
        print_json(manifest)
    else:
        click.echo(format_manifest(manifest))
