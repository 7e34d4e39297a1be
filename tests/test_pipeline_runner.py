"""Pipeline parallelism for real: torch.distributed.pipelining stages over gloo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.core import strategies as catalog
from harness.core.case import CaseOptions
from harness.core.errors import InputError
from harness.run.plan import plan, resolve_workloads


def _plan(workload: str, hosts: int = 1, **asked) -> list:
    return plan(catalog.strategies("torch", ["pipeline"]), resolve_workloads([workload]),
                "local", 2, 1, 1, 60.0, hosts=hosts, pipeline=CaseOptions(**asked))


def test_a_pipeline_case_carries_its_stages_micro_batches_and_schedule():
    (case,) = _plan("transformer:M", stages=4, microbatches=8, schedule="gpipe")
    assert case.replicas == 4 and case.global_batch == 8 * 4
    # the one layout record (harness.core.layout), under the columns results store it in
    from harness.core.layout import Layout

    assert Layout.from_columns(case.options, case.replicas) == Layout(
        stages=4, microbatches=8, schedule="gpipe")
    assert (case.options["pipeline_stages"], case.options["microbatches"],
            case.options["pipeline_schedule"]) == (4, 8, "gpipe")
    (default,) = _plan("transformer:M")
    assert (default.replicas, default.options["microbatches"]) == (2, 2)
    (emulated,) = _plan("transformer:M", hosts=4)
    assert emulated.replicas == 4  # one stage per host


def test_stages_that_do_not_divide_the_blocks_take_fewer_on_the_first_and_last():
    """Issue 37: a 4-block transformer on 3 stages runs 1, 2, 1 (the shortfall off the
    ends, which also hold the embedding and the head), or the counts asked."""
    from harness.core.layout import Layout

    (case,) = _plan("transformer:M", stages=3)
    assert case.options["stage_layers"] == "1,2,1"
    assert Layout.from_columns(case.options, case.replicas).stage_blocks == (1, 2, 1)
    assert "layers=1,2,1" in Layout.from_columns(case.options, case.replicas).describe()
    (asked,) = _plan("transformer:M", stages=3, stage_layers="2,1,1")
    assert asked.options["stage_layers"] == "2,1,1"
    (equal,) = _plan("transformer:M", stages=2)
    assert "stage_layers" not in equal.options  # equal runs: nothing to carry


@pytest.mark.parametrize("workload, asked, hosts, message", [
    ("transformer:M", {"stages": 5}, 1, "5 stages cannot split the 4 blocks"),
    ("transformer:M", {"stages": 3, "stage_layers": "2,2,1"}, 1,
     "3 counts of at least 1 summing to the 4 blocks"),
    ("transformer:M", {"stages": 3, "stage_layers": "a,b"}, 1, "is not a count"),
    ("transformer:M", {"stages": 2, "microbatches": 3}, 1,
     "3 micro-batches do not divide the pipeline's batch of 16"),
    ("mlp:S", {}, 1, "pipeline splits a model by its blocks"),
    ("transformer:M", {"stages": 2}, 4, "one stage per host: --stages 2 must be"),
])
def test_a_split_the_workload_cannot_take_is_one_line(workload, asked, hosts, message):
    with pytest.raises(InputError, match=message):
        _plan(workload, hosts=hosts, **asked)


def test_all_means_data_parallel_and_the_cli_refuses_a_bad_split_with_exit_2(tmp_path):
    assert "pipeline" not in {s.name for s in catalog.strategies("torch", [])}
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--framework", "torch",
                          "--strategy", "pipeline", "--workload", "transformer:M",
                          "--stages", "5", "--results", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "5 stages cannot split the 4 blocks" in bad.stderr


def _beside_one_device(tmp_path, strategy: str, *options: str):
    """transformer:S trained a few steps by ``strategy`` and by one device; rows by strategy."""
    from results.store import load

    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--framework", "torch",
                          "--strategy", "single_device", "--strategy", strategy,
                          "--workload", "transformer:S", *options, "--steps", "3",
                          "--warmup", "1", "--repeats", "1", "--results", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return load(tmp_path).set_index("strategy")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.long
def test_a_pipeline_trains_to_one_devices_weights_and_measures_its_bubble(tmp_path, schedule):

    rows = _beside_one_device(tmp_path, "pipeline", "--stages", "2", "--microbatches", "4",
                              "--schedule", schedule)
    pipe = rows.loc["pipeline"]
    assert pipe["status"] == "ok", pipe["reason"]
    assert pipe["max_weight_diff"] <= 1e-5
    assert 0 < pipe["extra"]["bubble_fraction"] < 1
    assert pipe["extra"]["pipeline_stages"] == 2 and pipe["extra"]["microbatches"] == 4
    assert pipe["grad_bytes"] == rows.loc["single_device", "grad_bytes"]  # the whole model


@pytest.mark.long
def test_uneven_stages_train_to_one_devices_weights(tmp_path):
    """Issue 37: 3 stages of a 4-block transformer (1, 2, 1 blocks) train the same weights
    as one device, and the row records the split the prediction reads back."""
    from results.store import load

    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--framework", "torch",
                          "--strategy", "single_device", "--strategy", "pipeline",
                          "--workload", "transformer:M", "--stages", "3", "--steps", "2",
                          "--warmup", "1", "--repeats", "1", "--results", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    pipe = load(tmp_path).set_index("strategy").loc["pipeline"]
    assert pipe["status"] == "ok", pipe["reason"]
    assert pipe["max_weight_diff"] <= 1e-5
    assert pipe["extra"]["stage_layers"] == "1,2,1"


def test_qkv_rows_are_reordered_so_each_rank_holds_its_heads_q_k_and_v():
    import numpy as np

    from harness.runners.torch_tensor_parallel import qkv_order

    d, heads, ranks = 8, 4, 2  # head width 2: rank 0 owns heads 0-1, columns 0-3 of each
    order = qkv_order(d, heads, ranks)
    assert sorted(order.tolist()) == list(range(3 * d))
    assert order[:12].tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]
    assert np.array_equal(np.argsort(order)[order], np.arange(3 * d))


def test_a_tensor_parallel_case_and_the_degrees_the_heads_refuse():
    (case,) = plan(catalog.strategies("torch", ["tensor_parallel"]),
                   resolve_workloads(["transformer:M"]), "local", 2, 1, 1, 60.0,
                   pipeline=CaseOptions(tensor=4))
    assert case.replicas == 4 and case.options["tensor_parallel"] == 4
    for tensor, workload in ((3, "transformer:M"), (8, "transformer:M"), (2, "mlp:S")):
        with pytest.raises(InputError, match="tensor"):
            plan(catalog.strategies("torch", ["tensor_parallel"]),
                 resolve_workloads([workload]), "local", 2, 1, 1, 60.0,
                 pipeline=CaseOptions(tensor=tensor))


@pytest.mark.long
def test_tensor_parallelism_trains_to_one_devices_weights(tmp_path):

    rows = _beside_one_device(tmp_path, "tensor_parallel", "--tensor-parallel", "2")
    tp = rows.loc["tensor_parallel"]
    assert tp["status"] == "ok", tp["reason"]
    assert tp["max_weight_diff"] <= 1e-5
    assert tp["extra"]["tensor_parallel"] == 2
    assert 0 < tp["extra"]["bubble_fraction"] < 1  # its idle share: waiting in all-reduces
    # transformer:S (2 blocks, context 64, width 64; every rank the whole batch): 4 all-reduces
    # a block, each ring 2(n-1)/n = 1 x its 4-byte activations, not a gradient's bytes
    assert tp["bytes_sent_per_step"] == 4 * 2 * 1 * 4 * tp["global_batch"] * 64 * 64
    assert "all-reduces per block" in tp["extra"]["bytes_sent_method"]


@pytest.mark.long
def test_measured_memory_of_pipeline_and_tensor_parallel_stages_is_within_20_percent(tmp_path):
    """transformer:L (203 MB of parameters and gradients) split two ways, against the memory
    model plus the framework's working memory measured on transformer:S the same way."""
    from harness.validate.memory import validate_memory
    from results.store import load

    for workload in ("transformer:S", "transformer:L"):
        run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--framework",
                              "torch", "--strategy", "pipeline", "--strategy",
                              "tensor_parallel", "--workload", workload, "--microbatches",
                              "2", "--steps", "2", "--warmup", "1", "--repeats", "1",
                              "--results", str(tmp_path)],
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr
    table = validate_memory(load(tmp_path)).set_index("what")
    assert set(table.index) == {"torch/pipeline/transformer:L",
                                "torch/tensor_parallel/transformer:L"}
    assert (table["error"].abs() <= 0.20).all(), table[["measured_bytes", "predicted_bytes"]]
