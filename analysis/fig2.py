"""Figure 2: checkpoint-wise held-out tool-calling average accuracy and format per method, mean ± SD over
seeds at every evaluated checkpoint.

Paper: BFCL-v4 Average accuracy and format, 1.5B, every 10 steps. Tiny scale: the tool task's held-out
BFCL-style cases. Output: results/<scale>/figures/fig2.{png,pdf} and fig2.csv (the plotted values per run).
"""

from dara.analysis import figures
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.io import write_csv_atomic
from dara.analysis.tables import main_group_size, paper_metrics


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task = inputs.config["tasks"]["tool"]
    evaluations = inputs.task_evaluations(task)
    if evaluations is None:
        raise SystemExit(f"fig2 needs evaluations of {task}")
    mapping = {name: key for name, key in inputs.config["evaluation_metrics"]["tool"].items()
               if name in ("average_accuracy", "average_format")}
    scores = paper_metrics(evaluations, mapping)
    group_size = main_group_size(scores)
    scores = scores[scores["G"] == group_size]
    figure, axes = figures.new_figure(2)
    for ax, name in zip(axes, ("average_accuracy", "average_format")):
        figures.plot_checkpoint_means(ax, scores, name)
        figures.finish(ax, "training step (checkpoint)", f"held-out {name.replace('_', ' ')} (%)", name,
                       legend=ax is axes[-1])
    figure.suptitle(f"{task} (G={group_size}): checkpoint-wise held-out scores, mean ± SD over seeds"
                    f"{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig2")
    write_csv_atomic(inputs.figures / "fig2.csv", scores)


if __name__ == "__main__":
    main()
