"""First step each reward reaches its threshold, per run: results/<scale>/tables/first_crossing.{csv,md}.

CSV: task, method, G, seed, reward, threshold, step (empty when never crossed), last_step.
Markdown: median and spread over seeds per task, method, G, reward and threshold; a run that never
crosses counts as later than any step (never dropped).
"""

from dara.analysis.cli import parse_inputs
from dara.io import write_csv_atomic, write_text_atomic
from dara.analysis.tables import crossing_records, crossing_summary


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
        "Unsmoothed per-step batch mean of the reward (the paper's tool-calling rule). `median`, `q25`, `q75`: over",
        "seeds, with never-crossing seeds counted as later than any step (NaN = not reached by half the seeds);",
        "`min`/`max`: over the seeds that crossed; `steps`: every seed's step in seed order.",
        "",
        summary.to_markdown(index=False, floatfmt="g"),
        "",
    ]
    write_text_atomic(inputs.tables / "first_crossing.md", "\n".join(text))


if __name__ == "__main__":
    main()
