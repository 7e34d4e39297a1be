"""The recommender on small synthetic DataFrames: ranking, reasons, memory fit, cost, sources."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from stratbench_cli import stratbench

from harness.core.errors import InputError
from harness.recommend.recommender import (
    StoredInputs,
    format_table,
    parse_targets,
    rank,
    recommend,
    recommend_from_store,
    validation_errors,
)
from harness.recommend.records import Candidate
from harness.sim.model.memory import data_parallel_memory
from results.schema import ResultRow
from results.store import ResultsStore, load

NETNS = "netns:hosts=2,rate=400mbit"


def row(strategy: str, step: float, *, framework: str = "torch", replicas: int = 2,
        workload: str = "mlp", size: str = "M", cluster: str = NETNS, status: str = "ok",
        reason: str = "", run_id: str = "r1", batch: int = 64) -> dict:
    r = ResultRow(run_id=run_id, case_id=f"{framework}/{strategy}/{workload}:{size}/"
                  f"{cluster}/{replicas}", framework=framework, strategy=strategy,
                  workload=workload, size=size, cluster=cluster, replicas=replicas,
                  status=status, reason=reason, global_batch=batch * replicas,
                  step_time_median_s=step, step_time_ci95_low_s=step * 0.95,
                  step_time_ci95_high_s=step * 1.05,
                  throughput_samples_s=batch * replicas / step if status == "ok" else math.nan,
                  scaling_efficiency=math.nan)
    return r.to_dict()


def measured_frame() -> pd.DataFrame:
    return pd.DataFrame([
        row("single_device", 0.02, replicas=1),
        row("ddp", 0.30), row("parameter_server", 0.50), row("fsdp", 0.40),
        row("parameter_server_async", math.nan, status="failed", reason="worker 1 died"),
        row("single_device", 0.01, replicas=1, workload="recsys", size="S"),
        row("ddp", 0.20, workload="recsys", size="S"),
        row("parameter_server", 0.05, workload="recsys", size="S"),
    ])


def sim_rows(cluster: str = "preset:eth25_v100,hosts=4", workers: int = 32) -> pd.DataFrame:
    base = {"source": "simulated", "framework": "sim", "workload": "mlp:M", "cluster": cluster,
            "replicas": workers, "status": "ok", "reason": "", "run_id": "r1",
            "scaling_efficiency": 0.5, "price_per_device_hour": 3.0}
    rows = []
    for strategy, step, exposed, sent in (("allreduce_ring", 0.010, 0.009, 2.4e7),
                                          ("parameter_server", 0.050, 0.049, 2.5e7),
                                          ("fsdp", 0.012, 0.011, 2.4e7)):
        rows.append(base | {"strategy": strategy, "step_time_median_s": step,
                            "throughput_samples_s": 64 * workers / step,
                            "exposed_comm_s": exposed, "bytes_per_worker": sent})
    return pd.DataFrame(rows)


def test_measured_ranking_failed_last_and_labelled_measured():
    answer = recommend(measured_frame(), workloads=["mlp:M"], targets=[NETNS])
    frame = answer.table()
    assert list(frame["strategy"]) == ["single_device", "ddp", "fsdp", "parameter_server",
                                       "parameter_server_async"]
    assert list(frame["rank"]) == [1, 2, 3, 4, 5]
    assert set(frame["source"]) == {"measured"}
    assert set(frame["train_source"]) == {"extrapolated from measured"}
    failed = frame[frame["status"] == "failed"].iloc[0]
    assert "worker 1 died" in failed["reason"] and math.isnan(failed["train_time_s"])
    ddp = frame[frame["strategy"] == "ddp"].iloc[0]
    # T1 = 20 ms, T2 = 300 ms: the exchange is ~93% of the step at the measured link rate
    assert ddp["reason"] == "gradient exchange is 93% of the step at 400 Mbit/s"


def test_sparse_workload_reason_names_the_bytes_the_server_saves():
    answer = recommend(measured_frame(), workloads=["recsys:S"], targets=[NETNS])
    frame = answer.table()
    assert frame.iloc[1]["strategy"] == "parameter_server"
    reason = frame.iloc[1]["reason"]
    assert reason.startswith("embedding gradients touch 2% of rows")
    assert "fewer bytes than all-reduce" in reason


def test_memory_per_device_sharding_rules():
    p = 1e9  # 4 GB of fp32 parameters
    assert data_parallel_memory(p, "allreduce", 8).total == pytest.approx(16e9)  # + 2 slots
    assert data_parallel_memory(p, "sharded", 8).total == pytest.approx(2e9)  # fsdp shards all
    assert data_parallel_memory(p, "parameter_server", 8).total == pytest.approx(8e9)
    assert data_parallel_memory(p, "none", 1, slots=0).total == pytest.approx(8e9)


def test_rank_puts_what_does_not_fit_below_what_fits():
    def cand(strategy, exchange, tput):
        return Candidate(framework="sim", strategy=strategy, exchange=exchange, replicas=8,
                         step_time_s=64 * 8 / tput, throughput_samples_s=tput,
                         scaling_efficiency=0.9, comm_fraction=0.1, bytes_per_worker=1e9,
                         params=2e9, source="simulated", device_memory_bytes=16e9,
                         price_per_device_hour=2.0)

    ranked = rank([cand("allreduce_ring", "allreduce", 1000.0),
                   cand("fsdp", "sharded", 800.0)], samples=1e6, price=None).ranked
    assert [r.strategy for r in ranked] == ["fsdp", "allreduce_ring"]
    assert ranked[0].fits and not ranked[1].fits
    assert str(ranked[1].reason).startswith("does not fit: needs 32 GB per device")
    assert "the device has 16 GB" in str(ranked[1].reason)
    assert str(ranked[0].reason).startswith("shards parameters, gradients and optimizer state")
    # cost: 1e6 samples / 800 samples/s = 1250 s, x 8 devices x $2/h
    assert ranked[0].train_time_s == pytest.approx(1250.0)
    assert ranked[0].cost_usd == pytest.approx(1250 / 3600 * 8 * 2.0)


def test_preset_targets_sweep_device_counts_reusing_stored_simulations():
    validation = pd.DataFrame({"kind": ["step", "step", "step", "collective"],
                               "error": [0.1, -0.3, 0.2, 0.9]})
    answer = recommend(measured_frame(), workloads=["mlp:M"],
                       targets=["preset:eth25_v100,hosts=4"], samples=1e7,
                       stored=StoredInputs(simulated=sim_rows(), validation=validation),
                       price=99.0)
    frame = answer.table()
    assert set(frame["source"]) == {"simulated"}
    assert frame["target"].iloc[0] == "preset:eth25_v100,hosts=4"
    assert set(frame["price_per_device_hour"]) == {3.06}  # the preset's price, not the user's
    spread = frame[frame["strategy"] != "single_device"]  # one device: no network simulated
    assert spread["validation_error"].tolist() == pytest.approx([0.2] * len(spread))
    sweep = answer.sweep_frame()
    assert sorted(set(sweep["replicas"])) == [1, 2, 4, 8, 16, 32]  # within a host, then hosts
    stored = sweep[(sweep["replicas"] == 32) & (sweep["strategy"] == "allreduce_ring")].iloc[0]
    assert stored["train_time_s"] == pytest.approx(1e7 / (64 * 32 / 0.010))  # the stored row
    assert stored["cost_usd"] == pytest.approx(stored["train_time_s"] * 32 / 3600 * 3.06)
    top = frame.iloc[0]
    assert top["device_memory_bytes"] == 16e9  # V100 16GB
    verdict = answer.verdicts[0]
    assert verdict.status == "ok" and verdict.pick.strategy == top["strategy"]
    headline = verdict.headline
    assert headline.startswith("do not distribute") or (headline.startswith("use ")
                                                        and "sim/" in headline)
    assert validation_errors(validation) == {"step": pytest.approx(0.2),
                                             "collective": pytest.approx(0.9)}


def test_simulated_rows_carry_their_own_strategys_validation_error():
    validation = pd.DataFrame({"kind": ["step", "step", "step", "collective"],
                               "model": ["allreduce_ring", "parameter_server",
                                         "parameter_server", None],
                               "error": [0.05, -0.3, -0.5, 0.9]})
    errors = validation_errors(validation)
    assert errors["step:allreduce_ring"] == pytest.approx(0.05)
    assert errors["step:parameter_server"] == pytest.approx(0.4)
    answer = recommend(measured_frame(), workloads=["mlp:M"],
                       targets=["preset:eth25_v100,hosts=4"],
                       stored=StoredInputs(simulated=sim_rows(), validation=validation))
    frame = answer.table().set_index("strategy")
    assert frame.loc["allreduce_ring", "validation_error"] == pytest.approx(0.05)
    assert frame.loc["parameter_server", "validation_error"] == pytest.approx(0.4)
    assert frame.loc["fsdp", "validation_error"] == pytest.approx(0.3)  # all steps' median


def test_user_price_applies_to_measured_targets():
    answer = recommend(measured_frame(), workloads=["mlp:M"], targets=[NETNS], price=2.0,
                       samples=1e6)
    frame = answer.table()
    ddp = frame[frame["strategy"] == "ddp"].iloc[0]
    assert ddp["cost_usd"] == pytest.approx(1e6 / (128 / 0.30) * 2 / 3600 * 2.0)
    assert "$" in format_table(answer)


def test_preset_hosts_expand_and_missing_simulations_run():
    targets = parse_targets(["preset:dgx_h100_ib,hosts=1|2", "local"])
    assert [(t.kind, t.devices) for t in targets] == [("topology", 8), ("topology", 16),
                                                      ("measured", 1)]
    answer = recommend(pd.DataFrame(), workloads=["recsys:S"],
                       targets=["preset:dgx_h100_ib,hosts=1"])
    frame = answer.table()
    assert len(frame) >= 4 and set(frame["source"]) == {"simulated"}
    assert frame["cost_usd"].notna().all()  # the preset's price per device-hour


@pytest.mark.parametrize("kwargs", [
    {"targets": ["bogus"]}, {"targets": ["preset:nope,hosts=2"]},
    {"workloads": ["nope:Q"]}, {"samples": 0}, {"price": -1.0},
])
def test_bad_input_is_an_input_error(kwargs):
    args = {"workloads": ["mlp:M"], "targets": [NETNS]} | kwargs
    with pytest.raises(InputError):
        recommend(measured_frame(), **args)


def test_no_workloads_at_all_is_an_input_error():
    with pytest.raises(InputError, match="--workload"):
        recommend(pd.DataFrame(), targets=["local"])


def test_from_store_and_cli_json(tmp_path):
    store = ResultsStore(tmp_path)
    store.start_run({"memory_bytes": 8e9}, run_id="r1")
    for r in measured_frame().to_dict("records"):
        store.write_case(ResultRow.from_dict(r))
    answer = recommend_from_store(tmp_path, workloads=["mlp:M"], targets=[NETNS])
    frame = answer.table()
    assert frame.iloc[0]["device_memory_bytes"] == 8e9  # this machine's RAM, one replica
    assert frame.iloc[1]["device_memory_bytes"] == 4e9  # shared by two
    proc = stratbench("recommend", "--results",
                           str(tmp_path), "--workload", "mlp:M", "--target", NETNS, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ranking"][0]["strategy"] == "single_device"
    assert data["ranking"][0]["source"] == "measured"
    assert data["verdicts"][0]["headline"].startswith("do not distribute")
    bad = stratbench("recommend", "--results",
                          str(tmp_path), "--target", "bogus")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "unknown target" in bad.stderr


CHECKED_IN = Path(__file__).parent.parent / "validation" / "2026-11-24-recommend"


def test_a_workload_too_small_to_distribute_gets_one_device_and_why():
    answer = recommend_from_store(CHECKED_IN, workloads=["mlp:S"],
                                  targets=["netns:hosts=4,rate=250mbit"])
    (verdict,) = answer.verdicts
    assert verdict.status == "ok" and verdict.pick.replicas == 1
    assert verdict.headline.startswith("do not distribute")
    assert "the fastest distributed option" in verdict.why
    # what decided: slower than the pick, another framework's one device, named as such
    assert verdict.decided_by.rule == "slower_than_one_device"
    assert "slower than tf/one_device on 1 device, the pick," in verdict.why


def test_a_tiny_model_on_gpus_is_timed_by_its_kernel_launches_not_its_flops():
    """mlp:S's FLOPs take nanoseconds on an H100; its step is its kernels' launches (the
    device model's floor), so no candidate steps faster than one device's launch-bound
    step, and the verdict weighs the exchange against that step."""
    answer = recommend_from_store(CHECKED_IN, workloads=["mlp:S"],
                                  targets=["preset:dgx_h100_ib,hosts=2"])
    (verdict,) = answer.verdicts
    sweep = answer.sweep_frame()
    ok = sweep[sweep["status"] == "ok"]
    step = 64 * ok["replicas"] / ok["throughput_samples_s"]  # batch 64 per replica
    single = step[ok["replicas"] == 1].min()
    assert single >= 100e-6  # 26 kernels of 5 us: not the 145 ns its FLOPs would take
    assert (step >= 100e-6 * 0.999).all()  # forward and backward's 20 launches, every layout
    assert verdict.status == "ok" and "scaling efficiency" in verdict.why


def test_described_cluster_with_a_budget_answers_device_count_time_cost_reason_error():
    target = "two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit"
    validation = pd.DataFrame({"kind": ["step"] * 2, "model": ["allreduce_ring"] * 2,
                               "error": [0.05, -0.07]})
    answer = recommend(load(CHECKED_IN), workloads=["mlp:M"], targets=[target], budget=50.0,
                       stored=StoredInputs(validation=validation))
    frame = answer.table()
    (verdict,) = answer.verdicts
    assert verdict.status == "ok" and verdict.constraint == "budget $50.00"
    pick = verdict.pick
    assert pick.replicas in (1, 2, 4, 8, 16, 24) and pick.cost_usd <= 50
    assert math.isfinite(pick.train_time_s) and pick.reason
    ring = frame[frame["strategy"] == "allreduce_ring"].iloc[0]
    assert ring["validation_error"] == pytest.approx(0.06)
    sweep = answer.sweep_frame()
    assert sorted(set(sweep["replicas"])) == [1, 2, 4, 8, 16, 24]  # whole hosts past one
    assert sweep["pareto"].any() and sweep["picked"].sum() == len(frame)
    text = format_table(answer)
    assert text.startswith(f"mlp:M on {target} (budget $50.00)\n  -> use ")


def test_budget_and_deadline_pick_and_refuse():
    target = "two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit"
    measured = load(CHECKED_IN)
    cheap_answer = recommend(measured, workloads=["mlp:M"], targets=[target], deadline_s=3600 * 24)
    (verdict,) = cheap_answer.verdicts  # a whole day: the cheapest that makes it
    sweep = cheap_answer.sweep_frame()
    in_time = sweep[(sweep["train_time_s"] <= 86400) & (sweep["status"] == "ok")]
    assert verdict.pick.cost_usd == pytest.approx(in_time["cost_usd"].min())
    with pytest.raises(InputError, match=r"nothing meets the budget \$0.00.*over the budget"):
        recommend(measured, workloads=["mlp:M"], targets=[target], budget=1e-4)
    with pytest.raises(InputError, match="does not fit"):
        recommend(measured, workloads=["gpt3_175b"], targets=[target], device="eth25_v100")
    with pytest.raises(InputError, match="unknown workload 'nosuchmodel'"):
        recommend(measured, workloads=["nosuchmodel"], targets=[target])
    with pytest.raises(InputError, match="--device"):
        recommend(measured, workloads=["mlp:M"], targets=[target], device="nope")


def test_known_model_is_recommended_with_no_results_at_all():
    answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                       targets=["preset:dgx_h100_ib,hosts=1|2"])
    verdicts = answer.verdicts
    assert [v.status for v in verdicts] == ["ok", "ok"]
    assert all(v.pick.source == "simulated" for v in verdicts)


def test_catalog_models_need_no_framework(tmp_path):
    """`pip install stratbench` (no extras): simulate and recommend a known model with both
    frameworks made unimportable."""
    script = (
        "import sys\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'tensorflow', 'keras'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from harness.cli import main\n"
        "sys.argv = ['stratbench'] + sys.argv[1:]\n"
        "main()\n")
    for args in (["simulate", "--topology", "preset:dgx_h100_ib,hosts=2", "--workers", "16",
                  "--workload", "resnet50"],
                 ["recommend", "--workload", "resnet50", "--target",
                  "preset:eth25_v100,hosts=4", "--results", str(tmp_path)]):
        proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "allreduce_ring" in proc.stdout


def test_emulated_links_are_the_probed_ones_and_unshaped_is_not_40_gbit():
    from harness.recommend.candidates import Context, probed_links
    from harness.recommend.targets import parse_targets as targets_of

    def net(cluster, configured, got, rtt=1e-4):
        return {"cluster": cluster, "burst_bytes": 16384,
                "links": [{"configured_bits_s": configured, "throughput_bits_s": got,
                           "rtt_median_s": rtt}]}

    ctx = Context(measured=pd.DataFrame(), networks=[
        net("netns:hosts=2,rate=unshaped", 40e9, 19.3e9),
        net("netns:hosts=2,rate=100mbit", 100e6, 95e6)])
    (unshaped,) = targets_of(["netns:hosts=4,rate=unshaped"])
    assert probed_links(ctx, unshaped).bandwidth_bytes_s * 8 == pytest.approx(19.3e9)
    (other,) = targets_of(["netns:hosts=4,rate=400mbit"])  # never probed at this rate
    links = probed_links(ctx, other)
    assert links.bandwidth_bytes_s * 8 == pytest.approx(400e6 * 0.95)  # what probes reached
    assert links.rtt_s == pytest.approx(1e-4) and "spec rate" in links.source


def test_a_workload_never_run_here_takes_this_machines_measured_flop_rate():
    answer = recommend(load(CHECKED_IN), workloads=["mlp:L"],
                       targets=["two_level:hosts=2,gpus=4,intra=300GB/s,inter=25Gbit"])
    frame = answer.table()
    notes = set(frame["compute_note"])
    assert len(notes) == 1 and "mlp:M at" in notes.pop()  # the same family, measured here
    one = frame[frame["strategy"] == "single_device"].iloc[0]
    from workloads import parse_workload

    spec_l, spec_m = parse_workload("mlp:L"), parse_workload("mlp:M")
    m = load(CHECKED_IN)
    m_row = m[(m["workload"] == "mlp") & (m["size"] == "M") & (m["framework"] == "torch")
              & (m["cluster"] == "local")].iloc[0]
    rate = spec_m.flops_per_sample * m_row["global_batch"] / m_row["step_time_median_s"]
    assert one["step_time_s"] == pytest.approx(spec_l.flops_per_sample * spec_l.batch_size
                                               / rate)


FIXTURE = Path(__file__).parent / "fixtures" / "user_workload.py"


def test_a_users_model_before_any_run_needs_a_run_or_a_declared_size(tmp_path):
    with pytest.raises(InputError, match="has no size yet: run it once"):
        recommend(pd.DataFrame(), workloads=[f"{FIXTURE}:torch_workload"],
                  targets=["preset:dgx_h100_ib,hosts=1"])
    declared = tmp_path / "declared.py"
    declared.write_text(
        f"import sys\nsys.path.insert(0, {str(FIXTURE.parent)!r})\n"
        "from dataclasses import replace\n"
        "import user_workload\n"
        "def make():\n"
        "    return replace(user_workload.torch_workload(), name='declared', params=74)\n")
    answer = recommend(pd.DataFrame(), workloads=[f"{declared}:make"],
                       targets=["preset:dgx_h100_ib,hosts=1"])
    frame = answer.table()
    (verdict,) = answer.verdicts
    assert verdict.status == "ok" and verdict.pick.source == "simulated"
    # a user's torch module: only torch's strategies run it, never TensorFlow's
    named = [label for r in frame.to_dict("records") if r["framework"] == "sim"
             and isinstance(r.get("runs_as"), str) for label in r["runs_as"].split(" or ")
             if label]
    assert named and all(label.startswith("torch ") for label in named), named


def _cli(*args: str) -> subprocess.CompletedProcess:
    return stratbench(*args)


@pytest.mark.parametrize("factory, baseline, name", [
    ("torch_workload", "single_device", "tiny-torch"),
    ("keras_application", "one_device", "mobilenet_v2-0.35"),  # keras.applications, no weights
])
@pytest.mark.long
def test_a_users_model_after_one_measured_run_is_recommended_on_a_preset_and_a_described_topology(
        tmp_path, factory, baseline, name):
    """One measured run sizes a user's model (its gradient bytes) and times its compute: from
    then on it is simulated and recommended on any target like a built-in family."""
    workload = f"{FIXTURE}:{factory}"
    framework = "torch" if baseline == "single_device" else "tf"
    ran = _cli("run", "--framework", framework, "--strategy", baseline, "--workload", workload,
               "--steps", "3", "--warmup", "1", "--repeats", "1", "--results", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    (measured,) = load(tmp_path).to_dict("records")
    assert measured["status"] == "ok" and measured["grad_bytes"] > 0, measured["reason"]
    assert measured["workload"] == name
    # what the backward reads of one forward (autograd's saved tensors, TF's gradient graph):
    # a described device's memory counts it
    from harness.calibrate.workload import workload_facts

    facts = workload_facts(workload, load(tmp_path))
    assert facts.activation_bytes_per_sample and facts.activation_bytes_per_sample > 0
    for target in ("preset:dgx_h100_ib,hosts=2",
                   "two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit"):
        proc = _cli("recommend", "--results", str(tmp_path), "--workload", workload,
                    "--target", target, "--json")
        assert proc.returncode == 0, proc.stderr
        (verdict,) = json.loads(proc.stdout)["verdicts"]
        assert verdict["status"] == "ok", verdict
        assert verdict["workload"] == workload and verdict["pick"]["reason"]
        if target.startswith("preset:"):
            # the run traced its operators (torch's dispatcher, TF's graph): an H100's
            # compute is the device model's, not this machine's CPU time (issue 36)
            assert measured["extra"]["operators"]
            ranking = json.loads(proc.stdout)["ranking"]
            assert all("device model" in r["compute_note"] for r in ranking), ranking[0]
            # only the model's own framework's strategies run it
            assert all(label.startswith(f"{framework} ") for r in ranking
                       if isinstance(r.get("runs_as"), str)
                       for label in r["runs_as"].split(" or ") if label), ranking
        assert math.isfinite(verdict["pick"]["train_time_s"])
        assert verdict["pick"]["cost_usd"] > 0
    sim = _cli("simulate", "--results", str(tmp_path), "--workload", workload, "--topology",
               "two_level:hosts=2,gpus=4,intra=300GB/s,inter=25Gbit", "--workers", "8",
               "--json")
    assert sim.returncode == 0, sim.stderr
    rows = json.loads(sim.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert rows and all(r["status"] == "ok" for r in rows)
    assert {float(r["step_time_median_s"]) > 0 for r in rows} == {True}


def test_a_model_no_device_holds_gets_the_model_parallel_layout_that_fits():
    """GPT-2 XL (1.56e9 parameters, fp32 + Adam: 25 GB before activations) on 16 GB V100s:
    no data-parallel strategy fits but FSDP with every layer checkpointed, so the answer is a
    pipeline/tensor layout that does, named with its degrees, memory per device and
    bubble."""
    answer = recommend(pd.DataFrame(), workloads=["gpt2_xl"],
                       targets=["preset:eth25_v100,hosts=4"])
    frame = answer.table()
    (verdict,) = answer.verdicts
    assert verdict.status == "ok"
    top = frame.iloc[0]
    assert top["exchange"] == "model_parallel" and bool(top["fits"])
    assert "pp=" in top["layout"] and top["memory_per_device_bytes"] <= 16e9
    assert top["reason"].startswith("split, as one replica does not fit a device")
    assert f"[{top['layout']}]" in verdict.headline
    data_parallel = frame[frame["exchange"] != "model_parallel"]
    fitting = data_parallel[data_parallel["fits"]]
    assert set(fitting["strategy"]) == {"fsdp"}
    assert set(fitting["layout"]) == {"every layer checkpointed"}


@pytest.mark.parametrize("devices, per_host", [(8, 8), (16, 4), (32, 8)])
def test_candidate_layouts_split_the_devices_exactly_and_keep_tensor_groups_on_a_host(
        devices, per_host):
    from harness.recommend.model_parallel import candidate_layouts
    from harness.sim.model.layered import check_layout
    from harness.sim.model.structure import layered

    model = layered("gpt3_175b")
    layouts = candidate_layouts(model, devices, per_host, devices)
    assert layouts and all(layout.devices == devices for layout in layouts)
    assert all(layout.tensor <= per_host and (layout.stages, layout.tensor) != (1, 1)
               for layout in layouts)
    for layout in layouts:
        check_layout(model, layout, devices)  # raises if the model could not take it


def test_a_run_whose_weights_did_not_match_one_device_says_so_first():
    measured = measured_frame()
    ps = measured.index[(measured["strategy"] == "parameter_server")
                        & (measured["workload"] == "mlp")][0]
    measured.at[ps, "extra"] = {"weights_match": False}
    measured.at[ps, "max_weight_diff"] = 3.7e-4
    answer = recommend(measured, workloads=["mlp:M"], targets=[NETNS])
    frame = answer.table()
    reasons = dict(zip(frame["strategy"], frame["reason"], strict=True))
    assert reasons["parameter_server"].startswith(
        "weights ended 3.7e-04 from one device's (tolerance 1e-04)")
    assert not reasons["ddp"].startswith("weights")


def test_the_run_line_flags_a_weight_mismatch():
    from harness.commands.run import _row_line

    r = ResultRow.from_dict(row("parameter_server", 0.5) | {"max_weight_diff": 3.7e-4,
                                                            "extra": {"weights_match": False}})
    assert "max weight diff 3.7e-04 MISMATCH" in _row_line(r)
    r.extra = {"weights_match": True}
    assert "MISMATCH" not in _row_line(r)


@pytest.mark.parametrize("target, device, kind", [
    ("two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit", "dgx_h100_ib", "gpu"),
    ("preset:dgx_h100_ib,hosts=2", None, "gpu"),
    ("torus:dims=4x4,bw=50GB/s,lat=1us", "tpu_v4_cube", "tpu"),
    ("preset:tpu_v4_cube", None, "tpu"),
])
def test_verdicts_name_strategies_that_run_on_the_targets_devices(target, device, kind):
    """A user acts on a framework's strategy that runs on their devices, not on a simulator
    name: on GPUs never TPUStrategy; on TPUs only strategies that train on TPUs; the
    simulator's name beside as what was simulated."""
    from harness.core.stacks import MAXTEXT
    from harness.core.strategies import strategy

    answer = recommend(pd.DataFrame(), workloads=["resnet50", "gpt2_xl"], targets=[target],
                       device=device)
    frame = answer.table()
    sims = frame[frame["framework"] == "sim"]
    assert not sims.empty
    for _, row in sims.iterrows():
        if row["strategy"] == "single_device":
            continue
        named = [part.strip() for part in str(row["runs_as"]).split(" or ") if part.strip()]
        for label in named:
            if label == MAXTEXT.name:  # a sharded model on TPUs
                assert kind == "tpu", (row["strategy"], label)
                continue
            framework, _, rest = label.partition(" ")
            for name in rest.split(" + "):
                assert kind in strategy(framework, name).devices, (row["strategy"], label)
    verdicts = answer.verdicts
    assert verdicts
    for verdict in verdicts:
        text = " ".join((verdict.headline, verdict.why))
        if kind == "gpu":
            assert "tf tpu" not in text, text
        if "sim/" in text and "sim/single_device" not in text:
            assert "(simulated as sim/" in text or "no framework strategy runs it" in text


def test_a_model_sharded_on_tpus_is_answered_with_the_stack_that_shards_it_there():
    """No runner here shards a model on TPUs (TPUStrategy replicates it): a split or FSDP
    candidate there names MaxText and the mesh axes that set it, and the runner-up is
    another layout, not the same stack again."""
    answer = recommend(pd.DataFrame(), workloads=["llama3_8b"], targets=["preset:tpu_v5p"],
                       precision="bf16")
    frame = answer.table()
    (verdict,) = answer.verdicts
    assert verdict.status == "ok"
    assert verdict.headline.startswith("use MaxText (JAX) (simulated as sim/")
    assert "next: MaxText (JAX) (simulated as sim/" in verdict.why
    sharded = frame[(frame["framework"] == "sim") & frame["strategy"].isin(["fsdp"])
                    | frame["strategy"].str.contains("pipeline|tensor")]
    assert not sharded.empty and set(sharded["runs_as"]) == {"MaxText (JAX)"}
    from harness.core.stacks import stacks_running

    assert stacks_running(["data", "pipeline", "context"], "tpu") == (
        "MaxText (JAX)", "MaxText (JAX) ici_data_parallelism, ici_pipeline_parallelism, "
                         "ici_context_parallelism")
    assert stacks_running(["data"], "tpu") == ("", "")  # TPUStrategy runs plain replicas


def test_a_gpu_clusters_simulated_all_reduce_names_ddp_not_tpustrategy():
    answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                       targets=["two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit"],
                       device="dgx_h100_ib")
    frame = answer.table()
    hierarchical = frame[frame["strategy"] == "allreduce_hierarchical"]
    assert set(hierarchical["runs_as"]) == {"torch ddp"}
    sweep = answer.sweep_frame()
    tf_loop = sweep[sweep["strategy"] == "allreduce_after_backward"]
    # MirroredStrategy all-reduces one host's GPUs; across hosts it is MultiWorkerMirrored
    assert set(tf_loop[tf_loop["replicas"] <= 4]["runs_as"]) == {
        "tf mirrored or tf multi_worker_mirrored"}
    assert set(tf_loop[tf_loop["replicas"] > 4]["runs_as"]) == {"tf multi_worker_mirrored"}
    torus_answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                             targets=["torus:dims=4x4,bw=50GB/s,lat=1us"], device="tpu_v4_cube")
    torus = torus_answer.table()
    assert set(torus[torus["strategy"] == "allreduce_hierarchical"]["runs_as"]) == {"tf tpu"}


