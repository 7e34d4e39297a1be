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


@pytest.mark.parametrize("config, total, active", [
    ("llama3_8b_config.json", 8.03e9, 8.03e9),  # Meta: 8.03B
    ("mixtral_8x7b_config.json", 46.7e9, 12.9e9),  # Mistral AI: 46.7B total, 12.9B active
])
def test_published_configs_read_into_their_published_parameter_counts(config, total, active):
    dims = parse_dims(f"hf:{HF / config},seq=4096")
    assert dims.params == pytest.approx(total, rel=0.005)
    assert dims.active_params == pytest.approx(active, rel=0.005)
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
    ("hf:{tmp}/deepseek.json,seq=4096", "multi-head latent attention"),
    ("hf:{tmp}/bert.json,seq=4096", "model_type 'bert' is not read"),
    ("hf:{tmp}/wide.json,seq=4096", "field 'head_dim'"),
    ("hf:{dir}/mixtral_8x7b_config.json,seq=4096,imbalance=much", "imbalance='much'"),
    ("hf:{dir}/llama3_8b_config.json,seq=4096,imbalance=1.3", "need experts=E"),
])
def test_a_bad_config_is_one_line_naming_the_field(tmp_path, text, said):
    llama = json.loads((HF / "llama3_8b_config.json").read_text())
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "nolayers.json").write_text(json.dumps(
        {k: v for k, v in llama.items() if k != "num_hidden_layers"}))
    (tmp_path / "deepseek.json").write_text(json.dumps(llama | {"model_type": "deepseek_v3"}))
    (tmp_path / "bert.json").write_text(json.dumps(llama | {"model_type": "bert"}))
    (tmp_path / "wide.json").write_text(json.dumps(llama | {"head_dim": 256}))
    with pytest.raises(WorkloadError) as caught:
        parse_dims(text.format(dir=HF, tmp=tmp_path))
    assert said in str(caught.value) and "\n" not in str(caught.value)


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
    """Issue 37: Mixtral 8x7B and a DeepSeek-V3-shaped model by name, with cited dimensions:
    Mixtral's count is its config's (46.7B total, 12.9B active); the DeepSeek-V3 shape routes
    every layer and uses multi-head attention, and says how far that puts it from 671B/37B."""
    from workloads.known import DIMS_MODELS, get_known

    mixtral = parse_dims(f"hf:{HF / 'mixtral_8x7b_config.json'},seq=4096")
    known = DIMS_MODELS["mixtral_8x7b"]
    assert (known.params, known.active_params) == (mixtral.params, mixtral.active_params)
    assert get_known("Mixtral-8x7B").params == mixtral.params
    v3 = DIMS_MODELS["deepseek_v3"]
    assert v3.params == pytest.approx(671e9, rel=0.06)
    assert v3.active_params == pytest.approx(37e9, rel=0.06)
    notes = get_known("deepseek_v3").notes
    assert "5% high" in notes and "MLA" in notes
    assert any("arXiv:2412.19437" in s for s in get_known("deepseek_v3").source)
