"""Profile-only workloads: a model described by numbers, for simulating what cannot run here.

    profile:params=25e6,flops_per_sample=1.5e8,sparsity=0.03
    profile:params=1.2G,step_time_s=0.08,batch=64,name=bigrec

Keys: params (required), flops_per_sample (training FLOPs per sample) or step_time_s
(seconds of compute per step per replica) (at least one), sparsity (fraction of gradient
entries touched per step, default 1), batch (per replica, default 32), name. Numbers accept
k/M/G/T suffixes (decimal).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from workloads.spec import WorkloadError, WorkloadSpec, choices_message

PREFIX = "profile:"
KEYS = ("params", "flops_per_sample", "step_time_s", "sparsity", "batch", "name")
_NUMBER = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([kKmMgGtT]?)$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class ProfileWorkload:
    """Numbers only: nothing to build or train, enough to simulate."""

    params: int
    flops_per_sample: float | None = None
    step_time_s: float | None = None
    sparsity: float = 1.0
    batch_size: int = 32
    name: str = "profile"

    def __post_init__(self) -> None:
        if self.params < 1:
            raise WorkloadError(f"profile params={self.params} must be >= 1")
        if self.flops_per_sample is None and self.step_time_s is None:
            raise WorkloadError("profile needs flops_per_sample= or step_time_s= "
                                "(e.g. profile:params=25e6,flops_per_sample=1.5e8)")
        for key, value in (("flops_per_sample", self.flops_per_sample),
                           ("step_time_s", self.step_time_s)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise WorkloadError(f"profile {key}={value} must be > 0")
        if not 0 < self.sparsity <= 1:
            raise WorkloadError(f"profile sparsity={self.sparsity} must be in (0, 1]")
        if self.batch_size < 1:
            raise WorkloadError(f"profile batch={self.batch_size} must be >= 1")

    def spec(self) -> WorkloadSpec:
        """The neutral description; no framework can run it (frameworks is empty)."""
        return WorkloadSpec(
            family="profile", size="", task="profile", batch_size=self.batch_size,
            params=self.params, flops_per_sample=self.flops_per_sample, sparsity=self.sparsity,
            frameworks=(), label=self.name, step_time_s=self.step_time_s,
        )


def _number(key: str, text: str) -> float:
    m = _NUMBER.match(text.strip())
    if not m:
        raise WorkloadError(f"profile {key}={text!r} is not a number (use e.g. 25e6 or 25M)")
    return float(m.group(1)) * _SCALE[m.group(2).lower()]


def _integer(key: str, text: str) -> int:
    value = _number(key, text)
    if value != int(value):
        raise WorkloadError(f"profile {key}={text!r} must be a whole number")
    return int(value)


def parse_profile(text: str) -> ProfileWorkload:
    """'profile:params=25e6,flops_per_sample=1.5e8,sparsity=0.03' -> ProfileWorkload."""
    body = text.strip()
    if body.startswith(PREFIX):
        body = body[len(PREFIX):]
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise WorkloadError(f"bad profile field {part!r} (use key=value)")
        if key not in KEYS:
            raise WorkloadError(choices_message("profile field", key, KEYS))
        if key in fields:
            raise WorkloadError(f"profile field {key!r} given twice")
        fields[key] = value
    if "params" not in fields:
        raise WorkloadError("profile needs params= (e.g. profile:params=25e6,"
                            "flops_per_sample=1.5e8)")
    return ProfileWorkload(
        params=_integer("params", fields["params"]),
        flops_per_sample=(_number("flops_per_sample", fields["flops_per_sample"])
                          if "flops_per_sample" in fields else None),
        step_time_s=(_number("step_time_s", fields["step_time_s"])
                     if "step_time_s" in fields else None),
        sparsity=_number("sparsity", fields.get("sparsity", "1")),
        batch_size=_integer("batch", fields.get("batch", "32")),
        name=fields.get("name", "profile"),
    )
