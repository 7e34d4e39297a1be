"""The recommender: rank strategies per workload and target cluster, and say why.

Pure functions over DataFrames (no framework imports). Targets:

- ``local`` / ``netns:...``: this machine as measured (rows of ``results.store.load``, status
  ok, the latest run per case); figures are ``measured``.
- ``preset:NAME[,hosts=H1|H2|...]``: a simulated preset cluster, one target per host count
  (all of its devices train). Rows from the stored ``simulated`` table are reused where they
  match cluster and workers; otherwise ``harness.sim.simulate`` runs (cheap). Figures are
  ``simulated`` and carry the simulator's validation error (median |error| of the
  ``validation`` table: the step times of the same simulated strategy, else all step times,
  else the collectives).

Time and cost to train N samples are extrapolated from the step time (source
``extrapolated``). Memory per device counts fp32 parameters, gradients and optimizer state
(``optimizer_slots`` copies, 2 for Adam); fsdp shards all three over the replicas, a parameter
server keeps the optimizer state on its servers. Activations are not counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.errors import InputError
from harness.validate import latest_validation

NAN = float("nan")
BYTES_PER_PARAM = 4
DEFAULT_SAMPLES = 10_000_000
DEFAULT_PRESET_TARGETS = ("preset:eth25_v100,hosts=4", "preset:dgx_h100_ib,hosts=1|16")
# Device memory where a preset's device name does not say it (public datasheets).
DEVICE_MEMORY_BYTES = {"Google TPU v4": 32 * 2**30}  # 32 GiB HBM2 per chip
COLUMNS = ("workload", "target", "rank", "framework", "strategy", "replicas", "status",
           "step_time_s", "throughput_samples_s", "scaling_efficiency", "comm_fraction",
           "memory_per_device_bytes", "device_memory_bytes", "fits", "train_time_s",
           "price_per_device_hour", "cost_usd", "source", "train_source", "validation_error",
           "reason")


@dataclass(frozen=True)
class Target:
    """One cluster to recommend for."""

    kind: str  # measured | emulated | preset
    spec: str  # cluster spec as stored (local, netns:...) or the topology spec (preset:...)
    workers: int = 0  # preset targets: devices that train

    @property
    def label(self) -> str:
        if self.kind == "preset":
            return f"{self.spec} ({self.workers} devices)"
        return self.spec


def parse_targets(specs: Sequence[str]) -> list[Target]:
    """``local``, ``netns:...`` or ``preset:NAME[,hosts=1|4|32][,...]`` into targets."""
    out: list[Target] = []
    for spec in specs:
        spec = spec.strip()
        if spec == "local":
            out.append(Target("measured", "local"))
        elif spec.startswith("netns:"):
            out.append(Target("emulated", spec))
        elif spec.startswith("preset:"):
            out += _preset_targets(spec)
        else:
            raise InputError(f"unknown target {spec!r} (give local, netns:... or "
                             f"preset:NAME[,hosts=N|M])")
    return out


def _preset_targets(spec: str) -> list[Target]:
    from harness.sim.spec import SpecError, parse_topology
    from harness.sim.topology import n_devices

    name, _, rest = spec[len("preset:"):].partition(",")
    options = [o for o in rest.split(",") if o]
    hosts = [o for o in options if o.startswith("hosts=")]
    others = [o for o in options if not o.startswith("hosts=")]
    counts = hosts[0][len("hosts="):].split("|") if hosts else [""]
    targets = []
    for count in counts:
        full = ",".join([f"preset:{name}", *([f"hosts={count}"] if count else []), *others])
        try:
            workers = n_devices(parse_topology(full))
        except (SpecError, InputError, ValueError) as exc:
            raise InputError(f"bad target {spec!r}: {exc}") from None
        targets.append(Target("preset", full, workers))
    return targets


def exchange_kind(framework: str, strategy: str) -> str:
    """none | allreduce | central | parameter_server | sharded (as harness.catalog names)."""
    if framework == "sim":
        if strategy.startswith("allreduce"):
            return "allreduce"
        if strategy.startswith("parameter_server"):
            return "parameter_server"
        return {"fsdp": "sharded", "central_storage": "central"}.get(strategy, "allreduce")
    from harness.catalog import STRATEGIES

    for s in STRATEGIES:
        if s.framework == framework and s.name == strategy:
            return s.exchange
    return "allreduce"


def memory_per_device(params: float, exchange: str, replicas: int,
                      optimizer_slots: int = 2) -> float:
    """Bytes of parameters + gradients + optimizer state one device holds."""
    p = float(params) * BYTES_PER_PARAM
    if exchange == "sharded":
        return p * (2 + optimizer_slots) / max(1, replicas)
    if exchange == "parameter_server":
        return p * 2  # a working copy of the parameters and its gradients; servers hold the rest
    return p * (2 + optimizer_slots)


def device_memory(target: Target, ram_bytes: float | None, replicas: int) -> float:
    """Memory of one device: the preset's (from its device name, e.g. '80GB'), or this
    machine's RAM shared by the replicas of a local or emulated run."""
    if target.kind == "preset":
        from harness.sim.preset import load_preset

        name = target.spec[len("preset:"):].split(",")[0]
        device = load_preset(name).device_name
        m = re.search(r"(\d+)\s*GB", device)
        return float(m.group(1)) * 1e9 if m else float(DEVICE_MEMORY_BYTES.get(device, NAN))
    if ram_bytes is None or not ram_bytes > 0:
        return NAN
    return float(ram_bytes) / max(1, replicas)


