"""Parent side of TensorFlow cases: processes and TF_CONFIG per strategy (issue #4)."""

from __future__ import annotations

from pathlib import Path

from harness.launch.processes import ProcessSpec
from harness.plan import Case


def tf_processes(case: Case, case_file: Path, host: str) -> list[ProcessSpec]:
    raise NotImplementedError("TensorFlow runners land with issue #4")
