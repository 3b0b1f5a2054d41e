"""Kaplan-Meier and log-rank against hand computations (the numbers in comments are worked by hand)."""

import numpy as np
import pytest
from scipy import stats

from dara.analysis.kaplan_meier import kaplan_meier, logrank_test


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
