"""The SimPy network simulator: topologies, collective schedules, a step model, an API.

Imports neither TensorFlow nor torch (only numpy and simpy), so simulating works on a laptop
without a framework. The CLI calls :func:`simulate` (and :func:`simulate_collective`), whose
answers are records (``SimulatedRow``, ``LayoutRow``, ``SimulatedCollective``; ``to_row``
for a stored row); the rest is here for the recommender, the calibrator and the tests.
"""

from harness.core.errors import SpecError
from harness.sim.api import (
    COLLECTIVE_ALGORITHMS,
    layout_step_bound,
    simulate,
    simulate_collective,
    simulate_layout,
)
from harness.sim.model.layered import Layer, LayeredModel, Layout
from harness.sim.model.profile import for_simulation
from harness.sim.network.engine import CollectiveResult, run_collective
from harness.sim.network.topology import Topology
from harness.sim.rows import LayoutRow, Scalar, SimulatedCollective, SimulatedRow
from harness.sim.schedules.schedule import Schedule, Step, Transfer, execute
from harness.sim.step.data_parallel import simulate_step
from harness.sim.step.result import StepResult
from harness.sim.step.strategies import (
    DEFAULT_STRATEGIES,
    REAL_TO_SIM,
    SIM_STRATEGIES,
    resolve_strategy,
)
from harness.sim.systems.calibration import Calibration, LinkCalibration, from_preset, from_topology
from harness.sim.systems.preset import load_preset, preset_names
from harness.sim.systems.spec import parse_topology

__all__ = [
    "COLLECTIVE_ALGORITHMS",
    "DEFAULT_STRATEGIES",
    "REAL_TO_SIM",
    "SIM_STRATEGIES",
    "Calibration",
    "CollectiveResult",
    "Layer",
    "LayeredModel",
    "Layout",
    "LayoutRow",
    "LinkCalibration",
    "Scalar",
    "Schedule",
    "SimulatedCollective",
    "SimulatedRow",
    "SpecError",
    "Step",
    "StepResult",
    "Topology",
    "Transfer",
    "execute",
    "for_simulation",
    "from_preset",
    "from_topology",
    "layout_step_bound",
    "load_preset",
    "parse_topology",
    "preset_names",
    "resolve_strategy",
    "run_collective",
    "simulate",
    "simulate_collective",
    "simulate_layout",
    "simulate_step",
]
