"""Time to threshold as survival analysis: Kaplan-Meier curves and the log-rank test.

A run that never reaches the threshold is *censored* at its last step instead of dropped, so a method
whose slow seeds never cross is not flattered by reporting the median of the seeds that did.
The event is "the reward reached the threshold"; the survival function S(t) is the fraction of runs
still below the threshold after step t.

Kaplan-Meier and the two-group log-rank test are hand-written on numpy/scipy (lifelines 0.30 requires pandas < 3,
which this environment does not have); ``tests/test_analysis_survival.py`` checks both against hand computations.
The claims' test is stratified by warm start (:func:`stratified_logrank_test`): its statistic and p-value are
statsmodels' ``survdiff``; only the direction (observed minus expected crossings of one group, which ``survdiff``
does not return) is summed here from the per-stratum two-group test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _validated(durations, observed) -> tuple[np.ndarray, np.ndarray]:
    durations_array = np.asarray(durations, dtype=float)
    observed_array = np.asarray(observed)
    if durations_array.ndim != 1 or durations_array.shape != observed_array.shape:
        raise ValueError(
            f"durations and observed must be 1-D of equal length, got {durations_array.shape} and {observed_array.shape}"
        )
    if len(durations_array) == 0:
        raise ValueError("no runs: durations is empty")
    if not np.all(np.isfinite(durations_array)) or np.any(durations_array < 0):
        raise ValueError(f"durations must be finite and >= 0, got {durations_array.tolist()}")
    if observed_array.dtype != bool:
        if not np.all(np.isin(observed_array, (0, 1))):
            raise ValueError(f"observed must be booleans (or 0/1), got {observed_array.tolist()}")
        observed_array = observed_array.astype(bool)
    return durations_array, observed_array


@dataclass(frozen=True)
class KaplanMeier:
    """A Kaplan-Meier estimate. ``times[i]`` are the distinct event times (with 0 prepended), and
    ``survival[i]`` is S just after ``times[i]``; ``at_risk``/``events`` are the counts at each time."""

    times: np.ndarray
    survival: np.ndarray
    at_risk: np.ndarray
    events: np.ndarray
    n: int

    @property
    def median(self) -> float | None:
        """The first time S drops to 0.5 or below; None when it never does (too many censored runs)."""
        return self.quantile(0.5)

    def quantile(self, fraction: float) -> float | None:
        """The first time by which ``fraction`` of the runs have had the event (S drops to ``1 - fraction`` or
        below); None when it never does. ``quantile(0.5)`` is the median."""
        if not 0 < fraction < 1:
            raise ValueError(f"fraction must be strictly between 0 and 1, got {fraction}")
        # the small tolerance keeps 1 - 3/4 = 0.25 from missing S = 0.25 by a rounding error of the product
        below = np.flatnonzero(self.survival <= 1 - fraction + 1e-12)
        return float(self.times[below[0]]) if len(below) else None

    def survival_at(self, time: float) -> float:
        """S(time): the step function, right-continuous."""
        return float(self.survival[np.searchsorted(self.times, time, side="right") - 1])


def kaplan_meier(durations, observed) -> KaplanMeier:
    """Product-limit estimate S(t) = prod over event times t_i <= t of (1 - d_i / n_i).

    durations: step of the crossing (observed) or of censoring (the run's last step).
    observed: True when the threshold was reached. A run censored at the same step as an event is
    still at risk at that step (the usual convention: events come first).
    """
    durations_array, observed_array = _validated(durations, observed)
    event_times = np.unique(durations_array[observed_array])
    at_risk = np.array([np.sum(durations_array >= time) for time in event_times], dtype=np.int64)
    events = np.array([np.sum((durations_array == time) & observed_array) for time in event_times], dtype=np.int64)
    survival = np.cumprod(1.0 - events / at_risk) if len(event_times) else np.array([])
    return KaplanMeier(
        times=np.concatenate([[0.0], event_times]),
        survival=np.concatenate([[1.0], survival]),
        at_risk=np.concatenate([[len(durations_array)], at_risk]),
        events=np.concatenate([[0], events]),
        n=len(durations_array),
    )


@dataclass(frozen=True)
class LogRank:
    """Two-group log-rank test. ``observed_a``/``expected_a``: events in group A and their expectation
    under equal hazards; statistic ~ chi-square(1). NaN statistic/p when no event variance exists."""

    statistic: float
    p_value: float
    observed_a: float
    expected_a: float
    variance: float


def logrank_test(durations_a, observed_a, durations_b, observed_b) -> LogRank:
    """(O_A - E_A)^2 / V summed over pooled event times, with the hypergeometric variance
    V = sum d (n_A/n)(n_B/n)(n - d)/(n - 1)."""
    durations_a, observed_a = _validated(durations_a, observed_a)
    durations_b, observed_b = _validated(durations_b, observed_b)
    pooled_events = np.unique(np.concatenate([durations_a[observed_a], durations_b[observed_b]]))
    observed_total = expected_total = variance = 0.0
    for time in pooled_events:
        at_risk_a = np.sum(durations_a >= time)
        at_risk_b = np.sum(durations_b >= time)
        at_risk = at_risk_a + at_risk_b
        events_a = np.sum((durations_a == time) & observed_a)
        events = events_a + np.sum((durations_b == time) & observed_b)
        observed_total += events_a
        expected_total += events * at_risk_a / at_risk
        if at_risk > 1:
            variance += events * (at_risk_a / at_risk) * (at_risk_b / at_risk) * (at_risk - events) / (at_risk - 1)
    if variance <= 0:
        return LogRank(float("nan"), float("nan"), observed_total, expected_total, variance)
    from scipy import stats  # imported here: scipy.stats alone adds seconds to every figure script's start
    statistic = (observed_total - expected_total) ** 2 / variance
    return LogRank(float(statistic), float(stats.chi2.sf(statistic, df=1)), observed_total, expected_total, variance)


@dataclass(frozen=True)
class StratifiedLogRank:
    """Log-rank test stratified by warm start. ``observed_minus_expected``: group A's crossings minus their
    expectation under equal hazards, summed over strata (> 0: A crosses sooner than B); ``strata``: how many strata
    hold both groups (a stratum with one group compares nothing and adds nothing). NaN statistic/p when no crossing
    happened while both groups were at risk in one stratum (no variance: nothing to compare)."""

    statistic: float
    p_value: float
    observed_minus_expected: float
    variance: float
    strata: int


def stratified_logrank_test(durations, observed, in_a, strata) -> StratifiedLogRank:
    """Two-group log-rank test within each stratum, summed: chi-square = (sum O_A - E_A)^2 / sum V with 1 degree of
    freedom, from ``statsmodels.duration.survfunc.survdiff(..., strata=strata)`` (two-sided).

    durations/observed: as :func:`kaplan_meier`, one entry per run; in_a: True for group A's runs; strata: each
    run's stratum (its warm start). Comparing within strata keeps a difference between warm starts out of the
    comparison of the groups, when both groups trained from the same warm starts.
    """
    durations_array, observed_array = _validated(durations, observed)
    in_a_array, strata_array = np.asarray(in_a, dtype=bool), np.asarray(strata)
    if in_a_array.shape != durations_array.shape or strata_array.shape != durations_array.shape:
        raise ValueError(f"in_a and strata need one entry per run: shapes {in_a_array.shape} and "
                         f"{strata_array.shape} for {durations_array.shape[0]} runs")
    if in_a_array.all() or not in_a_array.any():
        raise ValueError("both groups need runs: in_a is all True or all False")
    observed_minus_expected = variance = 0.0
    compared = 0
    for stratum in np.unique(strata_array):
        a = (strata_array == stratum) & in_a_array
        b = (strata_array == stratum) & ~in_a_array
        if not a.any() or not b.any():
            continue
        part = logrank_test(durations_array[a], observed_array[a], durations_array[b], observed_array[b])
        observed_minus_expected += part.observed_a - part.expected_a
        variance += part.variance
        compared += 1
    if variance <= 0:
        return StratifiedLogRank(float("nan"), float("nan"), observed_minus_expected, variance, compared)
    # imported here: statsmodels adds seconds to the start of every script that only draws a Kaplan-Meier curve
    from statsmodels.duration.survfunc import survdiff

    statistic, p_value = survdiff(durations_array, observed_array.astype(int), in_a_array.astype(int),
                                  strata=strata_array)
    return StratifiedLogRank(float(statistic), float(p_value), observed_minus_expected, variance, compared)
