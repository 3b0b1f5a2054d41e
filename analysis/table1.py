"""Table 1: held-out tool-calling accuracy and format per method at the final checkpoint, mean ± SD over
seeds; every run, then the runs the paper's retention rule keeps (final validation format >= 0.8). Every tool
metric of analysis/config.yaml's evaluation_metrics.tool is a column (at tiny scale: accuracy over the tool items,
format, accuracy with irrelevance, irrelevance accuracy), but one that no evaluation measured (named below it).

Paper: BFCL-v4 Live / Non-Live / Multi-Turn / Average, Qwen2.5-1.5B and 3B, step 100. Tiny scale: the
tool-calling task's held-out BFCL-style cases (one pool, no Live / Non-Live / Multi-Turn split, one
model size). Output: results/<scale>/tables/table1.{csv,md}, and tables/table1_runs.csv: one row per run at its
final checkpoint and one per run at step 0 (method "base"), with its warm start where the runs have one, metrics
in percent: the values the "not lower" claims test (dara.analysis.claims.not_lower).
"""

import pandas as pd

from dara.analysis.claims import per_run_values
from dara.analysis.cli import parse_inputs, unavailable_note
from dara.io import write_csv_atomic, write_text_atomic
from dara.analysis.run_tables import RUN_KEYS
from dara.analysis.summary import retain_runs
from dara.analysis.tables import final_checkpoint, main_group_size, paper_metrics, pivot_mean_sd, summarise_metrics

PAPER_COLUMNS = ["live_accuracy", "live_format", "non_live_accuracy", "non_live_format", "multi_turn_accuracy",
                 "multi_turn_format", "average_accuracy", "average_format"]


def summarise_model(evaluations, mapping, retention_metric, retention_threshold):
    """Step-0, all-runs and retained-runs summaries of one model's evaluations at its main group size, its per-run
    values (final checkpoint and step 0), and the metrics no evaluation has a value of (left out of the summaries;
    a metric some evaluations lack still raises)."""
    scores = paper_metrics(evaluations, mapping)
    group_size = main_group_size(scores)  # the group-size sweep is fig3's; the table is at the main G
    scores = scores[scores["G"] == group_size]
    # NaN in every evaluation: not measurable on these held-out items (dara.evaluation.tiny_heldout writes
    # bfcl_accuracy_irrelevance NaN when they hold no no-tool case)
    unmeasured = [name for name in mapping if scores[name].isna().all()]
    mapping = {name: key for name, key in mapping.items() if name not in unmeasured}
    final = final_checkpoint(scores)
    base = scores[scores["step"] == 0].assign(method="base")
    retention = retain_runs(final, retention_metric, retention_threshold)
    parts = []
    if not base.empty:
        parts.append(summarise_metrics(base, list(mapping), by=["method"]).assign(cohort="step 0 (base policy)", step=0))
    final_step = int(final["step"].max())
    parts.append(summarise_metrics(final, list(mapping), by=["method"]).assign(cohort="all runs", step=final_step))
    if not retention.retained.empty:
        parts.append(summarise_metrics(retention.retained, list(mapping), by=["method"])
                     .assign(cohort="retained", step=final_step))
    runs = per_run_values(scores, list(mapping))
    return pd.concat(parts, ignore_index=True).assign(G=group_size), runs, retention, unmeasured


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task = inputs.config["tasks"]["tool"]
    by_model = inputs.evaluations_by_model(task)
    columns = ["model", "cohort", "method", "G", "step", "metric", "mean", "sd", "n", "seeds"]
    if not by_model:
        write_text_atomic(inputs.tables / "table1.md", unavailable_note("Table 1", inputs.scale, f"no evaluations of {task}"))
        write_csv_atomic(inputs.tables / "table1.csv", pd.DataFrame(columns=columns))
        write_csv_atomic(inputs.tables / "table1_runs.csv", pd.DataFrame(columns=["model", *RUN_KEYS, "step"]))
        return
    mapping = inputs.config["evaluation_metrics"]["tool"]
    rule = inputs.config["retention"]
    missing = [column for column in PAPER_COLUMNS if column not in mapping]
    lines = [f"# Table 1 ({inputs.scale} scale): {task}, held-out accuracy and format (%), final checkpoint", ""]
    if not inputs.config["paper_setting"]:
        lines += ["Tiny analogue of the paper's BFCL-v4 table: one model size (the task's warm-start policies). "
                  f"Not measured at this scale: {', '.join(missing) or 'none'} (the tiny evaluation has no "
                  "Live / Non-Live / Multi-Turn split).", ""]
    summaries, per_run = [], []
    for model, evaluations in by_model.items():
        summary, runs, retention, unmeasured = summarise_model(evaluations, mapping, rule["metric"], rule["threshold"])
        summaries.append(summary.assign(model=model or inputs.scale))
        per_run.append(runs.assign(model=model or inputs.scale))
        lines += [f"## {model or f'{inputs.scale}-scale policy'} (G={int(summary['G'].iloc[0])})", ""]
        if unmeasured:
            lines += [f"Not measured on these held-out items: {', '.join(unmeasured)} (no evaluation has a value; "
                      "irrelevance accuracy needs held-out items that call no tool).", ""]
        for cohort, rows in summary.groupby("cohort", sort=False):
            lines += [f"### {cohort} (step {int(rows['step'].iloc[0])})", "",
                      pivot_mean_sd(rows, ["method"], list(mapping)).to_markdown(index=False), ""]
        lines += [f"Retention rule: {retention.summary()}; the paper keeps a run when its step-100 validation "
                  f"Format is >= 0.8.", ""]
        if not retention.dropped.empty:
            lines += [retention.dropped[["method", "G", "seed", "exclusion_reason"]].to_markdown(index=False), ""]
    write_csv_atomic(inputs.tables / "table1.csv", pd.concat(summaries, ignore_index=True)[columns])
    runs = pd.concat(per_run, ignore_index=True)
    write_csv_atomic(inputs.tables / "table1_runs.csv", runs[["model", *(c for c in runs.columns if c != "model")]])
    write_text_atomic(inputs.tables / "table1.md", "\n".join(lines))


if __name__ == "__main__":
    main()
