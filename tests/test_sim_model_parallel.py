"""Model parallelism in the simulator: layered models, the 3D step, memory, bad layouts."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stratbench_cli import stratbench

from harness.core.errors import SpecError
from harness.sim.model.layered import Layer, LayeredModel, Layout, check_layout, stage_layers
from harness.sim.model.memory import model_parallel_memory
from harness.sim.model.structure import layered
from harness.sim.step.model_parallel import model_parallel_step
from harness.sim.systems import calibration as cal
from harness.sim.systems.spec import parse_topology
from workloads import costs
from workloads.catalog import get_spec
from workloads.known import DIMS_MODELS, TRANSFORMERS


@pytest.mark.parametrize("name", ["transformer:S", "transformer:M", "transformer:L", "mlp:S",
                                  "mlp:M", "mlp:L", *TRANSFORMERS])
def test_a_models_layers_add_up_to_its_totals(name):
    model = layered(name)
    config = (TRANSFORMERS[name] if name in TRANSFORMERS
              else get_spec(*name.split(":")).config)
    assert model.params == costs.param_count(config)
    assert model.flops_per_sample == costs.training_flops(config)
    assert model.activation_bytes_per_sample == costs.activation_bytes(config)


@pytest.mark.parametrize("name", sorted(DIMS_MODELS))
def test_a_model_by_its_dimensions_adds_up_in_layers(name):
    """Llama 3, Mixtral, DeepSeek-V3 (latent attention, its first 3 blocks dense): the
    layers the simulator splits hold the record's parameters, FLOPs and activations."""
    dims = DIMS_MODELS[name]
    model = layered(name)
    assert len(model.blocks) == dims.layers
    assert model.params == dims.params
    assert model.flops_per_sample == pytest.approx(3 * dims.forward_flops, rel=1e-12)
    assert model.activation_bytes_per_sample == pytest.approx(4 * dims.activations, rel=1e-12)
    dense = [b for b in model.blocks if not b.expert_params]
    assert len(dense) == (dims.dense_layers if dims.experts else dims.layers)
    if dims.experts:  # the dense blocks lead
        assert model.blocks[:len(dense)] == tuple(dense)


def _uniform(blocks: int, heads: int = 8) -> LayeredModel:
    block = Layer("block", params=1000, flops_per_sample=3e6, activation_bytes_per_sample=4e3,
                  output_bytes_per_sample=1e3, input_bytes_per_sample=1e3, tp_allreduces=2,
                  tp_units=heads, replicated_activation_bytes_per_sample=1e3)
    return LayeredModel("uniform", (), (block,) * blocks, (), batch_size=1)


FREE = "switch:n=64,bw=100000TB/s,lat=0us"  # links that cost nothing: the pipeline alone


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 16), st.sampled_from(["gpipe", "1f1b"]))
def test_on_free_links_the_3d_step_is_the_pipeline_formula(stages, microbatches, schedule):
    """Equal stages, free links: (M + S - 1) passes of a micro-batch's forward and backward,
    the bubble (S - 1)/(M + S - 1), whatever the tensor and data degrees."""
    model = _uniform(8)
    layout = Layout(data=2, stages=stages, tensor=2, microbatches=microbatches,
                    schedule=schedule)
    calib = cal.Calibration(device_flops=1e9)
    batch = 2 * microbatches
    r = model_parallel_step(parse_topology(FREE), model, layout, batch, calib)
    per_microbatch = 8 * 3e6 / 1e9 / stages / 2  # one sample, its stage's share, T ranks
    assert r.bubble == pytest.approx((stages - 1) / (microbatches + stages - 1))
    assert r.step_time_s == pytest.approx((microbatches + stages - 1) * per_microbatch,
                                          rel=1e-6)
    assert r.workers == 2 * stages * 2 and r.layout == layout.describe()


def test_links_cost_what_they_carry_tensor_all_reduces_sends_and_data_all_reduce():
    model = _uniform(4)
    calib = cal.Calibration(device_flops=1e9)
    free = model_parallel_step(parse_topology(FREE), model, Layout(2, 2, 2, 4), 8, calib)
    slow = model_parallel_step(parse_topology("switch:n=8,bw=1Gbit,lat=10us"), model,
                               Layout(2, 2, 2, 4), 8, calib)
    assert slow.step_time_s > free.step_time_s
    assert slow.bytes_per_step == free.bytes_per_step > 0  # same traffic, slower links
    # per step: 4 blocks x 2 all-reduces x (fwd + bwd) x 4 micro-batches in each of 2 TP
    # groups; 2 x 4 sends each way; 2 stages x 2 TP ranks' data-parallel all-reduce
    assert slow.collectives == 4 * 2 * 2 * 4 + 2 * 4 + 2
    only_pipeline = model_parallel_step(parse_topology("switch:n=8,bw=1Gbit,lat=10us"), model,
                                        Layout(1, 2, 1, 4), 4, calib)
    assert only_pipeline.collectives == 2 * 4 and only_pipeline.strategy == "pipeline"


