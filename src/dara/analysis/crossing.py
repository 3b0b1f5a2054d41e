"""Steps, crossings, censoring and the one median of crossing steps: every table, figure, claim, notebook and the
README headline asks this module, so none of them computes a crossing or picks the training rows itself
(``tests/test_analysis_crossing_home.py`` fails when a script does).

**Which rows are training steps.** Row ``s`` of a run's metrics is the batch sampled from the policy after ``s``
updates; row 0 is the starting policy (the warm start), which no method has trained yet. Crossings are searched from
``FIRST_TRAINING_STEP`` (1): :func:`training_steps` selects those rows, and both crossing rules below skip earlier
rows themselves.

**When one run crosses.** Two definitions, one per study of the paper (the authors' release: the tool study's first
step with training format >= 0.8, and ``math/tools/learning_efficiency.py`` for the math study):

- :func:`first_crossing`: the first logged training step whose value is at or above the threshold, unsmoothed.
  The tool-calling study counts "format 0.8" this way.
- :func:`first_stable_crossing`: the first step ``t`` whose trailing mean over ``window`` steps
  (``m[t] = mean(r[t-window+1..t])``) stays at or above the threshold at every step of ``[t, t+future]``.
  The math study counts length compliance this way (window 10, future 20). A run that ends before a
  candidate can be confirmed is ``pending``, not crossed.

Both take plain step and value sequences, so they work on any metric column of any run. :func:`crossing_records`
and :func:`stable_crossing_records` apply them to every run of a metrics frame: one row per run and threshold with
``step`` (NaN: never crossed) and ``last_step``.

**Censoring.** A run that never crosses is *censored* at its last step: it is known not to have crossed by then,
nothing more (:func:`survival_durations`: duration and observed, for Kaplan-Meier and the log-rank test). The
bootstrap of a median difference needs a number for such a run and puts it at its last step + 1, the earliest step
at which it could still cross (:func:`steps_never_after_last`).

**The median the study reports.** One summary of a group of runs' crossing steps, :func:`summarise_crossings` (and
:func:`crossing_summary` for a records frame): the **Kaplan-Meier median**, the first step by which half of the runs
have crossed, never-crossing runs censored at their last step; "never" (inf, NaN in tables) when fewer than half
crossed. Its quartiles are the Kaplan-Meier ones (the first step by which a quarter, three quarters, have crossed).
Where every run of a group has the same length (the pipeline's runs), this is the middle of the sorted steps with
never-crossing runs after every step, and of an even count the *lower* middle: numpy's median would average the two
middle steps (24.5 where Kaplan-Meier says 24). Tables name it "median (Kaplan-Meier)"; the headline, first_crossing.md,
the claims, the survival table, the figures, REPORT.md's comparison with the paper and the pilots all show this one.
The survival figure also shows the paper's own statistic, :func:`median_of_crossed` (never-crossing seeds dropped),
named as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from dara.analysis.kaplan_meier import kaplan_meier
from dara.analysis.run_tables import keys_of

CrossingStatus = Literal["confirmed", "pending", "not_reached"]

# Row 0 of a run is the starting policy, before any update: no method's crossing can happen there.
FIRST_TRAINING_STEP = 1


def training_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``metrics`` that are training steps (``step >= FIRST_TRAINING_STEP``): row 0, the starting
    policy, left out."""
    if "step" not in metrics.columns:
        raise ValueError(f"no 'step' column to select training steps by; have {sorted(metrics.columns)}")
    return metrics[metrics["step"] >= FIRST_TRAINING_STEP]


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
    """The first logged training step with ``value >= threshold`` (no smoothing), or None if it never happens.

    Steps before ``FIRST_TRAINING_STEP`` (row 0, the starting policy) are not searched. Gaps in ``steps`` are
    allowed: the answer is then the first *logged* step at or above the threshold.
    """
    steps_array, values_array = _validated_series(steps, values)
    training = steps_array >= FIRST_TRAINING_STEP
    if not training.any():
        raise ValueError(f"no training step (step >= {FIRST_TRAINING_STEP}) to search: steps {steps_array.tolist()}")
    steps_array, values_array = steps_array[training], values_array[training]
    reached = np.flatnonzero(values_array >= threshold)
    return int(steps_array[reached[0]]) if len(reached) else None


