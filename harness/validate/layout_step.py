"""A published run's step as the simulator times it: its layout (data, pipeline, tensor,
context, expert), its micro-batches and recomputation, on the named system file with the
device's matmul efficiency set, and the one helper every published comparison shares.

Kept apart from the corpora (``devices.py``, ``megatron.py``) so each file only states what
its authors ran; how a run is simulated lives here once.
"""

from __future__ import annotations

from harness.core.layout import Layout
from harness.sim.model.layered import LayeredModel
from harness.sim.step.model_parallel import StepResult, model_parallel_step
from harness.sim.systems.calibration import Calibration, apply, from_preset, merge
from harness.sim.systems.preset import load_preset
from harness.sim.systems.spec import parse_topology
from workloads.execution import Execution
from workloads.precision import Precision

#: GPUs per host of every DGX system file the published runs used
PER_HOST = 8


def system_spec(system: str, gpus: int) -> str:
    """The preset's hosts that hold ``gpus`` devices; a torus (a TPU slice) as its file
    describes it, the first ``gpus`` chips taken in its order."""
    if load_preset(system).spec.startswith("torus:"):
        return f"preset:{system}"
    return f"preset:{system},hosts={max(1, -(-gpus // PER_HOST))}"


def layout_step(system: str, gpus: int, model: LayeredModel, layout: Layout,
                global_batch: int, precision: Precision, efficiency: float | None, *,
                fused_attention: bool, recompute: str = "none",
                optimizer_slots: int = 2) -> StepResult:
    """The step of ``layout`` on ``gpus`` devices of ``system``: the system file's device at
    ``efficiency`` of its peak (None: the cited out-of-the-box efficiency)."""
    calibration = merge(from_preset(system), Calibration(
        efficiency=efficiency, compute_source="fitted"))
    topology = apply(parse_topology(system_spec(system, gpus)), calibration)
    return model_parallel_step(topology, model, layout, global_batch, calibration,
                               recompute=recompute, precision=precision,
                               optimizer_slots=optimizer_slots,
                               execution=Execution(fused_attention=fused_attention))
