"""Did `recommend` rank an emulated cluster right before it was ever run?

Takes a results directory that holds runs on an emulated cluster, hides everything that
cluster's own runs recorded (its rows and its link probes), asks `recommend` for its
prediction, and puts each predicted step time beside the measured one. The question a user
asks of a prediction is the order, so the order is what is checked:

    python -m harness.recommend.ranking_check RESULTS_DIR netns:hosts=4,rate=250mbit mlp:M recsys:S
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from harness.calibrate.workload import row_names

STRATEGIES = (("torch", "ddp"), ("torch", "parameter_server"), ("tf", "multi_worker_mirrored"))


def ranking_check(root: str, cluster: str, workloads: Sequence[str],
                  strategies: Sequence[tuple[str, str]] = STRATEGIES) -> pd.DataFrame:
    """One row per (workload, strategy) measured on ``cluster``: predicted and measured step
    time, the error, and both ranks (1 = fastest) among the strategies checked."""
    from harness.calibrate.links import probed_networks
    from harness.recommend.recommender import recommend
    from results.store import ResultsStore, load, load_table_safe

    store = ResultsStore(root)
    measured = load(root)
    before = measured[measured["cluster"] != cluster]
    networks = [n for n in probed_networks(store) if n.get("cluster") != cluster]
    fits = load_table_safe(root, "calibration")
    rows = []
    for workload in workloads:
        frame = recommend(before, workloads=[workload], targets=[cluster], fits=fits,
                          networks=networks)
        sweep = pd.DataFrame(frame.attrs["sweep"])
        ran = measured[(measured["cluster"] == cluster) & (measured["status"] == "ok")
                       & (row_names(measured) == workload)]
        for framework, strategy in strategies:
            got = ran[(ran["framework"] == framework) & (ran["strategy"] == strategy)]
            if got.empty:
                continue
            actual = got.sort_values("run_id").iloc[-1]
            n = int(actual["replicas"])
            guess = sweep[(sweep["framework"] == framework) & (sweep["strategy"] == strategy)
                          & (sweep["replicas"] == n)]
            if guess.empty:
                continue
            predicted = float(actual["global_batch"]) / float(
                guess.iloc[0]["throughput_samples_s"])
            rows.append({"workload": workload, "framework": framework, "strategy": strategy,
                         "replicas": n, "predicted_s": predicted,
                         "measured_s": float(actual["step_time_median_s"]),
                         "error": predicted / float(actual["step_time_median_s"]) - 1})
    table = pd.DataFrame(rows)
    if not table.empty:
        for column in ("predicted_s", "measured_s"):
            table[column.replace("_s", "_rank")] = (
                table.groupby("workload")[column].rank(method="first").astype(int))
    return table


def format_check(table: pd.DataFrame) -> str:
    lines = [f"{'workload':<10}{'strategy':<28}{'predicted ms':>13}{'measured ms':>12}"
             f"{'error':>8}{'rank p/m':>10}"]
    for r in table.to_dict("records"):
        lines.append(f"{r['workload']:<10}{r['framework'] + '/' + r['strategy']:<28}"
                     f"{r['predicted_s'] * 1e3:>13.1f}{r['measured_s'] * 1e3:>12.1f}"
                     f"{r['error']:>+8.0%}{r['predicted_rank']:>6}/{r['measured_rank']}")
    for workload, group in table.groupby("workload", sort=False):
        same = (group["predicted_rank"] == group["measured_rank"]).all()
        lines.append(f"{workload}: predicted order "
                     f"{'matches' if same else 'DIFFERS from'} the measured one")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    print(format_check(ranking_check(sys.argv[1], sys.argv[2], sys.argv[3:])))
