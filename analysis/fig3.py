"""Figure 3: format density across group sizes, with a marker at the median first step the format reward
reaches 0.8 (the study's median, Kaplan-Meier: dara.analysis.crossing; open marker at the last step when fewer than
half of the seeds reach it).

Paper: GRPO/GDPO/DARA x G 4/8/16/32, 3 seeds, median and IQR. Tiny scale: the tool-calling task's
group-size runs. Output: results/<scale>/figures/fig3.{png,pdf} and fig3.csv (crossing steps per run).
"""

import numpy as np

from dara.analysis import figures
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.analysis.run_tables import density_column, density_label
from dara.io import write_csv_atomic
from dara.analysis.summary import seed_band
from dara.analysis.crossing import crossing_records, training_steps


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task, reward = inputs.config["tasks"]["tool"], inputs.config["format_reward"]
    threshold = inputs.config["format_threshold"]
    metrics = inputs.task_metrics(task)
    if metrics is None:
        raise SystemExit(f"fig3 needs runs of {task}")
    metrics = training_steps(metrics)
    records = crossing_records(metrics, {reward: [threshold]})
    group_sizes = sorted(metrics["G"].unique())
    figure, axes = figures.new_figure(len(group_sizes), width_per_panel=2.8)
    for ax, group_size in zip(axes, group_sizes):
        runs = metrics[metrics["G"] == group_size]
        density = density_column(runs, reward)
        figures.plot_seed_bands(ax, runs, density)
        band = seed_band(runs, density).set_index(["method", "step"])["median"]

        def height(method, step, band=band):
            steps = band.loc[method].index.to_numpy()
            return float(band.loc[(method, steps[np.argmin(np.abs(steps - step))])])

        figures.mark_crossings(ax, records[records["G"] == group_size], height)
        ax.set_ylim(-0.03, 1.03)
        figures.finish(ax, "training step", f"{reward} {density_label(density)}", f"G = {group_size}", legend=False)
    figures.method_legend(figure, metrics["method"].unique(), loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.suptitle(f"{task}: density of {reward} across group sizes; markers: median step {reward} ≥ {threshold} "
                    f"(Kaplan-Meier; open: not reached){figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig3")
    write_csv_atomic(inputs.figures / "fig3.csv", records)


if __name__ == "__main__":
    main()
