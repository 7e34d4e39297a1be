"""`stratbench devicecheck`: published models timed on a device, the device model beside."""

from __future__ import annotations

import json
import math

import pytest
from stratbench_cli import stratbench

from harness.validate.device_check import DEFAULT_BATCH, compare, system_for
from harness.validate.devices import Row, predict_step


def test_the_torch_models_are_the_ones_the_device_model_times():
    """ResNet-50, BERT-large with both heads and GPT-2 XL, built in torch on the meta device,
    hold exactly the parameters workloads.known counts from the operators it times."""
    from workloads.known import get_known
    from workloads.torch_known import MODELS, measured_model

    for name in MODELS:
        module = measured_model(name).module
        assert sum(p.numel() for p in module.parameters()) == get_known(name).params, name


def test_a_measured_gpu_row_is_predicted_as_the_corpus_predicts_its_device():
    assert system_for("NVIDIA H100 80GB HBM3") == "dgx_h100_ib"
    assert system_for("NVIDIA H200") == "hgx_h200"
    assert system_for("NVIDIA A100-SXM4-80GB") == "dgx_a100"
    assert system_for("cpu") is None
    measured = {"model": "bert_large", "precision": "bf16", "batch": 64, "seq": 128,
                "optimizer": "adam", "status": "ok", "step_s": 0.25,
                "device_name": "NVIDIA A100-SXM4-80GB"}
    (record,) = compare([measured])
    row = Row(id="x", model="bert_large", system="dgx_a100", framework="torch",
              precision="bf16", gpus=1, batch_per_gpu=64, accumulation=1, optimizer="adam",
              published={}, source={}, seq=128)
    assert record["predicted_step_s"] == pytest.approx(float(predict_step(row)["step_s"]))
    assert record["error"] == pytest.approx(record["predicted_step_s"] / 0.25 - 1)
    (elsewhere,) = compare([measured | {"device_name": "cpu"}])
    assert math.isnan(elsewhere["predicted_step_s"]) and "cpu" in elsewhere["system"]
    (failed,) = compare([measured | {"status": "failed", "step_s": math.nan}])
    assert math.isnan(failed["predicted_step_s"])


def test_bad_input_is_one_line():
    done = stratbench("devicecheck", "--models", "resnet51")
    assert done.returncode != 0 and "unknown model 'resnet51'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = stratbench("devicecheck", "--batch", "resnet50=0")
    assert done.returncode != 0 and "--batch 'resnet50=0'" in done.stderr
    assert DEFAULT_BATCH["resnet50"] == 256


def test_rows_a_bare_gpu_machine_printed_are_compared_from_their_file(tmp_path):
    """A GPU machine with torch and nothing else runs the child alone and keeps its JSON
    lines; --compare reads them back here, beside the prediction for that GPU."""
    lines = tmp_path / "device_steps.jsonl"
    row = {"model": "resnet50", "precision": "bf16", "batch": 256, "seq": None,
           "optimizer": "momentum", "status": "ok", "step_s": 0.09,
           "device_name": "NVIDIA H100 80GB HBM3", "peak_memory_bytes": 2.1e10}
    lines.write_text(json.dumps(row) + "\n\n")
    done = stratbench("devicecheck", "--compare", str(lines), "--json")
    (record,) = json.loads(done.stdout)
    assert record["system"] == "dgx_h100_ib" and record["predicted_step_s"] > 0
    lines.write_text("not a row\n")
    bad = stratbench("devicecheck", "--compare", str(lines))
    assert bad.returncode != 0 and "line 1 is not a JSON row" in bad.stderr


@pytest.mark.long
def test_each_case_runs_in_its_own_process_and_ends_in_a_stored_row(tmp_path):
    """On this machine's CPU the tool runs (it checks the tool, not a GPU): the row is
    measured and stored with the environment, read back by --compare, and with no system
    file for a CPU no prediction is made up; asked for a GPU that is not here, the case is
    an unavailable row that says so."""
    results = tmp_path / "results"
    done = stratbench("devicecheck", "--device", "cpu", "--models", "resnet50",
                      "--precisions", "fp32", "--batch", "resnet50=1", "--steps", "1",
                      "--warmup", "0", "--results", str(results), "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["status"] == "ok" and row["step_s"] > 0 and row["device_name"] == "cpu"
    assert row["predicted_step_s"] is None and "no system file" in row["system"]
    (run,) = (results / "runs").iterdir()
    assert (run / "manifest.json").is_file() and (run / "device_steps").is_dir()
    again = stratbench("devicecheck", "--compare", str(results), "--json")
    assert json.loads(again.stdout)[0]["step_s"] == pytest.approx(row["step_s"])
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        asked = stratbench("devicecheck", "--models", "resnet50", "--precisions", "bf16",
                           "--results", str(results), "--json")
        (missing,) = json.loads(asked.stdout)
        assert missing["status"] == "unavailable" and "no CUDA GPU" in missing["reason"]


@pytest.mark.gpu
def test_a_gpu_step_is_measured_with_its_peak_memory():
    from harness.measure.device_step import measure

    row = measure("resnet50", "bf16", 16, steps=2, warmup=1, device="cuda")
    assert row["status"] == "ok" and row["peak_memory_bytes"] > 0
    assert system_for(row["device_name"]) is not None or "NVIDIA" in row["device_name"]
