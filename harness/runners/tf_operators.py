"""A Keras model's operators, as the device model reads them, from its traced forward graph.

The TensorFlow counterpart of ``torch_operators``: the forward loss is traced once with
``tf.function`` on the batch the run trained on, and the graph's operations are read with
their static shapes:

* ``MatMul`` and ``BatchMatMul*``: GEMMs with their shapes (transposes read from the
  attributes);
* ``Conv2D`` and ``DepthwiseConv2dNative``: convolutions as implicit GEMMs (NHWC);
* gathers from a variable (``ResourceGather``, ``GatherV2``): embedding lookups;
* every other operation producing floating-point values: element-wise work, the values it
  reads and writes. Shape bookkeeping, constants and variable reads are skipped.

Rows and values are divided by the batch, so the operators are per sample; the runner stores
them with the one-device run (``details.operators``).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from workloads.operators import Op, OpRecord, conv, elementwise, embedding, gemm, to_records

_SKIP = {"Const", "Placeholder", "ReadVariableOp", "VarHandleOp", "Identity", "IdentityN",
         "NoOp", "Shape", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "Size", "Rank",
         "StridedSlice", "Pack", "Unpack", "Fill", "ZerosLike", "OnesLike", "Range",
         "BroadcastTo", "BroadcastArgs", "Transpose", "ConcatV2"}


def _dims(tensor: Any) -> list[int] | None:
    shape = tensor.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        return None
    return [int(d) for d in shape.as_list()]


def _numel(tensor: Any) -> float:
    dims = _dims(tensor)
    return float(math.prod(dims)) if dims is not None else 0.0


def _op(op: Any, batch: float) -> Op | None:
    kind = op.type
    if kind == "MatMul":
        a, b = _dims(op.inputs[0]), _dims(op.inputs[1])
        if a is None or b is None:
            return None
        m, k = (a[1], a[0]) if op.get_attr("transpose_a") else (a[0], a[1])
        n = b[0] if op.get_attr("transpose_b") else b[1]
        return gemm("MatMul", m / batch, n, k)
    if kind.startswith("BatchMatMul"):
        a, b = _dims(op.inputs[0]), _dims(op.inputs[1])
        if a is None or b is None or len(a) < 3:
            return None
        m, k = (a[-1], a[-2]) if op.get_attr("adj_x") else (a[-2], a[-1])
        n = b[-2] if op.get_attr("adj_y") else b[-1]
        repeat = max(1, round(math.prod(a[:-2]) / batch))
        return gemm(kind, m, n, k, repeat=repeat)
    if kind in ("Conv2D", "DepthwiseConv2dNative"):
        x, w, out = _dims(op.inputs[0]), _dims(op.inputs[1]), _dims(op.outputs[0])
        if x is None or w is None or out is None:
            return None
        pixels = out[1] * out[2]
        if kind == "Conv2D":
            return conv(kind, pixels, w[3], w[0] * w[1] * w[2], math.prod(x[1:]))
        # depthwise: one small GEMM per input channel
        return conv(kind, pixels * w[2], w[3], w[0] * w[1], math.prod(x[1:]))
    if kind in ("ResourceGather", "GatherV2") and op.outputs[0].dtype.is_floating:
        out = _dims(op.outputs[0])
        if out is None or len(out) < 2:
            return None
        return embedding(kind, math.prod(out[:-1]) / batch, out[-1])
    if kind in _SKIP or not op.outputs or not op.outputs[0].dtype.is_floating:
        return None
    values = sum(_numel(t) for t in (*op.inputs, *op.outputs)
                 if t.dtype.is_floating and t.dtype != tf.resource)
    return elementwise(kind, values / batch) if values else None


def trace_operators(forward: Any, batch_size: int) -> list[OpRecord]:
    """The forward of ``forward()`` (a closure over the model and a batch of ``batch_size``
    samples), traced once, as per-sample operator records (JSON-able)."""
    graph = tf.function(forward).get_concrete_function().graph
    ops = [o for o in (_op(op, float(batch_size)) for op in graph.get_operations())
           if o is not None]
    return to_records(tuple(ops))


#: Operations that read only a tensor's shape: a gradient that uses them keeps no values.
_SHAPE_ONLY = {"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs"}
#: Operations whose output is a weight (a variable's value), not an activation.
_WEIGHTS = {"ReadVariableOp", "VarHandleOp"}


def saved_activation_bytes(variables: Any, forward: Any, batch_size: int) -> float:
    """Bytes one sample keeps for backward: the forward's values that the gradient's
    operations read, with ``tape.gradient`` of ``forward()`` over ``variables`` traced in one
    graph (its operations are those under the tape's ``gradient_tape`` scope), each tensor
    once (the batch too: traced from eager tensors, it is the graph's constants); weights
    (variable reads and what they pass through unchanged) and reads of a shape alone left
    out. The TensorFlow counterpart of
    ``torch_operators.saved_activation_bytes``."""
    def step() -> Any:
        with tf.GradientTape() as tape:
            loss = forward()
        return tape.gradient(loss, variables)

    graph = tf.function(step).get_concrete_function().graph
    kept: dict[str, float] = {}
    for op in graph.get_operations():
        if not op.name.startswith("gradient_tape/") or op.type in _SHAPE_ONLY:
            continue
        for tensor in op.inputs:
            source = tensor.op
            if source.name.startswith("gradient_tape/") or _is_weight(source) \
                    or tensor.dtype == tf.resource:
                continue
            kept[tensor.name] = _numel(tensor) * tensor.dtype.size
    return sum(kept.values()) / batch_size


def _is_weight(op: Any) -> bool:
    """A variable's value, possibly through identities and casts (mixed precision)."""
    while op.type in ("Identity", "Cast") and op.inputs:
        op = op.inputs[0].op
    return op.type in _WEIGHTS