def validation_errors(validation: pd.DataFrame) -> dict[str, float]:
    """Median |error| of the simulator against measurements: per kind ('step',
    'collective') and, for step times, per simulated strategy ('step:parameter_server')."""
    if validation is None or validation.empty or "kind" not in validation:
        return {}
    out = {str(k): float(g["error"].abs().median()) for k, g in validation.groupby("kind")}
    if "model" in validation:
        steps = validation[validation["kind"] == "step"]
        out.update({f"step:{m}": float(g["error"].abs().median())
                    for m, g in steps.groupby("model")})
    return out


def workload_name(workload: str, size: Any) -> str:
    return f"{workload}:{size}" if isinstance(size, str) and size else str(workload)


def _spec(workload: str) -> Any:
    from workloads import WorkloadError, parse_workload

    try:
        return parse_workload(workload)
    except (WorkloadError, InputError, ValueError):
        return None


def _bandwidth_bits(target: Target) -> float:
    """The slowest link of the target, bits/s (NaN where unknown)."""
    if target.kind == "emulated":
        from harness.specs import parse_cluster

        try:
            rate = getattr(parse_cluster(target.spec), "rate_bits", None)
        except (InputError, ValueError):
            rate = None
        if rate:
            return float(rate)
        m = re.search(r"rate=([0-9.]+)\s*([kmg]?)bit", target.spec, re.I)
        if m:
            scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
            return float(m.group(1)) * scale
        return NAN
    if target.kind == "preset":
        from harness.sim.calibration import from_preset

        name = target.spec[len("preset:"):].split(",")[0]
        links = from_preset(name).links.values()
        return min(link.bandwidth for link in links) * 8 if links else NAN
    return NAN


