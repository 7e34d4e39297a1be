"""TensorFlow strategies run for real, end to end, through the path `stratbench run` takes.

The layout tests are cheap (no TensorFlow in this process); the rest start real processes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import threading
import time
from pathlib import Path

import psutil
import pytest
from procs import case_processes

from harness.core.case import Case
from harness.core.strategies import strategies
from harness.launch import netns
from harness.launch.netns import Cluster, Host
from harness.launch.tf_placement import tf_processes
from harness.run import environment
from harness.run.execute import execute, unavailable_reason
from harness.run.plan import plan, resolve_workloads
from results import ResultsStore, load, load_steps
from workloads import parse_workload

STEPS, WARMUP = 3, 1


def _cases(names: list[str], workload: str = "mlp:S", **options) -> list[Case]:
    cases = plan(strategies("tf", names), resolve_workloads([workload]), "local", steps=STEPS,
                 warmup=WARMUP, repeats=1, timeout_s=180)
    return [dataclasses.replace(c, options={**c.options, **options}) for c in cases]


def _case(strategy: str, replicas: int = 2, **options) -> Case:
    return Case(framework="tf", strategy=strategy, workload="mlp:S", cluster="local",
                replicas=replicas, steps=50, warmup=1, repeats=1, timeout_s=90,
                per_replica_batch=16, options=options)


@pytest.fixture
def store(tmp_path):
    return ResultsStore(tmp_path)


# --- layout (parent side, no TensorFlow) -------------------------------------------------

def _config(spec) -> dict:
    return json.loads(spec.env["TF_CONFIG"])


def test_single_process_strategies_are_one_process_without_a_cluster():
    for name in ("one_device", "mirrored", "central_storage"):
        (spec,) = tf_processes(_case(name), Path("case.json"))
        assert (spec.role, spec.index, spec.must_finish) == ("worker", 0, True)
        assert "TF_CONFIG" not in spec.env


def test_multi_worker_mirrored_is_one_worker_process_per_replica_on_one_cluster():
    specs = tf_processes(_case("multi_worker_mirrored", replicas=3), Path("c.json"))
    configs = [_config(s) for s in specs]
    assert [s.name for s in specs] == ["worker0", "worker1", "worker2"]
    assert all(s.must_finish for s in specs)
    workers = configs[0]["cluster"]["worker"]
    assert len(set(workers)) == 3 and all(w.startswith("127.0.0.1:") for w in workers)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)


def test_parameter_server_runs_servers_that_the_chief_outlives():
    specs = tf_processes(_case("parameter_server", ps_shards=2), Path("c.json"))
    assert [s.name for s in specs] == ["ps0", "ps1", "worker0", "worker1", "chief0"]
    assert [s.must_finish for s in specs] == [False, False, False, False, True]
    cluster = _config(specs[0])["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "worker": 2, "ps": 2}
    addresses = [a for v in cluster.values() for a in v]
    assert len(set(addresses)) == 5
    for spec in specs:
        task = _config(spec)["task"]
        assert (task["type"], task["index"]) == (spec.role, spec.index)
        assert spec.argv[-4:] == ("--role", spec.role, "--index", str(spec.index))


def test_tpu_is_one_process_and_unavailable_without_any_sign_of_a_tpu(monkeypatch):
    (spec,) = tf_processes(_case("tpu", replicas=1), Path("c.json"))
    assert spec.role == "worker" and "TF_CONFIG" not in spec.env
    for var in environment.TPU_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(environment, "TPU_DEVICE_GLOBS", ())
    reason = unavailable_reason(_case("tpu"))
    assert reason and reason.startswith("no TPU on this machine") and "TPU_NAME" in reason
    monkeypatch.setenv("TPU_NAME", "my-tpu")  # advertised: the runner gets to try it
    assert unavailable_reason(_case("tpu")) is None


def test_on_emulated_hosts_every_task_runs_in_its_host_and_listens_on_its_address():
    hosts = [Host(i, f"sbn-t-h{i}", f"10.77.0.{i + 2}", f"sbn-t-v{i}") for i in range(3)]
    cluster = Cluster("t", 100e6, hosts, "sbn-t-sw")
    specs = tf_processes(_case("parameter_server", replicas=3, ps_shards=2), Path("c.json"),
                         cluster)
    assert [s.name for s in specs] == ["ps0", "ps1", "worker0", "worker1", "worker2", "chief0"]
    config = _config(specs[0])["cluster"]
    order = [*config["ps"], *config["worker"], *config["chief"]]
    for j, spec in enumerate(specs):
        host = hosts[j % 3]
        assert spec.argv[:4] == ("ip", "netns", "exec", host.namespace)
        assert order[j].startswith(host.address + ":")
        assert spec.env["STRATBENCH_HOST"] == host.address


# --- real runs ---------------------------------------------------------------------------

@pytest.mark.long
def test_every_tf_strategy_ends_in_a_row_with_timing_and_correctness(store, tmp_path):
    rows = execute(_cases(["all"]), store, "r1")
    by = {r.strategy: r for r in rows}
    assert set(by) == {"one_device", "mirrored", "central_storage", "multi_worker_mirrored",
                       "parameter_server", "tpu"}
    assert by["tpu"].status == "unavailable" and "TPU" in by["tpu"].reason
    for name, row in by.items():
        if name == "tpu":
            continue
        assert row.status == "ok", (name, row.reason)
        assert row.step_time_ci95_low_s <= row.step_time_median_s <= row.step_time_ci95_high_s
        assert 0 < row.step_time_median_s < 5
        assert row.throughput_samples_s > 0 and row.peak_rss_bytes > 0
        assert not math.isnan(row.scaling_efficiency), name
        assert row.extra["loss_decreased"] is True, name
        assert row.extra["threads_per_process"] >= 1
    assert by["one_device"].extra["cpu_s_per_step"] > 0  # what oversold replicas share
    # synchronous: the same weights as one device trained on the global batch
    for name in ("mirrored", "central_storage", "multi_worker_mirrored"):
        assert by[name].max_weight_diff < 1e-4, (name, by[name].max_weight_diff)
        assert by[name].extra["weights_match"] is True
        assert by[name].global_batch == 2 * by["one_device"].global_batch
        extra = by[name].extra  # the overlap probe: its parts timed alone, weights untouched
        assert extra["compute_only_s"] > 0 and extra["exchange_only_s"] > 0, name
        assert math.isfinite(extra["measured_overlap"]), name
    assert math.isnan(by["parameter_server"].max_weight_diff)  # asynchronous: not compared
    ps = by["parameter_server"].extra
    assert ps["bytes_sent_method"] == "measured: bytes pushed"
    # compute told apart by difference (one pass, two passes), the exchange pushing zeros
    assert ps["compute_only_s"] >= 0 and ps["exchange_only_s"] > 0
    assert ps["measured_overlap"] is None or math.isfinite(ps["measured_overlap"])
    frame = load(tmp_path)
    assert len(frame) == 6
    steps = load_steps(tmp_path)
    for name in ("one_device", "multi_worker_mirrored", "parameter_server"):
        assert len(steps[steps.case_id == by[name].case_id]) == STEPS  # warm-up excluded
    assert not case_processes(), "a case left processes behind"


@pytest.mark.long
def test_recsys_parameter_server_pushes_only_the_touched_embedding_rows(store):
    (row,) = execute(_cases(["parameter_server"], "recsys:S"), store, "r2")
    assert row.status == "ok", row.reason
    dense = parse_workload("recsys:S").grad_bytes
    assert 0 < row.bytes_sent_per_step < 0.2 * dense, (row.bytes_sent_per_step, dense)
    assert row.extra["loss_decreased"] is True
    assert not case_processes()


@pytest.mark.heavy
def test_a_killed_worker_ends_as_a_failed_row_with_the_error(store, tmp_path):
    crash = _case("multi_worker_mirrored", die_at_step=2, die_rank=1)
    (row,) = execute([crash], store, "r3")
    assert row.status == "failed"
    assert "worker1 exited with code -9" in row.reason
    assert "InjectedFaultError" in row.reason
    assert set(load(tmp_path).status) == {"failed"}
    assert not case_processes()


@pytest.mark.heavy
def test_a_frozen_peer_fails_the_case_through_tf_failure_detection_not_the_deadline(store):
    # 12 s: long enough that a loaded machine's first step (tracing) never trips it
    hang = _case("multi_worker_mirrored", hang_at_step=3, die_rank=1, collective_timeout_s=12)
    (row,) = execute([hang], store, "r4")
    assert row.status == "failed", row.reason  # the survivor gave up; no 90 s timeout
    # it raised (code 1); TF may still crash it afterwards (SIGSEGV seen in CI), never our kill
    assert re.match(r"worker0 exited with code (1|-11): ", row.reason), row.reason
    # whichever of TF's two detectors fires first: the collective's own timeout (raised as
    # DeadlineExceededError, or only logged as DEADLINE_EXCEEDED where TF crashes before it
    # raises), or the coordination service missing the frozen task's heartbeats
    assert ("Collective has timed out" in row.reason
            or "stopped sending heartbeats" in row.reason), row.reason
    assert not case_processes()


def test_an_advertised_tpu_that_is_not_there_ends_as_a_failed_row_that_names_it(
        store, monkeypatch):
    monkeypatch.setenv("TPU_NAME", "stratbench-no-such-tpu")  # the workers inherit it
    (row,) = execute([_case("tpu", replicas=1)], store, "r5")
    assert row.status == "failed"
    assert "TPUUnreachableError: TPU 'stratbench-no-such-tpu'" in row.reason, row.reason
    assert not case_processes()


def _listening_in_namespace_of(pid: int) -> set[tuple[str, int]]:
    """(local address hex, port) of every TCP listener in the network namespace of `pid`."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                address, port = fields[1].split(":")
                found.add((address, int(port, 16)))
    return found


