"""Parquet files on disk, one per finished case, written so that nothing is ever half there.

Layout under the results directory (one folder per run, so runs never share a file):

    runs/<run_id>/manifest.json           the environment manifest of the run
    runs/<run_id>/cases/<case_id>.parquet  one result row (schema in results/schema.py)
    runs/<run_id>/<table>/<name>.parquet   other tables: per-step times, comm sweeps, ...

Every file is written to a hidden temporary name in its final folder, flushed, fsynced and
renamed (atomic on POSIX), so a writer killed at any instant leaves either the old file or
the new one, and readers never see a partial file. Unreadable files are skipped with a
warning, so one bad file never costs a report.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from results.schema import COLUMN_NAMES, COLUMNS, SCHEMA_VERSION, ResultRow

CASES = "cases"
STEPS = "steps"
LOGS = "logs"
LOG_TAIL_BYTES = 64 * 1024  # of each process's output a failed case keeps
MANIFEST = "manifest.json"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._=+,@-]+")
_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
                "bool": pa.bool_(), "json": pa.string()}
_META_VERSION = b"stratbench.schema_version"


class CorruptResultWarning(UserWarning):
    """A results file could not be read; it was skipped."""


class StoreError(OSError):
    """The results directory cannot be written (read-only, full, not a directory)."""


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique across concurrent processes.

    The microseconds come before the random suffix, so two runs started in the same second
    still sort in the order they started ("latest run" means the last one, not a coin toss).
    """
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{now:%f}-{secrets.token_hex(3)}"


def safe_name(name: str) -> str:
    """A case id as a file name: readable, no path separators, no surprises."""
    cleaned = _SAFE_NAME.sub("_", name).strip("._")
    if not cleaned:
        raise ValueError(f"name {name!r} has no usable characters")
    return cleaned[:200]


