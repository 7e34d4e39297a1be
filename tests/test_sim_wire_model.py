"""What the step model puts on the wire follows what the frameworks were measured sending
(validate's kind `wire`): gloo's reduce-scatter, FSDP2's re-gather, the parameter servers'
pulls, TF's per-table sparse gathers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.step.data_parallel import simulate_step
from harness.sim.systems.calibration import stating
from harness.sim.systems.spec import parse_topology
from workloads.configs import EmbeddingTables
from workloads.execution import Execution
from workloads.spec import WorkloadError, WorkloadSpec

TOPO = parse_topology("switch:n=4,bw=1GB/s")
DENSE = WorkloadSpec(params=1_000_000)
COMPUTE = stating(None, compute_s=0.01)  # each step's forward and backward
WHOLE = Execution(bucket_bytes=10**9)  # the model one FSDP unit


def sparse(sparsity: float, dense: float = 0.2, tables: int = 4) -> WorkloadSpec:
    """A profile whose ``1 - dense`` of 1M parameters are ``tables`` embedding tables of
    64-byte rows, its lookups per sample unknown (hotness 0)."""
    rows = round(1_000_000 * (1 - dense) / 16 / tables)
    return WorkloadSpec(params=1_000_000, sparsity=sparsity,
                        tables=EmbeddingTables(rows=(rows,) * tables, dim=16, hotness=0))


def test_fsdp_on_gloo_moves_a_third_more_than_on_nccl():
    """Per unit: gather for forward, gather again for backward (resharded), and a
    reduce-scatter that gloo runs as an all-reduce: 4 shares of (n-1)/n against 3."""
    nccl = simulate_step("fsdp", TOPO, 4, DENSE, COMPUTE, execution=WHOLE)
    gloo = simulate_step("fsdp", TOPO, 4, DENSE, COMPUTE, execution=WHOLE, library="gloo")
    share = DENSE.gradient_bytes() * 3 / 4 * 4  # (n-1)/n of the model, from every rank
    assert nccl.bytes_per_step == pytest.approx(3 * share)
    assert gloo.bytes_per_step == pytest.approx(4 * share)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.21, 1.0), st.integers(1, 64))
def test_a_worker_pulls_its_own_rows_and_more_as_workers_grow(sparsity, workers):
    p = sparse(sparsity)
    push, pull = p.ps_bytes(workers)
    assert p.ps_bytes(1)[1] == pytest.approx(push)  # alone: back what it pushed
    assert push - 1e-6 <= pull <= p.ps_bytes(workers + 1)[1] + 1e-6
    whole_tables = p.gradient_bytes() - p.dense_bytes()
    assert pull <= p.dense_bytes() + whole_tables * (1 + 8 / 64) + 1e-6
    assert p.ps_bytes(workers, "whole")[1] == p.gradient_bytes()  # TF reads variables whole


def test_an_unknown_pull_is_refused():
    with pytest.raises(WorkloadError, match="parameter-server pull"):
        sparse(0.5).ps_bytes(2, "some")


def test_tf_gathers_every_table_apart_in_three_collectives():
    one = simulate_step("allreduce_after_backward", TOPO, 4, sparse(0.3, tables=1), COMPUTE)
    four = simulate_step("allreduce_after_backward", TOPO, 4, sparse(0.3, tables=4), COMPUTE)
    assert one.collectives == 1 + 3 and four.collectives == 1 + 3 * 4
    assert four.bytes_per_step == pytest.approx(one.bytes_per_step, rel=1e-4)  # + lengths
    assert four.step_time_s > one.step_time_s  # more messages, the same bytes


def test_tf_hands_over_a_row_per_lookup_not_per_distinct_row():
    from harness.calibrate.workload import workload_facts
    from workloads import parse_workload

    config = parse_workload("recsys:S").config
    p = workload_facts("recsys:S").at(batch=64)
    per_lookup = 64 * config.hotness * len(config.table_rows) * (config.dim * 4 + 8)
    assert p.lookup_rows_bytes() == pytest.approx(per_lookup)
    assert p.lookup_rows_bytes() > p.sparse_rows_bytes()  # popular ids repeat within a batch


@settings(max_examples=40, deadline=None)
@given(st.floats(0.21, 0.99), st.integers(2, 32))
def test_accumulated_micro_batches_exchange_the_union_of_their_rows(sparsity, times):
    """A replica summing ``times`` micro-batches pushes every row any of them touched: more
    than one micro-batch's, at most ``times`` of them, never beyond the tables; its dense
    part and its batch are one micro-batch's."""
    one = sparse(sparsity)
    summed = one.drawing(times)
    assert one.drawing(1) is one and DENSE.drawing(times) is DENSE
    rows = one.sparse_rows_bytes()
    assert rows < summed.sparse_rows_bytes() <= times * rows
    tables = one.gradient_bytes() - one.dense_bytes()
    assert summed.push_bytes() <= one.dense_bytes() + tables * (1 + 8 / 64) + 1e-6
    assert summed.dense_bytes() == one.dense_bytes()
    assert summed.batch_size == one.batch_size
    assert summed.embedding_lookups == times * one.embedding_lookups  # TF: every lookup sent


@pytest.mark.parametrize("size", ["S", "M", "L"])
def test_a_recommenders_rows_at_any_batch_follow_its_zipf_ids(size):
    """A built-in recommender's touched fraction at a smaller batch (``at``) or summed over
    micro-batches (``drawing``) is workloads.costs' Zipf count at that many samples, the
    one its runs are checked against, not independent draws (which overcount repeats)."""
    from harness.calibrate.workload import workload_facts
    from workloads.resolve import resolve_workload

    spec, facts = resolve_workload(f"recsys:{size}"), workload_facts(f"recsys:{size}")
    b = spec.batch_size
    assert facts.at(batch=b // 4).sparsity == pytest.approx(
        spec.expected_sparsity(b // 4))
    assert facts.drawing(16).sparsity == pytest.approx(spec.expected_sparsity(16 * b))
    independent = facts.dense_fraction + (1 - facts.dense_fraction) * facts._independent_rows(16)
    assert facts.drawing(16).sparsity < independent


def test_torch_applies_a_gradient_row_per_lookup_and_tf_each_touched_row_once():
    """torch's sparse embedding gradient keeps a row per looked-up id (uncoalesced) and SGD
    adds them one by one; elsewhere the distinct rows a step touched are updated once. A
    dense model updates every parameter."""
    from harness.calibrate.workload import workload_facts

    facts = workload_facts("recsys:M")
    b, dense = facts.batch_size, facts.params * facts.dense_fraction
    row = facts.embedding_row_bytes / 4
    assert facts.updated_values(b) == pytest.approx(dense + b * facts.embedding_lookups * row)
    assert facts.updated_values(b, "tf") == pytest.approx(facts.params * facts.sparsity)
    assert facts.updated_values(b, "tf") < facts.updated_values(b)
    assert DENSE.updated_values(32) == DENSE.params
    # summed over 16 micro-batches, torch's sparse gradient keeps every one's rows
    assert facts.drawing(16).updated_values(b) == pytest.approx(
        dense + 16 * b * facts.embedding_lookups * row)