def test_no_measured_label_without_a_run_of_that_workload_and_strategy():
    """An emulated cluster predicted for a workload never run here: its one-device baseline
    comes from another workload's speed, so it says 'estimated', never 'measured'."""
    measured = load(CHECKED_IN)
    assert not (measured["workload"] + ":" + measured["size"] == "mlp:L").any()
    answer = recommend(measured, workloads=["mlp:L"], targets=["netns:hosts=4,rate=250mbit"])
    frame = answer.table()
    sweep = answer.sweep_frame()
    assert "measured" not in set(sweep["source"])
    baselines = frame[frame["replicas"] == 1]
    assert len(baselines) and set(baselines["source"]) == {"estimated"}
    assert all("estimated from FLOPs" in note for note in baselines["compute_note"])
    ran_answer = recommend(measured, workloads=["mlp:M"], targets=["netns:hosts=4,rate=250mbit"])
    ran = ran_answer.table()
    assert "measured" in set(ran[ran["replicas"] == 1]["source"])


# A global batch -----------------------------------------------------------------------------


def test_accumulating_micro_batches_adds_compute_or_whole_steps_for_fsdp():
    """DDP, all-reduce and parameter-server workers sum their micro-batches' gradients and
    exchange once; FSDP gathers and reduce-scatters with every micro-batch, and embedding
    sharding sends every micro-batch's lookups."""
    from harness.sim.step.data_parallel import accumulated_step

    assert accumulated_step("allreduce_ring", 1.0, 0.6, 0.1, 4) == pytest.approx(1.0 + 3 * 0.6)
    assert accumulated_step("parameter_server", 1.0, 0.6, 0.1, 4) == pytest.approx(2.8)
    assert accumulated_step("fsdp", 1.0, 0.6, 0.1, 4) == pytest.approx(4 * 0.9 + 0.1)
    assert accumulated_step("fsdp", 1.0, 0.6, 0.1, 1) == 1.0
    # embedding sharding looks its rows up with every micro-batch
    assert accumulated_step("embedding_sharding", 1.0, 0.6, 0.1, 4) == pytest.approx(3.7)
    # each micro-batch after the first adds its gradients into the sum (torch's
    # AccumulateGrad); FSDP adds only its shard, not counted
    assert accumulated_step("allreduce_ring", 1.0, 0.6, 0.1, 4, add_s=0.05) == pytest.approx(
        1.0 + 3 * 0.65)
    assert accumulated_step("fsdp", 1.0, 0.6, 0.1, 4, add_s=0.05) == pytest.approx(3.7)


