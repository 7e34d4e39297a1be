"""One model's training step timed on one device (a GPU where there is one), in one process.

The device model is held to published throughputs; this is how a lent GPU adds measured
ones: ResNet-50, BERT-large and GPT-2 XL (``workloads.torch_known``, the models the device
model times by their operators) trained with torch's defaults in fp32 (on Ampere and
later: TF32 convolutions, fp32 matmuls) or under autocast in bf16/fp16 (fp32 weights),
warm-up steps dropped, every step synchronised, the median kept with the range and the
peak memory (not ``measure.stats.summarize``: its interval needs scipy, which a GPU machine
lent with torch alone lacks).

    python -m harness.measure.device_step --model resnet50 --precision bf16 --batch 256

prints one JSON row. ``stratbench devicecheck`` runs one such process per case (a case that
runs out of memory or crashes ends in a failed row, not in the others' loss), stores the
rows with the environment and puts the device model's prediction beside them. torch only:
no pandas, no simpy, so it runs on a machine that has torch and nothing else.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from workloads.precision import MEASURED_PRECISIONS as PRECISIONS

if TYPE_CHECKING:  # a GPU machine runs this module with torch alone
    from results.schema import DeviceStep
from workloads.torch_known import MODELS, measured_model

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    """What the model's recipe trains with: SGD with momentum (ResNet-50, NVIDIA's 0.875),
    else AdamW (LAMB for BERT keeps the same two moments)."""
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.1, momentum=0.875)
    return torch.optim.AdamW(params, lr=1e-4)


def synchronised_times(call: Callable[[], object], where: torch.device, steps: int,
                       warmup: int) -> list[float]:
    """Seconds of each of ``steps`` calls after ``warmup``, each waited for on the device
    (a CUDA call returns before its kernels finish)."""

    def synchronise() -> None:
        if where.type == "cuda":
            torch.cuda.synchronize(where)

    for _ in range(warmup):
        call()
    synchronise()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        call()
        synchronise()
        times.append(time.perf_counter() - start)
    return times


def measure(model: str, precision: str, batch: int, *, steps: int = 20, warmup: int = 5,
            device: str = "cuda", seq: int | None = None) -> DeviceStep:
    """The median step (forward, backward, the optimizer's update) of ``model`` at ``batch``
    samples in ``precision`` on ``device``; a dict with the device, software and peak
    memory. tf32 also runs the matmuls in TF32 (``allow_tf32``); fp32 keeps torch's
    defaults."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    where = torch.device(device)
    cuda = where.type == "cuda"
    if cuda and not torch.cuda.is_available():
        return {"model": model, "precision": precision, "batch": batch, "device": device,
                "status": "unavailable",
                "reason": f"no CUDA GPU here (torch {torch.__version__} sees none)"}
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.cuda.reset_peak_memory_stats(where)
    built = measured_model(model, seq)
    module = built.module.to_empty(device=where)
    with torch.no_grad():  # any finite weights and statistics: only the time is kept
        for parameter in module.parameters():
            parameter.normal_(std=0.02)
        for name, buffer in module.named_buffers():
            buffer.fill_(1 if name.endswith("running_var") else 0)
    module.train()
    optimizer = _optimizer(built.optimizer, module.parameters())
    inputs = built.batch(batch, where)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(where.type, dtype=HALF.get(precision, torch.bfloat16),
                            enabled=precision in HALF):
            loss = built.loss(module, inputs)
        loss.backward()
        optimizer.step()
    times = synchronised_times(step, where, steps, warmup)
    median = statistics.median(times)
    return {"model": model, "precision": precision, "batch": batch, "seq": built.seq,
            "optimizer": built.optimizer, "steps": steps, "warmup": warmup,
            "step_s": median, "step_s_min": min(times), "step_s_max": max(times),
            "samples_per_s": batch / median,
            "peak_memory_bytes": (float(torch.cuda.max_memory_allocated(where)) if cuda
                                  else float("nan")),
            "device": device,
            "device_name": torch.cuda.get_device_name(where) if cuda else "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "status": "ok", "reason": ""}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.model, args.precision, args.batch, steps=args.steps,
                             warmup=args.warmup, device=args.device, seq=args.seq)))


if __name__ == "__main__":
    main()
