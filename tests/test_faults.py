"""The fault table of docs/FAULTS.md: each line is one of these tests (or names the test
elsewhere that covers it)."""

from __future__ import annotations

import os
import socket
import subprocess
import warnings

import pandas as pd
import pytest

from harness import execute as execute_module
from harness.execute import execute
from harness.plan import Case
from results import CorruptResultWarning, ResultRow, ResultsStore, load
from results.store import StoreError

pytestmark = pytest.mark.heavy


def _case(strategy: str, **options) -> Case:
    return Case(framework="torch", strategy=strategy, workload="mlp:S", cluster="local",
                replicas=2, steps=40, warmup=1, repeats=1, timeout_s=20,
                per_replica_batch=16, options={"ps_shards": 2, **options})


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "parameter_server",
                                      "parameter_server_async"])
def test_a_worker_killed_mid_step_ends_failed_and_the_run_goes_on(tmp_path, strategy):
    store = ResultsStore(tmp_path)
    before = store.write_case(ResultRow(run_id="r", case_id="earlier", framework="torch",
                                        strategy="ddp", workload="mlp", size="S",
                                        cluster="local", replicas=2, status="ok"))
    content = before.read_bytes()
    killed = _case(strategy, die_at_step=3, die_rank=1)
    after = Case(**{**_case("single_device").__dict__, "replicas": 1, "steps": 3})
    rows = execute([killed, after], store, "r")
    assert rows[0].status == "failed", rows[0].reason
    assert "worker1" in rows[0].reason or "worker0" in rows[0].reason
    assert rows[1].status == "ok"
    assert before.read_bytes() == content
    assert sorted(load(tmp_path).status) == ["failed", "ok", "ok"]


def test_a_frozen_peer_times_out_and_its_tree_is_killed(tmp_path):
    (row,) = execute([_case("ddp", hang_at_step=2, die_rank=1)], ResultsStore(tmp_path), "r")
    assert row.status == "timeout" and "timed out after 20 s" in row.reason


def test_a_port_taken_by_someone_else_is_retried_on_other_ports(tmp_path, monkeypatch):
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real = execute_module.layout.free_ports
    calls = []

    def first_one_taken(count: int, host: str = "127.0.0.1") -> list[int]:
        calls.append(count)
        return [taken] if len(calls) == 1 else real(count, host)

    monkeypatch.setattr(execute_module.layout, "free_ports", first_one_taken)
    try:
        case = _case("ddp")
        case = Case(**{**case.__dict__, "steps": 3})
        (row,) = execute([case], ResultsStore(tmp_path), "r")
    finally:
        squatter.close()
    assert row.status == "ok", row.reason
    assert len(calls) >= 2


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