@pytest.mark.heavy
@pytest.mark.alone  # no emulated host may be left on the machine
@pytest.mark.skipif(netns.unavailable_reason() is not None, reason="needs root (namespaces)")
def test_tf_grpc_servers_listen_only_inside_a_private_namespace(store):
    """TF's gRPC servers bind every interface; on the local cluster they run in a namespace
    whose only interface is its loopback, so nothing of theirs listens in ours."""
    ours = os.readlink("/proc/self/ns/net")
    exposed: set[tuple[str, int]] = set()
    confined: set[tuple[str, int]] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for proc in psutil.Process().children(recursive=True):
                try:
                    if os.readlink(f"/proc/{proc.pid}/ns/net") == ours:
                        exposed.update((c.laddr.ip, c.laddr.port)
                                       for c in proc.net_connections(kind="inet")
                                       if c.status == psutil.CONN_LISTEN)
                    else:  # psutil reads our namespace's tables: read the process's own
                        confined.update(_listening_in_namespace_of(proc.pid))
                except (psutil.Error, OSError):
                    continue
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        (row,) = execute([_case("parameter_server", ps_shards=2)], store, "r6")
    finally:
        done.set()
        watcher.join()
    assert row.status == "ok", row.reason
    assert "private network namespace" in row.extra["exposure"]
    assert confined, "the watcher saw no TF server at all"
    assert not exposed, exposed
    assert not netns.leftovers()


