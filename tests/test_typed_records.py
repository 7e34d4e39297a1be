"""Answers travel as typed records: what the simulator, the recommender and the report hand
each other is a frozen dataclass or a plain value, never a mapping or ``Any`` standing for a
record; and the package as a whole holds few string-keyed mappings of anything.

Read from the source (annotations are strings under ``from __future__ import annotations``),
so the test needs no framework and cannot be fooled by a re-export.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "workloads", "results", "reports")
TYPED = ("harness/sim", "harness/recommend", "reports")
# a string-keyed mapping of anything: what a record should be instead
UNTYPED = re.compile(r"\b(?:dict|Mapping|MutableMapping)\[str, (?:Any|object)\]")
LOOSE = re.compile(r"\b(?:Any|object)\b")
MOST_UNTYPED = 60


def _sources(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))


def _aliases(tree: ast.Module) -> set[str]:
    """Module-level names bound to an untyped mapping (``Point = dict[str, Any]``)."""
    names = set()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if value is not None and UNTYPED.search(ast.unparse(value)):
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def untyped_mentions() -> list[str]:
    """Every untyped mapping written in the package, aliases and their uses included."""
    found = []
    for path in _sources(*PACKAGES):
        text = path.read_text()
        aliases = _aliases(ast.parse(text))
        pattern = (re.compile(UNTYPED.pattern + "|" + "|".join(rf"\b{a}\b" for a in aliases))
                   if aliases else UNTYPED)
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}"] * len(pattern.findall(line))
    return found


def _public_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """Module-level public functions and the public methods of public classes."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            out.append(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out += [f for f in node.body if isinstance(f, ast.FunctionDef)
                    and not f.name.startswith("_")]
    return out


def _loose(annotation: ast.expr | None, aliases: set[str]) -> bool:
    """Whether an annotation stands for a record without naming one: ``Any``, ``object``,
    an untyped mapping or an alias of one (a callback's ``Callable[..., Any]`` is fine)."""
    if annotation is None:
        return False
    text = re.sub(r"Callable\[[^\]]*\]", "Callable", ast.unparse(annotation))
    return bool(LOOSE.search(text) or UNTYPED.search(text)
                or any(re.search(rf"\b{a}\b", text) for a in aliases))


def loose_signatures() -> list[str]:
    bad = []
    for path in _sources(*TYPED):
        tree = ast.parse(path.read_text())
        aliases = _aliases(tree)
        for fn in _public_functions(tree):
            args = fn.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            params += [a for a in (args.vararg, args.kwarg) if a is not None]
            loose = [a.arg for a in params if _loose(a.annotation, aliases)]
            if _loose(fn.returns, aliases):
                loose.append("return")
            if loose:
                bad.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}: {', '.join(loose)}")
    return bad


def test_the_package_holds_few_untyped_mappings() -> None:
    found = untyped_mentions()
    assert len(found) < MOST_UNTYPED, (
        f"{len(found)} untyped string-keyed mappings (at most {MOST_UNTYPED - 1}); "
        f"give these a record:\n" + "\n".join(found))


def test_simulator_recommender_and_report_hand_over_typed_records() -> None:
    bad = loose_signatures()
    assert not bad, "public functions taking or returning an untyped record:\n" + "\n".join(bad)


def test_the_checks_see_an_alias_and_a_loose_signature() -> None:
    tree = ast.parse("from typing import Any\nPoint = dict[str, Any]\n"
                     "def f(p: Point, q: float, cb: Callable[..., Any]) -> object: ...\n"
                     "def _g(p: Any) -> Any: ...\n")
    aliases = _aliases(tree)
    assert aliases == {"Point"}
    (f,) = _public_functions(tree)
    assert [_loose(a.annotation, aliases) for a in f.args.args] == [True, False, False]
    assert _loose(f.returns, aliases)
