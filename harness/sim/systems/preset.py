"""Systems as data: a cluster's devices, scale-up domain, scale-out NICs and price, each number
with its source.

A system is a JSON or TOML file. The built-in ones (``presets/*.json``) are examples a user can
copy; ``preset:NAME`` names a built-in, ``preset:PATH`` (or ``--system PATH``) a user's own
file; both are read by the same validator, so a malformed file fails in one line naming the
key. The file is the documentation, as Calculon keeps its systems: where each number comes
from (``source``) and what was assumed (``assumptions``).

A device is a peak FLOP/s per precision (``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``), a
memory capacity and bandwidth, and what the device model reads (``harness/sim/
device_model.py``): ``matmul_efficiency`` per precision (the fraction of the peak a large GEMM
reaches, the device's one free number, cited in ``matmul_efficiency_note`` or fitted with
``--fit-step``), ``sms`` (for tile and wave quantization), ``gemm_fixed`` and
``gemm_k_overhead`` (a GEMM kernel's own device time and its tiles' prologue and epilogue,
fitted on a published per-shape table: ``python -m harness.validate.gemm_table``),
``launch_overhead`` (a GPU's default: 5 us) and ``step_overhead``, and ``reserved_bytes``
(what the runtime holds before a model does). ``assumed_efficiency`` is the whole step's
fraction of the peak for a workload known only by its FLOPs, and the GEMM efficiency of a
precision the file gives none for. The network is either a ``spec`` in the topology
grammar or, as a user describes hardware, ``scale_up`` (NVLink/NVSwitch, xGMI, ...: devices
per domain, the bandwidth of one device each way) and ``scale_out`` (NICs per host, each
NIC's rate), from which the spec is built.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import TypedDict, cast, get_args, get_origin, get_type_hints, is_typeddict

import tomllib

from harness.core.errors import InputError, SpecError, choices_message
from harness.core.units import parse_bandwidth, parse_duration
from workloads.precision import PRECISIONS as PRECISION_RULES

#: Precisions a device's peak may be given for, and what `--precision` accepts of them.
PRECISIONS = tuple(PRECISION_RULES)
#: Where a file gives one peak number, the precisions it stands for (tensor-core training).
TRAINING_PRECISIONS = ("bf16", "fp16")
DEVICE_KINDS = ("gpu", "tpu", "cpu")
#: A kernel launch's host time where a device file states none: a GPU's, the lower end of
#: "the launch time on the CPU side is between 5-20 microseconds" (Meta's Holistic Trace
#: Analysis, docs/source/features/cuda_kernel_launch_stats.rst); a TPU runs a compiled step
#: (XLA) with no launch per operator.
DEFAULT_LAUNCH_OVERHEAD_S = {"gpu": 5e-6}


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
class Device:
    """One accelerator: what the compute and memory models read."""

    name: str
    kind: str
    peak_flops: Mapping[str, float]  # per precision
    memory_bytes: float  # NaN where not stated
    memory_bandwidth: float  # bytes/s, NaN where not stated
    assumed_efficiency: float
    # What the device model reads (harness/sim/systems/device_model.py), each cited in the file:
    # the fraction of each precision's peak a large GEMM reaches (the device's one free
    # number per precision; ``assumed_efficiency`` where a precision has none), the
    # streaming multiprocessors a GEMM's tiles are spread over (0: not modelled), the
    # host's time to issue one kernel and one step's own framework work, and the bytes the
    # runtime holds before a model does (CUDA context, allocator); and a GEMM kernel's own
    # costs beyond its FLOPs (0: not modelled): the device time every GEMM kernel takes
    # (filling and draining the SMs) and each output tile's prologue and epilogue,
    # counted as reduction elements (so a short reduction reaches less of the peak).
    matmul_efficiency: Mapping[str, float] = field(default_factory=dict)
    sms: int = 0
    launch_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    reserved_bytes: float = 0.0
    gemm_fixed_s: float = 0.0
    gemm_k_overhead: float = 0.0

    def peak(self, precision: str | None = None) -> float:
        """Peak FLOP/s at ``precision``; None: the training peak (bf16, else fp16, as the
        presets have always been read). SpecError where the device has none."""
        wanted = (precision,) if precision else (*TRAINING_PRECISIONS, *self.peak_flops)
        for p in wanted:
            if p in self.peak_flops:
                return self.peak_flops[p]
        raise SpecError(f"{self.name} states no {precision or 'training'} peak (it has "
                        f"{', '.join(self.peak_flops)})")

    @property
    def usable_memory_bytes(self) -> float:
        """What a model can use: the capacity less the runtime's reserve (NaN: unknown)."""
        return self.memory_bytes - self.reserved_bytes

    def efficiency(self, precision: str | None) -> float:
        """The fraction of ``precision``'s peak a large GEMM reaches: the file's
        ``matmul_efficiency`` for it, else ``assumed_efficiency``."""
        return self.matmul_efficiency.get(precision or "", self.assumed_efficiency)


