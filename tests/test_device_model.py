"""The device model: workloads as operators, timed on a described accelerator at a precision,
shared by every strategy, and held to published throughputs; memory as Korthikanti counts."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stratbench_cli import stratbench

from harness.calibrate.workload import workload_facts
from harness.core.errors import SpecError
from harness.sim import simulate, simulate_layout
from harness.sim.model.layered import Layout
from harness.sim.model.memory import (
    kept_activations,
    model_parallel_memory,
    replica_activation_bytes,
)
from harness.sim.model.structure import layered
from harness.sim.systems.device_model import device_rate, gemm_precision, gemm_seconds
from harness.sim.systems.preset import load_preset
from harness.validate import devices
from workloads.catalog import list_workloads
from workloads.execution import Execution
from workloads.known import get_known, known_names
from workloads.operators import total_forward_flops
from workloads.precision import PRECISIONS
from workloads.precision import precision as find_precision

A100 = load_preset("dgx_a100").device
H100 = load_preset("dgx_h100_ib").device


# Operators --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", known_names())
def test_a_known_models_operators_add_up_to_its_flops(name):
    model = get_known(name)
    assert model.ops, name
    assert 3 * total_forward_flops(model.ops) == pytest.approx(model.flops_per_sample, rel=1e-9)


def test_a_builtins_operators_add_up_to_its_flops_but_embedding_sums():
    for spec in list_workloads():
        ratio = 3 * total_forward_flops(spec.operators) / spec.flops_per_sample
        if spec.family == "recsys":  # costs counts the sum-pooling adds; lookups are no GEMM
            assert 0.95 < ratio < 1
        else:
            assert ratio == pytest.approx(1, rel=1e-9), spec.name


# Timing -----------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 1 << 16), n=st.integers(1, 1 << 14), k=st.integers(1, 1 << 14),
       precision=st.sampled_from(["fp32", "tf32", "bf16", "fp16"]))
def test_a_gemm_never_beats_its_peak_and_grows_with_its_size(m, n, k, precision):
    rate = device_rate(A100, precision)
    t = gemm_seconds(m, n, k, 1, rate)
    peak, eff = rate.gemm_peak(False)
    assert t >= 2.0 * m * n * k / (peak * eff) * (1 - 1e-12)
    assert gemm_seconds(2 * m, n, k, 1, rate) >= t * (1 - 1e-12)
    assert gemm_seconds(m, n, 2 * k, 1, rate) >= t * (1 - 1e-12)


def test_wave_quantization_a_tile_past_a_full_wave_costs_a_wave():
    """108 SMs: 12 x 9 = 108 output tiles of 128 x 128 run in one wave; one more row of
    tiles (117) takes two, twice the time for 8% more work."""
    rate = device_rate(A100, "bf16")
    k = 8192  # compute-bound
    fixed = A100.gemm_fixed_s  # every kernel's own time, whatever its waves
    one = gemm_seconds(128 * 12, 128 * 9, k, 1, rate) - fixed
    two = gemm_seconds(128 * 13, 128 * 9, k, 1, rate) - fixed
    assert two == pytest.approx(2 * one, rel=0.01)


def test_a_short_reduction_pays_its_tiles_prologue_and_epilogue():
    """The same output tiles, the reduction 16x shorter: each tile's fixed work (k0
    reduction elements' worth) weighs more against 512 than against 8192 (both
    compute-bound)."""
    rate = device_rate(H100, "bf16")
    k0, fixed = H100.gemm_k_overhead, H100.gemm_fixed_s
    assert k0 > 0 and fixed > 0
    short = gemm_seconds(8192, 8192, 512, 1, rate) - fixed
    long = gemm_seconds(8192, 8192, 8192, 1, rate) - fixed
    assert short / long == pytest.approx((512 + k0) / (8192 + k0), rel=1e-9)


def test_any_gemm_takes_at_least_the_kernels_fixed_time():
    rate = device_rate(H100, "bf16")
    assert gemm_seconds(16, 16, 16, 1, rate) >= H100.gemm_fixed_s
    assert gemm_seconds(16, 16, 16, 1, rate) < 1.01 * H100.gemm_fixed_s


def test_fp32_means_what_each_framework_computes_by_default():
    assert gemm_precision("fp32", "torch", conv=True, device=A100) == "tf32"
    assert gemm_precision("fp32", "torch", conv=False, device=A100) == "fp32"
    assert gemm_precision("fp32", "tf", conv=False, device=A100) == "tf32"
    v100 = load_preset("eth25_v100").device  # no TF32 there
    assert gemm_precision("fp32", "tf", conv=True, device=v100) == "fp32"


def test_the_loss_computes_in_fp32_whatever_the_training_precision():
    """Autocast runs log_softmax and nll_loss in fp32 and Megatron-LM casts the logits up:
    in half precision the loss moves 4-byte values plus the casts, in fp32 the same values
    and no cast."""
    from harness.sim.systems.device_model import op_times
    from workloads.operators import cross_entropy

    loss = cross_entropy("loss", 4096, 131072)
    logits = 4096 * 131072
    bandwidth = device_rate(A100, "bf16").bytes_per_s
    half = op_times(loss, 1, device_rate(A100, "bf16"))
    full = op_times(loss, 1, device_rate(A100, "fp32"))
    assert full.device_s == pytest.approx(5 * logits * 4 / bandwidth)
    assert half.device_s == pytest.approx(full.device_s + 2 * logits * (2 + 4) / bandwidth)
    assert half.kernels == full.kernels + 2


def test_a_language_models_loss_makes_megatrons_passes_over_its_logits():
    """A transformer's loss is Megatron-LM's vocab-parallel cross-entropy: after the cast,
    forward reads and writes 8 fp32 values per logit (max; shift; exp; sum; divide), backward
    2 (the softmax scaled in place), so in fp32 a 1.7B GPT's loss over 4,096 tokens and a
    131,072-word vocabulary takes 10 passes of 4 bytes where the generic one takes 5."""
    from harness.sim.systems.device_model import op_times
    from workloads.dims import parse_dims

    dims = parse_dims("transformer:layers=24,hidden=2048,heads=16,vocab=131072,seq=4096")
    (loss,) = [op for op in dims.post_ops() if op.name == "loss"]
    logits = 4096 * 131072
    rate = device_rate(A100, "fp32")
    times = op_times(loss, 1, rate)
    assert times.forward_s == pytest.approx(8 * logits * 4 / rate.bytes_per_s)
    assert times.backward_s == pytest.approx(2 * logits * 4 / rate.bytes_per_s)
    half = op_times(loss, 1, device_rate(A100, "bf16"))
    assert half.device_s == pytest.approx(times.device_s + 2 * logits * (2 + 4)
                                          / rate.bytes_per_s)


def test_an_fp32_table_gathers_fp32_rows_into_half_precision_outputs():
    """DLRM's tables stay fp32 under AMP: forward its rows are read at 4 bytes and written
    at 2, backward the output's gradient is read at 2 and a 4-byte gradient row written
    with an int64 id per lookup; in fp32 that is the plain gather's bytes plus the ids."""
    from harness.sim.systems.device_model import op_times
    from workloads.operators import embedding

    lookups, dim = 26, 128
    bandwidth = device_rate(A100, "fp16").bytes_per_s
    table, plain = embedding("t", lookups, dim, fp32_table=True), embedding("t", lookups, dim)
    half = op_times(table, 1, device_rate(A100, "fp16"))
    assert half.forward_s == pytest.approx(lookups * dim * (4 + 2) / bandwidth)
    assert half.backward_s == pytest.approx((lookups * dim * (2 + 4) + 8 * lookups) / bandwidth)
    assert half.device_s == pytest.approx(
        1.5 * op_times(plain, 1, device_rate(A100, "fp16")).device_s + 8 * lookups / bandwidth)
    full, whole = op_times(table, 1, device_rate(A100, "tf32")), op_times(plain, 1, device_rate(
        A100, "tf32"))
    assert full.device_s == pytest.approx(whole.device_s + 8 * lookups / bandwidth)


