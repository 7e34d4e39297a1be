"""Spec parsers: valid specs parse; anything else is an InputError, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core import clusters as specs
from harness.core import strategies as catalog
from harness.core import units
from harness.core.errors import InputError


@pytest.mark.parametrize("text, bits", [
    ("400mbit", 400e6), ("1gbit", 1e9), ("1Gbit", 1e9), ("100Mbps", 100e6),
    ("25G", 25e9), ("10MB", 80e6), ("1.5gbit", 1.5e9),
])
def test_rates(text, bits):
    assert units.parse_rate_bits(text) == pytest.approx(bits)


@pytest.mark.parametrize("text, size", [
    ("1KiB", 1024), ("256MiB", 256 * 2**20), ("4096", 4096), ("1K", 1000), ("2GiB", 2 * 2**30),
])
def test_sizes(text, size):
    assert units.parse_size_bytes(text) == size


def test_cluster_specs():
    assert specs.parse_cluster("local").kind == "local"
    c = specs.parse_cluster("netns:hosts=4,rate=400mbit")
    assert (c.kind, c.hosts, c.rate_bits) == ("netns", 4, 400e6)
    assert specs.parse_cluster("slurm:partition=debug,nodes=2").options["nodes"] == "2"
    assert specs.parse_cluster("slurm:partition=debug,nodes=3").hosts == 3
    r = specs.parse_cluster("netns:hosts=4,rate=800mbit,racks=2,uplink=200mbit")
    assert (r.racks, r.uplink_bits) == (2, 200e6)
    u = specs.parse_cluster("netns:hosts=3,rate=unshaped")
    assert (u.unshaped, u.rate_bits, c.unshaped) == (True, specs.UNSHAPED_RATE_BITS, False)


@pytest.mark.parametrize("bad, says", [
    ("netns:hosts=4,rate=1gbit,racks=2", "go together"),
    ("netns:hosts=4,rate=1gbit,uplink=1gbit", "go together"),
    ("netns:hosts=4,rate=1gbit,racks=5,uplink=1gbit", "from 2 to the number of hosts"),
    ("netns:hosts=4,rate=1gbit,latency=1ms", "netem"),
    ("slurm:nodes=0", "from 1 to"),
    ("slurm:gpus=1", "slurm option"),
])
def test_cluster_spec_errors_say_what_is_wrong(bad, says):
    with pytest.raises(InputError, match=says):
        specs.parse_cluster(bad)


@pytest.mark.parametrize("bad", [
    "netns", "netns:hosts=4", "netns:hosts=x,rate=1gbit", "netns:hosts=4,rate=fast",
    "netns:hosts=4,rate=1gbit,colour=blue", "netns:hosts=4,hosts=5,rate=1gbit",
    "local:hosts=2", "mars", "netns:hosts=4,rate=0mbit", "netns:=,rate=1gbit",
])
def test_bad_cluster_specs(bad):
    with pytest.raises(InputError):
        specs.parse_cluster(bad)


@given(st.text(max_size=60))
def test_cluster_parser_parses_or_fails_cleanly(text):
    try:
        spec = specs.parse_cluster(text)
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert spec.kind in specs.CLUSTER_KINDS


@given(st.text(max_size=30))
def test_rate_and_size_parsers_parse_or_fail_cleanly(text):
    for parse in (units.parse_rate_bits, units.parse_size_bytes, units.parse_size_range):
        try:
            value = parse(text)
        except InputError:
            continue
        assert value


def test_strategy_catalog():
    assert {s.name for s in catalog.strategies("tf", ["all"])} == {
        "one_device", "mirrored", "central_storage", "multi_worker_mirrored",
        "parameter_server", "tpu"}
    assert {s.name for s in catalog.strategies("torch", [])} == {
        "single_device", "ddp", "fsdp", "parameter_server", "parameter_server_async"}
    both = catalog.strategies("all", ["parameter_server"])
    assert {s.framework for s in both} == {"tf", "torch"}
    with pytest.raises(InputError, match="multi_worker_mirrored"):
        catalog.strategies("tf", ["nccl_magic"])