@dataclass(frozen=True)
class Preset:
    """A system: the topology spec its network reads as, its device, price and sources."""

    name: str
    description: str
    spec: str
    device: Device
    price: Price | None
    source: tuple[str, ...]
    assumptions: tuple[str, ...]
    published: tuple[PublishedBusbw, ...] = ()
    path: str = ""  # the user's file, when not a built-in
    network_note: str = ""  # the scale-out as the file states it (NICs per host, rate)

    @property
    def device_name(self) -> str:
        return self.device.name

    @property
    def peak_flops(self) -> float:
        return self.device.peak()

    @property
    def assumed_efficiency(self) -> float:
        return self.device.assumed_efficiency

    @property
    def device_flops(self) -> float:
        """Achieved FLOPS assumed for training: peak times the assumed efficiency."""
        return self.peak_flops * self.assumed_efficiency


def preset_names() -> tuple[str, ...]:
    folder = resources.files("harness.sim.systems") / "presets"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))


def is_system_path(ref: str) -> bool:
    """A preset reference that names a file rather than a built-in."""
    return "/" in ref or os.sep in ref or ref.endswith((".json", ".toml"))


def load_preset(ref: str) -> Preset:
    """The built-in system called ``ref``, or the system file at ``ref``; SpecError (one line)
    for an unknown name, a missing file or a malformed one."""
    ref = ref.strip()
    if is_system_path(ref):
        path = Path(ref).expanduser()
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            raise SpecError(f"system file {ref!r} does not exist") from None
        return _load_file(str(path.resolve()), stamp)
    return _load_builtin(ref)


@lru_cache(maxsize=64)
def _load_builtin(name: str) -> Preset:
    names = preset_names()
    if name not in names:
        raise SpecError(choices_message("preset", name, names)
                        + "; or give a system file's path")
    text = (resources.files("harness.sim.systems") / "presets" / f"{name}.json").read_text("utf-8")
    return parse_system(json.loads(text), f"preset {name}")


@lru_cache(maxsize=64)
def _load_file(path: str, stamp: int) -> Preset:
    del stamp  # part of the cache key only: an edited file is read again
    text = Path(path).read_text("utf-8")
    try:
        # what the file says it is; parse_system checks it
        data = cast(SystemFile, tomllib.loads(text) if path.endswith(".toml")
                    else json.loads(text))
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"system file {path}: not valid "
                        f"{'TOML' if path.endswith('.toml') else 'JSON'}: {exc}") from None
    preset = parse_system(data, f"system file {path}")
    return replace(preset, path=path, name=path)


