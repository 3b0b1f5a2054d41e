"""Effect sizes of claims (one- and two-level bootstrap) and the run-length-scaled stable-crossing span, on cases with
known answers."""

import itertools

import numpy as np
import pandas as pd
import pytest

from dara.analysis.crossing import stable_crossing_span
from dara.analysis.effect_size import (bootstrap_difference, bootstrap_mean_difference, bootstrap_median_difference,
                                       crossing_steps, per_warm_start_differences)


def test_identical_seeds_give_a_zero_width_interval_at_the_difference():
    effect = bootstrap_median_difference([5, 5, 5], [8, 8, 8])
    assert (effect.difference, effect.low, effect.high) == (-3.0, -3.0, -3.0)


def test_three_seeds_interval_is_the_exact_bootstrap_quantiles():
    # a resample of {1, 2, 3} has median 1 with probability 7/27 (at least two draws of 1) and 3 likewise;
    # b is constant, so the 2.5 % and 97.5 % quantiles of the difference are exactly 1 and 3
    effect = bootstrap_median_difference([1, 2, 3], [0, 0, 0])
    assert (effect.difference, effect.low, effect.high) == (2.0, 1.0, 3.0)


def test_interval_matches_the_exact_bootstrap_distribution():
    # four seeds per method: all 4**4 x 4**4 equally likely resamples enumerated give the exact bootstrap
    # distribution of the median difference; its 2.5 % and 97.5 % quantiles are the interval's answer. The median is
    # the lower middle value (the Kaplan-Meier median of four runs of equal length), not numpy's average of the two.
    a, b = [10, 12, 15, 30], [14, 20, 22, 41]
    a_medians = [sorted(draw)[1] for draw in itertools.product(a, repeat=len(a))]
    b_medians = [sorted(draw)[1] for draw in itertools.product(b, repeat=len(b))]
    exact_low, exact_high = np.quantile(np.subtract.outer(a_medians, b_medians).ravel(), [0.025, 0.975])
    effect = bootstrap_median_difference(a, b)
    assert effect.difference == 12 - 20
    assert (effect.low, effect.high) == (exact_low, exact_high)


def test_the_median_difference_agrees_with_the_kaplan_meier_medians_of_the_arms():
    """The effect size's median is the one the claims' text shows (crossing.median_crossing_step): for runs of one
    length with a never-crossing run put at its last step + 1, both read the lower middle value."""
    from dara.analysis.crossing import median_crossing_step

    steps = pd.Series([9.0, 11.0, 14.0, np.nan])
    last = pd.Series([29, 29, 29, 29])
    other = pd.Series([12.0, 13.0, 20.0, 22.0])
    effect = bootstrap_median_difference(steps.fillna(last + 1), other)
    assert effect.difference == median_crossing_step(steps, last) - median_crossing_step(other, last) == 11 - 13


def test_the_bootstrap_is_reproducible_and_seeded():
    a, b = [3, 9, 4, 12, 7], [10, 30, 11, 25, 40]
    first, second = bootstrap_median_difference(a, b), bootstrap_median_difference(a, b)
    assert first == second
    other = [bootstrap_median_difference(a, b, seed=seed, resamples=50) for seed in range(5)]
    assert len({(e.low, e.high) for e in other}) > 1  # the seed is used, not ignored