def _latest(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["framework", "strategy", "workload", "size", "cluster", "replicas"]
    return frame.sort_values("run_id").groupby(keys, dropna=False, sort=False).tail(1)


def measured_candidates(measured: pd.DataFrame, workload: str, target: Target,
                        ram_bytes: float | None) -> list[dict[str, Any]]:
    """Candidate rows for a measured/emulated target from the latest measured rows."""
    if measured.empty:
        return []
    names = [workload_name(w, s)
             for w, s in zip(measured["workload"], measured["size"], strict=False)]
    rows = measured[(pd.Series(names, index=measured.index) == workload) &
                    (measured["cluster"] == target.spec)]
    if rows.empty:
        return []
    rows = _latest(rows)
    spec = _spec(workload)
    out = []
    for r in rows.to_dict("records"):
        base = rows[(rows["framework"] == r["framework"]) & (rows["replicas"] == 1) &
                    (rows["status"] == "ok")]
        t1 = float(base["step_time_median_s"].iloc[0]) if not base.empty else NAN
        tn = float(r["step_time_median_s"])
        comm = max(0.0, 1 - t1 / tn) if int(r["replicas"]) > 1 and tn > 0 else NAN
        sent = r.get("bytes_sent_per_step")
        out.append({
            "framework": r["framework"], "strategy": r["strategy"],
            "exchange": exchange_kind(r["framework"], r["strategy"]),
            "replicas": int(r["replicas"]), "status": r["status"],
            "status_reason": r.get("reason") or "",
            "step_time_s": tn, "throughput_samples_s": float(r["throughput_samples_s"]),
            "scaling_efficiency": float(r["scaling_efficiency"]), "comm_fraction": comm,
            "bytes_per_worker": float(sent) if sent is not None else NAN,
            "params": spec.params if spec else NAN,
            "sparsity": spec.expected_sparsity() if spec else 1.0,
            "source": "measured", "validation_error": NAN,
            "device_memory_bytes": device_memory(target, ram_bytes, int(r["replicas"])),
            "price_per_device_hour": NAN,
        })
    return out


def simulated_candidates(workload: str, target: Target, stored: pd.DataFrame,
                         errors: dict[str, float]) -> list[dict[str, Any]]:
    """Candidate rows for a preset target: stored simulations where they match, else run."""
    rows: list[dict[str, Any]] = []
    if stored is not None and not stored.empty and {"cluster", "replicas"} <= set(stored):
        match = stored[(stored["cluster"] == target.spec) &
                       (stored["replicas"] == target.workers) &
                       (stored["workload"] == workload)]
        if not match.empty:
            if "run_id" in match:
                match = match.sort_values("run_id").groupby("strategy").tail(1)
            rows = [{str(k): v for k, v in r.items()} for r in match.to_dict("records")]
    spec = _spec(workload)
    if not rows:
        if spec is None:
            return []
        from harness.sim import WorkloadProfile, simulate

        rows = simulate(target.spec, target.workers, "all",
                        WorkloadProfile(**spec.as_profile()), workload=workload)
    overall = errors.get("step", errors.get("collective", NAN))
    out = []
    for r in rows:
        err = errors.get(f"step:{r['strategy']}", overall)
        step = float(r.get("step_time_median_s", NAN))
        exposed = float(r.get("exposed_comm_s", NAN))
        price = r.get("price_per_device_hour", NAN)
        out.append({
            "framework": "sim", "strategy": r["strategy"],
            "exchange": exchange_kind("sim", r["strategy"]),
            "replicas": int(r["replicas"]), "status": r["status"],
            "status_reason": r.get("reason") or "",
            "step_time_s": step, "throughput_samples_s": float(r["throughput_samples_s"]),
            "scaling_efficiency": float(r["scaling_efficiency"]),
            "comm_fraction": exposed / step if step and step > 0 else NAN,
            "bytes_per_worker": float(r.get("bytes_per_worker", NAN)),
            "params": spec.params if spec else NAN,
            "sparsity": spec.expected_sparsity() if spec else 1.0,
            "source": "simulated", "validation_error": err,
            "device_memory_bytes": device_memory(target, None, int(r["replicas"])),
            "price_per_device_hour": NAN if price is None else float(price),
        })
    return out


def _rate(bits: float) -> str:
    if not math.isfinite(bits):
        return ""
    for scale, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bits >= scale:
            return f"{bits / scale:g} {unit}"
    return f"{bits:g} bit/s"


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def reason_for(row: dict[str, Any], group: list[dict[str, Any]], bandwidth_bits: float) -> str:
    """One line in plain words: why this strategy ranks where it does."""
    if row["status"] != "ok":
        return f"{row['status']}: {row['status_reason']}".strip()
    if not row["fits"]:
        return (f"does not fit: needs {_gb(row['memory_per_device_bytes'])} per device for "
                f"parameters, gradients and optimizer state, the device has "
                f"{_gb(row['device_memory_bytes'])}")
    at = f" at {_rate(bandwidth_bits)}" if math.isfinite(bandwidth_bits) else ""
    ex = row["exchange"]
    sparsity = row.get("sparsity", 1.0)
    if ex == "parameter_server" and sparsity < 0.5:
        ar = [r["bytes_per_worker"] for r in group if r["exchange"] == "allreduce"
              and math.isfinite(r.get("bytes_per_worker", NAN))]
        ratio = (min(ar) / row["bytes_per_worker"]
                 if ar and math.isfinite(row["bytes_per_worker"]) and row["bytes_per_worker"] > 0
                 else 1 / sparsity)
        return (f"embedding gradients touch {sparsity:.0%} of rows: the parameter server moves "
                f"{ratio:.0f}x fewer bytes than all-reduce")
    comm = row.get("comm_fraction", NAN)
    if math.isfinite(comm) and comm >= 0.5:
        return f"gradient exchange is {comm:.0%} of the step{at}"
    if ex == "none":
        return "one device: no gradient exchange at all"
    if ex == "sharded" and row["replicas"] > 1:
        others = [r for r in group if r["exchange"] != "sharded" and r["status"] == "ok"
                  and not r["fits"]]
        if others:
            return (f"shards parameters, gradients and optimizer state {row['replicas']} ways: "
                    f"the only way it fits")
    eff = row.get("scaling_efficiency", NAN)
    if math.isfinite(comm):
        text = f"gradient exchange is {comm:.0%} of the step{at}"
        return text + (f"; scaling efficiency {eff:.0%}" if math.isfinite(eff) else "")
    return f"scaling efficiency {eff:.0%}" if math.isfinite(eff) else "ranked by throughput"


def rank(candidates: list[dict[str, Any]], *, samples: float, price: float | None,
         bandwidth_bits: float = NAN, optimizer_slots: int = 2) -> list[dict[str, Any]]:
    """Fill memory fit, time and cost to train, reason; order: ok and fitting first, then
    by throughput; rank 1 is the recommendation."""
    for r in candidates:
        r["memory_per_device_bytes"] = (
            memory_per_device(r["params"], r["exchange"], r["replicas"], optimizer_slots)
            if math.isfinite(r.get("params", NAN)) else NAN)
        cap = r["device_memory_bytes"]
        r["fits"] = not (math.isfinite(cap) and math.isfinite(r["memory_per_device_bytes"])
                         and r["memory_per_device_bytes"] > cap)
        if not math.isfinite(r["price_per_device_hour"]) and price is not None:
            r["price_per_device_hour"] = float(price)
        tput = r["throughput_samples_s"]
        ok = r["status"] == "ok" and math.isfinite(tput) and tput > 0
        r["train_time_s"] = samples / tput if ok else NAN
        r["cost_usd"] = r["train_time_s"] * r["replicas"] / 3600 * r["price_per_device_hour"]
        r["train_source"] = f"extrapolated from {r['source']}"

    def key(r: dict[str, Any]) -> tuple[int, float]:
        usable = r["status"] == "ok" and r["fits"] and math.isfinite(r["throughput_samples_s"])
        return (0 if usable else 1 if r["status"] == "ok" else 2,
                -r["throughput_samples_s"] if math.isfinite(r["throughput_samples_s"]) else 0)

    ordered = sorted(candidates, key=key)
    for i, r in enumerate(ordered, 1):
        r["rank"] = i
        r["reason"] = reason_for(r, ordered, bandwidth_bits)
    return ordered


def recommend(measured: pd.DataFrame, *, workloads: Sequence[str] = (),
              targets: Sequence[str] = (), samples: float = DEFAULT_SAMPLES,
              price: float | None = None, simulated: pd.DataFrame | None = None,
              validation: pd.DataFrame | None = None, ram_bytes: float | None = None,
              optimizer_slots: int = 2) -> pd.DataFrame:
    """The recommendation table: one row per (workload, target, candidate strategy)."""
    if not samples > 0:
        raise InputError(f"--samples must be > 0, got {samples}")
    if price is not None and not price >= 0:
        raise InputError(f"--price must be >= 0 USD per device-hour, got {price}")
    measured = measured if measured is not None else pd.DataFrame()
    if not measured.empty:
        measured = measured[measured["source"].fillna("measured") == "measured"]
    names = list(workloads)
    if not names and not measured.empty:
        names = sorted({workload_name(w, s) for w, s in
                        zip(measured["workload"], measured["size"], strict=False)})
    if not names:
        raise InputError("no workloads to recommend for: give --workload FAMILY:SIZE or a "
                         "results directory with measured runs")
    for name in names:
        if _spec(name) is None and (measured.empty or name not in
                                    {workload_name(w, s) for w, s in
                                     zip(measured["workload"], measured["size"], strict=False)}):
            raise InputError(f"unknown workload {name!r} (e.g. mlp:S, recsys:M)")
    specs = list(targets)
    if not specs:
        clusters = sorted(set(measured["cluster"])) if not measured.empty else []
        specs = clusters + list(DEFAULT_PRESET_TARGETS)
    parsed = parse_targets(specs)
    errors = validation_errors(validation if validation is not None else pd.DataFrame())
    out: list[dict[str, Any]] = []
    missing: list[str] = []
    for name in names:
        for target in parsed:
            if target.kind == "preset":
                cands = simulated_candidates(name, target, simulated if simulated is not None
                                             else pd.DataFrame(), errors)
            else:
                cands = measured_candidates(measured, name, target, ram_bytes)
            ranked = rank(cands, samples=samples, price=price,
                          bandwidth_bits=_bandwidth_bits(target),
                          optimizer_slots=optimizer_slots)
            if not ranked:
                missing.append(f"{name} on {target.label}")
            for r in ranked:
                r.update(workload=name, target=target.label)
                out.append(r)
    frame = pd.DataFrame(out)
    if frame.empty:
        frame = pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    else:
        frame = frame[list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]]
    frame.attrs["missing"] = missing  # (workload, target) pairs with no results at all
    return frame


