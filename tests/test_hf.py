"""Models by their Hugging Face config.json: the published configs read into the published
parameter counts; the training sequence is given, never taken from the config; a bad file is
one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads import WorkloadError, resolve_workload
from workloads.hf import parse_hf as parse_dims
from workloads.operators import total_forward_flops

HF = Path(__file__).parent / "fixtures" / "hf"


@pytest.mark.parametrize("config, total, active, active_rel", [
    ("llama3_8b_config.json", 8.03e9, 8.03e9, 0.005),  # Meta: 8.03B
    ("mixtral_8x7b_config.json", 46.7e9, 12.9e9, 0.005),  # Mistral AI: 46.7B, 12.9B active
    # DeepSeek-AI: 671B total, "37B activated" (a whole number of billions: 37.55B counted,
    # both embedding tables included)
    ("deepseek_v3_config.json", 671e9, 37e9, 0.02),
    # Qwen: 14.3B total, "2.7B activated" (two figures: 2.69B counted); a shared expert
    # of its own width beside the routed ones (Qwen2-MoE's shared_expert_intermediate_size)
    ("qwen15_moe_a27b_config.json", 14.3e9, 2.7e9, 0.02),
    # Gemma team: 786,825,216 embedding and 7,751,248,896 other parameters (a vocabulary of
    # 256,128 counted; the file's is 256,000); GeGLU, and the embedding tied by GemmaConfig's
    # default where the file says nothing
    ("gemma_7b_config.json", 8.538e9, 8.538e9, 0.005),
])
def test_published_configs_read_into_their_published_parameter_counts(config, total, active,
                                                                      active_rel):
    dims = parse_dims(f"hf:{HF / config},seq=4096")
    assert dims.params == pytest.approx(total, rel=0.005)
    assert dims.active_params == pytest.approx(active, rel=active_rel)
    assert dims.seq == 4096  # as given: not max_position_embeddings
    # the operators the device model times carry the same FLOPs as the record's count
    assert total_forward_flops(dims.ops()) == pytest.approx(dims.forward_flops, rel=1e-9)
    spec = resolve_workload(f"hf:{HF / config},seq=4096")
    assert spec.params == dims.params and not spec.frameworks  # numbers only


def test_experts_compute_through_top_k_and_hold_every_expert():
    dense = parse_dims(f"hf:{HF / 'llama3_8b_config.json'},seq=4096")
    moe = parse_dims(f"hf:{HF / 'mixtral_8x7b_config.json'},seq=4096")
    # Mixtral's MLP per token is two Llama-width experts: its block FLOPs differ from a
    # dense block of the same attention by one more MLP and the router
    mlp = 2 * 4096 * 3 * 4096 * 14336
    router = 2 * 4096 * 4096 * 8
    assert moe.block_forward_flops - dense.block_forward_flops == pytest.approx(mlp + router)
    assert moe.block_params - moe.active_block_params == 6 * 3 * 4096 * 14336
    skewed = parse_dims(f"hf:{HF / 'mixtral_8x7b_config.json'},seq=4096,imbalance=1.3")
    assert skewed.imbalance == 1.3 and skewed.block_forward_flops == moe.block_forward_flops


@pytest.mark.parametrize("text, said", [
    ("hf:{dir}/llama3_8b_config.json", "give the training sequence length"),
    ("hf:{dir}/llama3_8b_config.json,seq=4096,colour=red", "'colour=red'"),
    ("hf:{dir}/none.json,seq=4096", "none.json"),
    ("hf:{tmp}/broken.json,seq=4096", "not JSON"),
    ("hf:{tmp}/nolayers.json,seq=4096", "missing field 'num_hidden_layers'"),
    ("hf:{tmp}/deepseek.json,seq=4096", "field 'moe_layer_freq'"),
    ("hf:{tmp}/deepseek_gqa.json,seq=4096", "field 'num_key_value_heads'"),
    ("hf:{tmp}/bert.json,seq=4096", "model_type 'bert' is not read"),
    ("hf:{tmp}/sparse_step.json,seq=4096", "field 'decoder_sparse_step'"),
    ("hf:{tmp}/mixed_window.json,seq=8192", "field 'layer_types' mixes"),
    ("hf:{tmp}/qwen_window.json,seq=8192", "field 'max_window_layers' 28"),
    ("hf:{dir}/mixtral_8x7b_config.json,seq=4096,imbalance=much", "imbalance='much'"),
    ("hf:{dir}/llama3_8b_config.json,seq=4096,imbalance=1.3", "need experts=E"),
])
def test_a_bad_config_is_one_line_naming_the_field(tmp_path, text, said):
    llama = json.loads((HF / "llama3_8b_config.json").read_text())
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "nolayers.json").write_text(json.dumps(
        {k: v for k, v in llama.items() if k != "num_hidden_layers"}))
    v3 = json.loads((HF / "deepseek_v3_config.json").read_text())
    (tmp_path / "deepseek.json").write_text(json.dumps(v3 | {"moe_layer_freq": 2}))
    (tmp_path / "deepseek_gqa.json").write_text(json.dumps(v3 | {"num_key_value_heads": 8}))
    (tmp_path / "bert.json").write_text(json.dumps(llama | {"model_type": "bert"}))
    (tmp_path / "mixed_window.json").write_text(json.dumps(
        llama | {"model_type": "mistral", "sliding_window": 4096,
                 "layer_types": ["sliding_attention", "full_attention"] * 16}))
    (tmp_path / "qwen_window.json").write_text(json.dumps(
        llama | {"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": True,
                 "max_window_layers": 28}))
    (tmp_path / "sparse_step.json").write_text(json.dumps(
        llama | {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                 "decoder_sparse_step": 2}))
    with pytest.raises(WorkloadError) as caught:
        parse_dims(text.format(dir=HF, tmp=tmp_path))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_sliding_window_is_read_and_narrows_the_attention(tmp_path):
    """Mistral 7B v0.1 attends over the last 4,096 tokens: at 16,384 its attention counts
    a quarter of the full square, and a fused kernel computes T w - w^2/2 pairs per head
    rather than the causal T^2/2. A window at least the sequence, or one switched
    off (Qwen2's use_sliding_window false), is no window."""
    llama = json.loads((HF / "llama3_8b_config.json").read_text())
    mistral = llama | {"model_type": "mistral", "sliding_window": 4096}
    (tmp_path / "mistral.json").write_text(json.dumps(mistral))
    (tmp_path / "qwen.json").write_text(json.dumps(
        mistral | {"model_type": "qwen2", "use_sliding_window": False}))
    windowed = parse_dims(f"hf:{tmp_path / 'mistral.json'},seq=16384")
    full = parse_dims(f"hf:{HF / 'llama3_8b_config.json'},seq=16384")
    assert windowed.window == 4096 and full.window == 0
    assert windowed.attention_forward_flops == pytest.approx(full.attention_forward_flops / 4)
    assert parse_dims(f"hf:{tmp_path / 'mistral.json'},seq=4096").window == 0
    assert parse_dims(f"hf:{tmp_path / 'qwen.json'},seq=16384").window == 0
    (attention,) = [op for op in windowed.block_ops() if op.kind == "attention"]
    assert attention.scored_pairs == 16384 * 4096 - 4096**2 / 2


def test_a_windowed_model_refuses_context_parallelism_in_one_line():
    from harness.core.errors import SpecError
    from harness.sim.model.layered import Layout
    from harness.sim.model.structure import layered
    from workloads.precision import PRECISIONS

    text = "transformer:layers=2,hidden=512,heads=8,ffn=1024,vocab=1000,seq=4096,window=1024"
    model = layered(text, PRECISIONS["bf16"])
    from harness.sim.model.layered import check_layout

    with pytest.raises(SpecError, match="sliding window: context parallelism"):
        check_layout(model, Layout(data=1, context=2), 1)


def test_simulate_reads_an_hf_config(tmp_path):
    from click.testing import CliRunner

    from harness.commands import simulate

    result = CliRunner().invoke(simulate.command, [
        "--workload", f"hf:{HF / 'mixtral_8x7b_config.json'},seq=4096",
        "--topology", "preset:dgx_h100_ib,hosts=1", "--workers", "8", "--strategy", "fsdp",
        "--precision", "bf16"])
    assert result.exit_code == 0, result.output
    assert "fsdp" in result.output


def test_the_catalogs_moe_models_are_their_published_shapes():
    """Issue 37: Mixtral 8x7B and DeepSeek-V3 by name, with cited dimensions: each count is
    its published config's (46.7B total, 12.9B active; 671B total), DeepSeek-V3 with its
    latent attention and its first 3 dense layers."""
    from workloads.known import DIMS_MODELS, get_known

    mixtral = parse_dims(f"hf:{HF / 'mixtral_8x7b_config.json'},seq=4096")
    known = DIMS_MODELS["mixtral_8x7b"]
    assert (known.params, known.active_params) == (mixtral.params, mixtral.active_params)
    assert get_known("Mixtral-8x7B").params == mixtral.params
    v3 = DIMS_MODELS["deepseek_v3"]
    read = parse_dims(f"hf:{HF / 'deepseek_v3_config.json'},seq=4096")
    assert (v3.params, v3.active_params) == (read.params, read.active_params)
    assert v3.params == pytest.approx(671e9, rel=0.005)
    notes = get_known("deepseek_v3").notes
    assert "latent attention (MLA)" in notes and "first 3" in notes
    assert any("arXiv:2412.19437" in s for s in get_known("deepseek_v3").source)


def test_latent_attention_by_its_dimensions_and_its_mistakes_in_one_line():
    """The grammar names DeepSeek's attention as its config does; what it cannot be is one
    line naming the key."""
    from workloads.dims import parse_dims as by_dims

    text = ("transformer:layers=4,hidden=1024,heads=8,ffn=2816,vocab=32000,seq=2048,"
            "q_rank=256,kv_rank=128,rope_dim=32,qk_dim=64,v_dim=64")
    dims = by_dims(text)
    assert dims.latent and dims.head_dim == (64 + 32 + 64) // 2
    # queries 1024 -> 256 -> 8 x 96; keys and values 1024 -> 128 + 32 -> 8 x (64 + 64)
    assert dims.attention_params == (1024 * 256 + 256 + 256 * 8 * 96 + 1024 * 160 + 128
                                     + 128 * 8 * 128 + 8 * 64 * 1024)
    assert total_forward_flops(dims.ops()) == pytest.approx(dims.forward_flops, rel=1e-9)
    for bad, said in [(text.replace(",v_dim=64", ""), "needs qk_dim= and v_dim="),
                      ("transformer:layers=4,hidden=1024,heads=8,vocab=32000,seq=2048,"
                       "qk_dim=64", "need kv_rank="),
                      (text + ",kv_heads=2", "kv_heads=2"),
                      (text + ",dense_layers=1", "dense_layers=1 needs experts=E")]:
        with pytest.raises(WorkloadError) as caught:
            by_dims(bad)
        assert said in str(caught.value) and "\n" not in str(caught.value)


def test_heads_wider_than_the_model_are_read_not_refused(tmp_path):
    """Qwen3-32B's shape: 64 heads of 128 (8,192 wide) on a 5,120-wide model, 8 kv heads."""
    llama = json.loads((HF / "llama3_8b_config.json").read_text())
    qwen3 = llama | {"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64,
                     "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600,
                     "num_hidden_layers": 64, "vocab_size": 151936}
    (tmp_path / "qwen3.json").write_text(json.dumps(qwen3))
    dims = parse_dims(f"hf:{tmp_path / 'qwen3.json'},seq=4096")
    assert dims.head_size == 128 and dims.q_width == 8192 and dims.kv_width == 1024
    d = 5120  # q, k, v and the output projection at their widths
    assert dims.attention_params == d * 8192 + 2 * d * 1024 + 8192 * d
    assert dims.params == pytest.approx(32.8e9, rel=0.005)  # Qwen3-32B's published count
    assert dims.attention_forward_flops == 4 * 4096 * 4096 * 64 * 128
    assert total_forward_flops(dims.ops()) == pytest.approx(dims.forward_flops, rel=1e-9)


def test_an_activation_a_model_type_does_not_gate_is_refused_by_name(tmp_path):
    """Gemma's GELU gates its MLP (GeGLU) and is read; a Llama config naming GELU is not a
    model this reader knows the shape of, and says which field."""
    config = json.loads((HF / "llama3_8b_config.json").read_text())
    path = tmp_path / "gelu_llama.json"
    path.write_text(json.dumps({**config, "hidden_act": "gelu"}))
    with pytest.raises(WorkloadError, match="field 'hidden_act' 'gelu': only silu, swiglu"):
        parse_dims(f"hf:{path},seq=4096")
    gemma = json.loads((HF / "gemma_7b_config.json").read_text())
    path.write_text(json.dumps({**gemma, "tie_word_embeddings": False}))
    untied = parse_dims(f"hf:{path},seq=4096")
    tied = parse_dims(f"hf:{HF / 'gemma_7b_config.json'},seq=4096")
    assert untied.params - tied.params == 256000 * 3072  # the file's word is kept