def test_fp16_unscales_its_gradients_each_step_and_bf16_does_not():
    """fp16 trains under a loss scale: its optimizer first reads and writes every fp32
    gradient once more (GradScaler.unscale_, Megatron-LM's fp16 optimizer); bf16 does not."""
    from harness.sim.systems.device_model import optimizer_seconds
    from workloads.precision import precision

    rate, params = device_rate(A100, "bf16"), 1e9
    extra = optimizer_seconds(params, precision("fp16"), 2, rate) - optimizer_seconds(
        params, precision("bf16"), 2, rate)
    assert extra == pytest.approx(params * 8 / rate.bytes_per_s)
    assert precision("fp16").loss_scaled and not precision("bf16").loss_scaled


def test_fp8_is_refused_where_the_system_states_no_fp8_peak():
    with pytest.raises(SpecError, match="no fp8 peak"):
        device_rate(A100, "fp8")
    bad = stratbench("simulate", "--topology", "preset:dgx_a100,hosts=1", "--workers", "1",
                     "--workload", "resnet50", "--precision", "fp8")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "fp8" in bad.stderr


def _simulate(*args: str) -> dict:
    proc = stratbench("simulate", "--json", "--framework", "torch", "--strategy", "ddp", *args)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    return row


def test_resnet50_on_one_a100_honours_the_precision_and_meets_nvidias_figures():
    """NVIDIA's PyTorch ResNet-50 v1.5 on one A100 80GB: 938 images/s in TF32 and 2,470 in
    mixed precision at batch 256 (DeepLearningExamples, corpus rows), in the memory formats
    NVIDIA ran: NCHW (torch's default) for TF32, channels-last for mixed precision."""
    base = ("--topology", "preset:dgx_a100,hosts=1", "--workers", "1", "--workload",
            "resnet50", "--global-batch", "256")
    fp32 = _simulate(*base, "--precision", "fp32")
    bf16 = _simulate(*base, "--precision", "bf16")
    assert bf16["throughput_samples_s"] > 1.5 * fp32["throughput_samples_s"]
    tf32 = _simulate(*base, "--precision", "tf32")
    assert tf32["throughput_samples_s"] == pytest.approx(938, rel=0.25)
    fp16 = _simulate(*base, "--precision", "fp16", "--channels-last")  # NVIDIA's AMP run
    assert fp16["throughput_samples_s"] == pytest.approx(2470, rel=0.25)
    assert "device model" in fp16["compute_source"]
    nchw = _simulate(*base, "--precision", "fp16")  # torch's default: transposes around convs
    assert nchw["throughput_samples_s"] < 0.8 * fp16["throughput_samples_s"]


