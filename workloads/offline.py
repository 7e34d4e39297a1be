"""Real data that needs no download: scikit-learn's bundled digits and Python's own source.

Digits (1797 8x8 grey images, 10 classes) are upsampled and channel-replicated to the model's
input; text is the bytes of the standard library's top-level `.py` files (byte-level tokens,
vocabulary 256). Both are read once per process and cached. The text depends on the Python
version (its standard library), so it is deterministic per installation, not across them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from workloads.spec import WorkloadError

CORPUS_BYTES = 2 * 2**20


@functools.lru_cache(maxsize=1)
def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) standardised float32, labels int64)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise WorkloadError("real digits data needs scikit-learn "
                            "(pip install 'stratbench[data]')") from exc
    data = load_digits()
    images = data.images.astype(np.float32)
    images = (images - images.mean()) / images.std()
    return images, data.target.astype(np.int64)


def _fit_image(images: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(n, 8, 8) -> (n, *shape): nearest upsampling to H x W, channels replicated, or flat."""
    n = images.shape[0]
    if len(shape) == 1:  # flat input of side * side features
        side = round(shape[0] ** 0.5)
        if side * side != shape[0] or side % 8:
            raise WorkloadError(f"digits cannot fill {shape[0]} features (need (8k)^2)")
        return _fit_image(images, (side, side, 1)).reshape(n, shape[0])
    h, w, c = shape
    if h % 8 or w % 8:
        raise WorkloadError(f"digits cannot be resized to {h}x{w} (need multiples of 8)")
    up = np.repeat(np.repeat(images, h // 8, axis=1), w // 8, axis=2)
    return np.repeat(up[..., None], c, axis=3)


def digits_batch(n: int, rng: np.random.Generator, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    images, labels = digits()
    idx = rng.integers(0, len(labels), n)
    return {"x": np.ascontiguousarray(_fit_image(images[idx], shape)), "y": labels[idx]}


@functools.lru_cache(maxsize=1)
def stdlib_corpus() -> np.ndarray:
    """Up to CORPUS_BYTES of the standard library's top-level sources, as uint8."""
    root = Path(os.path.dirname(os.__file__))
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= CORPUS_BYTES:
            break
    return np.frombuffer(b"".join(chunks)[:CORPUS_BYTES], dtype=np.uint8)


def text_batch(n: int, rng: np.random.Generator, context: int) -> dict[str, np.ndarray]:
    corpus = stdlib_corpus()
    if corpus.size < context + 2:
        raise WorkloadError(f"the standard library corpus is too small for context {context}")
    starts = rng.integers(0, corpus.size - context - 1, n)
    seq = corpus[starts[:, None] + np.arange(context + 1)].astype(np.int64)
    return {"x": np.ascontiguousarray(seq[:, :-1]), "y": np.ascontiguousarray(seq[:, 1:])}
