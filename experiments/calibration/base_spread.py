"""How precisely one evaluation measures the base: one of a task's warm-start policies (its runs' step 0) evaluated with
one sample per held-out item under several sampling seeds, and with `warm_start_samples` per item under the
experiment's seed, as the pipeline evaluates it (`dara.evaluation.tiny_heldout`, BFCL for the tool tasks).

    python experiments/calibration/base_spread.py --experiment tiny --task toolcall --seeds 16 \\
        --out docs/calibration/base-spread-toolcall

Needs that warm start (`--warm-start K`, default 0: `snakemake results/tiny/policies/toolcall/warm_start0/warmstart.json`). Writes `base_spread.csv`
(one row per evaluation: seed, samples per item, the metric) and `command.txt` into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path

import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.evaluation.tiny_heldout import evaluate_runs
from dara.experiments import load_experiment
from dara.runs import WarmStart

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="tiny")
    parser.add_argument("--task", required=True, help="a task of the experiment")
    parser.add_argument("--warm-start", type=int, default=0, metavar="K", help="which of the task's warm starts")
    parser.add_argument("--seeds", type=int, default=16, help="sampling seeds of the one-sample evaluations")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    experiment = load_experiment(args.experiment)
    # the held-out metric the regime table reads for the task ("metrics/<key>" in the evaluation files)
    correctness = load_analysis_config(ROOT / "analysis" / "config.yaml", experiment["scale"])["heldout_correctness"]
    if args.task not in correctness:
        raise SystemExit(f"analysis/config.yaml names no held-out correctness metric for task {args.task!r}")
    metric = correctness[args.task].removeprefix("metrics/")
    evaluation = dict(experiment["evaluation"])
    warm_start = WarmStart.of(experiment, args.task, warm_start=args.warm_start)
    policy = Path(warm_start.policy)
    if not (policy / "config.json").is_file():
        raise SystemExit(f"no warm start under {policy}: run `snakemake {policy}/warmstart.json` first")
    plans = [(seed, 1) for seed in [evaluation["seed"], *range(1, args.seeds)]]
    plans.append((evaluation["seed"], evaluation["warm_start_samples"]))
    rows = []
    with tempfile.TemporaryDirectory(prefix="dara-base-spread-") as scratch:
        for seed, samples in plans:
            run = dataclasses.replace(warm_start, eval_to=f"{scratch}/seed{seed}-samples{samples}")
            [path] = evaluate_runs([run], **{**evaluation, "seed": seed, "warm_start_samples": samples})
            value = json.loads(path.read_text())["metrics"][metric]
            rows.append({"task": args.task, "sampling_seed": seed, "samples_per_item": samples,
                         "heldout_items": evaluation["heldout_items"], metric: 100 * value})
    args.out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(args.out / "base_spread.csv", index=False)
    (args.out / "command.txt").write_text(shlex.join(["python", *sys.argv]) + "\n")
    single = frame[frame["samples_per_item"] == 1][metric]
    print(frame.to_string(index=False))
    print(f"one sample per item: mean {single.mean():.1f}, sd {single.std():.1f}, "
          f"range {single.min():.1f}-{single.max():.1f} over {len(single)} seeds")


if __name__ == "__main__":
    main()
