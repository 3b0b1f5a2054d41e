"""How much, not only whether: the difference of two arms with a two-level bootstrap confidence interval.

A test says whether a method differs from its baseline; it does not say by how much. The effect size of a claim is
``statistic(method) - statistic(baseline)``: the difference of median crossing steps for a crossing claim
(negative: the method is faster), of means for a non-inferiority claim.

Warm starts are the unit of replication. Every run trains from one of a few independent warm-start policies, and
the seeds of one warm start share it, so they are not independent draws of what a method does: a good warm start
makes all of its seeds fast. The interval therefore resamples at two levels: warm starts with replacement, then
each arm's seeds within every drawn warm start. The method and the baseline of a claim share their warm starts
(seed s of both arms trains from the same one), so one draw of warm starts serves both arms: the comparison stays
paired by warm start, as in the stratified log-rank test and the paired non-inferiority bound of
:mod:`dara.analysis.claims`. Both arms must therefore have the same warm starts (the claims leave out, and say so,
those only one arm has). With one warm start (results without a ``warm_start`` column) it is the ordinary
bootstrap of each arm's seeds. No library bootstraps two levels (``scipy.stats.bootstrap`` resamples independent
observations), so it is written here, vectorised on numpy.

Never-crossing seeds have no step. :func:`crossing_steps` puts them at the run's last step + 1, the earliest
step at which they could still cross, so the difference is a bound, not an estimate, when censored seeds
decide a median: a baseline whose median seed never crossed makes a faster method look *less* faster than
it may be (conservative for a "faster" claim), a method whose median seed never crossed makes it look faster
than it may be. The claims table says how many seeds crossed beside every difference.

The bootstrap draws from a generator with a fixed seed, so the same inputs give the same interval on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dara.analysis.crossing import steps_never_after_last

BOOTSTRAP_SEED = 20261001  # any fixed value: the interval must not change between two builds of REPORT.md
BOOTSTRAP_RESAMPLES = 10_000
def lower_median(values, axis=None):
    """The lower of the two middle values (the middle one for an odd count), NaN ignored: the median the study shows
    (`dara.analysis.crossing.median_crossing_step`, Kaplan-Meier) reads off runs of equal length, the first step by
    which half of them have crossed, where numpy's median would average the two middle steps."""
    return np.nanquantile(values, 0.5, axis=axis, method="inverted_cdf")


# the statistic of each arm; nan-aware because a resample pads warm starts with fewer seeds with NaN
STATISTICS = {"median": lower_median, "mean": np.nanmean}


@dataclass(frozen=True)
class BootstrapDifference:
    """``difference`` = statistic(a) - statistic(b); [``low``, ``high``] its two-level percentile-bootstrap interval
    at ``confidence``; ``warm_starts``: how many warm starts the bootstrap resampled."""

    statistic: str
    difference: float
    low: float
    high: float
    confidence: float
    n_a: int
    n_b: int
    warm_starts: int

    def text(self, unit: str = "steps", spec: str = "+g") -> str:
        """E.g. "-4.5 steps (95 % CI -7 to +0)"; ``spec``: the numbers' format ("+g" for steps, "+.2f" for percent)."""
        percent = f"{100 * self.confidence:g} %"
        return f"{self.difference:{spec}} {unit} ({percent} CI {self.low:{spec}} to {self.high:{spec}})"


