"""Figure 6: checkpoint-wise held-out math: macro pass@1 and % of responses over the length budget, mean ±
SD over seeds at every evaluated checkpoint.

Paper: five benchmarks, 16 samples, % of responses over 4,000 tokens. Tiny scale: the math-length task's
held-out problems, % over its token budget. Output: results/<scale>/figures/fig6.{png,pdf} and fig6.csv.
"""

from dara.analysis import figures
from dara.analysis.cli import parse_inputs
from dara.analysis.figures import save_figure
from dara.io import write_csv_atomic
from dara.analysis.tables import main_group_size, paper_metrics


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task = inputs.config["tasks"]["math"]
    evaluations = inputs.task_evaluations(task)
    if evaluations is None:
        raise SystemExit(f"fig6 needs evaluations of {task}")
    mapping = {name: key for name, key in inputs.config["evaluation_metrics"]["math"].items()
               if name in ("macro_pass1", "exceed")}
    scores = paper_metrics(evaluations, mapping)
    group_size = main_group_size(scores)
    scores = scores[scores["G"] == group_size]
    labels = {"macro_pass1": "held-out pass@1 (%)", "exceed": "over the length budget (%)"}
    titles = {"macro_pass1": "macro pass@1", "exceed": "responses over the length budget"}
    figure, axes = figures.new_figure(2)
    for ax, name in zip(axes, ("macro_pass1", "exceed")):
        figures.plot_checkpoint_means(ax, scores, name)
        figures.finish(ax, "training step (checkpoint)", labels[name], titles[name], legend=ax is axes[-1])
    figure.suptitle(f"{task} (G={group_size}): checkpoint-wise held-out math, mean ± SD over seeds"
                    f"{figures.scale_note(inputs.config)}")
    figure.tight_layout()
    save_figure(figure, inputs.figures / "fig6")
    write_csv_atomic(inputs.figures / "fig6.csv", scores)


if __name__ == "__main__":
    main()
