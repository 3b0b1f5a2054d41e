"""When does a training reward reach a threshold?

Two definitions, one per study of the paper (the authors' release: the tool study's first step with
training format >= 0.8, and ``math/tools/learning_efficiency.py`` for the math study):

- ``first_crossing``: the first logged step whose value is at or above the threshold, unsmoothed.
  The tool-calling study counts "format 0.8" this way.
- ``first_stable_crossing``: the first step ``t`` whose trailing mean over ``window`` steps
  (``m[t] = mean(r[t-window+1..t])``) stays at or above the threshold at every step of ``[t, t+future]``.
  The math study counts length compliance this way (window 10, future 20). A run that ends before a
  candidate can be confirmed is ``pending``, not crossed.

Both take plain step and value sequences, so they work on any metric column of any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

CrossingStatus = Literal["confirmed", "pending", "not_reached"]


@dataclass(frozen=True)
class StableCrossing:
    """Result of ``first_stable_crossing``.

    step: the confirmed crossing step, or None.
    status: "confirmed"; "pending" when the trailing mean is at or above the threshold from some step to
        the end of the run but the run ends before ``future`` more steps confirm it; else "not_reached".
    last_step: the last step of the series (where a survival analysis censors an unconfirmed run).
    """

    step: int | None
    status: CrossingStatus
    last_step: int


def _validated_series(steps, values) -> tuple[np.ndarray, np.ndarray]:
    steps_array = np.asarray(steps)
    values_array = np.asarray(values, dtype=float)
    if steps_array.ndim != 1 or values_array.ndim != 1:
        raise ValueError(f"steps and values must be 1-D, got shapes {steps_array.shape} and {values_array.shape}")
    if len(steps_array) != len(values_array):
        raise ValueError(f"steps ({len(steps_array)}) and values ({len(values_array)}) differ in length")
    if len(steps_array) == 0:
        raise ValueError("empty series: no steps to search")
    if not np.issubdtype(steps_array.dtype, np.integer):
        if not np.all(np.equal(np.mod(steps_array.astype(float), 1), 0)):
            raise ValueError(f"steps must be whole numbers, got {steps_array[:5]}...")
        steps_array = steps_array.astype(np.int64)
    if np.any(np.diff(steps_array) <= 0):
        raise ValueError("steps must be strictly increasing (sorted, no duplicate steps)")
    if not np.all(np.isfinite(values_array)):
        bad = steps_array[~np.isfinite(values_array)]
        raise ValueError(f"non-finite values at steps {bad.tolist()}")
    return steps_array, values_array


def first_crossing(steps, values, threshold: float) -> int | None:
    """The first logged step with ``value >= threshold`` (no smoothing), or None if it never happens.

    Gaps in ``steps`` are allowed: the answer is then the first *logged* step at or above the threshold.
    """
    steps_array, values_array = _validated_series(steps, values)
    reached = np.flatnonzero(values_array >= threshold)
    return int(steps_array[reached[0]]) if len(reached) else None


def first_stable_crossing(
    steps, values, threshold: float, *, window: int = 10, future: int = 20, budget: int | None = None
) -> StableCrossing:
    """First step whose ``window``-step trailing mean stays ``>= threshold`` for the next ``future`` steps.

    As the paper's ``math/tools/learning_efficiency.py``: steps ``1..N`` must all be present (step 0 and steps past ``budget`` are dropped
    first); a candidate ``t`` needs a full window (``t >= window``) and ``t + future <= N``, and
    ``m[u] >= threshold`` for every ``u`` in ``[t, t + future]``.

    Raises ValueError when a step between 1 and N is missing: a trailing mean across a gap is undefined.
    """
    if window < 1 or future < 0:
        raise ValueError(f"window must be >= 1 and future >= 0, got window={window}, future={future}")
    steps_array, values_array = _validated_series(steps, values)
    keep = steps_array >= 1
    if budget is not None:
        keep &= steps_array <= budget
    steps_array, values_array = steps_array[keep], values_array[keep]
    if len(steps_array) == 0:
        raise ValueError("no steps >= 1 (within the budget) to search")
    last_step = int(steps_array[-1])
    expected = np.arange(1, last_step + 1)
    if len(steps_array) != len(expected):
        missing = np.setdiff1d(expected, steps_array)
        raise ValueError(f"stable crossing needs every step 1..{last_step}; missing steps {missing.tolist()}")
    if last_step < window:
        return StableCrossing(None, "not_reached", last_step)
    cumulative = np.concatenate([[0.0], np.cumsum(values_array)])
    # trailing[i] is the mean of the window ending at step window + i.
    trailing = (cumulative[window:] - cumulative[:-window]) / window
    above = trailing >= threshold
    trailing_steps = np.arange(window, last_step + 1)
    # run_length[i]: how many consecutive trailing means from index i onwards are above the threshold.
    run_length = np.zeros(len(above) + 1, dtype=np.int64)
    for index in range(len(above) - 1, -1, -1):
        run_length[index] = run_length[index + 1] + 1 if above[index] else 0
    for index, step in enumerate(trailing_steps):
        if step + future > last_step:
            break
        if run_length[index] >= future + 1:
            return StableCrossing(int(step), "confirmed", last_step)
    if above[-1]:
        return StableCrossing(None, "pending", last_step)
    return StableCrossing(None, "not_reached", last_step)


def stable_crossing_span(settings: dict, run_length: int) -> tuple[int, int]:
    """The ``(window, future)`` of a stable crossing for runs of ``run_length`` steps.

    ``settings``: the ``stable_crossing`` section of ``analysis/config.yaml``. Its ``window_fraction`` and
    ``future_fraction``, when given, replace ``window`` and ``future`` by that share of the run length,
    rounded half up, at least 1 step each: a 20-step tiny run cannot hold the paper's 10-step window
    confirmed over 20 more steps, so every method would sit at "not confirmed" whatever it learned.
    """
    if run_length < 1:
        raise ValueError(f"run_length must be >= 1, got {run_length}")

    def scaled(fraction_key: str, steps_key: str) -> int:
        if fraction_key in settings:
            return max(1, int(np.floor(settings[fraction_key] * run_length + 0.5)))
        return int(settings[steps_key])

    return scaled("window_fraction", "window"), scaled("future_fraction", "future")