def first_stable_crossing(
    steps, values, threshold: float, *, window: int = 10, future: int = 20, budget: int | None = None
) -> StableCrossing:
    """First step whose ``window``-step trailing mean stays ``>= threshold`` for the next ``future`` steps.

    As the paper's ``math/tools/learning_efficiency.py``: steps ``1..N`` must all be present (steps before
    ``FIRST_TRAINING_STEP`` and steps past ``budget`` are dropped first); a candidate ``t`` needs a full window
    (``t >= window``) and ``t + future <= N``, and
    ``m[u] >= threshold`` for every ``u`` in ``[t, t + future]``.

    Raises ValueError when a step between 1 and N is missing: a trailing mean across a gap is undefined.
    """
    if window < 1 or future < 0:
        raise ValueError(f"window must be >= 1 and future >= 0, got window={window}, future={future}")
    steps_array, values_array = _validated_series(steps, values)
    keep = steps_array >= FIRST_TRAINING_STEP
    if budget is not None:
        keep &= steps_array <= budget
    steps_array, values_array = steps_array[keep], values_array[keep]
    if len(steps_array) == 0:
        raise ValueError(f"no steps >= {FIRST_TRAINING_STEP} (within the budget) to search")
    last_step = int(steps_array[-1])
    expected = np.arange(FIRST_TRAINING_STEP, last_step + 1)
    if len(steps_array) != len(expected):
        missing = np.setdiff1d(expected, steps_array)
        raise ValueError(f"stable crossing needs every step {FIRST_TRAINING_STEP}..{last_step}; "
                         f"missing steps {missing.tolist()}")
    if len(steps_array) < window:
        return StableCrossing(None, "not_reached", last_step)
    cumulative = np.concatenate([[0.0], np.cumsum(values_array)])
    # trailing[i] is the mean of the window ending at step trailing_steps[i].
    trailing = (cumulative[window:] - cumulative[:-window]) / window
    above = trailing >= threshold
    trailing_steps = steps_array[window - 1:]
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


# -- every run of a metrics frame ------------------------------------------------------------------------------------


def crossing_records(metrics: pd.DataFrame, thresholds: Mapping[str, Sequence[float]]) -> pd.DataFrame:
    """First unsmoothed crossing (:func:`first_crossing`, training steps only) of every ``reward/<name>`` in
    ``thresholds`` for every run.

    Returns the run keys (``dara.analysis.run_tables.keys_of``), reward, threshold, step (NaN when never crossed: censored)
    and last_step (the run's last training step, where a never-crossing run is censored). A reward listed in
    ``thresholds`` is skipped for a run whose task does not log it (the column is absent or empty: tasks have
    different rewards); a run with the column but some values missing raises.
    """
    records = []
    keys_named = keys_of(metrics)
    for keys, run in training_steps(metrics).groupby(keys_named, sort=True):
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
    """First stable crossing (:func:`first_stable_crossing`) of ``reward/<reward>`` per run and threshold, with its
    status; ``step`` NaN (censored at ``last_step``) when not confirmed."""
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


def outcome_records(frame: pd.DataFrame, reached: str = "reached") -> pd.DataFrame:
    """Crossing records (``step`` NaN when not reached, ``last_step``) of runs that stop at their crossing or at a
    step limit, such as the mechanism toy's (``step``: where the run stopped; ``reached``: whether it crossed)."""
    if reached not in frame.columns or "step" not in frame.columns:
        raise ValueError(f"need 'step' and {reached!r} columns; have {sorted(frame.columns)}")
    crossed = frame[reached].astype(bool)
    return frame.assign(step=frame["step"].astype(float).where(crossed), last_step=frame["step"]).astype(
        {"step": "Float64"})


# -- censoring -------------------------------------------------------------------------------------------------------


def survival_durations(records: pd.DataFrame) -> pd.DataFrame:
    """Crossing records as survival data: ``duration`` = the crossing step, or the last step for a never-crossing
    (censored) run; ``observed`` = whether it crossed."""
    durations = records.copy()
    durations["observed"] = durations["step"].notna().astype(bool)
    durations["duration"] = durations["step"].astype(float).fillna(durations["last_step"].astype(float))
    return durations


def steps_never_after_last(records: pd.DataFrame) -> np.ndarray:
    """Crossing steps of crossing records with every never-crossing run put at its last step + 1, the earliest step
    at which it could still cross: the numbers the bootstrap of a median difference resamples
    (:mod:`dara.analysis.effect_size` says what that makes of a median decided by such a run)."""
    steps = records["step"].astype(float)
    return steps.fillna(records["last_step"].astype(float) + 1).to_numpy(float)


# -- the one summary over runs ---------------------------------------------------------------------------------------

MEDIAN_NAME = "median (Kaplan-Meier)"  # how tables and captions name the median of crossing steps


