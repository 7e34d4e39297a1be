"""The results store: round trip, atomic writes, corrupt files, concurrent writers."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results import CorruptResultWarning, ResultRow, ResultsStore, load, load_steps
from results.schema import COLUMN_NAMES, SCHEMA_VERSION
from results.store import new_run_id, safe_name


def make_row(run_id: str, case_id: str, **kw) -> ResultRow:
    base = dict(run_id=run_id, case_id=case_id, framework="torch", strategy="ddp",
                workload="mlp", size="S", cluster="local", replicas=2, status="ok")
    base.update(kw)
    return ResultRow(**base)


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(max_size=40)


@settings(max_examples=40, deadline=None)
@given(median=finite, reason=text, replicas=st.integers(1, 10_000),
       status=st.sampled_from(["ok", "failed", "timeout", "unavailable"]),
       extra=st.dictionaries(st.text(min_size=1, max_size=8), st.integers() | text, max_size=4))
def test_row_round_trips_through_parquet(tmp_path_factory, median, reason, replicas, status,
                                         extra):
    root = tmp_path_factory.mktemp("rt")
    store = ResultsStore(root)
    run_id = store.start_run({"host": "test"})
    row = make_row(run_id, "case/a:1", step_time_median_s=median, reason=reason,
                   replicas=replicas, status=status, extra=extra)
    store.write_case(row)
    frame = load(root)
    assert list(frame.columns[: len(COLUMN_NAMES)]) == list(COLUMN_NAMES)
    back = ResultRow.from_dict(frame.iloc[0].to_dict())
    for name, value in row.to_dict().items():
        got = getattr(back, name)
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got), name
        else:
            assert got == value, name
    assert back.schema_version == SCHEMA_VERSION


def test_steps_table_is_stored_beside_the_row(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = store.start_run({})
    steps = pd.DataFrame({"repeat": [0, 0, 1], "step": [0, 1, 0], "step_time_s": [.1, .2, .3]})
    store.write_case(make_row(run_id, "c1"), steps=steps)
    loaded = load_steps(tmp_path)
    assert loaded["step_time_s"].tolist() == [.1, .2, .3]
    assert set(loaded["case_id"]) == {"c1"}
    assert store.finished_case_ids(run_id) == {"c1"}


def test_bad_status_is_refused():
    with pytest.raises(ValueError, match="status"):
        make_row("r", "c", status="fine")


def test_corrupt_and_truncated_files_are_skipped_with_a_warning(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = store.start_run({})
    good = store.write_case(make_row(run_id, "good"))
    bad = store.write_case(make_row(run_id, "bad"))
    bad.write_bytes(bad.read_bytes()[: len(bad.read_bytes()) // 2])  # truncated
    (good.parent / "garbage.parquet").write_bytes(b"not parquet at all")
    with pytest.warns(CorruptResultWarning) as caught:
        frame = load(tmp_path)
    assert frame["case_id"].tolist() == ["good"]
    assert len(caught) == 2
    assert any("garbage.parquet" in str(w.message) for w in caught)


def test_unreadable_manifest_is_skipped_with_a_warning(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = store.start_run({"a": 1})
    assert store.manifest(run_id)["a"] == 1
    (store.run_dir(run_id) / "manifest.json").write_text("{truncated")
    with pytest.warns(CorruptResultWarning):
        assert store.manifest(run_id) is None


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from results.store import write_atomic
    def slow(fh):
        fh.write(b"PAR1" + b"x" * 1000)
        fh.flush()
        print("ready", flush=True)
        time.sleep(60)
    write_atomic(Path(sys.argv[1]), slow)
""")


