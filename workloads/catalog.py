"""The built-in workloads: four families x three sizes, and the `FAMILY:SIZE` parser.

Sizes are chosen by what they exercise on the project's machines (2 CPU cores, 1 Gbit/s or
slower emulated links):
- S steps in tens of milliseconds on 2 cores at its default batch: quick suites, tests.
- M is in between: 1-3M parameters for the dense families; recsys M has 26M, nearly all
  in its tables, of which a step touches about 1%.
- L has ~25M parameters (~100 MB of fp32 gradients) for the dense families, so a ring
  all-reduce on 1 Gbit/s takes over 1.5 s; recsys L has 128M parameters (512 MB) of which
  a step touches 0.4%, the case where a parameter server moves far less.
  cnn:L puts its widest stage (896 channels) at 2x2 resolution, so most parameters sit where
  compute is cheap (~15 GFLOP per step). transformer:L is compute-heavy on CPUs anyway
  (~40 GFLOP per step at batch 2 x 128 tokens); mlp:L and recsys are network-bound even on
  2 CPU cores.
"""

from __future__ import annotations

import functools

from workloads import costs
from workloads.configs import CNNConfig, MLPConfig, ModelConfig, RecsysConfig, TransformerConfig
from workloads.spec import (
    CLASSIFICATION,
    CLICK,
    FAMILIES,
    FRAMEWORKS,
    LANGUAGE_MODEL,
    SIZES,
    WorkloadError,
    WorkloadSpec,
    choices_message,
)

IMAGE = (32, 32, 3)  # CNN input; digits (8x8) are upsampled to it
MLP_INPUT = 32 * 32  # MLP input; digits are upsampled to 32x32 and flattened
CLASSES = 10
VOCAB = 256  # byte-level: synthetic tokens and Python source text share it

# (config, default per-replica batch) per family and size.
_TABLE: dict[str, dict[str, tuple[ModelConfig, int]]] = {
    "mlp": {
        "S": (MLPConfig(MLP_INPUT, (128, 128), CLASSES), 64),
        "M": (MLPConfig(MLP_INPUT, (1024, 1024, 1024), CLASSES), 64),
        "L": (MLPConfig(MLP_INPUT, (4096, 4096, 1024), CLASSES), 64),
    },
    "cnn": {
        "S": (CNNConfig(IMAGE, (8, 16, 32), (1, 1, 1), CLASSES), 32),
        "M": (CNNConfig(IMAGE, (16, 32, 64, 128, 256), (1, 1, 1, 1, 1), CLASSES), 32),
        "L": (CNNConfig(IMAGE, (32, 64, 128, 256, 896), (1, 1, 1, 1, 2), CLASSES), 16),
    },
    "transformer": {
        "S": (TransformerConfig(VOCAB, 64, 64, 2, 2), 8),
        "M": (TransformerConfig(VOCAB, 64, 256, 4, 4), 8),
        "L": (TransformerConfig(VOCAB, 128, 512, 8, 8), 2),
    },
    "recsys": {
        "S": (RecsysConfig((10_000,) * 4, 16, 4, 13, (64,)), 64),
        "M": (RecsysConfig((100_000,) * 8, 32, 8, 13, (256, 64)), 128),
        "L": (RecsysConfig((1_000_000, 500_000, 250_000, 250_000), 64, 8, 13, (512, 128)), 256),
    },
}

_TASKS = {"mlp": CLASSIFICATION, "cnn": CLASSIFICATION, "transformer": LANGUAGE_MODEL,
          "recsys": CLICK}


@functools.cache
def get_spec(family: str, size: str) -> WorkloadSpec:
    """The spec of a built-in workload; WorkloadError names the bad family or size. Cached:
    the record is frozen, and a recommender's Zipf row counts are worth computing once."""
    if family not in _TABLE:
        raise WorkloadError(choices_message("workload family", family, FAMILIES))
    if size not in _TABLE[family]:
        raise WorkloadError(choices_message(f"size for {family}", size, SIZES))
    config, batch_size = _TABLE[family][size]
    return WorkloadSpec(
        family=family, size=size, task=_TASKS[family], batch_size=batch_size,
        frameworks=FRAMEWORKS, params=costs.param_count(config),
        flops_per_sample=float(costs.training_flops(config)),
        sparsity=costs.expected_touched_fraction(config, batch_size), config=config,
        activation_bytes_per_sample=float(costs.activation_bytes(config)),
    )


def parse_workload(text: str) -> WorkloadSpec:
    """'mlp:S' -> WorkloadSpec (family lower-case, size upper-case also accepted)."""
    family, sep, size = text.strip().partition(":")
    if not sep:
        raise WorkloadError(f"bad workload {text!r} (use FAMILY:SIZE, e.g. mlp:S; families "
                            f"{', '.join(FAMILIES)}; sizes {', '.join(SIZES)})")
    return get_spec(family.strip().lower(), size.strip().upper())


def list_workloads() -> list[WorkloadSpec]:
    """Every built-in workload, families in catalog order, sizes S, M, L."""
    return [get_spec(f, s) for f in FAMILIES for s in SIZES]
