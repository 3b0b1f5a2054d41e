"""Reading what the training and evaluation stages wrote, keyed by (task, method, G, seed), with each run's warm start.

Files lie in the run layer's folders (`dara.runs`):
``results/{scale}[/{backend}]/runs/{task}[-{model}]/{method}/G{G}/seed{seed}/metrics.parquet`` and
``results/{scale}[/{backend}]/eval/{task}[-{model}]/{method}/G{G}/seed{seed}/step{N}.json``. Who a run is comes from
its own record, by `dara.runs.Run`'s field names: the config.yaml beside its metrics (`dara.runs.run_identity`), an
evaluation's own fields (``task``, ``method``, ``group_size``, ``seed``, ``warm_start``; `dara.evaluation.tiny_heldout`), or,
for an evaluation that names none (the paper scale's scorers), its run folder's config.yaml. A record that is
missing or disagrees with its folder's names is an error naming the file, so a file moved elsewhere cannot be
mislabelled silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from dara.experiments import checked_warm_start
from dara.runs import check_identity, check_row_steps, run_dir_of_evaluation, run_identity, task_folder

RUN_KEYS = ("task", "method", "G", "seed")
"""The analysis' run keys. ``task`` is the task folder the run is read from (`dara.runs.Run.task_dir`:
``<task>-<model>`` in a model's own folder at the scales with several models, the task alone elsewhere and in the
task's shared view); ``G`` is `dara.runs.Run.group_size`, named as the tables print it."""
# Which of its task's independent warm-start policies a run trained from (dara.runs.Run.warm_start): read from the
# run's own record, 0 where a record predates several warm starts (one policy per task). Not a folder name: a
# function of the seed and the experiment.
WARM_START = "warm_start"


def keys_of(frame: pd.DataFrame) -> list[str]:
    """The run keys a frame is grouped by: RUN_KEYS, and the warm start where the frame has it (a function of the
    run, so it never splits a run's rows; grouping by it keeps it as a column)."""
    return [*RUN_KEYS, WARM_START] if WARM_START in frame.columns else list(RUN_KEYS)


_STEP_PATTERN = re.compile(r"step(?P<step>\d+)\.json$")


def _analysis_keys(identity: dict, task_dir: str) -> dict:
    """A run's analysis keys (RUN_KEYS and WARM_START) from its identity by `Run`'s field names."""
    return {"task": task_dir, "method": identity["method"], "G": identity["group_size"], "seed": identity["seed"],
            WARM_START: identity["warm_start"]}


def run_keys(run_dir) -> dict:
    """The analysis keys (task, method, G, seed, warm start) of a run folder, from its config.yaml
    (`dara.runs.run_identity`: checked against the folder's names)."""
    identity = run_identity(run_dir)
    return _analysis_keys(identity, identity["task_dir"])


def _run_keys_and_backend(run_dir) -> tuple[dict, str]:
    identity = run_identity(run_dir)
    return _analysis_keys(identity, identity["task_dir"]), identity["backend"]


def load_metrics(paths: Iterable) -> pd.DataFrame:
    """Concatenate ``metrics.parquet`` files into one long frame with the run keys and the warm start (`WARM_START`)
    from each run's config.yaml as leading columns (`run_keys`).

    Each file must have a ``step`` column without duplicates, its rows the policy after that many updates
    (`dara.runs.check_row_steps`); files are sorted by step.
    """
    frames = []
    for path in paths:
        path = Path(path)
        run, backend = _run_keys_and_backend(path.parent)
        frame = pd.read_parquet(path)
        if "step" not in frame.columns:
            raise ValueError(f"{path} has no 'step' column")
        check_row_steps(frame, path, backend)
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
    """One row per evaluation JSON: the run keys (`_evaluation_keys`), ``step`` (from the file name) and every
    numeric top-level field of the JSON (nested dicts are flattened with '/' between keys)."""
    rows = []
    for path in paths:
        path = Path(path)
        match = _STEP_PATTERN.search(path.name)
        if match is None:
            raise ValueError(f"{path} is not named step<N>.json")
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        row = {**_evaluation_keys(path, record), "step": int(match["step"])}
        if "step" in record and str(record["step"]) != str(row["step"]):
            raise ValueError(f"{path}: step={record['step']!r} in the file but {row['step']!r} in its name")
        row.update(_flatten_numbers({k: v for k, v in record.items()
                                     if k not in _NOT_METRICS and k not in _PROVENANCE_FIELDS}))
        rows.append(row)
    if not rows:
        raise ValueError("no evaluation files given")
    frame = pd.DataFrame(rows).sort_values([*RUN_KEYS, "step"]).reset_index(drop=True)
    return frame[[*RUN_KEYS, WARM_START, *(c for c in frame.columns if c not in (*RUN_KEYS, WARM_START))]]


# Fields of an evaluation JSON that say where and how it was made, not what it measured: never a metric column.
_PROVENANCE_FIELDS = {WARM_START, "machine", "code_revision", "sampling"}
# The run an evaluation JSON names (dara.evaluation.tiny_heldout writes them all, by Run's field names) and its step.
_IDENTITY_FIELDS = ("task", "method", "group_size", "seed")
_NOT_METRICS = {*_IDENTITY_FIELDS, "step"}


def _evaluation_keys(path: Path, record: dict) -> dict:
    """The analysis keys of an evaluation: from its own identity fields, or where it names none (the paper scale's
    scorers) from its run folder's config.yaml (`dara.runs.run_dir_of_evaluation`); checked against its folder."""
    named = [field for field in _IDENTITY_FIELDS if field in record]
    if not named:
        identity = run_identity(run_dir_of_evaluation(path.parent))
        return _analysis_keys(identity, identity["task_dir"])
    if len(named) < len(_IDENTITY_FIELDS):
        raise ValueError(f"{path} names {', '.join(named)} of its run but not "
                         f"{', '.join(f for f in _IDENTITY_FIELDS if f not in named)}")
    # no model: the tiny evaluation of a verl_cpu run records none (its folder names it), and a BFCL record's
    # "model" is the scorer's
    identity = {field: record[field] for field in _IDENTITY_FIELDS}
    identity[WARM_START] = checked_warm_start(record.get(WARM_START, 0), f"{path}: ")
    folder = check_identity(path.parent, identity, "the file", fields=_IDENTITY_FIELDS)
    return _analysis_keys(identity, task_folder(folder["task"], folder["model"]))


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