def test_a_slow_inter_host_link_makes_stages_across_hosts_cost_more_than_tensor_within():
    """Megatron's placement: tensor ranks adjacent (one host), stages across hosts."""
    topo = parse_topology("two_level:hosts=2,gpus=4,intra=300GB/s,inter=1Gbit")
    calib = cal.Calibration(device_flops=1e12)
    model = layered("transformer:M")
    within = model_parallel_step(topo, model, Layout(1, 2, 4, 8), 8, calib)
    across = model_parallel_step(topo, model, Layout(1, 4, 2, 8), 8, calib)
    assert within.step_time_s < across.step_time_s


def test_the_catalogs_175b_model_on_1024_devices_simulates():
    topo = parse_topology("preset:dgx_h100_ib,hosts=128")
    calib = cal.from_preset("dgx_h100_ib")
    r = model_parallel_step(cal.apply(topo, calib), layered("gpt3_175b"),
                            Layout(8, 16, 8, 192), 1536, calib)
    assert r.workers == 1024 and 0 < r.bubble < 0.2
    assert r.strategy == "data+pipeline+tensor" and r.step_time_s > r.compute_s


@pytest.mark.parametrize("layout, batch, message", [
    (Layout(1, 3, 1, 1), 8, "3 stages do not divide the 4 layers"),
    (Layout(1, 2, 1, 3), 8, "3 micro-batches do not divide the batch of 8"),
    (Layout(1, 1, 8, 1), 8, "tensor-parallel degree 8 must divide the 4 attention heads"),
    (Layout(1, 1, 3, 1), 8, "tensor-parallel degree 3 must divide the 4 attention heads"),
    (Layout(3, 1, 1, 1), 8, "data-parallel degree 3 does not divide the global batch of 8"),
    (Layout(1, 2, 1, 2, "zigzag"), 8, "unknown pipeline schedule"),
])
def test_a_layout_the_model_cannot_take_is_one_clear_error(layout, batch, message):
    with pytest.raises(SpecError, match=message):
        check_layout(layered("transformer:M"), layout, batch)


def test_tensor_parallelism_of_a_model_without_heads_is_refused():
    with pytest.raises(SpecError, match="no layer tensor parallelism can split"):
        check_layout(layered("mlp:M"), Layout(1, 1, 2, 1), 64)


def test_memory_per_device_follows_the_layout():
    model = layered("gpt2_xl")
    whole = model_parallel_memory(model, Layout(), 1, "adam")
    assert whole.params == model.params * 4 and whole.optimizer == 2 * whole.params
    assert whole.activations == pytest.approx(model.activation_bytes_per_sample)
    assert model_parallel_memory(model, Layout(), 1, "sgd").optimizer == 0
    tensor = model_parallel_memory(model, Layout(tensor=5), 1)
    assert tensor.params == pytest.approx(whole.params / 5)
    assert whole.activations / 5 < tensor.activations < whole.activations  # norms stay whole
    one_f = model_parallel_memory(model, Layout(stages=4, microbatches=16), 1)
    gpipe = model_parallel_memory(model, Layout(stages=4, microbatches=16, schedule="gpipe"),
                                  1)
    assert one_f.activations < gpipe.activations
    assert model_parallel_memory(model, Layout(stages=4, microbatches=16), 1,
                                 recompute=True).activations < one_f.activations / 4
    first, *_, last = stage_layers(model, 4)
    assert last[-1].name == "head" and first[0].name == "embedding"


