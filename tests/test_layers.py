"""Imports point one way, with the data flow: a walk of every module's imports against the
ordered layers docs/ARCHITECTURE.md shows.

Module-level and function-level imports count (a lazy import is still a dependency);
imports under ``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "workloads", "results", "reports")
# Lowest first. A module may import its own layer's modules (without a circle) and any lower
# layer's, never a higher one's. Each entry is a package or a module; the longest match wins.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("workloads", "results"),
    ("harness.core",),
    ("harness.measure", "harness.sim.schedules"),
    ("harness.sim.network",),
    ("harness.sim.model",),
    ("harness.sim.systems",),
    ("harness.sim.step",),
    ("harness.sim",),
    ("harness.runners",),
    ("harness.launch",),
    ("harness.run", "harness.worker", "harness.probes"),
    ("harness.calibrate",),
    ("harness.predict",),
    ("harness.validate",),
    ("harness.recommend",),
    ("reports",),
    ("harness.commands", "harness.docs", "harness.cli", "harness"),
)


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path, modules: Collection[str]) -> set[str]:
    """What ``module`` imports: `from pkg import x` is `pkg.x` where that is a module in
    ``modules``, else `pkg` itself."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit_one(other)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.add(full if full in modules else base)
        else:
            visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    return names


def _owner(name: str, modules: Collection[str]) -> str | None:
    """The project module ``name`` is or lies in (`harness.sim.network.topology.Torus` -> its
    module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        owners = {_owner(name, modules) for name in _imported_names(module, path, modules)}
        graph[module] = {o for o in owners if o is not None and o != module}
    return graph


def layer_of(module: str) -> int:
    best = (-1, -1)
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            if module == entry or module.startswith(entry + "."):
                best = max(best, (len(entry), index))
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS and docs/ARCHITECTURE.md"
    return best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_is_in_exactly_one_layer():
    for module in project_modules():
        layer_of(module)
    entries = [e for layer in LAYERS for e in layer]
    assert len(entries) == len(set(entries))


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_imports_point_down_the_layers():
    against = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
               for m, targets in import_graph().items() for t in sorted(targets)
               if layer_of(t) > layer_of(m)]
    assert against == []


def test_the_walk_sees_function_level_imports_and_skips_type_checking(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a.b\n"
                    "def f():\n    from c import d\n")
    assert _imported_names("x.m", path, set()) == {"typing", "c"}
    assert _imported_names("x.m", path, {"c.d"}) == {"typing", "c.d"}


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_architecture_doc_shows_these_layers():
    """docs/ARCHITECTURE.md lists the layers, lowest first, one line each, in a block that
    starts at a line `LAYERS (lowest first)`; it must be this list."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("LAYERS (lowest first)", 1)[1].split("```", 1)[0]
    shown = [tuple(re.findall(r"[\w.]+", line.split(":", 1)[1]))
             for line in block.strip().splitlines() if ":" in line]
    assert shown == list(LAYERS)


def test_validate_fingerprints_every_package_its_predictions_import():
    """`validate` reuses its last table while its inputs' fingerprint is unchanged: the
    fingerprint must cover all the code the predictions run, direct imports or not."""
    from harness.validate.score import PREDICTION_PACKAGES

    graph = import_graph()
    seen, todo = set(), ["harness.validate.score"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    covered = tuple(p.replace("/", ".") for p in PREDICTION_PACKAGES)
    outside = sorted(m for m in seen if m not in ("harness",)
                     and not any(m == c or m.startswith(c + ".") for c in covered))
    assert outside == []


def test_harness_holds_few_loose_modules_and_no_catch_all_package():
    """The folders show the flow: at most 8 modules directly in harness/ (entry points and the
    package itself), every other module in the package of its stage, none in a bin of
    leftovers."""
    loose = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert len(loose) <= 8, loose
    packages = {p.parent.name for p in (ROOT / "harness").glob("*/__init__.py")}
    assert not packages & {"misc", "utils", "util", "helpers", "common", "lib"}, packages
    layered = {e for layer in LAYERS for e in layer}
    assert {f"harness.{name}" for name in packages} <= layered


def test_the_simulator_is_split_by_concept_with_no_module_name_twice():
    """harness/sim/ reads as its concepts (schedules, network, model, systems, step): a few
    entry modules at its top, and no two modules under it answering to one name."""
    sim = ROOT / "harness" / "sim"
    assert len(list(sim.glob("*.py"))) <= 8
    names = [p.stem for p in sim.rglob("*.py") if p.stem != "__init__"]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _long_functions(folder: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                 f"({length} lines)")
    return found


def test_functions_are_composed_from_parts_and_verbs_are_thin():
    """No function in harness/ past 100 lines; a verb parses and calls, in 60 at most."""
    assert _long_functions(ROOT / "harness", 100) == []
    assert _long_functions(ROOT / "harness" / "commands", 60) == []


def test_collecting_the_tests_imports_no_framework(tmp_path):
    """Every pytest process collects every test module (each xdist worker, and the heavy
    phase, which runs no framework in-process): a module-level TensorFlow or torch import
    costs each 7.6 s or 3.9 s. Test modules import them at first use (tests/lazy.py)."""
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    code = ("import sys, pytest\n"
            f"code = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
            f"'--rootdir', {str(tests.parent)!r}, {str(tests)!r}])\n"
            "print('imported:', sorted({'tensorflow', 'torch', 'keras'} & set(sys.modules)))\n"
            "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "imported: []" in proc.stdout, proc.stdout[-500:]
