"""Reading what the training and evaluation stages wrote, keyed by (task, method, G, seed), with each run's warm start.

Paths follow the run layer (`dara.runs`):
``results/{scale}[/{backend}]/runs/{task}[-{model}]/{method}/G{G}/seed{seed}/metrics.parquet`` and
``results/{scale}[/{backend}]/eval/{task}[-{model}]/{method}/G{G}/seed{seed}/step{N}.json``; the run identity is
read from the path's last four parts, so a file moved elsewhere cannot be mislabelled silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from dara.experiments import checked_warm_start
from dara.runs import check_row_steps, run_tail

RUN_KEYS = ("task", "method", "G", "seed")
# Which of its task's independent warm-start policies a run trained from (dara.runs.Run.warm_start): read from the
# run's own record (config.yaml beside metrics.parquet, the warm_start field of an evaluation), 0 where a record
# predates several warm starts (one policy per task). Not a folder name: a function of the seed and the experiment.
WARM_START = "warm_start"


def keys_of(frame: pd.DataFrame) -> list[str]:
    """The run keys a frame is grouped by: RUN_KEYS, and the warm start where the frame has it (a function of the
    run, so it never splits a run's rows; grouping by it keeps it as a column)."""
    return [*RUN_KEYS, WARM_START] if WARM_START in frame.columns else list(RUN_KEYS)


def run_warm_start(run_dir) -> int:
    """The warm start a run's config.yaml records (0 where it records none: one warm start per task)."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return 0
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return checked_warm_start(config.get(WARM_START, 0), f"{path}: ")

_STEP_PATTERN = re.compile(r"step(?P<step>\d+)\.json$")


def run_keys(run_dir) -> dict:
    """The analysis keys (task, method, G, seed) of a folder ending in ``{task}/{method}/G{G}/seed{seed}``
    (`dara.runs.run_tail`: the run layer's own folder names)."""
    tail = run_tail(run_dir)
    return {"task": tail["task_dir"], "method": tail["method"], "G": tail["group_size"], "seed": tail["seed"]}


def load_metrics(paths: Iterable) -> pd.DataFrame:
    """Concatenate ``metrics.parquet`` files into one long frame with the run keys and the warm start (`WARM_START`,
    from the run's config.yaml) as leading columns.

    Each file must have a ``step`` column without duplicates, its rows the policy after that many updates
    (`dara.runs.check_row_steps`); files are sorted by step.
    """
    frames = []
    for path in paths:
        path = Path(path)
        run = {**run_keys(path.parent), WARM_START: run_warm_start(path.parent)}
        frame = pd.read_parquet(path)
        if "step" not in frame.columns:
            raise ValueError(f"{path} has no 'step' column")
        check_row_steps(frame, path)
        if frame["step"].duplicated().any():
            raise ValueError(f"{path} repeats steps {sorted(frame.loc[frame['step'].duplicated(), 'step'].unique())}")
        frame = frame.sort_values("step").reset_index(drop=True)
        for key, value in reversed(run.items()):
            frame.insert(0, key, value)
        frames.append(frame)
    if not frames:
        raise ValueError("no metrics files given")
    return pd.concat(frames, ignore_index=True)


def reward_names(metrics: pd.DataFrame) -> list[str]:
    """Reward channel names present as ``reward/<name>`` columns, in column order."""
    return [column.split("/", 1)[1] for column in metrics.columns if column.startswith("reward/")]


def load_evaluations(paths: Iterable) -> pd.DataFrame:
    """One row per evaluation JSON: the run keys, ``step`` (from the file name) and every numeric
    top-level field of the JSON (nested dicts are flattened with '/' between keys)."""
    rows = []
    for path in paths:
        path = Path(path)
        match = _STEP_PATTERN.search(path.name)
        if match is None:
            raise ValueError(f"{path} is not named step<N>.json")
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        row = {**run_keys(path.parent), "step": int(match["step"])}
        _check_identity(path, record, row)
        row[WARM_START] = checked_warm_start(record.get(WARM_START, 0), f"{path}: ")
        row.update(_flatten_numbers({k: v for k, v in record.items()
                                     if k not in _IDENTITY_FIELDS and k not in _PROVENANCE_FIELDS}))
        rows.append(row)
    if not rows:
        raise ValueError("no evaluation files given")
    frame = pd.DataFrame(rows).sort_values([*RUN_KEYS, "step"]).reset_index(drop=True)
    return frame[[*RUN_KEYS, WARM_START, *(c for c in frame.columns if c not in (*RUN_KEYS, WARM_START))]]


# Fields of an evaluation JSON that say where and how it was made, not what it measured: never a metric column.
_PROVENANCE_FIELDS = {WARM_START, "machine", "code_revision", "sampling"}
# Fields an evaluation JSON may repeat from its path; they must agree with it.
_IDENTITY_FIELDS = {"task": "task", "method": "method", "group_size": "G", "G": "G", "seed": "seed", "step": "step"}


def _check_identity(path: Path, record: dict, row: dict) -> None:
    for field, key in _IDENTITY_FIELDS.items():
        if field not in record:
            continue
        in_file, in_path = str(record[field]), str(row[key])
        # a folder <task>-<model> (scales with a model per task) holds evaluations of <task>
        if in_file != in_path and not (field == "task" and in_path.startswith(f"{in_file}-")):
            raise ValueError(f"{path}: {field}={record[field]!r} in the file but {row[key]!r} in its path")


def _flatten_numbers(record: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten_numbers(value, f"{name}/"))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, (int, float)):
            flat[name] = float(value)
    return flat


PREFILTER = "rollout_prefilter/"


def density_column(metrics: pd.DataFrame, reward: str) -> str:
    """The density of ``reward`` a figure shows: that of the rollout pool before dynamic sampling's filter where the
    runs logged it (verl runs with ``filter_groups``: the filter keeps only groups where the summed reward varies,
    which biases the trained batch's densities toward 1), else the trained batch's (``density/<reward>``)."""
    prefilter = f"{PREFILTER}density/{reward}"
    if prefilter in metrics.columns and metrics[prefilter].notna().any():
        return prefilter
    return f"density/{reward}"


def density_label(column: str) -> str:
    """Axis-label words for a density column: the pre-filter view says so."""
    return "density π before dynamic sampling" if column.startswith(PREFILTER) else "density π"
