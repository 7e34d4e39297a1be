"""This machine's emulated hosts predicted for a cluster never run: the step rule
(harness.predict.step) with everything it needs read from the results directory, the way
`validate` scores runs; `recommend` ranks these rows and `simulate --topology netns:...`
prints them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from harness.calibrate.links import MeasuredLinks
from harness.core.strategies import Strategy
from workloads.spec import WorkloadSpec

if TYPE_CHECKING:
    from harness.predict.step import PredictedRow


class Calibrated(Protocol):
    """What a prediction of emulated hosts reads: runs, the loopback fits, the swept points
    (link shares) and a cache of each strategy's runtime cost."""

    measured: pd.DataFrame
    fits: pd.DataFrame
    sweeps: pd.DataFrame
    runtimes: dict[tuple[str, str, str], float]


@dataclass
class Calibration:
    measured: pd.DataFrame
    fits: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweeps: pd.DataFrame = field(default_factory=pd.DataFrame)
    runtimes: dict[tuple[str, str, str], float] = field(default_factory=dict)


def emulated_strategies(facts: WorkloadSpec, framework: str | None = None
                        ) -> list[Strategy]:
    """The strategy records an emulated cluster runs for ``facts``'s workload (of
    ``framework``, if given): every emulated one, embedding sharding only where there are
    embedding tables to shard."""
    from harness.core.strategies import EMULATED

    return [s for s in EMULATED if (framework is None or s.framework == framework)
            and (s.exchange != "embedding" or facts.embedding_row_bytes > 0)]


def predict_emulated(ctx: Calibrated, facts: WorkloadSpec, links: MeasuredLinks,
                     framework: str, strategy: str, hosts: int, compute: Any, cluster: str
                     ) -> PredictedRow | None:
    """The simulator's row for ``framework/strategy`` on ``hosts`` emulated hosts of this
    machine (one replica each, as harness/runners lay them out): ``links`` as probed (the
    share of them the library's collectives reach where it was swept on ``cluster``'s
    links), cores shared as they would be, the library's and the runtime's own costs as
    measured here (harness.predict.step); None where the simulator has no model for it."""
    from harness.calibrate.link_share import step_shares
    from harness.calibrate.links import placed
    from harness.core.case import PS_SHARDS
    from harness.predict.step import (
        machine_cores,
        predict_step,
        runner_ps_layout,
        runtime_overhead,
        simulated_as,
        uses_collectives,
    )

    model = simulated_as(framework, strategy) or ""
    ps = (runner_ps_layout(hosts, hosts, PS_SHARDS)
          if model.startswith("parameter_server") else None)
    key = (framework, strategy, facts.name)
    if key not in ctx.runtimes:
        ctx.runtimes[key] = runtime_overhead(ctx.measured, ctx.fits, framework, strategy,
                                             facts, machine_cores())
    links = placed(links, hosts)
    profile = facts.at(batch=compute.batch)
    share, exchange = step_shares(ctx.sweeps, ctx.fits, framework, strategy, links, cluster,
                                  hosts, profile.sparse_rows_bytes(), profile.dense_bytes())
    row = predict_step(framework, strategy, profile, links, hosts,
                       compute.worker(framework, strategy), fits=ctx.fits,
                       cores=machine_cores(), ps=ps, runtime_s=ctx.runtimes[key],
                       link_share=share.efficiency if share else 1.0,
                       exchange_share=exchange.efficiency if exchange else None)
    if row is None:
        return None
    source = ("probed rate (parameter servers)" if not uses_collectives(framework, strategy)
              else f"{share.cluster}, {share.world} ranks" if share
              else "probed rate (no all-reduce swept on such links)")
    if exchange is not None:
        source += f"; all-to-all {exchange.efficiency:.2f} at {exchange.nbytes / 2**20:g} MiB"
    return replace(row, link_share_source=source)
