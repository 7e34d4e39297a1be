"""`stratbench simulate` end to end: tables, JSON rows, calibration and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from stratbench_cli import stratbench

from harness.commands.simulate import load_calibration
from results import ResultsStore


def test_simulate_json_rows_are_simulated_and_ranked_data():
    proc = stratbench("simulate", "--topology", "switch:n=8,bw=1gbit,lat=50us", "--workers",
                      "8", "--profile", "params=25M,batch=32,step_compute=50ms", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows and all(r["source"] == "simulated" for r in rows)
    ok = {r["strategy"]: r for r in rows if r["status"] == "ok"}
    assert {"allreduce_ring", "parameter_server"} <= set(ok)
    # 100 MB of gradients over 1 Gbit/s: the ring moves 2(p-1)/p x S per worker
    assert ok["allreduce_ring"]["step_time_median_s"] > 2 * 7 / 8 * 100e6 / 125e6


def test_sparse_workload_favours_the_parameter_server():
    proc = stratbench("simulate", "--topology", "switch:n=8,bw=1gbit", "--workers", "8",
                      "--profile", "params=100M,batch=128,step_compute=20ms,sparsity=0.01",
                      "--strategy", "allreduce_ring", "--strategy", "parameter_server",
                      "--json")
    assert proc.returncode == 0, proc.stderr
    t = {r["strategy"]: r["step_time_median_s"] for r in json.loads(proc.stdout)}
    assert t["parameter_server"] < t["allreduce_ring"] / 5


def test_human_table_and_bad_input():
    proc = stratbench("simulate", "--topology", "preset:dgx_h100_ib,hosts=2", "--workers", "16",
                      "--workload", "mlp:M")
    assert proc.returncode == 0, proc.stderr
    assert "allreduce_hierarchical" in proc.stdout and "step ms" in proc.stdout
    for bad in (["--topology", "mesh:n=3", "--workers", "4", "--workload", "mlp:S"],
                ["--topology", "switch:n=4,bw=1gbit", "--workers", "4"],
                ["--topology", "switch:n=4,bw=1gbit", "--workers", "4", "--workload", "x:S"]):
        proc = stratbench("simulate", *bad)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_calibration_from_a_results_directory_uses_the_measured_fit(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = store.start_run({"kind": "comm"})
    store.write_table(run_id, "calibration", "torch-local-2", pd.DataFrame([{
        "op": "all_reduce", "world": 2, "link_class": "loopback", "alpha_s": 1e-4,
        "beta_s_per_byte": 1e-9, "bandwidth_bytes_s": 1e9, "residual_rel": 0.1, "points": 8}]))
    calib = load_calibration(str(tmp_path), "switch:n=4,bw=1gbit")
    (link,) = calib.links.values()
    # a loopback fit is the library's cost, not a network: the stated 1 Gbit/s stays, the
    # fit's alpha is added to the spec's 5 us latency per message
    assert link.beta_s_per_byte == pytest.approx(8e-9) and link.source == "spec"
    assert link.alpha_s == pytest.approx(1e-4 + 5e-6)
    store.write_table(run_id, "calibration", "torch-netns-4", pd.DataFrame([{
        "op": "all_reduce", "world": 4, "link_class": "netns", "alpha_s": 2e-4,
        "beta_s_per_byte": 1e-8, "bandwidth_bytes_s": 1e8, "residual_rel": 0.1, "points": 8}]))
    (link,) = load_calibration(str(tmp_path), "switch:n=4,bw=1gbit").links.values()
    assert link.alpha_s == 2e-4 and link.beta_s_per_byte == 1e-8 and link.source == "measured"


SLOW_DENSE = ("--topology", "two_level:hosts=4,gpus=1,intra=300GB/s,inter=1Gbit",
              "--workers", "4", "--profile", "params=200M,batch=32,step_compute=500ms")


def _step(*args: str) -> float:
    proc = stratbench("simulate", *SLOW_DENSE, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    return float(row["step_time_median_s"])


def test_a_precision_halves_what_fsdp_gathers_not_what_ddp_reduces():
    """Under autocast the replicas' weights, and so DDP's gradients, stay fp32 (torch's
    bf16_compress_hook is what halves them: --bytes-per-element 2); FSDP gathers and reduces in
    the compute precision (MixedPrecisionPolicy's param_dtype)."""
    def sent(precision: str) -> dict[str, float]:
        proc = stratbench("simulate", "--topology", "preset:dgx_h100_ib,hosts=2", "--workers",
                          "16", "--workload", "resnet50", "--framework", "torch",
                          "--strategy", "ddp", "--strategy", "fsdp", "--precision", precision,
                          "--json")
        assert proc.returncode == 0, proc.stderr
        return {r["strategy"]: float(r["bytes_per_step"]) for r in json.loads(proc.stdout)}

    fp32, bf16 = sent("fp32"), sent("bf16")
    assert bf16["allreduce_ring"] == fp32["allreduce_ring"]
    assert bf16["fsdp"] == pytest.approx(fp32["fsdp"] / 2)


def test_a_deployment_as_described_framework_shards_placement_bucket_precision():
    """TF's mirrored (all-reduce after backward) and torch's DDP (buckets during backward)
    are different simulations; the PS's shards and placement, DDP's bucket and fp16
    gradients change what the step costs; an option no chosen strategy uses is refused."""
    mirrored = _step("--framework", "tf", "--strategy", "mirrored")
    ddp = _step("--framework", "torch", "--strategy", "ddp")
    assert ddp < mirrored  # DDP hides its first buckets under the rest of backward
    assert _step("--framework", "torch", "--strategy", "ddp", "--bytes-per-element", "2") \
        < 0.6 * ddp
    assert _step("--framework", "torch", "--strategy", "ddp", "--bucket", "200MiB") > ddp
    dedicated = _step("--strategy", "parameter_server", "--ps-shards", "1")
    spread = _step("--strategy", "parameter_server", "--ps-shards", "4",
                   "--ps-placement", "colocated")
    assert spread < dedicated
    for args in (["--strategy", "ddp", "--ps-shards", "2"],
                 ["--strategy", "ddp", "--ps-placement", "colocated"],
                 ["--strategy", "parameter_server", "--bucket", "10MiB"]):
        bad = stratbench("simulate", *SLOW_DENSE, *args)
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.strip().count("\n") == 0 and "applies to" in bad.stderr


def test_framework_picks_that_frameworks_own_measured_compute(tmp_path):
    """TF's and torch's kernels differ: `simulate --framework tf` takes TF's one-device run,
    not torch's."""
    from harness.commands.simulate import _profile
    from results.schema import ResultRow
    from results.store import ResultsStore

    store = ResultsStore(tmp_path)
    run_id = store.start_run({"kind": "run"})
    for framework, strategy, step in (("torch", "single_device", 0.129),
                                      ("tf", "one_device", 0.077)):
        store.write_case(ResultRow(
            run_id=run_id, case_id=f"{framework}/{strategy}/mlp:S/local/1",
            framework=framework, strategy=strategy, workload="mlp", size="S", cluster="local",
            replicas=1, status="ok", global_batch=64, step_time_median_s=step), None)
    topo = "switch:n=4,bw=1Gbit"
    for framework, step in (("tf", 0.077), ("torch", 0.129), (None, 0.129)):
        _, said = _profile("mlp:S", None, tmp_path, topo, None, framework)
        assert said.step_compute_s == pytest.approx(step), framework


def test_tf_parameter_server_reads_variables_whole_where_torch_pulls_changed_rows():
    """As measured on the wire: TF's ParameterServerStrategy moves whole variables back to a
    worker, the torch RPC servers only the rows some worker changed."""
    from click.testing import CliRunner

    from harness.cli import cli

    args = ["simulate", "--topology", "switch:n=4,bw=10Gbit", "--workers", "4", "--profile",
            "params=10M,batch=32,step_compute=10ms,sparsity=0.01", "--strategy",
            "parameter_server", "--json"]
    rows = {fw: json.loads(CliRunner().invoke(cli, [*args, "--framework", fw]).output)[0]
            for fw in ("tf", "torch")}
    assert rows["tf"]["bytes_per_step"] > 10 * rows["torch"]["bytes_per_step"]


def test_an_emulated_cluster_is_simulated_as_validate_predicts_its_runs(tmp_path):
    """--topology netns:...: the same prediction `validate` scores against the runs of that
    cluster (the checked-in wire data: 4 hosts at 250 Mbit/s), TF's mirrored run as what it
    is across hosts; a worker count the cluster cannot hold is one line and exit 2."""
    import shutil

    from harness.validate.score import validate_steps

    wire_data = Path(__file__).parent.parent / "validation" / "2026-11-25-wire"
    data = tmp_path / "wire"
    shutil.copytree(wire_data, data)
    steps = validate_steps(ResultsStore(data))
    steps = steps[(steps["kind"] == "step")
                  & (steps["cluster"] == "netns:hosts=4,rate=250mbit")]
    predicted = dict(zip(steps["what"], steps["predicted_s"], strict=True))
    for framework, strategy, real in (("tf", "mirrored", "multi_worker_mirrored"),
                                      ("torch", "ddp", "ddp")):
        proc = stratbench("simulate", "--topology", "netns:hosts=4,rate=250mbit", "--workers",
                          "4", "--workload", "mlp:M", "--framework", framework, "--strategy",
                          strategy, "--results", str(data), "--json")
        assert proc.returncode == 0, proc.stderr
        (row,) = json.loads(proc.stdout)
        assert row["strategy"] == f"{framework}:{real}"
        # validate takes each run's own probe; simulate the median of this cluster's probes
        assert row["step_time_median_s"] == pytest.approx(
            predicted[f"{framework}/{real}/mlp:M"], rel=1e-3)
    proc = stratbench("simulate", "--topology", "netns:hosts=4,rate=250mbit", "--workers", "6",
                      "--workload", "mlp:M", "--results", str(data))
    assert proc.returncode == 2 and "one worker on each of its 4 hosts" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_tf_and_torch_on_a_slow_cluster_differ_by_what_their_runs_differ_by(tmp_path):
    """Issue 19: mirrored (TF, across hosts: multi_worker_mirrored) and ddp (torch) on mlp:M,
    4 emulated hosts at 100 Mbit/s, 300 Mbit/s and 1 Gbit/s, against the checked-in runs:
    TF slower at every rate, by the measured difference within 10% of the step (the runs'
    own p10-p90 spread is 3-8% of it). Before each library's share of the links was read
    off its sweep on the cluster, the difference came out +50 ms at every rate, where the
    runs differ by +90, +119 and +58 ms."""
    import shutil

    from results.store import load

    data = tmp_path / "steps"
    shutil.copytree(Path(__file__).parent.parent / "validation" / "2026-11-25-steps",
                    data)
    runs = load(data)
    runs = runs[(runs["status"] == "ok") & (runs["workload"] == "mlp") & (runs["size"] == "M")]
    for rate in ("100mbit", "300mbit", "1gbit"):
        cluster = f"netns:hosts=4,rate={rate}"
        measured = runs[runs["cluster"] == cluster].set_index("strategy")["step_time_median_s"]
        step = {}
        for framework, strategy in (("tf", "mirrored"), ("torch", "ddp")):
            proc = stratbench("simulate", "--topology", cluster, "--workers", "4", "--workload",
                              "mlp:M", "--framework", framework, "--strategy", strategy,
                              "--results", str(data), "--json")
            assert proc.returncode == 0, proc.stderr
            (row,) = json.loads(proc.stdout)
            assert "share of them" in row["calibration_sources"]
            step[framework] = row["step_time_median_s"]
        simulated = step["tf"] - step["torch"]
        difference = measured["multi_worker_mirrored"] - measured["ddp"]
        assert simulated > 0 and difference > 0
        assert abs(simulated - difference) <= 0.10 * measured["ddp"], (rate, simulated,
                                                                       difference)


PROFILE = ("params=25M,batch=64,bytes=2,step_compute=120ms,sparsity=0.01,optimizer=2ms,"
           "bucket=50MiB,name=rec,size=S")


def test_profile_and_workload_profile_take_the_same_keys_and_give_the_same_step():
    """One grammar for a workload as numbers: `--profile K=V,...` and `--workload
    profile:K=V,...` accept the same keys (step_time_s an alias of step_compute) and
    simulate the same step."""
    from harness.sim.model.profile import PROFILE_KEYS
    from workloads.profile import KEYS

    assert set(PROFILE_KEYS) == set(KEYS)
    assert {"params", "batch", "bytes", "flops_per_sample", "step_compute", "sparsity",
            "optimizer", "bucket", "name", "size", "step_time_s"} <= set(KEYS)
    steps = []
    for option, value in (("--profile", PROFILE), ("--workload", f"profile:{PROFILE}"),
                          ("--profile", PROFILE.replace("step_compute=120ms",
                                                        "step_time_s=0.12"))):
        proc = stratbench("simulate", "--topology", "switch:n=8,bw=10gbit,lat=5us",
                          "--workers", "8", option, value, "--json")
        assert proc.returncode == 0, proc.stderr
        steps.append({r["strategy"]: r["step_time_median_s"] for r in json.loads(proc.stdout)
                      if r["status"] == "ok"})
    assert steps[0] and steps[0] == steps[1] == steps[2]


def test_the_library_parser_and_the_clis_converter_build_the_same_profile():
    from harness.calibrate.workload import workload_facts
    from harness.sim.model.profile import for_simulation
    from workloads.profile import parse_profile, stated_by

    spec, stated = parse_profile(PROFILE)
    by_library = for_simulation(spec)
    by_cli = workload_facts(f"profile:{PROFILE}")
    for field in ("params", "batch_size", "flops_per_sample", "sparsity"):
        assert getattr(by_library, field) == getattr(by_cli, field), field
    assert stated == stated_by(f"profile:{PROFILE}") != stated_by("mlp:S")


def test_a_preset_step_names_the_device_models_error_on_its_published_runs():
    """The device model's out-of-the-box error on the corpus's runs of the system, said where
    the step used the system file's efficiency; not once --fit-step has replaced it; and on
    a system and precision the corpus holds no runs of, that nothing checked it."""
    from click.testing import CliRunner

    from harness.cli import cli

    args = ["simulate", "--topology", "preset:dgx_h100_ib,hosts=1", "--workers", "8",
            "--workload", "gpt2_xl", "--strategy", "ddp", "--precision", "bf16"]
    said = CliRunner().invoke(cli, args)
    assert said.exit_code == 0, said.output
    assert "published dgx_h100_ib bf16 runs" in said.output
    refitted = CliRunner().invoke(cli, [*args, "--fit-step", "1.0"])
    assert refitted.exit_code == 0, refitted.output
    assert "published" not in refitted.output
    other = CliRunner().invoke(cli, ["simulate", "--topology", "preset:dgx_a100,hosts=1",
                                     "--workers", "8", "--workload", "gpt2_xl", "--strategy",
                                     "ddp", "--precision", "bf16"])
    assert other.exit_code == 0, other.output
    assert "median |error|" not in other.output
    assert "against no published dgx_a100 bf16 training run" in other.output
