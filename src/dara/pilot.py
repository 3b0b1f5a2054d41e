"""Short calibration pilots of the tiny scale: a warm start and a few runs with settings overridden, and the regime
numbers that decide a setting (docs/tiny_scale.md, "Calibration").

    python -m dara.pilot --experiment tiny --target toolcall --methods gdpo dara_sym --seeds 0 1 \\
        --set learning_rate=3e-4 --option wrong_key_rate=0.7 --out results/pilots/toolcall-lr3e-4

Settings resolve as for the target's runs (`dara.experiments.run_settings`); ``--set KEY=VALUE`` overrides a run
setting and ``--option KEY=VALUE`` a task option (both parsed as YAML scalars), ``--group-size`` the target's G. The
``--out`` folder is a results tree of its own, in `dara.runs`' layout (``<out>/<scale>/policies/<task>/warm_start0``,
``<out>/<scale>/runs/...``, ``<out>/<scale>/eval/...``). The warm start is made once per ``--out`` folder (and reused
while the task options are unchanged). For every run the pilot prints and writes ``<out>/pilot.csv``:

- step-0 density of each reward and the weight DARA gives it at those densities (the first rollout batch, before any
  update; computed from the densities whichever method the run trains with, so a GDPO pilot shows it too);
- each reward's share of the z-score energy at step 0, which is GDPO's share of the advantage energy
  (``energy_share/<reward>``: sum of z^2 over the channel / over all channels), and the run's own share after its
  weights (``energy_share_calibrated/<reward>``), both as medians over steps 0-4 too (``..._first5``);
- each reward's batch mean at step 0, at the middle step (``last // 2``) and at the last step, and the first step its
  mean reaches a threshold (``--crossing REWARD=THRESHOLD``);
- the late run: each reward's median density over the steps of the last third (``step > 2 last / 3``), the weight
  DARA would give it there (median over those steps where the reward varies in some group: at density 0 the weight
  multiplies zero z-scores, so its value is a convention with no effect), and the share of those steps where it
  varies; computed from the run's own densities, so a GDPO pilot predicts DARA's late weights without running DARA;
- with ``--stable REWARD=THRESHOLD``: the first stable crossing (`dara.analysis.crossing.first_stable_crossing`,
  the paper's window of 10 steps held for 20 more) and whether it was confirmed;
- with ``--heldout N``: each reward's mean on N held-out items at the experiment's evaluation sampling (its
  ``evaluation`` block: temperature and top-p; one sample each, drawn with ``HELDOUT_SEED``) for the warm start and the final policy, and for toolcall the share of tool items
  whose first call is exactly right (correctness 3), a quick stand-in for BFCL's tool accuracy;
- with ``--evaluate``: the pipeline's own held-out evaluation (`dara.evaluation.tiny_heldout.evaluate_runs` with the
  experiment's ``evaluation`` block, BFCL scoring included) of each run's first and last checkpoint, as
  ``base_eval/<metric>`` and ``eval/<metric>``: the numbers the regime table reports, so a drift criterion is
  decided on the metric it is stated in.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import torch

from dara.advantages import density_weights, energy_shares
from dara.analysis.crossing import (first_crossing, first_stable_crossing, median_crossing_step, step_text,
                                    training_steps)
from dara.analysis.late_run import late_run_numbers
from dara.io import write_csv_atomic


def _assignments(pairs: list[str], flag: str) -> dict[str, Any]:
    found = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
            try:
                parsed = float(parsed)
            except ValueError:
                pass
        found[key] = parsed
    return found


# The paper's stable-crossing window and hold (math/tools/learning_efficiency.py; analysis/config.yaml's
# stable_crossing), the defaults of --stable.
STABLE_WINDOW, STABLE_FUTURE = 10, 20


def summarise_run(metrics: pd.DataFrame, rewards: tuple[str, ...], crossings: list[tuple[str, float]],
                  w_max: float, stable: list[tuple[str, float]] = ()) -> dict[str, Any]:
    """The regime numbers of one run's metrics (see the module docstring)."""
    metrics = metrics.sort_values("step").reset_index(drop=True)
    first, last = metrics.iloc[0], metrics.iloc[-1]
    early = metrics[metrics["step"] <= 4]
    out: dict[str, Any] = {}
    dara_weights = density_weights(torch.tensor([float(first[f"density/{r}"]) for r in rewards], dtype=torch.float64),
                                   w_max)
    for k, reward in enumerate(rewards):
        out[f"density0/{reward}"] = first[f"density/{reward}"]
        out[f"weight0/{reward}"] = float(dara_weights[k])
        out[f"mean0/{reward}"] = first[f"reward/{reward}"]
        out[f"mean_last/{reward}"] = last[f"reward/{reward}"]
    out.update(late_run_numbers(metrics, rewards, w_max))
    for calibrated, name in ((False, "energy_share"), (True, "energy_share_calibrated")):
        shares = [energy_shares(row, rewards, calibrated) for _, row in early.iterrows()]  # dara.advantages
        for reward in rewards:
            out[f"{name}0/{reward}"] = shares[0][reward]
            out[f"{name}_first5/{reward}"] = float(np.nanmedian([s[reward] for s in shares]))
    trained = not training_steps(metrics).empty  # a step-0 screen (--set steps=1) has no step to cross at
    for reward, threshold in crossings:
        step = first_crossing(metrics["step"], metrics[f"reward/{reward}"], threshold) if trained else None
        out[f"crossing/{reward}>={threshold:g}"] = np.nan if step is None else step  # from step 1, as the tables
    for reward, threshold in stable:
        found = (first_stable_crossing(metrics["step"], metrics[f"reward/{reward}"], threshold, window=STABLE_WINDOW,
                                       future=STABLE_FUTURE) if trained else None)
        confirmed = found is not None and found.status == "confirmed"
        out[f"stable/{reward}>={threshold:g}"] = found.step if confirmed else np.nan
        out[f"stable_status/{reward}>={threshold:g}"] = "not_reached" if found is None else found.status
    out["last_step"] = int(last["step"])  # where a crossing never reached is censored (summary_table)
    out["entropy_last"] = last["entropy"]
    out["seconds_per_step"] = float(metrics["seconds"].median())
    return out