def test_the_gradient_add_is_paid_where_the_device_model_times_the_step_only():
    """Three fp32 copies of the dense gradients a micro-batch on the device's memory; a
    stated (or measured) step is one micro-batch's on a machine whose bandwidth is unknown."""
    from harness.sim.systems.calibration import (
        Calibration,
        accumulation_add_seconds,
        stating,
    )
    from harness.sim.systems.device_model import device_rate
    from harness.sim.systems.preset import load_preset
    from workloads.execution import Execution
    from workloads.known import get_known

    device = load_preset("dgx_a100").device
    calibration = Calibration(device=device)
    spec = get_known("bert_large").spec()
    add = accumulation_add_seconds(spec, calibration, Execution(precision="tf32"))
    rate = device_rate(device, "tf32").bytes_per_s
    assert add == pytest.approx(3 * 4 * spec.params / rate, rel=0.01)
    assert accumulation_add_seconds(spec, stating(calibration, compute_s=0.1)) == 0.0
    assert accumulation_add_seconds(spec, None) == 0.0


def test_a_global_batch_is_every_data_parallel_candidates_step():
    """With --global-batch every configuration trains G samples a step: a replica's share
    in micro-batches of the workload's batch (resnet50: 32), accumulated, DDP exchanging
    once a step and FSDP with every micro-batch; a count that does not divide G has no
    data-parallel row."""
    def sweep(g: int) -> pd.DataFrame:
        answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                           targets=["preset:dgx_a100,hosts=4"], global_batch=g)
        (verdict,) = answer.verdicts
        assert f"global batch {g}" in verdict.constraint
        points = answer.sweep_frame()
        ok = points[points["status"] == "ok"]
        steps = ok[ok["strategy"] != "parameter_server_async"]  # no step: workers' own pace
        assert (steps["throughput_samples_s"] * steps["step_time_s"]).round(6).eq(g).all()
        return ok.set_index(["strategy", "replicas"])

    once, sixteen = sweep(1024), sweep(16384)  # 32 devices: 1 and 16 micro-batches of 32
    ddp, ddp16 = once.loc[("allreduce_ring", 32)], sixteen.loc[("allreduce_ring", 32)]
    assert ddp16["layout"] == "16 micro-batches of 32 accumulated"
    assert ddp16["step_time_s"] > 10 * ddp["step_time_s"]
    exposed = ddp["comm_fraction"] * ddp["step_time_s"]
    assert ddp16["comm_fraction"] * ddp16["step_time_s"] == pytest.approx(exposed)
    fsdp, fsdp16 = once.loc[("fsdp", 32)], sixteen.loc[("fsdp", 32)]
    assert fsdp16["comm_fraction"] * fsdp16["step_time_s"] == pytest.approx(
        16 * fsdp["comm_fraction"] * fsdp["step_time_s"])
    odd = recommend(pd.DataFrame(), workloads=["resnet50"], targets=["preset:dgx_a100,hosts=4"],
                    global_batch=1000).sweep_frame()
    assert set(odd[odd["strategy"] != "single_device"]["replicas"]) <= {2, 4, 8}


