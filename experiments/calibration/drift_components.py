"""Where the drift control's spread comes from, and how precisely one draw reads criterion 3: each draw's control
runs (and a method's, for contrast) split into the spread between seeds of one warm start and the spread between
warm starts, and the criterion's reading (the median over warm starts of each warm start's median final minus base,
as `dara.analysis.criteria` reads it) resampled over warm starts.

    python experiments/calibration/drift_components.py --task math_length \\
        --draw "1.4e-4, 20be9fc draw=results/tiny" --draw "1e-4, 65c6f32 draw=results/tiny_65c6f32" \\
        --out docs/calibration/drift-components-math

Reads each tree's held-out evaluations (``eval/<task>/<method>/G<G>/seed<S>/step<N>.json``: the last step and step
0, the base), the task's held-out correctness metric from ``analysis/config.yaml``. Writes ``drift_components.csv``
(one row per draw and method), ``runs.csv`` (every run's final minus base), ``drift_by_step.csv`` (each draw's
and method's mean change at every evaluated step), ``drift_components.md`` and ``command.txt`` into ``--out``.

Why the resampling is written here: the reading is a median over warm starts of per-warm-start medians, a statistic
`dara.analysis.effect_size`'s bootstrap does not compute (it pools the drawn seeds). Each resample draws as many warm
starts as the draw has, with replacement, each with its own seeds as they are, and takes the reading on them: the
warm start is the unit, and its median already carries its seeds' spread (drawing the seeds again inside it would
count that spread twice). The resamples centre on this draw's reading, not on the setting's true drift, so the share
inside the criterion's bound says how often a draw would meet it were this draw's warm starts the setting's; with
five warm starts the resampled spread is lumpy and only a rough guide.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.analysis.criteria import CONTROL
from dara.analysis.run_tables import RUN_KEYS, WARM_START, load_evaluations
from dara.analysis.tables import final_checkpoint
from dara.io import replace_atomically, write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
RESAMPLES = 20_000
SEED = 0


def step_changes(tree: Path, task: str, method: str, metric: str) -> pd.DataFrame:
    """Every evaluated run of ``method`` on ``task`` under ``tree``, at every evaluated step after 0: its warm start,
    seed, the step, whether it is the run's last, and that step's minus the base of ``metric`` (an evaluation column,
    e.g. ``metrics/accuracy``) in points, against the run's step 0. The files are read as the analysis reads them
    (`load_evaluations`, checked against their folders)."""
    paths = sorted((tree / "eval" / task / method).glob("G*/seed*/step*.json"))
    if not paths:
        raise ValueError(f"no evaluated {method} runs of {task} under {tree}")
    evaluations = load_evaluations(paths)
    if metric not in evaluations:
        raise ValueError(f"no {metric!r} in the evaluations of {method} on {task} under {tree}")
    final = final_checkpoint(evaluations).set_index(list(RUN_KEYS))
    base = evaluations[evaluations["step"] == 0].set_index(list(RUN_KEYS))[metric]
    unpaired = [key for key, step in final["step"].items() if step == 0 or key not in base.index]
    if unpaired:
        raise ValueError(f"runs without both a step-0 and a later evaluation under {tree}: {unpaired}")
    later = evaluations[evaluations["step"] > 0].set_index(list(RUN_KEYS))
    # the policy a run started from, by its step-0 checkpoint's SHA-256: draws with the same warm-start settings share
    # their warm starts (the same bytes under the kernel pin), which pooling them must count once each
    policies = {key: json.loads((tree / "eval" / task / method / f"G{key[2]}" / f"seed{key[3]}" / "step0.json")
                                .read_text())["checkpoint_sha256"] for key in base.index}
    return pd.DataFrame({"warm_start": later[WARM_START].astype(int), "step": later["step"],
                         "base_policy": [policies[key] for key in later.index],
                         "last": later["step"].to_numpy() == final["step"].loc[later.index].to_numpy(),
                         "change": 100 * (later[metric].to_numpy() - base.loc[later.index].to_numpy())}
                        ).reset_index()[
        ["warm_start", "base_policy", "seed", "step", "last", "change"]].sort_values(["seed", "step"],
                                                                                     ignore_index=True)


def final_changes(changes: pd.DataFrame) -> pd.DataFrame:
    """`step_changes`' rows at each run's last evaluated step: its final minus base."""
    return changes[changes["last"]].drop(columns=["last", "base_policy"]).reset_index(drop=True)


def drift_by_step(changes: pd.DataFrame) -> pd.DataFrame:
    """Per evaluated step: the mean change over warm starts and its standard error (each warm start's mean over its
    seeds is one value: the warm start is the unit, for the mean as for its error, so a warm start with more seeds,
    as one several draws share, does not weigh more)."""
    rows = []
    for step, at_step in changes.groupby("step"):
        per_warm_start = at_step.groupby("warm_start")["change"].mean()
        error = float(per_warm_start.std(ddof=1) / np.sqrt(len(per_warm_start))) if len(per_warm_start) > 1 \
            else float("nan")
        rows.append({"step": int(step), "runs": len(at_step), "warm_starts": len(per_warm_start),
                     "mean": float(per_warm_start.mean()), "se_over_warm_starts": error})
    return pd.DataFrame(rows)


def reading(values_by_warm_start: list[np.ndarray]) -> float:
    """The criterion's reading: the median over warm starts of each warm start's median."""
    return float(np.median([np.median(values) for values in values_by_warm_start]))


def resampled_readings(values_by_warm_start: list[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    """`reading` on ``resamples`` resamples of the warm starts (with replacement, each with its seeds)."""
    medians = np.array([np.median(values) for values in values_by_warm_start])
    drawn = np.random.default_rng(seed).integers(0, len(medians), (resamples, len(medians)))
    return np.median(medians[drawn], axis=1)


def components(runs: pd.DataFrame, bound: tuple[float, float], resamples: int, seed: int) -> dict:
    """The spread of ``runs``' changes within and between warm starts, the reading and its resampled spread."""
    groups = [group["change"].to_numpy() for _, group in runs.groupby("warm_start")]
    repeated = [values for values in groups if len(values) > 1]
    within = float(np.sqrt(np.mean([np.var(values, ddof=1) for values in repeated]))) if repeated else float("nan")
    medians = float(np.std([np.median(values) for values in groups], ddof=1)) if len(groups) > 1 else float("nan")
    # A warm start's mean over k seeds varies by its own part plus the seeds' variance / k (k: the harmonic mean of
    # the seed counts); the median equals the mean at k <= 2 and is close to it above. Negative estimates read 0.
    seeds = len(groups) / sum(1 / len(values) for values in groups)
    between = float(np.sqrt(max(0.0, medians ** 2 - within ** 2 / seeds))) if repeated else float("nan")
    draws = resampled_readings(groups, resamples, seed)
    low, high = bound
    return {"runs": len(runs), "warm_starts": len(groups), "mean": float(runs["change"].mean()),
            "sd_within_warm_start": within, "sd_of_warm_start_medians": medians, "sd_between_warm_starts": between,
            "reading": reading(groups), "reading_sd": float(np.std(draws, ddof=1)),
            "reading_p05": float(np.quantile(draws, 0.05)), "reading_p95": float(np.quantile(draws, 0.95)),
            "share_within_bound": float(np.mean((draws >= low) & (draws <= high)))}


