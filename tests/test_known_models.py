"""Known models (workloads.known): cited figures, derived figures that match their sources,
name lookup, resolution, the CLI listing, and the activation rule against what torch saves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.commands.workloads import command as workloads_command
from harness.core.errors import InputError
from harness.run.plan import resolve_workloads
from harness.sim.model.profile import for_simulation
from workloads import (
    KnownModel,
    WorkloadError,
    WorkloadSpec,
    batch,
    convnets,
    costs,
    get_known,
    get_spec,
    known_names,
    resolve_workload,
)
from workloads.known import DLRM_DIM, DLRM_TABLE_ROWS, list_known
from workloads.spec import choices_message

REPO = Path(__file__).resolve().parents[1]
NAMES = ("resnet50", "vgg16", "inception_v3", "bert_large", "gpt2_xl", "gpt3_175b", "llama3_8b",
         "llama3_70b", "llama3_405b", "mixtral_8x7b", "deepseek_v3", "dlrm")


def test_catalog_names():
    assert known_names() == NAMES
    assert [m.name for m in list_known()] == list(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_model_has_positive_cited_figures(name):
    m = get_known(name)
    assert isinstance(m, KnownModel)
    assert m.params > 0 and m.flops_per_sample > 0 and m.batch_size >= 1
    assert m.activation_bytes_per_sample > 0 and 0 < m.sparsity <= 1
    assert m.source and all(s.strip() for s in m.source)
    assert m.notes and m.sample


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_numbers_only(name):
    m = get_known(name)
    spec = m.spec()
    assert isinstance(spec, WorkloadSpec)
    assert (spec.family, spec.size, spec.task, spec.frameworks) == ("known", "", "known", ())
    assert spec.name == spec.given_name == name and spec.config is None
    assert spec.params == m.params and spec.flops_per_sample == m.flops_per_sample
    assert spec.activation_bytes_per_sample == m.activation_bytes_per_sample
    assert spec.expected_sparsity() == m.sparsity
    assert spec.summary()["activation_bytes_per_sample"] == m.activation_bytes_per_sample
    profile = for_simulation(spec)  # the simulator reads the same record
    assert profile.name == name and profile.batch_size == m.batch_size
    assert profile.ops == m.ops and profile.sparsity == spec.sparsity


# --- figures against their sources -------------------------------------------------------

def test_resnet50_figures():
    """25.6M parameters, 4.1 GMACs forward at 224x224 (torchvision's v1.5 figures); the
    project counts a multiply-accumulate as 2 FLOPs, so training is 3 x 2 x 4.1e9."""
    m = get_known("resnet50")
    assert m.params == 25_557_032
    assert m.flops_per_sample == pytest.approx(3 * 2 * 4.1e9, rel=0.10)
    assert m.flops_per_sample / 2 == pytest.approx(3 * 4.1e9, rel=0.01)  # in MACs


@pytest.mark.parametrize("net, num_params, gmacs", [
    (convnets.resnet50(), 25_557_032, 4.089),
    (convnets.vgg16(), 138_357_544, 15.47),
    (convnets.inception_v3(aux=False), 23_834_568, 5.713),
    (convnets.inception_v3(), 27_161_264, 5.719),
], ids=["resnet50", "vgg16", "inception_v3-eval", "inception_v3-train"])
def test_layer_tables_reproduce_torchvision(net, num_params, gmacs):
    """torchvision's num_params (Inception's with its auxiliary classifier) and _ops."""
    assert net.params == num_params
    assert net.macs / 1e9 == pytest.approx(gmacs, abs=0.0015)


def test_transformer_figures():
    gpt3 = get_known("gpt3_175b")
    assert gpt3.params == pytest.approx(175e9, rel=0.01)
    # Brown et al. count 6 FLOPs per parameter per token; attention adds ~3% at 2048 tokens
    assert gpt3.flops_per_sample == pytest.approx(6 * gpt3.params * 2048, rel=0.05)
    assert get_known("gpt2_xl").params == 1_557_611_200
    bert = get_known("bert_large")
    assert bert.params == 336_226_108 and bert.params == pytest.approx(340e6, rel=0.02)
    assert bert.flops_per_sample == pytest.approx(6 * bert.params * 512, rel=0.05)


def test_dlrm_figures():
    m = get_known("dlrm")
    assert sum(DLRM_TABLE_ROWS) * DLRM_DIM == 24_034_227_072
    dense = m.params - sum(DLRM_TABLE_ROWS) * DLRM_DIM
    assert dense == (13 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128       # bottom
                     + 479 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512
                     + 512 * 256 + 256 + 256 + 1)                               # top
    touched = 16 * 2048 + (3 + 1543 + 63 + 10 + 155 + 4 + 976 + 14 + 108 + 36)
    assert m.sparsity == pytest.approx((dense + 128 * touched) / m.params)
    assert m.sparsity < 1e-3 and m.batch_size == 2048
    assert m.activation_bytes_per_sample == 4 * (13 + 896 + 27 * 128 + 479 + 2816 + 1)


# --- lookup and resolution ------------------------------------------------------------------

def test_names_are_case_and_dash_tolerant():
    assert get_known("GPT2-XL") is get_known("gpt2_xl")
    assert resolve_workload("ResNet50") == resolve_workload(" resnet50 ") == \
        get_known("resnet50").spec()
    assert resolve_workload("gpt3-175b").name == "gpt3_175b"


def test_unknown_model_is_one_line_with_the_choices():
    with pytest.raises(WorkloadError) as exc:
        get_known("alexnet")
    assert str(exc.value) == choices_message("model", "alexnet", NAMES)
    assert "\n" not in str(exc.value)


def test_unknown_bare_workload_lists_the_known_models():
    with pytest.raises(WorkloadError) as exc:
        resolve_workload("alexnet")
    message = str(exc.value)
    assert message.startswith("unknown workload 'alexnet'") and "\n" not in message
    assert all(name in message for name in NAMES)


def test_builtins_still_resolve_as_before():
    assert resolve_workload("mlp:S") == get_spec("mlp", "S")


def test_known_models_cannot_be_planned_to_run():
    with pytest.raises(InputError, match="'vgg16' is a known model"):
        resolve_workloads(["vgg16"])


def test_resolving_a_known_model_imports_no_framework():
    code = ("import workloads; from workloads.resolve import resolve_workload; "
            "resolve_workload('resnet50'); import sys; "
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# --- the CLI listing ----------------------------------------------------------------------

def test_workloads_command_lists_known_models():
    result = CliRunner().invoke(workloads_command, ["--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    builtin = [r for r in rows if r["kind"] == "builtin"]
    known = [r for r in rows if r["kind"] == "known"]
    assert [r["name"] for r in builtin][:2] == ["mlp:S", "mlp:M"] and len(builtin) == 12
    assert [r["name"] for r in known] == list(NAMES)
    for r in rows:  # the keys rows had before known models came stay
        assert {"name", "family", "size", "task", "params", "flops_per_sample", "grad_bytes",
                "batch_per_replica", "sparsity"} <= set(r)
    assert all(r["source"] and r["sample"] for r in known)
    text = CliRunner().invoke(workloads_command, []).output
    assert "gpt3_175b" in text and "mlp:S" in text


# --- the activation rule against torch ------------------------------------------------------

@pytest.mark.parametrize("family", ["mlp", "cnn", "transformer", "recsys"])
def test_activation_rule_matches_what_torch_saves(family):
    """Bytes autograd saves for backward (float tensors other than parameters, each storage
    once) per sample, against the rule. Attention runs on SDPA's math kernel, which keeps the
    probabilities as the rule assumes (the fused CPU kernel keeps O(T)). torch also keeps
    norm statistics and float targets, under 1% here."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from workloads.torch_models import build_model, loss

    spec = get_spec(family, "S")
    model = build_model(spec)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if t.is_floating_point() and storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    n = 4
    with sdpa_kernel(SDPBackend.MATH), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss(spec, model, batch(spec, 0, n))
    measured = sum(saved.values()) / n
    assert spec.activation_bytes_per_sample == costs.activation_bytes(spec.config)
    assert spec.activation_bytes_per_sample <= measured <= 1.01 * spec.activation_bytes_per_sample
