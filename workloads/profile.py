"""Profile-only workloads: a model described by numbers, for simulating what cannot run here.

    profile:params=25e6,flops_per_sample=1.5e8,sparsity=0.03
    profile:params=1.2G,step_time_s=0.08,batch=64,name=bigrec
    params=25M,batch=32,step_compute=100ms,bucket=50MiB        (simulate --profile)

The one grammar of a workload as numbers: `--workload profile:K=V,...` and `simulate
--profile K=V,...` both read it (workloads import nothing from harness, so it lives here).
Keys: params (required); flops_per_sample (training FLOPs per sample) or step_compute
(compute per step per replica: a duration, `120ms`, or bare seconds; `step_time_s` is its
alias), at least one; sparsity (fraction of gradient entries touched per step, default 1);
batch (per replica, default 32); bytes (per gradient element, default 4); optimizer (the
optimizer's time per step, a duration, default 0); bucket (DDP's bucket / FSDP's unit, a size,
default 25 MiB); name; size. Numbers accept k/M/G/T/P suffixes (decimal) and exponents;
sizes Ki/Mi/Gi (binary) too.

A profile is read as two records: the model (a ``WorkloadSpec``: params, FLOPs, sparsity,
batch) and what it states beside the model (:class:`Stated`: the step's compute and update
times, which the harness reads as a calibration, and the deployment's bytes and bucket, an
``Execution``'s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.quantities import read_duration, read_number, read_size
from workloads.spec import WorkloadError, WorkloadSpec, choices_message

PREFIX = "profile:"
KEYS = ("params", "batch", "bytes", "flops_per_sample", "step_compute", "step_time_s",
        "sparsity", "optimizer", "bucket", "name", "size")
ALIASES = {"step_time_s": "step_compute"}
FAMILY = "profile"  # the family and task of a profile's spec


@dataclass(frozen=True, kw_only=True)
class Stated:
    """What a profile states beside its model: the forward + backward seconds of a replica's
    step (``step_compute``) and the optimizer's seconds per step (``optimizer``), which the
    harness reads as a calibration that takes precedence over the system's
    (``harness.sim.systems.calibration.stating``); and how it deploys: ``deployment``'s
    exchanged element and bucket (``deployed``). None: not stated."""

    step_compute_s: float | None = None
    optimizer_s: float | None = None
    deployment: Execution = DEFAULT_EXECUTION

    def deployed(self, execution: Execution) -> Execution:
        """``execution`` with the bytes per gradient element and the bucket stated here."""
        return replace(execution,
                       gradient_element_bytes=self.deployment.gradient_element_bytes,
                       bucket_bytes=self.deployment.bucket_bytes)


#: what a workload that is no profile states: nothing
NOTHING_STATED = Stated()


def profile_workload(params: int, flops_per_sample: float | None = None,
                     step_compute_s: float | None = None, sparsity: float = 1.0,
                     batch_size: int = 32, name: str = "profile",
                     gradient_element_bytes: int = 4, optimizer_s: float | None = None,
                     bucket_bytes: int | None = None,
                     size: str = "") -> tuple[WorkloadSpec, Stated]:
    """Numbers only, checked: nothing to build or train (no framework runs it), enough to
    simulate: the model and what is stated beside it. WorkloadError, one line, for a bad
    number."""
    if params < 1:
        raise WorkloadError(f"profile params={params} must be >= 1")
    if flops_per_sample is None and step_compute_s is None:
        raise WorkloadError("profile needs flops_per_sample= or step_time_s= to know its "
                            "compute (flops_per_sample= or step_compute= with a unit, "
                            "e.g. params=25e6,step_compute=120ms)")
    for key, value in (("flops_per_sample", flops_per_sample), ("step_time_s", step_compute_s)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise WorkloadError(f"profile {key}={value} must be > 0")
    if not 0 < sparsity <= 1:
        raise WorkloadError(f"profile sparsity={sparsity} must be in (0, 1]")
    if not 1 <= batch_size <= 10**7:
        raise WorkloadError(f"profile batch={batch_size} must be from 1 to 10000000")
    deployment = Execution(gradient_element_bytes=gradient_element_bytes,
                           bucket_bytes=bucket_bytes)
    return (WorkloadSpec(family=FAMILY, size=size, task=FAMILY, batch_size=batch_size,
                         params=params, flops_per_sample=flops_per_sample, sparsity=sparsity,
                         frameworks=(), given_name=name),
            Stated(step_compute_s=step_compute_s, optimizer_s=optimizer_s, deployment=deployment))


def _finite(key: str, text: str, value: float) -> float:
    if not math.isfinite(value) or value > 1e18:
        raise WorkloadError(f"profile {key}={text!r} is out of range")
    return value


def _number(key: str, text: str) -> float:
    value = read_number(text)
    if value is None:
        raise WorkloadError(f"profile {key}={text!r} is not a number (use e.g. 25e6 or 25M)")
    return _finite(key, text, value)


def _integer(key: str, text: str) -> int:
    value = _number(key, text)
    if value != int(value):
        raise WorkloadError(f"profile {key}={text!r} must be a whole number")
    return int(value)


def _duration(key: str, text: str) -> float:
    """'120ms' -> 0.12; a bare number is seconds."""
    value = read_duration(text)
    if value is None:
        raise WorkloadError(f"profile {key}={text!r} is not a duration (use e.g. 120ms or "
                            f"0.12)")
    return _finite(key, text, value)


def _size(key: str, text: str) -> int:
    """'50MiB' -> 52428800, '100MB' -> 1e8, '4096' -> 4096."""
    value = read_size(text)
    if value is None:
        raise WorkloadError(f"profile {key}={text!r} is not a size (use e.g. 25MiB or 4096)")
    return int(_finite(key, text, value))


def parse_profile(text: str) -> tuple[WorkloadSpec, Stated]:
    """'profile:params=25e6,flops_per_sample=1.5e8,sparsity=0.03' (the prefix optional) ->
    the workload record (family ``profile``) and what the text states beside it;
    WorkloadError, one line, if bad."""
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
        key = ALIASES.get(key, key)
        if key in fields:
            raise WorkloadError(f"profile field {key!r} given twice")
        fields[key] = value
    if "params" not in fields:
        raise WorkloadError("profile needs params= (e.g. profile:params=25e6,"
                            "flops_per_sample=1.5e8)")
    return profile_workload(
        params=_integer("params", fields["params"]),
        flops_per_sample=(_number("flops_per_sample", fields["flops_per_sample"])
                          if "flops_per_sample" in fields else None),
        step_compute_s=(_duration("step_compute", fields["step_compute"])
                        if "step_compute" in fields else None),
        sparsity=_number("sparsity", fields.get("sparsity", "1")),
        batch_size=_integer("batch", fields.get("batch", "32")),
        name=fields.get("name", "profile"),
        gradient_element_bytes=_integer("bytes", fields.get("bytes", "4")),
        optimizer_s=(_duration("optimizer", fields["optimizer"]) if "optimizer" in fields
                     else None),
        bucket_bytes=_size("bucket", fields["bucket"]) if "bucket" in fields else None,
        size=fields.get("size", ""),
    )


def stated_by(text: str) -> Stated:
    """What the workload ``text`` names states beside its model: a profile's numbers (the
    same parse as ``parse_profile``); nothing for any other workload."""
    return parse_profile(text)[1] if text.strip().startswith(PREFIX) else NOTHING_STATED
