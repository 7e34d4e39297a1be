"""GEMMs of given shapes timed on one device: the efficiency a shape reaches, measured.

The device model gives every GEMM one efficiency per device and precision, discounted only
by tile and wave quantization; the published runs it misses most (Megatron-LM's 314B and
462B rows, Llama 3.1 405B) have the widest GEMMs, and their authors name GEMM size as why
their MFU rises. Whether a wide GEMM reaches more of the peak than a narrow one is a
measurement, not a fit: this times the shapes the simulator times
(``python -m harness.validate.gemm_shapes --list``) so that ``--compare`` can put the two
side by side.

    python -m harness.measure.gemm_step --shapes shapes.jsonl > gemms.jsonl
    python -m harness.measure.gemm_step --shape 8192,6144,16384 --precision bf16

Each line in, ``{"m", "n", "k", "repeat", "precision"}``; each line out, the same with the
median seconds of ``steps`` synchronised calls after ``warmup``, the TFLOP/s and the
device. fp8 runs ``torch._scaled_mm`` (per-tensor scales, as Transformer Engine's delayed
scaling and torchao's float8 call it) where the device has it, else the line says why.
torch only: it runs on a lent GPU machine that has nothing else.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from typing import TypedDict

import torch

from harness.measure.device_step import synchronised_times

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "tf32": torch.float32}
PRECISIONS = (*DTYPES, "fp8")


def _call(m: int, n: int, k: int, repeat: int, precision: str, device: torch.device
          ) -> Callable[[], torch.Tensor]:
    """One call of the GEMM, its operands made once (the weight laid out as a linear layer's,
    n x k, as the frameworks hold it)."""
    if precision == "fp8":
        if repeat != 1:
            raise ValueError("fp8: batched (repeat > 1) GEMMs are not timed")
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)
    dtype = DTYPES[precision]
    if repeat == 1:
        a = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        return lambda: a @ w.t()
    a = torch.randn(repeat, m, k, device=device, dtype=dtype)
    w = torch.randn(repeat, n, k, device=device, dtype=dtype)
    return lambda: torch.bmm(a, w.transpose(1, 2))


class GemmShape(TypedDict):
    """A GEMM to time: m x k by k x n, ``repeat`` at once, in ``precision`` (a line of
    ``python -m harness.validate.gemm_shapes --list``)."""

    m: int
    n: int
    k: int
    repeat: int
    precision: str


class GemmTime(GemmShape, total=False):
    """A timed GEMM, the JSON line this module prints: ``status`` ok with its median
    ``seconds``, or unavailable / failed and why."""

    device: str
    status: str
    reason: str
    seconds: float
    min_s: float
    tflops: float
    device_name: str
    torch: str
    steps: int


def measure_gemm(m: int, n: int, k: int, precision: str, *, repeat: int = 1,
                 device: str = "cuda", steps: int = 20, warmup: int = 5) -> GemmTime:
    """The median seconds of an m x k by k x n GEMM (``repeat`` at once) in ``precision``;
    a row with ``status`` ok, unavailable (no such device) or failed (out of memory, no fp8
    kernel) and why."""
    row: GemmTime = {"m": m, "n": n, "k": k, "repeat": repeat, "precision": precision,
                     "device": device}
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (choose from "
                         f"{', '.join(PRECISIONS)})")
    where = torch.device(device)
    cuda = where.type == "cuda"
    if cuda and not torch.cuda.is_available():
        return {**row, "status": "unavailable",
                "reason": f"no CUDA GPU here (torch {torch.__version__} sees none)"}
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        times = synchronised_times(_call(m, n, k, repeat, precision, where), where, steps,
                                   warmup)
    except (RuntimeError, ValueError) as exc:  # out of memory, no kernel for the dtype
        if cuda:
            torch.cuda.empty_cache()
        return {**row, "status": "failed", "reason": f"{type(exc).__name__}: "
                                                     f"{str(exc).splitlines()[0][:200]}"}
    seconds = statistics.median(times)
    name = torch.cuda.get_device_name(where) if cuda else "cpu"
    return {**row, "status": "ok", "seconds": seconds, "min_s": min(times),
            "tflops": 2.0 * m * n * k * repeat / seconds / 1e12, "device_name": name,
            "torch": torch.__version__, "steps": steps}


def read_shapes(lines: Iterable[str], precision: str | None = None) -> list[GemmShape]:
    """Shapes, one JSON object a line (``--list``'s output), whole numbers; ``precision``
    overrides each line's."""
    shapes = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            shape: GemmShape = {"m": int(item["m"]), "n": int(item["n"]), "k": int(item["k"]),
                                "repeat": int(item.get("repeat", 1)),
                                "precision": precision or str(item["precision"])}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"shapes line {number}: {exc!r} (want a JSON object with m, n, "
                             f"k[, repeat], precision)") from None
        shapes.append(shape)
    return shapes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="a file of JSON lines (m, n, k, repeat, precision)")
    parser.add_argument("--shape", help="M,N,K: one GEMM")
    parser.add_argument("--precision", choices=PRECISIONS,
                        help="the precision (overrides the file's; default bf16 for --shape)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        if args.shapes:
            with open(args.shapes, encoding="utf-8") as fh:
                shapes = read_shapes(fh, args.precision)
        elif args.shape:
            m, n, k = (int(x) for x in args.shape.split(","))
            shapes = [{"m": m, "n": n, "k": k, "repeat": 1,
                       "precision": args.precision or "bf16"}]
        else:
            parser.error("give --shapes FILE or --shape M,N,K")
    except (OSError, ValueError) as exc:
        print(f"gemm_step: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for shape in shapes:
        print(json.dumps(measure_gemm(shape["m"], shape["n"], shape["k"], shape["precision"],
                                      repeat=shape["repeat"], device=args.device,
                                      steps=args.steps, warmup=args.warmup)), flush=True)


if __name__ == "__main__":
    main()
