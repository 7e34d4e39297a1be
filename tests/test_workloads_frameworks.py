"""TF and torch models of every family: same architecture, same parameters, same numbers.

Both builders copy in the same numpy initial weights, so beyond equal parameter counts the
tests can demand equal losses and equal weights after SGD steps: that is what "the same
model in both frameworks" means. Recsys sparsity is measured from real gradients.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import lazy
import numpy as np
import pytest

from workloads import (
    FAMILIES,
    UserWorkload,
    WorkloadError,
    batch,
    costs,
    describe_user_workload,
    get_spec,
    load_user_workload,
)

# imported by the first test that uses them (tests/lazy.py), not at collection
tf_models = lazy.module("workloads.tf_models")
torch_models = lazy.module("workloads.torch_models")
torch = lazy.module("torch")
tf = lazy.module("tensorflow")

FIXTURE = Path(__file__).parent / "fixtures" / "user_workload.py"
BACKENDS = {"tf": tf_models, "torch": torch_models}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """2 shared cores: torch's spinning worker threads can slow small steps 10x under load."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _shapes(spec):
    return [(w.name, w.shape) for w in spec.config.weights()]


def _check_params(spec):
    expected = _shapes(spec)
    for name, backend in BACKENDS.items():
        model = backend.build_model(spec, seed=0)
        got = [(n, tuple(a.shape)) for n, a in zip(
            [n for n, _ in backend.named_weights(model)], backend.get_weights(model),
            strict=True)]
        assert got == expected, f"{name} weights differ from the spec's list"
        assert backend.count_params(model) == spec.params == costs.param_count(spec.config)
        del model


@pytest.mark.parametrize("size", ["S", "M"])
@pytest.mark.parametrize("family", FAMILIES)
def test_param_counts_match_across_frameworks_and_spec(family, size):
    _check_params(get_spec(family, size))