def test_a_tiny_model_on_an_h100_is_launch_bound_and_says_so():
    row = _simulate("--topology", "preset:dgx_h100_ib,hosts=1", "--workers", "1",
                    "--workload", "mlp:S")
    assert row["step_time_median_s"] >= 100e-6  # its kernels times the launch floor
    assert "launch-bound" in row["compute_source"]


def test_an_answer_says_where_the_devices_efficiency_is_assumed():
    """A TPU v5p's fp8 GEMM efficiency is the file's placeholder, fitted on no run (its bf16
    is MaxText's): the compute note says so; an H100's bf16 is fitted (llm-foundry's MPT-7B)
    and says nothing of the kind."""
    base = ("--workers", "1", "--workload", "gpt2_xl")
    tpu = _simulate("--topology", "preset:tpu_v5p", *base, "--precision", "fp8")
    assert "fp8 GEMM efficiency is an assumed 50%" in tpu["compute_source"]
    assert "assumed" not in _simulate("--topology", "preset:tpu_v5p", *base, "--precision",
                                      "bf16")["compute_source"]
    h100 = _simulate("--topology", "preset:dgx_h100_ib,hosts=1", *base, "--precision", "bf16")
    assert "assumed" not in h100["compute_source"]


def test_an_answer_says_whether_the_devices_efficiency_met_a_published_run():
    """Where the corpus has runs of the system, their error; where it has none but the file
    cites an efficiency (a B200's, fitted beside an H100 run), that nothing here checked it;
    where the efficiency is the placeholder, the compute line has said so already."""
    from harness.commands.simulate import _published_check

    assert "median |error| on" in _published_check("preset:dgx_h100_ib,hosts=1", "bf16", True)
    b200 = _published_check("preset:hgx_b200,hosts=2", "bf16", True)
    assert "against no published hgx_b200 bf16 training run" in b200 and "42.1%" in b200
    assert _published_check("preset:tpu_v5p", "fp8", True) is None
    assert "against no published tpu_v4_cube bf16" in _published_check("preset:tpu_v4_cube",
                                                                        "bf16", True)
    assert "2 published tpu_v5p bf16 runs" in _published_check("preset:tpu_v5p", "bf16", True)
    assert _published_check("preset:hgx_b200", "bf16", False) is None  # refitted: not ours


def test_the_mi300xs_efficiency_is_the_h100s_scaled_by_their_best_gemm_shapes():
    """No MI300X training run is fitted: its bf16 is the H100's fit times the two devices'
    best-shape ratio (mamf-finder, cited in the file), fp8 bf16's times the H100's fp8/bf16."""
    h100 = load_preset("dgx_h100_ib").device.matmul_efficiency
    mi300x = load_preset("mi300x").device.matmul_efficiency
    assert mi300x["bf16"] == pytest.approx(h100["bf16"] * (668.4 / 1300) / (794.5 / 989),
                                           abs=0.001)
    assert mi300x["fp8"] / mi300x["bf16"] == pytest.approx(h100["fp8"] / h100["bf16"], abs=0.01)


@settings(max_examples=60, deadline=None)
@given(seq=st.integers(1, 3000), window=st.integers(0, 4000))
def test_a_windows_pairs_are_the_causal_count_of_keys_it_spans(seq, window):
    """The fused kernel's pairs per head: every earlier key within the window, counted as
    the causal square is (T^2/2, no diagonal): within one pair a query of the exact sum."""
    from workloads.operators import ATTENTION, Op

    op = Op("attention", ATTENTION, heads=1, seq=seq, head_dim=1, window=window)
    w = window if 0 < window < seq else seq
    exact = sum(min(i, w) for i in range(1, seq + 1))
    assert abs(op.scored_pairs - exact) <= seq
    assert op.scored_pairs <= Op("a", ATTENTION, heads=1, seq=seq, head_dim=1).scored_pairs
    assert op.forward_flops == 4 * seq * w