def test_a_sparse_model_accumulating_micro_batches_pushes_the_rows_they_all_touched():
    """recsys:M (batch 128) on 32 devices, 1 and 16 micro-batches a step: a parameter-server
    worker pushes the union of the rows its micro-batches touched once a step, so its
    exchange grows (the Zipf count: 0.9% of the gradient to 5.8%), where DDP's dense
    all-reduce stays one exchange of the same bytes and the same exposed time."""
    def sweep(g: int) -> pd.DataFrame:
        points = recommend(pd.DataFrame(), workloads=["recsys:M"],
                           targets=["preset:dgx_a100,hosts=4"], global_batch=g).sweep_frame()
        return points[points["status"] == "ok"].set_index(["strategy", "replicas"])

    once, sixteen = sweep(32 * 128), sweep(16 * 32 * 128)

    def exposed(frame: pd.DataFrame, strategy: str) -> float:
        row = frame.loc[(strategy, 32)]
        return float(row["comm_fraction"] * row["step_time_s"])

    assert exposed(sixteen, "allreduce_ring") == pytest.approx(exposed(once, "allreduce_ring"),
                                                               rel=1e-9)
    assert exposed(sixteen, "parameter_server") > 3 * exposed(once, "parameter_server")


def test_a_global_batch_is_every_layouts_step():
    long = "transformer:layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=32000,seq=8192"
    answer = recommend(pd.DataFrame(), workloads=[long], targets=["preset:dgx_h100_ib,hosts=4"],
                       precision="bf16", global_batch=64)
    sweep = answer.sweep_frame()
    split = sweep[sweep["strategy"].str.contains("pipeline|tensor")]
    assert not split.empty
    assert (split["throughput_samples_s"] * split["step_time_s"]).round(6).eq(64).all()


