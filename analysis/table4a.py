"""Table 4a: static vs dynamic (density) weights on the math task. Held-out accuracy, % of responses over
the length budget (exceed) and joint (correct and within budget), mean ± SD over seeds, at the checkpoint
evaluated checkpoint nearest ``static_vs_dynamic.checkpoint_fraction`` of the run (analysis/config.yaml; 1: the
final one).

Paper: R1-Distill-1.5B, Static-Asym/Sym with w = 5 on the length reward vs DARA-Asym/Sym. Tiny scale: the
math-length task with static weights [1, 5]. A ``base`` row (the step-0 policy: every run's step-0 evaluation,
when there is one) stands first, as in Table 1; the "not lower" claims compare both arms with it.
Output: results/<scale>/tables/table4a.{csv,md}, and tables/table4a_runs.csv: one row per run at that
checkpoint and one per run at step 0 (method "base"), with its warm start where the runs have one, metrics in
percent: the values the "not lower" claims test (dara.analysis.claims.not_lower).
"""

import pandas as pd

from dara.analysis.claims import per_run_values
from dara.analysis.cli import parse_inputs, unavailable_note
from dara.io import write_csv_atomic, write_text_atomic
from dara.analysis.run_tables import RUN_KEYS
from dara.analysis.tables import final_checkpoint, main_group_size, paper_metrics, pivot_mean_sd, summarise_metrics

METHODS = ("static_sym", "static_asym", "dara_sym", "dara_asym")


def compared_step(scores: pd.DataFrame, fraction: float) -> int:
    """The evaluated step the table reads: the checkpoint nearest ``fraction`` of the runs' last evaluated step (a
    tie goes to the later one), never step 0 (the base)."""
    last = int(scores["step"].max())
    evaluated = sorted(set(scores.loc[scores["step"] > 0, "step"].astype(int)))
    return min(evaluated, key=lambda step: (abs(step - fraction * last), -step))


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    task = inputs.config["tasks"]["math"]
    evaluations = inputs.task_evaluations(task)
    if evaluations is not None:
        evaluations = evaluations[evaluations["method"].isin(METHODS)]
    if evaluations is None or evaluations.empty:
        write_text_atomic(inputs.tables / "table4a.md", unavailable_note("Table 4a", inputs.scale,
                                                                  f"no evaluations of {task} with {METHODS}"))
        write_csv_atomic(inputs.tables / "table4a.csv", pd.DataFrame(columns=["method", "metric", "mean", "sd", "n"]))
        write_csv_atomic(inputs.tables / "table4a_runs.csv", pd.DataFrame(columns=[*RUN_KEYS, "step"]))
        return
    mapping = inputs.config["evaluation_metrics"]["math"]
    group_size = main_group_size(evaluations)
    evaluations = evaluations[evaluations["G"] == group_size]
    scores = paper_metrics(evaluations, mapping)
    step = compared_step(scores, inputs.config["static_vs_dynamic"]["checkpoint_fraction"])
    summary = summarise_metrics(final_checkpoint(scores, step), list(mapping), by=["method"])
    base = scores[scores["step"] == 0].assign(method="base")
    if not base.empty:
        summary = pd.concat([summarise_metrics(base, list(mapping), by=["method"]), summary], ignore_index=True)
    write_csv_atomic(inputs.tables / "table4a.csv", summary)
    write_csv_atomic(inputs.tables / "table4a_runs.csv", per_run_values(scores, list(mapping), step))
    absent = [method for method in METHODS if method not in set(summary["method"])]
    base_note = ("`base` = the step-0 policy (every run's step-0 evaluation)." if not base.empty else
                 "No step-0 evaluations: no base row.")
    last = int(scores["step"].max())
    where = "final checkpoint" if step == last else f"checkpoint at step {step} of {last}"
    lines = [f"# Table 4a ({inputs.scale} scale): static vs dynamic weights, {task}, G={group_size}, held-out %, {where}", "",
             pivot_mean_sd(summary, ["method"], list(mapping)).to_markdown(index=False), "", base_note, ""]
    if absent:
        lines += [f"No runs at this scale for: {', '.join(absent)}.", ""]
    write_text_atomic(inputs.tables / "table4a.md", "\n".join(lines))


if __name__ == "__main__":
    main()