def test_simulate_cli_takes_a_layout_and_refuses_a_bad_one_in_one_line():
    ok = stratbench("simulate", "--topology",
                         "preset:dgx_h100_ib,hosts=2", "--workers", "16", "--workload",
                         "gpt3_175b", "--stages", "4", "--tensor-parallel", "2",
                         "--global-batch", "16", "--json")
    assert ok.returncode == 0, ok.stderr
    (row,) = json.loads(ok.stdout)
    assert (row["data_parallel"], row["pipeline_stages"], row["tensor_parallel"]) == (2, 4, 2)
    assert row["microbatches"] == 8 and row["global_batch"] == 16  # one sample each
    # 175e9 parameters' state over 8 model-parallel devices cannot fit 80 GB: said, with bytes
    assert row["status"] == "does not fit" and row["memory_per_device_bytes"] > 80e9
    assert row["reason"].startswith("does not fit: needs") and "of 80 GB" in row["reason"]
    assert row["step_time_median_s"] > 0  # still timed: how long it would take
    for args in (["--stages", "5"], ["--stages", "2", "--microbatches", "3"],
                 ["--tensor-parallel", "16"], ["--stages", "3"]):
        bad = stratbench("simulate", "--topology",
                              "preset:dgx_h100_ib,hosts=2", "--workers", "16", "--workload",
                              "gpt2_xl", *args)
        assert bad.returncode == 2 and bad.stdout == "", bad.stdout
        assert bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("stratbench:")


def test_processes_sharing_fewer_cores_compute_slower_but_their_collectives_do_not():
    """Emulated hosts: T one-thread processes on C < T cores compute at C/T speed; the
    tensor all-reduces between the passes take no core."""
    model = _uniform(4)
    calib = cal.Calibration(device_flops=1e9)
    free = parse_topology(FREE)
    alone = model_parallel_step(free, model, Layout(tensor=4), 8, calib)
    shared = model_parallel_step(free, model, Layout(tensor=4), 8, calib, cores=2)
    assert shared.step_time_s == pytest.approx(2 * alone.step_time_s, rel=1e-6)
    slow = parse_topology("switch:n=4,bw=100Mbit,lat=50us")
    talk = model_parallel_step(slow, model, Layout(tensor=4), 8, calib)
    talk_shared = model_parallel_step(slow, model, Layout(tensor=4), 8, calib, cores=2)
    assert talk_shared.step_time_s - talk.step_time_s == pytest.approx(
        alone.step_time_s, rel=1e-6)  # only the compute doubled


# --- NCCL's rails and Megatron's overlaps ----------------------------------------------------

@pytest.mark.parametrize("tensor", [1, 2, 4])
def test_a_data_parallel_group_with_several_gpus_per_host_uses_every_nic_it_owns(tensor):
    """One ring per NIC (NCCL's channels on DGX rails): a group holding k devices on each
    host builds k rings, each leaving every host from a different device, so the group's
    k NICs all carry bytes; a group of one device per host keeps one ring."""
    import numpy as np

    from harness.sim.step.model_parallel import _rail_channels

    topology = parse_topology("preset:dgx_h100_ib,hosts=4")
    group = [d for d in range(32) if d % tensor == 0]  # tensor rank 0's data-parallel group
    channels = _rail_channels(topology, 1, len(group), group)
    k = 8 // tensor
    assert len(channels) == k
    leaving = set()
    for order in channels:
        ring = [group[i] for i in np.asarray(order)[0]]
        assert sorted(ring) == group  # every rank once
        leaving |= {a for a, b in zip(ring, ring[1:] + ring[:1], strict=True) if a // 8 != b // 8}
    assert len(leaving) == 4 * k  # k exits on each of the 4 hosts
    assert _rail_channels(topology, 1, 4, [0, 8, 16, 24]) == [None]


def test_rails_make_a_whole_host_data_parallel_reduction_faster():
    from harness.sim.step.model_parallel import _timed

    topology = parse_topology("preset:dgx_h100_ib,hosts=2")
    rails = _timed("allreduce", 1, 16, topology, 1e9, tuple(range(16)), "fast").time_s
    from harness.sim.network.engine import run_collective
    from harness.sim.schedules.collectives import grouped_ring_allreduce

    single = run_collective(grouped_ring_allreduce(1, 16), topology, 1e9, mode="fast",
                            devices=list(range(16))).time_s
    assert rails < single / 3


def test_overlapping_the_parameter_gather_is_named_and_never_slower():
    model = layered("transformer:layers=8,hidden=2048,heads=16,vocab=32000,seq=2048")
    topology = parse_topology("preset:dgx_h100_ib,hosts=4")
    calibration = cal.from_preset("dgx_h100_ib")
    plain = Layout(data=16, tensor=2, microbatches=2, zero=1)
    hidden = Layout(data=16, tensor=2, microbatches=2, zero=1, param_gather_overlap=True)
    a = model_parallel_step(topology, model, plain, 64, calibration)
    b = model_parallel_step(topology, model, hidden, 64, calibration)
    assert "param gather overlap" in hidden.describe()
    assert "param gather overlap" not in plain.describe()
    assert b.step_time_s <= a.step_time_s


#: each mechanism a user states of their stack: (the waiting way, the overlapped way)
OVERLAPS = {"tp_overlap": (False, True), "param_gather_overlap": (False, True),
            "grad_reduce": ("after_backward", "overlapped"), "p2p": ("blocking", "async")}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 4]), st.sampled_from([0, 1]), st.sampled_from(sorted(OVERLAPS)),
       st.sampled_from(sorted(OVERLAPS)))
