"""Did `recommend` rank an emulated cluster right before it was ever run?

Takes a results directory that holds runs on an emulated cluster, hides everything that
cluster's own runs recorded (its rows and its link probes), asks `recommend` for its
prediction, and puts each predicted step time beside the measured one. The question a user
asks of a prediction is the order, so the order is what is checked:

    python -m harness.recommend.ranking_check RESULTS_DIR netns:hosts=4,rate=250mbit mlp:M recsys:S

`--every` checks every strategy run on that cluster, the one-device baselines included, so
that the winner it names may be "do not distribute"; ranks are by throughput (at one replica
count the same order as step time).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from harness.calibrate.workload import row_names

STRATEGIES = (("torch", "ddp"), ("torch", "parameter_server"), ("tf", "multi_worker_mirrored"))


def ranking_check(root: str, cluster: str, workloads: Sequence[str],
                  strategies: Sequence[tuple[str, str]] | None = STRATEGIES) -> pd.DataFrame:
    """One row per (workload, strategy) measured on ``cluster``: predicted and measured step
    time and throughput, the error, and both ranks (1 = most samples/s) among the strategies
    checked (None: every one run there)."""
    from harness.calibrate.links import probed_networks
    from harness.core.strategies import BASELINES
    from harness.recommend.recommender import StoredInputs, recommend
    from results.store import ResultsStore, load, load_table_safe

    store = ResultsStore(root)
    measured = load(root)
    before = measured[measured["cluster"] != cluster]
    networks = [n for n in probed_networks(store) if n.get("cluster") != cluster]
    fits = load_table_safe(root, "calibration")
    rows = []
    for workload in workloads:
        answer = recommend(before, workloads=[workload], targets=[cluster],
                           stored=StoredInputs(fits=fits, networks=tuple(networks)))
        sweep = answer.sweep_frame()
        ran = measured[(measured["cluster"] == cluster) & (measured["status"] == "ok")
                       & (row_names(measured) == workload)]
        chosen = strategies if strategies is not None else sorted(
            set(zip(ran["framework"], ran["strategy"], strict=True))
            | {(b.framework, b.name) for b in BASELINES if b.framework in set(ran["framework"])})
        here = measured[(measured["cluster"] == "local") & (measured["status"] == "ok")
                        & (row_names(measured) == workload) & (measured["replicas"] == 1)]
        for framework, strategy in chosen:
            got = ran[(ran["framework"] == framework) & (ran["strategy"] == strategy)]
            if got.empty:  # a baseline the cluster never ran: one host is this machine's
                got = here[(here["framework"] == framework) & (here["strategy"] == strategy)]
            if got.empty:
                continue
            actual = got.sort_values("run_id").iloc[-1]
            n = int(actual["replicas"])
            guess = sweep[(sweep["framework"] == framework) & (sweep["strategy"] == strategy)
                          & (sweep["replicas"] == n)]
            if guess.empty:
                continue
            rate = float(guess.iloc[0]["throughput_samples_s"])
            predicted = float(actual["global_batch"]) / rate
            rows.append({"workload": workload, "framework": framework, "strategy": strategy,
                         "replicas": n, "predicted_s": predicted,
                         "measured_s": float(actual["step_time_median_s"]),
                         "predicted_samples_s": rate,
                         "measured_samples_s": float(actual["throughput_samples_s"]),
                         "error": predicted / float(actual["step_time_median_s"]) - 1})
    table = pd.DataFrame(rows)
    if not table.empty:
        for which in ("predicted", "measured"):
            table[f"{which}_rank"] = (table.groupby("workload")[f"{which}_samples_s"]
                                      .rank(method="first", ascending=False).astype(int))
    return table


def winners(table: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """workload -> (the predicted fastest, the measured fastest), as framework/strategy."""
    out = {}
    for workload, group in table.groupby("workload", sort=False):
        first = [group[group[f"{w}_rank"] == 1].iloc[0] for w in ("predicted", "measured")]
        out[str(workload)] = tuple(f"{r['framework']}/{r['strategy']}" for r in first)
    return out  # type: ignore[return-value]


def format_check(table: pd.DataFrame) -> str:
    lines = [f"{'workload':<10}{'strategy':<28}{'predicted ms':>13}{'measured ms':>12}"
             f"{'error':>8}{'rank p/m':>10}"]
    for r in table.to_dict("records"):
        lines.append(f"{r['workload']:<10}{r['framework'] + '/' + r['strategy']:<28}"
                     f"{r['predicted_s'] * 1e3:>13.1f}{r['measured_s'] * 1e3:>12.1f}"
                     f"{r['error']:>+8.0%}{r['predicted_rank']:>6}/{r['measured_rank']}")
    best = winners(table)
    for workload, group in table.groupby("workload", sort=False):
        same = (group["predicted_rank"] == group["measured_rank"]).all()
        predicted, measured = best[str(workload)]
        lines.append(f"{workload}: predicted order "
                     f"{'matches' if same else 'DIFFERS from'} the measured one; winner "
                     f"{predicted}" + (" as measured" if predicted == measured
                                       else f", measured {measured}"))
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--every"]
    if len(args) < 3:
        sys.exit(__doc__)
    print(format_check(ranking_check(args[0], args[1], args[2:],
                                     None if "--every" in sys.argv else STRATEGIES)))
