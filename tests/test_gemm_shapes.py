"""The GEMMs the device model times, listed for a GPU to measure and compared back: the
shapes are the model's own (recorded from its timing), the measured step reads back, and bad
input is one line."""

from __future__ import annotations

import json

import lazy
import pytest

from harness.sim.systems.device_model import device_rate, pass_times, recorded_gemms
from harness.sim.systems.preset import load_preset
from harness.validate import gemm_shapes
from harness.validate.gemm_shapes import compare, corpus_shapes, read_measured, shape_lines
from workloads import get_known

torch = lazy.module("torch")  # imported by the first test that uses it, not at collection
gemm_step = lazy.module("harness.measure.gemm_step")  # imports torch


def test_the_recorded_gemms_are_every_gemm_second_the_device_model_counts():
    rate = device_rate(load_preset("dgx_h100_ib").device, "bf16")
    ops = get_known("llama3_8b").ops
    with recorded_gemms() as calls:
        times = pass_times(ops, 2, rate, tensor=2, sequence_parallel=True)
    assert calls and times.gemm_s > 0
    assert sum(c.seconds for c in calls) == pytest.approx(times.gemm_s, rel=1e-12)
    # three calls a GEMM operator (forward, input and weight gradients); tensor parallelism
    # splits the wider side of each weight in two
    assert len(calls) % 3 == 0
    assert {c.precision for c in calls} == {"bf16"}
    with recorded_gemms() as outside:
        pass
    assert outside == []


def test_the_list_holds_the_corpus_rows_shapes_widest_first():
    shapes = corpus_shapes("dgx_h100_ib")
    rows = {row for shape in shapes.values() for row in shape.rows}
    assert "megatron2024_gpt_314b_h100_3072gpu_bf16" in rows
    lines = [json.loads(line) for line in shape_lines(shapes)]
    flops = [2 * s["m"] * s["n"] * s["k"] * s["repeat"] for s in lines]
    assert flops == sorted(flops, reverse=True) and len(lines) == len(shapes)
    assert gemm_step.read_shapes(shape_lines(shapes)) == lines
    with pytest.raises(Exception, match="no corpus row runs on"):
        corpus_shapes("eth25_v100")


def test_a_measurement_compares_back_shape_by_shape_and_row_by_row():
    """Measured at half the modelled speed everywhere: every shape and every row reads
    half the modelled efficiency."""
    shapes = corpus_shapes("dgx_h100_ib")
    lines = [json.dumps({**dict(zip(("m", "n", "k", "repeat", "precision"), key,
                                    strict=True)),
                         "status": "ok", "seconds": 2 * shape.call.seconds})
             for key, shape in shapes.items()]
    lines.append(json.dumps({"m": 1, "n": 1, "k": 1, "precision": "bf16",
                             "status": "failed", "reason": "out of memory"}))
    measured = read_measured(lines)
    assert len(measured) == len(shapes)
    per_shape, per_row = compare(shapes, measured)
    assert len(per_shape) == len(shapes)
    for shape, efficiency in per_shape:
        assert efficiency == pytest.approx(shape.modelled_efficiency / 2, rel=1e-9)
    assert per_row and all(r.measured == pytest.approx(r.modelled / 2) for r in per_row)
    # a row with a shape nobody measured is left out rather than half-counted
    missing = next(iter(shapes))
    partial = {k: v for k, v in measured.items() if k != missing}
    _, fewer = compare(shapes, partial)
    assert {r.row for r in fewer} == {r.row for r in per_row} - shapes[missing].rows


def test_a_gemm_is_timed_on_the_cpu_and_a_missing_gpu_is_said():
    row = gemm_step.measure_gemm(64, 32, 16, "fp32", device="cpu", steps=2, warmup=1)
    assert row["status"] == "ok" and row["seconds"] > 0 and row["tflops"] > 0
    assert gemm_step.measure_gemm(8, 8, 8, "bf16", repeat=3, device="cpu", steps=1,
                        warmup=0)["status"] == "ok"
    if not torch.cuda.is_available():
        assert gemm_step.measure_gemm(8, 8, 8, "bf16")["status"] == "unavailable"
    with pytest.raises(ValueError, match="unknown precision"):
        gemm_step.measure_gemm(8, 8, 8, "int4", device="cpu")


def test_bad_shape_files_are_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="shapes line 2"):
        gemm_step.read_shapes(['{"m": 1, "n": 2, "k": 3, "precision": "bf16"}', '{"m": 1}'])
    bad = tmp_path / "shapes.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(SystemExit) as exit_:
        gemm_step.main(["--shapes", str(bad), "--device", "cpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gemm_step: error: shapes line 1") and "\n" not in err
    with pytest.raises(SystemExit) as exit_:
        gemm_shapes.main(["--compare", str(tmp_path / "none.jsonl")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_one_shape_from_the_command_line(capsys):
    gemm_step.main(["--shape", "32,16,8", "--precision", "fp32", "--device", "cpu",
                    "--steps", "2", "--warmup", "0"])
    row = json.loads(capsys.readouterr().out)
    assert (row["m"], row["n"], row["k"], row["status"]) == (32, 16, 8, "ok")
