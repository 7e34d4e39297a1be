"""Initial weights drawn with numpy, so a TF and a torch model built from one seed are equal.

Both builders copy these arrays in, which makes cross-framework checks (same loss, same
weights after a step) possible and keeps initialisation independent of framework versions.
Each tensor has its own random stream, (seed, 0, index), so growing one layer does not change
the others.
"""

from __future__ import annotations

import numpy as np

from workloads.configs import EMBEDDING, KERNEL, ONES, ZEROS, ModelConfig, WeightSpec

WEIGHT_STREAM = 0  # data uses other streams of the same seed (workloads.data)


def _init(w: WeightSpec, rng: np.random.Generator) -> np.ndarray:
    if w.init == ZEROS:
        return np.zeros(w.shape, np.float32)
    if w.init == ONES:
        return np.ones(w.shape, np.float32)
    if w.init == KERNEL:  # He-style normal: keeps ReLU activations' scale through depth
        out = rng.standard_normal(w.shape, dtype=np.float32)
        out *= np.float32(w.scale * np.sqrt(2.0 / w.fan_in))
        return out
    if w.init == EMBEDDING:  # uniform in [-scale, scale): cheap for 100M-entry tables
        out = rng.random(w.shape, dtype=np.float32)
        out -= np.float32(0.5)
        out *= np.float32(2 * w.scale)
        return out
    raise ValueError(f"unknown initialiser {w.init!r} for {w.name}")


def init_weights(config: ModelConfig, seed: int) -> list[np.ndarray]:
    """float32 arrays in canonical order and layout (configs.WeightSpec), deterministic."""
    return [_init(w, np.random.default_rng([seed, WEIGHT_STREAM, i]))
            for i, w in enumerate(config.weights())]


def weight_names(config: ModelConfig) -> list[str]:
    return [w.name for w in config.weights()]
