"""The simulator's API: rows for the CLI, the step model's invariants, async PS, isolation."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.errors import SpecError
from harness.sim import (
    DEFAULT_STRATEGIES,
    REAL_TO_SIM,
    Layout,
    parse_topology,
    resolve_strategy,
    simulate,
    simulate_collective,
    simulate_layout,
    simulate_step,
)
from harness.sim.api import COLLECTIVE_ALGORITHMS
from harness.sim.model.structure import layered
from harness.sim.network.topology import TopologyError, scale_bandwidth
from harness.sim.step.async_ps import simulate_async_ps
from harness.sim.systems.calibration import (
    Calibration,
    LinkCalibration,
    apply,
    from_preset,
    stating,
)
from workloads.execution import Execution, PsDeployment
from workloads.spec import WorkloadSpec

SETTINGS = settings(max_examples=int(os.environ.get("SIM_EXAMPLES", "25")), deadline=None)
SCHEMA = ("source", "framework", "strategy", "workload", "size", "cluster", "replicas",
          "status", "reason", "step_time_median_s", "step_time_ci95_low_s",
          "step_time_ci95_high_s", "throughput_samples_s", "scaling_efficiency",
          "max_weight_diff", "exposed_comm_s", "bytes_per_step")
PROFILE = WorkloadSpec(params=25_000_000, batch_size=32, family="mlp", size="M")
COSTS = stating(None, compute_s=0.1, optimizer_s=0.002)  # the step's, as a profile states


def test_rows_have_the_results_schema():
    rows = simulate("two_level:hosts=2,gpus=4,intra=300GB/s,inter=25Gbit", 8, "all", PROFILE,
                    COSTS)
    assert [r.strategy for r in rows] == list(DEFAULT_STRATEGIES)
    for r in rows:
        flat = r.to_row()  # the row stored: the schema's columns
        for key in SCHEMA:
            assert key in flat, key
        assert flat["source"] == "simulated" and flat["framework"] == "sim"
        assert r.status == "ok" and r.reason == ""
        assert r.replicas == 8 and r.workload == "mlp" and r.size == "M"
        assert r.step_time_median_s >= 0.1
        assert r.throughput_samples_s == pytest.approx(
            8 * 32 / r.step_time_median_s, rel=0.2)
        assert "bytes_inter" in flat and "utilisation_inter" in flat
        assert set(r.class_bytes) == set(r.utilisation) == {"intra", "inter"}


IDENTITY = ["source", "framework", "strategy", "requested_strategy", "workload", "size",
            "cluster", "replicas", "case_id", "price_per_device_hour", "calibration_sources"]
OUTCOME = ["status", "reason", "step_time_median_s", "step_time_ci95_low_s",
           "step_time_ci95_high_s", "throughput_samples_s", "scaling_efficiency",
           "max_weight_diff", "exposed_comm_s"]
SIMULATED = ["comm_s", "compute_s", "optimizer_s", "bytes_per_step", "bytes_per_worker",
             "staleness_mean", "staleness_max", "compute_source", "sim_mode", "sim_events",
             "sim_wall_s", "sim_notes"]
MEMORY = ["memory_per_device_bytes", "memory_activations_bytes", "memory_reserved_bytes",
          "device_memory_bytes"]


def test_a_row_is_stored_flat_in_the_order_the_simulator_always_wrote_it():
    """``to_row``, what Parquet and ``simulate --json`` receive: the identity, the outcome
    (an unavailable row only its step's NaNs), each link class's bytes and utilisation, the
    cost, then a described device's memory; a layout's columns and memory come before its
    outcome."""
    gone, ring = simulate("torus:dims=2x2,bw=10GB/s", 4, ["parameter_server", "ddp"], PROFILE,
                          COSTS)
    assert list(gone.to_row()) == [*IDENTITY, *OUTCOME, "bytes_per_step"]
    assert list(ring.to_row()) == [*IDENTITY, *OUTCOME, *SIMULATED, "bytes_ici",
                                   "utilisation_ici", "cost_per_million_samples_usd"]
    (on_device,) = simulate("preset:dgx_h100_ib,hosts=1", 8, "ddp", PROFILE, COSTS)
    assert list(on_device.to_row())[-5:] == ["cost_per_million_samples_usd", *MEMORY]
    assert on_device.to_row()["device_memory_bytes"] == on_device.device_memory_bytes == 80e9
    layout = simulate_layout("preset:dgx_h100_ib,hosts=1", layered("transformer:S"),
                             Layout(data=2, stages=2, tensor=2, microbatches=2), 8)
    assert list(layout.to_row()) == [
        *IDENTITY, *layout.layout.to_columns(), "global_batch", "bubble_fraction",
        *MEMORY[:2], "memory_recompute_bytes", *MEMORY[2:], "attention", "recompute",
        "precision", "sequence_parallel", "zero", *OUTCOME, *SIMULATED,
        "cost_per_million_samples_usd"]
    assert layout.to_row()["layout"] == layout.layout.describe() == (
        "dp=2,pp=2,tp=2,microbatches=2,1f1b")

def test_real_strategy_names_map_onto_simulated_ones():
    assert resolve_strategy("ddp") == "allreduce_ring"
    # TF's custom loop reduces after backward; DDP overlaps buckets with it
    assert resolve_strategy("multi_worker_mirrored") == "allreduce_after_backward"
    assert resolve_strategy("fsdp") == "fsdp"
    assert resolve_strategy("tf:parameter_server") == "parameter_server_async"
    assert resolve_strategy("torch:parameter_server") == "parameter_server"
    assert resolve_strategy("parameter_server") == "parameter_server"
    assert resolve_strategy("central_storage") == "central_storage"
    with pytest.raises(SpecError, match="unknown strategy 'gossip'"):
        resolve_strategy("gossip")
    rows = simulate("switch:n=4,bw=10Gbit", 4, ["ddp", "allreduce_ring"], PROFILE, COSTS)
    assert [r.requested_strategy for r in rows] == ["ddp"]  # same simulation once


def test_every_multi_device_catalog_strategy_has_a_simulation():
    """Data-parallel strategies map onto a simulated exchange; model-parallel ones are
    simulated as layouts (simulate_layout: pipeline stages, tensor ranks)."""
    catalog = pytest.importorskip("harness.core.strategies")
    for s in catalog.STRATEGIES:
        if s.name in catalog.MODEL_PARALLEL:
            assert s.exchange in ("pipeline", "tensor"), s
        elif s.exchange != "none":
            assert (s.framework, s.name) in REAL_TO_SIM, s


def test_bad_input_raises_spec_error():
    with pytest.raises(SpecError, match="workers=9"):
        simulate("switch:n=8,bw=1Gbit", 9, "all", PROFILE, COSTS)
    with pytest.raises(SpecError, match="profile"):
        simulate("switch:n=8,bw=1Gbit", 8, "all", None)
    with pytest.raises(SpecError, match="compute time"):
        simulate("switch:n=8,bw=1Gbit", 8, "all", WorkloadSpec(params=10,
                                                               flops_per_sample=1e9))


def test_one_worker_runs_every_strategy_with_nothing_to_exchange():
    """One worker: every strategy is its compute, central storage included (its one
    device holds the store, so its round moves nothing)."""
    rows = simulate("switch:n=2,bw=1Gbit", 1, "all", PROFILE, COSTS)
    assert {r.strategy for r in rows} >= {"central_storage", "parameter_server"}
    synchronous = [r for r in rows if r.strategy != "parameter_server_async"]
    assert all(r.status == "ok" for r in rows), [r for r in rows if r.status != "ok"]
    for r in synchronous:
        assert r.exposed_comm_s == pytest.approx(0.0, abs=1e-12), r
        assert r.step_time_median_s == pytest.approx(0.1 + 0.002), r


def test_what_a_topology_cannot_run_is_an_unavailable_row():
    rows = simulate("torus:dims=2x2,bw=10GB/s", 4, ["parameter_server", "allreduce_ring"],
                    PROFILE, COSTS)
    assert rows[0].status == "unavailable" and "torus" in rows[0].reason
    assert math.isnan(rows[0].step_time_median_s)
    assert rows[1].status == "ok"


def test_presets_bring_device_speed_and_price():
    profile = WorkloadSpec(params=10_000_000, batch_size=16, flops_per_sample=3e9)
    rows = simulate("preset:dgx_h100_ib", 16, "ddp", profile)
    preset = from_preset("dgx_h100_ib")
    assert preset.device_flops is not None
    assert rows[0].compute_s == pytest.approx(3e9 * 16 / preset.device_flops)
    assert rows[0].price_per_device_hour == pytest.approx(12.29)
    assert rows[0].cost_per_million_samples_usd > 0
    assert "compute=preset" in rows[0].calibration_sources


def test_a_measured_calibration_overrides_the_spec():
    spec = "switch:n=8,bw=100Gbit,lat=5us"
    slow = Calibration({"net": LinkCalibration(1e-4, 1 / 1e8, "measured")})
    fast_row = simulate(spec, 8, "allreduce_ring", PROFILE, COSTS)[0]
    slow_row = simulate(spec, 8, "allreduce_ring", PROFILE, stating(slow, 0.1, 0.002))[0]
    assert slow_row.step_time_median_s > fast_row.step_time_median_s
    assert "link:net=measured" in slow_row.calibration_sources


@SETTINGS
@given(st.sampled_from(DEFAULT_STRATEGIES), st.integers(2, 16), st.floats(1e5, 3e8),
       st.floats(0.001, 0.5), st.floats(1.0, 8.0), st.integers(1, 4))
def test_step_model_invariants(strategy, workers, grad_bytes, compute, factor, grow):
    topo = parse_topology("two_level:hosts=4,gpus=4,intra=100GB/s,inter=10Gbit")
    profile = WorkloadSpec(params=int(grad_bytes / 4))
    costs, buckets = stating(None, compute_s=compute), Execution(bucket_bytes=8 * 2**20)
    if strategy == "allreduce_hierarchical" and workers > 4 and workers % 4:
        with pytest.raises(TopologyError, match="whole hosts"):
            simulate_step(strategy, topo, workers, profile, costs, execution=buckets)
        return
    r = simulate_step(strategy, topo, workers, profile, costs, execution=buckets)
    assert r.step_time_s >= r.compute_s * (1 - 1e-9)
    assert r.exposed_comm_s >= 0
    if strategy != "parameter_server_async":
        assert r.exposed_comm_s <= r.comm_s * (1 + 1e-9) + 1e-12  # overlap only hides
        faster = simulate_step(strategy, scale_bandwidth(topo, factor), workers, profile,
                               costs, execution=buckets)
        assert faster.step_time_s <= r.step_time_s * (1 + 1e-9)
        # bigger gradients in proportionally bigger buckets (same bucket boundaries: with
        # others, a smaller last bucket can legitimately expose less communication)
        bigger = simulate_step(strategy, topo, workers,
                               WorkloadSpec(params=profile.params * grow), costs,
                               execution=Execution(bucket_bytes=8 * 2**20 * grow))
        assert bigger.step_time_s >= r.step_time_s * (1 - 1e-9)


def test_overlap_hides_communication_behind_backward():
    topo = parse_topology("switch:n=8,bw=100Gbit,lat=5us")
    profile, costs = WorkloadSpec(params=25_000_000), stating(None, compute_s=0.3)
    r = simulate_step("allreduce_ring", topo, 8, profile, costs)
    assert r.comm_s > 0.01 and r.exposed_comm_s < r.comm_s / 3  # most of it hidden
    ps = simulate_step("parameter_server", topo, 8, profile, costs)
    assert ps.exposed_comm_s == pytest.approx(ps.comm_s + ps.optimizer_s - ps.optimizer_s)


def test_a_straggler_gates_synchronous_steps():
    topo = parse_topology("switch:n=8,bw=100Gbit")
    base = simulate_step("allreduce_ring", topo, 8, PROFILE, COSTS)
    slow = simulate_step("allreduce_ring", topo, 8, PROFILE, COSTS, stragglers=1,
                         straggler_factor=3)
    assert slow.step_time_s >= 3 * 0.1
    assert slow.step_time_s > 2.5 * base.step_time_s


def test_async_ps_is_not_gated_by_a_straggler_and_reports_staleness():
    topo = parse_topology("switch:n=8,bw=100Gbit,lat=5us")
    two = Execution(ps=PsDeployment(shards=2))
    base = simulate_async_ps(topo, 8, PROFILE, COSTS, execution=two)
    slow = simulate_async_ps(topo, 8, PROFILE, COSTS, execution=two, stragglers=1,
                             straggler_factor=4)
    assert base.staleness_mean is not None and base.staleness_max is not None
    assert base.staleness_mean >= 1 and base.staleness_max >= base.staleness_mean
    # one of eight workers at a quarter speed costs about 3/32 of the throughput, not 3/4
    assert slow.throughput_samples_s > 0.8 * base.throughput_samples_s
    sync = simulate_step("parameter_server", topo, 8, PROFILE, COSTS, stragglers=1,
                         straggler_factor=4, execution=two)
    assert slow.throughput_samples_s > 2 * sync.throughput_samples_s


def test_async_ps_mean_field_stands_in_for_many_workers():
    topo = parse_topology("switch:n=256,bw=100Gbit,lat=5us")
    r = simulate_async_ps(topo, 256, PROFILE, COSTS,
                          execution=Execution(ps=PsDeployment(shards=8)),
                          max_explicit_workers=16)
    assert "16 explicit workers stand for 256" in r.notes[0]
    assert r.throughput_samples_s > 0 and r.wall_s < 20


def test_sparse_gradients_help_parameter_servers_only():
    topo = parse_topology("switch:n=8,bw=10Gbit")
    dense = WorkloadSpec(params=50_000_000)
    sparse = WorkloadSpec(params=50_000_000, sparsity=0.01)
    costs = stating(None, compute_s=0.05)
    for strategy, helps in (("parameter_server", True), ("allreduce_ring", False)):
        d = simulate_step(strategy, topo, 8, dense, costs).step_time_s
        s = simulate_step(strategy, topo, 8, sparse, costs).step_time_s
        assert (s < 0.5 * d) if helps else s == pytest.approx(d)


@pytest.mark.parametrize("algorithm", COLLECTIVE_ALGORITHMS)
def test_collective_prediction_in_nccl_tests_units(algorithm):
    row = simulate_collective("two_level:hosts=2,gpus=4,intra=100GB/s,inter=100Gbit", 8,
                              algorithm, 64e6)
    assert row.status == "ok" and row.time_s > 0
    assert row.algbw == pytest.approx(64e6 / row.time_s)
    if algorithm.startswith("allreduce"):
        assert row.busbw == pytest.approx(row.algbw * 2 * 7 / 8)


def test_calibration_apply_changes_only_named_classes():
    topo = parse_topology("two_level:hosts=2,gpus=2,intra=100GB/s,inter=10Gbit")
    out = apply(topo, Calibration({"inter": LinkCalibration(1e-5, 1e-9, "measured"),
                                   "spine": LinkCalibration(0, 1e-9, "measured")}))
    assert out.inter.bandwidth == pytest.approx(1e9) and out.inter.latency == 1e-5
    assert out.intra == topo.intra


def test_importing_the_simulator_imports_no_framework():
    code = ("import sys, harness.sim, harness.sim.bench, harness.sim.step.async_ps; "
            "bad = [m for m in ('tensorflow', 'torch', 'keras', 'jax') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