class DeviceFile(TypedDict, total=False):
    """A system file's ``device`` table (JSON numbers may be integers where a float is
    asked for); ``name`` and ``peak_flops`` are required."""

    name: str
    kind: str  # gpu | tpu | cpu
    peak_flops: dict[str, float] | float  # per precision, or one figure for bf16 and fp16
    peak_flops_note: str
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    assumed_efficiency: float
    note: str
    matmul_efficiency: dict[str, float]  # per precision
    matmul_efficiency_note: str
    sms: int
    launch_overhead: str  # a duration: 5us
    step_overhead: str
    overhead_note: str
    reserved_bytes: float
    reserved_note: str
    gemm_fixed: str
    gemm_k_overhead: float
    gemm_shape_note: str


class ScaleUpFile(TypedDict, total=False):
    """``scale_up``: devices per domain, each device's bandwidth each way."""

    name: str
    devices: int
    bandwidth: str  # a rate: 450GB/s
    latency: str
    note: str


class ScaleOutFile(TypedDict, total=False):
    """``scale_out``: NICs per host and each one's rate (a leaf-spine fabric with
    ``hosts_per_leaf``)."""

    name: str
    nics_per_host: int
    nic_bandwidth: str  # a rate: 400Gbit
    latency: str
    hosts_per_leaf: int
    oversub: float
    note: str


class PriceFile(TypedDict, total=False):
    """``price_per_device_hour``: dollars, what they are (on-demand, ...) and the source."""

    usd: float
    basis: str
    source: list[str]


class PublishedBusbwFile(TypedDict):
    """One of ``published_busbw``: a collective's published bus bandwidth on such a cluster."""

    collective: str
    algorithm: str
    hosts: int
    bytes: float
    busbw_bytes_s: float
    basis: str
    source: list[str]


class SystemFile(TypedDict, total=False):
    """A system file as parsed from JSON or TOML, before ``parse_system`` checks it:
    ``name``, ``device`` and a network (``spec``, or ``scale_up`` and ``scale_out``)."""

    name: str
    description: str
    hosts: int
    spec: str  # the topology grammar
    device: DeviceFile | str  # or another built-in system's device, by its name
    scale_up: ScaleUpFile
    scale_out: ScaleOutFile
    price_per_device_hour: PriceFile | None
    source: list[str]
    assumptions: list[str]
    published_busbw: list[PublishedBusbwFile]


#: key -> the JSON types (``isinstance`` arguments) a table's value may have
Schema = dict[str, type | tuple[type, ...]]


def _schema(table: type) -> Schema:
    """A file table's keys and their JSON types, read from its TypedDict (one home for the
    keys): a nested table is a dict, a float may be written as an integer."""
    def kinds(hint: object) -> type | tuple[type, ...]:
        arms = get_args(hint) if isinstance(hint, UnionType) else (hint,)
        found: list[type] = []
        for arm in arms:
            origin = get_origin(arm) or arm
            origin = dict if is_typeddict(origin) else origin
            found += [float, int] if origin is float else [cast(type, origin)]
        return found[0] if len(found) == 1 else tuple(found)

    return {key: kinds(hint) for key, hint in get_type_hints(table).items()}


_TOP = _schema(SystemFile)
_DEVICE = _schema(DeviceFile)
_SCALE_UP = _schema(ScaleUpFile)
_SCALE_OUT = _schema(ScaleOutFile)
_PRICE = _schema(PriceFile)


