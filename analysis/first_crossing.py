"""First step each reward reaches its threshold, per run: results/<scale>/tables/first_crossing.{csv,md}.

CSV: task, method, G, seed, reward, threshold, step (empty when never crossed), last_step.
Markdown: the study's median and quartiles over seeds per task, method, G, reward and threshold (Kaplan-Meier,
dara.analysis.crossing.crossing_summary); a run that never crosses is censored at its last step (never dropped).
"""

from dara.analysis.cli import parse_inputs
from dara.io import write_csv_atomic, write_text_atomic
from dara.analysis.crossing import crossing_records, crossing_summary


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    if inputs.metrics is None:
        raise SystemExit("first_crossing needs --metrics")
    parts = []
    for task, thresholds in inputs.config["crossing_thresholds"].items():
        metrics = inputs.task_metrics(task)
        if metrics is not None:
            parts.append(crossing_records(metrics, thresholds))
    if not parts:
        raise SystemExit(f"no runs of the configured tasks {list(inputs.config['crossing_thresholds'])}")
    import pandas as pd

    records = pd.concat(parts, ignore_index=True)
    write_csv_atomic(inputs.tables / "first_crossing.csv", records)
    summary = crossing_summary(records)
    text = [
        f"# First step each training reward reaches its threshold ({inputs.scale} scale)",
        "",
        "Unsmoothed per-step batch mean of the reward (the paper's tool-calling rule), training steps from 1.",
        "`km_median`, `km_q25`, `km_q75`: median steps to cross (Kaplan-Meier) and its quartiles over seeds, the first",
        "step by which half, a quarter, three quarters of the seeds crossed, never-crossing seeds censored at their",
        "last step (NaN = not reached by that share of the seeds); `min`/`max`: over the seeds that crossed; `steps`:",
        "every seed's step in seed order.",
        "",
        summary.to_markdown(index=False, floatfmt="g"),
        "",
    ]
    write_text_atomic(inputs.tables / "first_crossing.md", "\n".join(text))


if __name__ == "__main__":
    main()
