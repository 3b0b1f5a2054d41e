"""Table 1: held-out tool-calling accuracy and format per method at the final checkpoint, mean ± SD over
seeds; every run, then the runs the paper's retention rule keeps (final validation format >= 0.8).

Paper: BFCL-v4 Live / Non-Live / Multi-Turn / Average, Qwen2.5-1.5B and 3B, step 100. Tiny scale: the
tool-calling task's held-out BFCL-style cases (one pool, no Live / Non-Live / Multi-Turn split, one
model size). Output: results/<scale>/tables/table1.{csv,md}.
"""

import pandas as pd

from dara.analysis.cli import parse_inputs, unavailable_note
from dara.analysis.io import write_csv, write_text
from dara.analysis.summary import retain_runs
from dara.analysis.tables import final_checkpoint, main_group_size, paper_metrics, pivot_mean_sd, summarise_metrics

PAPER_COLUMNS = ["live_accuracy", "live_format", "non_live_accuracy", "non_live_format", "multi_turn_accuracy",
                 "multi_turn_format", "average_accuracy", "average_format"]


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task = inputs.config["tasks"]["tool"]
    evaluations = inputs.task_evaluations(task)
    if evaluations is None:
        write_text(inputs.tables / "table1.md", unavailable_note("Table 1", inputs.scale, f"no evaluations of {task}"))
        write_csv(inputs.tables / "table1.csv", pd.DataFrame(columns=["cohort", "method", "metric", "mean", "sd", "n", "seeds"]))
        return
    mapping = inputs.config["evaluation_metrics"]["tool"]
    scores = paper_metrics(evaluations, mapping)
    group_size = main_group_size(scores)  # the group-size sweep is fig3's; the table is at the main G
    scores = scores[scores["G"] == group_size]
    final = final_checkpoint(scores)
    base = scores[scores["step"] == 0].assign(method="base")
    retention = retain_runs(final, inputs.config["retention"]["metric"], inputs.config["retention"]["threshold"])
    parts = [summarise_metrics(base, list(mapping), by=["method"]).assign(cohort="step 0 (warm start)")]
    parts.append(summarise_metrics(final, list(mapping), by=["method"]).assign(cohort="all runs"))
    if not retention.retained.empty:
        parts.append(summarise_metrics(retention.retained, list(mapping), by=["method"]).assign(cohort="retained"))
    summary = pd.concat(parts, ignore_index=True)
    summary["step"] = [0 if cohort.startswith("step 0") else int(final["step"].max()) for cohort in summary["cohort"]]
    write_csv(inputs.tables / "table1.csv", summary)

    missing = [column for column in PAPER_COLUMNS if column not in mapping]
    lines = [f"# Table 1 ({inputs.scale} scale): {task}, G={group_size}, held-out accuracy and format (%), "
             "final checkpoint", ""]
    if inputs.scale != "paper":
        lines += [f"Tiny analogue of the paper's BFCL-v4 table: one model size (the task's warm-start policy), "
                  f"step {int(final['step'].max())}. Not measured at this scale: "
                  f"{', '.join(missing) or 'none'} (the tiny evaluation has no Live / Non-Live / Multi-Turn split).", ""]
    for cohort, rows in summary.groupby("cohort", sort=False):
        lines += [f"## {cohort}", "", pivot_mean_sd(rows, ["method"], list(mapping)).to_markdown(index=False), ""]
    lines += ["## Retention rule", "",
              f"{retention.summary()}; the paper keeps a run when its step-100 validation Format is >= 0.8.", ""]
    if not retention.dropped.empty:
        dropped = retention.dropped[["method", "G", "seed", "exclusion_reason"]]
        lines += [dropped.to_markdown(index=False), ""]
    write_text(inputs.tables / "table1.md", "\n".join(lines))


if __name__ == "__main__":
    main()
