"""Emulated hosts: built, measured, shaped, used by real runs, and always torn down."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from procs import session_case_processes
from stratbench_cli import stratbench

from harness.core.case import Case
from harness.launch import netns
from harness.run.execute import execute_case
from results import load

needs_root = pytest.mark.skipif(netns.unavailable_reason() is not None,
                                reason=str(netns.unavailable_reason()))
pytestmark = [pytest.mark.heavy, pytest.mark.netns]


@needs_root
@pytest.mark.alone  # measures shaped links: needs the cores to itself
def test_links_are_shaped_to_the_configured_rate_and_torn_down():
    with netns.emulated(3, 200e6) as cluster:
        names = set(netns.namespaces())
        assert {h.namespace for h in cluster.hosts} | {cluster.switch} <= names
        for link in netns.measure_links(cluster):
            assert 0.9 * 200e6 <= link["throughput_bits_s"] <= 1.05 * 200e6, link
            assert link["rtt_median_s"] < 0.01
    assert not [ns for ns in netns.namespaces() if ns.startswith(cluster.run_tag)]


@needs_root
@pytest.mark.alone  # measures shaped links: needs the cores to itself
def test_racks_behind_an_oversubscribed_uplink_are_slower_across_than_within():
    with netns.emulated(4, 400e6, racks=2, uplink_bits=100e6) as cluster:
        assert [cluster.rack_of(i) for i in range(4)] == [0, 0, 1, 1]
        assert {f"{cluster.run_tag}-r0", f"{cluster.run_tag}-r1"} <= set(netns.namespaces())
        links = netns.measure_links(cluster)
        assert [link["cross_rack"] for link in links] == [0.0, 1.0, 0.0, 1.0]
        for link in links:
            want = 100e6 if link["cross_rack"] else 400e6
            assert link["configured_bits_s"] == want
            assert 0.9 * want <= link["throughput_bits_s"] <= 1.05 * want, link
    assert not [ns for ns in netns.namespaces() if ns.startswith(cluster.run_tag)]


@needs_root
def test_an_error_inside_still_tears_everything_down():
    with pytest.raises(RuntimeError, match="boom"), netns.emulated(2, 100e6) as cluster:
        raise RuntimeError("boom")
    assert not [ns for ns in netns.namespaces() if ns.startswith(cluster.run_tag)]


@needs_root
@pytest.mark.alone  # cleanup removes every emulated host on the machine
def test_cleanup_removes_what_a_killed_run_left():
    cluster = netns.create(2, 100e6)  # never destroyed: as if the run was SIGKILLed
    assert netns.leftovers()
    proc = stratbench("cleanup")
    assert proc.returncode == 0, proc.stderr
    assert cluster.switch in proc.stderr
    assert not netns.leftovers()


@needs_root
@pytest.mark.alone  # compares step times
def test_gradient_exchange_dominates_slower_links_are_slower(tmp_path):
    medians = {}
    for rate in ("100mbit", "800mbit"):
        proc = stratbench("run", "--framework", "torch", "--strategy", "ddp", "--workload",
                          "mlp:S", "--cluster", f"netns:hosts=2,rate={rate}", "--steps", "6",
                          "--warmup", "2", "--repeats", "1", "--results", str(tmp_path / rate))
        assert proc.returncode == 0, proc.stderr
        (row,) = load(tmp_path / rate).itertuples()
        assert row.status == "ok", row.reason
        assert row.max_weight_diff < 1e-4
        medians[rate] = row.step_time_median_s
    # 0.6 MB of gradients: about 48 ms per step at 100 Mbit/s, 6 ms at 800 Mbit/s
    assert medians["100mbit"] > 3 * medians["800mbit"], medians
    assert not netns.leftovers()


@needs_root
@pytest.mark.alone  # measures shaped links: needs the cores to itself
def test_every_multi_process_strategy_of_both_frameworks_runs_across_hosts(tmp_path):
    """The issue's acceptance: TF multi_worker_mirrored and parameter_server, torch ddp and
    parameter_server, on 4 hosts at 400 Mbit/s, with the links measured within 10%."""
    proc = stratbench("run", "--framework", "all", "--strategy", "multi_worker_mirrored",
                      "--strategy", "parameter_server", "--strategy", "ddp", "--workload",
                      "mlp:S", "--cluster", "netns:hosts=4,rate=400mbit", "--steps", "4",
                      "--warmup", "1", "--repeats", "1", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    frame = load(tmp_path)
    got = {(r.framework, r.strategy): r for r in frame.itertuples()}
    assert set(got) == {("tf", "multi_worker_mirrored"), ("tf", "parameter_server"),
                        ("torch", "ddp"), ("torch", "parameter_server")}
    for key, row in got.items():
        assert row.status == "ok", (key, row.reason)
        assert row.replicas == 4 and row.cluster == "netns:hosts=4,rate=400mbit"
    for key in (("tf", "multi_worker_mirrored"), ("torch", "ddp")):
        assert got[key].max_weight_diff < 1e-4, key
    # bytes on the wire, from every host's interface counters: a ring sends 2(n-1)/n of
    # the gradient per host, plus TCP/IP headers and gloo's own messages (+6% measured on
    # mlp:S's 0.9 MB, 0.2% on mlp:M's 12.6 MB); every strategy put something on it
    ddp = got[("torch", "ddp")]
    assert ddp.wire_bytes_per_step == pytest.approx(ddp.bytes_sent_per_step, rel=0.10)
    for key in (("tf", "multi_worker_mirrored"), ("torch", "ddp"),
                ("torch", "parameter_server")):  # measured apart, too
        extra = got[key].extra
        assert extra["compute_only_s"] > 0 and extra["exchange_only_s"] > 0, key
        assert math.isfinite(extra["measured_overlap"]), key
    # TF's parameter server: compute by difference of passes, which mlp:S's sub-millisecond
    # compute can fall under (then 0, and no ratio)
    ps = got[("tf", "parameter_server")].extra
    assert ps["compute_only_s"] >= 0 and ps["exchange_only_s"] > 0
    assert ps["measured_overlap"] is None or math.isfinite(ps["measured_overlap"])
    for key, row in got.items():
        hosts = row.extra["wire_tx_bytes_per_step_by_host"]
        assert len(hosts) == 4 and min(hosts) > 0, key
    (manifest,) = tmp_path.glob("runs/*/manifest.json")
    (network,) = json.loads(manifest.read_text())["networks"]
    links = network["links"]
    assert links and all(abs(link["throughput_bits_s"] / 400e6 - 1) <= 0.1 for link in links)
    assert network["burst_bytes"] == 50_000  # tbf's bucket: 1 ms at 400 Mbit/s
    assert not netns.leftovers()


@needs_root
@pytest.mark.alone  # waits for any emulated host, then for none
@pytest.mark.parametrize("stop, framework, strategy, cluster", [
    (signal.SIGINT, "torch", "ddp", "netns:hosts=2,rate=100mbit"),
    # a scheduler's or CI's kill; TF's local cluster runs in a private loopback namespace
    (signal.SIGTERM, "tf", "multi_worker_mirrored", "local"),
], ids=["ctrl-c-emulated-hosts", "sigterm-tf-private-namespace"])
def test_interrupted_run_tears_its_hosts_down(tmp_path, stop, framework, strategy, cluster):
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--framework",
                             framework, "--strategy", strategy, "--workload", "mlp:S",
                             "--cluster", cluster, "--steps", "100000", "--repeats", "1",
                             "--results", str(tmp_path)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not netns.leftovers():
            time.sleep(0.1)
        assert netns.leftovers(), "the run never built its hosts"
        time.sleep(8)  # inside the case now
        proc.send_signal(stop)
        proc.wait(60)
        assert proc.returncode == 130, proc.stderr.read()[-2000:] if proc.stderr else ""
        assert not netns.leftovers()
        assert not session_case_processes()
    finally:  # a failure here must not leave hosts that fail the next case too
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        netns.remove_leftovers()


def test_without_root_netns_cases_are_unavailable_rows(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in str(netns.unavailable_reason())
    case = Case(framework="torch", strategy="ddp", workload="mlp:S",
                cluster="netns:hosts=2,rate=100mbit", replicas=2, steps=2, warmup=0,
                repeats=1, timeout_s=30, per_replica_batch=8)
    outcome = execute_case(case, "r", tmp_path)
    assert outcome.row.status == "unavailable" and "root" in outcome.row.reason