def _validated(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (put never-crossing runs at a step first), got {array.tolist()}")
    return array


def _arm(values, warm_starts, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One arm's values, validated, and each value's warm start: all 0 (one warm start) when ``warm_starts`` is None."""
    array = _validated(values, name)
    if warm_starts is None:
        return array, np.zeros(len(array), dtype=np.int64)
    labels = np.asarray(warm_starts)
    if labels.shape != array.shape:
        raise ValueError(f"warm_starts_{name} must give one warm start per value of {name}: shapes "
                         f"{labels.shape} and {array.shape}")
    if pd.isna(labels).any():
        raise ValueError(f"warm_starts_{name} has missing warm starts: {labels.tolist()}")
    return array, labels


def _padded(values: np.ndarray, labels: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values as a (warm start, seed) matrix in ``order`` of warm starts, padded with NaN, and the seeds per row."""
    rows = [values[labels == label] for label in order]
    counts = np.array([len(row) for row in rows])
    matrix = np.full((len(rows), counts.max()), np.nan)
    for index, row in enumerate(rows):
        matrix[index, :len(row)] = row
    return matrix, counts


def bootstrap_difference(a, b, warm_starts_a=None, warm_starts_b=None, *, statistic: str = "median",
                         confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                         seed: int = BOOTSTRAP_SEED) -> BootstrapDifference:
    """``statistic`` of ``a`` minus that of ``b`` and its two-level percentile-bootstrap interval.

    Each resample draws as many warm starts as there are, with replacement (one draw for both arms: they are paired
    by warm start), then, for each drawn warm start and each arm, as many of its seeds as that arm has there, with
    replacement; the arm's statistic is taken over the pooled drawn seeds. The interval is the ``(1 - confidence) /
    2`` and ``(1 + confidence) / 2`` quantiles of the resampled differences. ``warm_starts_a``/``_b``: each value's
    warm start (None: one warm start for all); both arms must have the same warm starts. With three seeds per arm
    the interval is wide and lumpy: it can only take values that are differences of observed values, which is what
    three seeds can say.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    point, differences = resampled_differences(a, b, warm_starts_a, warm_starts_b, statistic=statistic,
                                               resamples=resamples, seed=seed)
    tail = (1 - confidence) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    (a_values, a_labels), (b_values, _) = _arm(a, warm_starts_a, "a"), _arm(b, warm_starts_b, "b")
    return BootstrapDifference(statistic, point, float(low), float(high), confidence, len(a_values), len(b_values),
                               len(np.unique(a_labels)))


def resampled_differences(a, b, warm_starts_a=None, warm_starts_b=None, *, statistic: str = "median",
                          resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, np.ndarray]:
    """``statistic(a) - statistic(b)`` and its ``resamples`` two-level bootstrap draws (as `bootstrap_difference`
    draws them), for statistics of differences (a contrast of two independent comparisons subtracts their draws)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {sorted(STATISTICS)}, got {statistic!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    a_array, a_labels = _arm(a, warm_starts_a, "a")
    b_array, b_labels = _arm(b, warm_starts_b, "b")
    order = np.unique(a_labels)
    if not np.array_equal(order, np.unique(b_labels)):
        raise ValueError(f"both arms must have the same warm starts (the bootstrap pairs them): a has "
                         f"{order.tolist()}, b has {np.unique(b_labels).tolist()}")
    reduce = STATISTICS[statistic]
    generator = np.random.default_rng(seed)
    drawn = generator.integers(0, len(order), (resamples, len(order)))  # warm starts, shared by both arms

    def resampled(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
        matrix, counts = _padded(values, labels, order)
        seeds = counts[drawn][..., None]  # (resamples, warm starts, 1): the drawn warm start's seeds
        slots = np.arange(matrix.shape[1])
        picks = generator.integers(0, seeds, (resamples, len(order), len(slots)))
        # a warm start with fewer seeds than the widest fills its first `seeds` slots only
        draws = np.where(slots < seeds, matrix[drawn[..., None], picks], np.nan)
        return reduce(draws.reshape(resamples, -1), axis=1)

    differences = resampled(a_array, a_labels) - resampled(b_array, b_labels)
    return float(reduce(a_array) - reduce(b_array)), differences


def bootstrap_median_difference(a, b, warm_starts_a=None, warm_starts_b=None, **options) -> BootstrapDifference:
    """Median of ``a`` minus median of ``b`` (crossing steps) with its two-level bootstrap interval."""
    return bootstrap_difference(a, b, warm_starts_a, warm_starts_b, statistic="median", **options)


def bootstrap_mean_difference(a, b, warm_starts_a=None, warm_starts_b=None, **options) -> BootstrapDifference:
    """Mean of ``a`` minus mean of ``b`` (final scores) with its two-level bootstrap interval."""
    return bootstrap_difference(a, b, warm_starts_a, warm_starts_b, statistic="mean", **options)


def per_warm_start_differences(a, b, warm_starts_a, warm_starts_b, *, statistic: str = "median") -> dict:
    """``statistic(a) - statistic(b)`` within each warm start both arms have, in warm-start order: how the effect
    varies between warm starts (one warm start pulling the pooled effect shows here)."""
    a_array, a_labels = _arm(a, warm_starts_a, "a")
    b_array, b_labels = _arm(b, warm_starts_b, "b")
    reduce = STATISTICS[statistic]
    shared = np.intersect1d(a_labels, b_labels)
    return {label.item(): float(reduce(a_array[a_labels == label]) - reduce(b_array[b_labels == label]))
            for label in shared}


def crossing_steps(records: pd.DataFrame) -> np.ndarray:
    """Crossing steps of crossing records (``step``, NaN when never crossed, and ``last_step``), with every
    never-crossing run put at its last step + 1 (see the module docstring for what that makes of a median). The rule
    lives with the other censoring rules in :mod:`dara.analysis.crossing`."""
    return steps_never_after_last(records)