@pytest.mark.parametrize("kwargs, said", [
    ({"global_batch": 0}, "--global-batch must be a whole number of samples >= 1"),
    ({"global_batch": 8, "targets": ["local"]},
     "--global-batch applies to described clusters"),
])
def test_a_bad_global_batch_is_one_line(kwargs, said):
    from harness.core.errors import InputError

    with pytest.raises(InputError, match=said) as err:
        recommend(pd.DataFrame(), **({"workloads": ["resnet50"],
                                      "targets": ["preset:dgx_a100,hosts=1"]} | kwargs))
    assert "\n" not in str(err.value)


def test_a_project_target_may_name_its_global_batch(tmp_path):
    from harness.core.errors import InputError
    from harness.core.project import load_project

    path = tmp_path / "stratbench.toml"
    path.write_text('workloads = ["resnet50"]\n'
                    'targets = [{ target = "preset:dgx_a100,hosts=1", global_batch = 256 }]\n')
    (goal,) = load_project(path).targets
    assert goal.global_batch == 256 and "global batch 256" in goal.describe()
    path.write_text('workloads = ["resnet50"]\n'
                    'targets = [{ target = "preset:dgx_a100,hosts=1", global_batch = 0 }]\n')
    with pytest.raises(InputError, match="global_batch must be > 0"):
        load_project(path)