def _finished_run(run) -> pd.DataFrame | None:
    """The metrics of a finished `dara.runs.Run` in its folder made with exactly its settings and warm-start policy
    (by content: its digest), else None."""
    from dara.tiny.policy import policy_digest
    from dara.tiny.trainer import TrainSettings, resolved_config

    config, metrics = Path(run.run_dir) / "config.yaml", Path(run.run_dir) / "metrics.parquet"
    if not (config.is_file() and metrics.is_file()):
        return None
    recorded = yaml.safe_load(config.read_text())
    wanted = {**resolved_config(run, TrainSettings.of(run)), "policy_sha256": policy_digest(run.policy_dir),
              "policy": run.policy_dir}
    # a setting that resolved_config leaves out at its default (lr_schedule: constant) must be absent from the
    # folder's config too: a cosine run is not this constant run
    unwanted = {field.name for field in dataclasses.fields(TrainSettings)} & set(recorded) - set(wanted)
    same = not unwanted and all(recorded.get(key) == value for key, value in wanted.items())
    return pd.read_parquet(metrics) if same else None


# The pilots' own sampling seed, not the evaluation's: docs/calibration/ holds tables drawn with it.
HELDOUT_SEED = 0


def heldout_means(policy_dir: str | Path, task, n_items: int, max_new_tokens: int,
                  sampling: dict[str, Any]) -> dict[str, float]:
    """Reward means of one sample per held-out item at ``sampling``'s temperature and top-p (an experiment's
    ``evaluation`` block: the pipeline's held-out sampling), and toolcall's exact-call share."""
    from dara.tiny.policy import generate, load_policy

    items = task.items("heldout", n_items, seed=0)
    tokenizer, model = load_policy(policy_dir)
    texts, lengths = generate(model, tokenizer, [item["prompt"] for item in items], seed=HELDOUT_SEED,
                              max_new_tokens=max_new_tokens, temperature=sampling["temperature"],
                              top_p=sampling["top_p"])
    rewards = task.score(texts, items, lengths)
    out = {f"heldout/{name}": float(rewards[:, k].mean()) for k, name in enumerate(task.reward_names)}
    if "correctness" in task.reward_names and task.name.startswith("toolcall"):
        tool = [k for k, item in enumerate(items) if item["calls"]]
        column = task.reward_names.index("correctness")
        out["heldout/exact_call_tool"] = float((rewards[tool, column] == 3.0).mean())
    return out


