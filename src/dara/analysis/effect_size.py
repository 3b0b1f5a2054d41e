"""How much faster, not only whether: the difference of two medians with a bootstrap confidence interval.

A log-rank p-value says whether two methods' crossing steps differ; it does not say by how many steps. The
effect size of a crossing claim is ``median(method) - median(baseline)`` in steps (negative: the method is
faster), with a percentile-bootstrap interval that resamples each method's seeds with replacement.

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

BOOTSTRAP_SEED = 20261001  # any fixed value: the interval must not change between two builds of REPORT.md
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class MedianDifference:
    """``difference`` = median(a) - median(b); [``low``, ``high``] its percentile-bootstrap interval at ``confidence``."""

    difference: float
    low: float
    high: float
    confidence: float
    n_a: int
    n_b: int

    def text(self, unit: str = "steps") -> str:
        percent = f"{100 * self.confidence:g} %"
        return f"{self.difference:+g} {unit} ({percent} CI {self.low:+g} to {self.high:+g})"


def _validated(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (put never-crossing runs at a step first), got {array.tolist()}")
    return array


def bootstrap_median_difference(a, b, *, confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                                seed: int = BOOTSTRAP_SEED) -> MedianDifference:
    """Median of ``a`` minus median of ``b`` and its percentile-bootstrap interval.

    Each resample draws ``len(a)`` values of ``a`` and ``len(b)`` values of ``b`` with replacement (the two
    groups are independent seeds); the interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    quantiles of the resampled differences. With three seeds per method the interval is wide and lumpy: it
    can only take values that are differences of observed steps, which is what three seeds can say.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    a_array, b_array = _validated(a, "a"), _validated(b, "b")
    generator = np.random.default_rng(seed)
    a_medians = np.median(a_array[generator.integers(0, len(a_array), (resamples, len(a_array)))], axis=1)
    b_medians = np.median(b_array[generator.integers(0, len(b_array), (resamples, len(b_array)))], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(a_medians - b_medians, [tail, 1 - tail])
    return MedianDifference(float(np.median(a_array) - np.median(b_array)), float(low), float(high), confidence,
                            len(a_array), len(b_array))


def crossing_steps(records: pd.DataFrame) -> np.ndarray:
    """Crossing steps of crossing records (``step``, NaN when never crossed, and ``last_step``), with every
    never-crossing run put at its last step + 1 (see the module docstring for what that makes of a median)."""
    steps = records["step"].astype(float)
    return steps.fillna(records["last_step"].astype(float) + 1).to_numpy(float)