def _ram_bytes(store: Any) -> float | None:
    for run_id in reversed(store.run_ids()):
        manifest = store.manifest(run_id) or {}
        if manifest.get("memory_bytes"):
            return float(manifest["memory_bytes"])
    return None


def load_table_safe(root: Any, name: str) -> pd.DataFrame:
    """``results.store.load_table``, tolerating tables that already carry run_id/name."""
    from pathlib import Path

    from results.store import load_table, safe_name

    try:
        return load_table(root, name)
    except ValueError:
        import pyarrow.parquet as pq

        frames = []
        runs = Path(root) / "runs"
        for run in sorted(runs.iterdir()) if runs.is_dir() else []:
            for path in sorted((run / safe_name(name)).glob("*.parquet")):
                if path.name.startswith("."):
                    continue
                try:
                    frame = pq.read_table(path).to_pandas()
                except Exception:
                    continue
                for column, value in (("run_id", run.name), ("name", path.stem)):
                    if column not in frame:
                        frame[column] = value
                frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def recommend_from_store(root: Any, **kwargs: Any) -> pd.DataFrame:
    """``recommend`` over a results directory (measured rows, simulated and validation)."""
    from results.store import ResultsStore, load

    store = ResultsStore(root)
    return recommend(load(root), simulated=load_table_safe(root, "simulated"),
                     validation=latest_validation(root),
                     ram_bytes=_ram_bytes(store), **kwargs)


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if kind == "ms":
        return f"{value * 1e3:.3g}"
    if kind == "pct":
        return f"{value:.0%}"
    if kind == "time":
        return format_duration(value)
    if kind == "usd":
        return f"${value:,.2f}"
    if kind == "gb":
        return _gb(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    for scale, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def format_table(frame: pd.DataFrame) -> str:
    """The table for a terminal, one block per workload and target."""
    lines = [f"no results for {m} (run it, or pick another --target)"
             for m in frame.attrs.get("missing", [])]
    if frame.empty:
        return "\n".join(lines) or "no recommendations: no matching results or targets"
    lines += [""] if lines else []
    for (workload, target), group in frame.groupby(["workload", "target"], sort=False):
        lines.append(f"{workload} on {target}")
        lines.append(f"  {'#':>2} {'strategy':<26}{'n':>5}{'step ms':>10}{'samples/s':>11}"
                     f"{'eff':>6}{'mem/dev':>10}{'fits':>5}{'train':>10}{'cost':>12}"
                     f"  {'source':<10} reason")
        for r in group.to_dict("records"):
            err = r.get("validation_error", NAN)
            source = r["source"] + (f" ±{err:.0%}" if isinstance(err, float)
                                    and math.isfinite(err) else "")
            strategy = f"{r['framework']}/{r['strategy']}"
            lines.append(
                f"  {r['rank']:>2} {strategy[:25]:<26}{r['replicas']:>5}"
                f"{_fmt(r['step_time_s'], 'ms'):>10}{_fmt(r['throughput_samples_s'], ''):>11}"
                f"{_fmt(r['scaling_efficiency'], 'pct'):>6}"
                f"{_fmt(r['memory_per_device_bytes'], 'gb'):>10}"
                f"{_fits(r):>5}{_fmt(r['train_time_s'], 'time'):>10}"
                f"{_fmt(r['cost_usd'], 'usd'):>12}  {source:<10} {r['reason']}")
        lines.append("")
    lines.append("source: measured (a real run) or simulated (± the simulator's median |error| "
                 "against measured runs); train time and cost are extrapolated from the step "
                 "time; fits '?': device memory unknown")
    return "\n".join(lines).rstrip()


def _fits(r: dict[Any, Any]) -> str:
    cap = r.get("device_memory_bytes", NAN)
    if not (isinstance(cap, float) and math.isfinite(cap)):
        return "?"
    return "yes" if r["fits"] else "NO"


def to_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-able rows (NaN as None)."""
    records = frame.to_dict("records")
    return [{str(k): (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in r.items()} for r in records]
