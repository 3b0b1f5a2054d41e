"""Kaplan-Meier and log-rank against hand computations (the numbers in comments are worked by hand)."""

import numpy as np
import pytest
from scipy import stats

from dara.analysis.kaplan_meier import kaplan_meier, logrank_test, stratified_logrank_test


def test_kaplan_meier_hand_computed():
    # events at 2 (5 at risk), 3 (two events, 4 at risk), censored at 5, event at 6 (1 at risk)
    # S: 1 -> 4/5 = 0.8 -> 0.8 * 2/4 = 0.4 -> 0.4 * 0/1 = 0
    km = kaplan_meier([2, 3, 3, 5, 6], [True, True, True, False, True])
    assert km.times.tolist() == [0, 2, 3, 6]
    assert km.survival == pytest.approx([1.0, 0.8, 0.4, 0.0])
    assert km.at_risk.tolist() == [5, 5, 4, 1]
    assert km.median == 3.0
    assert km.survival_at(2.5) == pytest.approx(0.8)
    assert km.survival_at(5.9) == pytest.approx(0.4)


def test_kaplan_meier_censored_at_event_time_is_still_at_risk():
    km = kaplan_meier([2, 2], [1, 0])
    assert km.survival[-1] == pytest.approx(0.5)


def test_kaplan_meier_median_and_quartiles_at_exactly_one_half_despite_rounding():
    # 24 runs, one crossing per step 1..12, the rest censored at 30: S after step 12 is 12/24 = 1/2, which the
    # product (23/24)(22/23)...(12/13) misses by a rounding error (it was 0.5000000000000001 and the median slipped)
    km = kaplan_meier([*range(1, 13), *[30] * 12], [True] * 12 + [False] * 12)
    assert km.median == 12.0 and km.quantile(0.25) == 6.0 and km.quantile(0.75) is None
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        km.quantile(1.0)


def test_kaplan_meier_all_censored_has_no_median():
    km = kaplan_meier([100, 100, 100], [False, False, False])
    assert km.median is None and km.survival.tolist() == [1.0]


def test_logrank_hand_computed():
    # A: events at 1 and 3; B: event at 2, censored at 4.
    # t=1: nA=2 nB=2 d=1 -> E_A=1/2, V=1/4; t=2: nA=1 nB=2 d=1 -> E_A=1/3, V=2/9;
    # t=3: nA=1 nB=1 d=1 -> E_A=1/2, V=1/4.  O_A=2, E_A=4/3, V=13/18, chi2=(2/3)^2/(13/18)=8/13.
    result = logrank_test([1, 3], [1, 1], [2, 4], [1, 0])
    assert result.observed_a == 2
    assert result.expected_a == pytest.approx(4 / 3)
    assert result.variance == pytest.approx(13 / 18)
    assert result.statistic == pytest.approx(8 / 13)
    assert result.p_value == pytest.approx(stats.chi2.sf(8 / 13, 1))


def test_logrank_is_symmetric_and_detects_separation():
    fast = np.array([10, 11, 12, 13, 14])
    slow = np.array([30, 31, 32, 100, 100])
    slow_observed = [1, 1, 1, 0, 0]
    forward = logrank_test(fast, np.ones(5, bool), slow, slow_observed)
    backward = logrank_test(slow, slow_observed, fast, np.ones(5, bool))
    assert forward.statistic == pytest.approx(backward.statistic)
    assert forward.p_value < 0.01
    same = logrank_test(fast, np.ones(5, bool), fast, np.ones(5, bool))
    assert same.statistic == pytest.approx(0.0)


def test_logrank_without_events_is_nan_not_an_error():
    result = logrank_test([5, 5], [0, 0], [5, 5], [0, 0])
    assert np.isnan(result.statistic) and np.isnan(result.p_value)


@pytest.mark.parametrize("durations, observed", [([1, 2], [1]), ([-1], [1]), ([1], [2]), ([], [])])
def test_survival_rejects_bad_input(durations, observed):
    with pytest.raises(ValueError):
        kaplan_meier(durations, observed)


