"""How long one device takes to run a workload's operators: the one device model every
strategy's compute reads.

Each operator of ``workloads.operators`` is timed forward and backward on the device at the
precision it computes in:

* a GEMM (a conv as its implicit GEMM) takes the longer of its FLOPs at the precision's
  peak times the device's large-GEMM efficiency, discounted by **tile and wave
  quantization** (a 128 x 128 output tile per streaming multiprocessor: a GEMM whose tiles do
  not fill the last wave of SMs leaves the rest idle; NVIDIA, "Matrix Multiplication
  Background User's Guide", https://docs.nvidia.com/deeplearning/performance/
  dl-performance-matrix-multiplication/) and by each tile's prologue and epilogue (a short
  reduction reaches less), and its operands' and result's bytes at memory bandwidth (a
  skinny GEMM is memory-bound: the same guide's arithmetic-intensity rule), plus the device
  time any GEMM kernel takes; the two kernel constants are the system file's, fitted on
  OpenXLA's published per-shape GEMM table (``harness.validate.gemm_table``);
* element-wise work, norms and embedding gathers move their bytes at memory bandwidth
  (``MEMORY_EFFICIENCY`` of the datasheet rate);
* attention is fused where the framework fuses it (torch's ``scaled_dot_product_attention``,
  FlashAttention: no T x T scores in memory, ``FUSED_ATTENTION_EFFICIENCY`` of the peak) and
  unfused elsewhere (two batched GEMMs, softmax and dropout over the scores in memory);
* a pass cannot be faster than the host issues its kernels (``launch_overhead`` each, the
  device file's), and a step adds the framework's own ``step_overhead`` once.

What ``fp32`` computes in is each framework's default on the device (``gemm_precision``):
torch runs convolutions in TF32 and matmuls in full fp32 on devices with TF32
(``torch.backends.cudnn.allow_tf32`` defaults to True, ``torch.backends.cuda.matmul.
allow_tf32`` to False since torch 1.12: https://pytorch.org/docs/stable/notes/cuda.html
#tensorfloat-32-tf32-on-ampere-and-later-devices); TensorFlow runs both in TF32
(``tf.config.experimental.enable_tensor_float_32_execution``: enabled by default since
TF 2.4). ``fp8`` runs the GEMMs at the fp8 peak and everything else in bf16, as Transformer
Engine and torchao's float8 do.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.sim.systems.preset import Device
from workloads.operators import ATTENTION, ELEMENTWISE, GATHER, GEMM, Op, expert_sharded
from workloads.precision import Precision
from workloads.precision import precision as find_precision

#: Fraction of the datasheet memory bandwidth that streaming kernels reach: STREAM-like
#: benchmarks (BabelStream, https://github.com/UoB-HPC/BabelStream) reach roughly 80-90% of
#: HBM's datasheet rate on A100 and H100; the lower end, as fused element-wise kernels also
#: launch and reduce. Fixed, not fitted.
MEMORY_EFFICIENCY = 0.8
#: A GEMM's output tile on one streaming multiprocessor (cuBLAS's common 128 x 128 tiles;
#: smaller dimensions take the next power of two at least 16: the library picks smaller
#: tiles rather than waste a big one).
TILE = 128
#: The shortest slice of a reduction a split-K GEMM gives one SM: a GEMM with fewer output
#: tiles than SMs (a weight gradient, whose reduction runs over the batch) is split along K
#: to fill them (cuBLAS's split-K, CUTLASS's stream-K:
#: https://github.com/NVIDIA/cutlass/blob/main/media/docs/efficient_gemm.md).
SPLIT_K_MIN = 256
#: FlashAttention-2 forward reaches up to 73% of the A100's theoretical FLOP/s and its
#: backward up to 63% (Dao 2023, arXiv:2307.08691, section 4.1); the lower figure, as a
#: training step runs both and shorter sequences reach less.
FUSED_ATTENTION_EFFICIENCY = 0.6
#: FlashAttention's backward recomputes the scores: 5 matmuls against the forward's 2.
FUSED_ATTENTION_BACKWARD = 2.5
#: Frameworks whose default attention is fused (torch's SDPA since 2.0); others unfused.
FUSES_ATTENTION = {"torch": True, "tf": False}
#: Each framework's default memory format for images: torch's tensors are NCHW
#: (``torch.contiguous_format``; channels-last is opt-in), TensorFlow's NHWC. Tensor-core
#: convolutions run in NHWC, so an NCHW tensor is transposed before each convolution and its
#: output transposed back (NVIDIA's diagram in MosaicML's channels-last method card:
#: https://docs.mosaicml.com/projects/composer/en/stable/method_cards/channels_last.html).
CHANNELS_LAST = {"torch": False, "tf": True}
FRAMEWORKS = ("torch", "tf")
FP32_BYTES = 4
INDEX_BYTES = 8  # a sparse gradient's int64 row id


def fuses_attention(framework: str | None, stated: bool | None = None) -> bool:
    """Whether attention runs fused: as stated, else as ``framework`` runs it by default."""
    return stated if stated is not None else FUSES_ATTENTION.get(framework or "torch", True)


def gemm_precision(precision: str, framework: str, conv: bool, device: Device) -> str:
    """The peak a GEMM runs at under ``precision`` as ``framework`` trains by default (see
    the module docstring): fp32 means TF32 for torch's convs and all of TF's GEMMs where the
    device has TF32."""
    if precision == "fp32" and "tf32" in device.peak_flops and (conv or framework == "tf"):
        return "tf32"
    return precision


def assumed_efficiency_note(rate: DeviceRate) -> str:
    """What the answer says where the device's GEMM efficiency at this precision is the
    system file's placeholder (``assumed_efficiency``), fitted on no run; "" elsewhere."""
    if rate.efficiency is not None or rate.precision is None:
        return ""
    p = gemm_precision(rate.precision, rate.framework, False, rate.device)
    if p in rate.device.matmul_efficiency:
        return ""
    return (f"its {p} GEMM efficiency is an assumed {rate.device.assumed_efficiency:.0%}, fitted "
            f"on no run (simulate --fit-step fits it on a measured step, for the system "
            f"file's matmul_efficiency)")


