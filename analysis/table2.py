"""Table 2: two rewards vs three. Held-out format with (format, correctness) and with a third, length
reward, and the length reward's own score, per method at the final checkpoint, mean ± SD over seeds.

Paper: 1.5B, BFCL-v4 Average / Multi-Turn format and Average Length, step 100. Tiny scale: the tool task
(two rewards) against the three-reward tool task (think block of at most 4 words), methods of the
three-reward target. Output: results/<scale>/tables/table2.{csv,md}.
"""

import pandas as pd

from dara.analysis.cli import parse_inputs, unavailable_note
from dara.io import write_csv_atomic, write_text_atomic
from dara.analysis.tables import final_checkpoint, main_group_size, paper_metrics, pivot_mean_sd, summarise_metrics


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    two, three = inputs.config["tasks"]["tool"], inputs.config["tasks"]["tool_three"]
    format_metrics = {name: key for name, key in inputs.config["evaluation_metrics"]["tool"].items()
                      if name.endswith("_format")}
    length_metrics = inputs.config["evaluation_metrics"]["tool_length"]
    three_evals, two_evals = inputs.task_evaluations(three), inputs.task_evaluations(two)
    if three_evals is None:
        write_text_atomic(inputs.tables / "table2.md", unavailable_note("Table 2", inputs.scale, f"no evaluations of {three}"))
        write_csv_atomic(inputs.tables / "table2.csv", pd.DataFrame(columns=["n_rewards", "method", "metric", "mean", "sd", "n"]))
        return
    group_size = main_group_size(three_evals)
    three_evals = three_evals[three_evals["G"] == group_size]
    if two_evals is not None:
        two_evals = two_evals[two_evals["G"] == group_size]
    methods = set(three_evals["method"])
    parts = [summarise_metrics(final_checkpoint(paper_metrics(three_evals, {**format_metrics, **length_metrics})),
                               [*format_metrics, *length_metrics], by=["method"]).assign(n_rewards=3)]
    if two_evals is not None:
        two_final = final_checkpoint(paper_metrics(two_evals[two_evals["method"].isin(methods)], format_metrics))
        parts.append(summarise_metrics(two_final, list(format_metrics), by=["method"]).assign(n_rewards=2))
    summary = pd.concat(parts, ignore_index=True)
    write_csv_atomic(inputs.tables / "table2.csv", summary)
    summary = summary.assign(metric=[f"{m} ({n}R)" for m, n in zip(summary["metric"], summary["n_rewards"])])
    order = [f"{m} ({n}R)" for m in format_metrics for n in (2, 3)] + [f"{m} (3R)" for m in length_metrics]
    lines = [f"# Table 2 ({inputs.scale} scale): two rewards ({two}) vs three ({three}), G={group_size}, held-out %, "
             "final checkpoint", "",
             pivot_mean_sd(summary, ["method"], order).to_markdown(index=False), ""]
    if not inputs.config["paper_setting"]:
        lines += ["Tiny analogue: the third reward asks for a think block of at most 4 words (paper: 16); "
                  f"'average_length' is its held-out mean. No Multi-Turn split at this scale.", ""]
    write_text_atomic(inputs.tables / "table2.md", "\n".join(lines))


if __name__ == "__main__":
    main()
