"""PyTorch strategies run for real, end to end, through the same path `stratbench run` takes."""

from __future__ import annotations

import dataclasses
import math

import pytest
from procs import case_processes

from harness.core.case import Case
from harness.core.strategies import strategies
from harness.run.execute import execute
from harness.run.plan import plan, resolve_workloads
from results import ResultsStore, load, load_steps


def _cases(names: list[str], workload: str = "mlp:S", steps: int = 4, **kw) -> list[Case]:
    choice = dataclasses.replace(resolve_workloads([workload])[0], batch=16)
    cases = plan(strategies("torch", names), [choice], "local", steps=steps,
                 warmup=1, repeats=kw.pop("repeats", 1), timeout_s=kw.pop("timeout_s", 120))
    return cases


@pytest.fixture
def store(tmp_path):
    return ResultsStore(tmp_path)


@pytest.mark.long
def test_every_torch_strategy_gives_an_ok_row_with_timing_and_correctness(store, tmp_path):
    # repeats are fresh process groups: ddp's two show them, the others run once
    cases = [dataclasses.replace(c, repeats=2) if c.strategy == "ddp" else c
             for c in _cases(["all"], "mlp:S")]
    rows = execute(cases, store, "r1")
    by = {r.strategy: r for r in rows}
    assert set(by) == {"single_device", "ddp", "fsdp", "parameter_server",
                       "parameter_server_async"}
    for row in rows:
        assert row.status == "ok", (row.strategy, row.reason)
        assert row.step_time_ci95_low_s <= row.step_time_median_s <= row.step_time_ci95_high_s
        assert row.throughput_samples_s > 0 and row.peak_rss_bytes > 0
        assert not math.isnan(row.scaling_efficiency)
    for name in ("ddp", "fsdp", "parameter_server"):  # synchronous: equal to one device
        assert by[name].max_weight_diff < 1e-4, (name, by[name].max_weight_diff)
        assert by[name].extra["weights_match"] is True
    assert math.isnan(by["parameter_server_async"].max_weight_diff)
    assert by["parameter_server_async"].extra["loss_decreased"] is True
    assert "staleness_mean" in by["parameter_server_async"].extra
    for name in ("ddp", "fsdp", "parameter_server", "parameter_server_async"):  # the probe
        extra = by[name].extra
        assert extra["compute_only_s"] > 0 and extra["exchange_only_s"] > 0, name
        assert math.isfinite(extra["measured_overlap"]), name
    assert by["single_device"].extra["cpu_s_per_step"] > 0  # what oversold replicas share
    frame = load(tmp_path)
    assert len(frame) == 5 and set(frame.status) == {"ok"}
    steps = load_steps(tmp_path)
    assert len(steps[steps.case_id == by["ddp"].case_id]) == 2 * 4  # repeats x steps
    assert not case_processes(), "a case left processes behind"


@pytest.mark.long
def test_recsys_parameter_server_moves_fewer_bytes_than_all_reduce(store):
    rows = execute(_cases(["ddp", "parameter_server"], "recsys:S"), store, "r2")
    by = {r.strategy: r for r in rows}
    assert by["parameter_server"].status == "ok", by["parameter_server"].reason
    assert by["ddp"].status == "ok", by["ddp"].reason
    assert by["parameter_server"].bytes_sent_per_step < 0.5 * by["ddp"].bytes_sent_per_step
    assert by["parameter_server"].max_weight_diff < 1e-4
    # each server counted its pulls: a synchronous round is one update, and both servers
    # hold tables whose touched rows the pulls carry
    extra = by["parameter_server"].extra
    assert extra["ps_pull_span_mean"] == [1.0, 1.0]
    assert len(extra["ps_pull_rows_mean"]) == 2 and min(extra["ps_pull_rows_mean"]) > 0


@pytest.mark.heavy
def test_a_killed_worker_ends_as_a_failed_row_and_the_run_goes_on(store, tmp_path):
    crash = Case(framework="torch", strategy="ddp", workload="mlp:S", cluster="local",
                 replicas=2, steps=50, warmup=1, repeats=1, timeout_s=60,
                 per_replica_batch=16, options={"die_at_step": 2, "die_rank": 1})
    after = _cases(["single_device"])
    rows = execute([crash, *after], store, "r3")
    assert rows[0].status == "failed"
    assert "worker1" in rows[0].reason
    assert rows[1].status == "ok"
    assert set(load(tmp_path).status) == {"failed", "ok"}
    assert not case_processes()


@pytest.mark.heavy
def test_a_hung_case_times_out_and_is_killed(store):
    hang = Case(framework="torch", strategy="ddp", workload="mlp:S", cluster="local",
                replicas=2, steps=50, warmup=1, repeats=1, timeout_s=8,
                per_replica_batch=16, options={"hang_at_step": 2, "die_rank": 1})
    (row,) = execute([hang], store, "r4")
    assert row.status == "timeout" and "timed out after 8 s" in row.reason
    assert not case_processes()