def training_precision(device: Device) -> str:
    """What a device trains in when no precision is given: bf16 mixed precision where it
    has a bf16 peak (the default of large-model training on accelerators), else fp16, else
    fp32."""
    for p in ("bf16", "fp16"):
        if p in device.peak_flops:
            return p
    return "fp32"


def fp32_meaning(framework: str, device: Device) -> str:
    """What ``fp32`` computes in, in words, for the answer."""
    if "tf32" not in device.peak_flops:
        return "fp32: full fp32 (the device has no TF32)"
    if framework == "tf":
        return "fp32: TensorFlow runs matmuls and convolutions in TF32 by default"
    return "fp32: torch runs convolutions in TF32 and matmuls in full fp32 by default"


@dataclass(frozen=True)
class DeviceRate:
    """A device as a step sees it: its peaks and efficiency at a precision, under the
    framework's defaults (which GEMMs use TF32, whether attention is fused)."""

    device: Device
    precision: str | None  # fp32, tf32, bf16, fp16, fp8; None: the training peak (bf16)
    efficiency: float | None  # the fraction of the peak a large GEMM reaches (fitted); None:
    # the device file's per precision
    source: str  # where the efficiency came from
    framework: str = "torch"
    fused_attention: bool | None = None  # None: the framework's default
    channels_last: bool | None = None  # images in NHWC; None: the framework's default

    @property
    def name(self) -> str:
        return self.precision or "bf16"

    def gemm_peak(self, conv: bool) -> tuple[float, float]:
        """(peak FLOP/s, efficiency) for a GEMM (``conv``: a convolution's)."""
        if self.precision is None:
            return self.device.peak(None), self._efficiency(None)
        p = gemm_precision(self.precision, self.framework, conv, self.device)
        return self.device.peak(p), self._efficiency(p)

    def _efficiency(self, precision: str | None) -> float:
        return self.efficiency if self.efficiency is not None else \
            self.device.efficiency(precision)

    @property
    def matmul_flops(self) -> float:
        """A large GEMM's achieved FLOP/s (the rate the efficiency is a fraction of)."""
        peak, eff = self.gemm_peak(conv=False)
        return peak * eff

    @property
    def value_bytes(self) -> int:
        """Bytes of an activation value, by workloads.precision's rule (None: bf16)."""
        return find_precision(self.precision or "bf16").value_bytes

    @property
    def bytes_per_s(self) -> float:
        bandwidth = self.device.memory_bandwidth
        if not math.isfinite(bandwidth):
            raise SpecError(f"{self.device.name} states no memory_bandwidth: the element-wise "
                            f"work of a step needs it")
        return bandwidth * MEMORY_EFFICIENCY

    @property
    def fuses_attention(self) -> bool:
        return fuses_attention(self.framework, self.fused_attention)

    @property
    def transposes_convs(self) -> bool:
        """Whether each tensor-core convolution pays an NCHW <-> NHWC transpose."""
        last = (self.channels_last if self.channels_last is not None
                else CHANNELS_LAST.get(self.framework, False))
        return not last and self.precision is not None and gemm_precision(
            self.precision, self.framework, True, self.device) != "fp32"

    @property
    def attention_flops(self) -> float:
        """Fused attention's FLOP/s: at the half-precision peak (fp8 attention stays bf16)."""
        p = "bf16" if self.precision in (None, "fp8") else self.precision
        if p not in self.device.peak_flops:
            p = next(iter(self.device.peak_flops))
        return self.device.peak(p) * FUSED_ATTENTION_EFFICIENCY