def test_a_remembered_layer_split_answers_only_for_what_decides_it():
    """A layout search times one block for every candidate, so ``layer_split`` remembers;
    another efficiency, device, degree or micro-batch is timed afresh, never answered by
    the remembered split (and a copy of the device with other numbers is another device)."""
    from harness.sim.systems.compute import _layer_split, layer_split

    block = layered("llama3_8b", find_precision("bf16")).blocks[0]
    rate = device_rate(H100, "bf16")
    first = layer_split(block, rate, 2, 4, True)
    assert layer_split(block, rate, 2, 4, True) is first
    for other_rate, samples, tensor in [
            (device_rate(H100, "bf16", efficiency=0.3), 2, 4),
            (device_rate(replace(H100, gemm_k_overhead=0.0), "bf16"), 2, 4),
            (device_rate(A100, "bf16"), 2, 4), (rate, 4, 4), (rate, 2, 8)]:
        got = layer_split(block, other_rate, samples, tensor, True)
        assert got == _layer_split(block, other_rate, samples, tensor, True, "none", 1)
        assert got != first


def test_every_strategy_computes_alike_on_one_device():
    """Data-parallel, FSDP, parameter-server and model-parallel steps of one model on one
    device: one device model, one compute."""
    text = "transformer:layers=4,hidden=2048,heads=16,seq=1024,vocab=32000,batch=4"
    profile = workload_facts(text)
    bf16 = Execution(precision="bf16")
    rows = [simulate("preset:dgx_h100_ib,hosts=1", 1, [name], profile, execution=bf16)[0]
            for name in ("ddp", "fsdp", "torch:parameter_server")]
    layout = simulate_layout("preset:dgx_h100_ib,hosts=1", layered(text, PRECISIONS["bf16"]),
                             Layout(), 4, precision=PRECISIONS["bf16"], execution=bf16)
    computes = [r.compute_s + r.optimizer_s for r in (*rows, layout)]
    assert max(computes) / min(computes) - 1 < 0.01
    assert all("device model" in r.compute_source for r in rows)


# Memory: Korthikanti et al. 2022, arXiv:2205.05198, Table 2 --------------------------------

GPT_22B = "transformer:layers=48,hidden=6144,heads=64,seq=2048,vocab=51200,dropout=0.1"


@pytest.mark.parametrize("recompute,sequence_parallel,per_layer", [
    ("none", False, lambda sbh, a, s, h, t: sbh * (10 + 24 / t + 5 * a * s / (h * t))),
    ("none", True, lambda sbh, a, s, h, t: sbh / t * (34 + 5 * a * s / h)),
    ("selective", False, lambda sbh, a, s, h, t: sbh * (10 + 24 / t)),
    ("selective", True, lambda sbh, a, s, h, t: sbh * 34 / t),
    ("full", False, lambda sbh, a, s, h, t: 2 * sbh),
    ("full", True, lambda sbh, a, s, h, t: 2 * sbh / t),
])
def test_activations_of_a_22b_gpt_are_korthikantis(recompute, sequence_parallel, per_layer):
    """48 layers, h 6144, 64 heads, s 2048, micro-batch 4, TP 8, fp16, dropout 0.1, unfused
    attention: the transformer layers' stored activations within 5% of the paper's formula
    for each case (the embedding and the head, never checkpointed, are apart)."""
    s, b, h, a, layers, t = 2048, 4, 6144, 64, 48, 8
    # the formula counts the transformer layers: the embedding and the head are left out
    model = replace(layered(GPT_22B, PRECISIONS["fp16"]), pre=(), post=())
    memory = model_parallel_memory(model, Layout(tensor=t, sequence_parallel=sequence_parallel),
                                   b, "adam", recompute, PRECISIONS["fp16"])
    formula = layers * per_layer(s * b * h, a, s, h, t)
    assert memory.activations == pytest.approx(formula, rel=0.05)


def test_dropout_is_counted_and_fused_attention_keeps_no_scores():
    with_dropout = layered(GPT_22B, PRECISIONS["fp16"])
    without = layered(GPT_22B.replace("dropout=0.1", "dropout=0"), PRECISIONS["fp16"])
    layout = Layout(tensor=8)
    kept = model_parallel_memory(with_dropout, layout, 4, precision=PRECISIONS["fp16"])
    less = model_parallel_memory(without, layout, 4, precision=PRECISIONS["fp16"])
    fused = model_parallel_memory(with_dropout, layout, 4, precision=PRECISIONS["fp16"],
                                  fused_attention=True)
    assert kept.activations > 1.4 * less.activations  # 59 GiB against 37
    assert fused.activations < less.activations


