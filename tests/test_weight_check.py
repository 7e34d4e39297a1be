"""The weight check (issue 28, part 6): beyond 1e-4, a run is judged against how far float32
summation order alone moves one device's weights (the rounding floor), measured by training
one device again on another thread count."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.core.case import reference_threads
from harness.core.strategies import ROUNDING_MARGIN, WEIGHT_TOLERANCE, weights_agree


def test_a_run_matches_within_the_tolerance_or_within_the_margin_of_its_rounding_floor():
    assert weights_agree(WEIGHT_TOLERANCE)
    assert not weights_agree(2e-4)  # no floor measured: the fixed tolerance decides
    assert weights_agree(1.9e-4, rounding_floor=6.9e-5)
    assert not weights_agree(1e-2, rounding_floor=6.9e-5)  # a lost update, not rounding
    assert weights_agree(ROUNDING_MARGIN * 1e-4, rounding_floor=1e-4)
    assert [reference_threads("reference", t) for t in (1, 2)] == [1, 2]
    assert [reference_threads("rounding", t) for t in (1, 2, 8)] == [2, 1, 1]


@pytest.mark.long
def test_one_device_on_another_thread_count_moves_mlp_l_as_far_as_a_flagged_run(tmp_path):
    """TF on mlp:L: the reference (2 threads) and the rounding run (1 thread) end about 1e-4
    apart after 9 steps on the 6-worker global batch, so 1.9e-4 (TF multi_worker_mirrored
    on 6 hosts, flagged before) is rounding, while a wrong step (lr x gradient) is not."""
    from harness.core.strategies import strategies
    from harness.run.plan import plan, resolve_workloads
    from harness.run.references import References, max_weight_diff

    (choice,) = resolve_workloads(["mlp:L"])
    (case,) = plan(strategies("tf", ["multi_worker_mirrored"]), [choice], "local", 8, 1, 1,
                   300.0)
    case = dataclasses.replace(case, replicas=6)  # the flagged run's global batch
    case_file = tmp_path / "case.json"
    case_file.write_text(case.to_json())
    with References.kept(tmp_path) as references:
        ref = references.reference(case, case_file, tmp_path)
        assert not isinstance(ref, str), ref
        floor = references.floor(case, case_file, tmp_path)
        assert max_weight_diff(ref, ref) == 0.0
        assert references.trained == 2  # the reference once, the rounding run once
    # measured: 1.1e-4 after 9 steps at batch 384, beyond the fixed tolerance by itself
    assert floor is not None and floor > 1e-5
    assert weights_agree(1.9e-4, floor)
    report = json.loads(next((tmp_path / "reference").rglob("*.json")).read_text())
    rounding = json.loads(next((tmp_path / "rounding").rglob("*.json")).read_text())
    assert rounding["threads"] != report["threads"]


def test_cases_that_differ_only_in_deployment_share_one_reference():
    """The key drops the strategy, its replicas (not the global batch), layout, servers and
    loop; it keeps what the reference trains on, and an option it does not know."""
    from harness.core.case import Case, reference_key

    base = Case("tf", "mirrored", "mlp:S", "local", 2, 8, 2, 3, 300.0, 16)
    same = [dataclasses.replace(base, strategy="multi_worker_mirrored", repeats=1),
            dataclasses.replace(base, strategy="central_storage", timeout_s=60.0),
            dataclasses.replace(base, replicas=4, per_replica_batch=8),  # the same 32
            dataclasses.replace(base, strategy="pipeline",
                                options={"pipeline_stages": 2, "microbatches": 4,
                                         "stage_layers": "1,2"}),
            dataclasses.replace(base, options={"tf_loop": "fit", "ps_shards": 2})]
    assert {reference_key(c) for c in same} == {reference_key(base)}
    other = [dataclasses.replace(base, framework="torch"),
             dataclasses.replace(base, workload="mlp:M"),
             dataclasses.replace(base, steps=9), dataclasses.replace(base, warmup=1),
             dataclasses.replace(base, seed=1), dataclasses.replace(base, replicas=4),
             dataclasses.replace(base, options={"workload_size": "L"}),
             dataclasses.replace(base, options={"die_rank": 0, "die_at_step": 3}),
             dataclasses.replace(base, options={"an_option_nobody_listed": 1})]  # type: ignore[typeddict-unknown-key]
    keys = [reference_key(c) for c in other]
    assert reference_key(base) not in keys and len(set(keys)) == len(keys)


def test_a_run_trains_one_reference_for_the_strategies_of_one_model(tmp_path):
    """torch DDP and FSDP on mlp:S: one reference process, the same weights file for both;
    another global batch trains its own."""
    from harness.core.strategies import strategies
    from harness.run.plan import plan, resolve_workloads
    from harness.run.references import References

    (choice,) = resolve_workloads(["mlp:S"])
    ddp, fsdp = plan(strategies("torch", ["ddp", "fsdp"]), [choice], "local", 2, 0, 1, 120.0)
    with References.kept(tmp_path) as references:
        got = []
        for case in (ddp, fsdp):
            case_file = tmp_path / f"{case.strategy}.json"
            case_file.write_text(case.to_json())
            got.append(references.reference(case, case_file, tmp_path / case.strategy))
        assert references.trained == 1 and got[0] == got[1] and got[0].exists(), got
        wider = dataclasses.replace(ddp, per_replica_batch=2 * ddp.per_replica_batch)
        case_file = tmp_path / "wider.json"
        case_file.write_text(wider.to_json())
        assert references.reference(wider, case_file, tmp_path / "wider") != got[0]
        assert references.trained == 2
    assert not got[0].exists()  # the run's references end with it
