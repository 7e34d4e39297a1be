"""Numeric precision of training: how many bytes each kind of value takes.

One home for the rule every byte count reads (activations, tensor- and pipeline-parallel
messages, gradients, the memory of weights and optimizer state):

* ``fp32``: everything in 4 bytes.
* ``bf16`` / ``fp16`` mixed precision (Micikevicius et al. 2018, arXiv:1710.03740; the
  accounting of Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054, section 3.1): weights,
  activations and gradients in 2 bytes for compute, plus an fp32 master copy of the weights;
  the optimizer's state stays fp32. With Adam that is 2 + 2 + (4 + 4 + 4) = 16 bytes per
  parameter, the same as fp32's 4 + 4 + 8: mixed precision saves activation memory and
  traffic, not model state.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.spec import WorkloadError, choices_message


@dataclass(frozen=True)
class Precision:
    name: str
    value_bytes: int  # a weight, activation or gradient as computed and sent
    master_bytes: int  # the fp32 master copy of each weight (0 when the weights are fp32)
    state_bytes: int = 4  # each optimizer slot (momentum, variance) per parameter
    # fp16's narrow exponent needs the loss scaled: each step its gradients are unscaled and
    # checked for inf/NaN before the update (Micikevicius et al. 2018, section 3.2; torch's
    # GradScaler.unscale_, Megatron-LM's fp16 optimizer); bf16 keeps fp32's exponent
    loss_scaled: bool = False

    def model_state_bytes(self, slots: int) -> tuple[int, int, int]:
        """Bytes per parameter of (weights, gradients, optimizer state incl. master copy)."""
        return self.value_bytes, self.value_bytes, self.master_bytes + self.state_bytes * slots


PRECISIONS = {
    "fp32": Precision("fp32", 4, 0),
    # TF32: fp32 values in memory, tensor-core GEMMs with a 10-bit mantissa
    "tf32": Precision("tf32", 4, 0),
    "bf16": Precision("bf16", 2, 4),
    "fp16": Precision("fp16", 2, 4, loss_scaled=True),
    # FP8 training (Transformer Engine, torchao float8): GEMM operands cast to fp8 inside
    # the GEMM; weights, activations and gradients otherwise as bf16 mixed precision
    "fp8": Precision("fp8", 2, 4),
}
FP32 = PRECISIONS["fp32"]
#: what torch trains in by itself (fp32, TF32, autocast to bf16/fp16): where a device is
#: measured; fp8 needs Transformer Engine or torchao
MEASURED_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def precision(name: str | None) -> Precision:
    """The precision called ``name`` (None: fp32, as the runners train); WorkloadError else."""
    if name is None:
        return FP32
    if name not in PRECISIONS:
        raise WorkloadError(choices_message("precision", name, tuple(PRECISIONS)))
    return PRECISIONS[name]