def test_a_layout_that_does_not_fit_says_so_with_the_bytes():
    llama = ("transformer:layers=126,hidden=16384,heads=128,kv_heads=8,ffn=53248,"
             "vocab=128256,seq=8192")
    row = stratbench("simulate", "--topology", "preset:dgx_h100_ib,hosts=2", "--workers",
                     "16", "--workload", llama, "--stages", "2", "--tensor-parallel", "8",
                     "--precision", "bf16", "--json")
    assert row.returncode == 0, row.stderr
    (out,) = json.loads(row.stdout)
    assert out["status"] == "does not fit"
    assert "needs" in out["reason"] and "of 80 GB per device" in out["reason"]
    assert out["memory_per_device_bytes"] > 80e9


@pytest.mark.parametrize("fused", [False, True])
def test_a_whole_replica_keeps_what_a_one_way_layout_keeps(fused):
    """One memory model: data-parallel candidates and model-parallel layouts count a
    replica's activations alike."""
    model = layered(GPT_22B, PRECISIONS["bf16"])
    one_way = model_parallel_memory(model, Layout(), 1, precision=PRECISIONS["bf16"],
                                    fused_attention=fused)
    assert replica_activation_bytes(model, fused) == pytest.approx(one_way.activations)


def test_a_replica_keeps_activations_at_its_precision_and_fused_attention_keeps_no_scores():
    fp32 = kept_activations(GPT_22B, None, PRECISIONS["fp32"], False)
    bf16 = kept_activations(GPT_22B, None, PRECISIONS["bf16"], False)
    fused = kept_activations(GPT_22B, None, PRECISIONS["bf16"], True)
    assert fp32 is not None and bf16 is not None and fused is not None
    # half the bytes, but the dropout masks (a byte each) and the fp32 softmax of the loss
    assert 0.5 < bf16 / fp32 < 0.6
    assert fused < 0.3 * bf16  # s=2048, 64 heads: the scores are most of it
    no_dropout = GPT_22B.replace("dropout=0.1", "dropout=0")  # the profile counts no masks
    stated = workload_facts(no_dropout).activation_bytes_per_sample
    assert kept_activations(no_dropout, None, PRECISIONS["fp32"], False) == pytest.approx(stated)
    # a workload without layers here: the stated fp32 count at the precision's width
    assert kept_activations("resnet50", 100.0, PRECISIONS["bf16"], True) == pytest.approx(50.0)
    assert kept_activations("resnet50", None, PRECISIONS["bf16"], True) is None


def test_simulate_says_a_data_parallel_replica_does_not_fit_with_the_bytes():
    llama3_8b = f"hf:{Path(__file__).parent / 'fixtures' / 'hf' / 'llama3_8b_config.json'}"
    proc = stratbench("simulate", "--topology", "preset:dgx_h100_ib,hosts=1", "--workers", "8",
                      "--workload", f"{llama3_8b},seq=8192", "--precision", "bf16", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["strategy"]: r for r in json.loads(proc.stdout)}
    ring = rows["allreduce_ring"]  # 16 bytes a parameter: 128 GB before any activation
    assert ring["status"] == "does not fit" and "of 80 GB per device" in ring["reason"]
    assert ring["memory_per_device_bytes"] > 16 * 8.0e9
    fsdp = rows["fsdp"]  # sharded 8 ways: 16 GB of state, the activations in bf16, fused
    assert fsdp["status"] == "ok"
    assert 16e9 < fsdp["memory_per_device_bytes"] < 80e9 - fsdp["memory_reserved_bytes"]


