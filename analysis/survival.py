"""Beyond the paper: time to format 0.8 as survival analysis.

A run that never reaches the threshold is censored at its last step, not dropped. Left: Kaplan-Meier
curves of the fraction of seeds still below the threshold, per method, with the log-rank test of each
DARA variant against GDPO. Right: the paper's statistic, the median over the seeds that crossed
(never-crossing seeds dropped), with every seed's step shown. Tool-calling task at its main group size.
Output: results/<scale>/figures/survival.{png,pdf}, results/<scale>/tables/survival.csv.
"""

import numpy as np
import pandas as pd

from dara.analysis import figures, palette
from dara.analysis.cli import parse_inputs
from dara.analysis.io import save_figure, write_csv
from dara.analysis.survival import kaplan_meier, logrank_test
from dara.analysis.tables import crossing_records, main_group_size, survival_durations


def survival_table(durations: pd.DataFrame, baseline: str = "gdpo") -> pd.DataFrame:
    rows = []
    base = durations[durations["method"] == baseline]
    for method in palette.ordered(durations["method"].unique()):
        runs = durations[durations["method"] == method]
        km = kaplan_meier(runs["duration"], runs["observed"])
        crossed = runs.loc[runs["observed"], "duration"]
        row = {"method": method, "n_runs": len(runs), "n_crossed": int(runs["observed"].sum()),
               "km_median": km.median, "median_of_crossed": float(crossed.median()) if len(crossed) else np.nan,
               "logrank_vs": baseline, "logrank_statistic": np.nan, "logrank_p": np.nan}
        if method != baseline and not base.empty:
            test = logrank_test(runs["duration"], runs["observed"], base["duration"], base["observed"])
            row.update(logrank_statistic=test.statistic, logrank_p=test.p_value)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task, reward = inputs.config["tasks"]["tool"], inputs.config["format_reward"]
    threshold = inputs.config["format_threshold"]
    metrics = inputs.task_metrics(task)
    if metrics is None:
        raise SystemExit(f"survival needs runs of {task}")
    group_size = main_group_size(metrics)
    records = crossing_records(metrics[(metrics["G"] == group_size) & (metrics["step"] >= 1)], {reward: [threshold]})
    durations = survival_durations(records)
    table = survival_table(durations)
    write_csv(inputs.tables / "survival.csv", table.assign(task=task, G=group_size, reward=reward, threshold=threshold))

    figure, (km_ax, paper_ax) = figures.new_figure(2, width_per_panel=3.6, height=2.9)
    figures.plot_kaplan_meier(km_ax, durations)
    figures.finish(km_ax, "training step", f"fraction of seeds with {reward} < {threshold}",
                   "Kaplan-Meier\n(never-crossing seeds censored, +)", legend=False)
    methods = palette.ordered(durations["method"].unique())
    for position, method in enumerate(methods):
        runs = durations[durations["method"] == method]
        jitter = np.linspace(-0.12, 0.12, len(runs)) if len(runs) > 1 else [0.0]
        crossed = runs["observed"].to_numpy(bool)
        paper_ax.plot(position + np.asarray(jitter)[crossed], runs["duration"][crossed], "o", ms=4,
                      color=palette.color(method))
        paper_ax.plot(position + np.asarray(jitter)[~crossed], runs["duration"][~crossed], "x", ms=5,
                      color=palette.color(method))
        if crossed.any():
            median = float(runs.loc[crossed, "duration"].median())
            paper_ax.plot([position - 0.3, position + 0.3], [median, median], color="black", lw=1.5)
    paper_ax.set_xticks(range(len(methods)), [palette.label(m) for m in methods], rotation=30, ha="right")
    figures.finish(paper_ax, "method", f"first step {reward} ≥ {threshold}",
                   "paper's statistic: median of crossed seeds\n(x: never crossed, dropped by it)", legend=False)
    figures.method_legend(figure, durations["method"].unique(), loc="center left", bbox_to_anchor=(1.0, 0.5))
    logrank = "; ".join(f"{palette.label(r.method)} vs GDPO p={r.logrank_p:.3g}" for r in table.itertuples()
                        if np.isfinite(r.logrank_p))
    figure.suptitle(f"{task} (G={group_size}): time to {reward} {threshold}\nlog-rank: {logrank or 'n/a'}"
                    f"{figures.scale_note(inputs.scale)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "survival")


if __name__ == "__main__":
    main()
