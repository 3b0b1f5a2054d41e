"""From per-run metrics and evaluations to the numbers in tables: crossing records, seed summaries,
final-checkpoint summaries.

Frames are long: one row per run (task, method, G, seed, and the warm start where the frame has it) and quantity,
so every table is a pivot of one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dara.analysis.crossing import first_crossing, first_stable_crossing
from dara.analysis.runs import RUN_KEYS, keys_of
from dara.runs import most_common_group_size
from dara.analysis.summary import format_mean_sd, mean_sd

GROUP_KEYS = ("task", "method", "G")


def main_group_size(metrics: pd.DataFrame) -> int:
    """The group size with the most runs (ties: the smallest; `dara.runs.most_common_group_size`, the rule the
    workflow evaluates by); figures of one G show this one."""
    return most_common_group_size(metrics[list(RUN_KEYS)].drop_duplicates()["G"])


def crossing_records(metrics: pd.DataFrame, thresholds: Mapping[str, Sequence[float]], first_step: int = 1) -> pd.DataFrame:
    """First unsmoothed crossing of every ``reward/<name>`` in ``thresholds`` for every run, counting
    training steps from ``first_step`` (row 0 is the policy before any update, which the paper does not count).

    Returns task, method, G, seed, reward, threshold, step (NaN when never crossed), last_step.
    A reward listed in ``thresholds`` but not logged by a run's task is skipped for that run only if
    the task has no such column at all (tasks have different rewards); a run with the column but
    missing values raises.
    """
    records = []
    keys_named = keys_of(metrics)
    for keys, run in metrics[metrics["step"] >= first_step].groupby(keys_named, sort=True):
        run = run.sort_values("step")
        for reward, levels in thresholds.items():
            column = f"reward/{reward}"
            if column not in run.columns or run[column].isna().all():
                continue
            for threshold in levels:
                step = first_crossing(run["step"], run[column], threshold)
                records.append(
                    {**dict(zip(keys_named, keys)), "reward": reward, "threshold": float(threshold),
                     "step": np.nan if step is None else step, "last_step": int(run["step"].max())}
                )
    columns = [*keys_named, "reward", "threshold", "step", "last_step"]
    return pd.DataFrame(records, columns=columns).astype({"step": "Float64"})


def stable_crossing_records(
    metrics: pd.DataFrame, reward: str, thresholds: Sequence[float], *, window: int = 10, future: int = 20
) -> pd.DataFrame:
    """First stable crossing (``crossing.first_stable_crossing``) of ``reward/<reward>`` per run and threshold, with its status."""
    column = f"reward/{reward}"
    if column not in metrics.columns:
        raise ValueError(f"no {column!r} in the metrics; have {sorted(c for c in metrics.columns if c.startswith('reward/'))}")
    records = []
    keys_named = keys_of(metrics)
    for keys, run in metrics.groupby(keys_named, sort=True):
        run = run.sort_values("step")
        for threshold in thresholds:
            result = first_stable_crossing(run["step"], run[column], threshold, window=window, future=future)
            records.append(
                {**dict(zip(keys_named, keys)), "reward": reward, "threshold": float(threshold),
                 "step": np.nan if result.step is None else result.step, "status": result.status,
                 "last_step": result.last_step}
            )
    return pd.DataFrame(records).astype({"step": "Float64"})


def crossing_summary(records: pd.DataFrame, by: Sequence[str] = (*GROUP_KEYS, "reward", "threshold")) -> pd.DataFrame:
    """Median and spread of crossing steps over seeds.

    Never-crossed runs count as later than any step (so the median is NaN, "never", once half of the
    seeds never crossed); ``q25``/``q75`` are the interquartile range under the same rule, taken as
    observed steps (numpy's "lower" quantile, so a never-crossed quartile is NaN rather than
    interpolated towards infinity), and ``min``/``max`` are over the seeds that crossed.
    """
    rows = []
    for keys, group in records.groupby(list(by), sort=True):
        steps = group["step"].astype(float).fillna(np.inf).to_numpy()
        crossed = steps[np.isfinite(steps)]
        quartiles = np.quantile(steps, [0.25, 0.5, 0.75], method="lower") if len(steps) else [np.nan] * 3
        median = float(np.median(steps))
        rows.append(
            {**dict(zip(by, keys if isinstance(keys, tuple) else (keys,))),
             "n_runs": len(steps), "n_crossed": len(crossed),
             "median": median if np.isfinite(median) else np.nan,
             "q25": quartiles[0] if np.isfinite(quartiles[0]) else np.nan,
             "q75": quartiles[2] if np.isfinite(quartiles[2]) else np.nan,
             "min": float(crossed.min()) if len(crossed) else np.nan,
             "max": float(crossed.max()) if len(crossed) else np.nan,
             "steps": " ".join("never" if not np.isfinite(s) else str(int(s)) for s in steps)}
        )
    return pd.DataFrame(rows)


def survival_durations(records: pd.DataFrame) -> pd.DataFrame:
    """Crossing records as survival data: duration = crossing step, or the last step (censored)."""
    durations = records.copy()
    durations["observed"] = durations["step"].notna().astype(bool)
    durations["duration"] = durations["step"].astype(float).fillna(durations["last_step"].astype(float))
    return durations


def paper_metrics(evaluations: pd.DataFrame, mapping: Mapping[str, str]) -> pd.DataFrame:
    """Run keys, step and one column per paper metric name, copied from our evaluation key
    (``mapping``: paper name -> our column). A key the evaluations lack raises, naming it."""
    missing = {name: key for name, key in mapping.items() if key not in evaluations.columns}
    if missing:
        raise ValueError(f"evaluations lack {missing}; their columns: {sorted(evaluations.columns)}")
    selected = evaluations[[*keys_of(evaluations), "step"]].copy()
    for name, key in mapping.items():
        selected[name] = evaluations[key].astype(float)
    return selected


def final_checkpoint(evaluations: pd.DataFrame, step: int | None = None) -> pd.DataFrame:
    """One evaluation row per run: at ``step`` (raising if a run has none there) or each run's last."""
    if step is None:
        last = evaluations.groupby(list(RUN_KEYS))["step"].transform("max")
        return evaluations[evaluations["step"] == last].reset_index(drop=True)
    chosen = evaluations[evaluations["step"] == step]
    runs = evaluations[list(RUN_KEYS)].drop_duplicates()
    if len(chosen) != len(runs):
        missing = runs.merge(chosen[list(RUN_KEYS)], how="left", indicator=True)
        missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge").to_dict("records")
        raise ValueError(f"runs without an evaluation at step {step}: {missing}")
    return chosen.reset_index(drop=True)


