"""The memory model against measured runs: what a device needs, predicted and measured.

A torch run records ``model_memory_bytes``: how far its peak resident memory rose from just
before it built the model (harness/measure/memory.py). That rise holds the model's state
and activations, and also the framework's own working memory on first use (kernel
libraries, thread pools, scratch buffers: about 90-110 MB of CPU memory here, whatever the
model). That part is measured too, not assumed: it is the rise of the same framework and
strategy on a model whose state is negligible (under 5 MB, e.g. mlp:S) in the same results
directory. The prediction is the memory model (harness/sim/model/memory.py) plus it.

Scored where the issue asks: models whose state (parameters and gradients) is at least
100 MB. Rows go into the validation table as kind ``memory``.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

import pandas as pd

from harness.sim.model.memory import (
    GRADIENT_COPIES,
    data_parallel_memory,
    model_parallel_memory,
)

SMALL_STATE_BYTES = 5e6  # a model this small leaves only the framework's working memory
SCORED_STATE_BYTES = 100e6  # parameters + gradients: the models the check is about
SCORED = {("torch", "single_device"), ("torch", "ddp"), ("torch", "pipeline"),
          ("torch", "tensor_parallel")}


def framework_memory(rows: pd.DataFrame, framework: str, strategy: str) -> float | None:
    """The median rise of runs of this framework and strategy on negligible models."""
    small = rows[(rows["framework"] == framework) & (rows["strategy"] == strategy)
                 & (rows["grad_bytes"] < SMALL_STATE_BYTES)]
    values = [float(v) for v in small["model_memory_bytes"] if math.isfinite(v)]
    return median(values) if values else None


def predicted_memory(row: dict[str, Any]) -> float | None:
    """The memory model's bytes for one device of the run (SGD: no optimizer state)."""
    from harness.calibrate.workload import workload_facts
    from harness.predict.step import layout_of

    name = f"{row['workload']}:{row['size']}"
    strategy = str(row["strategy"])
    if strategy in ("pipeline", "tensor_parallel"):
        from harness.sim.model.structure import layered

        layout = layout_of(row)
        if layout is None:
            return None
        micro = int(row["global_batch"]) // (layout.data * layout.microbatches)
        return model_parallel_memory(layered(name), layout, micro, "sgd").total
    facts = workload_facts(name)
    per_replica = int(row["global_batch"]) // max(1, int(row["replicas"]))
    activations = (facts.activation_bytes_per_sample or 0.0) * per_replica
    copies = GRADIENT_COPIES.get((str(row["framework"]), strategy), 1)
    return data_parallel_memory(facts.params, "allreduce", int(row["replicas"]), 0,
                                activations, copies).total


def validate_memory(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per scored run: measured rise, predicted (model + framework working memory)."""
    if measured.empty or "model_memory_bytes" not in measured:
        return pd.DataFrame()
    ok = measured[(measured["status"] == "ok") & measured["model_memory_bytes"].notna()]
    out = []
    for r in ok.to_dict("records"):
        key = (str(r["framework"]), str(r["strategy"]))
        state = 2 * float(r["grad_bytes"])  # parameters and gradients of the whole model
        if key not in SCORED or not state >= SCORED_STATE_BYTES:
            continue
        working = framework_memory(ok, *key)
        try:
            model = predicted_memory({str(k): v for k, v in r.items()})
        except (ValueError, KeyError):
            continue
        if working is None or model is None:
            continue
        measured_bytes = float(r["model_memory_bytes"])
        out.append({"kind": "memory", "run_id": r["run_id"], "cluster": r["cluster"],
                    "what": f"{key[0]}/{key[1]}/{r['workload']}:{r['size']}",
                    "replicas": r["replicas"], "model": "memory model + framework",
                    "bytes": state, "measured_s": math.nan, "predicted_s": math.nan,
                    "measured_bytes": measured_bytes, "predicted_bytes": model + working,
                    "framework_bytes": working,
                    "error": (model + working) / measured_bytes - 1})
    return pd.DataFrame(out)

