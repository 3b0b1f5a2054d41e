"""From per-run evaluations to the numbers in tables: final-checkpoint selection, seed summaries, mean ± SD
tables, and the main group size of a set of runs. (Crossing steps and their summary: :mod:`dara.analysis.crossing`.)

Frames are long: one row per run (task, method, G, seed, and the warm start where the frame has it) and quantity,
so every table is a pivot of one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dara.analysis.run_tables import RUN_KEYS, keys_of
from dara.runs import most_common_group_size
from dara.analysis.summary import format_mean_sd, mean_sd

GROUP_KEYS = ("task", "method", "G")


def main_group_size(metrics: pd.DataFrame) -> int:
    """The group size with the most runs (ties: the smallest; `dara.runs.most_common_group_size`, the rule the
    workflow evaluates by); figures of one G show this one."""
    return most_common_group_size(metrics[list(RUN_KEYS)].drop_duplicates()["G"])


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