def device_rate(device: Device, precision: Precision | str | None,
                efficiency: float | None = None, source: str = "",
                framework: str | None = None, fused_attention: bool | None = None,
                channels_last: bool | None = None) -> DeviceRate:
    """The device computing at ``precision`` under ``framework`` (default torch)."""
    name = precision.name if isinstance(precision, Precision) else precision
    if name is not None and name not in ("fp32", "tf32") and name not in device.peak_flops:
        raise SpecError(f"{device.name} states no {name} peak (it has "
                        f"{', '.join(device.peak_flops)}): choose another --precision")
    if name == "tf32" and "tf32" not in device.peak_flops:
        raise SpecError(f"{device.name} has no TF32 (it has {', '.join(device.peak_flops)})")
    return DeviceRate(device, name, efficiency,
                      source or ("the system file's" if efficiency is None else "calibrated"),
                      framework or "torch", fused_attention, channels_last)


@dataclass(frozen=True)
class OpTimes:
    """Device seconds of some operators for a number of samples, forward and backward, with
    the kernels it takes to launch them and where the time went."""

    forward_s: float = 0.0
    backward_s: float = 0.0
    kernels: int = 0
    gemm_s: float = 0.0  # of forward + backward: GEMMs (compute- or memory-bound)
    memory_s: float = 0.0  # element-wise, norms, gathers
    attention_s: float = 0.0

    def __add__(self, other: OpTimes) -> OpTimes:
        return OpTimes(self.forward_s + other.forward_s, self.backward_s + other.backward_s,
                       self.kernels + other.kernels, self.gemm_s + other.gemm_s,
                       self.memory_s + other.memory_s, self.attention_s + other.attention_s)

    @property
    def device_s(self) -> float:
        return self.forward_s + self.backward_s


def _tile(x: float) -> float:
    if x >= TILE:
        return TILE
    return float(max(16, 2 ** math.ceil(math.log2(max(1.0, x)))))