@dataclass(frozen=True)
class CrossingSummary:
    """Crossing steps of a group of runs. ``median``, ``q25``, ``q75``: Kaplan-Meier (the first step by which half,
    a quarter, three quarters of the runs have crossed; never-crossing runs censored at their last step), inf when
    too few runs crossed ("never"); ``first``/``last``: the earliest and latest crossing (NaN when none crossed)."""

    n_runs: int
    n_crossed: int
    median: float
    q25: float
    q75: float
    first: float
    last: float


def _as_steps(values) -> np.ndarray:
    return pd.Series(values, dtype="Float64").astype(float).to_numpy()  # pd.NA and None -> NaN


def summarise_crossings(steps, last_steps=None) -> CrossingSummary:
    """The study's summary of crossing steps over runs (see the module docstring): Kaplan-Meier median and quartiles.

    ``steps``: each run's crossing step, NaN (or None) when it never crossed. ``last_steps``: each run's last step,
    where a never-crossing run is censored. None where they are not recorded but the runs are known to have all run
    past every crossing of the group (the pilots' tables written before pilot.csv had ``last_step``): a
    never-crossing run is then censored after the last crossing, which is where Kaplan-Meier needs it.
    """
    steps_array = _as_steps(steps)
    observed = ~np.isnan(steps_array)
    if last_steps is None:
        censor_at = np.nanmax(steps_array) if observed.any() else 0.0
        last_array = np.full(len(steps_array), censor_at)
    else:
        last_array = _as_steps(last_steps)
        if last_array.shape != steps_array.shape:
            raise ValueError(f"{len(steps_array)} crossing steps but {len(last_array)} last steps")
        if np.isnan(last_array[~observed]).any():
            raise ValueError("a never-crossing run has no last step to be censored at")
    if len(steps_array) == 0:
        return CrossingSummary(0, 0, np.inf, np.inf, np.inf, np.nan, np.nan)
    if (steps_array[observed] > last_array[observed]).any():
        raise ValueError("a crossing step lies after its run's last step")
    km = kaplan_meier(np.where(observed, steps_array, last_array), observed)
    quantile = lambda fraction: np.inf if (value := km.quantile(fraction)) is None else value  # noqa: E731
    crossed = steps_array[observed]
    return CrossingSummary(
        n_runs=len(steps_array), n_crossed=int(observed.sum()), median=quantile(0.5), q25=quantile(0.25),
        q75=quantile(0.75), first=float(crossed.min()) if len(crossed) else np.nan,
        last=float(crossed.max()) if len(crossed) else np.nan)


def median_crossing_step(steps, last_steps=None) -> float:
    """The Kaplan-Meier median crossing step of :func:`summarise_crossings`; inf when fewer than half crossed."""
    return summarise_crossings(steps, last_steps).median


def median_of_crossed(steps) -> float:
    """The paper's statistic: the median over the runs that crossed, never-crossing runs dropped (numpy's median,
    the mean of the two middle steps of an even count); NaN when none crossed. Not the study's median
    (:func:`summarise_crossings`): it flatters a method whose slow seeds never cross, and is shown only beside it."""
    crossed = _as_steps(steps)
    crossed = crossed[~np.isnan(crossed)]
    return float(np.median(crossed)) if len(crossed) else np.nan


def step_text(value: float) -> str:
    """A crossing step or a median of them for a table: "never" when inf or NaN (not reached), else ``%g``."""
    return "never" if value is None or not np.isfinite(value) else f"{value:g}"


def crossing_summary(records: pd.DataFrame, by: Sequence[str] = ("task", "method", "G", "reward", "threshold")
                     ) -> pd.DataFrame:
    """:func:`summarise_crossings` of crossing records (``step``, ``last_step``) per group ``by``.

    Columns: ``by``, n_runs, n_crossed, km_median, km_q25, km_q75 (NaN: not reached by that share of the runs),
    min/max (over the runs that crossed), steps (every run's step in record order, "never" when it did not cross).
    """
    rows = []
    for keys, group in records.groupby(list(by), sort=True):
        found = summarise_crossings(group["step"], group["last_step"])
        finite = lambda value: value if np.isfinite(value) else np.nan  # noqa: E731
        rows.append(
            {**dict(zip(by, keys if isinstance(keys, tuple) else (keys,))),
             "n_runs": found.n_runs, "n_crossed": found.n_crossed, "km_median": finite(found.median),
             "km_q25": finite(found.q25), "km_q75": finite(found.q75), "min": found.first, "max": found.last,
             "steps": " ".join(step_text(step) for step in _as_steps(group["step"]))}
        )
    return pd.DataFrame(rows, columns=[*by, "n_runs", "n_crossed", "km_median", "km_q25", "km_q75", "min", "max",
                                       "steps"])