def _stratified_runs():
    """Three warm starts (strata) of very different speed; within each, group A crosses before group B."""
    durations = np.array([10, 12, 14, 11, 13, 30, 30, 32, 31, 35, 50, 52, 55, 60, 60], float)
    observed = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0], bool)
    in_a = np.array([1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0], bool)
    strata = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2])
    return durations, observed, in_a, strata


def test_stratified_logrank_p_is_survdiffs_and_o_minus_e_sums_the_strata():
    from statsmodels.duration.survfunc import survdiff

    durations, observed, in_a, strata = _stratified_runs()
    result = stratified_logrank_test(durations, observed, in_a, strata)
    statistic, p_value = survdiff(durations, observed.astype(int), in_a.astype(int), strata=strata)
    assert (result.statistic, result.p_value) == pytest.approx((statistic, p_value))
    parts = [logrank_test(durations[(strata == s) & in_a], observed[(strata == s) & in_a],
                          durations[(strata == s) & ~in_a], observed[(strata == s) & ~in_a]) for s in (0, 1, 2)]
    assert result.observed_minus_expected == pytest.approx(sum(p.observed_a - p.expected_a for p in parts))
    assert result.variance == pytest.approx(sum(p.variance for p in parts))
    # the stratified statistic is (sum O - E)^2 / sum V: the same number by hand
    assert result.statistic == pytest.approx(result.observed_minus_expected ** 2 / result.variance)
    assert result.observed_minus_expected > 0 and result.strata == 3  # A crosses first in every warm start
    slower = stratified_logrank_test(durations, observed, ~in_a, strata)  # the same runs, B as the group tested
    assert slower.observed_minus_expected == pytest.approx(-result.observed_minus_expected)
    assert slower.p_value == pytest.approx(result.p_value)


def test_stratified_logrank_leaves_out_a_stratum_with_one_group():
    durations, observed, in_a, strata = _stratified_runs()
    lone = np.array([5.0, 6.0])  # a fourth warm start with runs of group A only
    with_lone = stratified_logrank_test(np.concatenate([durations, lone]), np.concatenate([observed, [True, True]]),
                                        np.concatenate([in_a, [True, True]]), np.concatenate([strata, [3, 3]]))
    without = stratified_logrank_test(durations, observed, in_a, strata)
    assert with_lone.strata == 3
    assert (with_lone.p_value, with_lone.observed_minus_expected) == pytest.approx(
        (without.p_value, without.observed_minus_expected))


def test_stratification_keeps_a_warm_start_difference_out_of_the_comparison():
    # four of group A's five runs sit in the fast warm start, four of B's in the slow one; within each warm start
    # the groups interleave: pooled, A looks faster (p < 0.05); within warm starts it is not
    durations = np.array([10, 11, 13, 14, 12, 41, 40, 42, 43, 44], float)
    observed = np.ones(10, bool)
    in_a = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0, 0], bool)
    strata = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    pooled = logrank_test(durations[in_a], observed[in_a], durations[~in_a], observed[~in_a])
    stratified = stratified_logrank_test(durations, observed, in_a, strata)
    assert pooled.p_value < 0.05 < 0.5 < stratified.p_value


def test_stratified_logrank_without_a_comparable_crossing_is_nan():
    result = stratified_logrank_test([5, 5, 5, 5], [0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 1])
    assert np.isnan(result.p_value) and result.strata == 2
    # each warm start holds one group only: nothing is compared
    split = stratified_logrank_test([3, 4, 5, 6], [1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1])
    assert np.isnan(split.p_value) and split.strata == 0


@pytest.mark.parametrize("in_a, strata", [([1, 1, 1], [0, 0, 0]), ([1, 0], [0, 0, 0]), ([1, 0, 0], [0, 0])])
def test_stratified_logrank_rejects_bad_groups(in_a, strata):
    with pytest.raises(ValueError):
        stratified_logrank_test([1, 2, 3], [1, 1, 1], in_a, strata)