def test_recommend_takes_a_precision_and_finds_a_layout_that_fits_for_llama3_70b():
    proc = stratbench("recommend", "--workload", "llama3_70b", "--target",
                      "preset:dgx_h100_ib,hosts=16", "--precision", "bf16", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (verdict,) = data["verdicts"]
    assert verdict["status"] == "ok"
    picked = [r for r in data["ranking"] if r["fits"]]
    assert picked and all(r["memory_per_device_bytes"] <= 80e9 for r in picked)


# The corpus -------------------------------------------------------------------------------

def test_every_corpus_row_is_sourced_and_quoted():
    rows, data = devices.corpus()
    assert len(rows) >= 12
    assert {get_known(r.model).name if not r.model.startswith("transformer:") else "llama2"
            for r in rows} >= {"resnet50", "bert_large", "dlrm"}
    assert {r.system for r in rows} >= {"dgx_a100", "dgx_h100_ib"}
    assert {r.precision for r in rows if r.system == "dgx_a100"} >= {"tf32", "fp16"}
    for row in rows:
        assert row.source["source_url"].startswith("https://") and row.source["quote"]
        assert str(row.published["value"]).replace(",", "") in \
            row.source["quote"].replace(",", "") or row.published["value"] >= 1e6
    assert set(data["fits"].values()) <= {r.id for r in rows}


def test_an_eager_stack_adds_each_micro_batchs_gradients_and_a_fused_one_does_not():
    """NVIDIA's BERT adds each micro-batch's gradients after its backward (torch's
    AccumulateGrad: both read, the sum written), fp32 in TF32 and fp16 where it halves the
    model; Megatron's fused accumulation (the corpus's default) pays nothing more."""
    for row_id, element in (("bert_large_pt_a100_80g_p2_1gpu_tf32", 4),
                            ("bert_large_pt_a100_80g_p2_1gpu_fp16", 2)):
        row = devices.row_by_id(row_id)
        assert row.grad_accumulation == ("eager" if element == 4 else "eager_half")
        eager = devices.predict_step(row)
        fused = devices.predict_step(replace(row, grad_accumulation="fused"))
        add = 3 * element * get_known("bert_large").params / devices.rate_of(row, None).bytes_per_s
        assert eager["accumulate_s"] == pytest.approx((row.accumulation - 1) * add)
        assert fused["accumulate_s"] == 0
        assert eager["step_s"] - fused["step_s"] == pytest.approx(eager["accumulate_s"])
    split = devices.row_by_id("megatron2024_gpt_7_1b_h100_96gpu_bf16")
    with pytest.raises(SpecError, match="data-parallel stack's"):
        replace(split, grad_accumulation="eager")


def test_the_corpus_comparison_reproduces_its_table(device_comparison):
    """The table docs/SIMULATOR.md shows: each fit row reproduces its figure, ResNet-50 on one
    A100 is within 25% out of the box, and the rows beyond the issue's bounds are exactly
    those the corpus file names, with why (a new miss, or one fixed, changes the docs)."""
    fitted, records = device_comparison
    _, data = devices.corpus()
    for r in records:
        if r["fit_row"]:
            assert r["fitted_error"] == pytest.approx(0, abs=1e-6)
        if r["model"] == "resnet50" and r["gpus"] == 1:
            assert abs(r["out_of_box_error"]) <= devices.OUT_OF_BOX_BOUND
    beyond_box = {r["id"] for r in records
                  if abs(r["out_of_box_error"]) > devices.OUT_OF_BOX_BOUND}
    beyond_fit = {r["id"] for r in records
                  if not r["fit_row"] and abs(r["fitted_error"]) > devices.FITTED_BOUND}
    assert beyond_box == set(data["misses"]["out_of_box"])
    assert beyond_fit == set(data["misses"]["fitted"])
    assert all(0.3 < e <= 1 for e in fitted.values())


def test_the_a100s_half_precision_efficiency_is_the_megatron_fit_it_cites():
    """The system file's bf16/fp16 efficiency is fitted on Megatron-LM's 1.7B row (outside
    the corpus): refitting with today's device model gives the same number."""
    from harness.validate import megatron

    fitted, records = megatron.compare()
    assert A100.matmul_efficiency["bf16"] == pytest.approx(fitted, abs=0.005)
    assert max(abs(r["error"]) for r in records[1:]) < 0.10


def test_the_h100s_efficiencies_are_the_fit_they_cite(system_fits):
    """The H100's bf16/fp16 efficiency is fitted on llm-foundry's MPT-7B row (outside the
    corpus, another team and stack than its H100 rows): refitting with today's device model
    gives the system file's number; fp8 is that fit times the best shapes' ratio it cites."""
    h100 = load_preset("dgx_h100_ib").device
    fits = system_fits
    bf16 = fits["dgx_h100_ib/bf16"].efficiency
    assert h100.matmul_efficiency["bf16"] == pytest.approx(bf16, abs=0.005)
    assert h100.matmul_efficiency["fp16"] == h100.matmul_efficiency["bf16"]
    best_fp8, best_bf16 = 1402.6 / 1979, 794.5 / 989  # mamf-finder, the note's citation
    assert h100.matmul_efficiency["fp8"] == pytest.approx(
        h100.matmul_efficiency["bf16"] * best_fp8 / best_bf16, abs=0.002)
    corpus_ids = {r.id for r in devices.corpus()[0]}
    assert not {fit.run for fit in fits.values()} & corpus_ids


def test_every_fitted_system_file_efficiency_is_the_fit_it_cites(system_fits):
    """Each system-file efficiency taken from a published run (``system_sources``) is what
    refitting with today's device model gives: B200 and GB200 by their Megatron-Bridge run
    against the H100's (one recipe on both), applied to the H100 file's own values."""
    fits = system_fits
    assert {"hgx_b200/bf16", "hgx_b200/fp8", "gb200_nvl72/bf16", "gb200_nvl72/fp8"} <= set(fits)
    for group, fit in fits.items():
        system, precision = group.split("/")
        assert load_preset(system).device.matmul_efficiency[precision] == pytest.approx(
            fit.efficiency, abs=0.005), group
    assert fits["hgx_b200/fp8"].relative_to == "megatron_bridge_nemo2511_llama3_8b_h100_8gpu_fp8cs"
    h100 = load_preset("dgx_h100_ib").device.matmul_efficiency
    b200 = load_preset("hgx_b200").device.matmul_efficiency
    # one ratio for every precision: the runs say how the devices compare, not the recipe
    assert b200["bf16"] / h100["bf16"] == pytest.approx(b200["fp8"] / h100["fp8"], rel=0.01)
    assert b200["bf16"] < h100["bf16"]  # the best shapes' 77.6% against 80.3% says as much


def test_the_h200_computes_as_the_h100_it_shares_a_die_with():
    """Same peaks and SMs: the H200's efficiencies are the H100's fitted ones, not its best
    GEMM shape's (80%), so it is faster only where memory decides."""
    h100, h200 = load_preset("dgx_h100_ib").device, load_preset("hgx_h200").device
    assert h200.matmul_efficiency == h100.matmul_efficiency
    assert h200.peak_flops == h100.peak_flops and h200.sms == h100.sms
    rates = [device_rate(d, "bf16") for d in (h100, h200)]
    gemm = [gemm_seconds(8192, 8192, 8192, 1, r) for r in rates]
    assert gemm[0] == pytest.approx(gemm[1])
    assert rates[1].bytes_per_s > rates[0].bytes_per_s


def test_a_project_target_may_name_its_precision(tmp_path):
    from harness.core.errors import InputError
    from harness.core.project import load_project

    path = tmp_path / "stratbench.toml"
    path.write_text('workloads = ["resnet50"]\n'
                    'targets = [{ target = "preset:dgx_a100,hosts=1", precision = "tf32" }]\n')
    (goal,) = load_project(path).targets
    assert goal.precision == "tf32" and "tf32" in goal.describe()
    path.write_text('workloads = ["resnet50"]\n'
                    'targets = [{ target = "preset:dgx_a100,hosts=1", precision = "fp4" }]\n')
    with pytest.raises(InputError, match="precision 'fp4'"):
        load_project(path)


def test_a_gradient_reduction_after_the_backward_is_exposed_and_named():
    """Megatron-LM 2021's local DDP reduces after the whole backward: the step is longer by
    the exposed reduction, and the layout says which it ran."""
    args = ("simulate", "--topology", "preset:dgx_a100,hosts=8", "--workers", "64",
            "--workload", "transformer:layers=30,hidden=3072,heads=32,seq=2048,vocab=51200",
            "--tensor-parallel", "2", "--global-batch", "512", "--precision", "fp16",
            "--recompute", "full", "--json")
    overlapped, after = (json.loads(stratbench(*args, *extra).stdout)[0]
                         for extra in ((), ("--grad-reduce", "after-backward")))
    assert after["step_time_median_s"] > overlapped["step_time_median_s"]
    assert "reduce after backward" in after["layout"]
    assert "reduce after backward" not in overlapped["layout"]
    bad = stratbench("simulate", "--topology", "preset:dgx_a100,hosts=1", "--workers", "8",
                     "--workload", "resnet50", "--grad-reduce", "after-backward")
    assert bad.returncode == 2 and "model-parallel layout" in bad.stderr


def test_the_405b_layout_nvidia_ran_on_80_gb_fits_with_the_stacks_gradient_buffer():
    """NVIDIA's Llama 3.1 405B recipe ran TP 8, PP 9, CP 2, VP 7 on 80 GB H100s, so the
    memory model must say it fits: with NeMo's distributed_fused_adam (gradients in a bf16
    buffer, 4 + 12/d bytes a parameter) it does; counted as Megatron-Core keeps them in
    bf16 (an fp32 main gradient, 6 + 12/d) the 576-GPU run would not, by 2 bytes of each
    parameter held."""
    rows, _ = devices.corpus()
    nemo = [r for r in rows if r.id.startswith("nemo2409_llama31_405b")]
    assert len(nemo) == 6 and all(r.grad_accumulation == "half" for r in nemo)
    for row in nemo:
        precision = PRECISIONS[row.precision]
        model = layered(row.model, precision)
        spec = f"preset:{row.system},hosts={row.gpus // 8}"
        ran = simulate_layout(spec, model, row.layout(), row.global_batch, None,
                              precision=precision)
        assert ran.ok, (row.id, ran.reason)
        assert "half-precision gradients" in ran.layout.describe()
        if row.precision != "bf16":
            continue
        fused = replace(row.layout(), grad_accumulation="fused")
        megatron = simulate_layout(spec, model, fused, row.global_batch, None,
                                   precision=precision)
        held = sum(layer.params for layer in model.layers) / (row.tensor * row.pipeline)
        assert megatron.memory_per_device_bytes - ran.memory_per_device_bytes == \
            pytest.approx(2 * held, rel=0.05)
        # on 576 GPUs (data 4 x context 2 sharding the optimizer 8 ways) the difference
        # decides; from 1,152 on the wider sharding leaves room either way
        assert (megatron.status == "does not fit") == (row.gpus == 576)


def test_model_parallel_rows_quote_the_layout_they_are_simulated_with():
    """Each published model-parallel run is simulated as its authors ran it: the degrees,
    GPUs and batch the row states are the ones its quoted line prints."""
    rows, _ = devices.corpus()
    parallel = [r for r in rows if r.model_parallel]
    assert len(parallel) >= 10
    for r in parallel:
        # the quoted table row, or where the figure is a log line, the run's script
        text = r.source["quote"] + " " + r.source.get("config", "")
        cells = re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))
        assert str(r.gpus) in cells and str(r.tensor) in cells and str(r.pipeline) in cells
        assert r.context == 1 or str(r.context) in cells  # not every table has a CP column
        assert r.layout().devices == r.gpus
        assert str(r.global_batch) in cells, (r.id, r.global_batch, cells)


