"""Figure 1b: the format reward and its density per training step, median and IQR over seeds.

Paper: Qwen2.5-1.5B on ToolRL, 5 seeds. Tiny scale: the tool-calling task at its main group size, plus
an extra panel pair for the ACT critic task's format reward when its runs exist.
Output: results/<scale>/figures/fig1b.{png,pdf} and fig1b.csv (the plotted medians and quartiles).
"""

import pandas as pd

from dara.analysis import figures
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.analysis.run_tables import density_column, density_label
from dara.io import write_csv_atomic
from dara.analysis.summary import seed_band
from dara.analysis.crossing import training_steps
from dara.analysis.tables import main_group_size


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    reward = inputs.config["format_reward"]
    panels = [(task, metrics) for task in (inputs.config["tasks"]["tool"], inputs.config["tasks"]["critic"])
              if (metrics := inputs.task_metrics(task)) is not None]
    if not panels:
        raise SystemExit(f"fig1b needs runs of {inputs.config['tasks']['tool']}")
    figure, axes = figures.new_figure(2 * len(panels))
    plotted = []
    for k, (task, metrics) in enumerate(panels):
        group_size = main_group_size(metrics)
        metrics = training_steps(metrics[metrics["G"] == group_size])
        reward_ax, density_ax = axes[2 * k], axes[2 * k + 1]
        figures.plot_seed_bands(reward_ax, metrics, f"reward/{reward}")
        figures.finish(reward_ax, "training step", f"{reward} reward (batch mean)", f"{task} (G={group_size})",
                       legend=False)
        density = density_column(metrics, reward)
        figures.plot_seed_bands(density_ax, metrics, density)
        density_ax.set_ylim(-0.03, 1.03)
        figures.finish(density_ax, "training step", f"{reward} {density_label(density)}",
                       f"{task}: density of {reward}", legend=False)
        for column in (f"reward/{reward}", density):
            plotted.append(seed_band(metrics, column).assign(task=task, G=group_size, quantity=column))
    methods = {method for _, metrics in panels for method in metrics["method"].unique()}
    figures.method_legend(figure, methods, loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.suptitle(f"Format reward and its density{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig1b")
    write_csv_atomic(inputs.figures / "fig1b.csv", pd.concat(plotted, ignore_index=True))


if __name__ == "__main__":
    main()
