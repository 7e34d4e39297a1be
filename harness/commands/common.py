"""Options and output helpers every verb shares, so flags mean the same everywhere."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # every command imports this module: the device corpus only where used
    from harness.validate.devices import Mechanisms

F = TypeVar("F", bound=Callable[..., Any])

#: every verb's and the group's: ``-h`` is help however a command is reached (click keeps a
#: command's help option from the first context that asks for it)
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"],
                                    "max_content_width": 100}


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Machine-readable JSON on stdout and nothing else there.")(func)


def results_option(func: F) -> F:
    return click.option("--results", "results", metavar="DIR", default=None,
                        help="Results directory (default: $STRATBENCH_RESULTS, "
                             "else ./stratbench-results).")(func)


#: a stack's mechanisms (harness.core.layout.MECHANISMS), the same options wherever a
#: layout is simulated: of one layout (simulate), of every layout searched (recommend)
MECHANISM_OPTIONS = (
    click.option("--stack", "stack_name", default=None, metavar="NAME",
                 help="The mechanisms of a stack as a published run used them: nemo-24.09, "
                      "megatron-lm-2024, megatron-core-0.8, bigscience-megatron-deepspeed "
                      "(the device corpus's 'stacks'); the options below given beside it "
                      "override it one by one."),
    click.option("--context-comm", type=click.Choice(["ring", "all-gather"]), default="ring",
                 show_default=True,
                 help="How context ranks share keys and values: a ring passing K/V blocks "
                      "overlapped with the attention (Megatron-Core's p2p, ring attention), or "
                      "K/V all-gathered before it (Llama 3's)."),
    click.option("--p2p", type=click.Choice(["async", "blocking"]), default="async",
                 show_default=True,
                 help="Pipeline sends in the background (torch's isend, Megatron-Core) or waited "
                      "for by the sender (Megatron-LM 2021's point-to-point)."),
    click.option("--tp-overlap", is_flag=True,
                 help="Tensor-parallel collectives split to run under the GEMMs (Megatron's "
                      "--tp-comm-overlap); without it each waits between them."),
    click.option("--overlap-param-gather", "param_gather_overlap", is_flag=True,
                 help="With --distributed-optimizer: the updated parameters' all-gather runs "
                      "under the next step's first forward (Megatron's --overlap-param-gather)."),
    click.option("--ep-overlap", is_flag=True,
                 help="With --expert-parallel: each micro-batch's dispatch and combine "
                      "all-to-alls run under the adjacent micro-batch's compute (Megatron-Core's "
                      "combined 1F1B, --overlap-moe-expert-parallel-comm; with stages it needs "
                      "--schedule interleaved)."),
    click.option("--grad-reduce", type=click.Choice(["overlapped", "after-backward"]),
                 default="overlapped", show_default=True,
                 help="When the data-parallel gradient reduction runs: bucket by bucket during "
                      "the last backward (torch DDP, Megatron's overlap_grad_reduce) or after the "
                      "whole backward (Megatron-LM 2021's --DDP-impl local)."),
    click.option("--grad-accumulation", type=click.Choice(["fused", "fp32-copy", "half"]),
                 default="fused", show_default=True,
                 help="How half-precision micro-batches' gradients accumulate: into fp32 by the "
                      "weight-gradient GEMM (Megatron-LM's gradient-accumulation fusion), or "
                      "cast and added into an fp32 copy after each backward, the copy reduced "
                      "(DeepSpeed's bf16 optimizer), or into a buffer of the training "
                      "precision, reduced as it is (half: NeMo's distributed_fused_adam with "
                      "grad_sync_dtype bf16)."),
)


def mechanism_options(func: F) -> F:
    for option in reversed(MECHANISM_OPTIONS):
        func = option(func)
    return func


def stated_mechanisms(stack_name: str | None, capabilities: bool = True,
                      **options: Any) -> tuple[Mechanisms, str]:
    """The mechanisms a command runs with, and the named stack's description ('' without
    one): ``--stack``'s (a published run's), then each mechanism option given on the
    command line over it; without ``--stack``, every option as given or defaulted.
    ``capabilities``: also whether the stack splits along the sequence and recomputes
    selectively (recommend's; simulate states those per layout). InputError, one line, for
    an unknown stack (click has checked every option's value)."""
    from click.core import ParameterSource

    from harness.core.errors import InputError
    from harness.core.layout import MECHANISMS, stack_mechanisms

    if stack_name is None:
        return stack_mechanisms(**options), ""
    from harness.validate.devices import named_stack

    try:
        base, about = named_stack(stack_name)
    except ValueError as exc:
        raise InputError(f"--stack: {exc}") from None
    ctx = click.get_current_context()
    given = {name: value for name, value in options.items()
             if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE}
    merged = base | stack_mechanisms(**given)
    if not capabilities:
        merged = {k: v for k, v in merged.items() if k in MECHANISMS}
    return merged, about


def positive_int(name: str) -> click.IntRange:
    return click.IntRange(min=1)


def jsonable(data: Any) -> Any:
    """``data`` with NaN and infinities as null: JSON has no such numbers."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {str(k): jsonable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [jsonable(v) for v in data]
    return data


def print_json(data: Any) -> None:
    json.dump(jsonable(data), sys.stdout, indent=2, sort_keys=True, default=str,
              allow_nan=False)
    sys.stdout.write("\n")


def info(message: str) -> None:
    """Human-facing progress goes to stderr, keeping stdout for results."""
    click.echo(message, err=True)


class NotBuiltError(click.ClickException):
    """A verb of the CLI contract whose machinery has not landed yet: say so, run nothing."""

    exit_code = 1

    def __init__(self, verb: str, issue: str):
        super().__init__(f"'stratbench {verb}' is not built yet ({issue}); nothing was run")
