"""Effect sizes of crossing claims and the run-length-scaled stable-crossing span, on cases with known answers."""

import itertools

import numpy as np
import pandas as pd
import pytest

from dara.analysis.crossing import stable_crossing_span
from dara.analysis.effect_size import bootstrap_median_difference, crossing_steps


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
    # distribution of the median difference; its 2.5 % and 97.5 % quantiles are the interval's answer
    a, b = [10, 12, 15, 30], [14, 20, 22, 41]
    a_medians = [np.median(draw) for draw in itertools.product(a, repeat=len(a))]
    b_medians = [np.median(draw) for draw in itertools.product(b, repeat=len(b))]
    exact_low, exact_high = np.quantile(np.subtract.outer(a_medians, b_medians).ravel(), [0.025, 0.975])
    effect = bootstrap_median_difference(a, b)
    assert effect.difference == 13.5 - 21.0
    assert (effect.low, effect.high) == (exact_low, exact_high)


def test_the_bootstrap_is_reproducible_and_seeded():
    a, b = [3, 9, 4, 12, 7], [10, 30, 11, 25, 40]
    first, second = bootstrap_median_difference(a, b), bootstrap_median_difference(a, b)
    assert first == second
    other = [bootstrap_median_difference(a, b, seed=seed, resamples=50) for seed in range(5)]
    assert len({(e.low, e.high) for e in other}) > 1  # the seed is used, not ignored


@pytest.mark.parametrize("a, b, options", [([], [1], {}), ([1, np.nan], [1], {}), ([1], [2], {"confidence": 1.0}),
                                           ([1], [2], {"resamples": 0})])
def test_bootstrap_rejects_bad_input(a, b, options):
    with pytest.raises(ValueError):
        bootstrap_median_difference(a, b, **options)


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
