"""`stratbench devicecheck`: time ResNet-50, BERT-large and GPT-2 XL training steps on this
machine's GPU and put the device model's prediction beside each (issue 36's measured rows).

Each case runs in its own process (``python -m harness.measure.device_step``): one that runs
out of memory, crashes or times out ends in its own row, and the rows already stored stay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import cast

import click

from harness.commands.common import CONTEXT_SETTINGS, info, json_option, print_json, results_option
from harness.core.errors import InputError
from harness.core.paths import results_dir
from results.schema import DeviceStep
from workloads.known import MEASURED_MODELS as MODELS
from workloads.precision import MEASURED_PRECISIONS as PRECISIONS
from workloads.spec import choices_message

TABLE = "device_steps"


def _names(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in allowed:
            raise InputError(choices_message(what, name, allowed))
    if not names:
        raise InputError(f"no {what} given (choose from {', '.join(allowed)})")
    return names


def _batches(text: str | None) -> dict[str, int]:
    """'resnet50=128,gpt2_xl=4' over the defaults."""
    from harness.validate.device_check import DEFAULT_BATCH

    out = dict(DEFAULT_BATCH)
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.partition("=")
        if name.strip() not in MODELS or not value.strip().isdigit() or int(value) < 1:
            raise InputError(f"--batch {item!r}: give MODEL=N with MODEL one of "
                             f"{', '.join(MODELS)} and N >= 1")
        out[name.strip()] = int(value)
    return out


def run_case(model: str, precision: str, batch: int, *, steps: int, warmup: int,
             device: str, timeout: float) -> DeviceStep:
    """One case in its own process: its row, or a failed / timed-out / unavailable one."""
    command = [sys.executable, "-m", "harness.measure.device_step", "--model", model,
               "--precision", precision, "--batch", str(batch), "--steps", str(steps),
               "--warmup", str(warmup), "--device", device]
    base: DeviceStep = {"model": model, "precision": precision, "batch": batch,
                        "device": device}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return base | {"status": "timeout", "reason": f"no result within {timeout:.0f} s"}
    if done.returncode == 0 and done.stdout.strip():
        row: DeviceStep = json.loads(done.stdout.strip().splitlines()[-1])
        return row
    last = (done.stderr.strip().splitlines() or ["exited without a result"])[-1]
    if "No module named 'torch'" in last:
        return base | {"status": "unavailable",
                       "reason": "torch is not installed (pip install 'stratbench[torch]')"}
    return base | {"status": "failed", "reason": last[:300]}


HELP = """
Time training steps of published models on this machine's GPU, stored with the environment, each
beside the device model's prediction for that GPU.

Time ResNet-50, BERT-large (128 tokens) and GPT-2 XL training steps on this machine's GPU
(torch's defaults in fp32, autocast in bf16/fp16), each case in its own process (one that runs
out of memory is its own failed row), stored as the `device_steps` table of a run with the
environment, and print the device model's prediction for that GPU beside each (the system file
whose device it is: an H100 is dgx_h100_ib's). Without a GPU a case is an unavailable row;
`--device cpu` checks the tool. `--compare PATH` measures nothing and compares the rows stored
under a results directory, or the JSON lines that `python -m harness.measure.device_step --model
M --precision P --batch N` printed into a file on a GPU machine that has torch and nothing else
of stratbench's dependencies.

The GEMMs behind the corpus rows, measured: `python -m harness.validate.gemm_shapes

--list` prints every GEMM the device model times for a system's published runs (dgx_h100_ib by
default), `python -m harness.measure.gemm_step --shapes FILE` times each on a GPU (torch only)
and `python -m harness.validate.gemm_shapes --compare FILE` puts measured efficiency beside
modelled, per shape and per row (validation/campaign-gpu.sh runs both where simpy imports).
A GEMM kernel's own costs (a system file's gemm_fixed and gemm_k_overhead) are fitted on
OpenXLA's published per-shape H100 table: `python -m harness.validate.gemm_table`.
"""


@click.command("devicecheck", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.option("--models", default=",".join(MODELS), show_default=True,
              help="Comma-separated: resnet50, bert_large (128 tokens), gpt2_xl (1024).")
@click.option("--precisions", default="fp32,bf16", show_default=True,
              help="Comma-separated: fp32 (torch's defaults), tf32, bf16, fp16 (autocast).")
@click.option("--batch", "batch", default=None, metavar="MODEL=N,...",
              help="Per-model batch (default resnet50=256, bert_large=64, gpt2_xl=4).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--device", default="cuda", show_default=True,
              help="The torch device to measure on (cpu runs too: it checks the tool, "
                   "not a GPU).")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds per case.")
@click.option("--compare", "compare_dir", default=None, metavar="PATH",
              help="Measure nothing: compare the device_steps rows stored under PATH (a "
                   "results directory), or the JSON lines `python -m "
                   "harness.measure.device_step` printed into the file PATH (a GPU machine "
                   "with torch and nothing else).")
@results_option
@json_option
def command(models: str, precisions: str, batch: str | None, steps: int, warmup: int,
            device: str, timeout: float, compare_dir: str | None, results: str | None,
            as_json: bool) -> None:
    """Time training steps of published models on this machine's GPU, stored with the
    environment, each beside the device model's prediction for that GPU."""
    from harness.validate.device_check import compare, format_comparison

    if compare_dir is not None:
        rows = stored_rows(compare_dir)
    else:
        rows = _measure(_names(models, MODELS, "model"),
                        _names(precisions, PRECISIONS, "precision"), _batches(batch),
                        steps, warmup, device, timeout, results)
    records = compare(rows)
    if as_json:
        print_json(records)
    else:
        click.echo(format_comparison(records))


def stored_rows(path: str) -> list[DeviceStep]:
    """The measured rows under a results directory (its device_steps tables), or in a file
    of JSON lines, one row each."""
    from pathlib import Path

    where = Path(path)
    if where.is_file():
        try:
            rows = [json.loads(line) for line in where.read_text().splitlines()
                    if line.strip()]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {exc.lineno} is not a JSON row") from exc
    else:
        from results.store import load_table

        frame = load_table(where, TABLE)
        rows = [cast(DeviceStep, {str(k): v for k, v in r.items()})  # the stored columns
                for r in frame.to_dict("records")]
    if not rows:
        raise InputError(f"no {TABLE} rows in {path}")
    return rows


def _measure(models: list[str], precisions: list[str], batches: dict[str, int], steps: int,
             warmup: int, device: str, timeout: float, results: str | None
             ) -> list[DeviceStep]:
    import pandas as pd

    from harness.run import environment
    from results.store import ResultsStore, safe_name

    store = ResultsStore(results_dir(results))
    store.check_writable()
    run_id = store.start_run(environment.collect(frameworks=("torch",)))
    info(f"devicecheck run {run_id} in {store.root}")
    rows = []
    for model in models:
        for precision in precisions:
            info(f"  {model} {precision} batch {batches[model]} on {device} ...")
            row = run_case(model, precision, batches[model], steps=steps, warmup=warmup,
                           device=device, timeout=timeout)
            store.write_table(run_id, TABLE, safe_name(f"{model}_{precision}"),
                              pd.DataFrame([row]))
            rows.append(row)
    return rows
