"""stratbench's harness: the CLI, planning, launching, runners, calibration, simulation."""

__version__ = "0.1.0"
