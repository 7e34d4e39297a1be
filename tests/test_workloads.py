"""The framework-free side of workloads: catalog, costs, data, profiles, user references.

None of these tests imports TensorFlow or torch (test_workloads_frameworks.py does).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workloads
from workloads import (
    FAMILIES,
    SIZES,
    UserWorkload,
    WorkloadError,
    batch,
    costs,
    get_spec,
    list_workloads,
    parse_profile,
    parse_workload,
    profile_workload,
    resolve_workload,
    shard,
)
from workloads.configs import CNNConfig, MLPConfig, RecsysConfig, TransformerConfig
from workloads.profile import Stated

FIXTURE = Path(__file__).parent / "fixtures" / "user_workload.py"
REPO = Path(__file__).resolve().parents[1]


# --- catalog and errors -------------------------------------------------------------------

def test_catalog_has_every_family_and_size():
    names = [s.name for s in list_workloads()]
    assert names == [f"{f}:{s}" for f in FAMILIES for s in SIZES]
    assert parse_workload("mlp:S") == get_spec("mlp", "S")
    assert parse_workload(" Recsys:l ").name == "recsys:L"


@pytest.mark.parametrize(("text", "expected"), [
    ("foo:S", "unknown workload family 'foo' (choose from mlp, cnn, transformer, recsys)"),
    ("mlp:XL", "unknown size for mlp 'XL' (choose from S, M, L)"),
    ("mlp", "bad workload 'mlp' (use FAMILY:SIZE"),
])
def test_bad_family_or_size_is_one_line_workload_error(text, expected):
    with pytest.raises(WorkloadError) as info:
        parse_workload(text)
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_resolve_routes_mistyped_family_to_the_family_error():
    with pytest.raises(WorkloadError, match="unknown workload family 'mpl'"):
        resolve_workload("mpl:S")
    with pytest.raises(WorkloadError, match="unknown workload 'nothing-here'"):
        resolve_workload("nothing-here")


# --- analytical costs ---------------------------------------------------------------------

@pytest.mark.parametrize("spec", list_workloads(), ids=lambda s: s.name)
def test_closed_form_params_equal_the_weight_list(spec):
    assert spec.config is not None
    assert spec.params == sum(w.size for w in spec.config.weights())
    assert spec.grad_bytes == 4 * spec.params
    assert spec.flops_per_sample == 3 * costs.forward_flops(spec.config) > 0
    names = [w.name for w in spec.config.weights()]
    assert len(names) == len(set(names))


def test_param_formulas_by_hand():
    """A few counts worked out on paper, so the closed forms are not only self-consistent."""
    assert costs.param_count(MLPConfig(4, (3,), 2)) == 4 * 3 + 3 + 3 * 2 + 2
    # stem 3x3x1x8+8; block 8->8: 2 norms (2*8 each) + 2 convs 9*8*8; final norm 16; head 8*2+2
    assert costs.param_count(CNNConfig((8, 8, 1), (8,), (1,), 2)) == \
        (72 + 8) + (16 + 576 + 16 + 576) + 16 + 18
    d = 8  # tied head: V*d + T*d + L*(12 d^2 + 13 d) + 2 d
    assert costs.param_count(TransformerConfig(10, 4, d, 1, 2)) == \
        10 * d + 4 * d + (12 * d * d + 13 * d) + 2 * d
    # tables + bottom (3*4+4) + top ((2+1)*4 -> 5 -> 1)
    assert costs.param_count(RecsysConfig((7, 9), 4, 2, 3, (5,))) == \
        16 * 4 + 16 + (12 * 5 + 5) + (5 + 1)


def test_activation_memory_by_hand():
    """What backward reads, counted on paper (the rule in costs.activation_elements)."""
    # mlp:S keeps its 1024 inputs, two 128-wide ReLU outputs and the 10-way softmax, in fp32
    assert get_spec("mlp", "S").activation_bytes_per_sample == 4 * (1024 + 128 + 128 + 10)
    # image 8x8x1; block at 8x8: input, relu(norm1), conv1 out, relu(norm2): 64 * (8+8+8+8);
    # head: norm input and ReLU output 2 * 64 * 8, averaged vector 8, softmax 2
    assert costs.activation_elements(CNNConfig((8, 8, 1), (8,), (1,), 2)) == \
        64 + 64 * 32 + 2 * 64 * 8 + 8 + 2
    # a 2x2 pool before stage 1 keeps its 8x8x8 input; stage 1 runs at 4x4, 8 -> 16 channels
    assert costs.activation_elements(CNNConfig((8, 8, 1), (8, 16), (1, 1), 2)) == \
        64 + 64 * 32 + 64 * 8 + 16 * 2 * (8 + 16) + 2 * 16 * 16 + 16 + 2
    # T=4, d=8, 1 block, 2 heads: per token 16 d + heads * T, then ln_f in/out 2 d, vocab 10
    assert costs.activation_elements(TransformerConfig(10, 4, 8, 1, 2)) == \
        4 * ((16 * 8 + 2 * 4) + 2 * 8 + 10)
    # dense 3, bottom ReLU 4, concat (2 + 1) * 4, top ReLU 5, logit 1
    assert costs.activation_elements(RecsysConfig((7, 9), 4, 2, 3, (5,))) == 3 + 4 + 12 + 5 + 1
    assert costs.activation_bytes(MLPConfig(4, (3,), 2)) == 4 * (4 + 3 + 2)


def test_specs_carry_activation_memory_and_name_their_rows():
    spec = get_spec("cnn", "S")
    assert spec.summary()["activation_bytes_per_sample"] == spec.activation_bytes_per_sample > 0
    assert (spec.name, spec.row_names()) == ("cnn:S", ("cnn", "S"))
    assert profile_workload(params=10, step_compute_s=1.0, name="x")[0].row_names() == ("x", "")


def test_sizes_do_what_they_are_for():
    """S is tiny; dense L is ~100 MB of fp32 gradient (network-bound at 1 Gbit/s)."""
    for family in FAMILIES:
        s, m, big = (get_spec(family, size) for size in SIZES)
        assert s.params < m.params <= big.params
        assert s.flops_per_step() < 2e9  # tens of ms on 2 cores
    for family in ("mlp", "cnn", "transformer"):
        big = get_spec(family, "L")
        assert 20e6 <= big.params <= 30e6
        assert 2 * big.grad_bytes * 8 / 1e9 > 1.0  # ring all-reduce at 1 Gbit/s: > 1 s
    rec = get_spec("recsys", "L")
    assert rec.grad_bytes > 4 * get_spec("mlp", "L").grad_bytes and rec.sparsity < 0.01


def test_dense_families_touch_everything():
    for family in ("mlp", "cnn", "transformer"):
        spec = get_spec(family, "S")
        assert spec.sparsity == 1.0 == spec.sparsity_of(batch(spec, 0))


@pytest.mark.parametrize("size", ["S", "M"])
def test_recsys_expected_sparsity_matches_sampled_batches(size):
    spec = get_spec("recsys", size)
    measured = [spec.sparsity_of(batch(spec, step, seed=5)) for step in range(20)]
    assert 0 < spec.sparsity < 0.05
    assert np.mean(measured) == pytest.approx(spec.expected_sparsity(), rel=0.03)
    # a bigger batch touches more rows
    assert spec.expected_sparsity(4 * spec.batch_size) > spec.sparsity


# --- data ---------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(family=st.sampled_from(FAMILIES), step=st.integers(0, 10**6),
       seed=st.integers(0, 2**31), n=st.integers(1, 6))
def test_batches_are_deterministic_in_step_and_seed(family, step, seed, n):
    spec = get_spec(family, "S")
    a, b = batch(spec, step, n, seed), batch(spec, step, n, seed)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
        assert len(a[key]) == n
    other = batch(spec, step + 1, n, seed)
    inputs = "ids" if family == "recsys" else "x"
    assert not np.array_equal(a[inputs], other[inputs])


def test_batch_shapes_and_dtypes():
    for spec in (get_spec(f, "S") for f in FAMILIES):
        b = batch(spec, 3, 4)
        if spec.family == "recsys":
            assert b["ids"].shape == (4, len(spec.config.table_rows), spec.config.hotness)
            assert b["ids"].dtype == np.int64 and b["dense"].dtype == np.float32
            assert b["ids"].min() >= 0 and b["ids"].max() < min(spec.config.table_rows)
        elif spec.family == "transformer":
            assert b["x"].shape == b["y"].shape == (4, spec.config.context)
            assert b["x"].max() < spec.config.vocab
        else:
            assert b["x"].dtype == np.float32 and b["y"].dtype == np.int64


def test_language_targets_are_inputs_shifted_by_one():
    spec = get_spec("transformer", "S")
    for source in ("synthetic", "real"):
        b = batch(spec, 0, 3, source=source)
        np.testing.assert_array_equal(b["x"][:, 1:], b["y"][:, :-1])


def test_shards_are_slices_of_the_global_batch():
    spec = get_spec("recsys", "S")
    full = batch(spec, 7, 12, seed=1)
    parts = [shard(full, r, 3) for r in range(3)]
    for key in full:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), full[key])
    assert workloads.batch_shard(spec, 7, 12, 2, 3, seed=1)["y"].tolist() == \
        parts[2]["y"].tolist()
    with pytest.raises(WorkloadError, match="does not split evenly"):
        shard(full, 0, 5)
    with pytest.raises(WorkloadError, match="rank 3 is not in a world of size 3"):
        shard(full, 3, 3)


def test_user_batches_shard_too():
    workload = resolve_workload(f"{FIXTURE}:torch_workload")
    x, y = workload.make_batch(0, 8, 0)
    part = shard((x, y), 1, 2)
    assert isinstance(part, tuple)
    np.testing.assert_array_equal(part[0], x[4:])
    with pytest.raises(WorkloadError, match="disagree on the batch size"):
        shard((x, y[:3]), 0, 2)
    with pytest.raises(WorkloadError, match="cannot shard a batch of type int"):
        shard(3, 0, 2)


def test_real_offline_data():
    mlp, cnn, lm = (get_spec(f, "S") for f in ("mlp", "cnn", "transformer"))
    digits = batch(mlp, 0, 5, source="real")
    assert digits["x"].shape == (5, 1024) and set(digits["y"]) <= set(range(10))
    images = batch(cnn, 0, 5, source="real")
    assert images["x"].shape == (5, 32, 32, 3)
    np.testing.assert_array_equal(images["x"][..., 0], images["x"][..., 2])
    text = batch(lm, 4, 2, source="real")
    decoded = bytes(text["x"][0].astype(np.uint8)).decode("utf-8", "replace")
    assert len(decoded) > 0 and text["x"].max() < 256
    np.testing.assert_array_equal(text["x"], batch(lm, 4, 2, source="real")["x"])
    with pytest.raises(WorkloadError, match="no offline real data for 'recsys:S'"):
        batch(get_spec("recsys", "S"), 0, 2, source="real")
    with pytest.raises(WorkloadError, match="unknown data source 'web'"):
        batch(mlp, 0, 2, source="web")


# --- profile workloads --------------------------------------------------------------------

def test_profile_workload_parses():
    p, stated = parse_profile("profile:params=25e6,flops_per_sample=1.5e8,sparsity=0.03")
    assert (p, stated) == profile_workload(params=25_000_000, flops_per_sample=1.5e8,
                                           sparsity=0.03)
    assert stated == Stated()  # nothing stated beside the model
    big, said = profile_workload(params=1_200_000_000, step_compute_s=0.08, batch_size=64,
                                 name="big")
    assert resolve_workload("profile:params=1.2G,step_time_s=0.08,batch=64,name=big") == big
    assert said.step_compute_s == 0.08
    spec = p
    assert (spec.name, spec.grad_bytes, spec.frameworks) == ("profile", 100_000_000, ())
    assert spec.sparsity == 0.03


@pytest.mark.parametrize(("text", "message"), [
    ("profile:flops_per_sample=1e8", "profile needs params="),
    ("profile:params=1e6", "profile needs flops_per_sample= or step_time_s="),
    ("profile:params=lots,step_time_s=1", "profile params='lots' is not a number"),
    ("profile:params=1e6,step_time_s=1,sparsity=2", "profile sparsity=2.0 must be in (0, 1]"),
    ("profile:params=1e6,step_time_s=1,colour=red", "unknown profile field 'colour'"),
    ("profile:params=1e6,params=2,step_time_s=1", "profile field 'params' given twice"),
    ("profile:params=1e6,step_time_s", "bad profile field 'step_time_s'"),
    ("profile:params=1.5,step_time_s=1", "profile params='1.5' must be a whole number"),
    ("profile:params=1e6,step_time_s=1,bytes=32", "profile bytes=32 must be from 1 to 16"),
    ("profile:params=1e6,step_time_s=1,bucket=0", "profile bucket=0 must be >= 1 byte"),
])
def test_profile_errors_are_one_line(text, message):
    with pytest.raises(WorkloadError) as info:
        parse_profile(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


# --- user workload references (no framework needed to load one) ---------------------------

def test_user_workload_loads_by_file_and_module(monkeypatch):
    by_file = resolve_workload(f"{FIXTURE}:torch_workload")
    assert isinstance(by_file, UserWorkload) and by_file.name == "tiny-torch"
    monkeypatch.syspath_prepend(str(FIXTURE.parent))
    by_module = resolve_workload("user_workload:keras_workload")
    assert isinstance(by_module, UserWorkload) and by_module.framework == "tf"


@pytest.mark.parametrize(("attr", "message"), [
    ("wrong_type", "returned dict, expected a workloads.UserWorkload"),
    ("NOT_CALLABLE", "is a int, not a callable returning a UserWorkload"),
    ("broken", "raised RuntimeError: the user's factory failed"),
    ("bad_framework", "unknown framework for user workload 'bad' 'jax' (choose from tf, torch)"),
    ("missing", "has no attribute 'missing'"),
])
def test_user_workload_mistakes_are_clear(attr, message):
    with pytest.raises(WorkloadError) as info:
        workloads.load_user_workload(f"{FIXTURE}:{attr}")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_user_workload_reference_errors():
    with pytest.raises(WorkloadError, match="does not exist"):
        workloads.load_user_workload("no/such/file.py:make")
    with pytest.raises(WorkloadError, match="cannot import module 'no_such_module_xyz'"):
        workloads.load_user_workload("no_such_module_xyz:make")
    with pytest.raises(WorkloadError, match="bad workload reference"):
        workloads.load_user_workload("justaname")
    with pytest.raises(WorkloadError, match="batch_size must be an int >= 1"):
        UserWorkload("x", "torch", print, print, print, batch_size=0)
    with pytest.raises(WorkloadError, match="unknown workload entry point 'nope'"):
        workloads.load_entry_point("nope")


def test_entry_points_are_found(monkeypatch, request):
    import importlib.metadata as md

    from workloads import user

    ep = md.EntryPoint("tiny", "user_workload:torch_workload", workloads.ENTRY_POINT_GROUP)
    monkeypatch.syspath_prepend(str(FIXTURE.parent))

    def fake(group=None, **_):
        return md.EntryPoints([ep] if group == workloads.ENTRY_POINT_GROUP else [])

    monkeypatch.setattr(md, "entry_points", fake)
    user._entry_points.cache_clear()  # read once a process: this one reads the fake
    request.addfinalizer(user._entry_points.cache_clear)  # and the next test the real ones
    assert workloads.entry_point_names() == ["tiny"]
    loaded = resolve_workload("tiny")
    assert isinstance(loaded, UserWorkload) and loaded.name == "tiny-torch"


# --- the framework boundary ---------------------------------------------------------------

def test_importing_workloads_imports_no_framework():
    code = (
        "import sys, workloads\n"
        "for s in workloads.list_workloads(): workloads.batch(s, 0, 2)\n"
        f"workloads.resolve_workload({str(FIXTURE) + ':torch_workload'!r})\n"
        "workloads.resolve_workload('profile:params=1e6,step_time_s=0.1')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'torch', 'keras', 'jax'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_framework_missing_reports_without_importing():
    assert workloads.framework_missing("torch") is None
    with pytest.raises(WorkloadError, match="unknown framework 'jax'"):
        workloads.framework_missing("jax")
