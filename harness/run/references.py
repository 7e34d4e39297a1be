"""The weight check: a synchronous case's weights against one device trained on the global
batch, each such reference trained once a run.

Cases that differ only in how they are deployed share their reference
(`core.case.reference_key`): a run of every strategy on one model trains one device on it
once, not once per strategy. A reference that failed is tried again by the next case that
needs it. The references live in a temporary folder removed when the run ends, an
interrupt included, as its cases' folders are; a resumed run trains them again.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.core.case import Case, reference_key
from harness.core.strategies import WEIGHT_TOLERANCE, weights_agree
from harness.launch import placement as layout
from harness.launch.processes import run_group
from results.schema import ResultRow


@dataclass
class References:
    """The references trained so far this run, by key: their weights kept in `folder`, and
    each one's rounding floor once a case needed it."""

    folder: Path
    weights: dict[str, Path] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    trained: int = 0  # reference and rounding runs started (what the sharing saves shows)

    @classmethod
    @contextlib.contextmanager
    def kept(cls, beside: Path | None = None) -> Iterator[References]:
        """For one run; the folder is removed when the run ends (an exception or an
        interrupt included)."""
        folder = Path(tempfile.mkdtemp(prefix="stratbench-references-", dir=beside))
        try:
            yield cls(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def check(self, row: ResultRow, case: Case, case_file: Path, workdir: Path,
              weights: str) -> None:
        """The largest weight difference from the case's reference, in the row and its
        ``extra``."""
        ref = self.reference(case, case_file, workdir)
        if isinstance(ref, str):
            row.extra["reference_error"] = ref
            return
        row.max_weight_diff = max_weight_diff(weights, ref)
        floor = None if row.max_weight_diff <= WEIGHT_TOLERANCE else self.floor(
            case, case_file, workdir)
        if floor is not None:
            row.extra["rounding_floor"] = floor
        row.extra["weights_match"] = weights_agree(row.max_weight_diff, floor)

    def reference(self, case: Case, case_file: Path, workdir: Path) -> Path | str:
        """The weights of one device trained on the case's global batch, kept for the run's
        later cases; or why that run failed."""
        key = reference_key(case)
        if key not in self.weights:
            got = self._run(case, case_file, workdir, "reference")
            if isinstance(got, str):
                return got
            kept = self.folder / f"{len(self.weights)}.npz"
            shutil.move(got, kept)
            self.weights[key] = kept
        return self.weights[key]

    def floor(self, case: Case, case_file: Path, workdir: Path) -> float | None:
        """How far one device alone ends from the reference when trained again on another
        thread count (float32 sums in another order): measured once a run, where a case
        ends beyond the tolerance; None where either run failed."""
        key = reference_key(case)
        if key not in self.floors:
            ref = self.reference(case, case_file, workdir)
            again = self._run(case, case_file, workdir, "rounding")
            if isinstance(ref, str) or isinstance(again, str):
                return None
            self.floors[key] = max_weight_diff(again, ref)
        return self.floors[key]

    def _run(self, case: Case, case_file: Path, workdir: Path, role: str) -> Path | str:
        """One device on the global batch in a fresh process: its weights' file, or why not."""
        self.trained += 1
        group = run_group([layout.reference(case, case_file, role)], workdir / role,
                          case.timeout_s)
        report = group.outcomes[0].report
        path = report.get("weights") if report else None
        if group.status != "ok" or not path:
            return group.reason or f"the {role} run wrote no weights"
        return Path(path)


def max_weight_diff(a_path: str | Path, b_path: str | Path) -> float:
    """The largest absolute difference between two saved weight sets, name by name."""
    with np.load(a_path, allow_pickle=False) as a, np.load(b_path, allow_pickle=False) as b:
        if sorted(a.files) != sorted(b.files):
            return math.inf
        return max(float(np.max(np.abs(a[k] - b[k]))) if a[k].size else 0.0 for k in a.files)
