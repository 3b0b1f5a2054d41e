"""verl training logs (the ``file`` logger's JSONL) -> the per-run ``metrics.parquet`` of every scale.

verl's file logger writes one ``{"step": N, "data": {name: value}}`` line per step and truncates its file when it
opens it, so the launcher gives every attempt of a run its own file (``verl_logs/attempt<k>.jsonl``). A run resumed
from its checkpoint at step N first logs a validation-only record at step N (``val_before_train``), then re-logs the
steps after N; records of one step are merged, a later attempt's value winning for a metric logged twice, so the
validation record does not erase step N's training metrics.

Columns follow the tiny scale (`dara.tiny.trainer`): ``step``, ``reward/<name>``, ``density/<name>``,
``weight/<name>``, ``active_groups/<name>``, ``energy_pos/<name>``, ``energy_neg/<name>`` (and the calibrated
energies), ``n_groups``, ``val/<name>`` (held-out validation means, on validation steps), ``entropy``,
``response_length``, ``clip_fraction``, ``kl``, ``seconds``; every verl metric is kept as well under its own name
(``verl/<name>``).

Steps follow the tiny trainer: row ``step = s`` holds the rollout of the policy after ``s`` updates (row 0: the
starting policy). verl counts its global steps from 1, and the rollout of its step ``k`` is sampled from the
policy after ``k - 1`` updates (the sync trainer hands the actor's weights to the rollout at the end of each step),
so the training metrics of verl step ``k`` become row ``k - 1`` (`dara.verl_plugin.policy_step`);
``verl/training/global_step`` keeps verl's number (``step + 1``). A validation logged at verl step ``k`` ran after
that step's update (or, at step 0 or a resumed checkpoint's step, before training: ``val_before_train``), so it
describes the policy after ``k`` updates and joins row ``k``. The validation of the last policy, which no rollout sampled, has no row; it
stays in ``verl_logs/``, and the evaluation stage evaluates that policy's checkpoint (``checkpoints/step<N>``,
verl's ``global_step_<N>``: the policy after N updates, the row convention already).

A metrics.parquet written before this conversion numbered its rows as verl did; `dara.runs.check_row_steps`
refuses it, and ``python -m dara.verl_backend.logs <run folder> ...`` rewrites it from the run's ``verl_logs/``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dara.advantages import METRIC_PREFIX
from dara.io import write_parquet_atomic
from dara.verl_plugin import policy_step

# verl metric -> shared column (first match wins). reward/<name> and the DARA diagnostics come from the dara/ metrics
# that dara.verl_plugin.trainer logs.
VERL_COLUMNS = {
    "entropy": ("actor/entropy",),
    "response_length": ("response_length/mean",),
    "clip_fraction": ("actor/pg_clipfrac",),
    # KL to the reference policy, as the tiny scale's column: the actor's KL loss (math) or the reward-KL penalty
    # (tool calling). actor/ppo_kl (old vs current policy) is another quantity; it stays as verl/actor/ppo_kl.
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "seconds": ("timing_s/step",),
    "score": ("critic/score/mean",),
}


# verl's validation metrics: val-core/<data_source>/<reward key>/mean@<n> (val-aux for the non-core ones).
VALIDATION_KEY = re.compile(r"^val-(?:core|aux)/[^/]+/(?P<name>[^/]+)/mean@\d+$")
# Every metric verl's validation logs (`PPOTrainer._validate`) starts with one of these.
VALIDATION_PREFIXES = ("val-core/", "val-aux/")
def read_jsonl_logs(paths: Sequence[str | Path]) -> dict[int, dict[str, float]]:
    """Per-step metric dicts from verl file-logger files; a step's records are merged, later files (attempts)
    overriding earlier ones metric by metric."""
    steps: dict[int, dict[str, float]] = {}
    for path in paths:
        with open(path, "rb") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    last_line = not handle.peek(1) if hasattr(handle, "peek") else False
                    if last_line:
                        break  # a line cut by a killed job: the step is re-logged after resuming
                    raise ValueError(f"{path}:{line_number}: not a JSON line ({error})") from None
                if not isinstance(record, dict) or "step" not in record or not isinstance(record.get("data"), dict):
                    raise ValueError(f"{path}:{line_number}: expected {{'step': N, 'data': {{...}}}}, got {line[:80]!r}")
                steps.setdefault(int(record["step"]), {}).update(record["data"])
    return steps


def _split_validation(data: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """One verl step's metrics -> (training metrics, validation metrics)."""
    validation = {key: value for key, value in data.items() if key.startswith(VALIDATION_PREFIXES)}
    return {key: value for key, value in data.items() if key not in validation}, validation


