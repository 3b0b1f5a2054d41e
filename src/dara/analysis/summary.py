"""Statistics over seeds: per-step median and interquartile band, mean +- SD, and the Table 1 retention rule.

All functions take long pandas frames (one row per run, or per run and step) and name the columns they
group by, so the same code serves every task, method and group size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


def _require_columns(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise ValueError(f"missing columns {missing}; frame has {list(frame.columns)}")


def seed_band(frame: pd.DataFrame, value: str, by: Sequence[str] = ("method", "step")) -> pd.DataFrame:
    """Per-group median and 25th/75th percentiles over the rows of each group (one row per seed).

    Returns columns ``*by, median, q25, q75, n_seeds``. Rows whose value is missing are not counted
    (a run that logged no value at a step contributes nothing there); ``n_seeds`` says how many did.
    Percentiles use linear interpolation (numpy's default), so one seed gives median = q25 = q75.
    """
    by = list(by)
    _require_columns(frame, [*by, value])
    present = frame.dropna(subset=[value])
    grouped = present.groupby(by, sort=True)[value]
    result = pd.DataFrame(
        {
            "median": grouped.median(),
            "q25": grouped.quantile(0.25),
            "q75": grouped.quantile(0.75),
            "n_seeds": grouped.size(),
        }
    )
    return result.reset_index()


def mean_sd(frame: pd.DataFrame, value: str, by: Sequence[str]) -> pd.DataFrame:
    """Mean and sample standard deviation (ddof 1, as the paper reports) per group.

    Returns columns ``*by, mean, sd, n``; ``sd`` is NaN for a group of one run. Missing values raise:
    a table cell must say which runs it averages, not quietly average fewer.
    """
    by = list(by)
    _require_columns(frame, [*by, value])
    if frame[value].isna().any():
        bad = frame.loc[frame[value].isna(), by].drop_duplicates().to_dict("records")
        raise ValueError(f"missing {value!r} for {bad}")
    grouped = frame.groupby(by, sort=True)[value]
    result = pd.DataFrame({"mean": grouped.mean(), "sd": grouped.std(ddof=1), "n": grouped.size()})
    return result.reset_index()


def format_mean_sd(mean: float, sd: float, n: int, digits: int = 2) -> str:
    """'48.46 ± 0.36'; a single run is written '48.46 (n=1)' since it has no spread."""
    if not np.isfinite(mean):
        return "n/a"
    if n <= 1 or not np.isfinite(sd):
        return f"{mean:.{digits}f} (n={n})"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


@dataclass(frozen=True)
class Retention:
    """Outcome of the Table 1 retention rule: the runs kept, the runs dropped and why."""

    retained: pd.DataFrame
    dropped: pd.DataFrame
    threshold: float
    column: str

    def summary(self) -> str:
        if self.dropped.empty:
            return f"all {len(self.retained)} runs kept ({self.column} >= {self.threshold})"
        return (
            f"{len(self.dropped)} of {len(self.retained) + len(self.dropped)} runs dropped "
            f"({self.column} < {self.threshold})"
        )


def retain_runs(runs: pd.DataFrame, format_column: str, threshold: float = 0.8) -> Retention:
    """Table 1's rule: keep a run when its validation format at the selection step is ``>= threshold``.

    ``runs`` has one row per run. A run without a validation format raises ValueError instead of being
    dropped silently. ``dropped`` carries an ``exclusion_reason`` column.
    """
    _require_columns(runs, [format_column])
    if runs[format_column].isna().any():
        raise ValueError(
            f"{int(runs[format_column].isna().sum())} runs have no {format_column!r}; "
            "the retention rule needs a validation format for every run"
        )
    keep = runs[format_column] >= threshold
    dropped = runs.loc[~keep].copy()
    dropped["exclusion_reason"] = [f"{format_column}={value:.3f} < {threshold}" for value in dropped[format_column]]
    return Retention(runs.loc[keep].copy(), dropped, threshold, format_column)
