"""Topology specs, units, profiles and presets: valid ones parse, anything else is a SpecError."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.errors import InputError, SpecError
from harness.core.units import parse_bandwidth, parse_duration, parse_size
from harness.sim.model.profile import for_simulation
from harness.sim.network.topology import Hierarchy, Torus, link_classes, n_devices
from harness.sim.systems.preset import load_preset, preset_names
from harness.sim.systems.spec import KINDS, describe_topology, parse_topology
from workloads.execution import Execution
from workloads.profile import KEYS as PROFILE_KEYS
from workloads.profile import parse_profile
from workloads.spec import WorkloadError

SETTINGS = settings(max_examples=int(os.environ.get("SIM_EXAMPLES", "200")), deadline=None)


@pytest.mark.parametrize(("text", "bytes_per_s"), [
    ("100Gbit", 12.5e9), ("400Gbit/s", 50e9), ("25Gbps", 3.125e9), ("25Gb", 3.125e9),
    ("300GB/s", 300e9), ("300GBps", 300e9), ("1.5TB/s", 1.5e12), ("1GiB/s", 2**30),
    ("100Mbit", 12.5e6), ("8bit", 1.0), ("1e3B", 1e3), ("2KiB/s", 2048),
])
def test_bandwidth_units(text, bytes_per_s):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize(("text", "seconds"), [
    ("5us", 5e-6), ("5µs", 5e-6), ("1.5ms", 1.5e-3), ("2s", 2.0), ("300ns", 3e-7), ("0", 0.0),
])
def test_duration_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["100", "fast", "-5Gbit", "0Gbit", "1e400Gbit", "10Gbit/h"])
def test_bad_bandwidths_name_the_value(text):
    with pytest.raises(SpecError, match="bandwidth"):
        parse_bandwidth(text)


def test_sizes():
    assert parse_size("25MiB") == 25 * 2**20
    assert parse_size("100MB") == 1e8
    assert parse_size("4096") == 4096


@pytest.mark.parametrize(("spec", "devices", "classes"), [
    ("switch:n=16,bw=100Gbit,lat=5us", 16, ["net"]),
    ("switch:n=4,bw=400Mbit", 4, ["net"]),
    ("ring:n=8,bw=25GB/s,lat=1us", 8, ["ring"]),
    ("two_level:hosts=4,gpus=8,intra=300GB/s,inter=400Gbit,nic=per_device", 32,
     ["intra", "inter"]),
    ("two_level:hosts=2,gpus=4,intra=300GB/s,inter=25Gbit,nic=shared,inter_lat=30us", 8,
     ["intra", "inter"]),
    ("leaf_spine:hosts=32,gpus=8,hosts_per_leaf=8,intra=450GB/s,inter=400Gbit,oversub=2", 256,
     ["intra", "inter", "spine"]),
    ("leaf_spine:hosts=6,hosts_per_leaf=3,inter=100Gbit", 6, ["inter", "spine"]),
    ("leaf_spine:hosts=5,leaves=3+2,inter=150Mbit,uplink=100Mbit", 5, ["inter", "spine"]),
    ("torus:dims=4x4x4,bw=50GB/s,lat=1us", 64, ["ici"]),
    ("preset:dgx_h100_ib", 32, ["intra", "inter"]),
    ("preset:dgx_h100_ib,hosts=16", 128, ["intra", "inter"]),
    ("preset:tpu_v4_cube", 64, ["ici"]),
    (" switch:n=2,bw=1GB/s ", 2, ["net"]),
])
def test_valid_specs_parse(spec, devices, classes):
    topo = parse_topology(spec)
    assert n_devices(topo) == devices
    assert [c.name for c in link_classes(topo)] == classes
    assert topo.spec == spec.strip()


def test_spec_values_reach_the_topology():
    topo = parse_topology("two_level:hosts=4,gpus=8,intra=300GB/s,inter=400Gbit,nic=shared,"
                          "intra_lat=1us,inter_lat=7us")
    assert isinstance(topo, Hierarchy)
    assert topo.intra is not None and topo.intra.bandwidth == 300e9
    assert topo.inter.bandwidth == 50e9 and topo.inter.latency == pytest.approx(7e-6)
    assert topo.nic == "shared" and topo.per_host == 8
    spine = parse_topology("leaf_spine:hosts=8,gpus=4,hosts_per_leaf=4,intra=1TB/s,"
                           "inter=100Gbit,oversub=2")
    assert isinstance(spine, Hierarchy) and spine.spine is not None
    assert spine.spine.bandwidth == pytest.approx(4 * 4 * 12.5e9 / 2)
    torus = parse_topology("torus:dims=2x3,bw=1GB/s")
    assert isinstance(torus, Torus) and torus.dims == (2, 3)
    uneven = parse_topology("leaf_spine:hosts=5,leaves=3+2,inter=150Mbit,uplink=100Mbit")
    assert isinstance(uneven, Hierarchy) and uneven.leaf_hosts == (3, 2)
    assert uneven.spine is not None and uneven.spine.bandwidth == pytest.approx(12.5e6)
    assert "3+2 hosts per leaf" in describe_topology(uneven.spec)


@pytest.mark.parametrize(("spec", "words"), [
    ("mesh:n=4", ["unknown topology kind 'mesh'", "switch"]),
    ("switch:n=4", ["needs bw="]),
    ("switch:n=4,bw=10Gbit,speed=3", ["unknown switch option 'speed'", "lat"]),
    ("switch:n=four,bw=10Gbit", ["n='four'"]),
    ("switch:n=4,bw=10", ["bad bandwidth '10'"]),
    ("switch:n=4,bw=10Gbit,lat=5", ["bad latency '5'"]),
    ("switch:n=4,n=5,bw=1Gbit", ["given twice"]),
    ("two_level:hosts=2,gpus=2,intra=1GB/s,inter=1Gbit,nic=bonded", ["nic='bonded'",
                                                                    "per_device"]),
    ("preset:nope", ["unknown preset 'nope'", "dgx_h100_ib"]),
    ("torus:dims=4x0,bw=1GB/s", ["dims=0"]),
    ("switch:n=99999999,bw=1Gbit", ["n=99999999"]),
    ("leaf_spine:hosts=5,leaves=3+3,inter=1Gbit", ["leaves=3+3", "hosts=5"]),
    ("leaf_spine:hosts=5,inter=1Gbit", ["hosts_per_leaf=N or leaves="]),
    ("leaf_spine:hosts=5,leaves=3+2,hosts_per_leaf=3,inter=1Gbit", ["one of"]),
    ("leaf_spine:hosts=4,leaves=2+2,inter=1Gbit,oversub=2,uplink=1Gbit", ["not both"]),
])
def test_errors_are_one_line_and_name_the_bad_value(spec, words):
    with pytest.raises(SpecError) as info:
        parse_topology(spec)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message
    assert isinstance(info.value, InputError)  # the CLI's exit-code-2 family


_WORDS = [*KINDS, "n", "bw", "lat", "hosts", "gpus", "intra", "inter", "nic", "dims", "oversub",
          "hosts_per_leaf", "Gbit", "GB/s", "us", "shared", "per_device", "dgx_h100_ib"]
_ALPHABET = st.sampled_from([*"=,:x0123456789.eE-+ aAbBgGmMkKiIsuµnt/_", *_WORDS])


@SETTINGS
@given(st.one_of(st.text(max_size=60), st.lists(_ALPHABET, max_size=25).map("".join)))
def test_random_garbage_raises_spec_error_only(text):
    with contextlib.suppress(SpecError):  # anything else propagates and fails the test
        parse_topology(text)


@SETTINGS
@given(st.one_of(st.text(max_size=60),
                 st.lists(st.sampled_from([*PROFILE_KEYS, "=", ",", "25M", "1e9", "100ms",
                                           "0.5", "-1", "x", "MiB"]),
                          max_size=20).map("".join)))
def test_random_profiles_raise_workload_error_only(text):
    with contextlib.suppress(WorkloadError):
        for_simulation(parse_profile(text)[0])


def test_profile_parses():
    """The model apart from what is stated beside it: the step's compute and update (a
    calibration's), the deployment's bytes and bucket (an execution's)."""
    spec, stated = parse_profile("params=25M,batch=64,step_compute=120ms,sparsity=0.01,"
                                 "bucket=50MiB,optimizer=2ms,bytes=2,name=recsys,size=S")
    p, deployed = for_simulation(spec), stated.deployed(Execution(precision="bf16"))
    assert p.params == 25_000_000 and p.batch_size == 64 and p.sparsity == 0.01
    assert stated.step_compute_s == pytest.approx(0.12)
    assert stated.optimizer_s == pytest.approx(0.002)
    assert deployed.precision == "bf16" and deployed.bucket_bytes == 50 * 2**20
    assert p.gradient_bytes(deployed.gradient_element_bytes) == 5e7
    assert p.touched_bytes(deployed.gradient_element_bytes) == pytest.approx(5e5)
    assert parse_profile("params=25M,step_compute=1s")[1].deployed(deployed) == replace(
        deployed, gradient_element_bytes=4, bucket_bytes=None)
    with pytest.raises(WorkloadError, match="flops_per_sample= or step_compute="):
        parse_profile("params=1M")


@pytest.mark.parametrize("name", preset_names())
def test_presets_cite_their_sources_and_prices(name):
    preset = load_preset(name)
    assert preset.source and all(s.strip() for s in preset.source)
    assert any("http" in s for s in preset.source)
    assert preset.peak_flops > 0 and 0 < preset.assumed_efficiency <= 1
    if preset.price is not None:  # null where no public list price was found
        assert preset.price.usd_per_device_hour > 0
        assert any("http" in s for s in preset.price.source)
    assert preset.device.memory_bytes > 0 and preset.device.memory_bandwidth > 0
    parse_topology(f"preset:{name}")


def test_the_expected_presets_ship():
    assert {"dgx_h100_ib", "eth25_v100", "eth100_v100", "tpu_v4_cube", "dgx_a100", "hgx_h200",
            "hgx_b200", "gb200_nvl72", "mi300x", "l40s_eth", "tpu_v5p"} <= set(preset_names())
