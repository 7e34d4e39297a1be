"""The fault table of docs/FAULTS.md: each line is one of these tests (or names the test
elsewhere that covers it)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import warnings

import pandas as pd
import pytest

from harness.core.case import Case
from harness.run import execute as execute_module
from harness.run.execute import execute
from results import CorruptResultWarning, ResultRow, ResultsStore, load
from results.store import StoreError


def _case(strategy: str, **options) -> Case:
    return Case(framework="torch", strategy=strategy, workload="mlp:S", cluster="local",
                replicas=2, steps=40, warmup=1, repeats=1, timeout_s=20,
                per_replica_batch=16, options={"ps_shards": 2, **options})


@pytest.mark.heavy
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "parameter_server",
                                      "parameter_server_async"])
def test_a_worker_killed_mid_step_ends_failed_and_the_run_goes_on(tmp_path, strategy):
    store = ResultsStore(tmp_path)
    before = store.write_case(ResultRow(run_id="r", case_id="earlier", framework="torch",
                                        strategy="ddp", workload="mlp", size="S",
                                        cluster="local", replicas=2, status="ok"))
    content = before.read_bytes()
    # 60 s: the kill ends it within seconds, and a loaded machine's start never reaches it
    killed = dataclasses.replace(_case(strategy, die_at_step=3, die_rank=1), timeout_s=60)
    after = Case(**{**_case("single_device").__dict__, "replicas": 1, "steps": 3})
    rows = execute([killed, after], store, "r")
    assert rows[0].status == "failed", rows[0].reason
    assert "worker1" in rows[0].reason or "worker0" in rows[0].reason
    logs = tmp_path / rows[0].extra["logs"]  # what every process printed, kept for the post-mortem
    assert {"worker0", "worker1"} <= {p.stem.rsplit("_", 1)[-1] for p in logs.glob("*.log")}
    assert rows[1].status == "ok" and "logs" not in rows[1].extra
    assert before.read_bytes() == content
    assert sorted(load(tmp_path).status) == ["failed", "ok", "ok"]


@pytest.mark.heavy  # waits on its deadline
def test_a_frozen_peer_times_out_and_its_tree_is_killed(tmp_path):
    (row,) = execute([_case("ddp", hang_at_step=2, die_rank=1)], ResultsStore(tmp_path), "r")
    assert row.status == "timeout" and "timed out after 20 s" in row.reason


def test_a_port_taken_by_someone_else_is_retried_on_other_ports(tmp_path, monkeypatch):
    """Launchers that still need TCP ports (TF's TF_CONFIG) can lose one to another program
    between choosing and binding it: such a start is retried, other failures are not."""
    from harness.launch.processes import GroupResult

    clash = GroupResult("failed", "worker0 exited with code 1: [Errno 98] Address already "
                        "in use", [], 0.1)
    fine = GroupResult("ok", "", [], 0.1)
    other = GroupResult("failed", "worker0 exited with code 1: ValueError: bad", [], 0.1)
    for script, expected, attempts in (([clash, fine], "ok", 2), ([other, fine], "failed", 1),
                                       ([clash] * 5, "failed", 3)):
        calls = []

        def fake(specs, workdir, timeout, script=script, calls=calls):
            calls.append(workdir)
            return script[len(calls) - 1]

        monkeypatch.setattr(execute_module, "run_group", fake)
        monkeypatch.setattr(execute_module.layout, "processes", lambda *a: [])
        group = execute_module._run_repeat(_case("ddp"), tmp_path / "c.json", tmp_path / "r0",
                                           None)
        assert (group.status, len(calls)) == (expected, attempts)
        assert len(set(calls)) == attempts  # each attempt in its own folder


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "parameter_server", "comm"])
def test_collectives_listen_on_loopback_only(tmp_path, strategy):
    """torch cases meet through a rendezvous file and bind gloo and TensorPipe to `lo`: no
    socket of theirs listens on every interface."""
    import threading
    import time

    import psutil

    from harness.launch import placement as layout
    from harness.launch.processes import run_group

    options = {"sizes": [1024, 2**20], "ps_shards": 2} if strategy == "comm" else {}
    # 100 steps: a second or more of training with every socket open, for a 50 ms watcher
    for case in (Case(**{**_case(strategy).__dict__, "steps": 100, **(
            {"options": options} if options else {})}),):
        case_file = tmp_path / f"{case.strategy}.json"
        case_file.write_text(case.to_json())
        seen: set[str] = set()
        done = threading.Event()

        def watch(seen=seen, done=done):
            while not done.is_set():
                for proc in psutil.Process().children(recursive=True):  # ours only
                    try:
                        seen.update(c.laddr.ip for c in proc.net_connections(kind="inet")
                                    if c.status == psutil.CONN_LISTEN)
                    except psutil.Error:
                        continue
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        group = run_group(layout.processes(case, case_file), tmp_path / case.strategy, 120)
        done.set()
        watcher.join()
        assert group.status == "ok", group.reason
        assert seen, "the watcher saw no listening socket at all"
        assert seen <= {"127.0.0.1"}, (case.strategy, seen)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_a_full_results_directory_is_a_clear_error_with_no_partial_file(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        store = ResultsStore(full)
        store.write_case(ResultRow(run_id="r", case_id="small", framework="torch",
                                   strategy="ddp", workload="mlp", size="S", cluster="local",
                                   replicas=2, status="ok"))
        big = pd.DataFrame({"step": range(200_000), "step_time_s": [0.1] * 200_000})
        with pytest.raises(StoreError, match="cannot write results"):
            store.write_case(ResultRow(run_id="r", case_id="big", framework="torch",
                                       strategy="ddp", workload="mlp", size="S",
                                       cluster="local", replicas=2, status="ok"), steps=big)
        assert not list(full.rglob(".*.tmp")), "a failed write must not leave its temporary"
        with warnings.catch_warnings():
            warnings.simplefilter("error", CorruptResultWarning)
            assert load(full)["case_id"].tolist() == ["small"]
    finally:
        subprocess.run(["umount", str(full)], check=True)
