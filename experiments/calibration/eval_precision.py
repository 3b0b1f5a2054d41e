"""Read the drift control again with more samples per held-out item: is criterion 3 about the control or about the
evaluation that reads it? (docs/calibration/eval-precision/criteria.md, written before the first run.)

    python experiments/calibration/eval_precision.py --reading <eval tree of the pipeline's readings> \
        --scratch /tmp/eval16 --samples 16 --out docs/calibration/eval-precision

The last checkpoint of each run of ``--methods`` on ``--tasks`` (their main G, the experiment's runs in
``--results``) is evaluated again with ``--samples`` per item, the pipeline's items, temperature, top-p and seed rule,
into ``--scratch`` (a results tree of its own whose ``runs`` and ``policies`` point at the pipeline's; a rerun
resumes). Beside the pipeline's own reading of the same checkpoint (under ``--reading``, an ``eval`` tree laid out as
the pipeline's), each run's final minus its warm start's base, then criterion 3 as docs/tiny_scale.md reads it: each
warm start's median over its runs, then the median over warm starts. Writes ``readings.csv`` (one row per run) and
``summary.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.evaluation.tiny_heldout import evaluate_runs
from dara.experiments import load_experiment
from dara.io import write_csv_atomic, write_text_atomic
from dara.runs import run_matrix

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("toolcall", "toolcall_dense", "toolcall3", "math_length")  # the tasks whose control has headroom to drift
BOUND = 5.0  # criterion 3: within 5 points of the base


def _reading(path: Path, samples: int | None = None) -> dict:
    record = json.loads(path.read_text())
    if samples is not None and record["samples_per_item"] != samples:
        raise ValueError(f"{path} holds {record['samples_per_item']} samples per item, expected {samples}")
    return record


def criterion_rows(frame: pd.DataFrame, bound: float = BOUND) -> list[str]:
    """One markdown row per task and method of ``frame`` (readings.csv's columns): for the pipeline's reading and the
    new one, each warm start's median over its runs of final minus base, the median over warm starts, and criterion
    3's verdict on it ("met" within ``bound`` points either way)."""
    rows = []
    for (task, method), group in frame.groupby(["task", "method"], sort=False):
        cells = []
        for column in ("pipeline_minus_base", "minus_base"):
            per_start = group.groupby("warm_start")[column].median()
            median = statistics.median(per_start)
            cells += [" ".join(f"{value:+.1f}" for value in per_start), f"{median:+.2f}",
                      "met" if abs(median) <= bound else "missed"]
        samples = "/".join(str(n) for n in sorted(group["pipeline_samples"].unique()))
        rows.append(f"| {task} | {method} | {samples} | " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="tiny")
    parser.add_argument("--results", type=Path, default=Path("results"), help="the pipeline's results folder")
    parser.add_argument("--reading", type=Path, required=True,
                        help="an eval tree (<scale>/eval/...) holding the pipeline's readings to compare with")
    parser.add_argument("--scratch", type=Path, required=True, help="where the new evaluations go")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--methods", nargs="+", default=["shuffled"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    experiment = load_experiment(args.experiment)
    scale, evaluation = experiment["scale"], experiment["evaluation"]
    # each task's held-out correctness, the metric the regime table reads ("metrics/<key>" in the evaluation files)
    correctness = load_analysis_config(ROOT / "analysis" / "config.yaml", scale)["heldout_correctness"]
    unknown = sorted(set(args.tasks) - set(correctness))
    if unknown:
        parser.error(f"analysis/config.yaml names no held-out correctness metric for {unknown}")
    scratch_scale = args.scratch / scale
    scratch_scale.mkdir(parents=True, exist_ok=True)
    for folder in ("runs", "policies"):  # the checkpoints and the bases stay where the pipeline wrote them
        link = scratch_scale / folder
        if not link.exists():
            link.symlink_to((args.results / scale / folder).resolve(), target_is_directory=True)
    runs = [dataclasses.replace(run, results=str(args.scratch)) for run in run_matrix(experiment)
            if run.method in args.methods and run.task in args.tasks and run.primary]
    if not runs:
        parser.error(f"no primary runs of {args.methods} on {args.tasks} in {args.experiment}")
    bases = sorted({Path(run.policy_dir) / "heldout_eval" / "step0.json" for run in runs})
    started = time.perf_counter()
    evaluate_runs(runs, heldout_items=evaluation["heldout_items"], samples=args.samples, final_samples=args.samples,
                  warm_start_samples=evaluation["warm_start_samples"], temperature=evaluation["temperature"],
                  top_p=evaluation["top_p"], seed=evaluation["seed"], warm_start_evals=bases, first_and_last=True)
    seconds = time.perf_counter() - started

    rows = []
    for run in runs:
        metric, last = correctness[run.task].removeprefix("metrics/"), run.checkpoint_steps[-1]
        base = _reading(Path(run.policy_dir) / "heldout_eval" / "step0.json")
        relative = Path(run.eval_file(last)).relative_to(args.scratch)
        pipeline = _reading(args.reading / relative)
        again = _reading(Path(run.eval_file(last)), args.samples)
        rows.append({"task": run.task, "method": run.method, "warm_start": run.warm_start, "seed": run.seed,
                     "step": last, "base": 100 * base["metrics"][metric],
                     "pipeline_samples": pipeline["samples_per_item"],
                     "pipeline_final": 100 * pipeline["metrics"][metric],
                     "samples": args.samples, "final": 100 * again["metrics"][metric]})
    frame = pd.DataFrame(rows)
    frame["pipeline_minus_base"] = frame["pipeline_final"] - frame["base"]
    frame["minus_base"] = frame["final"] - frame["base"]
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(args.out / "readings.csv", frame, float_format="%.4f")

    command = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"# The drift control read with {args.samples} samples per item against the pipeline's reading", "",
             f"Written by `python experiments/calibration/eval_precision.py {command}` ({len(runs)} checkpoints"
             f" evaluated or found in {seconds:.0f} s). Points of held-out correctness, each run's final minus its own"
             f" warm start's base ({evaluation['warm_start_samples']} samples per item); per warm start the median over"
             f" its runs; criterion 3 reads the median over warm starts against {BOUND:g} points.", "",
             "| task | method | pipeline's samples per item | per warm start | median warm start | criterion 3 |"
             f" per warm start, {args.samples} samples | median warm start | criterion 3 |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += criterion_rows(frame)
    write_text_atomic(args.out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