def test_context_parallel_runs_meet_nemos_long_sequence_table(device_comparison):
    """Issue 37: context parallelism checked against a published figure within 15%: NeMo's
    Llama 2 7B from 4K to 1M tokens on up to 1,024 H100s, predicted from the one fp8 fit
    (a Llama 3 8B data-parallel row), never fitted on these rows."""
    _, records = device_comparison
    cp = [r for r in records if r["id"].startswith("nemo2403_cp_") and r["gpus"] >= 32]
    assert len(cp) == 6
    for r in cp:
        assert abs(r["fitted_error"]) < 0.15, r
        # the FLOP reading is stated, and the other reading is printed beside it
        assert r["other_reading"]["formula"] == "nemo_llama_full_square"


def test_float8_gain_meets_torchtitans_within_15_percent():
    """Issue 37: FP8 checked against a published figure: torchtitan's Float8 over bf16 on
    Llama 3.1 8B with FSDP (8 and 128 H100s), a ratio predicted out of the box."""
    records = [r for r in devices.compare_gains() if r["to"].startswith("fp8")]
    assert {r["gpus"] for r in records} == {8, 128}
    for r in records:
        assert r["predicted"] > 1.0  # fp8 GEMMs pay for their casts and still win
        assert abs(r["error"]) < 0.15, r


