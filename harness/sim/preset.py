"""Hardware presets: clusters as data (``presets/*.json``), each number with its source.

A preset names a topology spec, the device's peak FLOPS and a price per device-hour where a
public list price exists. The JSON is the documentation: every file says where its numbers come
from (``source``) and what was assumed (``assumptions``), as Calculon keeps its systems.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from harness.core.errors import InputError, choices_message


@dataclass(frozen=True)
class Price:
    usd_per_device_hour: float
    basis: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class PublishedBusbw:
    """A collective's bus bandwidth as published for such a cluster (nccl-tests' units): the
    figure the simulator is held to."""

    collective: str
    algorithm: str
    hosts: int
    nbytes: float
    busbw: float  # bytes/s
    basis: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    spec: str
    device_name: str
    peak_flops: float
    assumed_efficiency: float
    price: Price | None
    source: tuple[str, ...]
    assumptions: tuple[str, ...]
    published: tuple[PublishedBusbw, ...] = ()

    @property
    def device_flops(self) -> float:
        """Achieved FLOPS assumed for training: peak times the assumed efficiency."""
        return self.peak_flops * self.assumed_efficiency


def preset_names() -> tuple[str, ...]:
    folder = resources.files("harness.sim") / "presets"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))


@cache
def load_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name is an InputError listing the known ones."""
    names = preset_names()
    if name not in names:
        from harness.core.errors import SpecError

        raise SpecError(choices_message("preset", name, names))
    text = (resources.files("harness.sim") / "presets" / f"{name}.json").read_text("utf-8")
    return _from_json(json.loads(text))


def _from_json(data: dict[str, Any]) -> Preset:
    try:
        device = data["device"]
        price = data.get("price_per_device_hour")
        return Preset(
            name=data["name"],
            description=data["description"],
            spec=data["spec"],
            device_name=device["name"],
            peak_flops=float(device["peak_flops"]),
            assumed_efficiency=float(device["assumed_efficiency"]),
            price=None if price is None else Price(float(price["usd"]), price["basis"],
                                                   tuple(price["source"])),
            source=tuple(data["source"]),
            assumptions=tuple(data.get("assumptions", ())),
            published=tuple(
                PublishedBusbw(b["collective"], b["algorithm"], int(b["hosts"]),
                               float(b["bytes"]), float(b["busbw_bytes_s"]), b["basis"],
                               tuple(b["source"]))
                for b in data.get("published_busbw", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"preset {data.get('name', '?')!r} is malformed: {exc}") from None