def test_a_huge_global_batch_cuts_pipelines_into_at_most_8192_micro_batches():
    from harness.recommend.model_parallel import (
        MAX_MICROBATCHES,
        _microbatches,
        candidate_layouts,
    )
    from harness.sim.model.structure import layered

    assert _microbatches(64) == 64 and _microbatches(3 * 8192) == 8192
    assert _microbatches(10**8) == 8000 and _microbatches(8209) == 1  # 8,209 is prime
    model = layered("transformer:layers=16,hidden=1024,heads=16,vocab=32000,seq=2048")
    layouts = candidate_layouts(model, 64, 8, 10**8)
    assert layouts and all(1 <= layout.microbatches <= MAX_MICROBATCHES for layout in layouts)
    assert all(10**8 % (layout.data * layout.microbatches) == 0 for layout in layouts)


def test_a_described_gpu_carries_the_device_models_error_on_its_published_runs(
        device_comparison):
    """Issue 36's corpus referees a described GPU cluster: a recommendation on a system the
    corpus holds runs of carries their out-of-the-box error, and the sure line names them; a
    system and precision it holds none of stays unvalidated, borrowing no other's error."""
    from statistics import median

    from harness.validate.devices import published_check

    _, records = device_comparison
    errors = [abs(r["out_of_box_error"]) for r in records if r["group"] == "dgx_h100_ib/bf16"]
    check = published_check("dgx_h100_ib", "bf16")
    assert check is not None and check.rows == len(errors) >= 5
    assert check.median_abs_error == pytest.approx(median(errors))
    assert check.worst_abs_error == pytest.approx(max(errors))
    answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                       targets=["preset:dgx_h100_ib,hosts=1"], precision="bf16")
    frame = answer.table()
    assert (frame["validation_error"] == check.median_abs_error).all()
    (verdict,) = answer.verdicts
    assert f"{len(errors)} published dgx_h100_ib bf16 runs" in verdict.sure
    assert published_check("dgx_a100", "bf16") is None  # the corpus's A100 bf16 is Jean Zay's
    unchecked_answer = recommend(pd.DataFrame(), workloads=["resnet50"],
                                 targets=["preset:dgx_a100,hosts=1"], precision="bf16")
    unchecked = unchecked_answer.table()
    assert unchecked["validation_error"].isna().all()


