"""Compare the two arms of experiments/calibration/minibatch_layout.sh: math length learned with PPO minibatches of
whole prompt groups (``groups``, the trainer since 6cea2fa) against minibatches that mix responses of different
prompts (``responses``, 9b9b1b0's trainer).

    python experiments/calibration/minibatch_layout.py results/pilots/minibatch-layout docs/calibration/minibatch-layout

The rule, fixed before the A/B's runs:

- a run's statistic is its mean batch length reward over steps 20-29 (``reward/length`` in metrics.parquet), the
  window docs/tiny_scale.md's criterion 4 quotes. The same mean of the correctness reward, the first step whose
  batch length reward reaches 0.8 and the last step's length reward are reported beside it, not decided on;
- per method, the difference of the arms' medians (groups - responses) and a two-sided Mann-Whitney U p-value over the
  seeds; pooled over the methods, a permutation test that permutes the layout labels within each method, with the
  sum over methods of the difference of means as its statistic (20,000 permutations, two-sided), and a 95 %
  bootstrap interval of that pooled difference (seeds resampled within each method and arm);
- verdict: whole-group minibatches learn length later (earlier) if the pooled p-value is below 0.05 and the pooled
  difference is negative (positive); otherwise the two layouts are not distinguishable at this many seeds, and the
  interval says how large a difference the A/B could have missed.

The runs' summed step seconds are reported too (not decided on).

Writes ``runs.csv`` (one row per run) and ``summary.md`` into the output folder. Refused: arms that trained different
seeds, arms whose warm starts differ (its weights' bytes: the comparison would measure two starts, not two layouts),
and a ``responses`` run not trained at ``BEFORE`` or a ``groups`` run trained there (their ``git_revision.txt``).
A rerun of the A/B reuses finished runs, whose step seconds were timed when they ran.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from dara.analysis.crossing import first_crossing
from dara.io import write_csv_atomic, write_text_atomic
from dara.provenance import read_revision
from dara.runs import run_identity

ARMS = ("responses", "groups")  # before, after
BEFORE = "9b9b1b0"  # the revision of the responses arm (minibatch_layout.sh)
WINDOW = range(20, 30)
LENGTH_TARGET = 0.8
PERMUTATIONS = 20_000
BOOTSTRAPS = 20_000
ALPHA = 0.05


def run_statistics(metrics: pd.DataFrame) -> dict[str, float]:
    """The A/B's numbers of one run's metrics."""
    by_step = metrics.set_index("step")
    missing = sorted(set(WINDOW) - set(by_step.index))
    if missing:
        raise ValueError(f"the run has no metrics at steps {missing}; "
                         f"the A/B reads steps {WINDOW.start}-{WINDOW.stop - 1}")
    window = by_step.loc[list(WINDOW)]
    crossing = first_crossing(by_step.index, by_step["reward/length"], LENGTH_TARGET)
    return {"length_20_29": float(window["reward/length"].mean()),
            "correctness_20_29": float(window["reward/correctness"].mean()),
            "first_length_0.8": np.nan if crossing is None else float(crossing),
            "length_last": float(by_step["reward/length"].iloc[-1]),
            "step_seconds": float(by_step["seconds"].sum())}


def collect(root: Path) -> pd.DataFrame:
    """One row per run of both arms: arm, method, seed and `run_statistics`."""
    rows = []
    for arm in ARMS:
        paths = sorted((root / arm).glob("*/runs/math_length/*/G*/seed*/metrics.parquet"))
        if not paths:
            raise FileNotFoundError(f"no runs under {root / arm}: run experiments/calibration/minibatch_layout.sh")
        for path in paths:
            revision = read_revision(path.parent)
            if revision.startswith(BEFORE) != (arm == ARMS[0]):
                raise ValueError(f"{path.parent} was trained at {revision}: the {ARMS[0]} arm's runs must be "
                                 f"{BEFORE}'s and the {ARMS[1]} arm's a later revision's")
            run = run_identity(path.parent)  # its config.yaml, checked against its folder
            rows.append({"arm": arm, "method": run["method"], "seed": run["seed"],
                         **run_statistics(pd.read_parquet(path))})
    frame = pd.DataFrame(rows).sort_values(["method", "arm", "seed"]).reset_index(drop=True)
    counts = frame.groupby(["method", "arm"]).seed.apply(frozenset)
    for method in frame.method.unique():
        if counts.get((method, ARMS[0])) != counts.get((method, ARMS[1])):
            raise ValueError(f"{method}: the arms trained different seeds; the A/B needs the same seeds in both")
    return frame


def warm_start_digest(root: Path, arm: str) -> str:
    paths = list((root / arm).glob("*/policies/math_length/warm_start*/model.safetensors"))
    if len(paths) != 1:
        raise FileNotFoundError(f"expected one math_length warm start under {root / arm}, found {len(paths)}")
    return hashlib.sha256(paths[0].read_bytes()).hexdigest()


def pooled_difference(frame: pd.DataFrame, statistic: str) -> float:
    """Sum over methods of mean(groups) - mean(responses)."""
    means = frame.groupby(["method", "arm"])[statistic].mean().unstack("arm")
    return float((means[ARMS[1]] - means[ARMS[0]]).sum())


def permutation_p(frame: pd.DataFrame, statistic: str, rng: np.random.Generator) -> float:
    """Two-sided p-value of the pooled difference, layout labels permuted within each method."""
    observed = pooled_difference(frame, statistic)
    strata = [(part[statistic].to_numpy(), int((part.arm == ARMS[1]).sum())) for _, part in frame.groupby("method")]
    draws = np.zeros(PERMUTATIONS)
    for values, n_after in strata:
        shuffled = rng.permuted(np.broadcast_to(values, (PERMUTATIONS, len(values))), axis=1)
        draws += shuffled[:, :n_after].mean(axis=1) - shuffled[:, n_after:].mean(axis=1)
    # the observed labelling counts as one of the permutations, so p is never 0
    return float((1 + np.sum(np.abs(draws) >= abs(observed) - 1e-12)) / (PERMUTATIONS + 1))


def bootstrap_interval(frame: pd.DataFrame, statistic: str, rng: np.random.Generator) -> tuple[float, float]:
    """95 % percentile interval of the pooled difference, seeds resampled within each method and arm."""
    draws = np.zeros(BOOTSTRAPS)
    for (_, arm), part in frame.groupby(["method", "arm"]):
        values = part[statistic].to_numpy()
        means = rng.choice(values, size=(BOOTSTRAPS, len(values)), replace=True).mean(axis=1)
        draws += means if arm == ARMS[1] else -means
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def verdict(difference: float, p_value: float) -> str:
    if p_value >= ALPHA:
        return "not distinguishable at this many seeds"
    return "whole-group minibatches learn length later" if difference < 0 else \
        "whole-group minibatches learn length earlier"


def summary_markdown(frame: pd.DataFrame, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    lines = ["| method | seeds | statistic | median, responses | median, groups | difference | Mann-Whitney p |",
             "|---|---|---|---|---|---|---|"]
    for method, part in frame.groupby("method"):
        before, after = (part[part.arm == arm] for arm in ARMS)
        for statistic in ("length_20_29", "correctness_20_29", "first_length_0.8", "length_last"):
            a, b = before[statistic].dropna(), after[statistic].dropna()
            p = stats.mannwhitneyu(b, a, alternative="two-sided").pvalue if len(a) and len(b) else np.nan
            lines.append(f"| {method} | {len(before)} | {statistic} ({len(a)}/{len(b)} runs) | {a.median():.3f} | "
                         f"{b.median():.3f} | {b.median() - a.median():+.3f} | {p:.3f} |")
    difference = pooled_difference(frame, "length_20_29")
    p_value = permutation_p(frame, "length_20_29", rng)
    low, high = bootstrap_interval(frame, "length_20_29", rng)
    methods = frame.method.nunique()
    seconds = frame.groupby("arm").step_seconds.sum()
    return "\n".join([
        "# Minibatch layout A/B: math length, steps 20-29",
        "",
        "Written by `experiments/calibration/minibatch_layout.py` from the runs of "
        "`experiments/calibration/minibatch_layout.sh` (its docstring states the rule, fixed before the runs). "
        "`responses`: minibatches that mix responses of different prompts (9b9b1b0's trainer); `groups`: minibatches "
        "of whole prompt groups (6cea2fa's and later). First-crossing medians are over the runs that reach 0.8.",
        "",
        f"Both arms start from the same warm start (its weights' bytes, checked), the {ARMS[0]} arm's runs trained "
        f"at {BEFORE} and the {ARMS[1]} arm's at a later revision (their git_revision.txt, checked).",
        "",
        *lines,
        "",
        f"Pooled over the {methods} methods, the sum of the per-method differences of mean length reward over steps "
        f"20-29 (groups - responses): {difference:+.3f}, 95 % bootstrap interval [{low:+.3f}, {high:+.3f}] "
        f"(a difference of {difference / methods:+.3f} a method on average, interval [{low / methods:+.3f}, "
        f"{high / methods:+.3f}]); permutation p = {p_value:.3f}.",
        "",
        f"Training steps' seconds, summed over each arm's runs (the two arms ran side by side, sharing the machine's "
        f"cores; a run reused from an earlier invocation keeps its own times): "
        f"responses {seconds[ARMS[0]]:.0f} s, groups {seconds[ARMS[1]]:.0f} s, "
        f"{seconds[ARMS[0]] / seconds[ARMS[1]]:.2f}x.",
        "",
        f"Verdict: {verdict(difference, p_value)}.",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the A/B's results folder (results/pilots/minibatch-layout)")
    parser.add_argument("out", type=Path, help="folder for runs.csv and summary.md")
    cli = parser.parse_args(argv)
    frame = collect(cli.root)
    if warm_start_digest(cli.root, ARMS[0]) != warm_start_digest(cli.root, ARMS[1]):
        raise ValueError(f"the arms under {cli.root} start from different warm starts: "
                         "delete the A/B's folder and rerun")
    summary = summary_markdown(frame)
    cli.out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(cli.out / "runs.csv", frame, float_format="%.4f")
    write_text_atomic(cli.out / "summary.md", summary)
    print(summary)


if __name__ == "__main__":
    main()
