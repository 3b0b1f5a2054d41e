"""The same runs trained by two backends (the hand-written tiny trainer and TRL), side by side.

    frame = compare_backends({"tiny": tiny_paths, "trl": trl_paths}, reward="format", threshold=0.8)

One row per run (task, method, G, seed) present in any backend, with, per backend, the first step at which the
batch mean of ``reward/<reward>`` reaches ``threshold`` (``first_crossing``: unsmoothed, the tool study's
``format_t80``), the reward at the last step, the mean over the last ``final_window`` steps, and the last step.
A step is the number of updates before the rollout, in every backend, so the columns compare like with like.
A run missing from a backend has NaN there; a run that never crosses has a NaN crossing step and ``crossed``
False. Backend names prefix the columns: ``trl/crossing_step``, ``tiny/final``, ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from dara.analysis.crossing import first_crossing
from dara.analysis.run_tables import RUN_KEYS, load_metrics

COLUMNS = ("crossing_step", "crossed", "final", "final_mean", "last_step")


def run_summary(metrics: pd.DataFrame, reward: str, threshold: float, final_window: int = 5) -> pd.DataFrame:
    """Per run of a ``load_metrics`` frame: first crossing step of ``reward/<reward>``, final values, last step."""
    if final_window < 1:
        raise ValueError(f"final_window must be >= 1, got {final_window}")
    column = f"reward/{reward}"
    if column not in metrics.columns:
        rewards = [c.split("/", 1)[1] for c in metrics.columns if c.startswith("reward/")]
        raise ValueError(f"no column {column!r}; rewards present: {', '.join(rewards)}")
    rows = []
    for keys, run in metrics.groupby(list(RUN_KEYS), sort=True):
        run = run.sort_values("step")
        step = first_crossing(run["step"].to_numpy(), run[column].to_numpy(), threshold)
        rows.append({**dict(zip(RUN_KEYS, keys)),
                     "crossing_step": np.nan if step is None else float(step),
                     "crossed": step is not None,
                     "final": float(run[column].iloc[-1]),
                     "final_mean": float(run[column].iloc[-final_window:].mean()),
                     "last_step": int(run["step"].iloc[-1])})
    return pd.DataFrame(rows, columns=[*RUN_KEYS, *COLUMNS])


def compare_backends(paths_by_backend: Mapping[str, Iterable], reward: str, threshold: float,
                     final_window: int = 5) -> pd.DataFrame:
    """Side-by-side crossing steps and final rewards of each backend's ``metrics.parquet`` files.

    ``paths_by_backend`` maps a backend name to its metrics files; each file's run identity comes from its run's
    config.yaml (`dara.analysis.run_tables.load_metrics`), so runs of different backends line up by (task, method, G,
    seed), and steps by the one row convention of every backend (row s: the policy after s updates;
    `dara.runs.check_row_steps` refuses a verl file numbered as verl numbers its steps).
    """
    if len(paths_by_backend) < 2:
        raise ValueError(f"compare at least two backends, got {list(paths_by_backend)}")
    merged = None
    for backend, paths in paths_by_backend.items():
        if "/" in backend:
            raise ValueError(f"backend names become column prefixes and may not contain '/': {backend!r}")
        summary = run_summary(load_metrics(paths), reward, threshold, final_window)
        summary = summary.rename(columns={c: f"{backend}/{c}" for c in COLUMNS})
        merged = summary if merged is None else merged.merge(summary, on=list(RUN_KEYS), how="outer")
    return merged.sort_values(list(RUN_KEYS)).reset_index(drop=True)