def test_an_fsdp_efficiency_over_100_percent_says_why():
    """FSDP's devices each update a shard of the weights where one device updates them all,
    so its scaling efficiency can pass 100%: the answer says so rather than leave a user to
    doubt the number."""
    answer = recommend(pd.DataFrame(), workloads=["gpt2_xl"], targets=["preset:l40s_eth,hosts=2"])
    frame = answer.table()
    fsdp = frame[(frame["strategy"] == "fsdp") & (frame["scaling_efficiency"] > 1.005)]
    assert not fsdp.empty
    assert all("over 100%: each device updates 1/" in r for r in fsdp["reason"])
    (verdict,) = answer.verdicts
    if verdict.pick.strategy == "fsdp":
        assert "; over 100%: each device updates 1/16 of the weights" in verdict.why
        assert "scaling efficiency 107%" not in verdict.why


def test_a_torus_splits_tensors_within_one_ring_of_its_first_dimension():
    """Device ids run along a torus's first dimension, so a tensor-parallel group of up to
    that many chips sits on one ring of neighbouring links, as a GPU host's sits on NVLink:
    the search offers such splits on TPUs (MaxText's ici_tensor_parallelism), never wider."""
    from harness.recommend.targets import parse_targets

    (torus,) = parse_targets(["preset:tpu_v5p"])  # 4x4x8
    assert torus.per_host == 4
    answer = recommend(pd.DataFrame(), workloads=["llama3_8b"], targets=["preset:tpu_v5p"],
                       precision="bf16")
    sweep = answer.sweep_frame()
    split = sweep[sweep["strategy"].str.contains("tensor")]
    degrees = {int(layout.split("tp=")[1].split(",")[0]) for layout in split["layout"]}
    assert not split.empty and degrees <= {2, 4}