@dataclass(frozen=True)
class GemmCall:
    """One GEMM the device model timed: its shape, precision and the seconds it gave."""

    m: float
    n: float
    k: float
    repeat: float
    precision: str  # what it computes in (gemm_precision's answer)
    conv: bool
    seconds: float
    peak: float  # the precision's peak FLOP/s on the device

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.repeat


_RECORDING: contextvars.ContextVar[list[GemmCall] | None] = contextvars.ContextVar(
    "gemm_calls", default=None)


@contextlib.contextmanager
def recorded_gemms() -> Iterator[list[GemmCall]]:
    """Every GEMM the device model times inside the block, in order: what a measured sweep
    puts beside the model's times (harness.validate.gemm_shapes), taken from the timing
    itself so that no second copy of a layout's shapes can drift from it."""
    calls: list[GemmCall] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


def gemm_seconds(m: float, n: float, k: float, repeat: float, rate: DeviceRate,
                 conv: bool = False) -> float:
    """One GEMM of m x k by k x n (``repeat`` of them at once): the longer of its FLOPs at
    the quantized rate and its bytes at memory bandwidth."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    seconds = _gemm_seconds(m, n, k, repeat, rate, conv)
    calls = _RECORDING.get()
    if calls is not None:
        calls.append(GemmCall(m, n, k, repeat, _computes_in(rate, conv), conv, seconds,
                              rate.gemm_peak(conv)[0]))
    return seconds


def _computes_in(rate: DeviceRate, conv: bool) -> str:
    if rate.precision is None:
        return "bf16"
    return gemm_precision(rate.precision, rate.framework, conv, rate.device)


def _gemm_seconds(m: float, n: float, k: float, repeat: float, rate: DeviceRate,
                  conv: bool) -> float:
    peak, eff = rate.gemm_peak(conv)
    device = rate.device
    return gemm_time(m, n, k, repeat, flops_per_s=peak * eff, sms=device.sms,
                     k_overhead=device.gemm_k_overhead, fixed_s=device.gemm_fixed_s,
                     operand_bytes=1 if rate.precision == "fp8" else rate.value_bytes,
                     result_bytes=rate.value_bytes, bytes_per_s=rate.bytes_per_s)


def gemm_time(m: float, n: float, k: float, repeat: float, *, flops_per_s: float, sms: int,
              k_overhead: float, fixed_s: float, operand_bytes: float, result_bytes: float,
              bytes_per_s: float) -> float:
    """One GEMM kernel's device seconds: the longer of its FLOPs at ``flops_per_s`` (a large
    GEMM's rate) discounted by tile and wave quantization and by each tile's prologue and
    epilogue (``k_overhead`` reduction elements' worth: a short reduction amortises them
    over fewer steps), and its bytes at ``bytes_per_s``; plus ``fixed_s``, the time any
    GEMM kernel takes to fill and drain the device. One formula for the device model and
    for the fit of its constants on a published per-shape table
    (``harness.validate.gemm_table``)."""
    tm, tn = _tile(m), _tile(n)
    tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
    utilisation = (m * n) / (tiles_m * tm * tiles_n * tn)
    splits = 1.0
    if sms:
        tiles = tiles_m * tiles_n * repeat
        # too few tiles to fill the SMs: the library splits the reduction (split-K)
        splits = max(1, min(sms // tiles, math.ceil(k / SPLIT_K_MIN))) if tiles < sms else 1
        waves = tiles * splits / sms
        utilisation *= waves / math.ceil(waves)
    tile_overhead = 1.0 + k_overhead * splits / k
    compute = 2.0 * m * n * k * repeat * tile_overhead / (flops_per_s * utilisation)
    traffic = (m * k + k * n) * repeat * operand_bytes + m * n * repeat * result_bytes
    return max(compute, traffic / bytes_per_s) + fixed_s


def fp8_cast_seconds(m: float, n: float, k: float, repeat: float, rate: DeviceRate
                     ) -> tuple[float, float]:
    """FP8 training's own traffic around one GEMM (Transformer Engine's recipe, torchao's
    float8): forward, the activation (m x k) and the weight (k x n) are read in bf16 and
    written in fp8 with their amax (a scaling factor each), and once more transposed, as
    Hopper's fp8 GEMMs take one operand layout only; backward, the output's gradient
    (m x n) the same. https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/
    examples/fp8_primer.html (per-tensor scaling, the cast and transpose kernels)."""
    per_value = 2 + 1 + 1  # read bf16, write fp8, write the transposed fp8 copy
    forward = (m * k + k * n) * repeat * per_value / rate.bytes_per_s
    backward = m * n * repeat * per_value / rate.bytes_per_s
    return forward, backward


def gemm_calls(op: Op, samples: float, tensor: int = 1
               ) -> tuple[tuple[float, float, float], ...]:
    """The (m, n, k) of a GEMM operator's three calls on one of ``tensor`` ranks, each
    ``op.repeat`` times: forward, the input's gradient and the weight's. Tensor parallelism
    splits the output features (column-parallel) or the reduction (row-parallel), whichever
    is wider. The one place a GEMM operator's shapes come from: the device model times
    these, and a measured sweep records them as timed (``recorded_gemms``)."""
    m = op.rows * samples * op.load
    n, k = float(op.n), float(op.k)
    if tensor > 1:
        n, k = (n / tensor, k) if n >= k else (n, k / tensor)
    return (m, n, k), (m, k, n), (k, n, m)


def op_times(op: Op, samples: float, rate: DeviceRate, tensor: int = 1,
             split_elementwise: bool = True) -> OpTimes:
    """``op`` for ``samples`` samples on one of ``tensor`` ranks. A GEMM splits its output
    features (column-parallel) or its reduction (row-parallel) T ways, attention its heads;
    element-wise work splits T ways where ``split_elementwise`` (inside the tensor-parallel
    region, or everywhere under sequence parallelism) and is whole otherwise."""
    if op.kind == GEMM:
        (m, n, k), *gradients = gemm_calls(op, samples, tensor)
        forward = gemm_seconds(m, n, k, op.repeat, rate, op.conv)
        backward = sum(gemm_seconds(*shape, op.repeat, rate, op.conv) for shape in gradients)
        if rate.precision == "fp8":  # the casts into fp8 around each GEMM
            cast = fp8_cast_seconds(m, n, k, op.repeat, rate)
            forward, backward = forward + cast[0], backward + cast[1]
        transposed = 0.0
        if op.conv and rate.transposes_convs:  # input and output read and written again,
            # forward; backward, each of its two convolutions does the same
            transposed = (3 * 2 * (op.input_values + op.rows * op.n) * samples
                          * rate.value_bytes / rate.bytes_per_s)
        return OpTimes(forward + transposed / 3, backward + 2 * transposed / 3,
                       op.kernels + op.backward_kernels + (6 if transposed else 0),
                       gemm_s=forward + backward, memory_s=transposed)
    if op.kind in (ELEMENTWISE, GATHER):
        share = samples * op.load / (tensor if split_elementwise else 1)
        width = FP32_BYTES if op.fp32_input else rate.value_bytes
        forward = op.values * share * width / rate.bytes_per_s
        backward = op.backward_values * share * width / rate.bytes_per_s
        kernels = op.kernels + op.backward_kernels
        if op.fp32_input and rate.value_bytes < FP32_BYTES:
            # the input cast up forward and its gradient cast back: each read and written
            cast_s = op.fp32_input * share * (rate.value_bytes + FP32_BYTES) / rate.bytes_per_s
            forward, backward, kernels = forward + cast_s, backward + cast_s, kernels + 2
        if op.fp32_table:  # half the values on the table's side, in fp32; an id per row
            forward = op.values / 2 * share * (FP32_BYTES + width) / rate.bytes_per_s
            backward = (op.backward_values / 2 * (FP32_BYTES + width) + INDEX_BYTES * op.rows
                        ) * share / rate.bytes_per_s
        return OpTimes(forward, backward, kernels, memory_s=forward + backward)
    if op.kind == ATTENTION:
        return _attention(op, samples, rate, tensor)
    raise SpecError(f"operator {op.name}: no timing for kind {op.kind!r}")


def _attention(op: Op, samples: float, rate: DeviceRate, tensor: int) -> OpTimes:
    heads = op.heads / tensor
    t, hd = op.seq, op.head_dim
    if rate.fuses_attention:
        flops = 4.0 * op.scored_pairs * hd * heads * samples
        forward = flops / rate.attention_flops
        backward = FUSED_ATTENTION_BACKWARD * forward
        return OpTimes(forward, backward, 2, attention_s=forward + backward)
    # unfused: scores = q.k^T, softmax (and dropout), out = p.v, each through memory
    repeat = heads * samples
    scores = gemm_seconds(t, t, hd, repeat, rate)
    weighted = gemm_seconds(t, hd, t, repeat, rate)
    square = t * t * repeat * rate.value_bytes / rate.bytes_per_s
    elementwise = (3 + 1) * square  # scale+mask+softmax: read, write; +mask add
    backward_elementwise = 3 * square
    if op.dropout:
        elementwise += 2.5 * square  # read, write, a one-byte mask
        backward_elementwise += 2.5 * square
    forward = scores + weighted + elementwise
    backward = (gemm_seconds(t, hd, t, repeat, rate) + gemm_seconds(hd, t, t, repeat, rate)
                + gemm_seconds(t, t, hd, repeat, rate) + gemm_seconds(t, hd, t, repeat, rate)
                + backward_elementwise)
    return OpTimes(forward, backward, 5 + 2 * int(bool(op.dropout)),
                   gemm_s=forward + backward - elementwise - backward_elementwise,
                   memory_s=elementwise + backward_elementwise)


def pass_times(ops: tuple[Op, ...], samples: float, rate: DeviceRate, tensor: int = 1,
               sequence_parallel: bool = False, expert: int = 1) -> OpTimes:
    """Forward and backward of ``ops`` for ``samples`` samples (one of ``tensor`` ranks, and
    of ``expert`` ranks sharing the routed experts: ``expert_sharded``)."""
    total = OpTimes()
    for op in ops:
        total += op_times(expert_sharded(op, expert), samples, rate, tensor,
                          split_elementwise=sequence_parallel or op.kind == GATHER
                          or _inside_tensor_region(op))
    return total


def _inside_tensor_region(op: Op) -> bool:
    """Element-wise work between a column- and a row-parallel GEMM (an MLP's activation,
    the attention's scores) splits with them; norms, residual adds and dropout on the
    residual stream do not (Megatron-LM; Korthikanti et al. 2022, section 4.1)."""
    return op.name in ("gelu", "swiglu", "relu")


def launch_floor(kernels: int, rate: DeviceRate) -> float:
    """The host's time to issue ``kernels`` kernels: a pass's lower bound."""
    return kernels * rate.device.launch_overhead_s


def bound_by(times: OpTimes, rate: DeviceRate) -> str:
    """What decides a pass's time: launch, memory (element-wise work), attention or
    compute (GEMMs)."""
    if launch_floor(times.kernels, rate) >= times.device_s:
        return "launch-bound"
    parts = {"matmul-bound": times.gemm_s, "memory-bound": times.memory_s,
             "attention-bound": times.attention_s}
    return max(parts, key=lambda k: parts[k])


@dataclass(frozen=True)
class DeviceStep:
    """One replica's training step on one device, by the device model."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    overhead_s: float  # the framework's own per-step work
    kernels: int
    bound: str
    precision_note: str

    @property
    def passes_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def total_s(self) -> float:
        return self.passes_s + self.optimizer_s + self.overhead_s


def optimizer_seconds(params: float, precision: Precision, slots: int, rate: DeviceRate
                      ) -> float:
    """An element-wise update of ``params`` parameters (Adam: ``slots`` = 2): read the
    gradient, read and write the fp32 weights (the master copy under mixed precision, then
    write the compute copy) and every optimizer slot; under a loss scale (fp16) each fp32
    gradient is read and written once more, unscaled and checked, first."""
    per_param = (precision.value_bytes + 8 + 8 * slots
                 + (precision.value_bytes if precision.master_bytes else 0)
                 + (2 * FP32_BYTES if precision.loss_scaled else 0))
    return params * per_param / rate.bytes_per_s


def gradient_copy_seconds(params: float, precision: Precision, rate: DeviceRate) -> float:
    """One micro-batch's half-precision gradients added into an fp32 copy (DeepSpeed's
    BF16_Optimizer.update_hp_grads: ``hp_grad.add_(lp_grad.to(fp32))``): the cast reads the
    gradient and writes an fp32 temporary, the add reads it and the copy and writes the
    copy back. Nothing where the gradients are fp32 already."""
    if not precision.master_bytes:
        return 0.0
    return params * (precision.value_bytes + 4 * FP32_BYTES) / rate.bytes_per_s


def accumulation_seconds(values: float, grad_bytes: int, rate: DeviceRate) -> float:
    """One more micro-batch's weight gradients added into those accumulated before it, as an
    eager framework adds them: torch's AccumulateGrad runs ``grad += new`` in place once a
    gradient exists (torch/csrc/autograd/functions/accumulate_grad.h), so both are read and
    the sum written, three times the gradient's bytes per value. Megatron-LM's
    gradient-accumulation fusion (the weight-gradient GEMM adds into its fp32 buffer) pays
    nothing here; DeepSpeed's fp32 copy pays ``gradient_copy_seconds`` instead."""
    return 3 * values * grad_bytes / rate.bytes_per_s


#: Kernels of one optimizer update with torch's multi-tensor ("foreach") implementation,
#: per launch group: SGD 1, momentum 2, Adam about 6 (the moment updates, the bias
#: corrections, the step). A launch group covers up to ``FOREACH_ELEMENTS`` values.
OPTIMIZER_KERNELS = {0: 1, 1: 2, 2: 6}
FOREACH_ELEMENTS = 320 * 65536


def optimizer_kernels(params: float, slots: int) -> int:
    return OPTIMIZER_KERNELS.get(slots, 6) * max(1, math.ceil(params / FOREACH_ELEMENTS))


def device_step(ops: tuple[Op, ...], samples: int, params: float, rate: DeviceRate,
                precision: Precision, slots: int = 2) -> DeviceStep:
    """One replica's step: forward and backward of ``ops`` (no faster than their kernels
    issue), the optimizer's update of ``params`` and the framework's step overhead."""
    times = pass_times(ops, samples, rate)
    kernels = times.kernels + optimizer_kernels(params, slots)
    floor = launch_floor(kernels, rate)
    device_s = times.device_s + optimizer_seconds(params, precision, slots, rate)
    scale = max(1.0, floor / device_s) if device_s > 0 else 1.0
    optimizer = optimizer_seconds(params, precision, slots, rate) * scale
    note = (fp32_meaning(rate.framework, rate.device) if rate.precision == "fp32"
            else f"{rate.name}")
    if assumed := assumed_efficiency_note(rate):
        note = f"{note}; {assumed}"
    return DeviceStep(times.forward_s * scale, times.backward_s * scale, optimizer,
                      rate.device.step_overhead_s, kernels,
                      "launch-bound" if floor >= device_s else bound_by(times, rate), note)