def test_fsdp_at_128_gpus_keeps_its_per_gpu_rate_as_torchtitan_published():
    """FSDP's exchange at scale against a published figure: torchtitan's Llama 3.1 8B, 1D
    FSDP, lost 2.3% per GPU from 8 H100s to 128 (6,667 to 6,514 tokens/s); the layout
    search's FSDP step, the one its FSDP x TP picks rest on, within 5% of that ratio."""
    (r,) = [r for r in devices.compare_gains() if r["from"] == "bf16@8" and r["to"] == "bf16@128"]
    assert r["published"] == pytest.approx(6514 / 6667)
    assert abs(r["error"]) < 0.05, r


def test_mixtral_with_expert_parallelism_meets_megatron_core_within_15_percent(
        device_comparison):
    """Issue 37: the MoE workload with expert parallelism against a published figure:
    Megatron-Core v0.8's Mixtral 8x7B (EP 8, PP 4, VP 8 on 64 H100s, bf16), predicted from
    the H100 bf16 efficiency fitted on a dense GPT row of the same attention shape."""
    _, records = device_comparison
    (mixtral,) = [r for r in records if r["id"].startswith("mcore08_mixtral")]
    assert not mixtral["fit_row"]
    assert abs(mixtral["fitted_error"]) < 0.15, mixtral
    gpt = [r for r in records if r["id"].startswith("megatron2024_gpt_")]
    assert len(gpt) == 9  # Megatron-LM's 2024 H100 table, 48 to 6,144 GPUs
    # up to 70B (one or two stages, where the unstated schedule matters little) but the
    # smallest: within the corpus's bound
    middle = [r for r in gpt if r["gpus"] in (192, 384, 768)]
    assert len(middle) == 3 and all(abs(r["fitted_error"]) < devices.FITTED_BOUND
                                    for r in middle), middle