def render(table: pd.DataFrame, task: str, metric: str, bound: tuple[float, float], resamples: int,
           control: str) -> str:
    """The page: one row per draw and method; the share inside the bound only for ``control`` (criterion 3 reads
    the drift control alone)."""
    lines = [f"# {task}: the drift control's spread, and how precisely one draw reads criterion 3", "",
             f"Written by `experiments/calibration/drift_components.py` (its docstring says how). Final minus base "
             f"of held-out `{metric}` in points, each run's last evaluation against its step 0. The reading is "
             f"criterion 3's (bound [{bound[0]:g}, {bound[1]:g}]): the median over warm starts of each warm start's "
             f"median; its spread is over {resamples:,} resamples of the warm starts (each with its seeds), centred on "
             f"the draw's own reading.",
             "", "| draw | method | runs (warm starts) | mean | SD between seeds of a warm start | SD of the warm "
             "starts' medians | SD between warm starts, the seeds' share taken out | reading | reading's resampled "
             "SD | 90 % of resampled readings | resamples within the bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table.itertuples():
        lines.append(f"| {row.draw} | {row.method} | {row.runs} ({row.warm_starts}) | {row.mean:+.1f} | "
                     f"{row.sd_within_warm_start:.1f} | {row.sd_of_warm_start_medians:.1f} | "
                     f"{row.sd_between_warm_starts:.1f} | {row.reading:+.1f} | "
                     f"{row.reading_sd:.1f} | {row.reading_p05:+.1f} to {row.reading_p95:+.1f} | "
                     + (f"{100 * row.share_within_bound:.0f} % |" if row.method == control else "- |"))
    return "\n".join(lines) + "\n"


# How the drift-by-step table is read (fixed 2026-12-07, before the table was first written): on every draw's control
# runs pooled, the mean change at the middle evaluated step against the last one, where the last is more than two
# standard errors (over warm starts) below or above 0.
GROWS_BELOW, EARLY_FROM = 0.5, 2 / 3


def step_verdict(by_step: pd.DataFrame) -> str:
    """The rule above on one `drift_by_step` table: does the drift grow with the updates, or come early?"""
    last, middle = by_step.iloc[-1], by_step.iloc[(len(by_step) - 1) // 2]
    if not abs(last["mean"]) > 2 * last["se_over_warm_starts"]:
        return (f"no verdict: the last step's mean ({last['mean']:+.1f}) is within two standard errors "
                f"({last['se_over_warm_starts']:.1f}) of 0")
    share = middle["mean"] / last["mean"]
    what = (f"step {int(middle['step'])} holds {share:.0%} of step {int(last['step'])}'s mean change "
            f"({middle['mean']:+.1f} of {last['mean']:+.1f})")
    if share <= GROWS_BELOW:
        return f"grows with the updates: {what}, at most {GROWS_BELOW:.0%}; fewer updates would drift less"
    if share >= EARLY_FROM:
        return (f"comes early: {what}, at least {EARLY_FROM:.0%}; the number of updates is not the lever")
    return f"undecided: {what}, between {GROWS_BELOW:.0%} and {EARLY_FROM:.0%}"


def render_by_step(by_step: pd.DataFrame, pooled: pd.DataFrame, control: str) -> str:
    """The page's section: each draw's (and the pooled) mean change per evaluated step, and the rule's verdict."""
    steps = sorted(by_step["step"].unique())
    lines = ["", "## The drift by step", "",
             "Does the control's drift grow with the number of updates, or come early? Each cell is the mean change "
             "(points) at that step over the draw's warm starts, each warm start's mean over its seeds one value, "
             "with its standard error (pooled over draws, a warm start several draws share is one value, the mean "
             "of all its runs). Checkpoints between the ends are evaluated with fewer samples "
             "per held-out item than the last (the experiment's `evaluation` settings), so their means are noisier. "
             f"The rule, fixed before the table was first read: on every draw's {control} runs pooled, where the "
             "last step's mean is more than two standard errors from 0, the middle step's mean at most "
             f"{GROWS_BELOW:.0%} of the last's says the drift grows with the updates (fewer would drift less), at "
             f"least {EARLY_FROM:.0%} that it comes early (the number of updates is not the lever), between is "
             "undecided.", "",
             "| draw | method | " + " | ".join(f"step {step}" for step in steps) + " |",
             "|---|---|" + "---|" * len(steps)]
    for (draw, method), table in [*by_step.groupby(["draw", "method"], sort=False), *[(("every draw pooled",
                                                                                        control), pooled)]]:
        cells = {int(row.step): f"{row.mean:+.1f} ± {row.se_over_warm_starts:.1f}" for row in table.itertuples()}
        lines.append(f"| {draw} | {method} | " + " | ".join(cells.get(int(step), "-") for step in steps) + " |")
    lines += ["", f"Verdict ({control}, every draw pooled): {step_verdict(pooled)}."]
    return "\n".join(lines) + "\n"


def parse_draw(text: str) -> tuple[str, Path]:
    label, separator, tree = text.rpartition("=")
    if not separator or not label or not tree:
        raise argparse.ArgumentTypeError(f"a draw is LABEL=RESULTS_TREE; got {text!r}")
    return label, Path(tree)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--draw", type=parse_draw, action="append", required=True, metavar="LABEL=TREE",
                        help="a results tree and its label (repeat for each draw)")
    parser.add_argument("--contrast", nargs="*", default=["gdpo"],
                        help="methods shown beside the drift control (their seeds' spread, for comparison)")
    parser.add_argument("--scale", default="tiny", help="the experiment whose analysis settings apply")
    parser.add_argument("--resamples", type=int, default=RESAMPLES)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    config = load_analysis_config(ROOT / "analysis" / "config.yaml", args.scale)
    if args.task not in config["heldout_correctness"]:
        raise SystemExit(f"analysis/config.yaml names no held-out correctness metric for task {args.task!r}")
    metric = config["heldout_correctness"][args.task]
    bound = tuple(config["regime_criteria"]["no_drift"]["points"])
    rows, every_run, by_step, control_steps = [], [], [], []
    for label, tree in args.draw:
        for method in [CONTROL, *args.contrast]:
            changes = step_changes(tree, args.task, method, metric)
            runs = final_changes(changes)
            every_run.append(runs.assign(draw=label, method=method))
            rows.append({"draw": label, "method": method, **components(runs, bound, args.resamples, SEED)})
            by_step.append(drift_by_step(changes).assign(draw=label, method=method))
            if method == CONTROL:
                # pooled over draws, a warm start is its policy: one that several draws share is one unit
                control_steps.append(changes.assign(warm_start=changes["base_policy"]))
    table = pd.DataFrame(rows)
    by_step = pd.concat(by_step, ignore_index=True)[["draw", "method", "step", "runs", "warm_starts", "mean",
                                                      "se_over_warm_starts"]]
    pooled = drift_by_step(pd.concat(control_steps, ignore_index=True))
    args.out.mkdir(parents=True, exist_ok=True)
    replace_atomically(args.out / "drift_components.csv", lambda path: table.to_csv(path, index=False))
    runs = pd.concat(every_run)
    replace_atomically(args.out / "runs.csv", lambda path: runs.to_csv(path, index=False))
    replace_atomically(args.out / "drift_by_step.csv", lambda path: by_step.to_csv(path, index=False))
    page = (render(table, args.task, metric.removeprefix("metrics/"), bound, args.resamples, control=CONTROL)
            + render_by_step(by_step, pooled, CONTROL))
    write_text_atomic(args.out / "drift_components.md", page)
    arguments = sys.argv[1:] if argv is None else argv
    write_text_atomic(args.out / "command.txt",
                      shlex.join(["python", "experiments/calibration/drift_components.py", *arguments]) + "\n")
    print(page)


if __name__ == "__main__":
    main()
