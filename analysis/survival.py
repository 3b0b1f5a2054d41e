"""Beyond the paper: time to format 0.8 as survival analysis, with effect sizes.

A run that never reaches the threshold is censored at its last step, not dropped. Left: Kaplan-Meier
curves of the fraction of seeds still below the threshold, per method; where a curve falls to one half is the study's
median (``km_median``, as every table shows it: ``dara.analysis.crossing``). Middle: the paper's statistic, the
median over the seeds that crossed (never-crossing seeds dropped), with every seed's step shown. Right: each
method's median crossing step minus GDPO's with its two-level bootstrap 95 % interval (warm starts, then seeds
within them; never-crossing seeds at their last step + 1) and the p-value of the log-rank test against GDPO
stratified by warm start beside it (both as the claims compute them; raw p, not Holm-adjusted). Tool-calling task at its
main group size. Output: results/<scale>/figures/survival.{png,pdf}, results/<scale>/tables/survival.csv.
"""

import numpy as np
import pandas as pd

from dara.analysis import figures, palette
from dara.analysis.claims import warm_starts
from dara.analysis.cli import parse_inputs
from dara.analysis.crossing import (crossing_records, median_crossing_step, median_of_crossed, steps_never_after_last,
                                    survival_durations)
from dara.analysis.effect_size import bootstrap_median_difference
from dara.analysis.figures import save_figure
from dara.analysis.kaplan_meier import stratified_logrank_test
from dara.analysis.run_tables import WARM_START
from dara.analysis.tables import main_group_size
from dara.io import write_csv_atomic

BASELINE = "gdpo"


def survival_table(durations: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per method: runs, crossings, the study's (Kaplan-Meier) median, the paper's median of crossed seeds, and against
    ``baseline`` the median difference in steps with its two-level bootstrap 95 % interval (warm starts, then seeds)
    and the log-rank test stratified by warm start, over the warm starts both arms trained from."""
    rows = []
    durations = durations.assign(**{WARM_START: warm_starts(durations)})  # 0 for records without one
    base = durations[durations["method"] == baseline]
    for method in palette.ordered(durations["method"].unique()):
        runs = durations[durations["method"] == method]
        median = median_crossing_step(runs["step"], runs["last_step"])
        row = {"method": method, "n_runs": len(runs), "n_crossed": int(runs["observed"].sum()),
               "km_median": median if np.isfinite(median) else np.nan,
               "median_of_crossed": median_of_crossed(runs["step"]),
               "versus": baseline, "median_difference": np.nan, "ci_low": np.nan, "ci_high": np.nan,
               "logrank_statistic": np.nan, "logrank_p": np.nan}
        if method != baseline and not base.empty:
            # as the crossing claims (dara.analysis.claims.faster_crossing): within the warm starts both arms
            # trained from, a log-rank test stratified by warm start and a two-level bootstrap interval
            shared = np.intersect1d(runs[WARM_START], base[WARM_START])
            if not len(shared):
                rows.append(row)
                continue
            ours, theirs = (frame[frame[WARM_START].isin(shared)] for frame in (runs, base))
            effect = bootstrap_median_difference(steps_never_after_last(ours), steps_never_after_last(theirs),
                                                 ours[WARM_START], theirs[WARM_START])
            pair = pd.concat([ours, theirs])
            test = stratified_logrank_test(pair["duration"], pair["observed"], pair["method"] == method,
                                           pair[WARM_START])
            row.update(median_difference=effect.difference, ci_low=effect.low, ci_high=effect.high,
                       logrank_statistic=test.statistic, logrank_p=test.p_value)
        rows.append(row)
    return pd.DataFrame(rows)


def plot_effects(ax, table: pd.DataFrame, baseline: str = BASELINE) -> None:
    """One row per method compared with ``baseline``: its median difference, the 95 % interval as a bar,
    and the log-rank p-value written at the right edge of the panel."""
    compared = table[table["median_difference"].notna()].reset_index(drop=True)
    if compared.empty:  # an empty panel would read as "no difference"
        reason = "no runs" if baseline not in set(table["method"]) else "no other method"
        ax.text(0.5, 0.5, f"nothing to compare:\n{reason} of {palette.label(baseline)}\nat this group size",
                transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_yticks([])
        return
    positions = np.arange(len(compared))[::-1]  # first method on top
    for position, row in zip(positions, compared.itertuples()):
        ax.errorbar([row.median_difference], [position],
                    xerr=[[row.median_difference - row.ci_low], [row.ci_high - row.median_difference]],
                    color=palette.color(row.method), marker=palette.marker(row.method), ms=5, capsize=3, lw=1.5)
        p_text = "p n/a" if not np.isfinite(row.logrank_p) else f"p={row.logrank_p:.2g}"
        ax.annotate(p_text, (1.0, position), xycoords=("axes fraction", "data"), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_yticks(positions, [palette.label(m) for m in compared["method"]])
    ax.set_ylim(-0.7, len(compared) - 0.3)


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task, reward = inputs.config["tasks"]["tool"], inputs.config["format_reward"]
    threshold = inputs.config["format_threshold"]
    metrics = inputs.task_metrics(task)
    if metrics is None:
        raise SystemExit(f"survival needs runs of {task}")
    group_size = main_group_size(metrics)
    records = crossing_records(metrics[metrics["G"] == group_size], {reward: [threshold]})
    durations = survival_durations(records)
    table = survival_table(durations)
    write_csv_atomic(inputs.tables / "survival.csv", table.assign(task=task, G=group_size, reward=reward, threshold=threshold))

    figure, (km_ax, paper_ax, effect_ax) = figures.new_figure(3, width_per_panel=3.4, height=3.0)
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
            median = median_of_crossed(runs["step"])
            paper_ax.plot([position - 0.3, position + 0.3], [median, median], color="black", lw=1.5)
    paper_ax.set_xticks(range(len(methods)), [palette.label(m) for m in methods], rotation=30, ha="right")
    figures.finish(paper_ax, "method", f"first step {reward} ≥ {threshold}",
                   "paper's statistic: median of crossed seeds\n(x: never crossed, dropped by it)", legend=False)
    plot_effects(effect_ax, table)
    figures.finish(effect_ax, f"median step minus {palette.label(BASELINE)}'s (negative: faster)", "",
                   f"effect vs {palette.label(BASELINE)}: two-level bootstrap 95 % CI,\n"
                   "stratified log-rank p (raw) at right", legend=False)
    figures.method_legend(figure, methods, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(methods))
    figure.suptitle(f"{task} (G={group_size}): steps until {reward} first reaches {threshold}"
                    f"{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "survival")
    figures.close(figure)


if __name__ == "__main__":
    main()
