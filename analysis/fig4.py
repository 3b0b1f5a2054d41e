"""Figure 4: correctness and length reward dynamics of the math task, median and IQR over seeds, with the
length reward's density.

Paper: R1-Distill / Qwen3 on DeepScaleR, length = response <= 4,000 tokens. Tiny scale: the math-length
task (length = response within its token budget). Output: results/<scale>/figures/fig4.{png,pdf}, fig4.csv.
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
    task = inputs.config["tasks"]["math"]
    metrics = inputs.task_metrics(task)
    if metrics is None:
        raise SystemExit(f"fig4 needs runs of {task}")
    group_size = main_group_size(metrics)
    metrics = training_steps(metrics[metrics["G"] == group_size])
    density = density_column(metrics, "length")
    panels = [("reward/correctness", "fraction correct"),
              ("reward/length", "fraction within the length budget"),
              (density, f"length {density_label(density)}")]
    figure, axes = figures.new_figure(len(panels))
    for ax, (column, ylabel) in zip(axes, panels):
        figures.plot_seed_bands(ax, metrics, column)
        figures.finish(ax, "training step", ylabel, column, legend=ax is axes[-1])
    figure.suptitle(f"{task} (G={group_size}): reward dynamics, median and IQR{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig4")
    write_csv_atomic(inputs.figures / "fig4.csv",
              pd.concat([seed_band(metrics, column).assign(quantity=column) for column, _ in panels]))


if __name__ == "__main__":
    main()
