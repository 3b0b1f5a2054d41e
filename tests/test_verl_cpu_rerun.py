"""The rerun comparison of `make verl-cpu-rerun` (benchmarks/verl_cpu_rerun.py) on constructed metrics."""

import numpy as np
import pandas as pd
import pytest

from benchmarks.verl_cpu_rerun import agreeing_steps, compare_runs


def _metrics(formats, lengths, first_verl_step=1):
    """A verl run's metrics as `dara.verl_backend.logs` writes them: row s from verl step s + 1."""
    steps = np.arange(len(formats))
    return pd.DataFrame({"step": steps, "reward/format": formats, "reward/correctness": [1.0] * len(formats),
                         "verl/response_length/mean": lengths, "verl/training/global_step": steps + first_verl_step})


def test_runs_agree_up_to_the_first_step_where_any_compared_column_differs():
    original = _metrics([0.2, 0.5, 0.8, 0.9], [30.0, 31.0, 32.0, 33.0])
    rerun = _metrics([0.2, 0.5, 0.8, 0.9], [30.0, 31.0, 32.5, 33.0])  # row 2's length differs
    columns = ["reward/format", "reward/correctness", "verl/response_length/mean"]
    assert agreeing_steps(original, rerun, columns) == 2  # rows 0 and 1
    assert agreeing_steps(original, original.copy(), columns) == 4
    assert agreeing_steps(original, rerun.iloc[:1], columns) == 1  # a step the rerun lacks is a difference
    assert agreeing_steps(_metrics([0.1], [3.0]), _metrics([0.2], [3.0]), columns) == 0
    assert agreeing_steps(_metrics([np.nan, 0.1], [3.0, 3.0]), _metrics([np.nan, 0.1], [3.0, 3.0]), columns) == 2


def test_the_comparison_gives_both_crossings_and_the_largest_gap():
    original = _metrics([0.2, 0.5, 0.8, 0.9], [30.0] * 4)
    rerun = _metrics([0.2, 0.6, 0.7, 0.85], [30.0] * 4)
    found = compare_runs(original, rerun, "format", 0.8)
    assert found["steps"] == 4 and found["agreeing_steps"] == 1
    assert found["crossing_original"] == 2 and found["crossing_rerun"] == 3
    assert found["largest_gap"] == pytest.approx(0.1)
    assert compare_runs(original, _metrics([0.2, 0.3, 0.4, 0.5], [30.0] * 4), "format", 0.8)["crossing_rerun"] is None


def test_an_original_numbered_as_verls_steps_is_refused_not_compared_one_step_off():
    old = _metrics([0.2, 0.5, 0.8, 0.9], [30.0] * 4).assign(step=lambda frame: frame["step"] + 1)
    with pytest.raises(ValueError, match="the original run's metrics: its rows are numbered as verl numbers"):
        compare_runs(old, _metrics([0.2, 0.5, 0.8, 0.9], [30.0] * 4), "format", 0.8)


def test_a_rerun_without_a_compared_column_is_refused_by_name():
    with pytest.raises(ValueError, match="verl/response_length/mean"):
        compare_runs(_metrics([0.2], [3.0]), _metrics([0.2], [3.0]).drop(columns="verl/response_length/mean"),
                     "format", 0.8)