def pipeline_evaluation(runs: list, evaluation: dict[str, Any]) -> list[dict[str, float]]:
    """The pipeline's held-out metrics of the first and last checkpoints (``base_eval/`` and ``eval/``) of each
    `dara.runs.Run`, evaluated in one process (one BFCL scoring call for all)."""
    from dara.evaluation.tiny_heldout import evaluate_runs

    # resumes: checkpoints already evaluated are skipped
    evaluate_runs(runs, **evaluation, first_and_last=True)
    found = []
    for run in runs:
        out = {}
        for prefix, step in zip(("base_eval", "eval"), (run.checkpoint_steps[0], run.checkpoint_steps[-1])):
            record = json.loads(Path(run.eval_file(step)).read_text())
            out.update({f"{prefix}/{name}": float(value) for name, value in record["metrics"].items()})
        found.append(out)
    return found


# The columns a calibration decision reads, per pilot and method (medians over its seeds).
SUMMARY_COLUMNS = {
    "seeds": "seeds", "density0/format": "format density, step 0", "weight0/format": "DARA weight, step 0",
    "energy_share0/format": "GDPO format share, step 0", "mean_last/format": "format, last step",
    "crossing/format>=0.8": "format 0.8 at step", "mean0/length": "length, step 0", "mean_last/length": "length, last step",
    "crossing/length>=0.8": "length 0.8 at step", "crossing/length>=0.95": "length 0.95 at step",
    "density0/correctness": "correctness density, step 0", "mean_mid/length": "length, middle step",
    "density_last_third/correctness": "correctness density, last third",
    "density_last_third/length": "length density, last third", "weight_last_third/length": "DARA length weight, last third",
    "stable/length>=0.99": "stable length 0.99 at step", "eval/skipped_step": "held-out skipped step, last",
    "base_heldout/exact_call_tool": "held-out exact call, base", "heldout/exact_call_tool": "held-out exact call, last",
    "base_heldout/correctness": "held-out correctness, base", "heldout/correctness": "held-out correctness, last",
    "base_eval/bfcl_accuracy_tool": "BFCL tool accuracy, base", "eval/bfcl_accuracy_tool": "BFCL tool accuracy, last",
    "base_eval/accuracy": "held-out accuracy, base", "eval/accuracy": "held-out accuracy, last",
}