@pytest.mark.parametrize("family", FAMILIES)
def test_large_param_counts_match_across_frameworks_and_spec(family):
    _check_params(get_spec(family, "L"))


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_model_in_both_frameworks(family):
    """Equal initial weights, equal loss on one batch, equal weights after two SGD steps."""
    spec = get_spec(family, "S")
    tf_model, torch_model = (BACKENDS[f].build_model(spec, seed=3) for f in ("tf", "torch"))
    for a, b in zip(tf_models.get_weights(tf_model), torch_models.get_weights(torch_model),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    data = batch(spec, 0, seed=3)
    tf_loss = float(tf_models.loss(spec, tf_model, data))
    torch_loss = float(torch_models.loss(spec, torch_model, data).detach())
    assert tf_loss == pytest.approx(torch_loss, rel=1e-5)
    batches = [batch(spec, step, seed=3) for step in range(2)]
    tf_losses = tf_models.train_steps(tf_model, spec, batches, lr=0.05)
    torch_losses = torch_models.train_steps(torch_model, spec, batches, lr=0.05)
    np.testing.assert_allclose(tf_losses, torch_losses, rtol=1e-4)
    for a, b in zip(tf_models.get_weights(tf_model), torch_models.get_weights(torch_model),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("framework", ["tf", "torch"])
@pytest.mark.parametrize("family", FAMILIES)
def test_one_sgd_step_lowers_the_loss(family, framework):
    spec = get_spec(family, "S")
    backend = BACKENDS[framework]
    model = backend.build_model(spec, seed=1)
    fixed = batch(spec, 0, seed=1)
    before, after = backend.train_steps(model, spec, [fixed, fixed], lr=0.05)
    assert after < before


def test_tf_per_example_loss_averages_to_the_loss():
    for family in ("transformer", "recsys"):
        spec = get_spec(family, "S")
        model = tf_models.build_model(spec)
        data = batch(spec, 0, 4)
        per_example = tf_models.per_example_loss(spec, model, data)
        assert tuple(per_example.shape) == (4,)
        assert float(tf.reduce_mean(per_example)) == pytest.approx(
            float(tf_models.loss(spec, model, data)), rel=1e-6)


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_training_on_real_data_lowers_the_loss(framework):
    backend = BACKENDS[framework]
    for family in ("mlp", "transformer"):
        spec = get_spec(family, "S")
        model = backend.build_model(spec, seed=0)
        fixed = batch(spec, 0, 16, source="real")
        before, after = backend.train_steps(model, spec, [fixed, fixed], lr=0.05)
        assert after < before


def test_torch_forward_flops_match_the_formula():
    """torch's FLOP counter sees our matmuls/convs exactly (it skips embeddings and SDPA)."""
    from torch.utils.flop_counter import FlopCounterMode

    for family in FAMILIES:
        spec = get_spec(family, "S")
        c = spec.config
        model = torch_models.build_model(spec)
        b = torch_models.to_tensors(batch(spec, 0, 1))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(b["dense"], b["ids"]) if family == "recsys" else model(b["x"])
        uncounted = 0
        if family == "transformer":
            uncounted = c.layers * 4 * c.context * c.context * c.d_model
        if family == "recsys":
            uncounted = len(c.table_rows) * c.hotness * c.dim
        assert counter.get_total_flops() == costs.forward_flops(c) - uncounted, family


# --- recsys: sparsity measured from real gradients ----------------------------------------

def _touched(spec, rows_per_table):
    c = spec.config
    dense = spec.params - c.embedding_params
    return (dense + c.dim * sum(rows_per_table)) / spec.params


@pytest.mark.parametrize("sparse", [True, False])
def test_recsys_torch_gradient_sparsity_matches_spec(sparse):
    spec = get_spec("recsys", "S")
    model = torch_models.build_model(spec, seed=0, sparse=sparse)
    data = batch(spec, 2, seed=4)
    _, grads = torch_models.gradients(spec, model, data)
    rows = []
    for (name, _), g in zip(torch_models.named_weights(model), grads, strict=True):
        if not name.startswith("tables."):
            assert g is not None and not g.is_sparse
            continue
        assert g.is_sparse == sparse
        if sparse:
            rows.append(int(g.coalesce().indices()[0].unique().numel()))
        else:
            rows.append(int((g != 0).any(dim=1).sum()))
    measured = _touched(spec, rows)
    assert measured == pytest.approx(spec.sparsity_of(data), rel=1e-12)
    assert measured < 0.1


def test_recsys_tf_gradient_sparsity_matches_spec():
    spec = get_spec("recsys", "S")
    model = tf_models.build_model(spec, seed=0)
    data = batch(spec, 2, seed=4)
    _, grads = tf_models.gradients(spec, model, data)
    rows = []
    for (name, _), g in zip(tf_models.named_weights(model), grads, strict=True):
        if name.startswith("tables."):
            assert isinstance(g, tf.IndexedSlices), name
            rows.append(int(np.unique(g.indices.numpy()).size))
    assert _touched(spec, rows) == pytest.approx(spec.sparsity_of(data), rel=1e-12)


def test_sparse_torch_step_only_changes_touched_rows():
    spec = get_spec("recsys", "S")
    model = torch_models.build_model(spec, seed=0, sparse=True)
    data = batch(spec, 0, seed=0)
    before = torch_models.get_weights(model)[0]
    torch_models.train_steps(model, spec, [data], lr=0.1)
    changed = np.flatnonzero((torch_models.get_weights(model)[0] != before).any(axis=1))
    np.testing.assert_array_equal(changed, np.unique(data["ids"][:, 0, :]))


def test_fsdp_units_cover_the_blocks():
    spec = get_spec("transformer", "S")
    model = torch_models.build_model(spec)
    assert len(torch_models.shard_units(model)) == spec.config.layers
    assert len(torch_models.shard_units(torch_models.build_model(get_spec("cnn", "S")))) == 3


@pytest.mark.parametrize("family", ["cnn", "recsys"])
@pytest.mark.parametrize("size", ["S", "M"])
def test_a_convnets_or_recommenders_fsdp_units_are_as_many_as_the_runner_wraps(family, size):
    """A unit's gather and reduce-scatter are paid once per unit: for a built-in convnet or
    recommender, whose blocks differ in size, the simulator's equal units
    (``fsdp_unit_params``) number the runner's wrapped blocks (residual blocks, tables) plus
    the root, which holds the stem or dense layers and the head."""
    from harness.sim.model.structure import fsdp_unit_params
    from harness.sim.step.data_parallel import buckets

    spec = get_spec(family, size)
    model = torch_models.build_model(spec)
    units = torch_models.shard_units(model)
    assert sum(p.numel() for unit in units for p in unit.parameters()) < spec.params
    simulated = buckets(spec.params, fsdp_unit_params(f"{family}:{size}"))
    assert len(simulated) == len(units) + 1


# --- user workloads -----------------------------------------------------------------------

@pytest.mark.parametrize("attr", ["torch_workload", "keras_workload"])
def test_user_workload_is_described_and_trained(attr, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURE.parent))
    from user_workload import PARAMS, make_batch  # the fixture, imported as the user would

    workload = load_user_workload(f"{FIXTURE}:{attr}")
    assert isinstance(workload, UserWorkload)
    spec = describe_user_workload(workload)
    assert (spec.name, spec.params, spec.family, spec.frameworks) == \
        (workload.name, PARAMS, "user", (workload.framework,))
    backend = BACKENDS[workload.framework]
    model = workload.build_model(0)
    fixed = make_batch(0, workload.batch_size, 0)
    before, after = backend.train_steps(model, workload, [fixed, fixed], lr=0.1)
    assert after < before


def test_user_model_of_the_wrong_type_is_a_clear_error():
    workload = load_user_workload(f"{FIXTURE}:wrong_model")
    with pytest.raises(WorkloadError, match=r"build_model returned str, expected a "
                                            r"torch\.nn\.Module"):
        describe_user_workload(workload)


def test_user_model_that_fails_to_build_is_a_clear_error():
    make_batch = load_user_workload(f"{FIXTURE}:torch_workload").make_batch

    def explode(seed):
        raise RuntimeError("no GPU here")

    workload = UserWorkload("exploding", "torch", explode, make_batch, lambda m, b: 0.0)
    with pytest.raises(WorkloadError, match="'exploding': building or running the model "
                                            "failed: RuntimeError: no GPU here"):
        describe_user_workload(workload)


def test_what_a_torch_model_keeps_for_backward_is_counted_once_per_storage():
    """A user's model has no layers here: its activations are what autograd saves in one
    forward. Linear(10, 20) keeps its input (10 floats a sample); ReLU its output (20), which
    the next Linear also saves (counted once); the loss its log-softmax (5) and the targets
    (one int64); the weights are not activations."""
    import torch
    from torch import nn

    from harness.runners.torch_operators import saved_activation_bytes

    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x, y = torch.randn(4, 10), torch.randint(0, 5, (4,))
    per_sample = saved_activation_bytes(model, lambda: nn.functional.cross_entropy(model(x), y),
                                        4)
    assert (10 + 20 + 5) * 4 + 8 <= per_sample <= (10 + 20 + 5) * 4 + 8 + 4  # + a scalar
    bigger = torch.randn(4, 10, 3)  # three times the values: three times the bytes
    three = saved_activation_bytes(model, lambda: model(bigger.transpose(1, 2)).sum(), 4)
    assert three == pytest.approx(3 * (10 + 20) * 4, rel=0.01)


def test_what_a_keras_model_keeps_for_backward_is_what_its_gradient_reads():
    """TensorFlow's count: the forward values the traced gradient reads. Dense(10 -> 20)'s
    weight gradient reads its input (10 a sample, a constant of the graph), ReluGrad and the
    next weight gradient the ReLU's output (20, once), the loss's gradient its softmax
    backprop (5); the weights are not activations. Within a scalar of torch's count."""
    import keras
    import tensorflow as tf

    from harness.runners.tf_operators import saved_activation_bytes

    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(20, activation="relu"),
                              keras.layers.Dense(5)])
    x = tf.constant(np.random.default_rng(0).standard_normal((4, 10)).astype("float32"))
    y = tf.constant([0, 1, 2, 3])
    per_sample = saved_activation_bytes(model.trainable_variables, lambda: tf.reduce_mean(
        keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True)), 4)
    assert (10 + 20 + 5) * 4 <= per_sample <= (10 + 20 + 5) * 4 + 4
