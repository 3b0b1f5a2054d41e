"""verl training logs (the ``file`` logger's JSONL) -> the per-run ``metrics.parquet`` of every scale.

verl's file logger writes one ``{"step": N, "data": {name: value}}`` line per step and truncates its file when it
opens it, so the launcher gives every attempt of a run its own file (``verl_logs/attempt<k>.jsonl``). A run resumed
from its checkpoint at step N first logs a validation-only record at step N (``val_before_train``), then re-logs the
steps after N; records of one step are merged, a later attempt's value winning for a metric logged twice, so the
validation record does not erase step N's training metrics.

Columns follow the tiny scale (`dara.tiny.trainer`): ``step``, ``reward/<name>``, ``density/<name>``,
``weight/<name>``, ``active_groups/<name>``, ``energy_pos/<name>``, ``energy_neg/<name>`` (and the calibrated
energies), ``n_groups``, ``val/<name>`` (held-out validation means, on validation steps), ``entropy``, ``response_length``, ``clip_fraction``, ``kl``, ``seconds``; every verl
metric is kept as well under its own name (``verl/<name>``), so nothing the trainer logged is lost.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dara.advantages import METRIC_PREFIX
from dara.io import write_parquet_atomic

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


def metrics_frame(steps: dict[int, dict[str, float]], reward_names: Iterable[str]) -> pd.DataFrame:
    """The shared per-step table of one run (validation-only steps, without training metrics, are skipped)."""
    reward_names = list(reward_names)
    rows = []
    for step in sorted(steps):
        data = steps[step]
        if "training/global_step" not in data and not any(key.startswith(METRIC_PREFIX) for key in data):
            continue  # a validation-only record (step 0 before training)
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
