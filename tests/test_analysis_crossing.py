"""dara.analysis.crossing: which rows are training steps, censoring, and the study's one median of crossing steps
(Kaplan-Meier), on hand-made runs whose answers are worked out in the comments."""

import numpy as np
import pandas as pd
import pytest

from dara.analysis.crossing import (FIRST_TRAINING_STEP, crossing_summary, first_crossing, median_crossing_step,
                                    median_of_crossed, outcome_records, steps_never_after_last, step_text,
                                    summarise_crossings, survival_durations, training_steps)


def test_training_steps_leave_out_the_starting_policy():
    metrics = pd.DataFrame({"step": [0, 1, 2], "reward/format": [0.9, 0.1, 0.2]})
    assert FIRST_TRAINING_STEP == 1 and training_steps(metrics)["step"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="no 'step' column"):
        training_steps(metrics.drop(columns="step"))


def test_first_crossing_never_counts_row_zero():
    # row 0 is the warm start: a high reward there is not a crossing of any method
    assert first_crossing([0, 1, 2, 3], [0.9, 0.1, 0.85, 0.9], 0.8) == 2
    assert first_crossing([0, 1, 2], [0.9, 0.1, 0.2], 0.8) is None
    with pytest.raises(ValueError, match="no training step"):
        first_crossing([0], [0.9], 0.8)


def test_the_median_of_an_even_count_is_the_lower_middle_crossing():
    # every run 30 steps long: Kaplan-Meier falls to 1/2 at the second of four crossings (numpy would say 10.5)
    assert median_crossing_step([8, 9, 12, 20], [30] * 4) == 9
    assert median_crossing_step([9, 12, 8, 20], [30] * 4) == 9  # order does not matter
    # odd count: the middle one, as numpy's
    assert median_crossing_step([8, 9, 12], [30] * 3) == 9


def test_exactly_half_crossed_has_a_median_fewer_than_half_has_none():
    assert median_crossing_step([10, None, 30, None], [40] * 4) == 30
    assert median_crossing_step([10, None, None], [40] * 3) == np.inf
    assert median_crossing_step([None, None], [40, 40]) == np.inf
    assert median_crossing_step([], []) == np.inf


def test_a_run_censored_early_leaves_the_risk_set_instead_of_counting_as_latest():
    # runs: crossed at 5, stopped at 6 without crossing, crossed at 10 and 12. S: 3/4 after 5; the censored run
    # leaves at 6; 2 at risk at 10 -> S = 3/4 * 1/2 = 3/8: the median is 10 ("never counts as inf" would give 11)
    assert median_crossing_step([5, np.nan, 10, 12], [20, 6, 20, 20]) == 10


def test_quartiles_are_kaplan_meier_too():
    summary = summarise_crossings([20, 21, 22, 23, 24, 25, 26, 28, None, None], [30] * 10)
    # the first step by which 25 %, 50 %, 75 % of ten runs crossed: the 3rd, 5th and 8th crossing
    assert (summary.q25, summary.median, summary.q75) == (22, 24, 28)
    assert (summary.n_runs, summary.n_crossed, summary.first, summary.last) == (10, 8, 20, 28)


def test_without_last_steps_a_never_crossing_run_is_censored_after_every_crossing():
    # the pilots' old tables: runs of one length, no last step recorded
    assert median_crossing_step([10, None, 30, None]) == median_crossing_step([10, None, 30, None], [40] * 4) == 30
    assert median_crossing_step([None, None]) == np.inf


def test_inconsistent_runs_are_refused():
    with pytest.raises(ValueError, match="after its run's last step"):
        summarise_crossings([25], [20])
    with pytest.raises(ValueError, match="no last step"):
        summarise_crossings([None, 5], [np.nan, 20])
    with pytest.raises(ValueError, match="2 crossing steps but 1 last steps"):
        summarise_crossings([1, 2], [20])


def test_the_papers_statistic_drops_never_crossing_runs():
    assert median_of_crossed([8, 9, 12, 20, None]) == 10.5
    assert np.isnan(median_of_crossed([None, None]))


def test_censoring_and_the_bootstrap_numbers_of_never_crossing_runs():
    records = pd.DataFrame({"step": pd.array([12, None, 7], dtype="Float64"), "last_step": [30, 20, 30]})
    durations = survival_durations(records)
    assert durations["duration"].tolist() == [12, 20, 7] and durations["observed"].tolist() == [True, False, True]
    assert steps_never_after_last(records).tolist() == [12.0, 21.0, 7.0]


def test_runs_that_stop_at_their_crossing_become_records():
    toy = pd.DataFrame({"method": "gdpo", "G": 4, "seed": [0, 1], "step": [70, 300], "reached": [True, False]})
    records = outcome_records(toy)
    assert records["step"].tolist()[0] == 70 and pd.isna(records["step"].iloc[1])
    assert records["last_step"].tolist() == [70, 300]


def test_crossing_summary_shows_kaplan_meier_columns_and_every_step():
    records = pd.DataFrame({"method": ["a"] * 4, "G": 8, "step": pd.array([8, 9, None, 20], dtype="Float64"),
                            "last_step": 30})
    row = crossing_summary(records, by=("method", "G")).iloc[0]
    assert (row["km_median"], row["km_q25"], row["km_q75"]) == (9, 8, 20)
    assert row["steps"] == "8 9 never 20" and (row["min"], row["max"]) == (8, 20)


def test_step_text():
    assert step_text(24.0) == "24" and step_text(24.5) == "24.5"
    assert step_text(np.inf) == step_text(np.nan) == "never"