def write_atomic(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` through a hidden temporary file, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _row_table(row: ResultRow) -> pa.Table:
    data = row.to_dict()
    arrays = {}
    for col in COLUMNS:
        value = data[col.name]
        if col.dtype == "json":
            value = json.dumps(value, sort_keys=True, default=str)
        arrays[col.name] = pa.array([value], type=_ARROW_TYPES[col.dtype])
    table = pa.table(arrays)
    return table.replace_schema_metadata({_META_VERSION: str(SCHEMA_VERSION).encode()})


def _write_parquet(path: Path, table: pa.Table) -> None:
    write_atomic(path, lambda fh: pq.write_table(table, fh))


class ResultsStore:
    """One results directory. Safe to share between processes writing at the same time."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / safe_name(run_id)

    def check_writable(self) -> None:
        """Fail early, with a message a user can act on, before any case runs."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".write-probe.{os.getpid()}.{secrets.token_hex(3)}"
            with open(probe, "wb") as fh:
                fh.write(b"x")
                fh.flush()
                os.fsync(fh.fileno())
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"results directory {self.root} is not writable: "
                             f"{exc.strerror or exc}") from exc

    def start_run(self, manifest: dict[str, Any], run_id: str | None = None) -> str:
        """Create a run folder holding its manifest; returns the run id."""
        run_id = run_id or new_run_id()
        self.write_manifest(run_id, manifest)
        return run_id

    def write_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        body = json.dumps({"run_id": run_id, **manifest}, indent=2, sort_keys=True,
                          default=str).encode()
        def write(fh: IO[bytes]) -> None:
            fh.write(body)

        self._guarded(lambda: write_atomic(self.run_dir(run_id) / MANIFEST, write))

    def write_case(self, row: ResultRow, steps: pd.DataFrame | None = None) -> Path:
        """Store one case's row (and optionally its per-step table). Steps go first, so a
        visible row always has its steps."""
        name = safe_name(row.case_id) + ".parquet"
        if steps is not None:
            self.write_table(row.run_id, STEPS, row.case_id,
                             steps.assign(case_id=row.case_id))
        path = self.run_dir(row.run_id) / CASES / name
        self._guarded(lambda: _write_parquet(path, _row_table(row)))
        return path

    def write_table(self, run_id: str, table: str, name: str, frame: pd.DataFrame) -> Path:
        path = self.run_dir(run_id) / safe_name(table) / (safe_name(name) + ".parquet")
        arrow = pa.Table.from_pandas(frame, preserve_index=False)
        self._guarded(lambda: _write_parquet(path, arrow))
        return path

    def keep_logs(self, run_id: str, case_id: str, workdir: Path) -> Path | None:
        """A failed case's process outputs (``*.stderr`` under its scratch ``workdir``, the
        last LOG_TAIL_BYTES of each) kept under ``runs/<run>/logs/<case>/``: its row holds
        one line, and the scratch folder goes when the case ends. None where there were
        none."""
        found = sorted(workdir.rglob("*.stderr"))
        if not found:
            return None
        folder = self.run_dir(run_id) / LOGS / safe_name(case_id)

        def keep() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            for path in found:
                with open(path, "rb") as fh:
                    fh.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
                    tail = fh.read()
                name = "_".join(path.relative_to(workdir).with_suffix(".log").parts)
                (folder / safe_name(name)).write_bytes(tail)

        self._guarded(keep)
        return folder

    def finished_case_ids(self, run_id: str) -> set[str]:
        """Case ids with a readable row: what `--resume` must not run again."""
        frame = _load_cases(self.run_dir(run_id) / CASES)
        return set(frame["case_id"]) if not frame.empty else set()

    def run_ids(self) -> list[str]:
        runs = self.root / "runs"
        return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []

    def manifest(self, run_id: str) -> dict[str, Any] | None:
        path = self.run_dir(run_id) / MANIFEST
        try:
            data = json.loads(path.read_text())  # the document start_run wrote
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping unreadable manifest {path}: {exc}",
                          CorruptResultWarning, stacklevel=2)
            return None
        return data

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as exc:
            raise StoreError(f"cannot write results under {self.root}: "
                             f"{exc.strerror or exc}") from exc


def _parquet_files(folder: Path) -> Iterator[Path]:
    if folder.is_dir():
        yield from sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def _read(path: Path) -> pa.Table | None:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException, ValueError) as exc:
        warnings.warn(f"skipping unreadable results file {path}: {exc}",
                      CorruptResultWarning, stacklevel=3)
        return None


def _empty_cases() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="object") for name in COLUMN_NAMES})


def _load_cases(folder: Path) -> pd.DataFrame:
    frames = []
    for path in _parquet_files(folder):
        table = _read(path)
        if table is not None:
            frames.append(table.to_pandas())
    if not frames:
        return _empty_cases()
    frame = pd.concat(frames, ignore_index=True)
    for col in COLUMNS:  # files from older schema versions lack newer columns
        if col.name not in frame.columns:
            frame[col.name] = None
    frame["extra"] = [json.loads(x) if isinstance(x, str) and x else {} for x in frame["extra"]]
    return frame[list(COLUMN_NAMES) + [c for c in frame.columns if c not in COLUMN_NAMES]]


def load(root: str | os.PathLike[str]) -> pd.DataFrame:
    """Every result row of every run under `root`, as one DataFrame (schema columns first)."""
    runs = Path(root) / "runs"
    # a run without case files (a `comm` sweep's) adds nothing: skipped before any frame is built
    frames = [_load_cases(run / CASES) for run in sorted(runs.iterdir())
              if any(_parquet_files(run / CASES))] if runs.is_dir() else []
    frames = [f for f in frames if not f.empty]
    if not frames:
        return _empty_cases()
    return pd.concat(frames, ignore_index=True)


def load_table(root: str | os.PathLike[str], table: str) -> pd.DataFrame:
    """One auxiliary table across runs, with `run_id` and `name` (the file stem) added."""
    runs = Path(root) / "runs"
    frames = []
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        for path in _parquet_files(run / safe_name(table)):
            arrow = _read(path)
            if arrow is not None:
                frame = arrow.to_pandas()
                # tables that carry their own run_id (e.g. validation: the run validated)
                # keep it; the folder's run is then `stored_in_run`
                if "name" not in frame:
                    frame.insert(0, "name", path.stem)
                key = "stored_in_run" if "run_id" in frame else "run_id"
                frame.insert(0, key, run.name)
                frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_steps(root: str | os.PathLike[str]) -> pd.DataFrame:
    """Per-step tables across runs; `name` is the case id's file stem."""
    return load_table(root, STEPS)


def load_table_safe(root: Any, name: str) -> pd.DataFrame:
    """``load_table``, tolerating tables that already carry both run_id and name columns."""
    try:
        return load_table(root, name)
    except ValueError:
        frames = []
        runs = Path(root) / "runs"
        for run in sorted(runs.iterdir()) if runs.is_dir() else []:
            for path in sorted((run / safe_name(name)).glob("*.parquet")):
                if path.name.startswith("."):
                    continue
                try:
                    frame = pq.read_table(path).to_pandas()
                except Exception:
                    continue
                for column, value in (("run_id", run.name), ("name", path.stem)):
                    if column not in frame:
                        frame[column] = value
                frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def merge_into(sources: list[Path], into: Path) -> tuple[list[str], list[str]]:
    """Every run of ``sources`` copied into ``into`` (run folders whole: manifest, rows,
    tables), so that history from several machines or nights lives in one directory; each
    run keeps its own manifest, so its environment goes with it. A run already there with the
    same files is left as it is; one whose files differ is a StoreError naming it, found
    before anything is copied. Each run lands by one rename (a killed merge leaves whole runs
    only). Returns (runs copied, runs already there)."""
    import filecmp
    import shutil

    plan: list[tuple[Path, Path]] = []
    present: list[str] = []
    for source in sources:
        runs = source / "runs"
        if not runs.is_dir():
            raise StoreError(f"no results under {source} (no runs/ folder)")
        for run in sorted(p for p in runs.iterdir() if p.is_dir()):
            target = into / "runs" / run.name
            if any(t == target for _, t in plan):
                continue
            if target.exists():
                compared = filecmp.dircmp(run, target)
                if _differs(compared):
                    raise StoreError(f"run {run.name} is in {source} and in {into} with "
                                     f"different files: not merged")
                present.append(run.name)
                continue
            plan.append((run, target))
    copied = []
    try:
        (into / "runs").mkdir(parents=True, exist_ok=True)
        for run, target in plan:
            tmp = target.parent / f".{target.name}.{secrets.token_hex(3)}.tmp"
            shutil.copytree(run, tmp)
            os.rename(tmp, target)
            copied.append(target.name)
    except OSError as exc:
        raise StoreError(f"cannot merge into {into}: {exc.strerror or exc}") from exc
    return copied, present


def _differs(compared: Any) -> bool:
    if compared.left_only or compared.right_only or compared.diff_files or compared.funny_files:
        return True
    return any(_differs(sub) for sub in compared.subdirs.values())