def metrics_frame(steps: dict[int, dict[str, float]], reward_names: Iterable[str]) -> pd.DataFrame:
    """The shared per-step table of one run, from verl's per-step metrics (`read_jsonl_logs`): row ``s`` holds
    the training metrics of verl step ``s + 1`` and the validation of verl step ``s`` (both: the policy after ``s``
    updates; see the module docstring). A validation whose policy has no rollout row (the last) is left out."""
    reward_names = list(reward_names)
    training: dict[int, dict[str, float]] = {}
    validation: dict[int, dict[str, float]] = {}
    for verl_step, logged in steps.items():
        trained, validated = _split_validation(logged)
        if "training/global_step" in trained or any(key.startswith(METRIC_PREFIX) for key in trained):
            training[policy_step(verl_step)] = trained
        if validated:
            validation[verl_step] = validated  # after verl_step updates: that row
    rows = []
    for step in sorted(training):
        data = {**training[step], **validation.get(step, {})}
        row: dict[str, float] = {"step": step}
        for key, value in data.items():
            if key.startswith(METRIC_PREFIX):  # dara/reward/<name>, dara/density/<name>, ... (the DARA trainer's)
                row[key[len(METRIC_PREFIX):]] = _number(value)
        for name in reward_names:
            row.setdefault(f"reward/{name}", math.nan)
        for key, value in data.items():  # held-out validation (every test_freq steps): val/<reward key>
            match = VALIDATION_KEY.match(key)
            if match and match["name"] in reward_names:
                row[f"val/{match['name']}"] = _number(value)
        for column, sources in VERL_COLUMNS.items():
            row[column] = next((_number(data[s]) for s in sources if s in data), math.nan)
        for key, value in data.items():
            number = _number(value, strict=False)
            if number is not None:
                row[f"verl/{key}"] = number
        rows.append(row)
    if not rows:
        raise ValueError("no training step in the verl logs")
    return pd.DataFrame(rows).sort_values("step").reset_index(drop=True)


def _number(value, strict: bool = True):
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if strict:
        raise ValueError(f"metric value {value!r} is not a number")
    return None


def convert_run_logs(log_dir: str | Path, reward_names: Iterable[str], out: str | Path) -> pd.DataFrame:
    """All ``attempt<k>.jsonl`` of a run, in attempt order, -> ``out`` (metrics.parquet)."""
    paths = sorted(Path(log_dir).glob("attempt*.jsonl"), key=lambda p: int(p.stem.removeprefix("attempt")))
    if not paths:
        raise FileNotFoundError(f"no verl file-logger output (attempt*.jsonl) in {log_dir}")
    frame = metrics_frame(read_jsonl_logs(paths), reward_names)
    write_parquet_atomic(frame, out)
    return frame


def rewrite_run_metrics(run_dir: str | Path) -> pd.DataFrame:
    """A verl run's metrics.parquet written again from its ``verl_logs/``, with the reward keys its config.yaml
    records (`dara.verl_backend.launch.train` writes both)."""
    import yaml

    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no config.yaml: not a verl run folder")
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    reward_keys = (config.get("settings") or {}).get("reward_keys")
    if not reward_keys:
        raise ValueError(f"{config_path} records no settings.reward_keys: not a verl run's config")
    return convert_run_logs(run_dir / "verl_logs", reward_keys, run_dir / "metrics.parquet")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write verl runs' metrics.parquet again from their verl_logs/ "
                                                 "(rows: the policy after that many updates).")
    parser.add_argument("run_dirs", nargs="+", help="verl run folders (config.yaml, verl_logs/)")
    for run_dir in parser.parse_args(argv).run_dirs:
        frame = rewrite_run_metrics(run_dir)
        print(f"{run_dir}/metrics.parquet: rows {int(frame['step'].min())}-{int(frame['step'].max())}")


if __name__ == "__main__":
    main()