def summarise_metrics(frame: pd.DataFrame, metrics: Sequence[str], by: Sequence[str] = GROUP_KEYS,
                      percent: bool = True) -> pd.DataFrame:
    """Mean, SD (ddof 1) and n over seeds of each metric column present; long: *by, metric, mean, sd, n, seeds."""
    parts = []
    factor = 100.0 if percent else 1.0
    for metric in metrics:
        if metric not in frame.columns:
            continue
        scaled = frame.assign(**{metric: frame[metric] * factor})
        summary = mean_sd(scaled, metric, by)
        seeds = frame.groupby(list(by))["seed"].apply(lambda s: " ".join(str(v) for v in sorted(s))).reset_index()
        parts.append(summary.merge(seeds, on=list(by)).assign(metric=metric))
    if not parts:
        raise ValueError(f"none of {list(metrics)} is in the frame; have {sorted(frame.columns)}")
    result = pd.concat(parts, ignore_index=True)
    return result[[*by, "metric", "mean", "sd", "n", "seed"]].rename(columns={"seed": "seeds"})


def pivot_mean_sd(summary: pd.DataFrame, index: Sequence[str], metrics: Sequence[str], digits: int = 2) -> pd.DataFrame:
    """A display table: one row per ``index`` group, one 'mean ± sd' column per metric (in order)."""
    summary = summary.assign(cell=[format_mean_sd(m, s, n, digits) for m, s, n in
                                   zip(summary["mean"], summary["sd"], summary["n"])])
    table = summary.pivot_table(index=list(index), columns="metric", values="cell", aggfunc="first")
    present = [metric for metric in metrics if metric in table.columns]
    return table[present].reset_index()

