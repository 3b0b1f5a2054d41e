"""Training dynamics of every task: each reward's batch mean and its density per step, median and
interquartile band over seeds, one line per method: results/<scale>/figures/dynamics_<task>.{png,pdf}.

With several group sizes in a task's runs, the figure shows the group size most runs used (fig3 covers
the group-size sweep).
"""

from dara.analysis import figures
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.analysis.run_tables import density_column, density_label, reward_names
from dara.analysis.crossing import training_steps
from dara.analysis.tables import main_group_size


def draw_task(metrics, task: str, config: dict):
    group_size = main_group_size(metrics)
    # columns of other tasks' rewards are empty for this task's runs (the frame holds every task's runs)
    metrics = metrics[metrics["G"] == group_size].dropna(axis="columns", how="all")
    rewards = [name for name in reward_names(metrics) if name != "sum"]
    figure, axes = figures.new_figure(2 * len(rewards), width_per_panel=2.9)
    for k, reward in enumerate(rewards):
        mean_ax, density_ax = axes[2 * k], axes[2 * k + 1]
        figures.plot_seed_bands(mean_ax, metrics, f"reward/{reward}")
        figures.finish(mean_ax, "training step", f"{reward} reward (batch mean)", f"{reward}: reward", legend=False)
        density = density_column(metrics, reward)
        if density in metrics.columns:
            figures.plot_seed_bands(density_ax, training_steps(metrics), density)
            density_ax.set_ylim(-0.03, 1.03)
        figures.finish(density_ax, "training step", f"{density_label(density)} (fraction of active groups)",
                       f"{reward}: density", legend=False)
    figures.method_legend(figure, metrics["method"].unique(), loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.suptitle(f"{task}, G={group_size}: median and IQR over seeds{figures.scale_note(config)}")
    figure.tight_layout()
    return figure


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    if inputs.metrics is None:
        raise SystemExit("dynamics needs --metrics")
    for task in sorted(inputs.metrics["task"].unique()):
        figure = draw_task(inputs.task_metrics(task), task, inputs.config)
        save_figure(figure, inputs.figures / f"dynamics_{task}")
        figures.close(figure)


if __name__ == "__main__":
    main()