@pytest.mark.parametrize("a, b, options, message", [
    ([], [1], {}, "non-empty"), ([1, np.nan], [1], {}, "finite"), ([1], [2], {"confidence": 1.0}, "confidence"),
    ([1], [2], {"resamples": 0}, "resamples"), ([1], [2], {"statistic": "mode"}, "statistic"),
    ([1, 2], [3, 4], {"warm_starts_a": [0, 1], "warm_starts_b": [0, 0]}, "same warm starts"),
    ([1, 2], [3, 4], {"warm_starts_a": [0], "warm_starts_b": [0, 0]}, "one warm start per value"),
    ([1, 2], [3, 4], {"warm_starts_a": [0, np.nan], "warm_starts_b": [0, 0]}, "missing warm starts"),
])
def test_bootstrap_rejects_bad_input_naming_the_problem(a, b, options, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_difference(a, b, **options)


# five warm starts of four seeds each; every seed of a warm start ends alike: all spread is between warm starts
BETWEEN = np.repeat([0.0, 10.0, 20.0, 30.0, 40.0], 4)
WARM_STARTS = np.repeat(np.arange(5), 4)


def test_two_level_bootstrap_is_seeded():
    a, b = BETWEEN + np.arange(20) % 3, np.full(20, 5.0)
    first = bootstrap_mean_difference(a, b, WARM_STARTS, WARM_STARTS)
    assert first == bootstrap_mean_difference(a, b, WARM_STARTS, WARM_STARTS)
    assert first.warm_starts == 5 and (first.n_a, first.n_b) == (20, 20)
    other = bootstrap_mean_difference(a, b, WARM_STARTS, WARM_STARTS, seed=1)
    assert (other.low, other.high) != (first.low, first.high)


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_two_level_bootstrap_resamples_warm_starts_not_seeds(statistic):
    # seeds as independent draws pretend to twenty replicates; there are five (one per warm start), so the interval
    # over warm starts is about sqrt(4) = 2 times as wide
    b = np.zeros(20)
    seeds = bootstrap_difference(BETWEEN, b, statistic=statistic)
    warm = bootstrap_difference(BETWEEN, b, WARM_STARTS, WARM_STARTS, statistic=statistic)
    assert seeds.difference == warm.difference == 20.0
    assert warm.high - warm.low > 1.5 * (seeds.high - seeds.low)
    # mean of five warm starts drawn with replacement: its extremes are 0 and 40 (each 1 / 5**5 likely)
    assert 0.0 <= warm.low < 20.0 < warm.high <= 40.0


def test_one_draw_of_warm_starts_serves_both_arms():
    # both arms share each warm start's level: the difference within every warm start is -3, whatever is drawn
    paired = bootstrap_mean_difference(BETWEEN, BETWEEN + 3, WARM_STARTS, WARM_STARTS)
    assert (paired.difference, paired.low, paired.high) == pytest.approx((-3.0, -3.0, -3.0))


def test_warm_starts_with_unequal_seeds_draw_each_warm_starts_own_seeds():
    # warm start 0 has one seed, warm start 1 three: a resample draws 1 or 3 values per drawn warm start
    a, labels = np.array([100.0, 1.0, 2.0, 3.0]), np.array([0, 1, 1, 1])
    effect = bootstrap_mean_difference(a, np.zeros(4), labels, labels)
    assert effect.difference == pytest.approx(26.5)
    # a quarter of resamples draw warm start 0 twice: two draws of 100, mean 100, the 97.5 % quantile; another
    # quarter draw warm start 1 twice: six draws of {1, 2, 3}, whose lower tail holds the 2.5 % quantile
    assert effect.high == 100.0 and 1.0 < effect.low < 2.0
    # seeds pooled as one warm start: four draws of 100 are rare (1 / 256), so the top of the interval is lower
    assert bootstrap_mean_difference(a, np.zeros(4)).high < 100.0


def test_per_warm_start_differences_compare_within_each_shared_warm_start():
    found = per_warm_start_differences([10, 12, 30, 50], [14, 16, 36, 60], [0, 0, 1, 2], [0, 0, 1, 3])
    assert found == {0: -4.0, 1: -6.0}  # warm starts 2 and 3 have one arm only


def test_never_crossing_runs_count_from_the_step_after_their_last():
    records = pd.DataFrame({"step": pd.array([12, None, 7], dtype="Float64"), "last_step": [20, 20, 30]})
    assert crossing_steps(records).tolist() == [12.0, 21.0, 7.0]


def test_stable_crossing_span_scales_with_the_run_length():
    settings = {"window": 10, "future": 20, "window_fraction": 0.15, "future_fraction": 0.25}
    assert stable_crossing_span(settings, 20) == (3, 5)
    assert stable_crossing_span(settings, 30) == (5, 8)  # 4.5 and 7.5 round half up
    assert stable_crossing_span(settings, 3) == (1, 1)  # never below one step
    assert stable_crossing_span({"window": 10, "future": 20}, 200) == (10, 20)  # the paper's fixed span
    with pytest.raises(ValueError):
        stable_crossing_span(settings, 0)