def _fields(data: object, schema: Schema, where: str, required: tuple[str, ...]) -> None:
    """``data`` checked against ``schema`` (key -> type): one SpecError naming the key."""
    if not isinstance(data, dict):
        raise SpecError(f"{where} must be a table of keys")
    for key, value in data.items():
        if key not in schema:
            raise SpecError(f"{where}: unknown key {key!r} (choose from "
                            f"{', '.join(schema)})")
        kind = schema[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(
                k.__name__ for k in kind)
            raise SpecError(f"{where}: {key} must be {names.replace('NoneType', 'null')}, "
                            f"not {value!r}")
    for key in required:
        if key not in data:
            raise SpecError(f"{where}: missing key {key!r}")


def _positive(value: float, where: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise SpecError(f"{where} must be a positive number, not {value}")
    return value


def _device(data: DeviceFile | str, where: str) -> Device:
    if isinstance(data, str):  # another system's device, by name: one home for its numbers
        if data not in preset_names():
            raise SpecError(f"{where}: device {data!r} names no built-in system "
                            f"(choose from {', '.join(preset_names())})")
        return _load_builtin(data).device
    _fields(data, _DEVICE, f"{where}: device", ("name", "peak_flops"))
    d = data
    peaks = d["peak_flops"]
    if not isinstance(peaks, dict):
        peaks = dict.fromkeys(TRAINING_PRECISIONS, peaks)
    for p, value in peaks.items():
        if p not in PRECISIONS:
            raise SpecError(f"{where}: device.peak_flops: unknown precision {p!r} (choose "
                            f"from {', '.join(PRECISIONS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: device.peak_flops.{p} must be a number, not {value!r}")
        _positive(value, f"{where}: device.peak_flops.{p}")
    kind = d.get("kind") or ("tpu" if "tpu" in d["name"].lower() else "gpu")
    if kind not in DEVICE_KINDS:
        raise SpecError(f"{where}: device.kind {kind!r} (choose from {', '.join(DEVICE_KINDS)})")
    efficiency = float(d.get("assumed_efficiency", 0.4))
    if not 0 < efficiency <= 1:
        raise SpecError(f"{where}: device.assumed_efficiency must be in (0, 1], not {efficiency}")
    matmul = {}
    for p, value in d.get("matmul_efficiency", {}).items():
        if p not in peaks:
            raise SpecError(f"{where}: device.matmul_efficiency.{p}: the device states no "
                            f"{p} peak (it has {', '.join(peaks)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise SpecError(f"{where}: device.matmul_efficiency.{p} must be in (0, 1], "
                            f"not {value!r}")
        matmul[p] = float(value)
    if d.get("sms", 0) < 0:
        raise SpecError(f"{where}: device.sms must be >= 0, not {d['sms']}")
    overheads = {}
    if d.get("gemm_k_overhead", 0) < 0:
        raise SpecError(f"{where}: device.gemm_k_overhead must be >= 0, not "
                        f"{d['gemm_k_overhead']}")
    for key, text in (("launch_overhead", d.get("launch_overhead")),
                      ("step_overhead", d.get("step_overhead")),
                      ("gemm_fixed", d.get("gemm_fixed"))):
        if text is not None:
            try:
                overheads[key] = parse_duration(text)
            except (SpecError, InputError, ValueError) as exc:
                raise SpecError(f"{where}: device.{key}: {exc}") from None
    return Device(
        name=d["name"], kind=kind, peak_flops={p: float(v) for p, v in peaks.items()},
        memory_bytes=(_positive(d["memory_bytes"], f"{where}: device.memory_bytes")
                      if "memory_bytes" in d else math.nan),
        memory_bandwidth=(_positive(d["memory_bandwidth"], f"{where}: device.memory_bandwidth")
                          if "memory_bandwidth" in d else math.nan),
        assumed_efficiency=efficiency, matmul_efficiency=matmul, sms=int(d.get("sms", 0)),
        launch_overhead_s=overheads.get("launch_overhead",
                                        DEFAULT_LAUNCH_OVERHEAD_S.get(kind, 0.0)),
        step_overhead_s=overheads.get("step_overhead", 0.0),
        reserved_bytes=float(d.get("reserved_bytes", 0.0)),
        gemm_fixed_s=overheads.get("gemm_fixed", 0.0),
        gemm_k_overhead=float(d.get("gemm_k_overhead", 0.0)))


def _bandwidth(text: str, where: str) -> float:
    try:
        return parse_bandwidth(text)
    except (SpecError, InputError, ValueError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def _latency(text: str, where: str) -> str:
    try:
        parse_duration(text)
    except (SpecError, InputError, ValueError) as exc:
        raise SpecError(f"{where}: {exc}") from None
    return text


def _network(data: SystemFile, where: str) -> tuple[str, str]:
    """(topology spec, how it was read) from ``scale_up`` and ``scale_out``."""
    from harness.core.units import format_rate

    if "spec" in data:
        if "scale_up" in data or "scale_out" in data:
            raise SpecError(f"{where}: give spec or scale_up/scale_out, not both")
        return data["spec"], ""
    if "scale_out" not in data:
        raise SpecError(f"{where}: missing key 'spec' (or 'scale_out' with 'scale_up')")
    one: ScaleUpFile = {"devices": 1}  # no scale-up domain: a device per host
    up = data.get("scale_up", one)
    _fields(up, _SCALE_UP, f"{where}: scale_up", ("devices",))
    out = data["scale_out"]
    _fields(out, _SCALE_OUT, f"{where}: scale_out", ("nics_per_host", "nic_bandwidth"))
    gpus, nics = up["devices"], out["nics_per_host"]
    if gpus < 1 or nics < 1:
        raise SpecError(f"{where}: scale_up.devices and scale_out.nics_per_host must be >= 1")
    if gpus > 1 and "bandwidth" not in up:
        raise SpecError(f"{where}: scale_up: missing key 'bandwidth' (per device, each way)")
    nic_rate = _bandwidth(out["nic_bandwidth"], f"{where}: scale_out.nic_bandwidth")
    hosts = int(data.get("hosts", 1))
    if hosts < 1:
        raise SpecError(f"{where}: hosts must be >= 1, not {hosts}")
    per_device = nics == gpus
    inter = out["nic_bandwidth"] if per_device else f"{nic_rate * nics * 8 / 1e9:.6g}Gbit"
    options = [f"hosts={hosts}", f"gpus={gpus}"]
    if gpus > 1:
        _bandwidth(up["bandwidth"], f"{where}: scale_up.bandwidth")
        options.append(f"intra={up['bandwidth']}")
        if "latency" in up:
            options.append(f"intra_lat={_latency(up['latency'], f'{where}: scale_up.latency')}")
    options += [f"inter={inter}", f"nic={'per_device' if per_device else 'shared'}"]
    if "latency" in out:
        options.append(f"inter_lat={_latency(out['latency'], f'{where}: scale_out.latency')}")
    kind = "two_level"
    if "hosts_per_leaf" in out:
        kind = "leaf_spine"
        options += [f"hosts_per_leaf={out['hosts_per_leaf']}",
                    f"oversub={out.get('oversub', 1)}"]
    note = (f"scale-out: {nics} x {format_rate(nic_rate * 8)} NIC{'s' if nics > 1 else ''} "
            f"per host")
    return f"{kind}:{','.join(options)}", note


def parse_system(data: SystemFile, where: str) -> Preset:
    """A system from its parsed JSON/TOML; SpecError (one line, naming the key) if malformed
    (the file is checked here, whatever its parser gave)."""
    _fields(data, _TOP, where, ("name", "device"))
    d = data
    spec, note = _network(d, where)
    stated = d.get("price_per_device_hour")
    price = None
    if stated is not None:
        _fields(stated, _PRICE, f"{where}: price_per_device_hour", ("usd", "basis"))
        price = Price(_positive(stated["usd"], f"{where}: price_per_device_hour.usd"),
                      stated["basis"], tuple(stated.get("source", ())))
    try:
        published = tuple(
            PublishedBusbw(b["collective"], b["algorithm"], int(b["hosts"]), float(b["bytes"]),
                           float(b["busbw_bytes_s"]), b["basis"], tuple(b["source"]))
            for b in d.get("published_busbw", ()))
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{where}: published_busbw: missing or bad {exc}") from None
    preset = Preset(
        name=d["name"], description=d.get("description", ""), spec=spec,
        device=_device(d["device"], where), price=price,
        source=tuple(map(str, d.get("source", ()))),
        assumptions=tuple(map(str, d.get("assumptions", ()))), published=published,
        network_note=note)
    return preset  # its spec is parsed where it is used (harness.sim.systems.spec), naming the file
