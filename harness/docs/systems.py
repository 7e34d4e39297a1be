"""docs/SYSTEMS.md: the topology grammar, the built-in systems, the strategies and the stacks.

Each table is read from the one record that the parser or the runners also read
(``sim.systems.spec.GRAMMAR``, the presets, ``core.strategies.STRATEGIES``,
``core.stacks.STACKS``), so the
page cannot say what the code does not do. Write it again after changing one:
``python -m harness.docs.systems > docs/SYSTEMS.md`` (a test compares them).
"""

from __future__ import annotations

from harness.core.stacks import STACKS
from harness.core.strategies import STRATEGIES
from harness.sim.systems.preset import load_preset, preset_names
from harness.sim.systems.spec import GRAMMAR

HEADER = """# Topologies, systems, strategies and stacks

Written by `python -m harness.docs.systems` from the records the code reads; edit those,
never this file. How the simulator models each is in docs/SIMULATOR.md.
"""

UNITS = """A topology is one line, `KIND:KEY=VALUE,...` or `preset:NAME[,KEY=VALUE,...]` (a preset
or a system file, its own spec's keys overridden by those given, e.g.
`preset:dgx_h100_ib,hosts=16`). Bandwidths are a number, an optional prefix (k M G T decimal,
Ki Mi Gi Ti binary) and a unit: `bit`/`b`/`bps` for bits or `B`/`byte`/`Bps` for bytes,
optionally `/s` (`100Gbit`, `25Gbps`, `300GB/s`). Latencies are a number and `s`, `ms`, `us`,
`µs` or `ns`."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def topology_grammar() -> str:
    lines = [UNITS, ""]
    for kind in GRAMMAR:
        lines += [f"### `{kind.name}`", "", f"{kind.what}: `{kind.example}`", "",
                  "| key | default | meaning |", "|---|---|---|"]
        lines += [f"| `{o.key}` | {'required' if o.default == '' else o.default or '-'} | "
                  f"{_cell(o.meaning)} |" for o in kind.options]
        lines.append("")
    return "\n".join(lines).rstrip()


def systems() -> str:
    """The built-in systems (``sim/systems/presets/``), each a file to copy for one's own."""
    lines = ["Each is a file in `harness/sim/systems/presets/`, every number with its source; "
             "copy one to describe a cluster of your own (`--system FILE`).", "",
             "| preset | device | network | price per device-hour |", "|---|---|---|---|"]
    for name in preset_names():
        preset = load_preset(name)
        price = f"${preset.price.usd_per_device_hour:g}" if preset.price else "not published"
        lines.append(f"| `{name}` | {_cell(preset.device.name)} | `{preset.spec}` | {price} |")
    return "\n".join(lines)


def strategies() -> str:
    lines = ["| framework | strategy | exchange | devices | simulated as | what it is |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {s.framework} | `{s.name}` | {s.exchange} | {', '.join(s.devices)} | "
              f"{s.simulated_as or '-'} | {_cell(s.summary)} |" for s in STRATEGIES]
    return "\n".join(lines)


def stacks() -> str:
    lines = ["Where no runner here runs a layout, an answer names the stack that does and the "
             "option that sets each degree.", "",
             "| stack | framework | device | degree: option | options read from |",
             "|---|---|---|---|---|"]
    lines += [f"| {s.name} | {s.framework} | {s.device} | "
              f"{'; '.join(f'{d}: `{o}`' for d, o in s.degrees.items())} | {s.source} |"
              for s in STACKS]
    return "\n".join(lines)


def render() -> str:
    parts = [HEADER, "## Topology grammar", "", topology_grammar(), "",
             "## Built-in systems", "", systems(), "",
             "## Strategies", "", strategies(), "", "## Stacks", "", stacks(), ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
