"""Figure 5: first stable crossing step of the length reward against stricter thresholds (the paper's rule:
a 10-step trailing mean that stays at or above the threshold for 20 more steps; at the smaller scales the window
and the confirmation span are fractions of the run length, analysis/config.yaml, and the figure says so).

Points: the study's median over seeds (Kaplan-Meier, unconfirmed seeds censored at their last step:
dara.analysis.crossing); bars: its interquartile range; a method whose median is unconfirmed is drawn as an open
marker at the last step. Tiny scale: the math-length task.
Output: results/<scale>/figures/fig5.{png,pdf} and fig5.csv (per run and threshold, with status).
"""

import numpy as np

from dara.analysis import figures, palette
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.io import write_csv_atomic
from dara.analysis.crossing import crossing_summary, stable_crossing_records, stable_crossing_span
from dara.analysis.tables import main_group_size


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task, stable = inputs.config["tasks"]["math"], inputs.config["stable_crossing"]
    metrics = inputs.task_metrics(task)
    if metrics is None:
        raise SystemExit(f"fig5 needs runs of {task}")
    group_size = main_group_size(metrics)
    metrics = metrics[metrics["G"] == group_size]
    run_length = int(metrics["step"].max())  # rows 1..N are the N training steps (row 0: the policy before any update)
    window, future = stable_crossing_span(stable, run_length)
    records = stable_crossing_records(metrics, stable["reward"], stable["thresholds"], window=window, future=future)
    records = records.assign(window=window, future=future, run_length=run_length)
    summary = crossing_summary(records)
    last_step = float(records["last_step"].max())
    figure, axes = figures.new_figure(1, width_per_panel=4.2, height=3.0)
    ax = axes[0]
    methods = palette.ordered(summary["method"].unique())
    offsets = np.linspace(-0.004, 0.004, len(methods)) if len(methods) > 1 else [0.0]
    for offset, method in zip(offsets, methods):
        rows = summary[summary["method"] == method].sort_values("threshold")
        x = rows["threshold"].to_numpy(float) + offset
        median = rows["km_median"].to_numpy(float)
        confirmed = np.isfinite(median)
        low = np.where(np.isfinite(rows["km_q25"]), rows["km_q25"], last_step)
        high = np.where(np.isfinite(rows["km_q75"]), rows["km_q75"], last_step)
        y = np.where(confirmed, median, last_step)
        ax.errorbar(x, y, yerr=[np.maximum(y - low, 0), np.maximum(high - y, 0)], color=palette.color(method),
                    lw=1.2, capsize=2, ls="-", marker="none", label=palette.label(method))
        ax.plot(x[confirmed], y[confirmed], palette.marker(method), color=palette.color(method), ms=5)
        ax.plot(x[~confirmed], y[~confirmed], palette.marker(method), color=palette.color(method), ms=5, mfc="none")
    ax.axhline(last_step, color="grey", lw=0.6, ls=":")
    ax.annotate(f"last step ({last_step:g})", (ax.get_xlim()[0], last_step), xytext=(2, 2), textcoords="offset points",
                fontsize=7, color="grey")
    if "window_fraction" in stable or "future_fraction" in stable:
        span = (f"window {window}, confirmed over {future} steps\n(scaled to the {run_length}-step runs: "
                f"{stable.get('window_fraction', window / run_length):.0%} and "
                f"{stable.get('future_fraction', future / run_length):.0%} of them)")
    else:
        span = f"window {window}, confirmed over {future} steps"
    figures.finish(ax, f"{stable['reward']} reward threshold (fraction of responses)",
                   "first stable crossing step\n(Kaplan-Meier median, IQR)", f"{task} (G={group_size}), {span}")
    figure.suptitle(f"Stricter length thresholds; open: not confirmed by the last step{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig5")
    figures.close(figure)
    write_csv_atomic(inputs.figures / "fig5.csv", records)


if __name__ == "__main__":
    main()