def test_overlapping_a_collective_never_slows_a_step(data, stages, tensor, microbatches, zero,
                                                     mechanism, other):
    """Whatever the split and whatever else the stack overlaps, running one more collective
    under compute (or a send in the background) never makes the step longer: what
    ``recommend --tp-overlap`` and its kind change can only help a layout, so the search's
    pick under them is never slower than without."""
    model = layered("transformer:layers=4,hidden=1024,heads=8,vocab=8000,seq=1024")
    topology = parse_topology("preset:dgx_h100_ib,hosts=4")
    calibration = cal.from_preset("dgx_h100_ib")
    base = Layout(data=data, stages=stages, tensor=tensor, microbatches=microbatches,
                  zero=zero, sequence_parallel=tensor > 1,
                  **{other: OVERLAPS[other][1]})
    waits, overlaps = (replace(base, **{mechanism: value}) for value in OVERLAPS[mechanism])
    batch = data * microbatches
    slow = model_parallel_step(topology, model, waits, batch, calibration)
    fast = model_parallel_step(topology, model, overlaps, batch, calibration)
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-9)


# --- the one layout record ------------------------------------------------------------------

@given(st.integers(1, 64), st.integers(1, 16), st.integers(1, 8), st.integers(1, 4),
       st.integers(1, 8), st.integers(1, 32), st.sampled_from(["1f1b", "gpipe", "interleaved"]),
       st.integers(1, 4))
def test_a_layout_reads_back_from_the_columns_it_is_stored_under(
        data, stages, tensor, context, expert, microbatches, schedule, virtual):
    """harness.core.layout: the simulator writes a row's layout through to_columns, the
    predictions read it back through from_columns, under one set of names."""
    from harness.core.layout import Layout as CoreLayout

    layout = CoreLayout(data=data, stages=stages, tensor=tensor, context=context,
                        expert=expert, microbatches=microbatches, schedule=schedule,
                        virtual=virtual)
    row = {"replicas": layout.devices, **layout.to_columns()}
    assert CoreLayout.from_columns(row) == layout
    assert row["layout"] == layout.describe()


def test_a_stored_runs_older_column_names_still_read():
    from harness.core.layout import Layout as CoreLayout

    old = {"replicas": 4, "extra": {"stages": 2, "microbatches": 4, "schedule": "gpipe"}}
    assert CoreLayout.from_columns(old) == CoreLayout(data=2, stages=2, microbatches=4,
                                                      schedule="gpipe")
    assert CoreLayout.from_columns({"replicas": 2, "extra": {"tensor_parallel_degree": 2}}) \
        == CoreLayout(tensor=2)
    assert CoreLayout.from_columns({"replicas": 2}) is None
    assert Layout is CoreLayout  # the simulator's Layout is this record


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 8 * 40 - 1), min_size=1, max_size=200))
def test_a_placement_is_renumbered_by_its_hosts_first_appearance_long_or_short(devices):
    """Long device lists are renumbered with numpy, short ones in Python: both give each
    host the number of its first appearance and keep every device's place on its host."""
    from harness.sim.step.model_parallel import _canonical

    topology = parse_topology("preset:dgx_h100_ib,hosts=40")
    hosts: dict[int, int] = {}
    expected = tuple(hosts.setdefault(d // 8, len(hosts)) * 8 + d % 8 for d in devices)
    assert _canonical(topology, devices) == expected


@pytest.mark.parametrize("loops", ["dct", "tdc", "dtc", "ctd"])
def test_a_stages_ranks_are_its_devices_in_the_order_of_the_loops_named(loops):
    layout = Layout(data=3, stages=2, tensor=2, context=2)
    sizes = {"d": 3, "c": 2, "t": 2}
    for nxt in (False, True):
        expected = []
        for values in itertools.product(*(range(sizes[a]) for a in loops)):
            at = dict(zip(loops, values, strict=True))
            c = (at["c"] + 1) % 2 if nxt else at["c"]
            expected.append(layout.device(at["d"], 1, at["t"], c))
        assert layout.ranks(1, loops, next_context=nxt) == tuple(expected)
    with pytest.raises(ValueError, match="d, c and t once each"):
        layout.ranks(0, "ddt")
