"""A torch model's operators, as the device model reads them, traced from one forward pass.

Whatever the model is (a built-in, a user's ``nn.Module`` with functional calls and control
flow), its forward reaches torch's dispatcher as aten operators with their shapes; a
``TorchDispatchMode`` records them under ``torch.no_grad`` on the batch the run trained on:

* ``mm``, ``addmm``, ``bmm``, ``linear`` and ``convolution``: GEMMs with their shapes (a
  convolution as its implicit GEMM: output pixels x output channels x kernel area x input
  channels per group);
* the fused attention kernels (``_scaled_dot_product_*``): attention with its heads,
  sequence and head size;
* every other operator that computes (not a view): element-wise work, the values it reads
  and writes.

Rows and values are divided by the batch so the operators are per sample, as
``workloads.operators`` defines them. The runner stores them with the one-device run
(``details.operators``), from which a described device's compute is modelled: the parent
never imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from workloads.operators import (
    ATTENTION,
    Op,
    OpRecord,
    conv,
    elementwise,
    embedding,
    gemm,
    to_records,
)

_ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention")
#: Operators that move no data worth counting (shape bookkeeping, constants, copies that
#: frameworks elide).
_SKIP = {"detach", "clone", "_to_copy", "copy_", "empty", "zeros", "ones", "full", "fill_",
         "zero_", "lift_fresh", "_local_scalar_dense", "item", "alias", "contiguous",
         "new_empty", "new_zeros", "scalar_tensor", "arange", "empty_like", "zeros_like",
         "ones_like", "_unsafe_view"}


class _Recorder(TorchDispatchMode):
    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.ops: list[Op] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        try:
            self._record(func, args, out)
        except (IndexError, ValueError, TypeError, RuntimeError):
            # an overload whose arguments are laid out otherwise: its bytes still count
            self._elementwise(func.overloadpacket.__name__, args, out)
        return out

    def _elementwise(self, name: str, args: Any, out: Any) -> None:
        tensors = [t for t in tree_flatten((args, out))[0] if isinstance(t, torch.Tensor)]
        values = sum(t.numel() for t in tensors)
        if values:
            self.ops.append(elementwise(name, values / self.batch))

    def _record(self, func: Any, args: Any, out: Any) -> None:
        name = func.overloadpacket.__name__
        b = float(self.batch)
        if name in ("mm", "addmm"):
            a, w = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
            self.ops.append(gemm(name, a.shape[0] / b, int(w.shape[1]), int(a.shape[1]),
                                 bias=name == "addmm"))
        elif name == "bmm":
            a, w = args[0], args[1]
            self.ops.append(gemm(name, a.shape[1], int(w.shape[2]), int(a.shape[2]),
                                 repeat=max(1, round(a.shape[0] / b))))
        elif name == "convolution":
            x, w = args[0], args[1]
            groups = int(args[8]) if len(args) > 8 else 1
            pixels = out.numel() / out.shape[0] / out.shape[1]
            k = int(w.shape[1]) * int(w[0, 0].numel())
            per_group = out.shape[1] // groups
            self.ops.append(conv(name, pixels * groups, per_group, k,
                                 x.numel() / x.shape[0], bias=args[2] is not None))
        elif name in _ATTENTION:
            q = args[0]  # batch, heads, sequence, head size
            causal = bool(args[4]) if name.startswith("_scaled") and len(args) > 4 \
                else bool(args[5]) if len(args) > 5 else False
            self.ops.append(Op(name, ATTENTION, heads=int(q.shape[1]), seq=int(q.shape[2]),
                               head_dim=int(q.shape[3]), kv_heads=int(args[1].shape[1]),
                               causal=causal))
        elif name in ("embedding", "_embedding_bag"):
            table, ids = args[0], args[1]
            self.ops.append(embedding(name, ids.numel() / b, int(table.shape[1])))
        elif name not in _SKIP and not func.is_view:
            self._elementwise(name, args, out)


def trace_operators(model: torch.nn.Module, forward: Any, batch_size: int
                    ) -> list[OpRecord]:
    """One forward of ``forward()`` (a closure over the model and a batch of
    ``batch_size`` samples) as per-sample operator records (JSON-able)."""
    del model  # traced through the closure; named for the reader
    recorder = _Recorder(batch_size)
    with torch.no_grad(), recorder:
        forward()
    return to_records(tuple(recorder.ops))


def saved_activation_bytes(model: torch.nn.Module, forward: Any, batch_size: int) -> float:
    """Bytes one sample keeps for its backward: every tensor autograd saves during one
    forward of ``forward()`` (``saved_tensors_hooks``), each storage once (a ReLU's output is
    also the next layer's saved input), the model's own parameters left out. What a
    described device's memory model reads for a model it has no layers of; the graph is
    dropped unused."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in weights:
            seen[key] = max(seen.get(key, 0), storage.nbytes())
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    del loss
    return sum(seen.values()) / batch_size