def test_writer_killed_mid_write_leaves_no_visible_partial_file(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = store.start_run({})
    target = store.write_case(make_row(run_id, "victim", step_time_median_s=1.5))
    before = target.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    visible = sorted(p.name for p in target.parent.iterdir() if not p.name.startswith("."))
    assert visible == ["victim.parquet"]
    assert target.read_bytes() == before  # the old row, whole
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = load(tmp_path)
    assert frame["step_time_median_s"].tolist() == [1.5]
    hidden = [p for p in target.parent.iterdir() if p.name.startswith(".")]
    assert hidden, "the dead writer's temporary should be hidden, not removed by magic"


def _write_many(root: str, writer: int, count: int) -> None:
    store = ResultsStore(root)
    run_id = "shared-run"
    for i in range(count):
        store.write_case(make_row(run_id, f"w{writer}-c{i}", step_time_median_s=float(i)),
                         steps=pd.DataFrame({"step": range(50), "step_time_s": [0.1] * 50}))
        store.write_case(make_row(run_id, "contended", step_time_median_s=float(writer)))


def test_two_concurrent_writers_do_not_clobber_each_other(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), w, 40)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no corrupt file may appear
        frame = load(tmp_path)
    ids = set(frame["case_id"])
    assert ids == {f"w{w}-c{i}" for w in (1, 2) for i in range(40)} | {"contended"}
    assert len(frame) == 81
    assert frame.loc[frame.case_id == "contended", "step_time_median_s"].iloc[0] in (1.0, 2.0)
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def test_writer_killed_at_random_moments_never_leaves_a_corrupt_visible_file(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    for delay in (0.05, 0.3, 0.6):  # after its first file: a loaded machine starts it late
        before = len(list(tmp_path.glob("runs/*/*/*.parquet")))
        proc = ctx.Process(target=_write_many, args=(str(tmp_path), 9, 10_000))
        proc.start()
        deadline = time.monotonic() + 120
        while (len(list(tmp_path.glob("runs/*/*/*.parquet"))) <= before
               and time.monotonic() < deadline and proc.is_alive()):
            time.sleep(0.02)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = load(tmp_path)
    assert len(frame) >= 1


def test_read_only_results_directory_gives_a_clear_error(tmp_path):
    from results.store import StoreError

    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        if os.geteuid() == 0:
            pytest.skip("root can write into read-only directories")
        with pytest.raises(StoreError, match="not writable"):
            ResultsStore(root).check_writable()
    finally:
        root.chmod(0o700)


def test_a_file_in_place_of_the_results_directory_gives_a_clear_error(tmp_path):
    from results.store import StoreError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="not writable"):
        ResultsStore(blocker).check_writable()
    with pytest.raises(StoreError, match="cannot write results"):
        ResultsStore(blocker).write_case(make_row("r", "c"))


@settings(max_examples=60, deadline=None)
@given(start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2100, 1, 1)),
       later_by_us=st.integers(1, 3_000_000))
def test_run_ids_sort_in_the_order_runs_started_even_within_one_second(start, later_by_us):
    first = start.replace(tzinfo=timezone.utc)
    earlier = new_run_id(first)
    later = new_run_id(first + timedelta(microseconds=later_by_us))
    assert sorted([later, earlier]) == [earlier, later]
    assert safe_name(earlier) == earlier  # ids are directory names: nothing is rewritten


def test_a_failed_cases_process_output_is_kept_beside_its_row(tmp_path):
    """Each process's output (its last LOG_TAIL_BYTES) under runs/<run>/logs/<case>/, named
    by attempt and process; nothing where the case left none."""
    from results.store import LOG_TAIL_BYTES

    work = tmp_path / "scratch"
    (work / "r0-a0").mkdir(parents=True)
    (work / "r0-a0" / "worker3.stderr").write_bytes(b"x" * LOG_TAIL_BYTES + b"Traceback: boom\n")
    (work / "r0-a0" / "worker0.json").write_text("{}")
    store = ResultsStore(tmp_path / "results")
    folder = store.keep_logs("run1", "case/1", work)
    assert folder is not None and folder.parent == store.run_dir("run1") / "logs"
    (log,) = folder.iterdir()
    assert log.name == "r0-a0_worker3.log"
    assert log.read_bytes().endswith(b"Traceback: boom\n")
    assert len(log.read_bytes()) == LOG_TAIL_BYTES
    assert store.keep_logs("run1", "quiet", tmp_path / "empty-scratch") is None