@pytest.mark.heavy
@pytest.mark.long
@pytest.mark.parametrize("role", ["ps", "worker"])
def test_a_killed_parameter_server_task_ends_the_case_failed_naming_it(store, role):
    """The launcher does not wait for ClusterCoordinator to move a dead worker's steps onto
    the others: a measurement with fewer tasks than planned would be a wrong row."""
    killed = _case("parameter_server", ps_shards=2, die_role=role, die_index=1,
                   die_after_s=5)
    killed = dataclasses.replace(killed, steps=5000)  # minutes, were nothing killed
    started = time.monotonic()
    (row,) = execute([killed], store, f"r-{role}")
    assert row.status == "failed"
    assert f"{role}1 exited with code -9" in row.reason and "InjectedFaultError" in row.reason
    assert time.monotonic() - started < killed.timeout_s
    assert not case_processes()


@pytest.mark.long
def test_keras_fit_trains_where_keras_3_can_and_says_why_where_it_cannot(store):
    """`run --tf-loop fit`: one_device, mirrored and central_storage train with model.fit and
    end at one device's weights, recsys:S's dense layers and its sparse embedding alike; Keras
    3 cannot fit MultiWorkerMirrored or ParameterServer, and those rows say so."""
    from harness.core.case import CaseOptions

    cases = plan(strategies("tf", ["all"]), resolve_workloads(["recsys:S"]), "local",
                 steps=STEPS, warmup=WARMUP, repeats=1, timeout_s=180,
                 pipeline=CaseOptions(tf_loop="fit"))
    rows = execute([c for c in cases if c.strategy != "tpu"], store, "fit")
    for row in rows:
        assert row.case_id.endswith("/fit"), row.case_id
        if row.strategy in ("multi_worker_mirrored", "parameter_server"):
            assert row.status == "unavailable" and "model.fit" in row.reason, row.reason
            continue
        assert row.status == "ok", (row.case_id, row.reason)
        assert row.extra["loss_decreased"] is True, row.case_id
        if row.strategy != "one_device":
            assert row.max_weight_diff < 1e-4, (row.case_id, row.max_weight_diff)
    assert not case_processes()


def test_tf_loop_needs_a_tf_strategy():
    from harness.core.case import CaseOptions
    from harness.core.errors import InputError

    with pytest.raises(InputError, match="--tf-loop applies to TensorFlow strategies"):
        plan(strategies("torch", ["ddp"]), resolve_workloads(["mlp:S"]), "local", steps=1,
             warmup=0, repeats=1, timeout_s=10, pipeline=CaseOptions(tf_loop="fit"))