def summary_table(pilot_csvs: list[Path]) -> str:
    """One markdown row per pilot and method: the medians over seeds of the columns in ``SUMMARY_COLUMNS``; a
    crossing step's is the study's median (``dara.analysis.crossing.median_crossing_step``: Kaplan-Meier, a crossing
    never reached censored at the run's last step; "never" when fewer than half the seeds crossed)."""
    rows = []
    for path in pilot_csvs:
        frame = pd.read_csv(path)
        for method, runs in frame.groupby("method", sort=False):
            row = {"pilot": path.parent.name, "method": method, "seeds": len(runs)}
            for column, label in SUMMARY_COLUMNS.items():
                if column in runs and column != "seeds":
                    values = runs[column].astype(float)
                    if column.startswith("stable/"):  # how many seeds confirmed it, beside the median
                        row[f"{label} (seeds confirmed)"] = f"{int(values.notna().sum())}/{len(values)}"
                    if column.startswith(("crossing/", "stable/")):
                        # the study's median (Kaplan-Meier); pilot.csv files written before it had last_step hold
                        # runs of one length, so a never-crossing seed ran past every crossing of its pilot
                        last_steps = runs["last_step"] if "last_step" in runs else None
                        row[label] = step_text(median_crossing_step(values, last_steps))
                    else:
                        row[label] = f"{values.median():.3g}"
            rows.append(row)
    return pd.DataFrame(rows).fillna("").to_markdown(index=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    from dara.experiments import load_experiment, run_settings, warm_start_settings
    from dara.runs import Run, policy_dir
    from dara.tasks import get_task
    from dara.tiny.trainer import train
    from dara.tiny.warmstart import warm_start

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="tiny")
    parser.add_argument("--target")
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--group-size", type=int, default=None, help="default: the target's first G")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a run setting")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a task option")
    parser.add_argument("--warm", action="append", default=[], metavar="KEY=VALUE", help="a warm-start setting")
    parser.add_argument("--crossing", action="append", default=[], metavar="REWARD=THRESHOLD")
    parser.add_argument("--stable", action="append", default=[], metavar="REWARD=THRESHOLD",
                        help=f"first stable crossing (window {STABLE_WINDOW}, held {STABLE_FUTURE} steps)")
    parser.add_argument("--heldout", type=int, default=0, help="held-out items to sample (0: none)")
    parser.add_argument("--evaluate", action="store_true",
                        help="evaluate the first and last checkpoints as the pipeline does (BFCL for tool calling)")
    parser.add_argument("--out", required=True, help="the pilot's folder; with --summarise, the markdown file")
    parser.add_argument("--summarise", nargs="+", type=Path, metavar="PILOT_CSV",
                        help="write only the summary table of these pilot.csv files to --out")
    cli = parser.parse_args(argv)
    if cli.summarise:
        Path(cli.out).write_text(summary_table(cli.summarise))
        return

    if not (cli.target and cli.methods):
        parser.error("--target and --methods are required (unless --summarise)")
    experiment = load_experiment(cli.experiment)
    block = experiment["targets"][cli.target]
    task_name = block["task"]
    options = {**experiment["tasks"][task_name].get("options", {}), **_assignments(cli.option, "--option")}
    experiment = copy.deepcopy(experiment)
    experiment["tasks"][task_name]["options"] = options
    overrides = _assignments(cli.set, "--set")
    group_size = cli.group_size or int(block["group_sizes"][0])
    out = Path(cli.out)
    out.mkdir(parents=True, exist_ok=True)
    given = sys.argv[1:] if argv is None else list(argv)
    (out / "command.txt").write_text("python -m dara.pilot " + shlex.join(given) + "\n")

    # The pilot's folder is a results tree of its own (dara.runs' layout, rooted at --out).
    def pilot_run(method: str, seed: int, settings: dict[str, Any]) -> Run:
        return Run(scale=experiment["scale"], backend="tiny", task=task_name, method=method, group_size=group_size,
                   seed=seed, settings=settings, scale_backend=experiment["backend"], results=str(out))

    warm = {**warm_start_settings(experiment, task_name), **_assignments(cli.warm, "--warm")}
    warm["max_new_tokens"] = overrides.get("max_new_tokens", warm["max_new_tokens"])
    policy = Path(policy_dir(experiment["scale"], task_name, str(out)))
    stamp = json.dumps(warm, sort_keys=True, default=str)
    stamp_file = out / "warm_settings.json"
    if not ((policy / "warmstart.json").is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp):
        warm_start(out=policy, **warm)
        stamp_file.write_text(stamp)
        for stale in ("runs", "eval"):  # runs of another warm start are not this pilot's
            shutil.rmtree(out / experiment["scale"] / stale, ignore_errors=True)
    step0 = json.loads((policy / "warmstart.json").read_text())["step0"]
    print("warm start step 0:", {k: round(v, 3) for k, v in step0.items() if isinstance(v, float)})

    task = get_task(task_name, **options)
    crossings = [(reward, float(threshold)) for reward, threshold in
                 (pair.split("=", 1) for pair in cli.crossing if "=" in pair)]
    if len(crossings) != len(cli.crossing):
        raise SystemExit(f"--crossing takes REWARD=THRESHOLD, got {cli.crossing}")
    stable = [(reward, float(threshold)) for reward, threshold in
              (pair.split("=", 1) for pair in cli.stable if "=" in pair)]
    if len(stable) != len(cli.stable):
        raise SystemExit(f"--stable takes REWARD=THRESHOLD, got {cli.stable}")
    rows, evaluated = [], []
    sampling = experiment["evaluation"]
    base = heldout_means(policy, task, cli.heldout, warm["max_new_tokens"], sampling) if cli.heldout else {}
    for method in cli.methods:
        settings = {**run_settings(experiment, cli.target, method), **overrides}
        for seed in cli.seeds:
            run = pilot_run(method, seed, settings)
            metrics = _finished_run(run)
            if metrics is None:
                shutil.rmtree(run.run_dir, ignore_errors=True)  # another pilot's settings, or killed half-way
                shutil.rmtree(run.eval_dir, ignore_errors=True)  # its evaluation was of the checkpoints just removed
                metrics = train(run, progress=False)
            row = {"method": method, "G": group_size, "seed": seed,
                   **summarise_run(metrics, task.reward_names, crossings, settings["w_max"], stable)}
            if cli.heldout:
                row.update({f"base_{k}": v for k, v in base.items()})
                final = run.checkpoint_dir(settings["steps"])
                row.update(heldout_means(final, task, cli.heldout, settings["max_new_tokens"], sampling))
            rows.append(row)
            evaluated.append(run)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}))
    if cli.evaluate:
        for row, metrics_of_run in zip(rows, pipeline_evaluation(evaluated, sampling)):
            row.update(metrics_of_run)
    frame = pd.DataFrame(rows)
    write_csv_atomic(out / "pilot.csv", frame)
    numeric = frame.drop(columns=["seed"]).groupby(["method", "G"]).median(numeric_only=True)
    with pd.option_context("display.width", 250, "display.max_columns", 80):
        print(numeric.T.round(3).to_string())


if __name__ == "__main__":
    main()
